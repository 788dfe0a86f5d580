"""Failure 11 of issue 11: a claim is verified only when the artifact was read whole.

A WebM cut short still declares its full length in the segment header (Matroska has no per-stream
duration); its frames stopping early must give ``corrupt_input``, as a truncated MP4 does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mediafleet.contract.errors import ErrorCode, InputRejected
from mediafleet.contract.manifest import default_manifest
from mediafleet.contract.video import VideoOptions
from tests.clips import write_clip
from mediafleet.workers.video.extract import extract_keyframes

LIMITS = default_manifest().capability("extract_keyframes").limits


@pytest.fixture(scope="module")
def webm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("webm") / "clip.webm"
    write_clip(path, [(0, 25), (1, 25), (2, 25)], codec="libvpx")  # 3.0 s, video only
    return path


@pytest.mark.slow
def test_a_whole_webm_reads(webm: Path) -> None:
    result = extract_keyframes(webm, VideoOptions(speech=False), LIMITS)
    assert len(result.shots) == 3


def test_a_webm_cut_short_is_corrupt_input(webm: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.webm"
    cut.write_bytes(webm.read_bytes()[: int(webm.stat().st_size * 0.45)])
    with pytest.raises(InputRejected) as err:
        extract_keyframes(cut, VideoOptions(speech=False), LIMITS)
    assert err.value.code == ErrorCode.CORRUPT_INPUT and "truncated" in err.value.message


def _run_pdf(data: bytes, tmp_path: Path):  # type: ignore[no-untyped-def]
    import hashlib

    from mediafleet.contract.common import sha256_digest
    from mediafleet.contract.jobs import ArtifactRef, ExtractRequest
    from mediafleet.blobs.local import LocalBlobStore
    from mediafleet.workers.runner import run_request

    store = LocalBlobStore(tmp_path / "blobs")
    digest = store.put_bytes(data)
    assert digest == sha256_digest(hashlib.sha256(data).hexdigest())
    request = ExtractRequest(job_id="mf-" + "e" * 32, action="ocr_pdf", artifact=ArtifactRef(
        digest=digest, media_type="application/pdf", bytes=len(data), modality="pdf"))
    return run_request(request, manifest=default_manifest(), store=store)


def test_a_pdf_read_whole_is_verified(tmp_path: Path) -> None:
    from tests.media import text_pdf

    outcome = _run_pdf(text_pdf(5), tmp_path)
    assert outcome.status == "ok" and "read_whole" not in outcome.checks and all(outcome.checks.values())


def test_a_pdf_that_lost_only_its_xref_is_ok_but_not_verified(tmp_path: Path) -> None:
    """MuPDF rebuilds the table and every page's text is there: the repair is recorded."""
    from mediafleet.adapters.bundle import build_bundle
    from tests.media import text_pdf

    data = text_pdf(5)
    outcome = _run_pdf(data[: int(len(data) * 0.95)], tmp_path)
    assert outcome.status == "ok" and outcome.checks["read_whole"] is False
    bundle = build_bundle(outcome, default_manifest().capability("ocr_pdf"))
    claims = [n for n in bundle.nodes if n.node_type == "Claim"]
    assert claims and not any(c.properties["is_verified"] for c in claims)


def test_a_pdf_cut_short_with_text_missing_is_corrupt_input(tmp_path: Path) -> None:
    """Failure 11: cut to 80%, MuPDF repaired it and 48 of 360 words were silently missing."""
    from tests.media import text_pdf

    data = text_pdf(5)
    outcome = _run_pdf(data[: int(len(data) * 0.8)], tmp_path)
    assert outcome.status == "failed" and outcome.error.code == ErrorCode.CORRUPT_INPUT
