"""``mediafleet``: extract evidence, run a worker, show the manifest and the JSON Schemas.

Exit codes are in :mod:`mediafleet.cli.exits`. Errors go to stderr, one line each; ``--json`` output
to stdout only.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from mediafleet.cli import commands, extract
from mediafleet.cli.exits import EXIT_OK, EXIT_USAGE
from mediafleet.cli.lines import first_line
from mediafleet.cli.parser import build_parser

__all__ = ["main"]


def _broker_problem(url: str, where: str) -> str | None:
    """Why ``url`` cannot be the fleet's broker (the fleet speaks Redis only), or None."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss", "sentinel") and parts.hostname:
        return None
    shown = f" {url!r}" if "@" not in url and len(url) < 80 else ""  # never echo a password
    if parts.scheme in ("redis", "rediss", "sentinel"):
        return f"{where}{shown} names no host (e.g. redis://localhost:6379/0)"
    return (f"{where}{shown} is not a redis://, rediss:// or sentinel:// URL (e.g. redis://localhost:6379/0, or "
            "sentinel://host:26379;sentinel://host2:26379 with MEDIAFLEET_SENTINEL_MASTER)")


def _settings_problem(exc: BaseException) -> str:
    """One line for bad settings: the variable and what is wrong, never pydantic's class names."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error.get("loc") else ""
        name = f"MEDIAFLEET_{field.upper()}: " if field and field != "__root__" else ""
        return f"{name}{error['msg'].removeprefix('Value error, ')}"
    return first_line(exc)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prog = f"mediafleet {args.command}"
    if getattr(args, "broker", None) and (problem := _broker_problem(args.broker, "--broker")):
        print(f"{prog}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from pydantic import ValidationError

    try:
        from mediafleet.settings import Settings

        overrides: dict[str, Any] = {}
        if getattr(args, "broker", None):
            overrides["broker_url"] = args.broker
        if getattr(args, "device", None) == "auto":
            from mediafleet.workers.gpu import visible_gpus

            gpus = visible_gpus()
            overrides["device"] = "gpu" if gpus else "cpu"
            print(f"mediafleet worker: {gpus} CUDA device(s) visible: serving {overrides['device']}", file=sys.stderr)
        elif getattr(args, "device", None):
            overrides["device"] = args.device
        settings = Settings.load(**overrides)
        manifest = settings.manifest()
    except (ValidationError, ValueError, OSError) as exc:
        print(f"mediafleet: bad settings or manifest: {_settings_problem(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if settings.broker_url and (problem := _broker_problem(settings.broker_url, "MEDIAFLEET_BROKER_URL")):
        print(f"{prog}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "manifest":
        print(manifest.model_dump_json(indent=2))
        return EXIT_OK
    if args.command == "schema":
        print(json.dumps(_schemas(), indent=2))
        return EXIT_OK
    if args.command == "worker":
        return commands.worker_command(args, settings, manifest)
    if args.command in ("status", "cancel"):
        return commands.fleet_command(args, settings, manifest)
    if args.command == "serve-mcp":
        return commands.serve_mcp_command(args, settings, manifest)
    if args.command == "gc":
        return commands.gc_command(args, settings, manifest)
    if args.command == "report":
        return commands.report_command(args, settings)
    from mediafleet.discovery import cli as discovery_cli

    if args.command in discovery_cli.COMMANDS:
        return discovery_cli.run(args, settings)
    return extract.run(args, settings, manifest)


def _schemas() -> dict[str, Any]:
    from pydantic import TypeAdapter

    from mediafleet.contract import EvidenceBundle, EvidenceLocus, ExtractRequest, Manifest, Outcome, PublicError
    from mediafleet.contract.addresses import EvidenceAddress

    return {
        "EvidenceAddress": TypeAdapter(EvidenceAddress).json_schema(),
        "EvidenceLocus": EvidenceLocus.model_json_schema(),
        "Manifest": Manifest.model_json_schema(),
        "ExtractRequest": ExtractRequest.model_json_schema(),
        "Outcome": Outcome.model_json_schema(),
        "PublicError": PublicError.model_json_schema(),
        "EvidenceBundle": EvidenceBundle.model_json_schema(),
    }



if __name__ == "__main__":
    sys.exit(main())
