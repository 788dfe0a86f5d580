"""Which units a search ranks, and by which words: the one rule both indexes follow.

A unit is nominated only when it is an active unit of the scope and holds every word of the query
(after folding and normalisation, :mod:`mediafleet.discovery.normalise`), or, after every unit
that holds them all, when it holds most of them (a *partial match*: more than half of a query of
three words or more, at least one of them not very common), ranked by how many words it holds,
then by BM25 / ``ts_rank`` over the words it holds that are not very common; partial matches are
only looked for when fewer than the limit hold them all, among the ``candidates`` units last indexed
that hold a whole group of that many words (one of them not very common; a query of 9 words or more:
the ``candidates`` units best ranked by those words). What the rule bounds is the ranking, whose cost grows
with the number of units that hold a word (BM25 in SQLite FTS5 reads a word's whole posting list
for its IDF, whatever the ``LIMIT``; ``ts_rank`` in PostgreSQL reads every matching row):

* a word held by more than ``common_units`` (10,000) active units of the scope is *very common*;
* when the query has a word that is not very common, every unit holding all the words is a
  candidate, ranked by the words that are not very common only (BM25 in SQLite, ``ts_rank`` in
  PostgreSQL): very common words filter but do not weigh, as stop words do in many engines;
* when every word is very common, the ``candidates`` (2,000) units holding them all that were
  indexed last (the highest internal row ids: the order units were first indexed) are the
  candidates, ranked with every word weighing alike (SQLite: BM25's term frequency and length
  normalisation, k1 1.2 and b 0.75, against the scope's average length; PostgreSQL: ``ts_rank``,
  which has no IDF); units indexed earlier that hold them all are not nominated;
* equal scores: the unit indexed first comes first.

The counts are of the scope's own active units only, so another scope's evidence never changes
how a scope is searched. The answer never claims completeness anyway: nominations are at most the
host's limit (20), ``omitted_count`` counts what packing into the budget left out, and sufficiency
is ``not_assessed``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DEFAULT_RULE", "RankingRule", "SearchPlan", "plan_search"]


@dataclass(frozen=True)
class RankingRule:
    """The rule's two numbers (the defaults are what a host gets; tests use small ones).

    Args:
        common_units: a word held by more than this many active units of the scope is very common.
        candidates: how many of the units last indexed are ranked when every word is very common.

    Raises:
        ValueError: either is not a positive integer.
    """

    common_units: int = 10_000
    candidates: int = 2_000

    def __post_init__(self) -> None:
        for name in ("common_units", "candidates"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer")


DEFAULT_RULE = RankingRule()


@dataclass(frozen=True)
class SearchPlan:
    """What one search does: the words every unit must hold, the words that rank, and how."""

    terms: tuple[str, ...]  # every nominated unit holds all of them
    ranked_by: tuple[str, ...]  # the words the ranking weighs (every term when all are very common)
    newest_only: bool  # every word is very common: only the rule's candidates last indexed are ranked


def plan_search(terms: list[str], very_common: Callable[[str], bool]) -> SearchPlan:
    """The plan for ``terms``, given which of them are very common in the scope."""
    common = [very_common(t) for t in terms]
    rare = tuple(t for t, c in zip(terms, common, strict=True) if not c)
    if rare:
        return SearchPlan(tuple(terms), rare, newest_only=False)
    return SearchPlan(tuple(terms), tuple(terms), newest_only=True)
