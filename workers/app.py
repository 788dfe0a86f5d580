"""The Celery app, configured for media work, and its one thin task shell.

JSON only (never pickle); late acks with redelivery when a worker dies mid-task; prefetch 1 so a
long job never hides a queued one behind it; task events on so Flower sees every job; results
kept for the configured pickup window; a broker visibility timeout derived from the longest hard
time limit in the manifest, so a long job is never handed to a second worker while it still runs.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from celery import Celery, Task
from celery.exceptions import Ignore
from celery.signals import worker_process_init, worker_ready, worker_shutdown
from celery.worker.consumer import Consumer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mediafleet.contract.errors import Cancelled, ErrorCode, PublicError
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome
from mediafleet.contract.manifest import Capability, DeviceClass, Manifest
from mediafleet.blobstore import open_store
from mediafleet.discovery.hook import index_finished
from mediafleet.jobstore import MAX_DELIVERIES, JobStore
from mediafleet.presence import TTL_S, Announcer
from mediafleet.settings import Settings
from mediafleet.workers.engines import EngineConfig, configure
from mediafleet.workers.parts import join
from mediafleet.workers.registry import progress_unit
from mediafleet.workers.runner import run_request

__all__ = ["EXTRACT_TASK", "RefusalRecordingConsumer", "create_app", "join_parts", "recover_lost",
           "redis_priority", "refused", "release_held", "report", "send_extract", "visibility_timeout_s"]

EXTRACT_TASK = "mediafleet.extract"
log = logging.getLogger("mediafleet.worker")
# What Redis being briefly away looks like to a progress call.
_TRANSIENT = (RedisConnectionError, RedisTimeoutError, OSError)
_PROGRESS_EVERY_S = 1.0


def visibility_timeout_s(manifest: Manifest) -> int:
    """Longest hard time limit plus a margin: a running job is never redelivered while it runs."""
    return int(manifest.max_hard_time_limit_s() * 1.25) + 60


def redis_priority(priority: int) -> int:
    """The fleet's 0 (lowest) .. 9 (highest) as the Redis transport's 0 (first) .. 9 (last)."""
    return 9 - priority


def send_extract(app: Celery, request: ExtractRequest, capability: Capability, token: str, priority: int) -> None:
    """Put one job on its capability's queue for ``request.device``, with the capability's limits."""
    app.send_task(
        EXTRACT_TASK,
        args=[request.model_dump(mode="json")],
        kwargs={"token": token},
        task_id=request.job_id,
        queue=capability.queue(request.device),
        soft_time_limit=capability.time_limits.soft_s,
        time_limit=capability.time_limits.hard_s,
        priority=redis_priority(priority),
    )


def release_held(app: Celery, jobs: JobStore, manifest: Manifest, device: DeviceClass) -> int:
    """Queue every held job that a worker of ``device`` may run, on that class's queue.

    Held jobs wait in their records (never on a queue no live worker reads); the first worker of an
    allowed class to come up, or to beat while they wait, sends them to its class's queue.
    """
    released = 0
    for record in jobs.held():
        request = record.request
        capability = manifest.capabilities.get(request.action)
        if capability is None or device not in capability.devices:
            continue
        request = request.model_copy(update={"device": device})
        token = jobs.release(request)
        if token is not None:
            send_extract(app, request, capability, token, record.priority)
            jobs.mark_sent(request.job_id)
            released += 1
    return released


def recover_lost(app: Celery, jobs: JobStore, manifest: Manifest) -> int:
    """Queue again every started job whose worker's heartbeat has gone (a lost node: the machine
    died with its worker, and no warm shutdown requeued the message); returns how many.

    Run by every live worker after each heartbeat. A job is recovered once (compare-and-set on the
    record naming the lost worker), within the presence TTL plus one heartbeat of the loss, instead
    of after the broker's visibility timeout plus kombu's restore sweep. The lost delivery's own
    message still comes back after that timeout; by then the record says finished and it runs
    nothing (or, for a job still running, the newer delivery owns the record).
    """
    recovered = 0
    for record in jobs.started():
        capability = manifest.capabilities.get(record.request.action)
        if capability is None:
            continue
        token = jobs.requeue_lost(record, TTL_S)
        if token is not None:
            send_extract(app, record.request, capability, token, record.priority)
            jobs.mark_sent(record.job_id)
            recovered += 1
    return recovered


def join_parts(jobs: JobStore, job_id: str, manifest: Manifest) -> Outcome | None:
    """Write the caller's outcome joined from the parts its record holds (the last reporter's work);
    returns it (None when there was nothing to join)."""
    record = jobs.get(job_id)
    if record is None or record.final:
        return None
    video = record.part("video")
    if video is None:
        return None
    outcome = join(video, record.part("speech"), manifest)
    # Two joiners may both get here (the waiter joins for a joiner it thinks lost): one writes.
    return outcome if jobs.finish(outcome) else None


def report(jobs: JobStore, manifest: Manifest, request: ExtractRequest, outcome: Outcome,
           speech_job: str | None, delivery: int | None = None) -> Outcome | None:
    """Store a finished task's outcome: a plain job's in its record; a part's into its caller's job.

    A job with a speech part (``speech_job``) reports as its ``video`` part and is finished by
    whichever of the two reports last; a failed video part finishes the job at once and cancels its
    speech part. A speech part keeps its own record too (``mediafleet status`` shows it). Returns
    the caller's final outcome when this report finished the caller's job, else None.

    ``delivery`` is the reporting delivery's number (:meth:`JobStore.start`): a delivery that no
    longer owns its record (a newer one started since, or the job finished) stores nothing.
    """
    if request.part_of is not None:
        if not jobs.finish(outcome, delivery=delivery):
            return None
        if jobs.report_part(request.part_of.job_id, "speech", outcome) == 0:
            return join_parts(jobs, request.part_of.job_id, manifest)
        return None
    if speech_job is None:
        return outcome if jobs.finish(outcome, delivery=delivery) else None
    failed = outcome.status != "ok"
    left = jobs.report_part(request.job_id, "video", outcome, decides=failed, delivery=delivery)
    if failed:
        if not jobs.finish(outcome, delivery=delivery):
            return None
        jobs.cancel(speech_job)
        return outcome
    if left == 0:
        return join_parts(jobs, request.job_id, manifest)
    return None


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
    return jobs.finish(_failed(record.request, _REFUSED), seen_attempts=record.attempts)


class RefusalRecordingConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, which also records each message it refuses (bad content type, failed
    signature) in the job's record, through the app's ``mediafleet_on_refused``."""

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


_APPS: dict[str, Celery] = {}
_APPS_LOCK = threading.Lock()


def create_app(settings: Settings, manifest: Manifest | None = None) -> Celery:
    """A Celery app wired to ``settings``; the task closes over the settings, manifest and store.

    One app per settings and manifest in a process: asking again returns the same app, so a
    long-lived process that submits many jobs keeps one app, one store and one connection pool (the
    app's signal receivers are strong references and are never disconnected).
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
        task_track_started=True,
        task_send_sent_event=True,
        worker_send_task_events=True,
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
        worker_consumer="mediafleet.workers.app:RefusalRecordingConsumer",
    )
    if (tls := settings.tls_options()) is not None:
        app.conf.update(broker_use_ssl=tls, redis_backend_use_ssl=tls)
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

    engine_config = EngineConfig(device=settings.device, threads=settings.threads,
                                 whisper_model_dir=settings.whisper_model_dir)

    @worker_process_init.connect(weak=False)
    def _configure_engines(**_: Any) -> None:
        configure(engine_config)

    jobs: list[JobStore] = []

    def job_store() -> JobStore:
        if not jobs:  # built in the process that uses it (each pool process after the fork)
            jobs.append(JobStore.from_settings(settings))
        return jobs[0]

    app.mediafleet_on_refused = lambda job_id: refused(job_store(), job_id)  # type: ignore[attr-defined]

    announcers: list[Announcer] = []

    @worker_ready.connect(weak=False)
    def _announce(sender: Any = None, **_: Any) -> None:
        if sender is None or sender.app is not app:
            return
        queues = [q.name for q in sender.task_consumer.queues]

        def release() -> None:
            release_held(app, job_store(), manifest, settings.device)
            if not settings.recover_lost_workers:
                return
            try:
                recover_lost(app, job_store(), manifest)
            except Exception:  # noqa: BLE001 - Redis briefly away: the next beat tries again
                log.warning("could not look for jobs of lost workers; trying again at the next heartbeat")

        announcer = Announcer(job_store().client, sender.hostname, settings.device.value, queues, on_beat=release)
        announcer.start()
        announcers.append(announcer)

    @worker_shutdown.connect(weak=False)
    def _retire(**_: Any) -> None:
        while announcers:
            announcers.pop().stop()

    @app.task(name=EXTRACT_TASK, bind=True)
    def extract(self: Task, request: dict[str, Any], token: str = "") -> dict[str, Any]:
        req = ExtractRequest.model_validate(request)
        store_ = job_store()
        attempts, before, speech_job = store_.start(req.job_id, self.request.hostname or "", token)
        if attempts < 0 or before in (JobState.DONE, JobState.FAILED):
            # A message from a submission that was cancelled and claimed again (the current
            # submission has its own message), or a second message for a job already finished
            # (sent again for a job thought unsent, or redelivered after its visibility timeout):
            # nothing to run. Ignore stores no result, so it cannot wake (or mislead) the current
            # submission's waiters.
            raise Ignore()
        unit = progress_unit(req.action)
        last = [0.0]

        def progress(done: int, total: int | None) -> None:
            now = time.monotonic()
            if now - last[0] >= _PROGRESS_EVERY_S or done == total:
                last[0] = now
                try:
                    self.update_state(state="PROGRESS", meta={"done": done, "total": total, "unit": unit})
                    state = store_.progress(req.job_id, done, total, unit)
                except _TRANSIENT:  # Redis briefly away: progress is best effort, the job goes on
                    return
                if state == JobState.CANCELLED:
                    raise Cancelled("the job was cancelled")

        if before == JobState.CANCELLED:
            outcome = _failed(req, PublicError(code=ErrorCode.CANCELLED, message="the job was cancelled"))
        elif attempts > MAX_DELIVERIES:
            outcome = _failed(req, PublicError(
                code=ErrorCode.WORKER_LOST,
                message=f"the job stopped its worker process {attempts - 1} times; it is not delivered again",
            ))
        else:
            outcome = run_request(req, manifest=manifest, store=store, device=settings.device, progress=progress,
                                  inline_parts=speech_job is None)
        if (finished := report(store_, manifest, req, outcome, speech_job, delivery=attempts)) is not None:
            index_finished(settings.discovery_index, finished, manifest)
        return {"job_id": outcome.job_id, "status": outcome.status,
                "error": outcome.error.code.value if outcome.error else None}

    return app


def _failed(request: ExtractRequest, error: PublicError) -> Outcome:
    now = datetime.now(UTC)
    return Outcome(job_id=request.job_id, action=request.action, artifact=request.artifact, status="failed",
                   error=error, started_at=now, ended_at=now, device=request.device)
