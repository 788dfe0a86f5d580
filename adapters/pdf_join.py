"""The one rule by which a split PDF job's ranges make one outcome's head: its times, checks and
producer (:class:`JoinHead`), for the fleet's join (:class:`mediafleet.workers.pdf.split.PagesPart`)
and the bundle written from the ranges (:mod:`mediafleet.adapters.pdf_stream`)."""

from __future__ import annotations

from datetime import datetime

from mediafleet.contract.common import Producer
from mediafleet.contract.jobs import Outcome

__all__ = ["JoinHead"]


class JoinHead:
    """The values a split job's join takes from its ranges' outcomes, added in page order (the
    job's own range first): the earliest start, the latest end, each check passed only when every
    range passed it, and the first producer that names OCR models (else the first range's).

    The one rule for :meth:`PagesPart.join` and the bundle written from the ranges
    (:mod:`mediafleet.adapters.pdf_stream`), kept here so both read it without MuPDF. It keeps a few values, never a range's outcome: a join
    of many ranges keeps no objects made while reading each (which would pin the memory that
    range's pages took).
    """

    def __init__(self) -> None:
        self.ranges = 0
        self._passed: dict[str, bool] = {}
        self._seen: dict[str, int] = {}
        self.producer: Producer | None = None
        self.started_at: datetime | None = None
        self.ended_at: datetime | None = None

    def add(self, outcome: Outcome) -> None:
        self.ranges += 1
        for name, ok in outcome.checks.items():
            if name in self._passed:
                self._passed[name] = self._passed[name] and ok
                self._seen[name] += 1
            else:
                self._passed[name] = ok
                self._seen[name] = 1
        producer = getattr(outcome.result, "producer", None)
        if producer is not None and (self.producer is None or (producer.models and not self.producer.models)):
            self.producer = producer
        if self.started_at is None or outcome.started_at < self.started_at:
            self.started_at = outcome.started_at
        if self.ended_at is None or outcome.ended_at > self.ended_at:
            self.ended_at = outcome.ended_at

    @property
    def checks(self) -> dict[str, bool]:
        return {name: ok and self._seen[name] == self.ranges for name, ok in self._passed.items()}
