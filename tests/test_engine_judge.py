"""The callers' real engine as the judge of every locus (issue 17, item 2).

Bundles from each capability (a PDF's text layer, a scanned PDF through OCR, an image, audio, a
video with speech) are made by the real extractors in-process, once for the module. Every node
and edge of each bundle is written into a real ``epistemic-graph-server`` (PyPI 2.27.7, started
by ``tests/engine.py``) the way the callers write theirs: ``nodes.add(id, {node_type, **props})``
(each Evidence node with its ``evidence_locus``, ``occurrence_id`` and ``blob_ref``) and
``edges.add(source, target, {"relationship": ...})``, so each Evidence node has a ``SUPPORTS``
edge to the claim. Then the engine's own ``ExplainEvidence`` on the claim must cite every locus
of the bundle, each exactly once, unchanged, as support. ``tests/helpers.assert_engine_valid``
checks the same rules on our side; this is the engine's verdict. Where ``../shared/corpus`` is
present, every file in it is judged the same way.

A control shows the judge can say no: loci the engine must drop (an integer field sent as
``1.0``, a missing key, a malformed ref) are written beside good ones and are not cited.
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mediafleet.contract import EvidenceBundle

from mediafleet import Dispatcher, Settings
from tests.engine import (citation_problems, claim_of, evidence_of, explain_evidence, with_engine_client,
                          write_bundle)
from tests.helpers import assert_engine_valid
from tests.media import scanned

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "src" / "mediafleet" / "samples"
DATA = ROOT / "tests" / "data"

CAPABILITIES = ["pdf_text_layer", "pdf_scanned", "image", "audio", "video_speech"]


def _media() -> dict[str, bytes]:
    report = (SAMPLES / "harbour-report.pdf").read_bytes()
    return {
        "pdf_text_layer": report,
        "pdf_scanned": scanned(report),  # both pages rasterised: no text layer, OCR reads them
        "image": (SAMPLES / "notice.png").read_bytes(),
        "audio": (SAMPLES / "memo.opus").read_bytes(),
        "video_speech": (DATA / "speech.mp4").read_bytes(),  # one shot, two spoken sentences
    }


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EvidenceBundle]:
    """One real in-process extraction per capability."""
    dispatcher = Dispatcher(Settings(blob_root=tmp_path_factory.mktemp("judge") / "blobs"))
    made = {name: dispatcher.submit(data).bundle() for name, data in _media().items()}
    for name, bundle in made.items():
        assert bundle.status == "ok", (name, bundle.error)
        assert assert_engine_valid(bundle) > 0, name
    return made


@pytest.fixture(scope="module")
def verdicts(engine_socket: str, bundles: dict[str, EvidenceBundle]) -> dict[str, dict[str, Any]]:
    """Each bundle written into the real engine, and what ExplainEvidence says about its claim."""

    async def judge(client: Any) -> dict[str, dict[str, Any]]:
        out = {}
        for name, bundle in bundles.items():
            await write_bundle(client, bundle)
            out[name] = await explain_evidence(client, claim_of(bundle))
        return out

    return with_engine_client(engine_socket, judge)


def test_each_capability_yields_the_evidence_it_should(bundles: dict[str, EvidenceBundle]) -> None:
    """The judge sees every modality's loci, not just the easy ones."""

    def kinds(name: str) -> Counter[str]:
        return Counter(e["locus"]["address"]["kind"] for e in evidence_of(bundles[name]).values())

    def paths(name: str) -> set[str]:
        return {n.properties["path"] for n in bundles[name].nodes
                if n.node_type == "Evidence" and n.properties["locus_kind"] == "character_range"}

    assert {"page_region", "character_range", "image_region"} <= set(kinds("pdf_text_layer"))
    assert paths("pdf_text_layer") == {"text_layer"}
    assert {"page_region", "character_range", "image_region"} <= set(kinds("pdf_scanned"))
    assert paths("pdf_scanned") == {"ocr"}
    assert set(kinds("image")) == {"image_region"} and kinds("image")["image_region"] >= 2
    assert set(kinds("audio")) == {"audio_range"}
    assert {"video_time_range", "frame_range", "audio_range"} <= set(kinds("video_speech"))


@pytest.mark.parametrize("name", CAPABILITIES)
def test_explain_evidence_cites_every_locus(name: str, bundles: dict[str, EvidenceBundle],
                                            verdicts: dict[str, dict[str, Any]]) -> None:
    assert evidence_of(bundles[name]), name
    assert citation_problems(bundles[name], verdicts[name]) == []
    assert len(verdicts[name]["citations"]) == len(evidence_of(bundles[name]))


@pytest.mark.corpus
def test_explain_evidence_cites_every_locus_of_the_corpus(corpus: Path, engine_socket: str,
                                                          tmp_path: Path) -> None:
    """The same verdict on every file of ../shared/corpus (real media others made), with default options."""
    files = sorted(p for p in corpus.glob("*/*")
                   if p.is_file() and not p.name.startswith("LICENSE") and p.suffix != ".txt")
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    made = {p.relative_to(corpus).as_posix(): dispatcher.submit(p).bundle() for p in files}
    assert {name: b.error for name, b in made.items() if b.status != "ok"} == {}
    assert all(evidence_of(b) for b in made.values())

    async def judge(client: Any) -> dict[str, dict[str, Any]]:
        out = {}
        for name, bundle in made.items():
            await write_bundle(client, bundle)
            out[name] = await explain_evidence(client, claim_of(bundle))
        return out

    verdict = with_engine_client(engine_socket, judge)
    assert {name: citation_problems(made[name], verdict[name]) for name in made} == {name: [] for name in made}


def _broken_loci(locus: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Variants of a good locus that the engine's decoder must refuse (CONTRACT.md section 3)."""
    tok = locus["id"].rsplit(":", 1)[1]
    float_int = copy.deepcopy(locus)
    float_int["address"] = {"kind": "page_region", "page": 1.0, "x": 0.0, "y": 0.0, "width": 10.0, "height": 10.0}
    no_policy = {k: v for k, v in copy.deepcopy(locus).items() if k != "policy_ref"}
    bad_ref = copy.deepcopy(locus)
    bad_ref["derivation_ref"] = "eg:derivation:NOT-HEX"
    variants = {"float_int": float_int, "no_policy": no_policy, "bad_ref": bad_ref}
    for i, (label, variant) in enumerate(variants.items()):
        variant["id"] = f"eg:locus:{i:02x}{tok[2:]}"  # distinct ids, still well formed
        assert variant != locus, label
    return variants


def test_the_judge_says_no_to_loci_the_engine_cannot_decode(engine_socket: str,
                                                            bundles: dict[str, EvidenceBundle]) -> None:
    """A control: ExplainEvidence drops malformed loci, so the test above could fail."""
    bundle = bundles["pdf_text_layer"]
    good = next(n for n in bundle.nodes if n.node_type == "Evidence")
    locus = good.properties["evidence_locus"]
    claim = "claim:" + "c0" * 16
    broken = _broken_loci(locus)

    async def judge(client: Any) -> dict[str, Any]:
        await client.nodes.add(claim, {"node_type": "Claim", "claim_type": "observation"})
        props = {"node_type": "Evidence", "occurrence_id": good.properties["occurrence_id"],
                 "blob_ref": good.properties["blob_ref"]}
        await client.nodes.add("evidence:control-good", {**props, "evidence_locus": locus})
        await client.edges.add("evidence:control-good", claim, {"relationship": "SUPPORTS"})
        for label, variant in broken.items():
            await client.nodes.add(f"evidence:control-{label}", {**props, "evidence_locus": variant})
            await client.edges.add(f"evidence:control-{label}", claim, {"relationship": "SUPPORTS"})
        return await explain_evidence(client, claim)

    citations = with_engine_client(engine_socket, judge)["citations"]
    assert [(c["evidence_id"], c["locus"]["id"]) for c in citations] == [("evidence:control-good", locus["id"])]
