"""The command's exit codes (docs/cli.md): 0 every artifact gave an ``ok`` bundle; 1 at least one
failed (or could not be read or downloaded, or the wait for the fleet ran out); 2 bad usage or
settings, nothing was run; 3 the fleet could not be reached; 130 interrupted."""

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
