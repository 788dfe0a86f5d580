"""The fleet's one way to Redis: the client every user of the job records, presence, status and gc
opens (:func:`redis_client`), and what "the fleet cannot be reached" looks like as an exception.

The dispatcher's public calls and its fleet jobs' run inside :func:`translated`, so whatever the
Redis client or kombu raise for a connection (or a Redis too full to write) comes out as
:class:`~mediafleet.contract.errors.FleetUnreachable` (retryable ``engine_unavailable``): the CLI
exits 3 on it, the MCP server answers it as is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from mediafleet.contract.errors import FleetUnreachable, Phase

if TYPE_CHECKING:
    from mediafleet.settings import Settings

__all__ = ["RETRY_S", "eviction_warning", "redis_away_errors", "redis_client", "translated", "translating",
           "unreachable_errors"]

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
# A client rides out Redis being away (a restart, a failover) for about this long before it raises.
RETRY_S = 25


def redis_client(settings: Settings, *, retry_s: float = RETRY_S) -> Any:
    """The fleet's Redis client, the one way job records, presence and gc reach Redis.

    The result backend's URL with the settings' password, the TLS options for ``rediss://`` (a
    private CA, a client certificate), and retries with backoff for about ``retry_s`` seconds on a
    lost connection, so a Redis restart is a pause, not a failure; likewise on a Redis too full to
    write (at ``maxmemory``, ``noeviction``): what it refuses wrote nothing (it refuses a script at
    its first write, never halfway), so sending it again is safe.
    """
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    url = settings.backend()
    if url is None or not url.startswith(("redis://", "rediss://")):
        raise ValueError("the fleet needs a redis:// or rediss:// result backend")
    tls = (settings.tls_options() or {}) if url.startswith("rediss://") else {}
    retries = int(retry_s / 0.9) if retry_s > 0 else 0
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=60,
                                retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries),
                                retry_on_error=[redis.ConnectionError, redis.TimeoutError,
                                                redis.exceptions.OutOfMemoryError], **tls)


def eviction_warning(client: Any) -> str | None:
    """What an operator must be told when this Redis may evict the fleet's keys; None when it may not.

    A queue's messages and a job's record must never be evicted: a job whose message or record
    Redis drops to make room is lost without a trace (the queue lists have no TTL, so a ``volatile-*``
    policy evicts the records, which have one). Only ``noeviction`` keeps them: Redis then refuses
    writes when full, which the fleet waits out. Read from ``INFO memory``, which managed services
    that rename ``CONFIG`` still answer; None too where the server does not say or refuses to
    (an ACL without ``INFO``). A Redis that cannot be reached raises as any other call does.
    """
    from redis.exceptions import ResponseError

    try:
        policy = client.info("memory").get("maxmemory_policy")
    except ResponseError:
        return None
    if policy is None or policy == "noeviction":
        return None
    return (f"Redis may evict the fleet's keys (maxmemory-policy {policy}): queued jobs and job records can be "
            "lost without a trace once it reaches its memory limit; set maxmemory-policy noeviction")
