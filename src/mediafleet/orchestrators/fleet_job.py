"""The fleet's handle on one job: its state from the fleet's job record, woken by Celery's result.

It also settles a job whose worker could not report (killed, timed out, revoked): the failure is
recorded as that job's (a part's reported into its job through the same path a worker reports
by), and a job with parts is joined here when its last reporter died before joining.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mediafleet.adapters.bundle import build_bundle, with_claims
from mediafleet.contract.bundle import CallerClaims, EvidenceBundle
from mediafleet.contract.errors import ErrorCode, PublicError, TimedOut
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome, PartOf, Progress, Span
from mediafleet.contract.manifest import Capability, Manifest
from mediafleet.discovery.hook import index_finished
from mediafleet.fleet.keys import finished_channel
from mediafleet.fleet.records import JobRecord
from mediafleet.fleet.redis_client import redis_away_errors, translating
from mediafleet.fleet.reports import join_parts, report_part
from mediafleet.fleet.store import JobStore
from mediafleet.fleet.watches import Watch
from mediafleet.orchestrators.job import Job
from mediafleet.workers.parts import own_part

if TYPE_CHECKING:
    from mediafleet.adapters.pdf_stream import Written

__all__ = ["FleetJob", "join_and_index"]

_PROGRESS_SLICE_S = 0.5
# A job whose parts all reported and whose record has not moved for this long has lost its joiner.
_JOINER_GONE_S = 30.0


def _now() -> datetime:
    return datetime.now(UTC)


_REDIS_AWAY = redis_away_errors()


def _untrusted(request: ExtractRequest) -> Outcome:
    """What a waiter returns for a record whose outcome failed its signature check."""
    error = PublicError(code=ErrorCode.INTERNAL_ERROR, retryable=True,
                        message="the job's stored outcome failed its signature check and was not returned; "
                                "submit the artifact again to run it")
    return Outcome.failed(request, error, _now())


def join_and_index(jobs: JobStore, job_id: str, manifest: Manifest, index_setting: str | None) -> None:
    """Join a job whose parts have all reported, and index the joined outcome (the discovery hook)."""
    if (joined := join_parts(jobs, job_id, manifest)) is not None:
        index_finished(index_setting, joined, manifest)


class FleetJob(Job):
    """A job on the fleet: its state from the fleet's job record, woken by Celery's result.

    A job with parts is waited on through its own task until that has reported, then through each
    part still to report, in turn; whichever reports last writes the joined outcome.
    """

    def __init__(self, app: Any, jobs: JobStore, capability: Capability, request: ExtractRequest,
                 manifest: Manifest, index_setting: str | None = None, *, watch: Watch | None = None,
                 claimed: str | None = None) -> None:
        """``watch``: one already following this job, handed over by the submission that made this
        handle (its waiter then opens none); ``claimed``: that submission's token, when it claimed
        the job's record after the watch followed it (no outcome of it can have landed unseen, so
        the first wait does not read the record the claim just wrote)."""
        super().__init__(request.job_id, request.action)
        self._watch = watch
        self._claimed = claimed
        self._app = app
        self._jobs = jobs
        self._capability = capability
        self._request = request
        self._manifest = manifest
        self._index_setting = index_setting  # settings.discovery_index, for a join done here
        self._waited = request.job_id  # the task whose end the waiter watches: its own, then each part's
        # While :meth:`write` waits: a split job's done record is taken as it is (its joined outcome
        # not read), and what the job's own task reported is kept from each read of the record (the
        # finished record drops it), to write the bundle from the ranges' outcomes.
        self._defer = False
        self._own_kept: JobRecord | None = None

    @property
    def request(self) -> ExtractRequest:
        """The job's request (a split job's own: its first range)."""
        return self._request

    @translating
    def record(self) -> JobRecord | None:
        return self._kept(self._jobs.get(self.id))

    def _glance(self) -> JobRecord | None:
        """The job's record as the waiter reads it (:meth:`_look`)."""
        return self._look(self.id)[0]

    def _look(self, job_id: str, task_id: str | None = None) -> tuple[JobRecord | None, bool]:
        """A record and whether a task ended (:meth:`JobStore.look`). While :meth:`write` waits,
        read brief: without what the job's parts reported into it (a long document's ranges
        report tens of megabytes there, read again at every slice), but the own task's report
        until it is kept; a range's record for progress without its outcome."""
        if not self._defer:
            return self._jobs.look(job_id, task_id)
        if job_id != self.id:
            return self._jobs.brief(job_id), False
        keep = own_part(self._capability) if self._own_kept is None else None
        record, ended = self._jobs.look(job_id, task_id, brief=True, keep_part=keep)
        return self._kept(record), ended

    def _kept(self, record: JobRecord | None) -> JobRecord | None:
        """``record``, with what the job's own task reported into it kept while :meth:`write` waits."""
        if self._defer and record is not None and record.parts \
                and (kept := record.kept_part(own_part(self._capability))) is not None:
            self._own_kept = kept
        return record

    @translating
    def state(self) -> JobState:
        record = self._glance()
        return record.state if record is not None else JobState.FAILED

    @translating
    def progress(self) -> Progress | None:
        """The job's progress: a split job's summed over its ranges (pages across parts); a job
        whose own task reported while a companion part runs, that part's (a video's speech, in
        seconds); else its own."""
        record = self._glance()
        if record is None:
            return None
        if record.parts and record.request.span is not None:
            return self._split_progress(record)
        if (part := self._running_part(record)) is not None and (running := self._look(part)[0]) is not None:
            return running.progress
        return record.progress

    def _split_progress(self, record: JobRecord) -> Progress:
        """Pages across the ranges: a finished range counts whole, a running one by its share."""
        own = record.request.span
        assert own is not None
        done, total, unit = 0, 0, None
        for name, job_id in [(None, self.id), *record.parts.items()]:
            part = record if name is None else self._look(job_id)[0]
            span = part.request.span if part is not None else None
            size = (span or own).count  # a range whose record is gone: counted as the first range's size
            progress = part.progress if part is not None else None
            finished = part is not None and (part.final or (name is None and record.own_reported))
            if finished:
                done += size
            elif progress is not None and progress.total:
                done += min(size, size * progress.done // progress.total)  # its share of its range
            total += size
            unit = unit or (progress.unit if progress is not None else None)
        return Progress(done=min(done, total), total=total, unit=unit or "pages")

    @translating
    def cancel(self) -> JobState | None:
        """Stop the job (and every part): a queued job never starts; a running one stops at its
        next progress point.

        Cancellation lives in the job record, not in Celery's revoke list (which workers keep in
        memory by task id and would hold against a later resubmission of the same job).
        """
        return self._jobs.cancel(self.id)

    @staticmethod
    def _running_part(record: JobRecord) -> str | None:
        """The first part still to report, once the job's own task has (else None)."""
        if not record.parts or not record.own_reported or record.final:
            return None
        return next((job_id for name, job_id in record.parts.items() if not record.reported(name)), None)

    def _finished(self, record: JobRecord | None = None) -> Outcome | JobRecord | None:
        record = record or self._glance()
        if record is not None and record.forged:
            return _untrusted(self._request)
        if record is not None and record.final and (outcome := self._outcome_of(record)) is not None:
            return outcome
        return None

    def _outcome_of(self, record: JobRecord) -> Outcome | JobRecord | None:
        """A final record's outcome; while :meth:`write` waits, a split job's done record itself
        (its joined outcome, tens of megabytes for a long document, not read)."""
        if self._defer and record.job_id == self.id and record.state == JobState.DONE and record.parts \
                and not record.forged:
            return record
        return record.outcome

    @translating
    def bundle(
        self, timeout: float | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> EvidenceBundle:
        outcome = self._wait(timeout, on_progress)
        assert isinstance(outcome, Outcome)
        return build_bundle(outcome, self._capability)

    @translating
    def write(self, lines_to: Path, turtle_to: Path | None, *, claims: CallerClaims | None = None,
              form: str = "jsonl", timeout: float | None = None,
              on_progress: Callable[[Progress], None] | None = None) -> Written:
        """Wait as :meth:`bundle` does; a split PDF job that finished ok has its bundle (with
        ``claims``) written to ``lines_to`` in ``form`` and its PROV as Turtle to ``turtle_to``
        from its ranges' outcomes, read one at a time, its joined outcome never read
        (:func:`mediafleet.adapters.pdf_stream.write_joined_bundle`): what was written comes back.
        The first range's outcome is the one the job's own task reported into the record, which
        the finished record keeps (so a job that finished before this wait began is written the
        same way). Any other job, or one whose ranges' outcomes cannot all be read as they were
        joined (a range's record is gone or fails its checks, a record finished before its own
        range's report was kept), has its bundle held whole (with ``claims``, as :meth:`bundle` gives
        it) written the same way.

        Raises:
            TimedOut: the job did not finish within ``timeout``.
            OSError: a file could not be written.
        """
        from mediafleet.adapters.pdf_stream import streams, write_joined_bundle, written_whole

        self._defer = streams(self._capability)
        try:
            done = self._wait(timeout, on_progress)
        finally:
            self._defer = False
        if isinstance(done, JobRecord):
            splits = {name for name, part in self._capability.parts.items() if part.split is not None}
            ranges = _Ranges(self._jobs, done, self._own_kept, own_part(self._capability), splits)
            written = write_joined_bundle(ranges, self._capability, lines_to, turtle_to=turtle_to, claims=claims,
                                          form=form)
            if written is not None:
                return written
            done = self._wait(timeout, on_progress)  # the record is final: its outcome, as bundle() reads it
        assert isinstance(done, Outcome)
        return written_whole(with_claims(build_bundle(done, self._capability), claims), lines_to, turtle_to, form)

    def _wait(self, timeout: float | None, on_progress: Callable[[Progress], None] | None) -> Outcome | JobRecord:
        """The job's outcome once it has one (see :meth:`_outcome_of` for a record instead)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        watch, self._watch = self._watch, None
        claimed, self._claimed = self._claimed, None
        try:
            while True:
                left = _PROGRESS_SLICE_S if deadline is None else min(_PROGRESS_SLICE_S, deadline - time.monotonic())
                try:
                    watch = watch or self._jobs.watch()
                    if claimed is not None:
                        token, claimed = claimed, None  # its watch followed it before the claim: this once
                        outcome = self._wait_claimed(watch, max(left, 0.0), on_progress, token)
                    else:
                        outcome = self._wait_slice(watch, max(left, 0.0), on_progress)
                    if outcome is not None:
                        break
                except _REDIS_AWAY:
                    # Redis restarting or failing over: the records and queues come back with it (the
                    # client retried for a while already); keep waiting until the caller's deadline,
                    # on a new subscription.
                    if watch is not None:
                        watch.discard()
                    watch = None
                    time.sleep(max(0.0, min(left, 0.5)))
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimedOut("the job did not finish within the wait timeout")
        finally:
            if watch is not None:
                watch.close()
        return outcome

    def _wait_claimed(self, watch: Watch, left: float, on_progress: Callable[[Progress], None] | None,
                      token: str) -> Outcome | JobRecord | None:
        """The first wait of a job its own submission (``token``) just claimed, on a watch that
        followed it before the claim: the record is as the claim wrote it (queued or held, no
        outcome, the result of any earlier task of it forgotten), so it is not read first. Then as
        :meth:`_wait_slice` (woken by the write of its outcome, the notice is taken as the record)."""
        if not watch.wait(left):
            if on_progress is not None and (p := self.progress()) is not None:
                on_progress(p)
            return None
        if (woken := watch.woken_by) is not None and woken[0] == finished_channel(self.id) \
                and (noticed := self._jobs.noticed(self.id, woken[1], self._request, token)) is not None:
            return self._finished(noticed)
        return None

    def _wait_slice(self, watch: Watch, left: float,
                    on_progress: Callable[[Progress], None] | None) -> Outcome | JobRecord | None:
        """Wait up to ``left`` seconds for the job; its outcome, or None to wait on.

        The job's record wakes the wait the moment its outcome is written (it publishes on the
        job's finished channel); the Celery result of the task waited on wakes it when that task
        ended without writing one. The short slices are only there to report progress in between.
        """
        # Subscribed before the record is read, so an outcome written in between cannot go unseen.
        # The record and whether the task waited on has ended are read together (one round trip).
        watch.follow(self.id, self._waited)
        record, ended = self._look(self.id, self._waited)
        waited = (self._running_part(record) or self.id) if record is not None else None
        if waited is not None and waited != self._waited:  # its own task reported: now a part's
            self._waited = waited
            watch.follow(self.id, waited)
            record, ended = self._look(self.id, waited)
        if (outcome := self._finished(record)) is not None:
            return outcome
        if waited is None or ended:
            if (outcome := self._settle(waited)) is not None:
                return outcome
            # Ended without an outcome that counts (a stale delivery's, or one on its way): poll.
            time.sleep(min(left, 0.1))
            return None
        if not watch.wait(left):
            if on_progress is not None and (p := self.progress()) is not None:
                on_progress(p)
            return None
        # Woken by the write of its outcome: the notice carries what was written (checked as the
        # record would be, and for the submission just read), so the record need not be read again.
        if (woken := watch.woken_by) is not None and woken[0] == finished_channel(self.id) and record is not None \
                and (noticed := self._jobs.noticed(self.id, woken[1], self._request, record.token)) is not None:
            return self._finished(noticed)
        return None

    def _settle(self, ended: str | None) -> Outcome | JobRecord | None:
        """The task ``ended`` (this job's own, or a part's; None: the job has no record) has ended
        but the job has no outcome yet: find out why.

        Its worker may have been killed or timed out before writing one (the job fails here with
        the reason); a part's worker likewise (its failure is reported into the job as that
        part's, and decides the job when the part's kind says so); or the last reporter died
        before joining (the join is done here). None when the outcome is simply on its way, or the
        job moved on meanwhile (its own task reported: the next part is waited on, never taken
        for lost because another task ended).
        """
        # Read after the task was seen ending: a task reports before it ends, so this record holds
        # whatever it reported (one read before that could wrongly count its job as lost).
        record = self._glance()
        if record is not None and record.final and (outcome := self._outcome_of(record)) is not None:
            return outcome
        part = self._running_part(record) if record is not None else None
        if part is not None and part != ended:
            return None
        if part is None:
            if record is not None and record.own_reported:
                # Its own task and every part reported: joined meanwhile, or the joiner died.
                if not record.final and record.pending_parts <= 0 and self._stuck():
                    join_and_index(self._jobs, self.id, self._manifest, self._index_setting)
                return self._finished()
            lost = self._lost(self._app.AsyncResult(self.id), self._request)
            if lost is not None and record is not None:
                for job_id in record.parts.values():
                    self._jobs.cancel(job_id)  # the job failed: its parts are not wanted
            return lost
        assert record is not None
        name = next(n for n, job_id in record.parts.items() if job_id == part)
        running = self._jobs.get(part)
        if running is not None and running.final and running.outcome is not None:
            reported: Outcome | None = running.outcome
        elif running is not None:
            lost_part = self._lost(self._app.AsyncResult(part), running.request)
            assert not isinstance(lost_part, JobRecord)  # a part's record is never taken as it is
            reported = lost_part
        else:  # the part's record is gone (expired): it is lost
            reported = Outcome.failed(self._request.model_copy(update={"job_id": part}), PublicError(
                code=ErrorCode.WORKER_LOST, retryable=True, message="the part's record is gone"), _now())
        if reported is None:
            return None
        of = PartOf(job_id=self.id, action=self._request.action, part=name)
        if (joined := report_part(self._jobs, self._manifest, of, reported)) is not None:
            index_finished(self._index_setting, joined, self._manifest)
        elif self._stuck():
            join_and_index(self._jobs, self.id, self._manifest, self._index_setting)
        return self._finished()

    def _stuck(self) -> bool:
        """Every part reported, yet no outcome, and the joiner died: the join is left to us.

        A joiner joins inside its task, before the task's Celery result lands, so a join still
        under way (a long document's takes seconds) is told from a dead joiner by the tasks: when
        every task of the job has a result and the record has no outcome, nobody is joining. A
        record that has not moved for ``_JOINER_GONE_S`` is taken as stuck too (a part reused from
        an earlier submission may have no Celery result left to wait for).
        """
        record = self._glance()
        if record is None or record.final or record.pending_parts > 0:
            return False
        if time.time() - record.updated_at > _JOINER_GONE_S:
            return True
        return all(self._app.AsyncResult(task).ready() for task in (self.id, *record.parts.values()))

    def _lost(self, result: Any, request: ExtractRequest) -> Outcome | JobRecord | None:
        """The outcome of a task whose worker could not write one (killed, timed out, revoked),
        recorded as that job's failure; None when nothing was lost (the task returned: its outcome
        is stored, or it was a stale delivery and the live one will write it).

        A lost worker or a timeout says nothing about the input: recorded as retryable, so a
        resubmission runs the job again. The failure is written only while the record still names
        the delivery that was lost (a newer delivery on another worker is not failed for it).
        """
        record = self._jobs.get(request.job_id) if request.job_id != self.id else self._glance()
        if record is not None and record.final and (outcome := self._outcome_of(record)) is not None:
            return outcome
        status, info = result.state, result.info
        cancelled = status == "REVOKED" or (record is not None and record.state == JobState.CANCELLED)
        if status == "SUCCESS" and not cancelled:
            return None
        # A task that ended while no delivery of this submission had started (the claim forgets any
        # earlier task's result) failed before its start: its worker could not read the request (one
        # of another release, say) or reach the job's record. Nothing of it ran, and the record names
        # no host to check it against.
        unstarted = record is not None and record.state == JobState.QUEUED and record.attempts == 0
        if cancelled:
            error = PublicError(code=ErrorCode.CANCELLED, message="the job was cancelled")
        elif unstarted:
            error = PublicError(code=ErrorCode.WORKER_LOST, retryable=True,
                                message="a worker failed the job before starting it (a worker of another release, "
                                        "or one that could not read its request); it can be submitted again")
        elif type(info).__name__ == "TimeLimitExceeded":
            error = PublicError(code=ErrorCode.TIMEOUT, retryable=True,
                                message=f"{request.action} ran past its hard time limit; its worker process was replaced")
        else:
            error = PublicError(code=ErrorCode.WORKER_LOST, retryable=True,
                                message="the worker failed before finishing the job")
        outcome = Outcome.failed(request, error, _now())
        if record is None:
            return outcome
        worker = getattr(result, "worker", None) if not cancelled and not unstarted else None
        if self._jobs.finish(outcome, seen_attempts=record.attempts, hostname=worker or None):
            return outcome
        after = self._jobs.get(request.job_id) if request.job_id != self.id else self._glance()
        return self._outcome_of(after) if after is not None and after.final else None


class _Ranges:
    """A split job's ranges' outcomes, read as its join read them, one at a time: the first range's
    from what the job's own task reported into the record (kept by the waiter as it saw it, or by
    the finished record), each further range's from its part's own record (the same outcome its
    part reported into the job). Validated as this job's or this part's, its signature checked with signing on,
    a blob re-hashed. No ranges (``spans`` empty) when the first range's report was not kept for
    this submission, or a part is not a page range."""

    def __init__(self, jobs: JobStore, record: JobRecord, own: JobRecord | None, own_name: str,
                 splits: set[str]) -> None:
        self._jobs, self._own_name, self._job_id = jobs, own_name, record.job_id
        self._own = own if own is not None and own.token is not None and own.token == record.token else None
        self._parts: dict[tuple[int, int], str] = {}
        self.spans: list[Span] = []
        first = record.request.span
        if self._own is None or first is None:
            return
        spans = [first]
        for name, job_id in record.parts.items():
            kind, _, pages = name.partition(":")
            low, _, high = pages.partition("-")
            if kind not in splits or not low.isdigit() or not high.isdigit() or int(low) < 1 or int(high) < int(low):
                return
            span = Span(first=int(low), last=int(high))
            self._parts[span.first, span.last] = job_id
            spans.append(span)
        self.spans = sorted(spans, key=lambda s: s.first)
        self._first = (first.first, first.last)

    def read(self, span: Span) -> Outcome | None:
        key = (span.first, span.last)
        if key == self._first:
            assert self._own is not None
            outcome = self._own.part(self._own_name)
            return outcome if outcome is not None and outcome.job_id == self._job_id else None
        job_id = self._parts.get(key)
        record = self._jobs.get(job_id) if job_id is not None else None
        if record is None or record.forged or record.state != JobState.DONE or record.request.span != span:
            return None
        outcome = record.outcome
        return outcome if outcome is not None and outcome.job_id == job_id else None
