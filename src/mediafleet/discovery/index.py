"""The evidence index interface; :func:`mediafleet.discovery.index_open.open_index` picks the implementation from a URL.

``sqlite:PATH`` (or ``sqlite:///ABSOLUTE/PATH``): one SQLite file with FTS5 (BM25), the embedded
default, nothing to start. ``postgresql://...``: PostgreSQL full-text search (tsvector + GIN) for
several hosts. No other scheme is accepted and neither falls back to the other.

Every read and write names a :class:`~mediafleet.discovery.units.Scope`; a scope's *generation*
counts the changes made to it (units added, superseded by a re-extraction), and an artifact's
generation counts its extractions (1, then 2 after a re-extraction with another extractor
version or other options, which supersedes the earlier units).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.discovery.units import Scope, Unit

__all__ = ["AddReport", "EvidenceIndex", "Nomination", "StoredUnit", "group_units"]


@dataclass(frozen=True)
class Nomination:
    """A unit a channel nominates: an id, the generation it was found in, a score.

    The score only orders nominations; it never establishes sufficiency.
    """

    unit_id: str
    derivation_ref: str
    score: float


@dataclass(frozen=True)
class StoredUnit:
    """A unit as the index holds it now."""

    unit: Unit
    scope: Scope
    active: bool
    generation: int  # the artifact's extraction count when this unit was (re)activated


@dataclass(frozen=True)
class AddReport:
    added: int  # units new or reactivated
    superseded: int  # units of an earlier extraction made inactive
    scope_generation: int


class EvidenceIndex(Protocol):
    """What the host and the indexing hook need from an index."""

    def add_bundle(self, scope: Scope, bundle: EvidenceBundle) -> AddReport:
        """Index an ``ok`` bundle's units in ``scope`` (idempotent: the same bundle again changes nothing)."""

    def add_units(self, scope: Scope, units: list[Unit]) -> AddReport:
        """Index units of one artifact and one extraction (one digest, action and derivation ref)."""

    def scope_generation(self, scope: Scope) -> int:
        """The scope's change count (0 for a scope never written)."""

    def search(self, scope: Scope, terms: list[str], limit: int) -> list[Nomination]:
        """Active units of ``scope`` holding every one of the (normalised) terms, best first, then those
        holding most of them (partial matches), at most ``limit`` in all.

        Which of them are ranked, and by which terms, is :mod:`mediafleet.discovery.ranking`'s rule.
        """

    def nearest(self, scope: Scope, query: str, limit: int) -> list[Nomination]:
        """The semantic channel: active units of ``scope`` nearest the query's vector, best first, at most ``limit``."""

    def load(self, scope: Scope, unit_ids: list[str]) -> dict[str, StoredUnit]:
        """The units of ``scope`` with these ids, active or not; ids not in the scope are absent."""

    def close(self) -> None: ...


def group_units(units: list[Unit]) -> tuple[str, str, str]:
    """The one (digest, action, derivation ref) that ``units`` share.

    Raises:
        ValueError: they do not share one.
    """
    keys = {(u.digest, u.action, u.derivation_ref) for u in units}
    if len(keys) != 1:
        raise ValueError("add_units takes the units of one artifact and one extraction")
    return next(iter(keys))
