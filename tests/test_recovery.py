"""A started job whose outcome never landed is run again, not stranded: recovery by heartbeat.

A worker's heartbeat lists the jobs it holds (``running``). A record that says ``started`` on a
worker whose heartbeat has gone (a lost node), or on a live worker whose latest beat no longer
lists the job (the outcome written just before a Redis crash was lost with it, or the worker was
restarted under the same name), is queued again, once; a job its worker still holds, however long
it runs, is not. The rule is checked on the real job store against a real redis-server, and end to
end with a real worker and a record put back the way a lost write leaves it.
"""

from __future__ import annotations

import json
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, JobState
from mediafleet.contract.manifest import Modality
from mediafleet.dispatch import Dispatcher
from mediafleet.fleet.store import JobStore
from mediafleet.fleet.presence import HEARTBEAT_S, Announcer, worker_key
from mediafleet.settings import Settings
from mediafleet.workers.runtime.boot import held_jobs
from tests.helpers import wait_for
from tests.media import text_pdf

WORKER = "w1@test"
QUIET_S = 15


def started(jobs: JobStore, job_id: str = "mf-" + "ab" * 16, moved_s_ago: float = 60.0) -> str:
    """A job started by ``WORKER`` whose record last moved ``moved_s_ago`` seconds ago."""
    request = ExtractRequest(job_id=job_id, action="ocr_pdf", options={},
                             artifact=ArtifactRef(digest="sha256:" + "cd" * 32, media_type="application/pdf",
                                                  bytes=10, modality=Modality.PDF))
    token = jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
    assert token is not None
    attempt, _, _ = jobs.start(job_id, WORKER, token)
    assert attempt == 1
    jobs.client.hset(jobs.key(job_id), "updated_at", time.time() - moved_s_ago)
    return job_id


def beat(jobs: JobStore, running: list[str] | None, at: float | None = None) -> None:
    body: dict[str, Any] = {"hostname": WORKER, "device": "cpu", "queues": [], "pid": 1,
                            "at": time.time() if at is None else at}
    if running is not None:
        body["running"] = running
    jobs.client.set(worker_key(WORKER), json.dumps(body), ex=60)


def test_a_job_its_live_worker_still_holds_is_not_taken_however_quiet(jobs: JobStore) -> None:
    job = started(jobs, moved_s_ago=3600)
    beat(jobs, running=[job])
    assert jobs.requeue_lost(jobs.get(job), QUIET_S) is None
    assert jobs.get(job).state == JobState.STARTED


def test_a_job_its_live_worker_no_longer_holds_is_queued_again_once(jobs: JobStore) -> None:
    job = started(jobs)
    beat(jobs, running=["mf-" + "ef" * 16])  # busy with another job
    token = jobs.requeue_lost(jobs.get(job), QUIET_S)
    assert token is not None
    record = jobs.get(job)
    assert record.state == JobState.QUEUED and record.hostname is None
    assert jobs.requeue_lost(record, QUIET_S) is None  # once


def test_a_job_of_a_lost_worker_is_queued_again(jobs: JobStore) -> None:
    job = started(jobs)  # and no presence key at all
    assert jobs.requeue_lost(jobs.get(job), QUIET_S) is not None


def test_a_record_that_moved_recently_is_left_alone(jobs: JobStore) -> None:
    job = started(jobs, moved_s_ago=QUIET_S - 5)
    beat(jobs, running=[])
    assert jobs.requeue_lost(jobs.get(job), QUIET_S) is None


def test_a_beat_that_lists_nothing_never_lets_a_live_workers_job_be_taken(jobs: JobStore) -> None:
    """An older worker, or one that could not read its own state, says nothing of what it holds."""
    job = started(jobs)
    beat(jobs, running=None)
    assert jobs.requeue_lost(jobs.get(job), QUIET_S) is None
    jobs.client.set(worker_key(WORKER), "not json", ex=60)
    assert jobs.requeue_lost(jobs.get(job), QUIET_S) is None


def test_only_a_beat_a_heartbeat_after_the_record_moved_counts(jobs: JobStore) -> None:
    """A beat sent while the job was being handed to the pool may not list it yet."""
    job = started(jobs)
    moved = float(jobs.client.hget(jobs.key(job), "updated_at"))
    beat(jobs, running=[], at=moved + HEARTBEAT_S / 2)
    assert jobs.requeue_lost(jobs.get(job), QUIET_S) is None
    beat(jobs, running=[], at=moved + HEARTBEAT_S)
    assert jobs.requeue_lost(jobs.get(job), QUIET_S) is not None


def test_a_beat_lists_the_jobs_the_worker_holds(jobs: JobStore) -> None:
    announcer = Announcer(jobs.client, WORKER, "cpu", ["mf.ocr_pdf.cpu"], running=lambda: ["mf-b", "mf-a"])
    announcer.start()
    try:
        body = json.loads(jobs.client.get(worker_key(WORKER)))
        assert body["running"] == ["mf-a", "mf-b"] and body["hostname"] == WORKER
    finally:
        announcer.stop()
    silent = Announcer(jobs.client, WORKER, "cpu", [], running=lambda: None)
    silent.start()
    try:
        assert "running" not in json.loads(jobs.client.get(worker_key(WORKER)))
    finally:
        silent.stop()


class _Request:
    def __init__(self, task_id: str) -> None:
        self.id = task_id


def test_held_jobs_are_the_workers_prefetched_and_running_requests() -> None:
    from celery.worker import state

    reserved, active = _Request("mf-reserved"), _Request("mf-active")
    state.reserved_requests.add(reserved)
    state.active_requests.add(active)
    try:
        held = held_jobs()
        assert held is not None and {"mf-reserved", "mf-active"} <= set(held)
    finally:
        state.reserved_requests.discard(reserved)
        state.active_requests.discard(active)
    assert weakref.ref(reserved)() is reserved  # plain objects, only borrowed by the weak sets


@pytest.mark.integration
def test_a_finished_job_whose_outcome_was_lost_runs_again_on_its_live_worker(
    fleet_env: dict[str, str], start_worker: Any, tmp_path: Path
) -> None:
    """Redis lost the last second of writes in a crash: the record says started on a worker that is
    alive but finished the job long ago (its message acknowledged, so the broker never redelivers
    it). Before, the job sat started until the record expired; now that worker's own heartbeat
    (or any steady worker's) queues it again and it finishes."""
    worker = start_worker("--concurrency=1")
    dispatcher = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"],
                                     blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"])))
    job = dispatcher.submit(text_pdf(1))
    assert job.bundle(timeout=120).status == "ok"
    store = dispatcher.jobs()
    done = store.get(job.id)
    key = store.key(job.id)
    # What the record held before the lost writes: started on this worker, no outcome yet.
    store.client.hset(key, mapping={"state": "started", "hostname": done.hostname or worker.hostname,
                                    "updated_at": time.time() - 60})
    store.client.hdel(key, "outcome")
    store.client.sadd("mediafleet:started", job.id)
    lost_at = time.monotonic()
    wait_for(lambda: (r := store.get(job.id)) is not None and r.state == JobState.DONE and r.outcome is not None,
             timeout=90, what="the stranded job to run again")
    record = store.get(job.id)
    assert record.attempts == 2
    print(f"\nrecovery: a stranded started job ran again and finished {time.monotonic() - lost_at:.1f} s "
          "after its record was left started")


def test_one_worker_at_a_time_looks_for_lost_jobs(jobs) -> None:  # type: ignore[no-untyped-def]
    """The sweep through started records is taken in turns across the fleet: the first steady
    worker to ask in a heartbeat period sweeps, the others skip it; the turn lapses by itself, so a
    lost sweeper is replaced within one period."""
    import time

    assert jobs.sweep_turn("a:1", 0.6)
    assert not jobs.sweep_turn("b:2", 0.6) and not jobs.sweep_turn("a:1", 0.6)
    time.sleep(0.5)
    assert jobs.sweep_turn("b:2", 0.6)
