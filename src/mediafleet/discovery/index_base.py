"""What the two evidence indexes share: one search procedure under the ranking rule, and the rest.

Each index supplies its queries (:class:`IndexBase`'s abstract methods); the order of a search,
the rule that decides how it ranks (:mod:`mediafleet.discovery.ranking`), bundle handling and the
shape of a loaded unit live here once, so both backends answer alike.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.discovery.index import AddReport, Nomination, StoredUnit
from mediafleet.discovery.ranking import DEFAULT_RULE, RankingRule, plan_search
from mediafleet.discovery.units import Scope, Unit, units_from_bundle

__all__ = ["IndexBase", "held_terms", "partial_groups", "partial_need"]


class IndexBase(ABC):
    """The shared part of :class:`~mediafleet.discovery.index.EvidenceIndex` implementations."""

    def __init__(self, rule: RankingRule = DEFAULT_RULE) -> None:
        self.rule = rule
        self._lock = threading.Lock()
        self._vectors: dict[Scope, _Vectors] = {}

    def _embed(self, units: list[Unit]) -> list[bytes]:
        """Each unit's stored vector (:mod:`mediafleet.discovery.embedding`): 256 signed bytes."""
        from mediafleet.discovery.embedding import default_embedder, quantise

        vectors = quantise(default_embedder().embed([u.folded for u in units]))
        return [row.tobytes() for row in vectors]

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
    def _rank_partial(self, scope: Scope, groups: tuple[tuple[str, ...], ...], ranked_by: tuple[str, ...],
                      candidates: int) -> list[tuple[Nomination, str]]:
        """At most ``candidates`` units holding every word of one of ``groups`` at least, best first by BM25 /
        ``ts_rank`` over the ``ranked_by`` words each holds (ties by index order), each with its matched text
        (folded and normalised). Which ``candidates`` are read when more qualify is the backend's to say."""

    @abstractmethod
    def _vector_rows(self, scope: Scope) -> Iterable[tuple[str, str, bytes]]:
        """``(unit_id, derivation_ref, vector)`` of every active unit of the scope, in index order."""

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
            full = self._rank(scope, plan.terms, plan.ranked_by, limit)
            need = partial_need(len(terms))
            if len(full) >= limit or need >= len(terms):
                return full
            # Partial matches: units holding most of the words (one of them not very common), after
            # every unit that holds them all, by how many words they hold, then by BM25 / ts_rank.
            seen = {n.unit_id for n in full}
            partial = []
            groups = partial_groups(terms, plan.ranked_by, need)
            for order, (nomination, text) in enumerate(self._rank_partial(scope, groups, plan.ranked_by,
                                                                          self.rule.candidates)):
                held = len(held_terms(terms, text))
                if nomination.unit_id not in seen and held >= need:
                    partial.append((-held, order, nomination))
            partial.sort(key=lambda p: (p[0], p[1]))
            return full + [n for _, _, n in partial[:limit - len(full)]]

    def nearest(self, scope: Scope, query: str, limit: int) -> list[Nomination]:
        """The semantic channel: the active units of ``scope`` whose vectors are nearest the query's.

        The scope's vectors are held in memory, read again when its generation changes. The 256 sign
        bits of every vector are compared first (Hamming distance; above ``FIRST_BITS_ABOVE`` vectors,
        the first 64 bits pick ``FIRST_BITS_KEEP`` for all 256), and the ``NEAREST_CANDIDATES``
        closest are ranked by the cosine of their stored vectors; equal cosines, the unit indexed
        first. The score is that cosine: it orders, and never establishes sufficiency.
        """
        from mediafleet.discovery.embedding import default_embedder, quantise, sign_bits
        from mediafleet.discovery.text import matched_form

        if limit <= 0:
            return []
        import numpy as np

        query_vector = default_embedder().embed([matched_form(query)])
        with self._lock:
            generation = self._generation(scope)
            held = self._vectors.get(scope)
            if held is None or held.generation != generation:
                held = _Vectors.build(generation, list(self._vector_rows(scope)))
                self._vectors[scope] = held
        if not held.unit_ids:
            return []
        query_bits = sign_bits(query_vector)[0].view(np.uint64)
        rows = np.arange(len(held.unit_ids))
        if len(rows) > FIRST_BITS_ABOVE:
            # A million units: the first 64 sign bits pick the closest ~FIRST_BITS_KEEP, then all 256 bits.
            rows = _closest(np.bitwise_count(held.bits[0] ^ query_bits[0]), FIRST_BITS_KEEP)
        distance = sum((np.bitwise_count(column[rows] ^ q).astype(np.uint16)
                        for column, q in zip(held.bits, query_bits, strict=True)), np.zeros(len(rows), np.uint16))
        rows = rows[_closest(distance, NEAREST_CANDIDATES)]
        query_bytes = quantise(query_vector)[0].astype(np.float32)
        cosine = (held.vectors[rows].astype(np.float32) @ query_bytes) / (127.0 * 127.0)
        order = np.lexsort((rows, -cosine))[:limit]
        return [Nomination(held.unit_ids[r], held.derivations[r], float(c))
                for r, c in zip(rows[order].tolist(), cosine[order].tolist(), strict=True)]

    def load(self, scope: Scope, unit_ids: list[str]) -> dict[str, StoredUnit]:
        if not unit_ids:
            return {}
        with self._lock:
            rows = list(self._unit_rows(scope, unit_ids))
        return dict(_stored_units(scope, rows))


NEAREST_CANDIDATES = 400  # vectors ranked by cosine after the sign-bit comparison (at least; ties at the cut stay)
FIRST_BITS_ABOVE = 50_000  # a scope with more active vectors than this compares their first 64 bits first,
FIRST_BITS_KEEP = 20_000  # keeping at least this many closest (every one tied at the cut) for all 256 bits


def _closest(distance: Any, keep: int) -> Any:
    """Indices of the ``keep`` smallest distances and every one tied with the last (a count per distance,
    cheaper than a partition over a million)."""
    import numpy as np

    if len(distance) <= keep:
        return np.arange(len(distance))
    counts = np.cumsum(np.bincount(distance))
    cut = int(np.searchsorted(counts, keep))
    return np.flatnonzero(distance <= cut)


@dataclass
class _Vectors:
    """A scope's active vectors as of one generation: ids, sign bits (4 columns of n uint64), bytes (n x 256 int8)."""

    generation: int
    unit_ids: list[str]
    derivations: list[str]
    bits: Any
    vectors: Any

    @classmethod
    def build(cls, generation: int, rows: list[tuple[str, str, bytes]]) -> _Vectors:
        import numpy as np

        from mediafleet.discovery.embedding import DIMENSIONS

        vectors = np.frombuffer(b"".join(bytes(v) for _, _, v in rows), dtype=np.int8).reshape(-1, DIMENSIONS)
        bits = np.packbits(vectors > 0, axis=-1, bitorder="little").view(np.uint64).reshape(-1, DIMENSIONS // 64)
        columns = [np.ascontiguousarray(bits[:, k]) for k in range(DIMENSIONS // 64)]
        return cls(generation, [r[0] for r in rows], [r[1] for r in rows], columns, vectors)


PARTIAL_GROUPS = 64  # at most this many word groups are asked for; a longer query asks for any of its rarer words


def partial_groups(terms: list[str], ranked_by: tuple[str, ...], need: int) -> tuple[tuple[str, ...], ...]:
    """The groups of words a partial match holds one of whole: every ``need`` of the ``terms`` with at least
    one of ``ranked_by`` (the words not very common) among them, so the index itself finds only the units
    that qualify (a posting-list intersection) instead of ranking every unit that holds any rarer word.

    A query whose groups would be more than ``PARTIAL_GROUPS`` (long queries: 9 words or more with a rarer
    one) gets each word of ``ranked_by`` alone as a group, and the units are filtered after.
    """
    from itertools import combinations
    from math import comb

    rare = set(ranked_by)
    if comb(len(terms), need) > PARTIAL_GROUPS:
        return tuple((t,) for t in ranked_by)
    return tuple(g for g in combinations(terms, need) if rare.intersection(g))


def partial_need(count: int) -> int:
    """How many of a query's ``count`` words a partial match holds: more than half."""
    return count // 2 + 1


def held_terms(terms: Iterable[str], matched_text: str) -> list[str]:
    """The terms (normalised words) that a unit's matched text (normalised, space-separated) holds."""
    words = set(matched_text.split())
    return [t for t in terms if t in words]


def _stored_units(scope: Scope, rows: list[tuple[Any, ...]]) -> Iterator[tuple[str, StoredUnit]]:
    for uid, digest, action, derivation, generation, active, text, source in rows:
        source_range = source if isinstance(source, dict) else json.loads(source)
        unit = Unit(unit_id=uid, text=text, digest=digest, action=action, derivation_ref=derivation,
                    source_range=source_range)
        yield uid, StoredUnit(unit=unit, scope=scope, active=bool(active), generation=int(generation))
