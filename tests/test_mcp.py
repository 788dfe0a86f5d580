"""``mediafleet serve-mcp`` as the callers reach it: a real MCP client session against the real server.

The server runs as a subprocess over stdio (and once over streamable HTTP). Responses are parsed
here the way CONTRACT.md section 5 says the callers parse them (a JSON object; ``available``
missing means true; ``error`` on failure; the per-modality shapes), without importing the
server's own code, and every locus a caller would write from them is checked against the
engine's rules (CONTRACT.md section 1) and against the governed loci of the bundle beside them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mediafleet.contract import EvidenceBundle

from mediafleet import Dispatcher, LocalBlobStore, Settings
from tests.conftest import ROOT, free_port
from tests.helpers import assert_engine_valid
from tests.mcp_client import TOOL_ACTIONS, Caller, mcp_server, server_env
from tests.media import page_lines, text_pdf

# -- the callers' side, written from CONTRACT.md ---------------------------------------------------


def number(value: Any) -> float:
    assert isinstance(value, (int, float)) and not isinstance(value, bool), value
    assert math.isfinite(value), value
    return float(value)


def integer(value: Any, minimum: int = 0) -> int:
    assert isinstance(value, int) and not isinstance(value, bool) and value >= minimum, value
    return value


def parse_pdf(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``pages: [{page (>=1), width, height, text, boxes?: [{text, x, y, width, height}]}]``."""
    pages = []
    for page in data["pages"]:
        boxes = [{"text": box["text"], **{k: number(box[k]) for k in ("x", "y", "width", "height")}}
                 for box in page.get("boxes") or []]
        assert all(isinstance(b["text"], str) for b in boxes)
        assert isinstance(page["text"], str)
        pages.append({"page": integer(page["page"], 1), "width": number(page["width"]),
                      "height": number(page["height"]), "text": page["text"], "boxes": boxes})
    return pages


def parse_audio(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``segments: [{start_ms, end_ms, text, confidence?}]``."""
    out = []
    for seg in data["segments"]:
        assert isinstance(seg["text"], str)
        confidence = seg.get("confidence")
        if confidence is not None:
            assert 0.0 <= number(confidence) <= 1.0
        out.append({"start_ms": integer(seg["start_ms"]), "end_ms": integer(seg["end_ms"]), "text": seg["text"],
                    "confidence": confidence})
    return out


def parse_video(data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``shots: [{start_ms, end_ms, label?, confidence?}]``, ``keyframes: [{start_frame, end_frame?, png_b64?}]``."""
    shots = []
    for s in data["shots"]:
        assert s.get("label") is None or isinstance(s["label"], str)
        shots.append({"start_ms": integer(s["start_ms"]), "end_ms": integer(s["end_ms"]),
                      **({"label": s["label"]} if "label" in s else {})})
    keyframes = []
    for key in data["keyframes"]:
        start = integer(key["start_frame"])
        keyframes.append({"start_frame": start, "end_frame": integer(key.get("end_frame", start)),
                          "png": base64.b64decode(key["png_b64"], validate=True) if "png_b64" in key else None})
    return shots, keyframes


def pdf_loci(pages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a caller writes: a PageBox per page, a DocumentSpan over each page's text (page texts
    joined by form feeds), an ImageRegion per box."""
    loci: list[dict[str, Any]] = []
    offset = 0
    for page in pages:
        loci.append({"kind": "page_region", "page": page["page"], "x": 0.0, "y": 0.0, "width": page["width"],
                     "height": page["height"]})
        if page["text"]:
            loci.append({"kind": "character_range", "start": offset, "end": offset + len(page["text"])})
        loci += [{"kind": "image_region", **{k: b[k] for k in ("x", "y", "width", "height")}} for b in page["boxes"]]
        offset += len(page["text"]) + 1
    return loci


def engine_accepts(address: dict[str, Any]) -> bool:
    """CONTRACT.md section 1, as the engine validates (plus the callers' 1-based frames)."""
    kind = address["kind"]
    if kind in ("page_region", "image_region"):
        values = [address[k] for k in ("x", "y", "width", "height")]
        ok = all(math.isfinite(v) for v in values) and address["width"] > 0 and address["height"] > 0
        return ok and (kind == "image_region" or address["page"] >= 1)
    if kind == "character_range":
        return address["end"] > address["start"] >= 0
    if kind in ("audio_range", "video_time_range"):
        return address["end_ms"] > address["start_ms"] >= 0
    if kind == "frame_range":
        return address["start_frame"] >= 1 and address["end_frame"] >= address["start_frame"]
    return False


def bundle_of(data: dict[str, Any]) -> EvidenceBundle:
    return EvidenceBundle.model_validate(data["bundle"])


def bundle_addresses(bundle: EvidenceBundle) -> list[dict[str, Any]]:
    return [n.properties["evidence_locus"]["address"] for n in bundle.nodes if n.node_type == "Evidence"]


def assert_public(data: dict[str, Any], *secrets: str) -> None:
    """A failure says what went wrong without paths, library text or stack traces."""
    text = json.dumps(data)
    assert isinstance(data["error"], str) and data["error"]
    for needle in ("Traceback", "/work/", "/tmp/", "site-packages", str(ROOT), *secrets):
        assert needle not in text, needle


def assert_failed_bundle(data: dict[str, Any]) -> None:
    """A failed call is never reported as ok, including in provenance."""
    bundle = bundle_of(data)
    assert bundle.status == "failed" and bundle.error is not None and bundle.error.code == data["error_code"]
    assert not [n for n in bundle.nodes if n.node_type in ("Evidence", "Claim")]
    (activity,) = [n for n in bundle.nodes if n.node_type == "ProvenanceActivity"]
    assert activity.properties["status"] == "failed"
    assert '"ok"' not in json.dumps(bundle.prov)


# -- a real client session against a real server process --------------------------------------------


def artifact(data: bytes, media_type: str, **extra: Any) -> dict[str, Any]:
    return {"digest": "sha256:" + hashlib.sha256(data).hexdigest(), "media_type": media_type,
            "artifact_b64": base64.b64encode(data).decode(), **extra}


@pytest.fixture(scope="module")
def blob_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "blobs"


@pytest.fixture(scope="module")
def caller(blob_root: Path) -> Iterator[Caller]:
    """The server as shipped: the default manifest, in-process (no broker)."""
    with mcp_server(server_env(blob_root), log=blob_root.parent / "server.log") as c:
        yield c


NARROW_MAX_BYTES, NARROW_INLINE = 5000, 3000


@pytest.fixture(scope="module")
def narrowed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Caller, Path]]:
    """An operator manifest keeping ocr_pdf (at 5000 bytes) and analyze_image; a 3000-byte inline limit."""
    root = tmp_path_factory.mktemp("mcp-narrow")
    manifest = root / "manifest.json"
    kept: dict[str, Any] = {"ocr_pdf": {"limits": {"max_bytes": NARROW_MAX_BYTES}}}
    if declared("analyze_image"):
        kept["analyze_image"] = {}
    manifest.write_text(json.dumps({"capabilities": kept}))
    env = server_env(root / "blobs", MEDIAFLEET_MANIFEST_FILE=str(manifest))
    with mcp_server(env, f"--max-inline-bytes={NARROW_INLINE}", log=root / "server.log") as c:
        yield c, root / "blobs"


def declared(action: str) -> bool:
    """The capability is in the shipped manifest and this checkout has its extractor."""
    from mediafleet.contract import default_manifest
    from mediafleet.workers.extractor import EXTRACTORS

    return action in default_manifest().capabilities and action in EXTRACTORS


# -- the tools as listed --------------------------------------------------------------------------------


def test_the_four_tools_take_exactly_action_and_params_json(caller: Caller) -> None:
    tools = caller.tools()
    assert set(tools) == set(TOOL_ACTIONS)
    for name, tool in tools.items():
        schema = tool.input_schema
        assert schema["required"] == ["action", "params_json"] and schema["additionalProperties"] is False
        assert schema["properties"]["action"]["enum"] == [TOOL_ACTIONS[name]]


# -- pdf_action end to end ------------------------------------------------------------------------------


def check_pdf_round_trip(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Parse as the callers do; every locus they would write passes the engine's rules, lies inside
    its page, and is exactly a governed locus of the bundle."""
    assert data.get("available", True) is True and "error" not in data
    pages = parse_pdf(data)
    for page in pages:
        for box in page["boxes"]:
            assert box["x"] >= 0 and box["y"] >= 0
            assert box["x"] + box["width"] <= page["width"] + 1e-6
            assert box["y"] + box["height"] <= page["height"] + 1e-6
    loci = pdf_loci(pages)
    assert loci and all(engine_accepts(a) for a in loci)
    bundle = bundle_of(data)
    assert bundle.status == "ok" and assert_engine_valid(bundle) == len(loci)
    assert bundle_addresses(bundle) == loci
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] is True
    return pages


def test_pdf_action_gives_pages_and_boxes_of_a_known_pdf(caller: Caller) -> None:
    pdf = text_pdf(2)
    data, is_error = caller.call("pdf_action", artifact(pdf, "application/pdf"))
    assert not is_error, data
    pages = check_pdf_round_trip(data)
    assert [p["page"] for p in pages] == [1, 2]
    for page in pages:
        assert (page["width"], page["height"]) == (595.0, 842.0)
        assert [b["text"] for b in page["boxes"]] == page_lines(page["page"])
        assert page["text"] == "\n".join(page_lines(page["page"]))
    assert bundle_of(data).artifact.digest == "sha256:" + hashlib.sha256(pdf).hexdigest()


def test_the_bare_hex_digest_and_a_media_type_parameter_are_accepted(caller: Caller) -> None:
    pdf = text_pdf(1)
    params = artifact(pdf, "application/pdf; charset=binary")
    params["digest"] = params["digest"].removeprefix("sha256:")
    data, is_error = caller.call("pdf_action", params)
    assert not is_error, data
    check_pdf_round_trip(data)


@pytest.mark.corpus
def test_pdf_action_on_the_corpus_pdf_matches_upstream_text(caller: Caller, corpus: Path) -> None:
    pdf = (corpus / "pdf" / "crazyones.pdf").read_bytes()
    data, is_error = caller.call("pdf_action", artifact(pdf, "application/pdf"))
    assert not is_error, data
    pages = check_pdf_round_trip(data)
    expected = (corpus / "pdf" / "crazyones.txt").read_text(encoding="utf-8")
    # upstream's text keeps ligature characters; the fleet reads them as their letters
    expected = expected.translate({0xFB00: "ff", 0xFB01: "fi", 0xFB02: "fl", 0xFB03: "ffi", 0xFB04: "ffl"})
    assert re.sub(r"\s+", "", "".join(p["text"] for p in pages)) == re.sub(r"\s+", "", expected)
    assert (pages[0]["width"], pages[0]["height"]) == (612.0, 792.0)
    assert pages[0]["boxes"][0]["text"] == "The Crazy Ones"


def test_an_artifact_the_fleet_holds_is_passed_by_blob_ref(caller: Caller, blob_root: Path) -> None:
    pdf = text_pdf(3)
    digest = LocalBlobStore(blob_root).put_bytes(pdf)
    params = {"digest": digest, "media_type": "application/pdf", "blob_ref": "blob:" + digest.removeprefix("sha256:")}
    data, is_error = caller.call("pdf_action", params)
    assert not is_error, data
    assert len(check_pdf_round_trip(data)) == 3


# -- refusals ---------------------------------------------------------------------------------------------

PDF = text_pdf(1)
GOOD = artifact(PDF, "application/pdf")
ZERO = "sha256:" + "0" * 64


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("merge_pdfs", {"action": "ocr_pdf", "params_json": json.dumps(GOOD)}, "capability_not_declared"),
        ("pdf_action", {"action": "merge_pdfs", "params_json": json.dumps(GOOD)}, "invalid_request"),
        ("pdf_action", {"action": "analyze_image", "params_json": json.dumps(GOOD)}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps(GOOD), "priority": 9}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf"}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": GOOD}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": "[1, 2]"}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": '"a string"'}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": "{not json"}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": '{"digest": "a", "digest": "b"}'}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({**GOOD, "password": "hunter2"})},
         "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({**GOOD, "digest": ZERO})}, "digest_mismatch"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({**GOOD, "digest": "md5:abc"})},
         "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({k: v for k, v in GOOD.items()
                                                                          if k != "media_type"})}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({**GOOD, "media_type": "pdf, please\n"})},
         "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({k: v for k, v in GOOD.items()
                                                                          if k != "artifact_b64"})}, "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({**GOOD, "blob_ref": "blob:" + "0" * 64})},
         "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({**GOOD, "artifact_b64": "%%%%" * 8})},
         "invalid_request"),
        ("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps({**GOOD, "artifact_b64": "abc"})},
         "invalid_request"),
    ],
    ids=["unknown-tool", "unknown-action", "another-tools-action", "extra-argument", "no-params-json",
         "params-json-not-a-string", "params-json-array", "params-json-string", "params-json-not-json",
         "params-json-repeated-key", "extra-param", "digest-mismatch", "digest-malformed", "no-media-type", "media-type-malformed",
         "no-artifact", "artifact-and-blob-ref", "base64-alphabet", "base64-length"],
)
def test_bad_requests_are_refused_before_any_work(caller: Caller, tool: str, arguments: dict[str, Any],
                                                  code: str) -> None:
    data, is_error = caller.raw(tool, arguments)
    assert is_error and data["error_code"] == code, data
    assert data["bundle"] is None
    assert data["available"] is False and data["unsupported"] is (code == "capability_not_declared")
    assert data["error"] == f"{code}: {data['message']}"
    assert_public(data, "hunter2")


def test_a_media_type_the_bytes_disagree_with_is_refused_with_a_failed_bundle(caller: Caller) -> None:
    data, is_error = caller.call("pdf_action", {**GOOD, "media_type": "image/png"})
    assert is_error and data["error_code"] == "media_type_mismatch", data
    assert_public(data)
    assert_failed_bundle(data)


def test_a_corrupt_pdf_fails_with_a_failed_bundle_and_no_claim(caller: Caller) -> None:
    broken = text_pdf(2)[:400]
    data, is_error = caller.call("pdf_action", artifact(broken, "application/pdf"))
    assert is_error and data["error_code"] == "corrupt_input", data
    assert data["available"] is False and data["unsupported"] is False
    assert_public(data)
    assert_failed_bundle(data)


def test_a_blob_ref_the_store_does_not_hold_is_refused(caller: Caller) -> None:
    params = {"digest": ZERO, "media_type": "application/pdf", "blob_ref": "blob:" + "0" * 64}
    data, is_error = caller.call("pdf_action", params)
    assert is_error and data["error_code"] == "blob_not_found", data
    assert_public(data)
    assert_failed_bundle(data)


def test_a_blob_ref_and_a_digest_that_disagree_are_refused(caller: Caller) -> None:
    params = {"digest": GOOD["digest"], "media_type": "application/pdf", "blob_ref": "blob:" + "0" * 64}
    data, is_error = caller.call("pdf_action", params)
    assert is_error and data["error_code"] == "invalid_request" and data["bundle"] is None, data


def test_undeclared_options_are_refused(caller: Caller) -> None:
    data, is_error = caller.call("pdf_action", {**GOOD, "language": "en"})
    assert is_error and data["error_code"] == "invalid_request", data
    assert "'language'" in data["error"]


# -- an operator's narrowed manifest: fail closed, limits before decoding --------------------------------


def test_a_capability_the_manifest_does_not_declare_answers_available_false(narrowed: tuple[Caller, Path]) -> None:
    caller, _ = narrowed
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 28
    for tool in ("transcribe_media", "video_keyframes"):
        data, is_error = caller.call(tool, artifact(wav, "audio/wav"))
        assert is_error and data["available"] is False and data["error_code"] == "capability_not_declared", data
        assert data["bundle"] is None and "segments" not in data and "shots" not in data
        assert_public(data)


def test_the_size_limit_applies_before_decoding(narrowed: tuple[Caller, Path]) -> None:
    caller, _ = narrowed
    # Not base64 at all: were it decoded first, the answer would be invalid_request.
    over_capability = "!!!!" * (NARROW_MAX_BYTES // 3 + 1)
    data, is_error = caller.call("pdf_action", {**GOOD, "artifact_b64": over_capability})
    assert is_error and data["error_code"] == "too_large" and data["bundle"] is None, data
    assert str(NARROW_MAX_BYTES) in data["error"]
    over_inline = "!!!!" * (NARROW_INLINE // 3 + 1)
    data, is_error = caller.call("pdf_action", {**GOOD, "artifact_b64": over_inline})
    assert is_error and data["error_code"] == "too_large" and "blob_ref" in data["error"], data
    assert_public(data)


def test_over_the_inline_limit_the_same_artifact_goes_by_blob_ref(narrowed: tuple[Caller, Path]) -> None:
    caller, blob_root = narrowed
    pdf = text_pdf(2)
    assert NARROW_INLINE < len(pdf) <= NARROW_MAX_BYTES
    data, is_error = caller.call("pdf_action", artifact(pdf, "application/pdf"))
    assert is_error and data["error_code"] == "too_large", data
    digest = LocalBlobStore(blob_root).put_bytes(pdf)
    data, is_error = caller.call("pdf_action", {"digest": digest, "media_type": "application/pdf",
                                                "blob_ref": "blob:" + digest.removeprefix("sha256:")})
    assert not is_error, data
    assert len(check_pdf_round_trip(data)) == 2


def test_a_stored_artifact_over_the_manifest_limit_is_refused(narrowed: tuple[Caller, Path]) -> None:
    caller, blob_root = narrowed
    digest = LocalBlobStore(blob_root).put_bytes(text_pdf(3))
    data, is_error = caller.call("pdf_action", {"digest": digest, "media_type": "application/pdf",
                                                "blob_ref": "blob:" + digest.removeprefix("sha256:")})
    assert is_error and data["error_code"] == "too_large", data
    assert_failed_bundle(data)


# -- Dispatcher.submit_stored directly -------------------------------------------------------------------


def test_submit_stored_equals_submit_for_the_same_bytes(tmp_path: Path) -> None:
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    pdf = text_pdf(2)
    digest = dispatcher.store.put_bytes(pdf)
    stored = dispatcher.submit_stored(digest, media_type="application/pdf").bundle()
    inline = dispatcher.submit(pdf).bundle()
    assert stored.status == "ok" and stored.job_id == inline.job_id
    assert bundle_addresses(stored) == bundle_addresses(inline)


def test_submit_stored_refuses_a_blob_whose_bytes_changed(tmp_path: Path) -> None:
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    digest = dispatcher.store.put_bytes(text_pdf(1))
    hex_digest = digest.removeprefix("sha256:")
    (tmp_path / "blobs" / "sha256" / hex_digest[:2] / hex_digest[2:4] / hex_digest).write_bytes(text_pdf(2))
    bundle = dispatcher.submit_stored(digest).bundle()
    assert bundle.status == "failed" and bundle.error is not None and bundle.error.code == "digest_mismatch"


def test_submit_stored_raises_on_a_malformed_reference(tmp_path: Path) -> None:
    from mediafleet.contract import CapabilityRefused

    with pytest.raises(CapabilityRefused):
        Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit_stored("../../etc/passwd")


# -- the other modalities on corpus media ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.skipif(not declared("transcribe_segments"), reason="the transcribe_segments capability has not landed")
def test_transcribe_media_gives_timed_segments_of_jfk(caller: Caller, corpus: Path) -> None:
    flac = (corpus / "audio" / "jfk.flac").read_bytes()
    data, is_error = caller.call("transcribe_media", artifact(flac, "audio/flac"))
    assert not is_error, data
    assert data.get("available", True) is True
    segments = parse_audio(data)
    # Upstream: one segment, starting in the first second and ending between 10 and 11 s. Whether
    # the model writes "for you." or "for you," depends on the CPU's int8 kernels (one segment on
    # the machines this test was written on, two on an AMD EPYC one); segments end at sentences,
    # so a full stop there splits the speech in two, in order.
    assert 1 <= len(segments) <= 2
    assert 0 <= segments[0]["start_ms"] < 1000 and 10_000 < segments[-1]["end_ms"] < 11_000
    assert all(a["end_ms"] <= b["start_ms"] for a, b in zip(segments, segments[1:]))
    assert all(s["text"].rstrip().endswith((".", "?", "!")) for s in segments[:-1])
    words = re.sub(r"[^a-z ]", "", " ".join(s["text"] for s in segments).lower()).split()
    assert words == "and so my fellow americans ask not what your country can do for you ask what you can do for your country".split()
    loci = [{"kind": "audio_range", "start_ms": s["start_ms"], "end_ms": s["end_ms"]} for s in segments]
    assert all(engine_accepts(a) for a in loci)
    bundle = bundle_of(data)
    assert bundle_addresses(bundle) == loci and assert_engine_valid(bundle) == len(segments)


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.skipif(not declared("extract_keyframes"), reason="the extract_keyframes capability has not landed")
def test_video_keyframes_gives_shots_and_png_keyframes_of_testvideo(caller: Caller, corpus: Path) -> None:
    mp4 = (corpus / "video" / "testvideo.mp4").read_bytes()
    data, is_error = caller.call("video_keyframes", artifact(mp4, "video/mp4", detector="adaptive"))
    assert not is_error, data
    shots, keyframes = parse_video(data)
    # AdaptiveDetector's upstream cuts (0-based) [30, 180, 394, 691]: five shots, 720 frames at 29.97 fps.
    bundle = bundle_of(data)
    shot_nodes = [n.properties for n in bundle.nodes
                  if n.node_type == "Evidence" and n.properties["locus_kind"] == "video_time_range"]
    assert [p["start_frame"] for p in shot_nodes] == [1, 31, 181, 395, 692]
    assert len(shots) == 5 and shots[0]["start_ms"] == 0
    assert all(a["end_ms"] == b["start_ms"] for a, b in zip(shots, shots[1:]))
    assert shots[1]["start_ms"] == round(30 * 1001 / 30)  # frame 30 at 30000/1001 fps
    assert len(keyframes) >= 5
    for key in keyframes:
        assert 1 <= key["start_frame"] <= key["end_frame"] <= 720
        assert key["png"] is not None and key["png"].startswith(b"\x89PNG\r\n\x1a\n")
    loci = [{"kind": "video_time_range", "start_ms": s["start_ms"], "end_ms": s["end_ms"]} for s in shots]
    frames = [{"kind": "frame_range", "start_frame": k["start_frame"], "end_frame": k["end_frame"]} for k in keyframes]
    assert all(engine_accepts(a) for a in loci + frames)
    addresses = bundle_addresses(bundle)
    assert [a for a in addresses if a["kind"] == "video_time_range"] == loci
    assert [a for a in addresses if a["kind"] == "frame_range"] == frames
    assert assert_engine_valid(bundle) == len(loci) + len(frames)


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.skipif(not declared("extract_keyframes"), reason="the extract_keyframes capability has not landed")
def test_video_keyframes_by_default_says_the_transitions_of_testvideo(caller: Caller, corpus: Path) -> None:
    """The default (combined) detector on upstream's test video: the two hard cuts AdaptiveDetector
    finds too (frames 30 and 180, 0-based), and the fades and the dissolve it reports as cuts or
    misses, each its own entry labelled with its kind; the shots before and after meet it."""
    mp4 = (corpus / "video" / "testvideo.mp4").read_bytes()
    data, is_error = caller.call("video_keyframes", artifact(mp4, "video/mp4"))
    assert not is_error, data
    shots, keyframes = parse_video(data)
    bundle = bundle_of(data)
    nodes = [n.properties for n in bundle.nodes
             if n.node_type == "Evidence" and n.properties["locus_kind"] == "video_time_range"]
    assert [p["start_frame"] for p in nodes] == [1, 31, 181, 212, 241, 332, 360, 395, 424, 530, 559, 665, 694]
    fade, dissolve = "transition:fade", "transition:dissolve"
    assert [s.get("label") for s in shots] == ["start", "cut", "cut", fade, "fade", fade, "fade", fade, "fade", dissolve,
                                               "dissolve", fade, "fade"]
    transitions = [(p["start_frame"], p["end_frame"]) for p in nodes if p.get("label", "").startswith("transition:")]
    assert transitions == [(212, 240), (332, 359), (395, 423), (530, 558), (665, 693)]
    assert shots[1]["start_ms"] == round(30 * 1001 / 30)
    assert all(a["end_ms"] == b["start_ms"] for a, b in zip(shots, shots[1:]))
    assert len(keyframes) == len(shots) - len(transitions)  # a transition has no keyframe
    assert assert_engine_valid(bundle) == len(shots) + len(keyframes)


@pytest.mark.slow
@pytest.mark.skipif(not declared("extract_keyframes"), reason="the extract_keyframes capability has not landed")
def test_video_keyframes_also_returns_the_spoken_words(caller: Caller) -> None:
    mp4 = (Path(__file__).parent / "data" / "speech.mp4").read_bytes()
    data, is_error = caller.call("video_keyframes", artifact(mp4, "video/mp4"))
    assert not is_error, data
    shots, _ = parse_video(data)
    segments = parse_audio(data)
    words = " ".join(s["text"] for s in segments).lower()
    assert "finance team" in words and "good day" in words
    assert all(0 <= s["start_ms"] < s["end_ms"] <= shots[-1]["end_ms"] for s in segments)


def parse_image(data: dict[str, Any]) -> tuple[str, bytes | None, list[dict[str, Any]]]:
    """``phash``, ``thumbnail_png_b64?``, ``regions: [{x, y, width, height, label?, confidence?, crop_png_b64?}]``."""
    assert isinstance(data["phash"], str) and data["phash"]
    thumbnail = base64.b64decode(data["thumbnail_png_b64"], validate=True) if "thumbnail_png_b64" in data else None
    regions = []
    for region in data["regions"]:
        confidence = region.get("confidence")
        if confidence is not None:
            assert 0.0 <= number(confidence) <= 1.0
        assert region.get("label") is None or isinstance(region["label"], str)
        regions.append({**{k: number(region[k]) for k in ("x", "y", "width", "height")},
                        "label": region.get("label"), "confidence": confidence})
    return data["phash"], thumbnail, regions


def png_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.skipif(not declared("analyze_image"), reason="the analyze_image capability has not landed")
@pytest.mark.parametrize(("name", "media_type", "size", "first_line"), [
    ("issue_170.png", "image/png", (800, 566), "TEST"),
    ("img_exif_orientation.jpg", "image/jpeg", (752, 306), "我是中国人"),
])
def test_image_decode_gives_phash_thumbnail_and_text_regions(caller: Caller, corpus: Path, name: str,
                                                             media_type: str, size: tuple[int, int],
                                                             first_line: str) -> None:
    data, is_error = caller.call("image_decode", artifact((corpus / "image" / name).read_bytes(), media_type))
    assert not is_error, data
    phash, thumbnail, regions = parse_image(data)
    assert re.fullmatch(r"[0-9a-f]{16}", phash)
    assert thumbnail is not None and 0 < max(png_size(thumbnail)) <= 256
    whole, *lines = regions
    assert (whole["label"], whole["x"], whole["y"], whole["width"], whole["height"]) == ("image", 0, 0, *size)
    assert lines and lines[0]["label"] == first_line
    for region in regions:
        assert region["x"] >= 0 and region["y"] >= 0
        assert region["x"] + region["width"] <= size[0] and region["y"] + region["height"] <= size[1]
    loci = [{"kind": "image_region", **{k: r[k] for k in ("x", "y", "width", "height")}} for r in regions]
    assert all(engine_accepts(a) for a in loci)
    bundle = bundle_of(data)
    assert bundle_addresses(bundle) == loci and assert_engine_valid(bundle) == len(loci)


@pytest.mark.corpus
@pytest.mark.skipif(not declared("analyze_image"), reason="the analyze_image capability has not landed")
def test_images_over_the_inline_budget_are_counted_not_sent(narrowed: tuple[Caller, Path], corpus: Path) -> None:
    caller, blob_root = narrowed
    png = (corpus / "image" / "issue_170.png").read_bytes()
    assert len(png) <= NARROW_INLINE
    data, is_error = caller.call("image_decode", artifact(png, "image/png"))
    assert not is_error, data
    (whole,) = [n.properties for n in bundle_of(data).nodes
                if n.node_type == "Evidence" and n.properties.get("region") == "image"]
    with LocalBlobStore(blob_root).verified_path(whole["thumbnail"]) as path:
        fits = len(base64.b64encode(path.read_bytes())) <= NARROW_INLINE
    assert ("thumbnail_png_b64" in data) is fits
    assert data.get("images_not_inlined", 0) == (0 if fits else 1)


def test_failure_shapes_say_whether_the_sidecar_is_available(tmp_path: Path) -> None:
    from mediafleet.adapters.caller import caller_response, failure_response
    from mediafleet.contract import PublicError

    assert failure_response(PublicError(code="engine_unavailable", message="m", retryable=True)) == {
        "available": False, "error": "engine_unavailable: m", "error_code": "engine_unavailable", "message": "m",
        "retryable": True, "unsupported": True, "bundle": None}
    corrupt = failure_response(PublicError(code="corrupt_input", message="m"))
    assert corrupt["available"] is False and corrupt["unsupported"] is False
    failed = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(b"").bundle()
    assert failed.status == "failed"
    with pytest.raises(ValueError):
        caller_response(failed)


# -- streamable HTTP on loopback ---------------------------------------------------------------------------


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve-mcp --http exited early:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"serve-mcp --http did not listen in {timeout}s")


@contextmanager
def http_server(tmp_path: Path, *args: str) -> Iterator[str]:
    port = free_port()
    log = tmp_path / "http.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "mediafleet.cli", "serve-mcp", "--http", f"--port={port}", *args],
                                env=server_env(tmp_path / "blobs"), cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(port, proc, log)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            proc.wait(timeout=20)


@pytest.mark.slow
def test_streamable_http_serves_the_same_tools(tmp_path: Path) -> None:
    import anyio
    from mcp.client.streamable_http import streamable_http_client

    pdf = text_pdf(2)
    results: list[Any] = []

    async def session(url: str) -> None:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            results.append({t.name for t in (await client.list_tools()).tools})
            for params in (artifact(pdf, "application/pdf"), {**artifact(pdf, "application/pdf"), "digest": ZERO}):
                results.append(await client.call_tool("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps(params)}))

    with http_server(tmp_path) as url:
        anyio.run(session, url)
    names, ok, refused = results
    assert names == set(TOOL_ACTIONS)
    assert not ok.is_error
    assert [p["page"] for p in check_pdf_round_trip(json.loads(ok.content[0].text))] == [1, 2]
    refusal = json.loads(refused.content[0].text)
    assert not refused.is_error and refusal["available"] is False and refusal["error_code"] == "digest_mismatch"


def test_http_refuses_a_non_loopback_host_unless_told(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mediafleet.cli", "serve-mcp", "--http", "--host", "0.0.0.0"],
                          env=server_env(tmp_path / "blobs"), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--allow-remote" in proc.stderr


# -- through the fleet: a real redis-server and a real worker ---------------------------------------------


@pytest.mark.integration
def test_pdf_action_through_the_fleet_equals_in_process(fleet_env: dict[str, str], start_worker: Callable[..., Any],
                                                        caller: Caller, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    pdf = text_pdf(2)
    env = server_env(Path(fleet_env["MEDIAFLEET_BLOB_ROOT"]), MEDIAFLEET_BROKER_URL=fleet_env["MEDIAFLEET_BROKER_URL"])
    with mcp_server(env, "--wait=120", log=tmp_path / "server.log") as fleet:
        remote, is_error = fleet.call("pdf_action", artifact(pdf, "application/pdf"))
        assert not is_error, remote
        refused, refused_error = fleet.call("pdf_action", {**artifact(pdf, "application/pdf"), "media_type": "video/mp4"})
    local, _ = caller.call("pdf_action", artifact(pdf, "application/pdf"))
    assert parse_pdf(remote) == parse_pdf(local)
    check_pdf_round_trip(remote)
    assert bundle_of(remote).job_id == bundle_of(local).job_id
    assert refused_error and refused["error_code"] == "media_type_mismatch"
    assert_failed_bundle(refused)
