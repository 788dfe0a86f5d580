"""Starting a fleet worker: the one function ``mediafleet worker`` (and so the container's
``worker`` command) calls.

:func:`boot_worker` checks that the worker can serve its device class, then runs a Celery worker
on the app of :func:`mediafleet.workers.runtime.config.create_app` with this worker's lifecycle attached for
as long as it runs: each pool process configures its engines; the main process announces the
worker's presence (:mod:`mediafleet.fleet.presence`) and, after each heartbeat, queues the held jobs it
may run and, with ``recover_lost_workers`` (the default), the started jobs of lost workers.

Recovery bound: a lost worker's presence key expires ``TTL_S`` (15 s) after its last heartbeat
and its job's record must not have moved for as long; the next heartbeat (every ``HEARTBEAT_S``,
5 s) of any steady live worker (:class:`Steadiness`) then queues the job again, once. So a lost
node's job is running again 15 to 20 s after the loss (``tests/chaos/test_lost_node.py``
measures it done about 20-25 s after, with a ~4 s job), instead of after the broker's visibility
timeout and kombu's restore sweep (the longest hard time limit x1.25 + 60 s, and then some: 185 s
with a 40 s hard limit).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_ready, worker_shutdown
from mediafleet.contract.errors import Unavailable
from mediafleet.contract.manifest import DeviceClass, Manifest
from mediafleet.workers.runtime import retirement
from mediafleet.workers.runtime.retirement import stop_worker

from mediafleet.fleet.presence import HEARTBEAT_S, TTL_S, Announcer
from mediafleet.fleet.redis_client import eviction_warning
from mediafleet.fleet.store import JobStore
from mediafleet.settings import Settings

__all__ = ["BootRefused", "Steadiness", "WorkerOptions", "WorkerRetired", "boot_worker", "held_jobs", "recover_lost",
           "release_held", "stop_worker", "worker_lifecycle"]

log = logging.getLogger("mediafleet.worker")


class BootRefused(Exception):
    """The worker cannot start as configured; the message says why (one line, no secrets)."""


class WorkerRetired(Exception):
    """The worker stopped itself (:func:`stop_worker`): its GPU failed for good. The message says
    why (one line, public). Reported as a failure, so that a supervisor that restarts a worker
    only when it fails (systemd's ``Restart=on-failure``, a Kubernetes Job) starts a fresh one."""


@dataclass(frozen=True)
class WorkerOptions:
    """How to run the Celery worker (the ``mediafleet worker`` flags)."""

    queues: str | None = None
    concurrency: int = 1
    pool: str = "prefork"
    loglevel: str = "INFO"
    hostname: str | None = None
    max_tasks_per_child: int | None = None
    max_memory_per_child: int | None = None


def boot_worker(settings: Settings, options: WorkerOptions, manifest: Manifest | None = None) -> None:
    """Check, then run a worker for ``settings.device`` until it shuts down.

    Raises:
        BootRefused: no broker, no capability for the device class, or the device class cannot be
            served here (e.g. ``gpu`` with no usable CUDA device, a missing model).
        WorkerRetired: the worker ran, then stopped itself because its GPU failed for good.
    """
    if settings.broker_url is None:
        raise BootRefused("set MEDIAFLEET_BROKER_URL (a worker needs a broker)")
    manifest = manifest or settings.manifest()
    # Engines read these at import; cap them to this process's share before anything loads them.
    from mediafleet.workers.engines import EngineConfig, cap_threads, configure

    cap_threads(settings.threads)
    from mediafleet.workers.extractor import check_devices
    from mediafleet.workers.runtime.config import create_app

    served = [cap for cap in manifest.capabilities.values() if settings.device in cap.devices]
    if not served:
        raise BootRefused(f"no capability may run on {settings.device.value}")
    # The start-up checks read the engine configuration (e.g. the Whisper model folder); setting it
    # in the parent loads nothing, and each pool process sets it again after the fork.
    configure(EngineConfig(device=settings.device, threads=settings.threads,
                           whisper_model_dir=settings.whisper_model_dir))
    try:
        check_devices([cap.action for cap in served], settings.device)
    except Unavailable as exc:
        raise BootRefused(f"cannot serve {settings.device.value}: {exc.message}") from None
    app = create_app(settings, manifest)
    queues = options.queues or ",".join(cap.queue(settings.device) for cap in served)
    argv = ["worker", f"--queues={queues}", f"--concurrency={options.concurrency}", f"--pool={options.pool}",
            f"--loglevel={options.loglevel}", *(["--events"] if settings.task_events else [])]
    if options.hostname:
        argv.append(f"--hostname={options.hostname}")
    if options.max_tasks_per_child:
        argv.append(f"--max-tasks-per-child={options.max_tasks_per_child}")
    if options.max_memory_per_child:
        argv.append(f"--max-memory-per-child={options.max_memory_per_child}")
    with worker_lifecycle(app, settings, manifest):
        app.worker_main(argv)
        if (why := retirement.retired_because()) is not None:
            raise WorkerRetired(why)


@contextmanager
def worker_lifecycle(app: Celery, settings: Settings, manifest: Manifest) -> Iterator[None]:
    """Celery's worker signals wired to this app while the block runs, and disconnected after.

    Only a booted worker connects them (building an app connects none), each acts only for its
    own app's worker, and none outlives the worker: a process that builds many apps keeps no
    receiver, closure or store of any of them.
    """
    from mediafleet.workers.engines import EngineConfig, configure
    from mediafleet.workers.runtime.config import job_store

    retirement.arm()  # before the pool forks
    engine_config = EngineConfig(device=settings.device, threads=settings.threads,
                                 whisper_model_dir=settings.whisper_model_dir)
    announcers: list[Announcer] = []

    def configure_engines(**_: Any) -> None:  # in each pool process, after the fork
        configure(engine_config)

    def announce(sender: Any = None, **_: Any) -> None:
        if sender is None or sender.app is not app:
            return
        jobs = job_store(app)
        _warn_of_eviction(jobs)
        queues = [q.name for q in sender.task_consumer.queues]
        announcer = Announcer(jobs.client, sender.hostname, settings.device.value, queues,
                              on_beat=_on_beat(app, jobs, manifest, settings), running=held_jobs)
        announcer.start()
        announcers.append(announcer)

    def retire(sender: Any = None, **_: Any) -> None:
        if sender is not None and getattr(sender, "app", app) is not app:
            return
        while announcers:
            announcers.pop().stop()

    wired = ((worker_process_init, configure_engines), (worker_ready, announce), (worker_shutdown, retire))
    for signal, receiver in wired:
        signal.connect(receiver, weak=False)
    try:
        yield
    finally:
        retire()
        for signal, receiver in wired:
            signal.disconnect(receiver)


def _warn_of_eviction(jobs: JobStore) -> None:
    """Say at start-up, in the worker's log, when the fleet's Redis may evict its keys
    (:func:`~mediafleet.fleet.redis_client.eviction_warning`); ``mediafleet status`` says it too."""
    from mediafleet.fleet.redis_client import redis_away_errors

    try:
        warning = eviction_warning(jobs.client)
    except redis_away_errors():
        return  # Redis away again: the consumer and the heartbeat ride that out and say so
    if warning is not None:
        log.warning("%s", warning)


def held_jobs() -> list[str] | None:
    """The ids of the jobs this worker holds now (prefetched or running: their task ids are their
    job ids), from Celery's worker state in the main process; None when it cannot tell.

    A heartbeat lists them, so a record naming this live worker for a job it no longer holds (its
    outcome lost with a Redis crash, or this worker restarted under the same name) is recovered
    like a lost node's, while a job it still runs, however long, is not.
    """
    from celery.worker import state

    for _ in range(3):
        try:
            return sorted({r.id for r in (*state.reserved_requests, *state.active_requests)})
        except RuntimeError:  # a set changed while it was read (the consumer thread): read again
            continue
    return None


class Steadiness:
    """Whether this worker has beaten without a break for ``TTL_S``: only then does it take a
    started job whose worker has no presence for a lost node's.

    After an outage of Redis longer than the presence TTL every worker's presence has expired at
    once; the live workers announce themselves again within one heartbeat of its return, so a
    worker that waits out one TTL of unbroken beats first does not take their running jobs for lost.
    A worker just started waits likewise (the others, already steady, recover meanwhile).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since: float | None = None
        self._last: float | None = None

    def beat(self) -> bool:
        """Record a successful heartbeat; returns whether the beats have been unbroken for ``TTL_S``."""
        now = self._clock()
        if self._since is None or self._last is None or now - self._last > 2 * HEARTBEAT_S:
            self._since = now  # the first beat, or beats failed in between (Redis away)
        self._last = now
        return now - self._since >= TTL_S


def _on_beat(app: Celery, jobs: JobStore, manifest: Manifest, settings: Settings) -> Callable[[], None]:
    steadiness = Steadiness()

    def after_beat() -> None:
        release_held(app, jobs, manifest, settings.device)
        if not steadiness.beat() or not settings.recover_lost_workers:
            return
        try:
            recover_lost(app, jobs, manifest)
        except Exception:  # noqa: BLE001 - Redis briefly away: the next beat tries again
            log.warning("could not look for jobs of lost workers; trying again at the next heartbeat")

    return after_beat


def release_held(app: Celery, jobs: JobStore, manifest: Manifest, device: DeviceClass) -> int:
    """Queue every held job that a worker of ``device`` may run, on that class's queue.

    Held jobs wait in their records (never on a queue no live worker reads); the first worker of an
    allowed class to come up, or to beat while they wait, sends them to its class's queue.
    """
    from mediafleet.workers.runtime.message import send_extract

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

    Asked by every steady live worker after each heartbeat; one of them looks, per heartbeat period
    across the fleet (:meth:`JobStore.sweep_turn`), so the fleet reads the started records once a
    period rather than once per worker. Only a record quiet for the presence TTL is asked about
    further. A job is recovered once (compare-and-set on the record naming the lost worker), within
    the presence TTL plus about one heartbeat of the loss, instead of after the broker's visibility
    timeout plus kombu's restore sweep. The lost delivery's own message still comes back after that
    timeout; by then the record says finished and it runs nothing (or, for a job still running, the
    newer delivery owns the record).
    """
    from mediafleet.workers.runtime.message import send_extract

    if not jobs.sweep_turn(f"{socket.gethostname()}:{os.getpid()}", HEARTBEAT_S):
        return 0
    recovered = 0
    now = time.time()
    for record in jobs.started():
        capability = manifest.capabilities.get(record.request.action)
        if capability is None or now - record.updated_at < TTL_S:
            continue
        lost_on = record.hostname
        token = jobs.requeue_lost(record, TTL_S)
        if token is not None:
            send_extract(app, record.request, capability, token, record.priority)
            jobs.mark_sent(record.job_id)
            log.info("job %s: its worker %s is lost; queued again", record.job_id, lost_on)
            recovered += 1
    return recovered
