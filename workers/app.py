"""The Celery app, configured for media work, and its one thin task shell.

JSON only (never pickle); late acks with redelivery when a worker dies mid-task; prefetch 1 so a
long job never hides a queued one behind it; task events on so Flower sees every job; results
kept for the configured pickup window; a broker visibility timeout derived from the longest hard
time limit in the manifest, so a long job is never handed to a second worker while it still runs.
"""

from __future__ import annotations

import time
from typing import Any

from celery import Celery, Task
from celery.signals import worker_process_init

from contract.jobs import ExtractRequest
from contract.manifest import Manifest
from mediafleet.blobstore import LocalBlobStore
from mediafleet.settings import Settings
from workers.engines import EngineConfig, configure
from workers.runner import run_request

__all__ = ["EXTRACT_TASK", "create_app", "visibility_timeout_s"]

EXTRACT_TASK = "mediafleet.extract"
_PROGRESS_EVERY_S = 1.0


def visibility_timeout_s(manifest: Manifest) -> int:
    """Longest hard time limit plus a margin: a running job is never redelivered while it runs."""
    return int(manifest.max_hard_time_limit_s()) + 600


def create_app(settings: Settings, manifest: Manifest | None = None) -> Celery:
    """A Celery app wired to ``settings``; the task closes over the settings, manifest and store."""
    manifest = manifest or settings.manifest()
    store = LocalBlobStore(settings.blob_root)
    app = Celery("mediafleet", broker=settings.broker(), backend=settings.backend(), set_as_current=False)
    transport = {"visibility_timeout": visibility_timeout_s(manifest)}
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
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_default_queue="mf.default",
    )

    engine_config = EngineConfig(device=settings.device, threads=settings.threads)

    @worker_process_init.connect(weak=False)
    def _configure_engines(**_: Any) -> None:
        configure(engine_config)

    @app.task(name=EXTRACT_TASK, bind=True)
    def extract(self: Task, request: dict[str, Any]) -> dict[str, Any]:
        req = ExtractRequest.model_validate(request)
        last = [0.0]

        def progress(done: int, total: int | None) -> None:
            now = time.monotonic()
            if now - last[0] >= _PROGRESS_EVERY_S or done == total:
                last[0] = now
                self.update_state(state="PROGRESS", meta={"done": done, "total": total})

        outcome = run_request(req, manifest=manifest, store=store, device=settings.device, progress=progress)
        return outcome.model_dump(mode="json")

    return app
