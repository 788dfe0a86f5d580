"""Fencing: a delivery owns its job's record by its number, so a worker cut off from Redis that
finishes late, after lost-node recovery (on by default) gave the job to a replacement, can never
have its outcome taken, nor overwrite the replacement's.

Checked on the real job store against a real redis-server: the cut-off worker is a delivery whose
heartbeat is gone (what a cut-off worker looks like from Redis), then comes back with its outcome.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, JobState, Outcome
from mediafleet.contract.manifest import Modality
from mediafleet.fleet.store import JobStore
from mediafleet.settings import Settings

CUT_OFF = "w-cut@test"
REPLACEMENT = "w-new@test"


def _request(n: int = 1) -> ExtractRequest:
    return ExtractRequest(job_id=f"mf-{n:032x}", action="ocr_pdf", options={},
                          artifact=ArtifactRef(digest="sha256:" + f"{n:064x}", media_type="application/pdf", bytes=10,
                                               modality=Modality.PDF))


def _outcome(request: ExtractRequest, by: str) -> Outcome:
    return Outcome.failed(request, PublicError(code=ErrorCode.INTERNAL_ERROR, message=f"written by {by}"),
                          datetime.now(UTC))


def _taken_over(jobs: JobStore, request: ExtractRequest) -> tuple[int, int]:
    """The cut-off worker's delivery and its replacement's, after recovery requeued the job."""
    token = jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
    assert token is not None
    first, _, _ = jobs.start(request.job_id, CUT_OFF, token)
    # The cut-off worker's heartbeat is gone (none was ever written here) and the record is quiet.
    jobs.client.hset(jobs.key(request.job_id), "updated_at", time.time() - 60)
    record = jobs.get(request.job_id)
    assert record is not None and record.worker_alive is False
    assert jobs.requeue_lost(record, quiet_s=15) == token
    assert jobs.requeue_lost(record, quiet_s=15) is None  # queued again once, not per sweep
    second, before, _ = jobs.start(request.job_id, REPLACEMENT, token)
    assert before == JobState.QUEUED
    return first, second


def test_lost_node_recovery_is_on_by_default(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("MEDIAFLEET_RECOVER_LOST_WORKERS", raising=False)
    assert Settings.load().recover_lost_workers is True


def test_a_cut_off_workers_late_outcome_is_refused_and_the_replacements_kept(jobs: JobStore) -> None:
    request = _request(1)
    cut_off, replacement = _taken_over(jobs, request)
    assert (cut_off, replacement) == (1, 2)
    # Back before the replacement finished: refused, the job still runs on the replacement.
    assert not jobs.finish(_outcome(request, CUT_OFF), delivery=cut_off, announce=True)
    record = jobs.get(request.job_id)
    assert record is not None and record.state == JobState.STARTED and record.hostname == REPLACEMENT
    assert jobs.finish(_outcome(request, REPLACEMENT), delivery=replacement, announce=True)
    # Back after it finished: refused too, the replacement's outcome stays.
    assert not jobs.finish(_outcome(request, CUT_OFF), delivery=cut_off, announce=True)
    record = jobs.get(request.job_id)
    assert record is not None and record.state == JobState.FAILED and record.attempts == 2
    assert record.outcome is not None and record.outcome.error is not None
    assert record.outcome.error.message == f"written by {REPLACEMENT}"


def test_a_cut_off_workers_late_part_report_is_refused(jobs: JobStore) -> None:
    """A job with parts: the cut-off delivery of its own task reports its part late; it is not
    taken, and the replacement's report is."""
    request = _request(2)
    token = jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600,
                       parts={"speech": "mf-" + "ef" * 16})
    assert token is not None
    cut_off, _, _ = jobs.start(request.job_id, CUT_OFF, token)
    jobs.client.hset(jobs.key(request.job_id), "updated_at", time.time() - 60)
    record = jobs.get(request.job_id)
    assert record is not None and jobs.requeue_lost(record, quiet_s=15) == token
    replacement, _, _ = jobs.start(request.job_id, REPLACEMENT, token)
    assert jobs.report_part(request.job_id, "video", _outcome(request, CUT_OFF), delivery=cut_off) == -1
    assert jobs.report_part(request.job_id, "video", _outcome(request, REPLACEMENT), delivery=replacement) == 1
    part = jobs.read_part(request.job_id, "video")
    assert part is not None and part.error is not None and part.error.message == f"written by {REPLACEMENT}"
