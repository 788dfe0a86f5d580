"""The fleet's one way to Redis: the client every user of the job records, presence, status and gc
opens (:func:`redis_client`), plain (``redis://``, ``rediss://``) or through Redis Sentinel
(``sentinel://``), and what "the fleet cannot be reached" looks like as an exception.

With Sentinel, the broker URL names every sentinel, ``;``-separated
(``sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379``, the form kombu reads), and the settings'
``sentinel_master`` the master's name. The client asks the sentinels which node is master at each
new connection. A call that meets a demoted master (``-READONLY``, which redis-py's sentinel
connection turns into a lost connection), a master that stopped answering, or one that is gone is
sent again, on a new connection to whichever node the sentinels name then, for about ``retry_s``
seconds; a script the new master does not hold (``-NOSCRIPT``) is loaded again by redis-py's script
object. A failover is so a pause of the job, not its failure.

The dispatcher's public calls and its fleet jobs' run inside :func:`translated`, so whatever the
Redis client or kombu raise for a connection (or a Redis too full to write) comes out as
:class:`~mediafleet.contract.errors.FleetUnreachable` (retryable ``engine_unavailable``): the CLI
exits 3 on it, the MCP server answers it as is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
import time
from typing import TYPE_CHECKING, Any, NamedTuple, ParamSpec, TypeVar
from urllib.parse import unquote, urlsplit

from mediafleet.contract.errors import FleetUnreachable, Phase

if TYPE_CHECKING:
    from mediafleet.settings import Settings

__all__ = ["RETRY_S", "SentinelAddress", "eviction_warning", "is_sentinel", "redis_away_errors", "redis_client",
           "sentinel_address", "sentinel_url", "translated", "translating", "transport_options", "unreachable_errors",
           "with_master_password"]

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
# Behind Sentinel a master that stops answering (frozen, cut off) is left after this long and the
# sentinels asked again: a plain client's minute would stall every job that long.
_SENTINEL_SOCKET_S = 5


def redis_client(settings: Settings, *, retry_s: float = RETRY_S) -> Any:
    """The fleet's Redis client, the one way job records, presence, status and gc reach Redis.

    The result backend's URL with the settings' password, the TLS options for ``rediss://`` (a
    private CA, a client certificate), and retries with backoff for about ``retry_s`` seconds on a
    lost connection, so a Redis restart is a pause, not a failure; likewise on a Redis too full to
    write (at ``maxmemory``, ``noeviction``): what it refuses wrote nothing (it refuses a script at
    its first write, never halfway), so sending it again is safe. A ``sentinel://`` URL gives a
    client of the master the sentinels name (:func:`sentinel_client`).
    """
    import redis

    url = settings.backend()
    if is_sentinel(url):
        return sentinel_client(settings, str(url), retry_s=retry_s)
    if url is None or not url.startswith(("redis://", "rediss://")):
        raise ValueError("the fleet needs a redis://, rediss:// or sentinel:// result backend")
    tls = (settings.tls_options() or {}) if url.startswith("rediss://") else {}
    return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=60, **_retries(retry_s), **tls)


def _retries(retry_s: float) -> dict[str, Any]:
    """A client's options to ride out Redis being away for about ``retry_s`` seconds."""
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    retries = int(retry_s / 0.9) if retry_s > 0 else 0
    return {"retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), retries),
            "retry_on_error": [redis.ConnectionError, redis.TimeoutError, redis.exceptions.OutOfMemoryError]}


def is_sentinel(url: str | None) -> bool:
    """Whether ``url`` names sentinels (``sentinel://``) rather than one Redis."""
    return url is not None and url.startswith("sentinel://")


class SentinelAddress(NamedTuple):
    """What a ``sentinel://`` URL list names: the sentinels, the master's password and database."""

    sentinels: list[tuple[str, int]]
    password: str | None
    db: int


def sentinel_address(url: str) -> SentinelAddress:
    """The sentinels ``sentinel://[:PASSWORD@]HOST:PORT[/DB];sentinel://HOST:PORT;...`` names
    (kombu's form: a password or database in any entry is the master's).

    Raises:
        ValueError: an entry that is not ``sentinel://HOST[:PORT]``, or none at all.
    """
    sentinels: list[tuple[str, int]] = []
    password: str | None = None
    db = 0
    for entry in (e.strip() for e in url.split(";")):
        if not entry:
            continue
        parts = urlsplit(entry)
        if parts.scheme != "sentinel" or not parts.hostname:
            raise ValueError(f"not a sentinel address: {parts.scheme}://{parts.hostname or ''}")
        sentinels.append((parts.hostname, parts.port or 26379))
        if parts.password:
            password = unquote(parts.password)
        if parts.path.strip("/"):
            db = int(parts.path.strip("/"))
    if not sentinels:
        raise ValueError("a sentinel:// URL that names no sentinel")
    return SentinelAddress(sentinels, password, db)


def sentinel_url(url: str, password: str | None) -> str:
    """``url`` (``sentinel://`` entries) with the master's ``password`` in each entry that names
    none, percent-encoded (what kombu and Celery read the master's password from)."""
    if password is None:
        return url
    from urllib.parse import quote

    out = []
    for entry in (e.strip() for e in url.split(";") if e.strip()):
        scheme, rest = entry.split("://", 1)
        out.append(entry if "@" in rest.split("/", 1)[0] else f"{scheme}://:{quote(password, safe='')}@{rest}")
    return ";".join(out)


def transport_options(settings: Settings) -> dict[str, Any]:
    """What kombu's and Celery's Sentinel transport need beyond the URL: the master's name and the
    sentinels' own password and TLS options (none for a plain ``redis://`` broker)."""
    if not is_sentinel(settings.broker()) and not is_sentinel(settings.backend()):
        return {}
    if not settings.sentinel_master:
        raise ValueError("a sentinel:// broker needs MEDIAFLEET_SENTINEL_MASTER, the name the sentinels know the "
                         "master by")
    own: dict[str, Any] = {}
    if settings.sentinel_password is not None:
        own["password"] = settings.sentinel_password.get_secret_value()
    if (tls := settings.tls_options()) is not None:
        own.update(ssl=True, **tls)
    from mediafleet.fleet.replication import replica_acks

    # The last two are the fleet's own (kombu and Celery ignore them): what the consumer's take waits for.
    return {"master_name": settings.sentinel_master, "sentinel_kwargs": own,
            "mediafleet_replica_acks": replica_acks(settings), "mediafleet_replica_wait_ms": settings.replica_wait_ms}


def with_master_password(settings: Settings, url: str | None) -> str | None:
    """``url`` as kombu and Celery must be given it: a ``sentinel://`` one with ``redis_password``
    as the master's (``Settings.broker`` merges it into ``redis://`` URLs only); others as they are."""
    if url is None or not is_sentinel(url) or settings.redis_password is None:
        return url
    return sentinel_url(url, settings.redis_password.get_secret_value())


def sentinel_client(settings: Settings, url: str, *, retry_s: float = RETRY_S) -> Any:
    """A client of the master named ``settings.sentinel_master`` among the sentinels ``url`` names.

    The master's password is the URL's, else ``redis_password``; the sentinels' own is
    ``sentinel_password`` (unset: they ask for none). With ``redis_tls_ca_file`` set, the sentinels
    and the master are both reached over TLS with the settings' certificates. Each call (and each
    pipeline without a ``WATCH``) is sent again on a new connection for about ``retry_s`` seconds
    while the master is away, failing over or demoted: redis-py's own retries keep the connection's
    node, which a frozen master never answers on.

    Raises:
        ValueError: no master name is set, or the URL names no sentinel.
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    if not settings.sentinel_master:
        raise ValueError("a sentinel:// broker needs MEDIAFLEET_SENTINEL_MASTER, the name the sentinels know the "
                         "master by")
    address = sentinel_address(url)
    password = address.password or (settings.redis_password.get_secret_value() if settings.redis_password else None)
    tls: dict[str, Any] = {}
    if (options := settings.tls_options()) is not None:
        tls = {"ssl": True, **options}
    own = settings.sentinel_password.get_secret_value() if settings.sentinel_password else None
    sentinels = Sentinel(address.sentinels, sentinel_kwargs={"password": own, "socket_timeout": 2,
                                                             "socket_connect_timeout": 2, **tls})
    away = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.OutOfMemoryError)

    class _Pipeline(redis.client.Pipeline):  # type: ignore[misc]
        def execute(self, raise_on_error: bool = True) -> Any:
            if self.watching:
                return super().execute(raise_on_error)  # a WATCH cannot outlive its connection: the caller retries
            stack = list(self.command_stack)
            return _again(lambda: super(_Pipeline, self).execute(raise_on_error), away, retry_s,
                          before=lambda: setattr(self, "command_stack", list(stack)))

    class _Master(redis.Redis):  # type: ignore[misc]
        def execute_command(self, *args: Any, **options: Any) -> Any:
            return _again(lambda: super(_Master, self).execute_command(*args, **options), away, retry_s)

        def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
            return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)

    # No retries on the connection itself (they would keep its node): _again sends the call again.
    return sentinels.master_for(settings.sentinel_master, redis_class=_Master, db=address.db, password=password,
                                socket_connect_timeout=2, socket_timeout=_SENTINEL_SOCKET_S,
                                retry=Retry(NoBackoff(), 0), **tls)


def _again(call: Callable[[], R], away: tuple[type[BaseException], ...], retry_s: float,
           before: Callable[[], None] | None = None) -> R:
    """``call()``, made again with backoff while it raises one of ``away``, for about ``retry_s`` s."""
    deadline = time.monotonic() + retry_s
    delay = 0.05
    while True:
        if before is not None:
            before()
        try:
            return call()
        except away:
            if time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


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
