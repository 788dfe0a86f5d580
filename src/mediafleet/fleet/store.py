"""The fleet's own durable record of each job, in Redis beside the broker.

Celery answers ``PENDING`` for any id it does not know, so a job's state is never read from Celery
alone. Each job has one hash ``mediafleet:job:<id>`` holding its request, state (queued, held,
started, done, failed, cancelled), delivery count, progress, where it ran, and, once finished, its
outcome, kept for at least the caller's pickup window. With Redis persistence on, records survive a
Redis restart like the queues do.

A job id is a hash of the artifact digest, capability, extractor version and options, so the same
work always has the same id: :meth:`JobStore.claim_routed` creates the record atomically the first time,
and a resubmit of a job that is queued, running or finished returns the existing one. Only a job that
failed in a retryable way, or was cancelled, may be claimed again.

An outcome whose JSON is larger than the store's inline limit (:data:`INLINE_OUTCOME_MAX_BYTES`
unless the settings' ``outcome_inline_max_bytes`` says otherwise) is not written into the record: its
bytes go into the blob store the job store was given, and the record holds only their digest
(``outcome_ref``) and size (``outcome_bytes``). Reading the record re-hashes the blob, so a blob that
is missing, altered or another job's fails closed with a public error instead of returning evidence.
With signing on, the signature covers the job id, the digest and the size.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Protocol

from mediafleet.fleet import scripts as jobscripts
from mediafleet.contract.errors import ErrorCode, MediafleetError, PublicError
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome, Progress

if TYPE_CHECKING:
    from mediafleet.blobs.protocol import BlobStore
    from mediafleet.settings import Settings

__all__ = ["INLINE_OUTCOME_MAX_BYTES", "KOMBU_PRIORITY_SEP", "MAX_DELIVERIES", "Claim", "JobRecord", "JobStore",
           "MessageFn", "OutcomeSigner", "Started", "Watch", "delivery_taker", "eviction_warning", "finished_channel",
           "queue_lists", "redis_client", "task_result_writer"]

# An outcome whose JSON is larger than this is kept in the blob store and only referenced from its
# record (a 900-page PDF's is ~95 MB: held in Redis memory, and read back whole by every waiter).
# The settings' ``outcome_inline_max_bytes`` overrides it for a process.
INLINE_OUTCOME_MAX_BYTES = 1 << 20

_PREFIX = "mediafleet:job:"
_HELD = "mediafleet:held"
# Jobs some delivery has started and not yet finished (what lost-node recovery looks through).
_STARTED = "mediafleet:started"
# Celery's Redis result backend keeps a task's result under this prefix and the task id (the job id),
# and publishes it on a channel of the same name.
_CELERY_RESULT = "celery-task-meta-"
# A job's record publishes here when its outcome is written.
_FINISHED = "mediafleet:finished:"
# Which live worker looks through them this heartbeat (one at a time, not every worker at every beat).
_SWEEP = "mediafleet:sweep"
# kombu's Redis transport keeps priority levels 1..9 of a queue in lists of their own, named
# "<queue><sep><level>"; level 0 is the queue's own list.
KOMBU_PRIORITY_SEP = "\x06\x16"
# A client rides out Redis being away (a restart, a failover) for about this long before it raises.
_RETRY_S = 25


def finished_channel(job_id: str) -> str:
    """The pub/sub channel a job's finisher announces its outcome on (:meth:`JobStore.announce_finished`)."""
    return _FINISHED + job_id


def queue_lists(queue: str) -> list[str]:
    """Every Redis list that holds ``queue``'s messages, one per priority level (what a queue's
    length is summed over: ``mediafleet status``, the KEDA triggers, the Redis exporter)."""
    return [queue, *(f"{queue}{KOMBU_PRIORITY_SEP}{level}" for level in range(1, 10))]


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


def task_result_writer(client: Any) -> Callable[[str, str, str, int | None, str], bool]:
    """How a delivery writes its task's Celery result through ``client`` (Celery's backend's own):
    ``write(task_id, key, value, expires_s, token)``, True when written. A delivery of an earlier
    submission of the job writes nothing (:data:`mediafleet.fleet.scripts.TASK_RESULT`)."""
    script = client.register_script(jobscripts.TASK_RESULT)

    def write(task_id: str, key: str, value: str, expires_s: int | None, token: str) -> bool:
        lifetime = str(int(expires_s)) if expires_s else ""
        return bool(script(keys=[key, JobStore.key(task_id)], args=[value, lifetime, token]))

    return write


Started = tuple[int, JobState | None, dict[str, str]]
"""What counting a delivery gives (:meth:`JobStore.start`): its number (-1 for a stale message, 0 for
an unknown job), the record's state before it, and the parts the job fanned out (name -> job id)."""


def _started(reply: Sequence[Any]) -> Started:
    attempts, before, parts = (v.decode() if isinstance(v, bytes) else v for v in reply)
    return int(attempts), (JobState(before) if before else None), json.loads(parts) if parts else {}


def delivery_taker(client: Any) -> Callable[[str, str, str, tuple[str, str], str, str], Started]:
    """How a worker's consumer counts a delivery as it takes the message, through ``client`` (kombu's
    own: no retries, which would stall the consumer's loop): ``take(job_id, hostname, token,
    (unacked index, unacked hash), delivery tag, the delivery as kombu keeps it)`` records the
    delivery as kombu's QoS would and starts it as :meth:`JobStore.start` does, in one step
    (:data:`mediafleet.fleet.scripts.TAKE`); returns what ``start`` returns."""
    script = client.register_script(jobscripts.TAKE)

    def take(job_id: str, hostname: str, token: str, unacked: tuple[str, str], tag: str, kept: str) -> Started:
        now = time.time()
        return _started(script(keys=[JobStore.key(job_id), _STARTED, *unacked],
                               args=[hostname, os.getpid(), now, token, job_id, now, tag, kept]))

    return take


def redis_client(settings: Settings, *, retry_s: float = _RETRY_S) -> Any:
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


class OutcomeSigner:
    """Signs each stored outcome with the fleet's message-signing key, and checks a stored one
    against the trusted certificates: with signing on, an outcome nobody holding the key wrote
    (planted straight into Redis) is never returned as evidence."""

    def __init__(self, key_file: Path, cert_file: Path, cert_store: Path) -> None:
        from celery.security.certificate import Certificate, FSCertStore
        from celery.security.key import PrivateKey
        from celery.security.utils import get_digest_algorithm

        self._key = PrivateKey(key_file.read_text())
        self._cert = Certificate(cert_file.read_text())
        self._store = FSCertStore(str(cert_store))
        self._digest = get_digest_algorithm("sha256")

    @classmethod
    def from_settings(cls, settings: Settings) -> OutcomeSigner | None:
        if settings.signing_key_file is None or settings.signing_cert_file is None or settings.signing_cert_store is None:
            return None
        return cls(settings.signing_key_file, settings.signing_cert_file, settings.signing_cert_store)

    def sign(self, text: str) -> str:
        signature = self._key.sign(text.encode(), self._digest)
        return json.dumps({"signer": self._cert.get_id(), "signature": base64.b64encode(signature).decode()})

    def verify(self, text: str, stamp: str | None) -> bool:
        if not stamp:
            return False
        try:
            fields = json.loads(stamp)
            self._store[fields["signer"]].verify(text.encode(), base64.b64decode(fields["signature"]), self._digest)
        except Exception:  # noqa: BLE001 - any malformed or wrong signature is simply untrusted
            return False
        return True


# A job whose worker process died this many times (OOM kill, segfault, SIGKILL) is not delivered
# again: it fails with ``worker_lost`` and the queue keeps flowing.
MAX_DELIVERIES = 3


# Celery's states of a task that has ended (celery.states.READY_STATES).
_ENDED = frozenset({"SUCCESS", "FAILURE", "REVOKED"})
_FINAL = frozenset({JobState.DONE.value, JobState.FAILED.value, JobState.CANCELLED.value})


def _ref_text(job_id: str, digest: str, size: str) -> str:
    """What is signed for an outcome kept by reference: the blob's digest binds its bytes (they are
    re-hashed when read), the job id binds it to this job."""
    return json.dumps({"job_id": job_id, "outcome_bytes": size, "outcome_ref": digest}, sort_keys=True)


def _load_outcome(blobs: BlobStore | None, digest: str, size: str | None) -> Outcome:
    """The outcome a record references, read back from the blob store and re-hashed.

    Raises:
        MediafleetError: the blob is missing (``blob_not_found``), or its bytes do not hash to the
            digest or have another size (``digest_mismatch``); the store cannot be reached.
        ValueError: the bytes are not an outcome.
    """
    from mediafleet.contract.errors import IntegrityError

    if blobs is None:
        raise IntegrityError("no blob store to read the outcome from", code=ErrorCode.BLOB_NOT_FOUND)
    with blobs.verified_path(digest) as path:
        data = path.read_bytes()
    if str(len(data)) != size:
        raise IntegrityError("the stored outcome does not have the size its record names")
    return Outcome.model_validate_json(data)


class ReportsGone(RuntimeError):
    """A streamed outcome's sources (its parts' reports) went from the record while it was being
    written: another writer finished the record first (finishing drops the reports in the same
    step), so this write is the one that loses, and :meth:`JobStore.finish` stores nothing."""


class StreamedOutcome(Protocol):
    """An outcome too large to hold that writes its own JSON (a split PDF's join:
    :class:`mediafleet.workers.pdf.split.JoinedPages`). :meth:`JobStore.finish` stores it by
    reference, written straight into the blob store; ``outcome()`` makes it whole."""

    @property
    def job_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def error(self) -> PublicError | None: ...
    def write_json(self, out: BinaryIO) -> None: ...
    def outcome(self) -> Outcome: ...


def whole(outcome: Outcome | StreamedOutcome) -> Outcome:
    """The outcome itself, a streamed one made whole."""
    return outcome if isinstance(outcome, Outcome) else outcome.outcome()


MessageFn = Callable[[ExtractRequest, str], "tuple[str, str] | None"]
"""Builds a candidate's task message for :meth:`JobStore.claim_routed`: (request, token) -> (the
Redis list kombu would push it on, the payload), or None where it must be sent the ordinary way."""


class Claim(NamedTuple):
    """What :meth:`JobStore.claim_routed` did."""

    token: str | None
    """The token the job's messages carry; None when a live record already existed (joined)."""
    request: ExtractRequest
    """The request recorded (the candidate taken; the first when held or joined)."""
    held: bool
    """Held for want of a live worker (recorded, on no queue)."""
    sent: bool
    """Its message was pushed by the claim itself (the record says sent)."""


class JobRecord:
    """A read-only view of one record.

    ``forged`` is True when signing is on and the record's outcome carries no valid signature:
    its outcome is then not returned (``outcome`` is None) and the record counts as unfinished.
    ``worker_alive`` is, for a started job, whether the worker it names still has a heartbeat
    (False: that worker is gone and the job waits to be delivered again); None otherwise.
    ``blobs`` is the store an outcome kept by reference is read back from.
    """

    def __init__(self, job_id: str, fields: dict[str, str], forged: bool = False,
                 worker_alive: bool | None = None, blobs: BlobStore | None = None, signer: Any = None,
                 outcome: Outcome | None = None, brief: bool = False, no_outcome: bool = False) -> None:
        self.job_id = job_id
        self._f = fields
        self._brief = brief  # a brief read (JobStore.look, JobStore.brief): the parts' reports left out
        self._no_outcome = no_outcome  # JobStore.brief: the outcome left out too
        self.forged = forged
        self.worker_alive = worker_alive
        self._blobs = blobs
        self._signer = signer  # with signing on, each part's reported outcome is checked like the record's
        # ``outcome``: already read back and checked from these fields (:meth:`JobStore.noticed`).
        self._outcome: tuple[Outcome | None] | None = None if outcome is None else (outcome,)

    @property
    def state(self) -> JobState:
        return JobState(self._f["state"])

    @property
    def request(self) -> ExtractRequest:
        return ExtractRequest.model_validate_json(self._f["request"])

    @property
    def token(self) -> str | None:
        """The submission's token (a new one per claim): its messages carry it, its finished notice names it."""
        return self._f.get("token") or None

    @property
    def attempts(self) -> int:
        return int(self._f.get("attempts", 0))

    @property
    def completions(self) -> int:
        return int(self._f.get("completions", 0))

    @property
    def priority(self) -> int:
        return int(self._f.get("priority", 4))

    @property
    def held_reason(self) -> str | None:
        return self._f.get("held_reason") or None

    @property
    def updated_at(self) -> float:
        """When the record last moved (seconds since the epoch)."""
        return float(self._f.get("updated_at") or 0)

    @property
    def pid(self) -> int | None:
        return int(self._f["pid"]) if self._f.get("pid") else None

    @property
    def hostname(self) -> str | None:
        return self._f.get("hostname") or None

    @property
    def progress(self) -> Progress | None:
        if "done" not in self._f:
            return None
        total = self._f.get("total")
        return Progress(done=int(self._f["done"]), total=int(total) if total else None, unit=self._f.get("unit", "pages"))

    @property
    def outcome(self) -> Outcome | None:
        """The stored outcome (None while there is none, or when ``forged``).

        One kept by reference is read back from the blob store once per view. One that cannot be
        read back as this job's (its blob missing, altered, or another job's outcome) is never
        returned: the job's outcome is then a retryable failure that says so.
        """
        if self.forged:
            return None
        if self._no_outcome:
            raise RuntimeError("a brief read of the record left its outcome out")
        if self._outcome is None:
            self._outcome = (self._read_outcome(),)
        return self._outcome[0]

    @property
    def outcome_ref(self) -> str | None:
        """The blob digest of an outcome kept by reference (too large to keep inline), else None."""
        return self._f.get("outcome_ref") or None

    @property
    def untrusted(self) -> bool:
        """Forged, or its outcome's blob is gone: a resubmission discards the record and runs the job."""
        ref = self.outcome_ref
        return self.forged or (ref is not None and (self._blobs is None or not self._blobs.exists(ref)))

    def _read_outcome(self) -> Outcome | None:
        try:
            if (ref := self.outcome_ref) is not None:
                outcome = _load_outcome(self._blobs, ref, self._f.get("outcome_bytes"))
            elif raw := self._f.get("outcome"):
                outcome = Outcome.model_validate_json(raw)
            else:
                return None
        except MediafleetError as exc:
            return self._unreadable(exc.public().code)
        except ValueError:  # pydantic's ValidationError: the bytes are no outcome
            return self._unreadable(ErrorCode.DIGEST_MISMATCH)
        if outcome.job_id != self.job_id:
            return self._unreadable(ErrorCode.DIGEST_MISMATCH)
        return outcome

    def _unreadable(self, code: ErrorCode, job_id: str | None = None) -> Outcome:
        error = PublicError(code=code, retryable=True,
                            message="the job's stored outcome could not be read back as this job's (its blob is "
                                    "missing, does not match its record or fails its signature check) and was not "
                                    "returned; submit the artifact again to run it")
        request = self.request if not job_id else self.request.model_copy(update={"job_id": job_id})
        return Outcome.failed(request, error, datetime.now(UTC))

    @property
    def parts(self) -> dict[str, str]:
        """The parts this job fanned out: part name -> the part's job id (none: one task)."""
        raw = self._f.get("parts")
        return json.loads(raw) if raw else {}

    @property
    def pending_parts(self) -> int:
        return int(self._f.get("pending_parts") or 0)

    @property
    def own_reported(self) -> bool:
        """Whether the job's own task reported its outcome into the record (a job with parts)."""
        return self._f.get("own_reported") == "1"

    def reported(self, name: str) -> bool:
        return "part:" + name in self._f

    def part(self, name: str) -> Outcome | None:
        """The outcome a part reported (the job's own task under its modality's name, e.g.
        ``video``; a part under its name, e.g. ``speech`` or ``pages:33-64``); None while it has not.

        Kept like a record's outcome (inline, or past the inline limit by reference into the blob
        store; signed when signing is on) and read back the same way: one whose signature fails,
        or whose blob is missing, altered or another job's, comes back as a retryable failure of
        that part, never as evidence.
        """
        raw = self._f.get("part:" + name)
        if self._brief and raw == "":
            raise RuntimeError("a brief read of the record left this part's report out")
        if not raw:
            return None
        fields = json.loads(raw)
        job_id = str(fields.get("job_id", ""))
        signed = _signed_text(job_id, fields)
        if self._signer is not None and (signed is None or not self._signer.verify(signed, fields.get("outcome_sig"))):
            return self._unreadable(ErrorCode.INTERNAL_ERROR, job_id)
        try:
            if (ref := fields.get("outcome_ref")) is not None:
                outcome = _load_outcome(self._blobs, ref, fields.get("outcome_bytes"))
            else:
                outcome = Outcome.model_validate_json(fields["outcome"])
        except MediafleetError as exc:
            return self._unreadable(exc.public().code, job_id)
        except (ValueError, KeyError):
            return self._unreadable(ErrorCode.DIGEST_MISMATCH, job_id)
        return outcome if outcome.job_id == job_id else self._unreadable(ErrorCode.DIGEST_MISMATCH, job_id)

    def kept_part(self, name: str) -> JobRecord | None:
        """A view holding only what part ``name`` reported (and this record's request, token and
        state), for reading it back with :meth:`part`, checked the same way, after this record's
        own fields have moved on (a finished job's record drops its parts' reports); None while the
        part has not reported."""
        raw = self._f.get("part:" + name)
        if not raw:
            return None
        fields = {k: self._f[k] for k in ("request", "token", "state") if k in self._f}
        return JobRecord(self.job_id, {**fields, "part:" + name: raw}, blobs=self._blobs, signer=self._signer)

    @property
    def final(self) -> bool:
        return self.state in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)

    def summary(self) -> dict[str, Any]:
        """What ``mediafleet status JOB`` shows (no request options, no outcome body)."""
        keep = ("state", "action", "attempts", "completions", "held_reason", "hostname", "device", "priority",
                "error_code", "parent", "lost_worker", "submitted_at", "updated_at")
        out: dict[str, Any] = {"job_id": self.job_id, **{k: self._f[k] for k in keep if self._f.get(k)}}
        if (p := self.progress) is not None:
            out["progress"] = p.model_dump()
        if self.parts:
            out["parts"] = self.parts
        if self.parts and not self.final:
            out["parts_pending"] = self.pending_parts
        if self.state == JobState.STARTED and self.worker_alive is False:
            out["worker_alive"] = False  # its worker's heartbeat is gone: it will be delivered again
        return out


def _signed_text(job_id: str, fields: dict[str, str]) -> str | None:
    """What a record's ``outcome_sig`` signs: the reference of an outcome kept in the blob store,
    else the inline outcome; None for a record with no outcome."""
    if "outcome_ref" in fields:
        return _ref_text(job_id, fields["outcome_ref"], fields.get("outcome_bytes", ""))
    return fields.get("outcome")


class Watch:
    """One pub/sub connection a waiter sleeps on between reads of a job's record.

    A wake-up: whoever wakes re-reads the record (a message may be missed while Redis is away, so a
    waiter also re-reads when its slice of time runs out), except that a plain job's outcome write
    publishes what it wrote, which the woken waiter takes instead, checked as the record's would be
    (:meth:`JobStore.noticed`; ``woken_by`` keeps the message). Closed, it goes back to its job
    store for the next waiter (unsubscribed, its connection kept: a connection per job would be a
    connect and a handshake per job); discarded, or broken, its connection is dropped.
    """

    def __init__(self, client: Any, idle: _IdleWatches | None = None) -> None:
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._channels: set[str] = set()
        self._idle = idle
        self._broken = False
        self.woken_by: tuple[str, Any] | None = None
        """The channel and data of the message that ended the last :meth:`wait` (None: it timed out)."""

    def follow(self, job_id: str, task_id: str) -> None:
        """Wake on ``job_id``'s record being finished and on ``task_id``'s Celery result (subscribed
        before the caller reads the record, so no outcome can land unseen in between)."""
        wanted = {finished_channel(job_id), _CELERY_RESULT + task_id} - self._channels
        if wanted:
            try:
                self._pubsub.subscribe(*sorted(wanted))
            except BaseException:
                self._broken = True
                raise
            self._channels |= wanted

    def wait(self, timeout: float) -> bool:
        """Sleep until a followed channel says something or ``timeout`` passes; whether it said.
        (A message on a channel an earlier waiter followed on this connection is not a wake-up.)"""
        deadline = time.monotonic() + timeout
        self.woken_by = None
        try:
            while (left := deadline - time.monotonic()) > 0:
                message = self._pubsub.get_message(timeout=left)
                if message is not None and (channel := _text(message.get("channel"))) in self._channels:
                    self.woken_by = (channel, message.get("data"))
                    return True
        except BaseException:
            self._broken = True
            raise
        return False

    def close(self) -> None:
        """Done waiting: unsubscribe and hand the connection to the next waiter (or drop it)."""
        if self._idle is not None and not self._broken and self._channels:
            try:
                self._pubsub.unsubscribe()
            except Exception:  # noqa: BLE001 - Redis dropped it: drop it too
                self._broken = True
            else:
                self._channels = set()
                if self._idle.put(self):
                    return
        self.discard()

    def discard(self) -> None:
        """Drop the connection (Redis went away under it, or no waiter needs it)."""
        try:
            self._pubsub.close()
        except Exception:  # noqa: BLE001 - closing a connection Redis already dropped
            pass


def _notice(flat: Sequence[str]) -> bytes:
    """A finished notice: the fields written, names and values in turn, each as ``<bytes>:<bytes>``
    (nothing escaped, so neither side copies an outcome more than once)."""
    return b"".join(b"%d:%s" % (len(data), data) for data in (x.encode() for x in flat))


def _notice_fields(notice: Any) -> tuple[str, dict[str, str]] | None:
    """The submission token and the fields a finished notice names (each ``<bytes>:<bytes>``, the
    token first, then the fields as :func:`_notice` wrote them); None for anything else (a bare
    wake-up, a malformed notice)."""
    data = notice.encode() if isinstance(notice, str) else notice
    if not isinstance(data, bytes):
        return None
    items: list[str] = []
    at = 0
    try:
        while at < len(data):
            colon = data.index(b":", at)
            size, start = int(data[at:colon]), colon + 1
            if size < 0 or start + size > len(data):
                return None
            items.append(data[start:start + size].decode())
            at = start + size
    except ValueError:  # no length, not a number, not UTF-8
        return None
    if len(items) < 3 or len(items) % 2 == 0:
        return None
    return items[0], dict(zip(items[1::2], items[2::2], strict=True))


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


class _IdleWatches:
    """A job store's watches waiting for their next waiter (a few: one per waiter at a time), in
    the process that opened them (a forked child never reads its parent's connection)."""

    def __init__(self, keep: int = 8) -> None:
        self._keep = keep
        self._watches: list[Watch] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def take(self) -> Watch | None:
        with self._lock:
            if self._pid != os.getpid():
                self._watches, self._pid = [], os.getpid()  # the parent's: not ours to read or close
            return self._watches.pop() if self._watches else None

    def put(self, watch: Watch) -> bool:
        with self._lock:
            if len(self._watches) >= self._keep or self._pid != os.getpid():
                return False
            self._watches.append(watch)
            return True


class JobStore:
    """Job records in the Redis behind ``client`` (a ``redis.Redis``)."""

    def __init__(self, client: Any, ttl_s: int, signer: Any = None, blobs: BlobStore | None = None,
                 inline_max_bytes: int = INLINE_OUTCOME_MAX_BYTES) -> None:
        """``blobs``: where an outcome larger than ``inline_max_bytes`` (its JSON) is kept and read
        back from; without one every outcome is kept inline."""
        self._r = client
        self._ttl_s = ttl_s
        self._signer = signer
        self._blobs = blobs
        self._inline_max_bytes = inline_max_bytes
        self._claim = client.register_script(jobscripts.CLAIM)
        self._start = client.register_script(jobscripts.START)
        self._release = client.register_script(jobscripts.RELEASE)
        self._report = client.register_script(jobscripts.REPORT)
        self._resend = client.register_script(jobscripts.RESEND)
        self._finish = client.register_script(jobscripts.FINISH)
        self._recover = client.register_script(jobscripts.RECOVER)
        self._look = client.register_script(jobscripts.LOOK)
        self._brief = client.register_script(jobscripts.BRIEF)
        self._idle = _IdleWatches()

    @staticmethod
    def key(job_id: str) -> str:
        return _PREFIX + job_id

    @classmethod
    def from_settings(cls, settings: Settings, blobs: BlobStore | None = None) -> JobStore:
        """The job store of the fleet the settings name (its own client; outcomes signed and
        checked when message signing is on; large outcomes kept in ``blobs``, by default the blob
        store the settings name)."""
        if blobs is None:
            from mediafleet.blobs.local import open_store

            blobs = open_store(settings)
        limit = settings.outcome_inline_max_bytes
        return cls(redis_client(settings), settings.result_ttl_s, OutcomeSigner.from_settings(settings), blobs,
                   INLINE_OUTCOME_MAX_BYTES if limit is None else limit)

    @property
    def client(self) -> Any:
        return self._r

    def get(self, job_id: str) -> JobRecord | None:
        return self.look(job_id)[0]

    def look(self, job_id: str, task_id: str | None = None, *, brief: bool = False,
             keep_part: str | None = None) -> tuple[JobRecord | None, bool]:
        """The job's record, and whether the Celery task ``task_id`` has ended (its result is
        stored: success, failure or revoked), read together in one round trip (what a waiter
        reads at each slice of its wait). With no ``task_id``, False.

        ``brief``: without what the job's parts reported into it but ``keep_part``'s (a long
        document's ranges report tens of megabytes there): :meth:`JobRecord.reported` still says
        which did, :meth:`JobRecord.part` refuses the others."""
        from mediafleet.fleet.presence import worker_key

        raw, alive, status = self._look(keys=[self.key(job_id), _CELERY_RESULT + task_id if task_id else ""],
                                        args=[worker_key(""), "1" if brief else "0",
                                              "part:" + keep_part if brief and keep_part else ""])
        ended = _text(status) in _ENDED
        if not raw:
            return None, ended
        if isinstance(raw, dict):  # RESP3 may answer a flat array as a map
            pairs = list(raw.items())
        else:
            pairs = list(zip(raw[::2], raw[1::2], strict=True))
        fields = {_text(k): _text(v) for k, v in pairs}
        signed = _signed_text(job_id, fields)
        forged = (self._signer is not None and signed is not None
                  and not self._signer.verify(signed, fields.get("outcome_sig")))
        return JobRecord(job_id, fields, forged, None if alive < 0 else bool(alive), self._blobs, self._signer,
                         brief=brief), ended

    def read_part(self, job_id: str, name: str) -> Outcome | None:
        """The outcome part ``name`` reported into the job's record, read alone (not the other
        parts' reports: a long document's ranges report tens of megabytes there) and checked as
        :meth:`JobRecord.part` checks it; None while it has not reported (or the record is gone)."""
        raw, request = self.client.hmget(self.key(job_id), ["part:" + name, "request"])
        if raw is None:
            return None
        fields = {"part:" + name: _text(raw)}
        if request is not None:
            fields["request"] = _text(request)
        return JobRecord(job_id, fields, blobs=self._blobs, signer=self._signer).part(name)

    def brief(self, job_id: str) -> JobRecord | None:
        """The job's record without its inline outcome or its parts' reports (its state,
        progress, request; :attr:`JobRecord.outcome` and :meth:`JobRecord.part` refuse): what a
        waiter's progress reads of each range's record (a finished one holds its outcome)."""
        raw = self._brief(keys=[self.key(job_id)])
        if not raw:
            return None
        if isinstance(raw, dict):
            pairs = list(raw.items())
        else:
            pairs = list(zip(raw[::2], raw[1::2], strict=True))
        return JobRecord(job_id, {_text(k): _text(v) for k, v in pairs}, blobs=self._blobs, signer=self._signer,
                         brief=True, no_outcome=True)

    def noticed(self, job_id: str, notice: Any, request: ExtractRequest, token: str | None) -> JobRecord | None:
        """The finished record a job's finished notice carries: the fields its finish wrote, in
        the same step as it published them (:meth:`finish` with ``announce``), so a woken waiter
        need not read the record again. Taken only as the record would be (its outcome validated
        as this job's, its signature checked with signing on), and only for the submission the
        waiter read the record of (``token``, :attr:`JobRecord.token`: a notice of an earlier
        submission of the same job, left unread on a reused connection, is not this one's
        outcome). None for a bare wake-up, another submission's notice, or one that is not a valid
        finished record with an inline outcome (the waiter then reads the record itself).

        ``request`` is the job's request, which the notice does not carry.
        """
        if not token or (noticed := _notice_fields(notice)) is None or noticed[0] != token:
            return None
        fields = noticed[1]
        raw = fields.get("outcome")
        if fields.get("state") not in _FINAL or not raw or "outcome_ref" in fields:
            return None
        if self._signer is not None and not self._signer.verify(raw, fields.get("outcome_sig")):
            return None
        try:
            outcome = Outcome.model_validate_json(raw)
        except ValueError:
            return None
        if outcome.job_id != job_id:
            return None
        fields["request"] = request.model_dump_json()
        return JobRecord(job_id, fields, blobs=self._blobs, signer=self._signer, outcome=outcome)

    def discard_forged(self, job_id: str) -> bool:
        """Delete a record whose outcome failed its signature check, or whose outcome's blob is gone
        (:attr:`JobRecord.untrusted`), so the job can be claimed and run again; a record changed
        meanwhile is kept. Returns whether it was deleted."""
        key = self.key(job_id)
        with self._r.pipeline() as pipe:
            try:
                pipe.watch(key)
                record = self.get(job_id)
                if record is None or not record.untrusted:
                    return False
                pipe.multi()
                pipe.delete(key)
                pipe.execute()
                return True
            except Exception as exc:  # redis.WatchError: it changed; leave it
                if type(exc).__name__ != "WatchError":
                    raise
                return False

    def claim(self, request: ExtractRequest, *, state: JobState, held_reason: str | None, priority: int,
              keep_s: int, parts: Mapping[str, str] | None = None) -> str | None:
        """Record a new job in ``state`` (queued or held, as asked: no presence read, no message
        pushed; the caller sends a queued job's) and return the token its message must carry; None
        when a live record for the same job already exists. :meth:`claim_routed` with one candidate,
        not routed.

        ``parts`` names the parts the job fans out (part name -> job id): the job then finishes when
        its own task and every part have reported (:meth:`report_part`).
        """
        if state not in (JobState.QUEUED, JobState.HELD):
            raise ValueError(f"a job is claimed queued or held, not {state.value}")
        claim = self._claim_as([("", request)], route=state.value, held_reason=held_reason or "", priority=priority,
                               keep_s=keep_s, parts=parts, message=None)
        return claim.token

    def claim_routed(self, candidates: Sequence[tuple[str, ExtractRequest]], *, held_reason: str, priority: int,
                     keep_s: int, parts: Mapping[str, str] | None = None,
                     message: MessageFn | None = None) -> Claim:
        """Record a new job, routed in the same step (one round trip): ``candidates`` are the job's
        (queue, request for that queue's device class) in the capability's order; the job is queued
        as the first whose queue a live worker consumes (:func:`mediafleet.fleet.presence.live_workers`),
        else held as the first, with ``held_reason``. A live record of the same job is joined, not
        replaced (see the module's docstring).

        ``message(request, token)`` gives a candidate's task message as (the Redis list, the
        payload) kombu would push, or None: when every candidate has one, the queued candidate's is
        pushed by the same step and the record marked sent (``Claim.sent``); else nothing is pushed
        and the caller sends the message (then :meth:`mark_sent`). A held job's goes nowhere.
        """
        token = uuid.uuid4().hex
        messages = None
        if message is not None:
            built = [message(request, token) for _, request in candidates]
            messages = None if any(m is None for m in built) else built
        return self._claim_as(candidates, route="live", held_reason=held_reason, priority=priority, keep_s=keep_s,
                              parts=parts, message=messages, token=token)

    def _claim_as(self, candidates: Sequence[tuple[str, ExtractRequest]], *, route: str, held_reason: str,
                  priority: int, keep_s: int, parts: Mapping[str, str] | None,
                  message: Sequence[tuple[str, str] | None] | None, token: str | None = None) -> Claim:
        """The one claim script (:data:`mediafleet.fleet.scripts.CLAIM`), routed as ``route`` says (``live``, ``queued``, ``held``)."""
        from mediafleet.fleet.presence import INDEX_KEY, live_window, worker_key

        job_id = candidates[0][1].job_id
        token = token or uuid.uuid4().hex
        fields = self._claim_fields(candidates[0][1], token, priority, keep_s, parts)
        flat = [x for kv in fields.items() for x in kv]
        pushes = message or [None] * len(candidates)
        routes = [x for (queue, request), push in zip(candidates, pushes, strict=True)
                  for x in (queue, request.device.value, request.model_dump_json(), *(push or ("", "")))]
        drop_before, live_since = live_window(time.time())
        created, taken, pushed = self._claim(
            keys=[self.key(job_id), _HELD, _CELERY_RESULT + job_id, INDEX_KEY],
            args=[max(keep_s, self._ttl_s), job_id, drop_before, live_since, worker_key(""), held_reason, route,
                  len(candidates), *routes, *flat])
        request = candidates[max(int(taken), 1) - 1][1]
        return Claim(token if created else None, request, int(taken) == 0, bool(pushed))

    def _claim_fields(self, request: ExtractRequest, token: str, priority: int, keep_s: int,
                      parts: Mapping[str, str] | None) -> dict[str, str]:
        """A new record's fields, less its state, request, device and held reason."""
        now = str(time.time())
        fields = {
            "token": token, "action": request.action, "attempts": "0", "completions": "0",
            "priority": str(priority), "keep_s": str(max(keep_s, self._ttl_s)),
            "submitted_at": now, "updated_at": now, "sent": "0",
        }
        if parts:
            fields.update(parts=json.dumps(dict(parts)), pending_parts=str(len(parts) + 1))
        if request.part_of is not None:
            fields["parent"] = request.part_of.job_id
        return fields

    def held(self) -> list[JobRecord]:
        """Jobs waiting for a live worker of an allowed device class (not yet on any queue)."""
        return self._members(_HELD, JobState.HELD)

    def _members(self, index: str, state: JobState) -> list[JobRecord]:
        """The records named in the set ``index`` that are in ``state``; names whose record expired
        are dropped from the set."""
        out = []
        for raw in self._r.smembers(index):
            job_id = raw.decode()
            record = self.get(job_id)
            if record is None:
                self._r.srem(index, job_id)
            elif record.state == state:
                out.append(record)
        return out

    def release(self, request: ExtractRequest) -> str | None:
        """Mark a held job queued (once, whoever asks first); returns the token to send it with."""
        token = self._release(keys=[self.key(request.job_id), _HELD],
                              args=[request.job_id, request.model_dump_json(), time.time()])
        return token.decode() if isinstance(token, bytes) else token

    def started(self) -> list[JobRecord]:
        """Jobs some delivery started and none finished yet (records that expired are dropped)."""
        return self._members(_STARTED, JobState.STARTED)

    def announce_finished(self, job_id: str) -> None:
        """Wake the job's waiters: its outcome is written (and indexed, where the settings name an
        index), so what they read next is final."""
        self._r.publish(finished_channel(job_id), "1")

    def watch(self) -> Watch:
        """A subscription that wakes a waiter when a job's record gets its outcome, or when a task's
        Celery result lands (a task that ended without writing one: killed, timed out, revoked).
        Close it when done: its connection serves the next waiter of this store."""
        return self._idle.take() or Watch(self._r, self._idle)

    def idle_watch(self) -> Watch | None:
        """A watch no waiter holds, if one is idle (None: opening one is left to :meth:`watch`)."""
        return self._idle.take()

    def sweep_turn(self, sweeper: str, every_s: float) -> bool:
        """Whether ``sweeper`` looks through the started jobs now: one sweeper per ``every_s``
        across the fleet (a lease in Redis that expires on its own, so a lost sweeper is replaced
        within one period)."""
        return bool(self._r.set(_SWEEP, sweeper, nx=True, px=max(int(every_s * 1000) - 250, 100)))

    def requeue_lost(self, record: JobRecord, quiet_s: float) -> str | None:
        """Queue a started job again when the record has not moved for ``quiet_s`` seconds and the
        worker it names has lost its heartbeat (a lost node), or still beats but no longer holds the
        job, as its latest beat, a heartbeat or more after the record last moved, says (the job's
        outcome was lost, e.g. with a Redis crash, or the worker restarted under the same name);
        returns the token to send it with, once, or None."""
        from mediafleet.fleet.presence import HEARTBEAT_S, worker_key

        if record.hostname is None:
            return None
        token = self._recover(keys=[self.key(record.job_id), _STARTED, worker_key(record.hostname)],
                              args=[record.job_id, time.time(), quiet_s, record.hostname, HEARTBEAT_S])
        return token.decode() if isinstance(token, bytes) else token

    def mark_sent(self, job_id: str) -> None:
        """The job's message is on its queue (a resubmission need not send it again)."""
        self._r.hset(self.key(job_id), "sent", "1")

    def unsent(self, job_id: str, after_s: float) -> str | None:
        """The token to send a job with whose message was never sent, once, when its record has
        waited unsent for ``after_s`` seconds (its dispatcher died between record and send)."""
        token = self._resend(keys=[self.key(job_id)], args=[time.time(), after_s])
        return token.decode() if isinstance(token, bytes) else token

    def start(self, job_id: str, hostname: str, token: str) -> Started:
        """Count a delivery; returns (deliveries so far, the state before this one, the parts the
        job fanned out: name -> job id).

        Deliveries are -1 for a stale message (not this submission's) and 0 for an unknown job.
        Otherwise the count is this delivery's number, which owns the record from now on: pass it
        as ``delivery`` to :meth:`finish` and :meth:`report_part`.
        """
        return _started(self._start(keys=[self.key(job_id), _STARTED],
                                    args=[hostname, os.getpid(), time.time(), token, job_id]))

    def progress(self, job_id: str, done: int, total: int | None, unit: str) -> JobState | None:
        """Record progress; returns the current state (so a worker sees a cancellation)."""
        pipe = self._r.pipeline()
        pipe.hset(self.key(job_id), mapping={"done": done, "total": total if total is not None else "",
                                             "unit": unit, "updated_at": time.time()})
        pipe.hget(self.key(job_id), "state")
        _, state = pipe.execute()
        return JobState(state.decode()) if state else None

    def finish(self, outcome: Outcome | StreamedOutcome, *, delivery: int | None = None,
               seen_attempts: int | None = None, hostname: str | None = None, announce: bool = False,
               progress: tuple[int, int | None, str] | None = None, unless_cancelled: bool = False,
               keep_part: str | None = None) -> bool:
        """Store the outcome and the final state, kept for the job's pickup window (the parts'
        outcomes it was joined from are dropped, but ``keep_part``'s: a split job's own range, which
        a later reader needs to write the job's bundle from its ranges, one at a time, as every
        further range keeps its own record); returns whether it was stored.

        A record moves only forward: one that holds an outcome is never overwritten, so of two
        writers (a stale redelivery and the live one, two joiners) exactly one stores its outcome.
        ``delivery`` (a worker's, from :meth:`start`) must still own the record; ``seen_attempts``
        and ``hostname`` (the waiter's, for a task it found lost) must still be the record's, so a
        delivery that started since is not failed for its predecessor. With ``announce`` the job's
        waiters are woken in the same step (:meth:`announce_finished`, for a writer with nothing
        left to do before they read the outcome: no discovery index to fill first).

        ``progress`` is the run's last progress point (done, total, unit), written with the outcome
        instead of on its own just before (a round trip fewer per job). With ``unless_cancelled``
        a record cancelled meanwhile is not finished with this outcome (as that progress point
        would have stopped the run).

        Raises:
            Cancelled: ``unless_cancelled`` and the job was cancelled meanwhile (the caller
                finishes it cancelled).
        """
        cancelled = outcome.error is not None and outcome.error.code == ErrorCode.CANCELLED
        state = JobState.DONE if outcome.status == "ok" else JobState.CANCELLED if cancelled else JobState.FAILED
        try:
            stored = self._outcome_fields(outcome)
        except ReportsGone:
            return False  # another writer finished the record while this one wrote its outcome
        fields = {
            "state": state.value, **stored, "updated_at": str(time.time()),
            "error_code": outcome.error.code.value if outcome.error else "",
            "retryable": "1" if outcome.error and outcome.error.retryable else "0",
        }
        if progress is not None:
            done, total, unit = progress
            fields.update(done=str(done), total="" if total is None else str(total), unit=unit)
        if delivery is not None:
            # The process that ran it (a worker's consumer may have counted the delivery as it took
            # the message, naming its own process: :func:`delivery_taker`).
            fields["pid"] = str(os.getpid())
        flat = [x for kv in fields.items() for x in kv]
        written = self._finish(keys=[self.key(outcome.job_id), _STARTED, finished_channel(outcome.job_id)], args=[
            "" if delivery is None else delivery, "" if seen_attempts is None else seen_attempts, hostname or "",
            outcome.job_id, "1" if outcome.status == "ok" else "0", self._ttl_s, "1" if announce else "0",
            "1" if unless_cancelled else "0", _notice(flat) if announce else "", keep_part or "", *flat])
        if int(written) < 0:
            from mediafleet.contract.errors import Cancelled

            raise Cancelled("the job was cancelled")
        return bool(written)

    def _outcome_fields(self, outcome: Outcome | StreamedOutcome) -> dict[str, str]:
        """The record's outcome fields: the JSON inline, or, past the inline limit, a reference to
        it in the blob store (stored first: a write that loses the race below leaves only an
        unreferenced blob, which gc removes); with the signature when signing is on. A streamed
        outcome is written into the blob store as it writes itself, never held."""
        fields: dict[str, str]
        if not isinstance(outcome, Outcome) and self._blobs is None:
            outcome = outcome.outcome()
        if not isinstance(outcome, Outcome):
            assert self._blobs is not None
            with tempfile.TemporaryFile() as spool:
                outcome.write_json(spool)  # type: ignore[arg-type]
                spool.seek(0)
                digest, size, _ = self._blobs.put_stream(spool)  # type: ignore[arg-type]
            fields = {"outcome_ref": digest, "outcome_bytes": str(size)}
        else:
            text = outcome.model_dump_json()
            if self._blobs is None or (len(text) <= self._inline_max_bytes
                                       and len(text.encode()) <= self._inline_max_bytes):
                fields = {"outcome": text}
            else:
                data = text.encode()
                del text
                fields = {"outcome_ref": self._blobs.put_bytes(data), "outcome_bytes": str(len(data))}
        signed = _signed_text(outcome.job_id, fields)
        if self._signer is not None and signed is not None:
            fields["outcome_sig"] = self._signer.sign(signed)
        return fields

    def report_part(self, job_id: str, part: str, outcome: Outcome, *, decides: bool = False,
                    delivery: int | None = None) -> int:
        """Record a part's outcome in the caller's job; returns the parts still to report.

        0 means this reporter is the last and joins the parts (exactly one reporter sees 0); -1
        means nothing to do (the job finished already, the part reported before, or ``delivery``,
        the reporting delivery of the job's own task, no longer owns the record). With ``decides``
        (a failed own task or page range) no other part is waited for. The outcome is kept as a
        record's is (inline, or by reference past the inline limit; signed with signing on) and read
        back by :meth:`JobRecord.part`.
        """
        kept = json.dumps({"job_id": outcome.job_id, **self._outcome_fields(outcome)})
        left = self._report(keys=[self.key(job_id)],
                            args=[part, kept, "1" if decides else "0", time.time(), "" if delivery is None else delivery])
        return int(left)

    def cancel(self, job_id: str) -> JobState | None:
        """Mark a job cancelled unless it already finished; returns its state afterwards."""
        key = self.key(job_id)
        with self._r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    state = pipe.hget(key, "state")
                    if state is None:
                        return None
                    current = JobState(state.decode())
                    if current in (JobState.DONE, JobState.FAILED, JobState.CANCELLED):
                        return current
                    own_part_in = pipe.hget(key, "own_reported") == b"1"
                    parts = pipe.hget(key, "parts")
                    pipe.multi()
                    pipe.hset(key, mapping={"state": JobState.CANCELLED.value, "updated_at": time.time()})
                    pipe.execute()
                    for part in json.loads(parts).values() if parts else ():
                        self.cancel(part)
                    if current == JobState.HELD or own_part_in:
                        # On no queue, or its own task already finished (only a part was still
                        # running): no worker will write its outcome, so write it here.
                        self._r.srem(_HELD, job_id)
                        self._cancelled_outcome(job_id)
                    return JobState.CANCELLED
                except Exception as exc:  # redis.WatchError: someone changed it; look again
                    if type(exc).__name__ != "WatchError":
                        raise

    def _cancelled_outcome(self, job_id: str) -> None:
        record = self.get(job_id)
        if record is None:
            return
        self.finish(Outcome.failed(record.request, PublicError(code=ErrorCode.CANCELLED, message="the job was cancelled"),
                                   datetime.now(UTC)))
