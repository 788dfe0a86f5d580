"""The outcome: reported into the job's record (or its caller's), indexed for discovery, and the
notice that wakes a finished job's waiters."""

from __future__ import annotations

from mediafleet.contract.jobs import Outcome
from mediafleet.contract.manifest import Manifest
from mediafleet.discovery.hook import index_finished
from mediafleet.fleet.reports import report
from mediafleet.workers.runtime.middleware.delivery import Delivery, Middleware
from mediafleet.workers.runtime.middleware.progress import TRANSIENT

__all__ = ["DiscoveryIndexing", "FinishedNotice", "OutcomeReporting"]


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
            except TRANSIENT:
                return
            delivery.announced = True
