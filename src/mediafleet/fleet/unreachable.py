"""What "the fleet cannot be reached" looks like as an exception: the broker or result backend is
not there (not a bad artifact), and its one translation into the public error tree.

The dispatcher's public calls and its fleet jobs' run inside :func:`translated`, so whatever the
Redis client or kombu raise for a connection (or a Redis too full to write) comes out as
:class:`~mediafleet.contract.errors.FleetUnreachable` (retryable ``engine_unavailable``): the CLI
exits 3 on it, the MCP server answers it as is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from mediafleet.contract.errors import FleetUnreachable, Phase

__all__ = ["redis_away_errors", "translated", "translating", "unreachable_errors"]

P = ParamSpec("P")
R = TypeVar("R")
_MESSAGE = "the fleet's broker cannot be reached; try again when it is back"
_FULL = "the fleet's broker is full (Redis at its memory limit refuses writes); try again when it has room"


def redis_away_errors() -> tuple[type[BaseException], ...]:
    """What the Redis client and kombu raise while Redis is away (restarting, failing over) or
    full (at its ``maxmemory`` with the ``noeviction`` policy it needs, it refuses every write
    until memory is freed): a pause of the fleet, never an answer about a job."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import OutOfMemoryError
    from redis.exceptions import TimeoutError as RedisTimeout

    return (OperationalError, RedisConnectionError, RedisTimeout, OutOfMemoryError)


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean the broker or backend cannot be reached (``except`` them):
    Redis away, or no socket to it at all."""
    return (ConnectionError, *redis_away_errors())


@contextmanager
def translated() -> Iterator[None]:
    """Run fleet calls; the broker or backend being unreachable comes out as :class:`FleetUnreachable`."""
    from redis.exceptions import OutOfMemoryError

    try:
        yield
    except unreachable_errors() as exc:
        message = _FULL if isinstance(exc, OutOfMemoryError) else _MESSAGE
        raise FleetUnreachable(message, phase=Phase.DISPATCH) from exc


def translating(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run inside :func:`translated`."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with translated():
            return fn(*args, **kwargs)

    return call
