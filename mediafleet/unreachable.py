"""What "the fleet cannot be reached" looks like as an exception: the broker or result backend is
not there (not a bad artifact). One place for the CLI's exit code 3 and the MCP server's
retryable ``engine_unavailable``."""

from __future__ import annotations

__all__ = ["unreachable_errors"]


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean the broker or backend cannot be reached (``except`` them)."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout

    return (ConnectionError, OperationalError, RedisConnectionError, RedisTimeout)
