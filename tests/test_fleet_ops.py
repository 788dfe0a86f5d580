"""Fleet operations with real processes: job records, routing, cancellation, priorities, crashes.

Every test runs a real redis-server and real ``mediafleet worker`` processes. Misbehaving
extractors come from tests/faulty_worker.py (the only scaffolding: a marker in the PDF's title makes
the real worker's extractor crash, hang or go slowly).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis

from mediafleet.contract import ErrorCode, JobState, default_manifest
from mediafleet import Dispatcher, Settings
from mediafleet.fleet.deliveries import MAX_DELIVERIES
from tests.helpers import wait_for, without_run
from tests.media import marked_pdf, text_pdf
from mediafleet.workers.runtime.config import create_app
from mediafleet.workers.runtime.message import visibility_timeout_s

pytestmark = pytest.mark.integration

FAULTY = "tests.faulty_worker"


def fleet(fleet_env: dict[str, str], tmp_path: Path, **over: object) -> Dispatcher:
    settings = Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"]),
                        **over)
    return Dispatcher(settings)


def test_a_job_with_no_live_worker_is_held_then_runs(fleet_env, start_worker, tmp_path: Path) -> None:
    dispatcher = fleet(fleet_env, tmp_path)
    job = dispatcher.submit(text_pdf(1))
    record = dispatcher.jobs().get(job.id)
    assert record.state == JobState.HELD and "no live worker for ocr_pdf on cpu" in record.held_reason
    assert dispatcher.status()["queues"]["mf.ocr_pdf.cpu"] == 0  # held in its record, on no queue
    start_worker("--concurrency=1")
    assert job.bundle(timeout=120).status == "ok"
    assert dispatcher.jobs().get(job.id).state == JobState.DONE
    assert dispatcher.status()["workers"]["cpu"]


def test_a_worker_declares_the_device_class_it_can_really_serve(fleet_env, start_worker, tmp_path: Path) -> None:
    from mediafleet.workers.gpu import visible_gpus

    start_worker("--concurrency=1", "--device=auto")
    expected = "gpu" if visible_gpus() else "cpu"
    workers = fleet(fleet_env, tmp_path).status()["workers"]
    assert len(workers[expected]) == 1 and not workers["gpu" if expected == "cpu" else "cpu"]


def test_a_held_job_runs_on_the_first_allowed_class_that_comes_up(fleet_env, start_worker, tmp_path: Path) -> None:
    """transcribe_segments prefers gpu, then cpu: held with no worker, it runs when a cpu worker starts."""
    dispatcher = fleet(fleet_env, tmp_path)
    job = dispatcher.submit(Path(__file__).parent / "data" / "speech.flac")
    assert dispatcher.jobs().get(job.id).state == JobState.HELD
    assert dispatcher.status()["queues"]["mf.transcribe_segments.gpu"] == 0
    start_worker("--concurrency=1", "--device=cpu")
    bundle = job.bundle(timeout=180)
    assert bundle.status == "ok"
    record = dispatcher.jobs().get(job.id)
    assert record.request.device.value == "cpu" and record.completions == 1


def test_a_redis_that_may_evict_the_fleets_keys_is_named_by_the_worker_and_by_status(
        fleet_env, start_worker, tmp_path: Path) -> None:
    """Under any policy but ``noeviction`` Redis drops keys to make room at its memory limit: a
    queue's messages (``allkeys-*``) or the job records, which have a TTL (``volatile-*``). The
    worker says so in its log at start-up and ``mediafleet status`` lists it; the fleet still
    serves (a warning, as Sidekiq gives, not a refusal: no limit may be set yet)."""
    client = redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"])
    dispatcher = fleet(fleet_env, tmp_path)
    assert dispatcher.status()["warnings"] == []
    client.config_set("maxmemory-policy", "volatile-lru")
    try:
        worker = start_worker("--concurrency=1")
        line = wait_for(lambda: next((line for line in worker.log.read_text().splitlines()
                                      if "maxmemory-policy volatile-lru" in line), None),
                        what="the worker's warning")
        assert "WARNING" in line and "set maxmemory-policy noeviction" in line
        (warning,) = dispatcher.status()["warnings"]
        assert "maxmemory-policy volatile-lru" in warning
        assert dispatcher.submit(text_pdf(1)).bundle(timeout=120).status == "ok"
    finally:
        client.config_set("maxmemory-policy", "noeviction")
    assert dispatcher.status()["warnings"] == []


def test_a_redis_user_without_info_still_gets_a_status(fleet_env, tmp_path: Path) -> None:
    """The policy is read with ``INFO``; an ACL user refused it gets the status without the check."""
    from mediafleet.fleet.redis_client import eviction_warning

    admin = redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"])
    admin.acl_setuser("mf-noinfo", enabled=True, passwords=["+mf-noinfo-secret"], keys=["*"], channels=["*"],
                      commands=["+@all", "-info"])
    try:
        host, port = admin.connection_pool.connection_kwargs["host"], admin.connection_pool.connection_kwargs["port"]
        refused = redis.Redis(host=host, port=port, username="mf-noinfo", password="mf-noinfo-secret")
        with pytest.raises(redis.exceptions.NoPermissionError):
            refused.info("memory")
        admin.config_set("maxmemory-policy", "allkeys-lru")
        try:
            assert eviction_warning(refused) is None
            assert "maxmemory-policy allkeys-lru" in eviction_warning(admin)
        finally:
            admin.config_set("maxmemory-policy", "noeviction")
    finally:
        admin.acl_deluser("mf-noinfo")


def test_progress_is_recorded_and_the_state_is_never_ambiguous(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1", module=FAULTY)
    dispatcher = fleet(fleet_env, tmp_path)
    assert dispatcher.job("mf-" + "0" * 32) is None  # unknown is unknown, not PENDING
    job = dispatcher.submit(marked_pdf("MF-SLOW"))
    assert job.state() in (JobState.QUEUED, JobState.STARTED)  # the idle worker may have taken it already
    seen = []
    bundle = job.bundle(timeout=120, on_progress=seen.append)
    assert bundle.status == "ok"
    assert seen and all(p.unit == "pages" and p.total == 40 for p in seen)
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    record = dispatcher.jobs().get(job.id)
    assert record.state == JobState.DONE and record.attempts == 1 and record.completions == 1


def test_cancelling_a_queued_job_means_it_never_runs(fleet_env, start_worker, tmp_path: Path) -> None:
    dispatcher = fleet(fleet_env, tmp_path)
    job = dispatcher.submit(text_pdf(1))
    assert dispatcher.cancel(job.id) == JobState.CANCELLED
    start_worker("--concurrency=1")
    after = dispatcher.submit(text_pdf(2)).bundle(timeout=120)  # the queue keeps flowing
    assert after.status == "ok"
    bundle = job.bundle(timeout=60)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.CANCELLED
    assert dispatcher.jobs().get(job.id).completions == 0


def test_resubmitting_a_cancelled_queued_job_runs_it_once(fleet_env, start_worker, tmp_path: Path) -> None:
    dispatcher = fleet(fleet_env, tmp_path)
    pdf = text_pdf(3)
    first = dispatcher.submit(pdf)
    assert dispatcher.cancel(first.id) == JobState.CANCELLED
    again = dispatcher.submit(pdf)  # a new submission of the same job; the old message is still queued
    assert again.id == first.id
    start_worker("--concurrency=1")
    assert again.bundle(timeout=120).status == "ok"
    record = dispatcher.jobs().get(again.id)
    assert record.state == JobState.DONE and record.completions == 1


def test_a_job_recorded_but_never_sent_is_sent_by_a_resubmission(
    fleet_env, start_worker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatcher dies between writing the record and sending the message (where the message
    is sent after the claim, not pushed by it: task-sent events on, a publish signal with
    receivers): the job is not wedged. A resubmission sends it once the record has waited unsent
    for a while; before that it does not (the first dispatcher may only be slow). A second message
    for a job already done runs nothing."""
    import mediafleet.workers.runtime.message

    start_worker("--concurrency=1")
    pdf = text_pdf(4)
    crashing = fleet(fleet_env, tmp_path)

    def die(*args: object, **kwargs: object) -> None:
        raise SystemExit("the dispatcher died")

    monkeypatch.setattr(mediafleet.workers.runtime.message, "extract_message", lambda *args, **kwargs: None)
    monkeypatch.setattr(mediafleet.workers.runtime.message, "send_extract", die)
    with pytest.raises(SystemExit):
        crashing.submit(pdf)
    monkeypatch.undo()

    dispatcher = fleet(fleet_env, tmp_path)
    job = dispatcher.submit(pdf)
    time.sleep(2)  # a live, idle worker: had anything been sent, it would have started
    record = dispatcher.jobs().get(job.id)
    assert record.state == JobState.QUEUED and record.attempts == 0
    client = redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"])
    client.hset(dispatcher.jobs().key(job.id), "updated_at", time.time() - 60)  # a minute unsent
    again = dispatcher.submit(pdf)
    assert again.id == job.id and again.bundle(timeout=120).status == "ok"
    assert fleet(fleet_env, tmp_path).submit(pdf).bundle(timeout=30).status == "ok"
    assert dispatcher.jobs().get(job.id).attempts == 1  # sent once, run once

    record = dispatcher.jobs().get(job.id)
    mediafleet.workers.runtime.message.send_extract(dispatcher.app, record.request, dispatcher.manifest.capability("ocr_pdf"),
                             client.hget(dispatcher.jobs().key(job.id), "token").decode(), 4)
    wait_for(lambda: dispatcher.jobs().get(job.id).attempts == 2, what="the second message")
    record = dispatcher.jobs().get(job.id)
    assert record.state == JobState.DONE and record.completions == 1


def test_cancelling_a_running_job_stops_it(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1", module=FAULTY)
    dispatcher = fleet(fleet_env, tmp_path)
    slow = marked_pdf("MF-SLOW")
    job = dispatcher.submit(slow)
    wait_for(lambda: (p := job.progress()) is not None and p.done > 0, what="progress")
    assert job.cancel() == JobState.CANCELLED
    bundle = job.bundle(timeout=60)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.CANCELLED
    record = dispatcher.jobs().get(job.id)
    assert record.state == JobState.CANCELLED and record.progress.done < 40 and record.completions == 0
    # resubmitting a cancelled job runs it again
    again = dispatcher.submit(slow)
    assert again.id == job.id and again.bundle(timeout=120).status == "ok"


def test_higher_priority_jobs_run_first(fleet_env, start_worker, tmp_path: Path) -> None:
    dispatcher = fleet(fleet_env, tmp_path)
    low = [dispatcher.submit(text_pdf(1 + i), priority=1) for i in range(3)]
    high = dispatcher.submit(text_pdf(9), priority=9)
    start_worker("--concurrency=1")
    bundles = {j.id: j.bundle(timeout=120) for j in [*low, high]}
    started = sorted(bundles.values(), key=lambda b: next(
        n.properties["startedAtTime"] for n in b.nodes if n.node_type == "ProvenanceActivity"))
    assert started[0].job_id == high.id


def test_a_worker_killed_mid_task_redelivers_and_completes_once(fleet_env, start_worker, tmp_path: Path) -> None:
    worker = start_worker("--concurrency=1", module=FAULTY)
    dispatcher = fleet(fleet_env, tmp_path)
    pdf = marked_pdf("MF-SLOW", pages=2)
    job = dispatcher.submit(pdf)
    wait_for(lambda: (p := job.progress()) is not None and p.done > 0, what="the job to start")
    (child,) = worker.child_pids()
    os.kill(child, signal.SIGKILL)
    bundle = job.bundle(timeout=180)
    assert bundle.status == "ok"
    record = dispatcher.jobs().get(job.id)
    assert record.attempts == 2 and record.completions == 1
    ids = [n.id for n in bundle.nodes]
    assert len(ids) == len(set(ids))
    uninterrupted = Dispatcher(Settings(blob_root=tmp_path / "local")).submit(pdf).bundle()
    assert without_run(bundle) == without_run(uninterrupted)


def test_a_whole_worker_lost_mid_task_hands_the_job_to_another_after_the_visibility_timeout(
    fleet_env, start_worker, tmp_path: Path
) -> None:
    """A node lost with its worker (main process and pool, SIGKILL: no warm shutdown, no requeue),
    with lost-node recovery turned off: the unacknowledged message comes back once the visibility
    timeout passes, and another worker completes the job once. Short time limits keep the timeout
    at about a minute. (On, the default, it is queued again within about 20 s:
    tests/chaos/test_lost_node.py.)"""
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"capabilities": {"ocr_pdf": {"time_limits": {"soft_s": 5, "hard_s": 6}}}}')
    env = {"MEDIAFLEET_MANIFEST_FILE": str(manifest), "MEDIAFLEET_RECOVER_LOST_WORKERS": "false"}
    lost = start_worker("--concurrency=1", module=FAULTY, env=env)
    dispatcher = fleet(fleet_env, tmp_path, manifest_file=manifest)
    assert visibility_timeout_s(dispatcher.manifest) == 67
    job = dispatcher.submit(marked_pdf("MF-SLOW", pages=2))
    wait_for(lambda: (p := job.progress()) is not None and p.done > 0, what="the job to start")
    os.killpg(lost.proc.pid, signal.SIGKILL)
    lost.proc.wait(timeout=10)
    killed_at = time.monotonic()
    assert job.state() == JobState.STARTED  # nobody knows yet: the record still names the lost worker
    start_worker("--concurrency=1", module=FAULTY, env=env)
    bundle = job.bundle(timeout=180)
    assert bundle.status == "ok"
    assert time.monotonic() - killed_at >= 60  # not handed over while the lost worker might still run it
    record = dispatcher.jobs().get(job.id)
    assert record.attempts == 2 and record.completions == 1 and record.hostname != lost.hostname


def test_an_input_that_always_crashes_its_worker_fails_after_bounded_redeliveries(
    fleet_env, start_worker, tmp_path: Path
) -> None:
    worker = start_worker("--concurrency=1", module=FAULTY)
    dispatcher = fleet(fleet_env, tmp_path)
    poison = dispatcher.submit(marked_pdf("MF-CRASH"))
    good = dispatcher.submit(text_pdf(2))
    bundle = poison.bundle(timeout=240)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.WORKER_LOST
    assert "Traceback" not in bundle.error.message
    assert dispatcher.jobs().get(poison.id).attempts == MAX_DELIVERIES + 1
    assert good.bundle(timeout=120).status == "ok"
    assert worker.proc.poll() is None  # the worker itself kept serving


def test_past_the_hard_time_limit_the_process_is_replaced_and_the_job_times_out(
    fleet_env, start_worker, tmp_path: Path
) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"capabilities": {"ocr_pdf": {"time_limits": {"soft_s": 1, "hard_s": 3}}}}')
    env = {"MEDIAFLEET_MANIFEST_FILE": str(manifest)}
    worker = start_worker("--concurrency=1", module=FAULTY, env=env)
    dispatcher = fleet(fleet_env, tmp_path, manifest_file=manifest)
    (before,) = worker.child_pids()
    bundle = dispatcher.submit(marked_pdf("MF-HANG")).bundle(timeout=120)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.TIMEOUT
    wait_for(lambda: worker.child_pids() and worker.child_pids() != [before], what="a new pool process")
    assert dispatcher.submit(text_pdf(1)).bundle(timeout=120).status == "ok"


def test_the_soft_time_limit_fails_the_job_without_losing_the_process(fleet_env, start_worker, tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"capabilities": {"ocr_pdf": {"time_limits": {"soft_s": 1, "hard_s": 30}}}}')
    worker = start_worker("--concurrency=1", module=FAULTY, env={"MEDIAFLEET_MANIFEST_FILE": str(manifest)})
    dispatcher = fleet(fleet_env, tmp_path, manifest_file=manifest)
    (before,) = worker.child_pids()
    bundle = dispatcher.submit(marked_pdf("MF-SLOW")).bundle(timeout=120)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.TIMEOUT
    assert worker.child_pids() == [before]


def test_a_worker_over_its_memory_cap_is_recycled_after_its_task(fleet_env, start_worker, tmp_path: Path) -> None:
    worker = start_worker("--concurrency=1", "--max-memory-per-child=1")  # KiB: always over after a task
    dispatcher = fleet(fleet_env, tmp_path)
    first = dispatcher.submit(text_pdf(1))
    done = first.bundle(timeout=120)
    assert done.status == "ok", done.error
    pid_first = dispatcher.jobs().get(first.id).pid
    second = dispatcher.submit(text_pdf(2))
    done = second.bundle(timeout=120)
    assert done.status == "ok", done.error
    assert dispatcher.jobs().get(second.id).pid != pid_first
    assert worker.proc.poll() is None


def test_visibility_timeout_outlasts_the_longest_hard_time_limit() -> None:
    manifest = default_manifest()
    longest = max(c.time_limits.hard_s for c in manifest.capabilities.values())
    assert visibility_timeout_s(manifest) > longest
    from mediafleet.settings import Settings as S

    app = create_app(S(broker_url="redis://127.0.0.1:1/0"), manifest)
    assert app.conf.broker_transport_options["visibility_timeout"] == visibility_timeout_s(manifest)
    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost
    assert app.conf.worker_prefetch_multiplier == 1 and app.conf.accept_content == ["json"]


def test_a_redis_restart_loses_no_queued_or_finished_job(start_worker, tmp_path: Path) -> None:
    from tests.conftest import RedisServer

    server = RedisServer(tmp_path / "redis-aof", appendonly=True)
    server.start()
    try:
        env = {"MEDIAFLEET_BROKER_URL": server.url, "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}
        dispatcher = Dispatcher(Settings(broker_url=server.url, blob_root=tmp_path / "blobs"))
        worker = start_worker("--concurrency=1", env=env)
        finished = dispatcher.submit(text_pdf(1))
        finished_bundle = finished.bundle(timeout=120)
        worker.stop()
        queued = [dispatcher.submit(text_pdf(2 + i)) for i in range(2)]
        assert all(dispatcher.jobs().get(j.id).state in (JobState.QUEUED, JobState.HELD) for j in queued)

        redis.Redis.from_url(server.url).shutdown(save=True)
        server.proc.wait(timeout=10)
        server.start()

        fresh = Dispatcher(Settings(broker_url=server.url, blob_root=tmp_path / "blobs"))
        assert fresh.job(finished.id).bundle(timeout=30).model_dump() == finished_bundle.model_dump()
        start_worker("--concurrency=1", env=env)
        for job in queued:
            assert fresh.job(job.id).bundle(timeout=120).status == "ok"
    finally:
        server.stop()


def test_outcomes_are_kept_for_the_callers_pickup_window(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    dispatcher = fleet(fleet_env, tmp_path, result_ttl_s=60)
    client = redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"])
    short = dispatcher.submit(text_pdf(1))
    long = dispatcher.submit(text_pdf(2), keep_result_s=86_400)
    assert short.bundle(timeout=120).status == "ok" and long.bundle(timeout=120).status == "ok"
    assert 0 < client.ttl(dispatcher.jobs().key(short.id)) <= 60
    assert 60 < client.ttl(dispatcher.jobs().key(long.id)) <= 86_400


def test_a_fleet_whose_records_are_in_another_redis_database_runs_its_jobs(fleet_env, start_worker,
                                                                          tmp_path: Path) -> None:
    """``MEDIAFLEET_RESULT_BACKEND`` may name another Redis database than the broker's: the job
    records (and the workers' presence) are there, the queues in the broker's. The claim then
    leaves the message to Celery's publish, and the worker's consumer leaves the count to the pool
    process (one script cannot reach both databases); ``status`` counts the queues in the broker's.
    Found when the claim began pushing the message itself: such a fleet's jobs waited forever."""
    import redis

    base, db = fleet_env["MEDIAFLEET_BROKER_URL"].rsplit("/", 1)
    records = f"{base}/{15 if int(db) != 15 else 14}"
    redis.Redis.from_url(records).flushdb()
    dispatcher = fleet(fleet_env, tmp_path, result_backend=records)
    held = dispatcher.submit(text_pdf(2))
    assert dispatcher.jobs().get(held.id).state == JobState.HELD  # no worker yet: in its record
    start_worker("--concurrency=1", env={"MEDIAFLEET_RESULT_BACKEND": records})
    assert held.bundle(timeout=60).status == "ok"
    job = dispatcher.submit(text_pdf(1))
    assert job.bundle(timeout=60).status == "ok"
    record = dispatcher.jobs().get(job.id)
    assert record.state == JobState.DONE and record.attempts == 1
    assert redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"]).exists(f"mediafleet:job:{job.id}") == 0
    redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"]).lpush("mf.analyze_image.gpu", "a message")
    status = dispatcher.status()  # no worker reads that queue: it stays there, counted from the broker's database
    assert status["queues"]["mf.analyze_image.gpu"] == 1 and status["queues"]["mf.ocr_pdf.cpu"] == 0
    assert status["workers"]["cpu"]
