"""What the two evidence indexes share: one search procedure under the ranking rule, and the rest.

Each index supplies its queries (:class:`IndexBase`'s abstract methods); the order of a search,
the rule that decides how it ranks (:mod:`mediafleet.discovery.ranking`), bundle handling and the
shape of a loaded unit live here once, so both backends answer alike.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.discovery.index import AddReport, Nomination, StoredUnit
from mediafleet.discovery.ranking import DEFAULT_RULE, RankingRule, plan_search
from mediafleet.discovery.units import Scope, Unit, units_from_bundle

__all__ = ["IndexBase"]


class IndexBase(ABC):
    """The shared part of :class:`~mediafleet.discovery.index.EvidenceIndex` implementations."""

    def __init__(self, rule: RankingRule = DEFAULT_RULE) -> None:
        self.rule = rule
        self._lock = threading.Lock()

    # -- what each backend supplies -------------------------------------------------------------

    @abstractmethod
    def add_units(self, scope: Scope, units: list[Unit]) -> AddReport: ...

    @abstractmethod
    def _generation(self, scope: Scope) -> int: ...

    @abstractmethod
    def _snapshot(self) -> AbstractContextManager[None]:
        """One consistent read of the index for a whole search (called holding the lock)."""

    @abstractmethod
    def _has_scope(self, scope: Scope) -> bool: ...

    @abstractmethod
    def _held_by_more_than(self, scope: Scope, term: str, count: int) -> bool:
        """Whether more than ``count`` active units of the scope hold ``term`` (reads at most ``count + 1``)."""

    @abstractmethod
    def _rank(self, scope: Scope, terms: tuple[str, ...], ranked_by: tuple[str, ...],
              limit: int) -> list[Nomination]:
        """Units holding every term, ranked by the ``ranked_by`` terms; ties by index order."""

    @abstractmethod
    def _rank_newest(self, scope: Scope, terms: tuple[str, ...], candidates: int, limit: int) -> list[Nomination]:
        """The ``candidates`` units last indexed that hold every term, ranked with the terms weighing alike."""

    @abstractmethod
    def _unit_rows(self, scope: Scope, unit_ids: list[str]) -> Iterable[tuple[Any, ...]]:
        """``(unit_id, digest, action, derivation_ref, generation, active, text, source_range)`` rows."""

    @abstractmethod
    def _close(self) -> None: ...

    # -- shared ---------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._close()

    def add_bundle(self, scope: Scope, bundle: EvidenceBundle) -> AddReport:
        units = units_from_bundle(bundle)
        if not units:
            return AddReport(0, 0, self.scope_generation(scope))
        return self.add_units(scope, units)

    def scope_generation(self, scope: Scope) -> int:
        with self._lock:
            return self._generation(scope)

    def search(self, scope: Scope, terms: list[str], limit: int) -> list[Nomination]:
        if not terms or limit <= 0:
            return []
        with self._lock, self._snapshot():
            if not self._has_scope(scope):
                return []
            plan = plan_search(terms, lambda term: self._held_by_more_than(scope, term, self.rule.common_units))
            if plan.newest_only:
                return self._rank_newest(scope, plan.terms, self.rule.candidates, limit)
            return self._rank(scope, plan.terms, plan.ranked_by, limit)

    def load(self, scope: Scope, unit_ids: list[str]) -> dict[str, StoredUnit]:
        if not unit_ids:
            return {}
        with self._lock:
            rows = list(self._unit_rows(scope, unit_ids))
        return dict(_stored_units(scope, rows))


def _stored_units(scope: Scope, rows: list[tuple[Any, ...]]) -> Iterator[tuple[str, StoredUnit]]:
    for uid, digest, action, derivation, generation, active, text, source in rows:
        source_range = source if isinstance(source, dict) else json.loads(source)
        unit = Unit(unit_id=uid, text=text, digest=digest, action=action, derivation_ref=derivation,
                    source_range=source_range)
        yield uid, StoredUnit(unit=unit, scope=scope, active=bool(active), generation=int(generation))
