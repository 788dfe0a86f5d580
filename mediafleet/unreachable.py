"""What "the fleet cannot be reached" looks like as an exception: the broker or result backend is
not there (not a bad artifact). One place for the CLI's exit code 3 and the MCP server's
retryable ``engine_unavailable``."""

from __future__ import annotations

__all__ = ["redis_away_errors", "unreachable_errors"]


def redis_away_errors() -> tuple[type[BaseException], ...]:
    """What the Redis client and kombu raise while Redis is away (restarting, failing over)."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout

    return (OperationalError, RedisConnectionError, RedisTimeout)


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean the broker or backend cannot be reached (``except`` them):
    Redis away, or no socket to it at all."""
    return (ConnectionError, *redis_away_errors())
