"""What a delivery of a fleet job is to its middleware, the no-op middleware, and the chain runner.

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome
from mediafleet.fleet.deliveries import Started
from mediafleet.fleet.store import JobStore
from mediafleet.modalities.spec import ProgressFn

__all__ = ["Delivery", "Middleware", "Skip", "run_chain", "utc_now"]


def utc_now() -> datetime:
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
    :func:`mediafleet.workers.runtime.transport.taken`), or None: :class:`DeliveryCounting` makes it."""
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
