"""Who may write a job's record: the delivery that owns it, once; never a stale run, never twice.

Real redis-server, real worker processes (tests/faulty_worker.py: ``MF-SLOW`` takes ~4 s with
progress), the real dispatcher and job store.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
import redis

from mediafleet.contract import JobState
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, Outcome
from mediafleet.contract.manifest import Modality, default_manifest
from mediafleet.fleet.store import JobStore
from tests.chaos.conftest import freeze, thaw
from tests.helpers import wait_for
from mediafleet.fleet.reports import join_parts
from mediafleet.workers.runtime.message import send_extract

pytestmark = pytest.mark.integration


def test_a_stale_redelivery_never_overwrites_a_finished_job(fleet_env, slow_fleet) -> None:  # type: ignore[no-untyped-def]
    """Failure 2: a worker frozen (SIGSTOP) while another runs its redelivered message. The second
    worker finishes the job and the caller gets ``ok``; thawed past its soft limit, the stale run
    times out, and its ``timeout`` must not replace the finished record."""
    setup = slow_fleet(soft_s=6, hard_s=30)
    fleet, (frozen,) = setup.dispatcher, setup.workers
    pdf, job = setup.submit_slow("stale")
    freeze(frozen.proc.pid)
    frozen_at = time.monotonic()
    try:
        setup.add_worker()
        # What kombu's restore does once the visibility timeout has passed (minutes, even with short
        # limits): the same message, with the same token, back on the queue for another worker.
        client = redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"])
        token = client.hget(fleet.jobs().key(job.id), "token").decode()
        record = fleet.jobs().get(job.id)
        send_extract(fleet.app, record.request, fleet.manifest.capability("ocr_pdf"), token, 4)
        bundle = job.bundle(timeout=40)
        assert bundle.status == "ok"
        time.sleep(max(0.0, 7.5 - (time.monotonic() - frozen_at)))  # the stale run is past its soft limit
    finally:
        thaw(frozen.proc.pid)
    wait_for(lambda: b"succeeded in" in frozen.log.read_bytes(), timeout=30, what="the stale run to end")
    record = fleet.jobs().get(job.id)
    assert record.state == JobState.DONE and record.completions == 1 and record.attempts == 2
    assert record.outcome.status == "ok"
    again = fleet.submit(pdf).bundle(timeout=10)
    assert again.model_dump() == bundle.model_dump()


class _SlowReads(JobStore):
    """A job store whose first two reads meet before either returns: both joiners see the job
    unfinished (as when the waiter's join and a slow worker's join overlap)."""

    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        super().__init__(client, ttl_s)
        self._meet = threading.Barrier(2, timeout=10)
        self._reads = 0
        self._lock = threading.Lock()

    def get(self, job_id: str):  # type: ignore[no-untyped-def]
        record = super().get(job_id)
        with self._lock:
            self._reads += 1
            first_two = self._reads <= 2
        if first_two:
            self._meet.wait()
        return record


def test_the_join_of_a_job_with_parts_finishes_it_once(fleet_env) -> None:
    """Failure 7: the waiter joins a job's parts itself when the worker's join is slow; both must not
    finish it (``completions`` counts the job's outcomes: one)."""
    client = redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"])
    jobs = _SlowReads(client, ttl_s=60)
    artifact = ArtifactRef(digest="sha256:" + "c" * 64, media_type="video/mp4", bytes=10, modality=Modality.VIDEO)
    request = ExtractRequest(job_id="mf-" + "7" * 32, action="extract_keyframes", artifact=artifact)
    assert jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=60,
                      parts={"speech": "mf-" + "8" * 32}) is not None
    now = datetime.now(UTC)
    part = Outcome(job_id=request.job_id, action=request.action, artifact=artifact, status="ok",
                   started_at=now, ended_at=now)
    assert jobs.report_part(request.job_id, "video", part) == 1
    assert jobs.report_part(request.job_id, "speech", part.model_copy(update={"job_id": "mf-" + "8" * 32})) == 0
    manifest = default_manifest()
    joined: list[object] = []
    threads = [threading.Thread(target=lambda: joined.append(join_parts(jobs, request.job_id, manifest)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    record = JobStore(client, 60).get(request.job_id)
    assert record.state == JobState.DONE and record.completions == 1
    assert sum(o is not None for o in joined) == 1  # exactly one joiner finished it (and indexes it)
