"""What every delivery of a fleet job goes through, around the pure runner, in the style of dramatiq.

The Celery task is a thin shell: it makes a :class:`Delivery` and hands it, with the runner, to
:func:`run_chain`, which calls each middleware's hooks in list order:

* ``before_run(delivery)`` once, before the run. It may raise :class:`Skip` (nothing to run and
  nothing to report: the shell stores no result), or return an :class:`Outcome` that decides the
  delivery without running it (the remaining ``before_run`` hooks are not called; every
  ``after_run`` still is, so that outcome is reported).
* ``on_progress(delivery, done, total)`` for each progress call of the extractor; returning False
  stops that call here (the later middleware do not see it). It may raise (``Cancelled``: the
  runner turns that into the job's outcome).
* ``after_run(delivery, outcome)`` once, with the outcome, run or decided.

:func:`fleet_middleware` is the fleet's chain: delivery counting, progress throttling, progress
reporting, cancellation, the delivery limit, the release check (a job named by another release is
not run), outcome and part reporting, discovery indexing, the notice that wakes a finished job's
waiters, and the device health check that stops a worker whose GPU failed for good. Each
middleware is tested on its own against a real Redis (``tests/test_middleware.py``,
``tests/test_release_check.py``); none imports Celery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mediafleet.contract.errors import Cancelled, ErrorCode, MediafleetError, PublicError
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome
from mediafleet.contract.manifest import Manifest
from mediafleet.discovery.hook import index_finished
from mediafleet.fleet.store import MAX_DELIVERIES, JobStore, Started
from mediafleet.fleet.unreachable import redis_away_errors
from mediafleet.workers.engines import broken_device
from mediafleet.fleet.reports import report
from mediafleet.workers.parts import named_job_id
from mediafleet.workers.registry import progress_unit
from mediafleet.workers.spec import ProgressFn

__all__ = [
    "Cancellation", "Delivery", "DeliveryCounting", "DeliveryLimit", "DeviceHealth", "DiscoveryIndexing",
    "FinishedNotice", "Middleware", "OutcomeReporting", "ProgressReporting", "ProgressThrottle", "ReleaseCheck", "Skip",
    "fleet_middleware", "run_chain",
]

log = logging.getLogger("mediafleet.worker")
# What Redis being briefly away (or full) looks like to a progress call: the fleet's one list of
# Redis-away errors, and any socket or disk error.
_TRANSIENT = (*redis_away_errors(), OSError)
PROGRESS_EVERY_S = 1.0


def _now() -> datetime:
    return datetime.now(UTC)


class Skip(Exception):  # a signal, like dramatiq's SkipMessage, not an error
    """Raised by ``before_run``: this delivery has nothing to run and nothing to report."""


@dataclass
class Delivery:
    """One delivery of a job's message to this worker: what the middleware know and share.

    The shell fills the first four fields (and ``taken``, when the worker's consumer counted the
    delivery); :class:`DeliveryCounting` fills ``attempt``, ``before`` and ``parts``;
    :class:`ProgressReporting` keeps ``state`` (the record's state at the last progress report) and
    :class:`ProgressThrottle` ``progress_at``; :class:`OutcomeReporting` sets ``finished`` when its
    report finished the caller's job.
    """

    request: ExtractRequest
    jobs: JobStore
    token: str = ""
    hostname: str = ""
    publish: Callable[[dict[str, Any]], None] = field(default=lambda meta: None)
    """Publishes progress where the broker's clients see it (the shell: Celery's ``PROGRESS`` state)."""
    retire: Callable[[str], None] = field(default=lambda why: None)
    """Stops this worker, saying why (the shell: a warm shutdown of the worker's main process)."""
    taken: Started | None = None
    """The count the worker's consumer made of this delivery as it took the message (the shell:
    :func:`mediafleet.workers.app.taken`), or None: :class:`DeliveryCounting` makes it."""
    attempt: int = 0
    """This delivery's number (:meth:`JobStore.start`); it owns the job's record while no newer one started."""
    before: JobState | None = None
    parts: dict[str, str] = field(default_factory=dict)
    """The parts the job fanned out (name -> job id); none for a plain job or a part."""
    state: JobState | None = None
    progress_at: float | None = None
    finished: Outcome | None = None
    announced: bool = False
    """Whether this delivery woke the waiters of the caller's job it finished: by the write of its
    outcome (:class:`OutcomeReporting`) or by its notice after (:class:`FinishedNotice`)."""
    published: bool = False
    """Whether :class:`ProgressReporting` published progress (the shell: stored as the task's ``PROGRESS`` result)."""
    last_progress: tuple[int, int | None, str] | None = None
    """The run's last progress point, held back by :class:`ProgressReporting` to be written with the outcome."""

    @property
    def plain(self) -> bool:
        """A job of its own: not a part of another, and with no parts of its own."""
        return self.request.part_of is None and not self.parts


class Middleware:
    """A no-op middleware: subclasses override the hooks they need."""

    def before_run(self, delivery: Delivery) -> Outcome | None:
        return None

    def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
        return True

    def after_run(self, delivery: Delivery, outcome: Outcome) -> None:
        return None


def run_chain(middleware: Sequence[Middleware], delivery: Delivery, run: Callable[[ProgressFn], Outcome]) -> Outcome:
    """Run ``run(progress)`` for ``delivery`` through ``middleware`` (hooks in list order); returns
    the outcome, run or decided by a ``before_run``.

    Raises:
        Skip: a ``before_run`` found nothing to run (no ``after_run`` is called).
    """
    outcome: Outcome | None = None
    for m in middleware:
        if (outcome := m.before_run(delivery)) is not None:
            break
    if outcome is None:

        def progress(done: int, total: int | None) -> None:
            for m in middleware:
                if not m.on_progress(delivery, done, total):
                    return

        outcome = run(progress)
    for m in middleware:
        m.after_run(delivery, outcome)
    return outcome


class DeliveryCounting(Middleware):
    """Counts the delivery in the job's record (which this delivery owns from then on) and skips a
    message there is nothing to run for. A delivery the worker's consumer counted as it took the
    message (``delivery.taken``) is not counted again.

    Skipped: a message of a submission that was cancelled and claimed again (the current submission
    has its own message), and a second message for a job already finished (sent again for a job
    thought unsent, recovered from a lost node, or redelivered after the visibility timeout). A
    skipped delivery stores no result, so it cannot wake (or mislead) the current submission's
    waiters.
    """

    def before_run(self, delivery: Delivery) -> Outcome | None:
        attempt, before, parts = delivery.taken or delivery.jobs.start(delivery.request.job_id, delivery.hostname,
                                                                       delivery.token)
        delivery.attempt, delivery.before, delivery.parts = attempt, before, parts
        if attempt < 0 or before in (JobState.DONE, JobState.FAILED):
            raise Skip
        return None


class ProgressThrottle(Middleware):
    """Lets a progress call through at most every ``every_s`` seconds, and always the last one."""

    def __init__(self, every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._every_s = every_s
        self._clock = clock

    def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
        now = self._clock()
        if delivery.progress_at is not None and now - delivery.progress_at < self._every_s and done != total:
            return False
        delivery.progress_at = now
        return True


class ProgressReporting(Middleware):
    """Publishes progress (``done``, ``total``, the action's unit) and records it in the job's
    record, keeping the record's state for :class:`Cancellation`. Best effort: with Redis briefly
    away the job goes on, and the call stops here.

    The last call (``done == total``) is not published: the task's own result replaces it a moment
    later, and publishing it would only wake every waiter once more for nothing (two round trips
    and a wake-up per job; all a one-page job reports). With ``hold_last`` a plain job's last call
    is not written either but kept in ``delivery.last_progress`` for :class:`OutcomeReporting` to
    write with the outcome, which then also does what this point's cancellation check would have
    done (:meth:`JobStore.finish`'s ``progress``)."""

    def __init__(self, hold_last: bool = False) -> None:
        self._hold_last = hold_last

    def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
        unit = progress_unit(delivery.request.action)
        last = total is not None and done >= total
        if last and self._hold_last and delivery.plain:
            delivery.last_progress = (done, total, unit)
            return True
        try:
            if not last:
                delivery.publish({"done": done, "total": total, "unit": unit})
                delivery.published = True
            delivery.state = delivery.jobs.progress(delivery.request.job_id, done, total, unit)
        except _TRANSIENT:
            return False
        return True


class Cancellation(Middleware):
    """A job cancelled before this delivery started is not run (it ends ``cancelled``); one
    cancelled while it runs stops at its next reported progress point."""

    def __init__(self, clock: Callable[[], datetime] = _now) -> None:
        self._clock = clock

    def before_run(self, delivery: Delivery) -> Outcome | None:
        if delivery.before != JobState.CANCELLED:
            return None
        return Outcome.failed(delivery.request, PublicError(code=ErrorCode.CANCELLED, message="the job was cancelled"),
                              self._clock())

    def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
        if delivery.state == JobState.CANCELLED:
            raise Cancelled("the job was cancelled")
        return True


class DeliveryLimit(Middleware):
    """A job whose deliveries stopped their worker process ``limit`` times (an OOM kill, a
    segfault, a lost node) is not run again: it fails with ``worker_lost`` and the queue flows."""

    def __init__(self, limit: int = MAX_DELIVERIES, clock: Callable[[], datetime] = _now) -> None:
        self._limit = limit
        self._clock = clock

    def before_run(self, delivery: Delivery) -> Outcome | None:
        if delivery.attempt <= self._limit:
            return None
        return Outcome.failed(delivery.request, PublicError(
            code=ErrorCode.WORKER_LOST,
            message=f"the job stopped its worker process {delivery.attempt - 1} times; it is not delivered again",
        ), self._clock())


class ReleaseCheck(Middleware):
    """Runs a job only where this release names it as its request does (:func:`named_job_id`).

    A job id names the extractor version and the recipe of the release that named it. A worker of
    another release (in a rolling upgrade) would run its own extractors under that id, and every
    resubmission would then be answered with that other version's evidence. Such a delivery is
    failed, retryably (``engine_unavailable``): once the fleet runs one release, a resubmission runs.
    """

    def __init__(self, manifest: Manifest, clock: Callable[[], datetime] = _now) -> None:
        self._manifest = manifest
        self._clock = clock

    def before_run(self, delivery: Delivery) -> Outcome | None:
        try:
            named = named_job_id(delivery.request, self._manifest)
        except MediafleetError:
            return None  # an action the manifest in force does not declare: the runner refuses it
        if named == delivery.request.job_id:
            return None
        log.warning("job %s was named by another release than this worker's; not run", delivery.request.job_id)
        return Outcome.failed(delivery.request, PublicError(
            code=ErrorCode.ENGINE_UNAVAILABLE, retryable=True,
            message="the job was named by a dispatcher of another mediafleet release than this worker's (their "
                    "extractors differ); run dispatchers and workers of one release; it can be submitted again",
        ), self._clock())


class OutcomeReporting(Middleware):
    """Stores the outcome (:func:`report`): a plain job's in its record, a part's into its caller's
    job (joined by the last part to report). Sets ``delivery.finished`` when that finished the
    caller's job.

    With ``announce`` (nothing else to do before the waiters read it: no discovery index), a plain
    job's outcome is written and its waiters woken in one step, and ``delivery.announced`` says so.
    """

    def __init__(self, manifest: Manifest, announce: bool = False) -> None:
        self._manifest = manifest
        self._announce = announce

    def after_run(self, delivery: Delivery, outcome: Outcome) -> None:
        delivery.finished = report(delivery.jobs, self._manifest, delivery.request, outcome, delivery.parts,
                                   delivery=delivery.attempt, announce=self._announce,
                                   progress=delivery.last_progress)
        delivery.announced = self._announce and delivery.plain and delivery.finished is not None


class DiscoveryIndexing(Middleware):
    """Indexes the evidence of a job this delivery finished, when the settings name an index."""

    def __init__(self, setting: str | None, manifest: Manifest) -> None:
        self._setting = setting
        self._manifest = manifest

    def after_run(self, delivery: Delivery, outcome: Outcome) -> None:
        if delivery.finished is not None:
            index_finished(self._setting, delivery.finished, self._manifest)


class FinishedNotice(Middleware):
    """Wakes the waiters of a job this delivery finished, last of all (after its indexing, so a
    caller that searches right after its bundle came back finds the evidence). Best effort: a
    waiter also re-reads the record at each slice of its wait."""

    def after_run(self, delivery: Delivery, outcome: Outcome) -> None:
        if delivery.finished is not None and not delivery.announced:
            try:
                delivery.jobs.announce_finished(delivery.finished.job_id)
            except _TRANSIENT:
                return
            delivery.announced = True


class DeviceHealth(Middleware):
    """Stops the worker once its GPU has failed for good (:func:`mediafleet.workers.engines.broken_device`:
    a CUDA error, a GPU library that cannot be loaded), after this delivery's outcome is reported.

    Each such job fails retryably, but a worker left running would take every job its class is
    routed and fail it the same way. Stopped, it leaves the fleet's routing (its presence is
    retired), its prefetched messages go back to the queue, and its supervisor starts a fresh
    process, with a fresh CUDA context."""

    def __init__(self) -> None:
        self._retiring = False

    def after_run(self, delivery: Delivery, outcome: Outcome) -> None:
        if (why := broken_device()) is not None and not self._retiring:
            self._retiring = True
            delivery.retire(why)


def fleet_middleware(manifest: Manifest, discovery_index: str | None = None) -> list[Middleware]:
    """The fleet task's chain, in order. Cancellation comes after progress reporting (it reads the
    state that report returned) and before the delivery limit (a cancelled job ends ``cancelled``
    however often it was delivered); the release check after both (a cancelled job is cancelled,
    whoever took it); the finished notice comes last (with no index to fill, a plain job's is sent
    with its outcome's write instead); the device health check after it all."""
    return [DeliveryCounting(), ProgressThrottle(), ProgressReporting(hold_last=True), Cancellation(), DeliveryLimit(),
            ReleaseCheck(manifest), OutcomeReporting(manifest, announce=discovery_index is None),
            DiscoveryIndexing(discovery_index, manifest), FinishedNotice(), DeviceHealth()]
