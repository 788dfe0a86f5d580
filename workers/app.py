"""The Celery app, configured for media work, and its one thin task shell.

JSON only (never pickle); late acks with redelivery when a worker dies mid-task; prefetch 1 so a
long job never hides a queued one behind it; task events only with ``task_events`` on (or once a
running Flower turns them on: they cost Redis publishes per job); results kept for the configured
pickup window; a broker visibility timeout derived from the longest hard
time limit in the manifest, so a long job is never handed to a second worker while it still runs.

The task validates the request and runs :func:`mediafleet.workers.runner.run_request` through the
fleet's middleware (:mod:`mediafleet.workers.middleware`: delivery counting, cancellation,
progress, reporting); a worker's lifecycle (engines, presence, held and lost jobs) is attached by
:func:`mediafleet.workers.boot.boot_worker`, so building an app connects no signal receiver.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from celery import Celery, Task, signals, states
from celery.backends.redis import RedisBackend
from celery.exceptions import BackendStoreError, Ignore
from celery.worker.consumer import Consumer
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual as kombu_virtual
from kombu.utils import json as kombu_json
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError as RedisFull
from redis.exceptions import RedisError

from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome
from mediafleet.contract.manifest import Capability, Manifest
from mediafleet.blobs.local import BlobStore, open_store
from mediafleet.fleet.store import JobStore, Started, delivery_taker, task_result_writer
from mediafleet.settings import Settings
from mediafleet.workers.boot import stop_worker
from mediafleet.fleet.reports import join_parts, report
from mediafleet.workers.middleware import Delivery, Skip, fleet_middleware, run_chain
from mediafleet.workers.runner import run_request

__all__ = ["EXTRACT_TASK", "FleetConsumer", "create_app", "extract_message", "job_store", "join_parts",
           "redis_priority", "refused", "report", "send_extract", "visibility_timeout_s"]

log = logging.getLogger("mediafleet.worker")

EXTRACT_TASK = "mediafleet.extract"
IN_RECORD = "in_record"
"""The task summary's key saying the job's record holds its outcome and its waiters were woken."""
PUBLISHED = "progress_published"
"""The task summary's key saying the task published progress (stored as its result meanwhile)."""


def visibility_timeout_s(manifest: Manifest) -> int:
    """Longest hard time limit plus a margin: a running job is never redelivered while it runs."""
    return int(manifest.max_hard_time_limit_s() * 1.25) + 60


def redis_priority(priority: int) -> int:
    """The fleet's 0 (lowest) .. 9 (highest) as the Redis transport's 0 (first) .. 9 (last)."""
    return 9 - priority


def send_extract(app: Celery, request: ExtractRequest, capability: Capability, token: str, priority: int) -> None:
    """Put one job on its capability's queue for ``request.device``, with the capability's limits.

    The message's shown arguments (task events, Flower) name the job and its action: Celery would
    otherwise render the whole request with its safe repr for every message (~0.2 ms each).
    """
    app.send_task(
        EXTRACT_TASK,
        args=[request.model_dump(mode="json")],
        kwargs={"token": token},
        argsrepr=_shown_args(request),
        kwargsrepr="{'token': '...'}",
        task_id=request.job_id,
        queue=capability.queue(request.device),
        soft_time_limit=capability.time_limits.soft_s,
        time_limit=capability.time_limits.hard_s,
        priority=redis_priority(priority),
    )


def _shown_args(request: ExtractRequest) -> str:
    return repr([{"job_id": request.job_id, "action": request.action}])


def extract_message(app: Celery, request: ExtractRequest, capability: Capability, token: str,
                    priority: int) -> tuple[str, str] | None:
    """The message :func:`send_extract` would put on the queue, made by the same call (Celery's
    ``send_task``: its headers, limits and priority, signed with signing on) but not pushed:
    (the Redis list kombu would push it on, the payload), for the job store's claim to push in the
    same step as it writes the record (:meth:`mediafleet.fleet.store.JobStore.claim_routed`).

    Later messages to the same queue, with the same limits and priority, from the same thread, are
    made from the first one's form (:class:`_MessageForm`: its job's fields, the body and a new
    delivery tag put in) at about a sixth of the cost (~0.3 ms a message through ``send_task``),
    once the second message ``send_task`` made is byte for byte what the form makes of it; a form
    that does not reproduce it (signed messages, another Celery) is never used. Inside a task
    (where Celery names the running task as the message's parent) the message is always made by
    ``send_task``.

    None where the message must be sent the ordinary way: the broker is not on the fleet's
    transport, the app sends task-sent events, or a publish signal has receivers (each of those
    goes out once per message made, and a candidate's message may never be pushed).
    """
    if app.conf.broker_transport != _TRANSPORT or app.conf.task_send_sent_event or any(
            signal.receivers for signal in (signals.before_task_publish, signals.after_task_publish, signals.task_sent)):
        return None
    in_task = app.current_worker_task is not None
    forms: dict[tuple[Any, ...], _MessageForm | None] = app.__dict__.setdefault("mediafleet_message_forms", {})
    queue = capability.queue(request.device)
    limits = capability.time_limits
    key = (os.getpid(), threading.get_ident(), queue, limits.soft_s, limits.hard_s, priority,
           app.conf.task_serializer, app.conf.task_protocol)
    form = None if in_task else forms.get(key, _UNSEEN)
    if isinstance(form, _MessageForm) and form.checked:
        return form.make(request, token, str(uuid.uuid4()))
    made = _made_by_celery(app, request, capability, token, priority)
    if made is None or in_task:
        return made
    if form is _UNSEEN:
        forms[key] = _MessageForm.of(*made)
    elif isinstance(form, _MessageForm):
        tag = json.loads(made[1])["properties"]["delivery_tag"]
        if form.make(request, token, tag) == made:
            form.checked = True
        else:
            forms[key] = None  # something else varies: this key's messages always go through send_task
    return made


def _made_by_celery(app: Celery, request: ExtractRequest, capability: Capability, token: str,
                    priority: int) -> tuple[str, str] | None:
    made: list[tuple[str, str]] = []
    kept = _MADE.set(made)
    try:
        send_extract(app, request, capability, token, priority)
    except _NotKept:
        return None
    finally:
        _MADE.reset(kept)
    if len(made) != 1:
        raise RuntimeError(f"send_task put {len(made)} messages, not one")
    return made[0]


_UNSEEN: Any = object()


class _MessageForm:
    """A message ``send_task`` made, as the form of later ones: the same headers and properties
    but for the job's own fields (its id, as the message's id, root and correlation id; its shown
    arguments; a new delivery tag) and the body (the request and token, with the form's embedded
    callbacks), serialised as kombu serialises them (its JSON, then base64)."""

    def __init__(self, key: str, message: dict[str, Any], embed: Any) -> None:
        self.key, self.message, self.embed = key, message, embed
        self.checked = False

    @classmethod
    def of(cls, key: str, payload: str) -> _MessageForm | None:
        try:
            message = json.loads(payload)
            _, _, embed = json.loads(base64.b64decode(message["body"]))
            if message["properties"].get("body_encoding") != "base64" or message.get("content-type") != "application/json":
                return None
        except (ValueError, KeyError, TypeError):
            return None
        return cls(key, message, embed)

    def make(self, request: ExtractRequest, token: str, tag: str) -> tuple[str, str]:
        shown = _shown_args(request)
        headers = {**self.message["headers"], "id": request.job_id, "root_id": request.job_id, "argsrepr": shown}
        properties = {**self.message["properties"], "correlation_id": request.job_id, "delivery_tag": tag}
        if "argsrepr" in properties:
            properties["argsrepr"] = shown
        body = kombu_json.dumps([[request.model_dump(mode="json")], {"token": token}, self.embed])
        message = {**self.message, "body": base64.b64encode(body.encode("utf-8")).decode("ascii"),
                   "headers": headers, "properties": properties}
        return self.key, kombu_redis.dumps(message)


_REFUSED = PublicError(
    code=ErrorCode.INVALID_REQUEST, retryable=True,
    message="a worker refused the job's message (unsigned, or signed with a key it does not trust); "
            "submit it again from a dispatcher that has the fleet's signing key",
)


def refused(jobs: JobStore, job_id: str) -> bool:
    """Record that a worker refused the message of a job no delivery has started: failed, retryable,
    so the job is not left ``queued`` for its record's lifetime and a resubmission runs it."""
    record = jobs.get(job_id)
    if record is None or record.state != JobState.QUEUED:
        return False
    return jobs.finish(Outcome.failed(record.request, _REFUSED, datetime.now(UTC)), seen_attempts=record.attempts)


class FleetConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, which also records each message it refuses (bad content type, failed
    signature) in the job's record, through the app's ``mediafleet_on_refused``, and, where the
    app's ``mediafleet_counts_taken`` says so, counts each fleet delivery as it takes the message
    (:class:`_FleetQoS`), under this worker's name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        global _TAKING
        _TAKING = _Taking(self.hostname) if getattr(self.app, "mediafleet_counts_taken", False) else None

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        super().on_decode_error(message, exc)
        self._record_refusal(message)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        super().on_invalid_task(body, message, exc)
        self._record_refusal(message)

    def _record_refusal(self, message: Any) -> None:
        hook = getattr(self.app, "mediafleet_on_refused", None)
        job_id = (message.headers or {}).get("id") if hasattr(message, "headers") else None
        if hook is None or not isinstance(job_id, str):
            return
        try:
            hook(job_id)
        except Exception:  # noqa: BLE001 - never let bookkeeping stop the consumer
            return


class FleetRedisBackend(RedisBackend):  # type: ignore[misc]
    """Celery's Redis result backend, less the result subscription ``send_task`` opens for each
    task it sends (and drops again when the result object is collected): a subscribe and an
    unsubscribe per job on the dispatcher. Nobody here waits through ``AsyncResult.get``: a job's
    waiter wakes on its own subscription (:class:`mediafleet.fleet.store.Watch`), which follows the
    task's result channel too. ``AsyncResult.get`` still works (it subscribes when it waits)."""

    def on_task_call(self, producer: Any, task_id: str) -> None:
        return None

    def exception_safe_to_retry(self, exc: Exception) -> bool:
        """A result write Redis refused because it is full is retried like one to a lost
        connection (``result_backend_always_retry``): it wrote nothing."""
        return isinstance(exc, RedisFull) or bool(super().exception_safe_to_retry(exc))

    def _store_result(self, task_id: str, result: Any, state: str, traceback: Any = None, request: Any = None,
                      **kwargs: Any) -> Any:
        """Stores a fleet task's result only while its delivery is of the job's current submission.

        A task's id is its job's, so a stale delivery (a worker that ran an earlier submission,
        frozen or cut off from Redis meanwhile; a hard time limit Celery enforces late) would
        otherwise store its failure over the task of a later submission of the same job, whose
        waiters would read it as theirs and fail without the job having run (found with Redis away
        for 40 s under running jobs). The check and the write are one step in Redis
        (:func:`mediafleet.fleet.store.task_result_writer`). Tasks without a token write as Celery does.
        """
        kwargs_of_task = getattr(request, "kwargs", None)
        token = kwargs_of_task.get("token") if isinstance(kwargs_of_task, dict) else None
        if not isinstance(token, str) or not token:
            return super()._store_result(task_id, result, state, traceback, request=request, **kwargs)
        meta = self._get_result_meta(result=result, state=state, traceback=traceback, request=request)
        meta["task_id"] = task_id
        value = self.encode(meta)
        if len(value) > self._MAX_STR_VALUE_SIZE:
            raise BackendStoreError("value too large for Redis backend")
        expires = self.failure_expires if state == states.FAILURE else self.expires
        self.ensure(self._write_task_result, (task_id, self.get_key_for_task(task_id), value, expires, token))
        return result

    @cached_property
    def _write_task_result(self) -> Callable[[str, str, str, int | None, str], bool]:
        return task_result_writer(self.client)

    def mark_as_done(self, task_id: str, result: Any, request: Any = None, store_result: bool = True,
                     state: str = states.SUCCESS) -> None:
        """Stores a task's summary, but for a plain job whose delivery wrote its outcome into the
        record and woke its waiters (``IN_RECORD``): every waiter reads the record, and a task
        result is only read for a job whose record has no outcome (a lost worker's), or for a job's
        parts (whether every task of the job ended). Storing it anyway cost a write and a publish
        per job, in the moment the caller reads its bundle. A progress state the task stored while
        it ran is removed (it would say ``PROGRESS`` of a finished task until it expired)."""
        if isinstance(result, dict) and result.get(IN_RECORD) is True:
            store_result = False
            if result.get(PUBLISHED):
                self.forget(task_id)
        super().mark_as_done(task_id, result, request=request, store_result=store_result, state=state)


def _publish_progress(task: Task, meta: dict[str, Any]) -> None:
    """A progress point as the task's ``PROGRESS`` state. Celery raises ``BackendStoreError`` once
    its retries of the write are spent (Redis away ~10 s or more): that is Redis away, raised here as
    Redis's own error, which the middleware's progress reporting rides out as best effort (found
    with Redis away for 40 s under a running job, whose next progress point failed it as
    ``internal_error``: an answer that would have stuck, had Redis come back before its outcome
    was written)."""
    try:
        task.update_state(state="PROGRESS", meta=meta)
    except BackendStoreError as exc:
        raise RedisConnectionError("the task's progress state could not be stored") from exc


_BACKENDS = {scheme: f"{__name__}:FleetRedisBackend" for scheme in ("redis", "rediss")}


# Set while :func:`extract_message` makes a message: the fleet's channel keeps it here instead of pushing it.
_MADE: ContextVar[list[tuple[str, str]] | None] = ContextVar("mediafleet_made", default=None)


class _NotKept(Exception):
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


# The header a fleet task's message gets from the consumer that counted its delivery as it took it
# (:class:`_FleetQoS`): [the delivery's number, the record's state before it, the parts (name -> job
# id)], what :meth:`mediafleet.fleet.store.JobStore.start` gives. Only that consumer sets it: any other
# value is removed before the message goes further.
TAKEN_HEADER = "mediafleet_taken"


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


def taken(request: Any, settings: Settings) -> Started | None:
    """The count a fleet task's consumer made of this delivery as it took the message (its
    :data:`TAKEN_HEADER`, on the task's request), or None: the pool process counts it itself
    (:class:`~mediafleet.workers.middleware.DeliveryCounting`). Never read where messages are
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
        counted in its job's record by the same step (:func:`mediafleet.fleet.store.delivery_taker`),
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
        """:func:`mediafleet.fleet.store.delivery_taker` on this channel's client, made once per client."""
        with self.conn_or_acquire() as client:
            if self._taker is None or self._taker[0] is not client:
                self._taker = (client, delivery_taker(client))
            return self._taker[1]

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        made = _MADE.get()
        if made is None:
            super()._put(queue, message, **kwargs)
            return
        if kwargs.get("_publish_batch") is not None or (self._expires and queue in self._expires):
            raise _NotKept(queue)
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

_TRANSPORT = f"{__name__}:FleetTransport"

_APPS: dict[str, Celery] = {}
_APPS_LOCK = threading.Lock()


def create_app(settings: Settings, manifest: Manifest | None = None) -> Celery:
    """A Celery app wired to ``settings``; the task closes over the settings, manifest and store.

    One app per settings and manifest in a process: asking again returns the same app, so a
    long-lived process that submits many jobs keeps one app, one store and one connection pool.
    Building one connects no signal receiver (a booted worker connects its own, for as long as it
    runs: :func:`mediafleet.workers.boot.worker_lifecycle`).
    """
    manifest = manifest or settings.manifest()
    key = settings.cache_key() + manifest.model_dump_json()
    with _APPS_LOCK:
        if (app := _APPS.get(key)) is None:
            app = _APPS[key] = _build_app(settings, manifest)
    return app


def _build_app(settings: Settings, manifest: Manifest) -> Celery:
    store = open_store(settings)
    app = Celery("mediafleet", broker=settings.broker(), backend=settings.backend(), set_as_current=False)
    app.loader.override_backends = _BACKENDS
    transport = {
        "visibility_timeout": visibility_timeout_s(manifest),
        "queue_order_strategy": "priority",
        "priority_steps": list(range(10)),
    }
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_track_started=False,  # the job record says started; nobody reads Celery's STARTED (a write and a wake-up per job)
        # Task events (Flower's per-task view and task metrics) cost a publish per event, about 1 ms
        # of a small job's round trip: only when asked for (a running Flower also turns the workers'
        # on with its enable_events option). Workers' heartbeat events are sent either way.
        task_send_sent_event=settings.task_events,
        worker_send_task_events=settings.task_events,
        result_expires=settings.result_ttl_s,
        result_extended=True,
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        # Results (and progress) ride out a Redis restart of tens of seconds instead of failing the task.
        result_backend_always_retry=True,
        result_backend_max_retries=30,
        result_backend_max_sleep_between_retries_ms=1000,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_default_queue="mf.default",
        worker_consumer="mediafleet.workers.app:FleetConsumer",
    )
    if (tls := settings.tls_options()) is not None:
        app.conf.update(broker_use_ssl=tls, redis_backend_use_ssl=tls)
    broker = settings.broker() or ""
    if broker.startswith("redis://") or (broker.startswith("rediss://") and tls is not None):
        app.conf.update(broker_transport=_TRANSPORT)
    if settings.signing_key_file is not None:
        # Every task message is signed with the key and verified against the trusted store;
        # unsigned or wrongly signed messages are refused. Results stay plain JSON.
        app.conf.update(
            task_serializer="auth",
            accept_content=["auth"],
            security_key=str(settings.signing_key_file),
            security_certificate=str(settings.signing_cert_file),
            security_cert_store=str(settings.signing_cert_store),
            security_digest="sha256",
        )
        app.setup_security(allowed_serializers=["json"], serializer="json")

    chain = fleet_middleware(manifest, settings.discovery_index)
    stores = _ProcessStore(settings, store)
    app.mediafleet_jobs = stores  # type: ignore[attr-defined]
    app.mediafleet_on_refused = lambda job_id: refused(stores.get(), job_id)  # type: ignore[attr-defined]
    # Whether its workers' consumers count a delivery as they take the message (FleetConsumer): not
    # where messages are signed (a body is trusted only once Celery has checked it, in the pool
    # process), and only where one script can write both the record and kombu's (one database).
    app.mediafleet_counts_taken = settings.one_redis() and settings.signing_key_file is None  # type: ignore[attr-defined]

    # Not shared: a shared task is registered with every app the process finalizes, so a second
    # fleet app (another settings' dispatcher) would get this app's closure under the same name.
    @app.task(name=EXTRACT_TASK, bind=True, shared=False)
    def extract(self: Task, request: dict[str, Any], token: str = "") -> dict[str, Any]:
        req = ExtractRequest.model_validate(request)
        delivery = Delivery(req, stores.get(), token=token, hostname=self.request.hostname or "",
                            publish=lambda meta: _publish_progress(self, meta), retire=stop_worker,
                            taken=taken(self.request, settings))
        try:
            outcome = run_chain(chain, delivery, lambda progress: run_request(
                req, manifest=manifest, store=store, device=settings.device, progress=progress,
                inline_parts=not delivery.parts))
        except Skip:
            raise Ignore() from None  # stores no result: nothing wakes the current submission's waiters
        if (finished := delivery.finished) is not None and finished.job_id == outcome.job_id:
            outcome = finished  # what was stored (cancelled meanwhile: its cancellation)
        # The result backend gets this summary only: the outcome is in the job's record (or, when
        # large, in the blob store), never in Celery's result. A plain job this delivery finished,
        # its waiters woken, needs none (FleetRedisBackend keeps no copy: nobody would read it).
        return {"job_id": outcome.job_id, "status": outcome.status,
                "error": outcome.error.code.value if outcome.error else None,
                IN_RECORD: delivery.announced and delivery.plain,
                PUBLISHED: delivery.published}

    return app


class _ProcessStore:
    """The app's job store, built in the process that uses it (each pool process after the fork)."""

    def __init__(self, settings: Settings, blobs: BlobStore) -> None:
        self._settings = settings
        self._blobs = blobs  # the app's blob store: large outcomes are kept there
        self._store: tuple[int, JobStore] | None = None

    def get(self) -> JobStore:
        if self._store is None or self._store[0] != os.getpid():
            self._store = (os.getpid(), JobStore.from_settings(self._settings, self._blobs))
        return self._store[1]


def job_store(app: Celery) -> JobStore:
    """The job store of an app made by :func:`create_app`, for this process."""
    stores: _ProcessStore = app.mediafleet_jobs  # type: ignore[attr-defined]
    return stores.get()
