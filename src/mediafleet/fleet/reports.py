"""A finished task's report into its job's record: a plain job's outcome, a part's into its caller's
job, and the join of a job's parts. The worker's outcome middleware, a dispatcher finding a part
finished by an earlier submission, and a waiter recording a lost part all report through here."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from mediafleet.contract.errors import Cancelled, ErrorCode, PublicError
from mediafleet.contract.jobs import ExtractRequest, Outcome, PartOf
from mediafleet.contract.manifest import Manifest
from mediafleet.fleet.store import JobStore
from mediafleet.workers.parts import decides, join, own_part, report_head

__all__ = ["join_parts", "report", "report_part"]


def _now() -> datetime:
    return datetime.now(UTC)


class _Reports(Mapping[str, "Outcome | None"]):
    """The reports a job's record holds, by part name, each read from Redis alone when asked and
    not kept (a split PDF's join reads its ranges one at a time), but for its head (the report
    without its pages: :func:`~mediafleet.workers.parts.report_head`), kept for the join's values."""

    def __init__(self, jobs: JobStore, job_id: str, names: list[str]) -> None:
        self._jobs, self._job_id = jobs, job_id
        self._names = names
        self._heads: dict[str, Outcome | None] = {}

    def __getitem__(self, name: str) -> Outcome | None:
        if name not in self._names:
            raise KeyError(name)
        outcome = self._jobs.read_part(self._job_id, name)
        self._heads[name] = None if outcome is None else report_head(outcome)
        return outcome

    def head(self, name: str) -> Outcome | None:
        if name not in self._heads:
            self[name]  # noqa: B018 - read, for its head
        return self._heads[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def join_parts(jobs: JobStore, job_id: str, manifest: Manifest) -> Any:
    """Write the caller's outcome joined from the parts its record holds (the last reporter's work);
    returns it (None when there was nothing to join): an :class:`Outcome`, or a split PDF's
    :class:`~mediafleet.workers.pdf.split.JoinedPages`, written into the blob store range by range.
    A job that failed cancels its parts still running (their work is not wanted)."""
    record = jobs.look(job_id, brief=True)[0]  # which parts reported, not what (read one at a time)
    if record is None or record.final or not record.parts:
        return None
    request = record.request
    capability = manifest.capability(request.action)
    reported = _Reports(jobs, job_id, [own_part(capability), *record.parts])
    if not any(record.reported(name) for name in reported):
        return None
    outcome = join(request, reported, capability, manifest)
    # Two joiners may both get here (the waiter joins for a joiner it thinks lost): one writes. A
    # split job keeps its own range's report (each further range keeps its part's record), so a
    # waiter that comes later still writes the bundle from the ranges (FleetJob.write).
    split = any(part.split is not None for part in capability.parts.values())
    if not jobs.finish(outcome, keep_part=own_part(capability) if split and outcome.status == "ok" else None):
        return None
    if outcome.status != "ok":
        for name, part in record.parts.items():
            if reported.get(name) is None:
                jobs.cancel(part)
    return outcome


def report_part(jobs: JobStore, manifest: Manifest, of: PartOf, outcome: Outcome) -> Outcome | None:
    """Report a part's finished outcome into its job (whether it decides the job, its kind says);
    the joined outcome when this report was the last and its join was written, else None. The one
    way a part reports: its worker, a dispatcher finding it finished from an earlier submission,
    and a waiter recording it lost all call this."""
    parent = manifest.capability(of.action)
    if jobs.report_part(of.job_id, of.part, outcome, decides=decides(parent, of.part, outcome)) == 0:
        return join_parts(jobs, of.job_id, manifest)
    return None


def report(jobs: JobStore, manifest: Manifest, request: ExtractRequest, outcome: Outcome,
           parts: dict[str, str], delivery: int | None = None, announce: bool = False,
           progress: tuple[int, int | None, str] | None = None) -> Outcome | None:
    """Store a finished task's outcome: a plain job's in its record; a part's into its caller's job.

    A job with ``parts`` reports as its own part (under its modality's name) and is finished by
    whichever of its tasks reports last (:func:`join_parts`); an outcome that decides the job alone
    (the job's own failure, a failed page range) finishes it at once and cancels the parts still
    running. A part keeps its own record too (``mediafleet status`` shows it). Returns the caller's
    final outcome when this report finished the caller's job, else None.

    ``delivery`` is the reporting delivery's number (:meth:`JobStore.start`): a delivery that no
    longer owns its record (a newer one started since, or the job finished) stores nothing. With
    ``announce``, a plain job's waiters are woken by the same write (:meth:`JobStore.finish`); a
    plain job's ``progress`` (its run's last point) is written with its outcome, and a job
    cancelled meanwhile is finished cancelled instead, as that point would have stopped the run.
    """
    if (of := request.part_of) is not None:
        if not jobs.finish(outcome, delivery=delivery):
            return None
        return report_part(jobs, manifest, of, outcome)
    if not parts:
        try:
            written = jobs.finish(outcome, delivery=delivery, announce=announce, progress=progress,
                                  unless_cancelled=progress is not None)
            return outcome if written else None
        except Cancelled:
            cancelled = Outcome.failed(request, PublicError(code=ErrorCode.CANCELLED, message="the job was cancelled"),
                                       _now())
            return cancelled if jobs.finish(cancelled, delivery=delivery, announce=announce, progress=progress) else None
    capability = manifest.capability(request.action)
    failed = outcome.status != "ok"
    left = jobs.report_part(request.job_id, own_part(capability), outcome, decides=failed, delivery=delivery)
    if failed:
        if not jobs.finish(outcome, delivery=delivery):
            return None
        for part in parts.values():
            jobs.cancel(part)
        return outcome
    if left == 0:
        return join_parts(jobs, request.job_id, manifest)
    return None
