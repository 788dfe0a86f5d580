"""The fleet's kombu transport: kombu's Redis transport with one kept client, waiting out a full
Redis, and counting a fleet delivery in the same step that records it."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual as kombu_virtual
from mediafleet.contract.jobs import ExtractRequest, JobState
from mediafleet.workers.runtime.names import EXTRACT_TASK, TAKEN_HEADER
from redis.exceptions import OutOfMemoryError as RedisFull
from redis.exceptions import RedisError

from mediafleet.fleet.deliveries import Started, delivery_taker
from mediafleet.settings import Settings

__all__ = ["MADE", "SENTINEL_TRANSPORT", "TRANSPORT", "FleetSentinelTransport", "FleetTransport", "NotKept",
           "count_taken_by", "taken"]

log = logging.getLogger("mediafleet.worker")


# Set while :func:`extract_message` makes a message: the fleet's channel keeps it here instead of pushing it.
MADE: ContextVar[list[tuple[str, str]] | None] = ContextVar("mediafleet_made", default=None)


class NotKept(Exception):
    """A message being made for :func:`extract_message` needs more than one push (a queue with an
    expiry): nothing was pushed, and it is sent the ordinary way."""


_FULL_WARN_EVERY_S = 30.0


def _until_written(write: Callable[[], Any], what: str) -> Any:
    """``write()``, sent again while Redis is too full to take it (at ``maxmemory`` with the
    ``noeviction`` policy it refuses every write, and what it refused wrote nothing).

    Meanwhile the worker's consumer waits and takes no more messages: a delivery it cannot record,
    acknowledge or requeue is neither dropped (kombu would lose it) nor let through to kill the
    worker (Celery takes any other error here as unrecoverable); it goes on when memory is freed.
    """
    delay, warned = 0.05, 0.0
    while True:
        try:
            return write()
        except RedisFull:
            if time.monotonic() - warned >= _FULL_WARN_EVERY_S:
                log.warning("Redis is full (maxmemory) and refuses writes: waiting to %s", what)
                warned = time.monotonic()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


# kombu's record of a delivery (what its QoS.append writes: the tag in the unacked index, the message
# in the unacked hash) as a script Redis runs even when it is full (the allow-oom flag, Redis 7+).
# KEYS[1] the unacked index, KEYS[2] the unacked hash; ARGV[1] now, ARGV[2] the delivery tag,
# ARGV[3] the message as kombu keeps it.
_KEEP_DELIVERY = """#!lua flags=allow-oom
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""


class _Taking:
    """What a worker's consumer needs to count fleet deliveries as it takes them: its worker's name."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname

    @staticmethod
    def job_of(message: Any) -> tuple[str, str] | None:
        """(job id, token) of a fleet task's plain JSON message whose request this worker can read,
        else None: another task, a signed or otherwise encoded message, a body that does not name
        the same job, or a request this release cannot read (a field of a later release's), which
        the pool process fails before counting it, so that its waiter sees a job no delivery
        started (3 us a message to check)."""
        headers = message.headers
        if headers.get("task") != EXTRACT_TASK or message.content_type != "application/json":
            return None
        try:
            args, kwargs, _ = json.loads(message.body)
            job_id, token = headers["id"], kwargs["token"]
            request = ExtractRequest.model_validate(args[0])
        except (ValueError, TypeError, KeyError, IndexError):  # pydantic's ValidationError is a ValueError
            return None
        if not (isinstance(token, str) and token and request.job_id == job_id):
            return None
        return job_id, token


_TAKING: _Taking | None = None  # set in a worker's main process by its consumer (FleetConsumer)


def count_taken_by(hostname: str | None) -> None:
    """Count fleet deliveries as this process's consumer takes them, under ``hostname`` (None: do not)."""
    global _TAKING
    _TAKING = _Taking(hostname) if hostname else None


def taken(request: Any, settings: Settings) -> Started | None:
    """The count a fleet task's consumer made of this delivery as it took the message (its
    :data:`TAKEN_HEADER`, on the task's request), or None: the pool process counts it itself
    (:class:`~mediafleet.workers.runtime.middleware.counting.DeliveryCounting`). Never read where messages are
    signed (a header is outside what the signature covers)."""
    value = getattr(request, TAKEN_HEADER, None)
    if settings.signing_key_file is not None or not isinstance(value, list) or len(value) != 3:
        return None
    attempts, before, parts = value
    try:
        state = JobState(before) if before else None
    except ValueError:
        return None
    if not isinstance(attempts, int) or not isinstance(parts, dict) \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in parts.items()):
        return None
    return attempts, state, parts


def _kept_form(message: Any) -> str:
    """A delivery as kombu's Redis QoS keeps it in its unacknowledged record (and restores it from)."""
    delivery = message.delivery_info
    return str(kombu_redis.dumps([message._raw, delivery["exchange"], delivery["routing_key"]]))


class _FleetQoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's Redis acknowledgement emulation, waiting out a full Redis (:func:`_until_written`)
    where kombu's raises into the worker's consumer and stops the worker, and counting a fleet
    delivery in the same step that records it (:meth:`append`)."""

    def append(self, message: Any, delivery_tag: str) -> None:
        """Records a delivery the consumer has just taken off its queue.

        A fleet task's delivery (a plain JSON message, in a worker whose consumer counts them) is
        counted in its job's record by the same step (:func:`mediafleet.fleet.deliveries.delivery_taker`),
        and the count handed to the pool process in the message's :data:`TAKEN_HEADER`: the
        record's start costs no round trip of its own before the job runs (0.3-0.5 ms of a
        one-page job's round trip on 2 cores). The header is added after the delivery is recorded,
        so a message that comes back (after the visibility timeout, or requeued) comes without it
        and is counted again.

        When Redis is full the message is then in no queue and in no record, only in this process:
        it is first kept in kombu's unacknowledged record by a script Redis runs even when full (a
        few KiB per worker over the limit), so that a worker killed while it waits loses nothing
        (the message comes back after the visibility timeout, as any unacknowledged one), and then
        written the ordinary way once Redis takes writes, the consumer taking no more messages
        meanwhile; the pool process counts that delivery itself."""
        message.headers.pop(TAKEN_HEADER, None)
        write = lambda: super(_FleetQoS, self).append(message, delivery_tag)  # noqa: E731
        try:
            if not self._take(message, delivery_tag):
                write()
            return
        except RedisFull:
            self._keep(message, delivery_tag)
        _until_written(write, "record a delivery")

    def _take(self, message: Any, delivery_tag: str) -> bool:
        """Record and count a fleet delivery in one step; False when it is not one to count here."""
        taking = _TAKING
        if taking is None or getattr(self.channel, "global_keyprefix", "") or (job := taking.job_of(message)) is None:
            return False  # kombu prefixes a command's keys, not a script's
        job_id, token = job
        count = self.channel.taker()(job_id, taking.hostname, token, (self.unacked_index_key, self.unacked_key),
                                     delivery_tag, _kept_form(message))
        message.headers[TAKEN_HEADER] = [count[0], count[1].value if count[1] else "", count[2]]
        kombu_virtual.QoS.append(self, message, delivery_tag)  # what kombu's append does after its write
        return True

    def _keep(self, message: Any, delivery_tag: str) -> None:
        if getattr(self.channel, "global_keyprefix", ""):
            return  # kombu prefixes a command's keys, not a script's
        kept = _kept_form(message)
        try:
            with self.channel.conn_or_acquire() as client:
                client.eval(_KEEP_DELIVERY, 2, self.unacked_index_key, self.unacked_key, time.time(), delivery_tag,
                            kept)
        except RedisError:  # a Redis before 7 (no script flags), or one that refuses scripts: only wait
            log.warning("Redis is full and would not keep a delivery this worker took by script; were the "
                        "worker killed while it waits for room, that job would stay queued")

    def ack(self, delivery_tag: str) -> None:
        _until_written(lambda: super(_FleetQoS, self).ack(delivery_tag), "acknowledge a delivery")

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        _until_written(lambda: super(_FleetQoS, self).reject(delivery_tag, requeue=requeue), "requeue a delivery")

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().restore_visible(*args, **kwargs)
        except RedisFull:  # a periodic sweep: the next one restores what this one could not
            return


class _FleetChannel(kombu_redis.Channel):  # type: ignore[misc]
    """kombu's Redis channel, keeping one client for the commands it sends outside its consumer
    (publishing a message; recording, acknowledging a delivery): kombu builds a new ``redis.Redis``
    for each (~0.16 ms of set-up apiece, three per job). The client is rebuilt when the channel's
    connection pool is (a reconnect).

    While :func:`extract_message` makes a message, its final push is kept (the list kombu names
    for the message's priority, the payload as kombu writes it) instead of sent."""

    QoS = _FleetQoS
    _kept: Any = None
    _taker: tuple[Any, Callable[..., Any]] | None = None

    def taker(self) -> Callable[..., Any]:
        """:func:`mediafleet.fleet.deliveries.delivery_taker` on this channel's client, made once per client."""
        with self.conn_or_acquire() as client:
            if self._taker is None or self._taker[0] is not client:
                options = self.connection.client.transport_options  # behind Sentinel: replicas to wait for
                self._taker = (client, delivery_taker(client, options.get("mediafleet_replica_acks", 0),
                                                      options.get("mediafleet_replica_wait_ms", 1000)))
            return self._taker[1]

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        made = MADE.get()
        if made is None:
            super()._put(queue, message, **kwargs)
            return
        if kwargs.get("_publish_batch") is not None or (self._expires and queue in self._expires):
            raise NotKept(queue)
        key = self._q_for_pri(queue, self._get_message_priority(message, reverse=False))
        made.append((key, kombu_redis.dumps(message)))

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        if self._kept is None or self._kept.connection_pool is not self.pool:
            self._kept = self._create_client()
        yield self._kept


class FleetTransport(kombu_redis.Transport):  # type: ignore[misc]
    """kombu's Redis transport with :class:`_FleetChannel` (for ``redis://``, and ``rediss://`` with
    the fleet's TLS options; kombu's own for ``rediss://`` without them, which it reads from the scheme)."""

    Channel = _FleetChannel

TRANSPORT = f"{__name__}:FleetTransport"


class _FleetSentinelChannel(_FleetChannel, kombu_redis.SentinelChannel):  # type: ignore[misc]
    """:class:`_FleetChannel` on the master the sentinels name (kombu's Sentinel channel makes its
    connection pool: each new connection asks the sentinels, a demoted master's is dropped)."""


class FleetSentinelTransport(kombu_redis.SentinelTransport):  # type: ignore[misc]
    """:class:`FleetTransport` for a ``sentinel://`` broker (``master_name`` in its transport options)."""

    Channel = _FleetSentinelChannel


SENTINEL_TRANSPORT = f"{__name__}:FleetSentinelTransport"
