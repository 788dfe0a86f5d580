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

import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, Protocol

from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome
from mediafleet.fleet import scripts as jobscripts
from mediafleet.fleet.deliveries import Started, started_reply
from mediafleet.fleet.keys import CELERY_RESULT, HELD, STARTED, SWEEP, finished_channel, job_key
from mediafleet.fleet.records import ENDED, FINAL, JobRecord, notice_bytes, notice_fields, text
from mediafleet.fleet.redis_client import RETRY_S, redis_client
from mediafleet.fleet.replication import hold, replica_acks
from mediafleet.fleet.signing import OutcomeSigner, signed_text
from mediafleet.fleet.watches import IdleWatches, Watch
from mediafleet.workers.parts import ReportsGone

if TYPE_CHECKING:
    from mediafleet.blobs.protocol import BlobStore
    from mediafleet.settings import Settings

__all__ = ["INLINE_OUTCOME_MAX_BYTES", "Claim", "JobStore", "MessageFn", "StreamedOutcome", "whole"]

# An outcome whose JSON is larger than this is kept in the blob store and only referenced from its
# record (a 900-page PDF's is ~95 MB: held in Redis memory, and read back whole by every waiter).
# The settings' ``outcome_inline_max_bytes`` overrides it for a process.
INLINE_OUTCOME_MAX_BYTES = 1 << 20


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


class JobStore:
    """Job records in the Redis behind ``client`` (a ``redis.Redis``)."""

    def __init__(self, client: Any, ttl_s: int, signer: Any = None, blobs: BlobStore | None = None,
                 inline_max_bytes: int = INLINE_OUTCOME_MAX_BYTES, replica_acks: int = 0,
                 replica_wait_ms: int = 1000) -> None:
        """``blobs``: where an outcome larger than ``inline_max_bytes`` (its JSON) is kept and read
        back from; without one every outcome is kept inline. ``replica_acks``: replicas that must
        hold a claim or an outcome before it is reported (:meth:`replicated`)."""
        self._acks = replica_acks
        self._wait_ms = replica_wait_ms
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
        self._idle = IdleWatches()

    @staticmethod
    def key(job_id: str) -> str:
        return job_key(job_id)

    @classmethod
    def from_settings(cls, settings: Settings, blobs: BlobStore | None = None) -> JobStore:
        """The job store of the fleet the settings name (its own client; outcomes signed and
        checked when message signing is on; large outcomes kept in ``blobs``, by default the blob
        store the settings name)."""
        if blobs is None:
            from mediafleet.blobs.local import open_store

            blobs = open_store(settings)
        limit = settings.outcome_inline_max_bytes
        acks = replica_acks(settings)
        return cls(redis_client(settings), settings.result_ttl_s, OutcomeSigner.from_settings(settings), blobs,
                   INLINE_OUTCOME_MAX_BYTES if limit is None else limit, acks, settings.replica_wait_ms)

    def replicated(self) -> None:
        """Return once the replicas the store was given hold every write made before (at once with
        none asked): what makes a claim or an outcome safe to report through a failover.

        Raises:
            NotReplicated: too few replicas held it for about :data:`RETRY_S` seconds (a
                ``redis.ConnectionError``: Redis counts as away).
        """
        hold(self._r, self._acks, self._wait_ms, RETRY_S)

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

        raw, alive, status = self._look(keys=[self.key(job_id), CELERY_RESULT + task_id if task_id else ""],
                                        args=[worker_key(""), "1" if brief else "0",
                                              "part:" + keep_part if brief and keep_part else ""])
        ended = text(status) in ENDED
        if not raw:
            return None, ended
        if isinstance(raw, dict):  # RESP3 may answer a flat array as a map
            pairs = list(raw.items())
        else:
            pairs = list(zip(raw[::2], raw[1::2], strict=True))
        fields = {text(k): text(v) for k, v in pairs}
        signed = signed_text(job_id, fields)
        forged = (self._signer is not None and signed is not None
                  and not self._signer.verify(signed, fields.get("outcome_sig")))
        if self._acks and fields.get("state") in FINAL:
            self.replicated()  # a finished record is reported only once replicas hold it
        return JobRecord(job_id, fields, forged, None if alive < 0 else bool(alive), self._blobs, self._signer,
                         brief=brief), ended

    def read_part(self, job_id: str, name: str) -> Outcome | None:
        """The outcome part ``name`` reported into the job's record, read alone (not the other
        parts' reports: a long document's ranges report tens of megabytes there) and checked as
        :meth:`JobRecord.part` checks it; None while it has not reported (or the record is gone)."""
        raw, request = self.client.hmget(self.key(job_id), ["part:" + name, "request"])
        if raw is None:
            return None
        fields = {"part:" + name: text(raw)}
        if request is not None:
            fields["request"] = text(request)
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
        return JobRecord(job_id, {text(k): text(v) for k, v in pairs}, blobs=self._blobs, signer=self._signer,
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
        if not token or (noticed := notice_fields(notice)) is None or noticed[0] != token:
            return None
        fields = noticed[1]
        raw = fields.get("outcome")
        if fields.get("state") not in FINAL or not raw or "outcome_ref" in fields:
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
            keys=[self.key(job_id), HELD, CELERY_RESULT + job_id, INDEX_KEY],
            args=[max(keep_s, self._ttl_s), job_id, drop_before, live_since, worker_key(""), held_reason, route,
                  len(candidates), *routes, *flat])
        request = candidates[max(int(taken), 1) - 1][1]
        self.replicated()  # the claim that makes the job id idempotent is held by replicas before it counts
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
        return self._members(HELD, JobState.HELD)

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
        token = self._release(keys=[self.key(request.job_id), HELD],
                              args=[request.job_id, request.model_dump_json(), time.time()])
        return token.decode() if isinstance(token, bytes) else token

    def started(self) -> list[JobRecord]:
        """Jobs some delivery started and none finished yet (records that expired are dropped)."""
        return self._members(STARTED, JobState.STARTED)

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
        return bool(self._r.set(SWEEP, sweeper, nx=True, px=max(int(every_s * 1000) - 250, 100)))

    def requeue_lost(self, record: JobRecord, quiet_s: float) -> str | None:
        """Queue a started job again when the record has not moved for ``quiet_s`` seconds and the
        worker it names has lost its heartbeat (a lost node), or still beats but no longer holds the
        job, as its latest beat, a heartbeat or more after the record last moved, says (the job's
        outcome was lost, e.g. with a Redis crash, or the worker restarted under the same name);
        returns the token to send it with, once, or None."""
        from mediafleet.fleet.presence import HEARTBEAT_S, worker_key

        if record.hostname is None:
            return None
        token = self._recover(keys=[self.key(record.job_id), STARTED, worker_key(record.hostname)],
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
        as ``delivery`` to :meth:`finish` and :meth:`report_part`. With replicas to wait for, it is
        returned once they hold it, so a failover never hands the same number to two deliveries.
        """
        started = started_reply(self._start(keys=[self.key(job_id), STARTED],
                                            args=[hostname, os.getpid(), time.time(), token, job_id]))
        if started[0] > 0:
            self.replicated()
        return started

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
        # With replicas to wait for, the waiters are woken only once they hold the outcome.
        notify = announce and not self._acks
        written = self._finish(keys=[self.key(outcome.job_id), STARTED, finished_channel(outcome.job_id)], args=[
            "" if delivery is None else delivery, "" if seen_attempts is None else seen_attempts, hostname or "",
            outcome.job_id, "1" if outcome.status == "ok" else "0", self._ttl_s, "1" if notify else "0",
            "1" if unless_cancelled else "0", notice_bytes(flat) if notify else "", keep_part or "", *flat])
        if int(written) < 0:
            from mediafleet.contract.errors import Cancelled

            raise Cancelled("the job was cancelled")
        if written and self._acks:
            self.replicated()
            if announce:
                self.announce_finished(outcome.job_id)
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
        signed = signed_text(outcome.job_id, fields)
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
                        self._r.srem(HELD, job_id)
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
