"""The Celery app, configured for media work, and its one thin task shell.

JSON only (never pickle); late acks with redelivery when a worker dies mid-task; prefetch 1 so a
long job never hides a queued one behind it; task events only with ``task_events`` on (or once a
running Flower turns them on: they cost Redis publishes per job); results kept for the configured
pickup window; a broker visibility timeout derived from the longest hard time limit in the
manifest, so a long job is never handed to a second worker while it still runs.

The task validates the request and runs :func:`mediafleet.workers.runner.run_request` through the
fleet's middleware (:mod:`mediafleet.workers.runtime.middleware`); a worker's lifecycle (engines,
presence, held and lost jobs) is attached by :func:`mediafleet.workers.runtime.boot.boot_worker`,
so building an app connects no signal receiver."""

from __future__ import annotations

import os
import threading
from typing import Any

from celery import Celery, Task
from celery.exceptions import Ignore
from mediafleet.contract.jobs import ExtractRequest
from mediafleet.contract.manifest import Manifest
from mediafleet.workers.runner import run_request
from mediafleet.workers.runtime.backend import BACKENDS, publish_progress
from mediafleet.workers.runtime.consumer import refused
from mediafleet.workers.runtime.message import visibility_timeout_s
from mediafleet.workers.runtime.middleware.chain import fleet_middleware
from mediafleet.workers.runtime.middleware.delivery import Delivery, Skip, run_chain
from mediafleet.workers.runtime.names import EXTRACT_TASK, IN_RECORD, PUBLISHED
from mediafleet.workers.runtime.retirement import stop_worker
from mediafleet.workers.runtime.transport import SENTINEL_TRANSPORT, TRANSPORT, taken

from mediafleet.blobs.local import BlobStore, open_store
from mediafleet.fleet.redis_client import is_sentinel, transport_options, with_master_password
from mediafleet.fleet.store import JobStore
from mediafleet.settings import Settings

__all__ = ["create_app", "job_store"]


_APPS: dict[str, Celery] = {}
_APPS_LOCK = threading.Lock()


def create_app(settings: Settings, manifest: Manifest | None = None) -> Celery:
    """A Celery app wired to ``settings``; the task closes over the settings, manifest and store.

    One app per settings and manifest in a process: asking again returns the same app, so a
    long-lived process that submits many jobs keeps one app, one store and one connection pool.
    Building one connects no signal receiver (a booted worker connects its own, for as long as it
    runs: :func:`mediafleet.workers.runtime.boot.worker_lifecycle`).
    """
    manifest = manifest or settings.manifest()
    key = settings.cache_key() + manifest.model_dump_json()
    with _APPS_LOCK:
        if (app := _APPS.get(key)) is None:
            app = _APPS[key] = _build_app(settings, manifest)
    return app


def _build_app(settings: Settings, manifest: Manifest) -> Celery:
    store = open_store(settings)
    app = Celery("mediafleet", broker=with_master_password(settings, settings.broker()),
                 backend=with_master_password(settings, settings.backend()), set_as_current=False)
    app.loader.override_backends = BACKENDS
    transport = {
        "visibility_timeout": visibility_timeout_s(manifest),
        "queue_order_strategy": "priority",
        "priority_steps": list(range(10)),
        **transport_options(settings),  # behind Sentinel: the master's name, the sentinels' password
    }
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_track_started=False,  # the job record says started; nobody reads Celery's STARTED (a write and a wake-up per job)
        # Task events (Flower's per-task view and task metrics) cost a publish per event, about 1 ms
        # of a small job's round trip: only when asked for (a running Flower also turns the workers'
        # on with its enable_events option). Workers' heartbeat events are sent either way.
        task_send_sent_event=settings.task_events,
        worker_send_task_events=settings.task_events,
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
        worker_consumer="mediafleet.workers.runtime.consumer:FleetConsumer",
    )
    if (tls := settings.tls_options()) is not None:
        app.conf.update(broker_use_ssl=tls, redis_backend_use_ssl=tls)
    broker = settings.broker() or ""
    if broker.startswith("redis://") or (broker.startswith("rediss://") and tls is not None):
        app.conf.update(broker_transport=TRANSPORT)
    elif is_sentinel(broker):
        app.conf.update(broker_transport=SENTINEL_TRANSPORT)
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

    chain = fleet_middleware(manifest, settings.discovery_index)
    stores = _ProcessStore(settings, store)
    app.mediafleet_jobs = stores  # type: ignore[attr-defined]
    app.mediafleet_on_refused = lambda job_id: refused(stores.get(), job_id)  # type: ignore[attr-defined]
    # Whether its workers' consumers count a delivery as they take the message (FleetConsumer): not
    # where messages are signed (a body is trusted only once Celery has checked it, in the pool
    # process), and only where one script can write both the record and kombu's (one database).
    app.mediafleet_counts_taken = settings.one_redis() and settings.signing_key_file is None  # type: ignore[attr-defined]

    # Not shared: a shared task is registered with every app the process finalizes, so a second
    # fleet app (another settings' dispatcher) would get this app's closure under the same name.
    @app.task(name=EXTRACT_TASK, bind=True, shared=False)
    def extract(self: Task, request: dict[str, Any], token: str = "") -> dict[str, Any]:
        req = ExtractRequest.model_validate(request)
        delivery = Delivery(req, stores.get(), token=token, hostname=self.request.hostname or "",
                            publish=lambda meta: publish_progress(self, meta), retire=stop_worker,
                            taken=taken(self.request, settings))
        try:
            outcome = run_chain(chain, delivery, lambda progress: run_request(
                req, manifest=manifest, store=store, device=settings.device, progress=progress,
                inline_parts=not delivery.parts))
        except Skip:
            raise Ignore() from None  # stores no result: nothing wakes the current submission's waiters
        if (finished := delivery.finished) is not None and finished.job_id == outcome.job_id:
            outcome = finished  # what was stored (cancelled meanwhile: its cancellation)
        # The result backend gets this summary only: the outcome is in the job's record (or, when
        # large, in the blob store), never in Celery's result. A plain job this delivery finished,
        # its waiters woken, needs none (FleetRedisBackend keeps no copy: nobody would read it).
        return {"job_id": outcome.job_id, "status": outcome.status,
                "error": outcome.error.code.value if outcome.error else None,
                IN_RECORD: delivery.announced and delivery.plain,
                PUBLISHED: delivery.published}

    return app


class _ProcessStore:
    """The app's job store, built in the process that uses it (each pool process after the fork)."""

    def __init__(self, settings: Settings, blobs: BlobStore) -> None:
        self._settings = settings
        self._blobs = blobs  # the app's blob store: large outcomes are kept there
        self._store: tuple[int, JobStore] | None = None

    def get(self) -> JobStore:
        if self._store is None or self._store[0] != os.getpid():
            self._store = (os.getpid(), JobStore.from_settings(self._settings, self._blobs))
        return self._store[1]


def job_store(app: Celery) -> JobStore:
    """The job store of an app made by :func:`create_app`, for this process."""
    stores: _ProcessStore = app.mediafleet_jobs  # type: ignore[attr-defined]
    return stores.get()
