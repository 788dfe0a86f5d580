"""The ranking rule (``mediafleet.discovery.ranking``) with known answers, on SQLite and PostgreSQL alike.

A small rule (a word in more than 3 units is very common; 4 candidates) makes every path of the
rule visible in a few units: a very common word alone ranks only the units indexed last, a rarer
word finds its unit wherever it is, very common words filter but do not weigh, the counts are the
scope's own active units, and both backends nominate the same units in the same order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediafleet.discovery.index import EvidenceIndex

from mediafleet.discovery.index_open import open_index
from mediafleet.discovery.index_sqlite import term_frequency
from mediafleet.discovery.ranking import DEFAULT_RULE, RankingRule, plan_search
from mediafleet.discovery.text import query_terms
from mediafleet.discovery.units import Scope, Unit
from tests.discovery_fixtures import PostgresServer, postgres_server, unit  # noqa: F401

HARBOUR = Scope("harbour")
RULE = RankingRule(common_units=3, candidates=4)


def open_url(request: pytest.FixtureRequest, kind: str, tmp_path: Path, rule: RankingRule) -> EvidenceIndex:
    if kind == "sqlite":
        return open_index(f"sqlite:{tmp_path / 'index.db'}", rule)
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return open_index(server.database("r" + uuid.uuid4().hex[:12]), rule)


@pytest.fixture(params=["sqlite", "postgresql"])
def ruled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EvidenceIndex]:
    """A fresh index under the small rule: a SQLite file, then a new database on the PostgreSQL server."""
    opened = open_url(request, request.param, tmp_path, RULE)
    yield opened
    opened.close()


def artifact(texts: list[str], first: int, name: str = "ab", derivation: str = "1") -> list[Unit]:
    """One artifact's units, ids from ``first``: each call's units are indexed after the earlier calls'."""
    return [unit(t, first + i, digest="sha256:" + name * 32, derivation="eg:derivation:" + derivation * 32)
            for i, t in enumerate(texts)]


def found(index: EvidenceIndex, query: str, scope: Scope = HARBOUR, limit: int = 20) -> list[str]:
    return [n.unit_id for n in index.search(scope, query_terms(query), limit)]


def ids(units: list[Unit], *which: int) -> list[str]:
    return [units[i].unit_id for i in which]


# Every unit three tokens long, so BM25's length normalisation treats them alike.
TIDES = ["tide tide tide", "tide gate open", "tide gate shut", "tide mooring line", "tide gate ajar",
         "tide tide gate", "tide gate wide", "tide gate held"]


def test_a_very_common_word_alone_ranks_only_the_units_indexed_last(ruled: EvidenceIndex) -> None:
    units = artifact(TIDES, 0)
    ruled.add_units(HARBOUR, units)
    # "tide" is in 8 units (> 3): the 4 indexed last are ranked; the one with it twice comes first,
    # the others by index order. The first unit (tide three times) is older than the candidates.
    assert found(ruled, "tide") == ids(units, 5, 4, 6, 7)
    assert found(ruled, "TIDE", limit=2) == ids(units, 5, 4)
    scores = [n.score for n in ruled.search(HARBOUR, ["tide"], 20)]
    assert all(s > 0 for s in scores) and scores == sorted(scores, reverse=True)
    # Two very common words: the 4 units indexed last that hold both.
    assert found(ruled, "gate tide") == ids(units, 5, 4, 6, 7)


def test_a_rarer_word_finds_its_unit_however_common_the_others(ruled: EvidenceIndex) -> None:
    units = artifact(TIDES, 0)
    ruled.add_units(HARBOUR, units)
    assert found(ruled, "tide mooring") == ids(units, 3)  # older than any candidate of "tide" alone
    assert found(ruled, "mooring") == ids(units, 3)
    assert found(ruled, "tide tide tide") == found(ruled, "tide")  # the same query, folded to one term
    # Matching is unchanged: a unit holds every word or is not nominated.
    assert found(ruled, "tide zeppelin") == []
    assert found(ruled, "zeppelin tide gate") == []
    assert found(ruled, "mooring gate") == []


def test_very_common_words_filter_but_do_not_weigh_past_the_threshold(ruled: EvidenceIndex) -> None:
    pair = artifact(["tide mooring line", "tide tide mooring"], 0, "a1")
    ruled.add_units(HARBOUR, pair)
    ruled.add_units(HARBOUR, artifact([f"quay bollard {i}" for i in range(6)], 10, "a2"))
    # "tide" in 2 units, then 3 (= common_units, still not very common): BM25 / ts_rank weigh it.
    assert found(ruled, "tide mooring") == ids(pair, 1, 0)
    ruled.add_units(HARBOUR, artifact(["tide gate open"], 20, "a3"))
    assert found(ruled, "tide mooring") == ids(pair, 1, 0)
    # In 4 units it is very common: it still filters, only "mooring" ranks (a tie: index order).
    ruled.add_units(HARBOUR, artifact(["tide gate shut"], 30, "a4"))
    assert found(ruled, "tide mooring") == ids(pair, 0, 1)
    assert found(ruled, "tide quay") == []


def test_the_rule_counts_only_the_scopes_own_active_units(ruled: EvidenceIndex) -> None:
    other = Scope("harbour", "north-quay")
    theirs = artifact([f"tide gate {w}" for w in ("one", "two", "three", "four", "five", "six")], 0, "b1")
    ruled.add_units(other, theirs)
    pair = artifact(["tide mooring line", "tide tide mooring"], 10, "b2")
    ruled.add_units(HARBOUR, pair)
    ruled.add_units(HARBOUR, artifact([f"quay bollard {i}" for i in range(6)], 30, "b4"))
    # Six "tide" units elsewhere make it very common there, not here: here it still weighs.
    assert found(ruled, "tide mooring") == ids(pair, 1, 0)
    assert found(ruled, "tide") == ids(pair, 1, 0)
    assert found(ruled, "tide", other) == ids(theirs, 2, 3, 4, 5)
    assert set(found(ruled, "tide", Scope("elsewhere"))) == set()
    # Superseded units do not count either: five, then one after a re-extraction.
    first = artifact([f"gate post {w}" for w in ("one", "two", "three", "four", "five")], 20, "b3")
    ruled.add_units(HARBOUR, first)
    assert found(ruled, "gate post") == ids(first, 1, 2, 3, 4)
    again = artifact(["gate post one"], 20, "b3", derivation="2")
    ruled.add_units(HARBOUR, again)
    assert found(ruled, "gate post") == ids(again, 0)
    assert found(ruled, "post") == ids(again, 0)
    ruled.add_units(HARBOUR, first)  # back to the first extraction: its five units count again
    assert found(ruled, "gate post") == ids(first, 1, 2, 3, 4)


def test_the_rule_is_deterministic(ruled: EvidenceIndex) -> None:
    units = artifact([f"tide gate {i}" for i in range(12)], 0)
    ruled.add_units(HARBOUR, units)
    first = ruled.search(HARBOUR, ["tide"], 3)
    assert [ruled.search(HARBOUR, ["tide"], 3) for _ in range(3)] == [first] * 3
    assert [n.unit_id for n in first] == ids(units, 8, 9, 10)  # all alike: the candidates in index order


def test_both_backends_nominate_the_same_units_in_the_same_order(request: pytest.FixtureRequest,
                                                                 tmp_path: Path) -> None:
    sqlite, postgres = (open_url(request, kind, tmp_path, RULE) for kind in ("sqlite", "postgresql"))
    try:
        batches = [artifact(TIDES, 0, "c1"), artifact(["tide mooring line", "tide tide mooring", "quay gate open",
                                                       "gate gate open", "quay quay gate"], 100, "c2")]
        for index in (sqlite, postgres):
            for batch in batches:
                index.add_units(HARBOUR, batch)
        for query in ("tide", "gate", "tide gate", "gate tide", "tide mooring", "mooring", "quay", "quay gate",
                      "tide quay", "zeppelin", "tide zeppelin", "open", "gate open tide"):
            assert found(sqlite, query) == found(postgres, query), query
            assert found(sqlite, query, limit=2) == found(postgres, query, limit=2), query
    finally:
        sqlite.close()
        postgres.close()


def test_postgresql_keeps_its_term_counts_and_counts_an_older_index_once(request: pytest.FixtureRequest,
                                                                          tmp_path: Path) -> None:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = server.database("r" + uuid.uuid4().hex[:12])
    recount = ("SELECT workspace, subject, lexeme, count(*) FROM mf_discovery_units, unnest(tsvector_to_array(tsv)) "
               "AS lexeme WHERE active GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")
    kept = "SELECT workspace, subject, lexeme, units FROM mf_discovery_terms WHERE units > 0 ORDER BY 1, 2, 3"
    index = open_index(url, RULE)
    try:
        first = artifact(TIDES, 0)
        index.add_units(HARBOUR, first)
        index.add_units(Scope("harbour", "north-quay"), artifact(TIDES[:3], 50, "e1"))
        index.add_units(HARBOUR, artifact(TIDES[:2], 0, derivation="2"))  # supersedes the eight
        index.add_units(HARBOUR, first)  # and back
        db = index._db  # type: ignore[attr-defined]
        assert db.execute(kept).fetchall() == db.execute(recount).fetchall()
        db.execute("DROP TABLE mf_discovery_terms")  # as an index made before the counts
    finally:
        index.close()
    index = open_index(url, RULE)
    try:
        db = index._db  # type: ignore[attr-defined]
        assert db.execute(kept).fetchall() == db.execute(recount).fetchall()
        assert found(index, "tide") == ids(first, 5, 4, 6, 7)
    finally:
        index.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_at_the_default_rule_a_word_in_more_than_10000_units_ranks_the_last_2000(
        request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> None:
    index = open_url(request, kind, tmp_path, DEFAULT_RULE)
    try:
        old = artifact(["tide tide tide mooring"], 0, "d0")
        index.add_units(HARBOUR, old)
        for a in range(10):
            index.add_units(HARBOUR, artifact([f"tide gate {i}" for i in range(1000)], 10 + a * 1000, f"{a:02d}"))
        # 10,001 units hold "tide": the candidates are the last two artifacts' 2,000, all alike, so the
        # first 20 of them in index order; the old unit (tide three times) is not one.
        newest = index.search(HARBOUR, ["tide"], 20)
        loaded = index.load(HARBOUR, [n.unit_id for n in newest])
        assert [loaded[n.unit_id].unit.text for n in newest] == [f"tide gate {i}" for i in range(20)]
        assert {loaded[n.unit_id].unit.digest for n in newest} == {"sha256:" + "08" * 32}
        assert found(index, "tide mooring") == found(index, "mooring") == ids(old, 0)
    finally:
        index.close()


# -- pure parts ------------------------------------------------------------------------------------------------


def test_the_plan_follows_which_words_are_very_common() -> None:
    common = {"tide", "gate"}
    plan = plan_search(["tide", "mooring", "gate"], common.__contains__)
    assert (plan.terms, plan.ranked_by, plan.newest_only) == (("tide", "mooring", "gate"), ("mooring",), False)
    plan = plan_search(["tide", "gate"], common.__contains__)
    assert (plan.ranked_by, plan.newest_only) == (("tide", "gate"), True)
    plan = plan_search(["mooring"], common.__contains__)
    assert (plan.ranked_by, plan.newest_only) == (("mooring",), False)


def test_the_rule_has_documented_defaults_and_refuses_nonsense() -> None:
    assert (DEFAULT_RULE.common_units, DEFAULT_RULE.candidates) == (10_000, 2_000)
    for bad in ({"common_units": 0}, {"candidates": -1}, {"candidates": True}, {"common_units": 2.5}):
        with pytest.raises(ValueError, match="positive integer"):
            RankingRule(**bad)  # type: ignore[arg-type]


def test_term_frequency_counts_fts5_tokens() -> None:
    assert term_frequency("tide", "tide, tidewater tide-gate tide_x tide") == 4
    assert term_frequency("tide_gate", "tide gate, tide-gate, tidegate, tide_gate") == 3
    assert term_frequency("straße", "straße strasse") == 1
    assert term_frequency("東京", "東京 東京都") == 1
    assert term_frequency("x\ue000", "x\ue000 x") == 1  # a private-use character is a token character
    assert term_frequency("_", "a _ b") == 0
