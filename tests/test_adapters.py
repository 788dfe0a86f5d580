"""Adapters: known answers, deterministic ids, earned verification, PROV-O that parses as RDF."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from rdflib import RDF, Graph, Literal, Namespace, URIRef

from mediafleet.adapters import build_bundle, to_turtle
from mediafleet.contract import (
    ArtifactRef,
    ErrorCode,
    Manifest,
    Outcome,
    PdfPage,
    PdfResult,
    Producer,
    PublicError,
    TextBox,
    default_manifest,
)
from tests.helpers import assert_engine_valid

PROV = Namespace("http://www.w3.org/ns/prov#")
DIGEST = "sha256:" + "ab" * 32
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
T1 = datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)


def _result(box_x: float = 10.0, options: dict | None = None) -> PdfResult:
    return PdfResult(
        page_count=2,
        pages=[
            PdfPage(page=1, width=100.0, height=200.0, text="hello\nworld", path="text_layer",
                    boxes=[TextBox(text="hello", x=box_x, y=20, width=30, height=10),
                           TextBox(text="world", x=10, y=40, width=30, height=10)]),
            PdfPage(page=2, width=100.0, height=200.0, text="", path="text_layer", boxes=[]),
        ],
        producer=Producer(engine="pymupdf", engine_version="9.9", extractor="mediafleet.pdf.textlayer",
                          extractor_version="1", options=options or {}),
    )


def _outcome(result: PdfResult | None = None, **over: object) -> Outcome:
    data = dict(
        job_id="mf-" + "0" * 32,
        action="ocr_pdf",
        artifact=ArtifactRef(digest=DIGEST, media_type="application/pdf", bytes=1234, modality="pdf"),
        status="ok",
        result=result if result is not None else _result(),
        checks={"digest_recomputed": True},
        started_at=T0,
        ended_at=T1,
    )
    data.update(over)
    return Outcome(**data)


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return default_manifest()


def _nodes(bundle, node_type: str) -> list:
    return [n for n in bundle.nodes if n.node_type == node_type]


def test_known_answer(manifest: Manifest) -> None:
    bundle = build_bundle(_outcome(), manifest.capability("ocr_pdf"))
    assert bundle.status == "ok" and bundle.error is None
    evidence = _nodes(bundle, "Evidence")
    addresses = [n.properties["evidence_locus"]["address"] for n in evidence]
    assert addresses == [
        {"kind": "page_region", "page": 1, "x": 0.0, "y": 0.0, "width": 100.0, "height": 200.0},
        {"kind": "character_range", "start": 0, "end": 11},
        {"kind": "image_region", "x": 10.0, "y": 20.0, "width": 30.0, "height": 10.0},
        {"kind": "image_region", "x": 10.0, "y": 40.0, "width": 30.0, "height": 10.0},
        {"kind": "page_region", "page": 2, "x": 0.0, "y": 0.0, "width": 100.0, "height": 200.0},
    ]
    line = evidence[2].properties
    assert line["text"] == "hello" and line["image_id"] == f"{DIGEST}:page1"
    assert line["coordinate_space"] == "pdf_points_top_left"
    assert evidence[1].properties["text"] == "hello\nworld"
    assert assert_engine_valid(bundle) == 5

    (claim,) = _nodes(bundle, "Claim")
    (activity,) = _nodes(bundle, "ProvenanceActivity")
    assert claim.properties["is_verified"] is True
    assert claim.properties["checks"] == {"digest_recomputed": True, "locus_kinds_declared": True, "loci_valid": True}
    assert claim.properties["claim_type"] == "observation" and claim.properties["domain"] == "pdf"
    assert claim.properties["source_ids"] == [activity.id]
    assert claim.properties["metadata"] == {"was_generated_by": activity.id, "generated_at_time": T1.isoformat(),
                                            "artifact_id": DIGEST}
    assert (activity.properties["sidecar"], activity.properties["tool"], activity.properties["status"]) == (
        "stirlingpdf-mcp", "pdf_action", "ok")
    assert activity.properties["locusCount"] == 5

    edges = {(e.source.split(":")[0], e.relationship, e.target.split(":")[0]) for e in bundle.edges}
    assert edges == {
        ("sourceobject", "hasOccurrence", "occurrence"),
        ("occurrence", "hasBlob", "blob"),
        ("evidence", "extractedFrom", "occurrence"),
        ("evidence", "SUPPORTS", "claim"),
    }
    supports = [e for e in bundle.edges if e.relationship == "SUPPORTS"]
    assert {e.source for e in supports} == {n.id for n in evidence}
    assert _nodes(bundle, "Blob")[0].id == "blob:" + "ab" * 32


def test_ids_are_deterministic_and_depend_on_what_they_should(manifest: Manifest) -> None:
    cap = manifest.capability("ocr_pdf")
    first = build_bundle(_outcome(), cap)
    again = build_bundle(_outcome(started_at=T1, ended_at=T1), cap)
    ids = lambda b: [n.properties["evidence_locus"]["id"] for n in _nodes(b, "Evidence")]  # noqa: E731
    assert ids(first) == ids(again)
    assert len(set(ids(first))) == len(ids(first))
    assert _nodes(first, "Claim")[0].id == _nodes(again, "Claim")[0].id
    other_options = build_bundle(_outcome(_result(options={"dpi": 300})), cap)
    assert not set(ids(first)) & set(ids(other_options))
    other_artifact = build_bundle(
        _outcome(artifact=ArtifactRef(digest="sha256:" + "cd" * 32, media_type="application/pdf", bytes=1, modality="pdf")),
        cap,
    )
    assert not set(ids(first)) & set(ids(other_artifact))


def test_a_locus_outside_its_page_is_not_verified(manifest: Manifest) -> None:
    bundle = build_bundle(_outcome(_result(box_x=90.0)), manifest.capability("ocr_pdf"))
    (claim,) = _nodes(bundle, "Claim")
    assert claim.properties["checks"]["loci_valid"] is False
    assert claim.properties["is_verified"] is False


def test_a_failed_digest_check_is_not_verified(manifest: Manifest) -> None:
    bundle = build_bundle(_outcome(checks={"digest_recomputed": False}), manifest.capability("ocr_pdf"))
    assert _nodes(bundle, "Claim")[0].properties["is_verified"] is False


def test_an_undeclared_locus_kind_fails_the_whole_result(manifest: Manifest) -> None:
    narrowed = manifest.narrow({"capabilities": {"ocr_pdf": {"produces": ["PageBox", "DocumentSpan"]}}})
    bundle = build_bundle(_outcome(), narrowed.capability("ocr_pdf"))
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.UNDECLARED_LOCUS_KIND
    assert not _nodes(bundle, "Evidence") and not _nodes(bundle, "Claim")
    assert _nodes(bundle, "ProvenanceActivity")[0].properties["status"] == "failed"


def test_a_failed_outcome_is_never_recorded_as_ok(manifest: Manifest) -> None:
    error = PublicError(code=ErrorCode.CORRUPT_INPUT, message="the PDF cannot be parsed")
    bundle = build_bundle(_outcome(status="failed", result=None, error=error), manifest.capability("ocr_pdf"))
    (activity,) = _nodes(bundle, "ProvenanceActivity")
    assert bundle.status == "failed" and activity.properties["status"] == "failed"
    assert activity.properties["error_code"] == "corrupt_input" and activity.properties["locusCount"] == 0
    assert not _nodes(bundle, "Claim")
    g = Graph().parse(data=json.dumps(bundle.prov), format="json-ld")
    assert (None, URIRef("urn:mediafleet:ns#status"), Literal("failed")) in g


def test_prov_o_parses_as_rdf_with_the_facts(manifest: Manifest) -> None:
    bundle = build_bundle(_outcome(), manifest.capability("ocr_pdf"))
    g = Graph()
    g.parse(data=json.dumps(bundle.prov), format="json-ld")
    (activity,) = list(g.subjects(RDF.type, PROV.Activity))
    (artifact,) = list(g.objects(activity, PROV.used))
    (agent,) = list(g.objects(activity, PROV.wasAssociatedWith))
    assert (agent, RDF.type, PROV.SoftwareAgent) in g
    assert "pymupdf 9.9" in str(next(g.objects(agent, URIRef("http://www.w3.org/2000/01/rdf-schema#label"))))
    assert next(g.objects(activity, PROV.startedAtTime)).toPython() == T0
    assert next(g.objects(activity, PROV.endedAtTime)).toPython() == T1
    loci = [n.properties["evidence_locus"]["id"] for n in _nodes(bundle, "Evidence")]
    for locus in loci:
        assert (URIRef(locus), PROV.wasGeneratedBy, activity) in g
        assert (URIRef(locus), PROV.wasDerivedFrom, artifact) in g
    claim = URIRef("urn:mediafleet:" + _nodes(bundle, "Claim")[0].id)
    assert (claim, PROV.wasGeneratedBy, activity) in g

    turtle = to_turtle(bundle.prov)
    assert len(Graph().parse(data=turtle, format="turtle")) == len(g)


def test_locus_envelopes_are_what_the_validated_model_gives(manifest: Manifest) -> None:
    """The envelopes are written out without building EvidenceLocus per locus: each must still
    be exactly what the validated model would dump, and its id the checked ref builder's."""
    from mediafleet.adapters.ids import locus_ref, ref
    from mediafleet.contract.locus import EvidenceLocus, is_opaque_ref

    bundle = build_bundle(_outcome(), manifest.capability("ocr_pdf"))
    envelopes = [n.properties["evidence_locus"] for n in bundle.nodes if n.node_type == "Evidence"]
    assert len(envelopes) == 5  # two pages, one page text, two lines
    for index, envelope in enumerate(envelopes):
        assert EvidenceLocus.model_validate(envelope).model_dump(mode="json") == envelope
        assert list(envelope) == ["id", "subject", "address", "policy_ref", "derivation_ref"]
        assert envelope["id"] == locus_ref(envelope["derivation_ref"], index)
        assert envelope["id"] == ref("locus", envelope["derivation_ref"], str(index)) and is_opaque_ref(envelope["id"])


def test_building_a_bundle_pauses_the_cycle_collector_and_resumes_it(manifest: Manifest) -> None:
    import gc

    from mediafleet.adapters.nogc import collection_paused

    seen: list[bool] = []
    assert gc.isenabled()
    with collection_paused():
        seen.append(gc.isenabled())
        with collection_paused():
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
    assert seen == [False, False, False] and gc.isenabled()
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
    build_bundle(_outcome(), manifest.capability("ocr_pdf"))
    assert gc.isenabled()


def test_turtle_is_written_directly_with_exactly_the_json_ld_triples(manifest: Manifest) -> None:
    """The Turtle writer does not go through rdflib: its triples must be the JSON-LD's, for an ok
    bundle, a failed one, a refused one and one carrying a caller's claims."""
    from rdflib.compare import isomorphic

    from mediafleet.adapters import refused_bundle
    from mediafleet.adapters.bundle import with_claims
    from mediafleet.adapters.prov import turtle_lines
    from mediafleet.contract import CallerClaims

    cap = manifest.capability("ocr_pdf")
    error = PublicError(code=ErrorCode.CORRUPT_INPUT, message="the PDF cannot be parsed")
    ok = build_bundle(_outcome(), cap)
    bundles = [
        ok,
        build_bundle(_outcome(status="failed", result=None, error=error), cap),
        refused_bundle("mf-" + "1" * 32, None, ok.artifact, error, T0),
        with_claims(ok, CallerClaims(digest=DIGEST, digest_form="sha256", digest_check="sha256_of_bytes",
                                     media_type="application/pdf", media_type_agrees=True)),
    ]
    for bundle in bundles:
        expected = Graph().parse(data=json.dumps(bundle.prov), format="json-ld")
        written = Graph().parse(data=to_turtle(bundle.prov), format="turtle")
        assert len(written) == len(expected) > 0 and isomorphic(written, expected)
        assert "".join(turtle_lines(bundle.prov)) == to_turtle(bundle.prov)
    with pytest.raises(ValueError):
        to_turtle({**ok.prov, "@context": {"prov": "http://example.org/other#"}})
    with pytest.raises(ValueError):
        to_turtle({**ok.prov, "@graph": [{"@id": "eg:locus:" + "a" * 32, "mf:nested": {"x": [1]}}]})


def test_mapping_the_same_result_twice_reuses_its_drafts_and_forgets_them_with_it() -> None:
    import gc

    from mediafleet.adapters import loci

    result = _result()
    first = loci.to_loci(result, DIGEST)
    again = loci.to_loci(result, DIGEST)
    assert again == first and again is not first and all(a is b for a, b in zip(again, first, strict=True))
    assert loci.to_loci(result, "other-document") != first  # another document id is mapped anew
    equal_copy = result.model_copy()
    assert loci.to_loci(equal_copy, DIGEST) == first  # an equal result gives equal drafts
    del result, equal_copy
    gc.collect()
    assert loci._last is None
