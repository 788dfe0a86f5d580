"""The evidence index, on a real SQLite FTS5 file and on a real PostgreSQL server, alike.

Units come from real extractions of the sample media; the fail-closed rules about scope and
generation, Unicode matching, and query text that looks like FTS5 or SQL syntax are checked
against both backends with the same assertions.
"""

from __future__ import annotations

import pytest

from mediafleet.contract import EvidenceBundle
from mediafleet.discovery.errors import DiscoveryError
from mediafleet.discovery.index import EvidenceIndex
from mediafleet.discovery.index_open import parse_index_url
from mediafleet.discovery.text import MAX_QUERY_CHARS, fold, query_terms
from mediafleet.discovery.units import Scope, units_from_bundle
from tests.discovery_fixtures import index, postgres_server, sample_bundles, unit  # noqa: F401

HARBOUR = Scope("harbour")


def texts(index: EvidenceIndex, scope: Scope, query: str, limit: int = 10) -> list[str]:
    found = index.search(scope, query_terms(query), limit)
    loaded = index.load(scope, [n.unit_id for n in found])
    return [loaded[n.unit_id].unit.text for n in found]


# -- units from real bundles ------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_text_locus_of_the_samples_is_one_unit(sample_bundles: dict[str, EvidenceBundle]) -> None:
    for name, bundle in sample_bundles.items():
        units = units_from_bundle(bundle)
        evidence = [n for n in bundle.nodes if n.node_type == "Evidence" and (n.properties.get("text") or "").strip()]
        assert [u.unit_id for u in units] == [n.properties["evidence_locus"]["id"] for n in evidence], name
        for u, node in zip(units, evidence, strict=True):
            assert u.text == node.properties["text"]
            assert u.source_range["address"] == node.properties["evidence_locus"]["address"]
            assert u.source_range["artifact"]["digest"] == bundle.artifact.digest
            assert u.derivation_ref == node.properties["evidence_locus"]["derivation_ref"]
            assert u.source_range["generation"]["job_id"] == bundle.job_id
    kinds = {name: {u.source_range["locus_kind"] for u in units_from_bundle(b)} for name, b in sample_bundles.items()}
    assert kinds["pdf"] == {"character_range", "image_region"}
    assert kinds["opus"] == kinds["mp4"] == {"audio_range"}
    assert kinds["png"] == {"image_region"}
    assert "image_region" in kinds["scan"]
    scan_lines = [u for u in units_from_bundle(sample_bundles["scan"]) if u.source_range.get("path") == "ocr"]
    assert scan_lines, "the scanned page's words come from OCR"


def test_a_failed_bundle_has_no_units(sample_bundles: dict[str, EvidenceBundle]) -> None:
    failed = sample_bundles["pdf"].model_copy(update={"status": "failed"})
    assert units_from_bundle(failed) == []


# -- both backends -------------------------------------------------------------------------------------------


def test_sample_evidence_is_found_by_its_words(index: EvidenceIndex, sample_bundles: dict[str, EvidenceBundle]) -> None:
    for bundle in sample_bundles.values():
        index.add_bundle(HARBOUR, bundle)
    assert any("finance team" in t for t in texts(index, HARBOUR, "finance team"))
    assert any(t == "QUAY 4 CLOSED" for t in texts(index, HARBOUR, "quay"))
    assert any("cracked" in t.lower() and "armour" in t.lower() for t in texts(index, HARBOUR, "armour"))
    assert texts(index, HARBOUR, "zeppelin") == []


def test_matching_is_after_nfkc_and_case_folding_and_keeps_the_original_text(index: EvidenceIndex) -> None:
    originals = ["The ﬁle was ﬂagged", "STRASSE closed", "Ｆｕｌｌｗｉｄｔｈ notice"]
    index.add_units(HARBOUR, [unit(t, i) for i, t in enumerate(originals)])
    assert texts(index, HARBOUR, "file") == [originals[0]]
    assert texts(index, HARBOUR, "FLAGGED") == [originals[0]]
    assert texts(index, HARBOUR, "straße") == [originals[1]]  # casefold: ß -> ss
    assert texts(index, HARBOUR, "fullwidth") == [originals[2]]
    assert fold("ﬁle") == "file"


@pytest.mark.parametrize("query", [
    '"', "*", "quay*", "NEAR(quay closed)", "folded : quay", "scope_key:x OR quay", "quay' OR '1'='1",
    "quay); DROP TABLE units; --", "quay | closed & !x", "-quay", "^quay", "quay AND NOT closed", "{quay}",
])
def test_fts_and_sql_operators_are_only_text(index: EvidenceIndex, query: str) -> None:
    index.add_units(HARBOUR, [unit("QUAY 4 CLOSED", 0), unit("a table of units", 1), unit("drop everything", 2)])
    found = texts(index, HARBOUR, query) if any(c.isalnum() for c in query) else None
    if found is None:
        with pytest.raises(DiscoveryError) as refused:
            query_terms(query)
        assert refused.value.code.value == "invalid_request"
        return
    terms = set(query_terms(query))
    assert all(terms & set(fold(t).replace(";", " ").split()) for t in found)
    # The index still answers, unchanged: nothing was executed.
    assert texts(index, HARBOUR, "quay") == ["QUAY 4 CLOSED"]
    assert index.scope_generation(HARBOUR) == 1


@pytest.mark.parametrize("query", ["", "   ", "\n\t", "x" * (MAX_QUERY_CHARS + 1), " ".join(f"w{i}" for i in range(40))])
def test_empty_huge_and_wordless_queries_are_refused_before_any_search(query: str) -> None:
    with pytest.raises(DiscoveryError) as refused:
        query_terms(query)
    assert refused.value.code.value == "invalid_request"
    assert query not in refused.value.message or not query.strip()


def test_a_unit_matches_when_it_holds_every_word_ranked_by_relevance(index: EvidenceIndex) -> None:
    index.add_units(HARBOUR, [unit("bollard corrosion at the base", 0), unit("bollard paint", 1),
                              unit("paint the bollard, then paint the fender", 2)])
    assert sorted(texts(index, HARBOUR, "bollard paint")) == ["bollard paint", "paint the bollard, then paint the fender"]
    assert texts(index, HARBOUR, "Paint bollard paint") == texts(index, HARBOUR, "bollard paint")
    assert texts(index, HARBOUR, "bollard zeppelin") == []
    scores = [n.score for n in index.search(HARBOUR, ["bollard"], 5)]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)


def test_a_scope_sees_only_its_own_units(index: EvidenceIndex) -> None:
    other = Scope("harbour", "north-quay")
    index.add_units(HARBOUR, [unit("bollard corrosion", 0)])
    index.add_units(other, [unit("bollard paint", 1, digest="sha256:" + "cd" * 32)])
    assert texts(index, HARBOUR, "bollard") == ["bollard corrosion"]
    assert texts(index, other, "bollard") == ["bollard paint"]
    assert texts(index, Scope("elsewhere"), "bollard") == []
    mine = index.search(HARBOUR, ["bollard"], 5)[0].unit_id
    assert index.load(other, [mine]) == {}


def test_re_adding_a_bundle_changes_nothing(index: EvidenceIndex, sample_bundles: dict[str, EvidenceBundle]) -> None:
    first = index.add_bundle(HARBOUR, sample_bundles["pdf"])
    again = index.add_bundle(HARBOUR, sample_bundles["pdf"])
    assert first.added == len(units_from_bundle(sample_bundles["pdf"])) and first.scope_generation == 1
    assert (again.added, again.superseded, again.scope_generation) == (0, 0, 1)


def test_a_re_extraction_is_a_new_generation_that_supersedes_the_old_units(index: EvidenceIndex) -> None:
    old = [unit("fender panel cracked", 0), unit("fender panel bent", 1)]
    index.add_units(HARBOUR, old)
    new_derivation = "eg:derivation:" + "2" * 32
    report = index.add_units(HARBOUR, [unit("fender panel cracked", 0, derivation=new_derivation)])
    assert (report.added, report.superseded, report.scope_generation) == (1, 2, 2)
    found = index.search(HARBOUR, ["fender"], 5)
    assert [n.derivation_ref for n in found] == [new_derivation]
    loaded = index.load(HARBOUR, [u.unit_id for u in old] + [found[0].unit_id])
    assert [loaded[u.unit_id].active for u in old] == [False, False]
    assert loaded[found[0].unit_id].generation == 2
    # Back to the first extraction: its units are active again, as generation 3.
    back = index.add_units(HARBOUR, old)
    assert (back.added, back.superseded, back.scope_generation) == (2, 1, 3)
    assert {v.generation for v in index.load(HARBOUR, [u.unit_id for u in old]).values()} == {3}


def test_units_of_two_extractions_cannot_be_added_as_one(index: EvidenceIndex) -> None:
    with pytest.raises(ValueError, match="one artifact and one extraction"):
        index.add_units(HARBOUR, [unit("a", 0), unit("b", 1, derivation="eg:derivation:" + "3" * 32)])


def test_index_urls_are_sqlite_or_postgresql_and_nothing_else() -> None:
    assert parse_index_url("sqlite:/var/x.db") == ("sqlite", "/var/x.db")
    assert parse_index_url("sqlite:///var/x.db") == ("sqlite", "/var/x.db")
    assert parse_index_url("postgresql://h/db")[0] == "postgresql"
    for bad in ("mysql://h/db", "sqlite:", "/var/x.db", "sqlite://relative.db"):
        with pytest.raises(ValueError):
            parse_index_url(bad)
