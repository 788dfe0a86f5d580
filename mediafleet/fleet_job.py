"""The fleet's handle on one job: its state from the fleet's job record, woken by Celery's result.

It also settles a job whose worker could not report (killed, timed out, revoked): the failure is
recorded as that job's, and a job with a speech part is joined here when its last reporter died
before joining.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from mediafleet.adapters.bundle import build_bundle
from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.contract.errors import ErrorCode, PublicError, TimedOut
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome, Progress
from mediafleet.contract.manifest import Capability, Manifest
from mediafleet.discovery.hook import index_finished
from mediafleet.job import Job
from mediafleet.jobstore import JobRecord, JobStore
from mediafleet.unreachable import redis_away_errors
from mediafleet.workers.parts import SPEECH_ACTION

__all__ = ["FleetJob", "join_and_index"]

_PROGRESS_SLICE_S = 0.5


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
    from mediafleet.workers.app import join_parts

    if (joined := join_parts(jobs, job_id, manifest)) is not None:
        index_finished(index_setting, joined, manifest)


class FleetJob(Job):
    """A job on the fleet: its state from the fleet's job record, woken by Celery's result.

    A job with a speech part is waited on through its own task until that has reported, then
    through the speech job's; whichever reports last writes the joined outcome.
    """

    def __init__(self, app: Any, jobs: JobStore, capability: Capability, request: ExtractRequest,
                 manifest: Manifest, index_setting: str | None = None) -> None:
        super().__init__(request.job_id, request.action)
        self._app = app
        self._jobs = jobs
        self._capability = capability
        self._request = request
        self._manifest = manifest
        self._index_setting = index_setting  # settings.discovery_index, for a join done here

    def record(self) -> JobRecord | None:
        return self._jobs.get(self.id)

    def state(self) -> JobState:
        record = self.record()
        return record.state if record is not None else JobState.FAILED

    def progress(self) -> Progress | None:
        """The job's own progress; once only its speech part runs, that part's (in seconds)."""
        record = self.record()
        if record is None:
            return None
        if (part := self._running_part(record)) is not None and (speech := self._jobs.get(part)) is not None:
            return speech.progress
        return record.progress

    def cancel(self) -> JobState | None:
        """Stop the job (and its speech part): a queued job never starts; a running one stops at its
        next progress point.

        Cancellation lives in the job record, not in Celery's revoke list (which workers keep in
        memory by task id and would hold against a later resubmission of the same job).
        """
        return self._jobs.cancel(self.id)

    @staticmethod
    def _running_part(record: JobRecord) -> str | None:
        """The speech job still to report, once the job's own task has (else None)."""
        if record.speech_job is not None and record.part("video") is not None and not record.final:
            return record.speech_job
        return None

    def _finished(self) -> Outcome | None:
        record = self.record()
        if record is not None and record.forged:
            return _untrusted(self._request)
        if record is not None and record.final and (outcome := record.outcome) is not None:
            return outcome
        return None

    def bundle(
        self, timeout: float | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> EvidenceBundle:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _PROGRESS_SLICE_S if deadline is None else min(_PROGRESS_SLICE_S, deadline - time.monotonic())
            try:
                if (outcome := self._wait_slice(max(left, 0.0), on_progress)) is not None:
                    break
            except _REDIS_AWAY:
                # Redis restarting or failing over: the records and queues come back with it (the
                # client retried for a while already); keep waiting until the caller's deadline.
                time.sleep(max(0.0, min(left, 0.5)))
            if deadline is not None and time.monotonic() >= deadline:
                raise TimedOut("the job did not finish within the wait timeout")
        return build_bundle(outcome, self._capability)

    def _wait_slice(self, left: float, on_progress: Callable[[Progress], None] | None) -> Outcome | None:
        """Wait up to ``left`` seconds for the job; its outcome, or None to wait on."""
        from celery.exceptions import TimeoutError as CeleryTimeout

        if (outcome := self._finished()) is not None:
            return outcome
        record = self.record()
        waited = self._app.AsyncResult(self._running_part(record) or self.id) if record is not None else None
        if waited is None or waited.ready():
            if (outcome := self._settle()) is not None:
                return outcome
            # Ended without an outcome that counts (a stale delivery's, or one on its way): poll.
            time.sleep(min(left, 0.1))
            return None
        # The Redis backend wakes get() through pub/sub the moment the result lands; the short
        # slices are only there to report progress in between.
        try:
            waited.get(timeout=left, propagate=False, disable_sync_subtasks=False)
        except CeleryTimeout:
            if on_progress is not None and (p := self.progress()) is not None:
                on_progress(p)
        return None

    def _settle(self) -> Outcome | None:
        """A task this job waits on has ended but the job has no outcome yet: find out why.

        Its worker may have been killed or timed out before writing one (the job fails here with
        the reason); a speech part's worker likewise (its failure is reported into the job as the
        speech part's); or the last reporter died before joining (the join is done here). None when
        the outcome is simply on its way.
        """
        # Read after the task was seen ending: a task reports before it ends, so this record holds
        # whatever it reported (one read before that could wrongly count its job as lost).
        record = self.record()
        if record is not None and record.final and (outcome := record.outcome) is not None:
            return outcome
        part = self._running_part(record) if record is not None else None
        if part is None:
            if record is not None and record.part("video") is not None:
                return self._finished()  # its own task reported and the job finished meanwhile
            lost = self._lost(self._app.AsyncResult(self.id), self._request)
            if lost is not None and record is not None and record.speech_job is not None:
                self._jobs.cancel(record.speech_job)  # the job failed: its speech part is not wanted
            return lost
        speech = self._jobs.get(part)
        if speech is not None and speech.final and speech.outcome is not None:
            reported: Outcome | None = speech.outcome
        else:
            reported = self._lost(self._app.AsyncResult(part), speech.request if speech else self._part_request(part))
        if reported is None:
            return None
        if self._jobs.report_part(self.id, "speech", reported) == 0 or self._stuck():
            join_and_index(self._jobs, self.id, self._manifest, self._index_setting)
        return self._finished()

    def _stuck(self) -> bool:
        """Every part reported, yet no outcome (the joiner died): the join is left to us."""
        time.sleep(0.2)
        record = self.record()
        return record is not None and not record.final and record.pending_parts <= 0

    def _part_request(self, part: str) -> ExtractRequest:
        return self._request.model_copy(update={"job_id": part, "action": SPEECH_ACTION})

    def _lost(self, result: Any, request: ExtractRequest) -> Outcome | None:
        """The outcome of a task whose worker could not write one (killed, timed out, revoked),
        recorded as that job's failure; None when nothing was lost (the task returned: its outcome
        is stored, or it was a stale delivery and the live one will write it).

        A lost worker or a timeout says nothing about the input: recorded as retryable, so a
        resubmission runs the job again. The failure is written only while the record still names
        the delivery that was lost (a newer delivery on another worker is not failed for it).
        """
        record = self._jobs.get(request.job_id)
        if record is not None and record.final and (outcome := record.outcome) is not None:
            return outcome
        status, info = result.state, result.info
        cancelled = status == "REVOKED" or (record is not None and record.state == JobState.CANCELLED)
        if status == "SUCCESS" and not cancelled:
            return None
        if cancelled:
            error = PublicError(code=ErrorCode.CANCELLED, message="the job was cancelled")
        elif type(info).__name__ == "TimeLimitExceeded":
            error = PublicError(code=ErrorCode.TIMEOUT, retryable=True,
                                message=f"{request.action} ran past its hard time limit; its worker process was replaced")
        else:
            error = PublicError(code=ErrorCode.WORKER_LOST, retryable=True,
                                message="the worker failed before finishing the job")
        outcome = Outcome.failed(request, error, _now())
        if record is None:
            return outcome
        worker = getattr(result, "worker", None) if not cancelled else None
        if self._jobs.finish(outcome, seen_attempts=record.attempts, hostname=worker or None):
            return outcome
        after = self._jobs.get(request.job_id)
        return after.outcome if after is not None and after.final else None
