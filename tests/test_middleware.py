"""The fleet task's middleware, each on its own and as the chain, without Celery.

The real job store against a real redis-server (a database of its own per test), the real runner
and PDF extractor on a real blob store: only the Celery task shell around them is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.signals import worker_process_init, worker_ready, worker_shutdown
from mediafleet.contract.errors import Cancelled, ErrorCode, PublicError
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, JobState, Outcome, PartOf
from mediafleet.contract.manifest import Manifest, Modality, default_manifest
from mediafleet.workers.parts import named_job_id
from mediafleet.workers.runner import run_request
from mediafleet.workers.runtime.middleware.cancellation import Cancellation
from mediafleet.workers.runtime.middleware.chain import fleet_middleware
from mediafleet.workers.runtime.middleware.counting import DeliveryCounting, DeliveryLimit
from mediafleet.workers.runtime.middleware.delivery import Delivery, Middleware, Skip, run_chain
from mediafleet.workers.runtime.middleware.outcome import DiscoveryIndexing, FinishedNotice, OutcomeReporting
from mediafleet.workers.runtime.middleware.progress import ProgressReporting, ProgressThrottle
from mediafleet.modalities.spec import ProgressFn

from mediafleet.blobs.local import LocalBlobStore
from mediafleet.fleet.deliveries import MAX_DELIVERIES
from mediafleet.fleet.keys import finished_channel
from mediafleet.fleet.store import JobStore
from mediafleet.settings import Settings
from tests.conftest import free_port
from tests.media import text_pdf

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pdf_request(blobs: LocalBlobStore, pages: int = 3, **over: Any) -> ExtractRequest:
    """A request for a text PDF of ``pages`` pages, named as this release names it (unless ``job_id`` is given)."""
    data = text_pdf(pages)
    digest = blobs.put_bytes(data)
    job_id = over.pop("job_id", None)
    request = ExtractRequest(job_id=job_id or "mf-" + "0" * 32, action="ocr_pdf", options={"ocr": "never"},
                             artifact=ArtifactRef(digest=digest, media_type="application/pdf", bytes=len(data),
                                                  modality=Modality.PDF), **over)
    return request if job_id else request.model_copy(update={"job_id": named_job_id(request, default_manifest())})


def claimed(jobs: JobStore, request: ExtractRequest, **over: Any) -> Delivery:
    token = jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600, **over)
    assert token is not None
    return Delivery(request, jobs, token=token, hostname="w1@test")


def runner(manifest: Manifest, blobs: LocalBlobStore, request: ExtractRequest) -> Callable[[ProgressFn], Outcome]:
    return lambda progress: run_request(request, manifest=manifest, store=blobs, progress=progress)


def never_run(progress: ProgressFn) -> Outcome:
    raise AssertionError("a decided delivery must not run")


class Recorder(Middleware):
    """Sees what reaches it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def before_run(self, delivery: Delivery) -> Outcome | None:
        self.calls.append(("before", delivery.attempt))
        return None

    def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
        self.calls.append(("progress", done))
        return True

    def after_run(self, delivery: Delivery, outcome: Outcome) -> None:
        self.calls.append(("after", outcome.status))


# -- the chain ------------------------------------------------------------------------------------

def test_the_chain_runs_every_hook_in_order_and_the_fleet_chain_reports_the_job(
        jobs: JobStore, manifest: Manifest, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    delivery = claimed(jobs, request)
    seen = Recorder()
    outcome = run_chain([*fleet_middleware(manifest), seen], delivery, runner(manifest, blobs, request))
    assert outcome.status == "ok"
    assert seen.calls[0] == ("before", 1) and seen.calls[-1] == ("after", "ok")
    assert [c for c in seen.calls if c[0] == "progress"] == [("progress", 1), ("progress", 3)]  # 2 was throttled
    record = jobs.get(request.job_id)
    assert record.state == JobState.DONE and record.attempts == 1 and record.completions == 1
    assert record.outcome == outcome and delivery.finished == outcome
    assert record.progress.done == 3 and record.progress.total == 3 and record.progress.unit == "pages"


def test_a_decided_delivery_is_not_run_but_is_reported(jobs: JobStore, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    decided = Outcome.failed(request, PublicError(code=ErrorCode.CANCELLED, message="x"), NOW)

    class Decides(Middleware):
        def before_run(self, delivery: Delivery) -> Outcome | None:
            return decided

    later, after = Recorder(), Recorder()
    chain = [Decides(), later]
    assert run_chain(chain, claimed(jobs, request), never_run) is decided
    assert later.calls == [("after", "failed")]  # its before_run was not called, its after_run was
    assert run_chain([Decides(), after], Delivery(request, jobs), never_run) is decided


# -- delivery counting and the delivery limit -----------------------------------------------------

def test_delivery_counting_marks_the_job_started_by_this_delivery(jobs: JobStore, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    delivery = claimed(jobs, request)
    assert DeliveryCounting().before_run(delivery) is None
    assert (delivery.attempt, delivery.before, delivery.parts) == (1, JobState.QUEUED, {})
    record = jobs.get(request.job_id)
    assert record.state == JobState.STARTED and record.hostname == "w1@test" and record.attempts == 1


def test_a_stale_or_finished_message_is_skipped_before_anything_runs(
        jobs: JobStore, manifest: Manifest, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    delivery = claimed(jobs, request)
    seen = Recorder()
    stale = Delivery(request, jobs, token="not-the-records", hostname="w1@test")
    with pytest.raises(Skip):
        run_chain([DeliveryCounting(), seen], stale, never_run)
    assert seen.calls == [] and jobs.get(request.job_id).attempts == 0
    run_chain(fleet_middleware(manifest), delivery, runner(manifest, blobs, request))
    again = Delivery(request, jobs, token=delivery.token, hostname="w2@test")
    with pytest.raises(Skip):
        run_chain([DeliveryCounting(), seen], again, never_run)
    record = jobs.get(request.job_id)
    assert seen.calls == [] and record.state == JobState.DONE and record.completions == 1


def test_past_the_delivery_limit_the_job_fails_as_worker_lost(
        jobs: JobStore, manifest: Manifest, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    token = claimed(jobs, request).token
    for _ in range(MAX_DELIVERIES):  # each killed its worker process before it reported
        jobs.start(request.job_id, "w1@test", token)
    delivery = Delivery(request, jobs, token=token, hostname="w1@test")
    outcome = run_chain(fleet_middleware(manifest), delivery, never_run)
    assert outcome.error.code == ErrorCode.WORKER_LOST and f"{MAX_DELIVERIES} times" in outcome.error.message
    record = jobs.get(request.job_id)
    assert record.state == JobState.FAILED and record.attempts == MAX_DELIVERIES + 1
    assert DeliveryLimit(limit=MAX_DELIVERIES).before_run(Delivery(request, jobs, attempt=MAX_DELIVERIES)) is None


# -- cancellation ---------------------------------------------------------------------------------

def test_a_job_cancelled_before_its_delivery_is_not_run(jobs: JobStore, manifest: Manifest, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    token = claimed(jobs, request).token
    for _ in range(MAX_DELIVERIES):
        jobs.start(request.job_id, "w1@test", token)
    assert jobs.cancel(request.job_id) == JobState.CANCELLED
    outcome = run_chain(fleet_middleware(manifest), Delivery(request, jobs, token=token), never_run)
    assert outcome.error.code == ErrorCode.CANCELLED  # cancelled, however often it was delivered
    record = jobs.get(request.job_id)
    assert record.state == JobState.CANCELLED and record.completions == 0


def test_a_job_cancelled_while_it_runs_stops_at_its_next_progress_point(
        jobs: JobStore, manifest: Manifest, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs, pages=5)
    delivery = claimed(jobs, request)

    class CancelsAtFirstPage(Middleware):  # the caller's `mediafleet cancel`, while page 1 is done
        def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
            if done == 1:
                jobs.cancel(delivery.request.job_id)
            return True

    chain = [DeliveryCounting(), ProgressThrottle(every_s=0), CancelsAtFirstPage(), ProgressReporting(),
             Cancellation(), DeliveryLimit(), OutcomeReporting(manifest)]
    outcome = run_chain(chain, delivery, runner(manifest, blobs, request))
    assert outcome.status == "failed" and outcome.error.code == ErrorCode.CANCELLED
    record = jobs.get(request.job_id)
    assert record.state == JobState.CANCELLED and record.progress.done == 1 and record.completions == 0


def test_a_job_cancelled_just_before_its_last_progress_point_ends_cancelled(
        jobs: JobStore, manifest: Manifest, blobs: LocalBlobStore) -> None:
    """The fleet chain writes a plain job's last progress point with its outcome (one round trip
    fewer): a cancellation that point would have seen still stops the job, which ends cancelled
    with its progress recorded, and its waiters are woken by that write."""
    request = pdf_request(blobs, pages=2)
    delivery = claimed(jobs, request)

    class CancelsBeforeTheLastPage(Middleware):
        def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
            if done == total:
                jobs.cancel(delivery.request.job_id)
            return True

    chain = fleet_middleware(manifest)
    chain.insert(2, CancelsBeforeTheLastPage())  # after the throttle, before the reporting
    listener = redis.Redis(connection_pool=redis.ConnectionPool(**jobs.client.connection_pool.connection_kwargs))
    notices = listener.pubsub(ignore_subscribe_messages=True)
    notices.subscribe(finished_channel(request.job_id))
    try:
        run_chain(chain, delivery, runner(manifest, blobs, request))
        notice = None
        for _ in range(50):  # the first reads may return the subscription's confirmation (ignored: None)
            if (notice := notices.get_message(timeout=0.1)) is not None:
                break
        assert notice is not None
    finally:
        notices.close()
        listener.close()
        listener.connection_pool.disconnect()
    record = jobs.get(request.job_id)
    assert record.state == JobState.CANCELLED and record.outcome.error.code == ErrorCode.CANCELLED
    assert record.progress.done == 2 and record.progress.total == 2 and record.completions == 0
    assert delivery.finished == record.outcome and delivery.announced
    noticed = jobs.noticed(request.job_id, notice["data"], request, record.token)  # it carries what was written
    assert noticed is not None and noticed.outcome == record.outcome and noticed.progress == record.progress


def test_cancellation_reads_the_state_progress_reporting_saw(jobs: JobStore, blobs: LocalBlobStore) -> None:
    delivery = Delivery(pdf_request(blobs), jobs, state=JobState.STARTED)
    assert Cancellation().on_progress(delivery, 1, 2) is True
    delivery.state = JobState.CANCELLED
    with pytest.raises(Cancelled):
        Cancellation().on_progress(delivery, 2, 2)


# -- progress -------------------------------------------------------------------------------------

def test_progress_is_throttled_to_one_report_a_second_and_the_last_always_passes(blobs: LocalBlobStore,
                                                                                  jobs: JobStore) -> None:
    now = [100.0]
    throttle = ProgressThrottle(every_s=1.0, clock=lambda: now[0])
    delivery = Delivery(pdf_request(blobs), jobs)
    passed = []
    for t, done in [(100.0, 1), (100.4, 2), (100.99, 3), (101.0, 4), (101.2, 5), (101.3, 10), (101.5, 6)]:
        now[0] = t
        if throttle.on_progress(delivery, done, 10):
            passed.append(done)
    assert passed == [1, 4, 10]


def test_progress_is_published_and_recorded_with_the_actions_unit(jobs: JobStore, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    published: list[dict[str, Any]] = []
    delivery = claimed(jobs, request)
    delivery.publish = published.append
    DeliveryCounting().before_run(delivery)
    assert ProgressReporting().on_progress(delivery, 2, 3) is True
    assert published == [{"done": 2, "total": 3, "unit": "pages"}] and delivery.published
    assert delivery.state == JobState.STARTED
    progress = jobs.get(request.job_id).progress
    assert (progress.done, progress.total, progress.unit) == (2, 3, "pages")


@pytest.mark.slow
def test_progress_with_redis_away_is_dropped_and_the_job_goes_on(blobs: LocalBlobStore) -> None:
    away = JobStore(redis.Redis(port=free_port(), socket_connect_timeout=0.2), ttl_s=60)
    delivery = Delivery(pdf_request(blobs), away)
    later = Recorder()
    chain = [ProgressReporting(), later]
    assert chain[0].on_progress(delivery, 1, 3) is False  # stops here: nothing new for Cancellation to read
    assert later.calls == []


# -- reporting ------------------------------------------------------------------------------------

def test_a_delivery_that_no_longer_owns_the_record_reports_nothing(
        jobs: JobStore, manifest: Manifest, blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    stale = claimed(jobs, request)
    DeliveryCounting().before_run(stale)
    newer = Delivery(request, jobs, token=stale.token, hostname="w2@test")
    DeliveryCounting().before_run(newer)  # redelivered (a lost node) while the first still ran
    outcome = run_request(request, manifest=manifest, store=blobs)
    OutcomeReporting(manifest).after_run(stale, outcome)
    assert stale.finished is None and jobs.get(request.job_id).state == JobState.STARTED
    OutcomeReporting(manifest).after_run(newer, outcome)
    record = jobs.get(request.job_id)
    assert newer.finished == outcome and record.state == JobState.DONE and record.completions == 1
    # Only the delivery that finished the job wakes its waiters (and so needs no Celery result).
    for delivery in (stale, newer):
        FinishedNotice().after_run(delivery, outcome)
    assert not stale.announced and newer.announced


def test_a_failed_video_part_finishes_its_job_and_cancels_the_speech_part(
        jobs: JobStore, manifest: Manifest, blobs: LocalBlobStore) -> None:
    data = b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 64
    digest = blobs.put_bytes(data)
    artifact = ArtifactRef(digest=digest, media_type="video/mp4", bytes=len(data), modality=Modality.VIDEO)
    video = ExtractRequest(job_id="mf-" + "a" * 32, action="extract_keyframes", artifact=artifact)
    speech = ExtractRequest(job_id="mf-" + "b" * 32, action="transcribe_segments", artifact=artifact,
                            part_of=PartOf(job_id=video.job_id, action=video.action))
    delivery = claimed(jobs, video, parts={"speech": speech.job_id})
    claimed(jobs, speech)
    DeliveryCounting().before_run(delivery)
    assert delivery.parts == {"speech": speech.job_id}
    failed = Outcome.failed(video, PublicError(code=ErrorCode.CORRUPT_INPUT, message="not a video"), NOW)
    OutcomeReporting(manifest).after_run(delivery, failed)
    assert delivery.finished == failed
    assert jobs.get(video.job_id).state == JobState.FAILED
    assert jobs.get(speech.job_id).state == JobState.CANCELLED


def test_only_a_job_this_delivery_finished_is_indexed(tmp_path: Path, jobs: JobStore, manifest: Manifest,
                                                     blobs: LocalBlobStore) -> None:
    request = pdf_request(blobs)
    delivery = claimed(jobs, request)
    run_chain(fleet_middleware(manifest), delivery, runner(manifest, blobs, request))
    index = tmp_path / "index.sqlite"
    setting = f"sqlite:{index}#workspace=test"
    DiscoveryIndexing(setting, manifest).after_run(Delivery(request, jobs), delivery.finished)  # finished nothing
    assert not index.exists()
    DiscoveryIndexing(setting, manifest).after_run(delivery, delivery.finished)
    assert index.exists()


# -- the worker's signal receivers ----------------------------------------------------------------

SIGNALS = (worker_process_init, worker_ready, worker_shutdown)


def test_building_apps_connects_no_receiver_and_a_booted_workers_are_all_disconnected(tmp_path: Path) -> None:
    from mediafleet.workers.runtime.boot import worker_lifecycle
    from mediafleet.workers.runtime.config import create_app

    before = [len(s.receivers) for s in SIGNALS]
    apps = [create_app(Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path, redis_password=f"p{i}"))
            for i in range(5)]
    assert len({id(a) for a in apps}) == 5
    assert [len(s.receivers) for s in SIGNALS] == before
    settings = Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path)
    with worker_lifecycle(apps[0], settings, default_manifest()):
        assert [len(s.receivers) for s in SIGNALS] == [n + 1 for n in before]
        worker_ready.send(sender=None)  # another app's worker (or none): this one announces nothing
    assert [len(s.receivers) for s in SIGNALS] == before


def test_a_worker_recovers_lost_nodes_jobs_only_after_a_ttl_of_unbroken_heartbeats() -> None:
    """After Redis was away past the presence TTL every worker's presence is gone at once: a worker
    waits until the others have announced themselves again before it takes their jobs for lost."""
    from mediafleet.workers.runtime.boot import Steadiness

    from mediafleet.fleet.presence import HEARTBEAT_S, TTL_S

    now = [0.0]
    steadiness = Steadiness(clock=lambda: now[0])

    def beats(n: int) -> list[bool]:
        out = []
        for _ in range(n):
            out.append(steadiness.beat())
            now[0] += HEARTBEAT_S
        return out

    steady_after = int(TTL_S // HEARTBEAT_S)
    assert beats(steady_after + 2) == [False] * steady_after + [True, True]
    now[0] += 30  # Redis away: no beat got through
    assert beats(steady_after + 1) == [False] * steady_after + [True]


def test_lost_node_recovery_is_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIAFLEET_RECOVER_LOST_WORKERS", raising=False)
    monkeypatch.delenv("MEDIAFLEET_SETTINGS_FILE", raising=False)
    assert Settings.load().recover_lost_workers is True
    monkeypatch.setenv("MEDIAFLEET_RECOVER_LOST_WORKERS", "false")
    assert Settings.load().recover_lost_workers is False


def test_the_soft_limit_wrapped_by_a_library_is_still_a_timeout(tmp_path: Path) -> None:
    """The soft time limit can land while kombu encodes a progress point (the task's
    ``update_state``), which wraps whatever it meets in an ``EncodeError``: the run is still a
    retryable timeout, never an ``internal_error`` that a resubmission would be handed back."""
    from billiard.exceptions import SoftTimeLimitExceeded
    from kombu.exceptions import EncodeError
    from kombu.serialization import _reraise_errors

    blobs = LocalBlobStore(tmp_path / "blobs")

    def limit_in_encoding(done: int, total: int | None) -> None:
        with _reraise_errors(EncodeError):  # as kombu.serialization.dumps encodes
            raise SoftTimeLimitExceeded()

    timed_out = run_request(pdf_request(blobs), manifest=default_manifest(), store=blobs, progress=limit_in_encoding)
    assert timed_out.status == "failed" and timed_out.error.code == ErrorCode.TIMEOUT and timed_out.error.retryable

    def plain_encoding_error(done: int, total: int | None) -> None:
        raise EncodeError("not serialisable")

    other = run_request(pdf_request(blobs), manifest=default_manifest(), store=blobs, progress=plain_encoding_error)
    assert other.status == "failed" and other.error.code == ErrorCode.INTERNAL_ERROR
