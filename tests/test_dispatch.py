"""The dispatcher and the worker-side runner in-process: refusals, bad input, integrity, no leaks."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mediafleet.contract import ArtifactRef, DeviceClass, ErrorCode, ExtractRequest, IntegrityError, default_manifest
from mediafleet import Dispatcher, LocalBlobStore, Settings
from tests.helpers import assert_engine_valid
from tests.media import encrypted_pdf, text_pdf
from mediafleet.workers import extractor as extractor_table
from mediafleet.workers.runner import run_request


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(blob_root=tmp_path / "blobs")


def _public(bundle, tmp_path: Path) -> None:
    """Nothing in a failed bundle names a path, a secret or a traceback."""
    text = bundle.model_dump_json()
    assert str(tmp_path) not in text and "Traceback" not in text and "hunter2" not in text


def test_in_process_pdf_bundle_is_ok_and_valid(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "doc.pdf"
    path.write_bytes(text_pdf(2))
    bundle = Dispatcher(settings).submit(path).bundle()
    assert bundle.status == "ok" and bundle.action == "ocr_pdf"
    assert bundle.artifact.media_type == "application/pdf" and bundle.artifact.bytes == path.stat().st_size
    assert assert_engine_valid(bundle) == 2 * 8
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] is True
    assert LocalBlobStore(settings.blob_root).exists(bundle.artifact.digest)


def test_same_bytes_same_job_and_same_loci(settings: Settings) -> None:
    pdf = text_pdf(1)
    a, b = Dispatcher(settings).submit(pdf).bundle(), Dispatcher(settings).submit(pdf).bundle()
    assert a.job_id == b.job_id
    assert [n.id for n in a.nodes if n.node_type == "Evidence"] == [n.id for n in b.nodes if n.node_type == "Evidence"]


@pytest.mark.parametrize(
    ("data", "kwargs", "code"),
    [
        (b"", {}, ErrorCode.EMPTY_INPUT),
        (b"just some text, renamed to .pdf", {}, ErrorCode.UNSUPPORTED_MEDIA_TYPE),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, {"action": "ocr_pdf"}, ErrorCode.UNSUPPORTED_MEDIA_TYPE),
        (text_pdf(1), {"media_type": "image/png"}, ErrorCode.MEDIA_TYPE_MISMATCH),
        (text_pdf(1), {"action": "transcode_everything"}, ErrorCode.CAPABILITY_NOT_DECLARED),
        (text_pdf(1), {"options": {"password": "hunter2"}}, ErrorCode.INVALID_REQUEST),
        (text_pdf(2)[:400], {}, ErrorCode.CORRUPT_INPUT),
        (encrypted_pdf(), {}, ErrorCode.ENCRYPTED_INPUT),
    ],
    ids=["empty", "not-a-pdf", "png-as-pdf-action", "claimed-type-disagrees", "undeclared-action",
         "undeclared-option", "truncated", "encrypted"],
)
def test_bad_input_fails_with_a_specific_public_error(settings: Settings, tmp_path: Path, data: bytes,
                                                      kwargs: dict, code: ErrorCode) -> None:
    path = tmp_path / "input.pdf"
    path.write_bytes(data)
    job = Dispatcher(settings).submit(path, **kwargs)
    bundle = job.bundle()
    assert bundle.status == "failed" and bundle.error is not None
    assert bundle.error.code == code
    assert not [n for n in bundle.nodes if n.node_type in ("Evidence", "Claim")]
    activity = next(n for n in bundle.nodes if n.node_type == "ProvenanceActivity")
    assert activity.properties["status"] == "failed"
    _public(bundle, tmp_path)


def _narrowed(tmp_path: Path, limits: dict) -> Settings:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"capabilities": {"ocr_pdf": {"limits": limits}}}))
    return Settings(blob_root=tmp_path / "blobs", manifest_file=path)


def test_over_the_size_limit_is_refused_before_storing(tmp_path: Path) -> None:
    settings = _narrowed(tmp_path, {"max_bytes": 1000})
    pdf = text_pdf(3)
    bundle = Dispatcher(settings).submit(pdf).bundle()
    assert bundle.error.code == ErrorCode.TOO_LARGE
    assert not LocalBlobStore(settings.blob_root).exists(bundle.artifact.digest)


def test_over_the_page_limit_fails(tmp_path: Path) -> None:
    bundle = Dispatcher(_narrowed(tmp_path, {"max_bytes": 10**8, "max_pages": 2})).submit(text_pdf(3)).bundle()
    assert bundle.error.code == ErrorCode.TOO_MANY_PAGES


def _stored_request(store: LocalBlobStore, data: bytes, action: str = "ocr_pdf") -> ExtractRequest:
    digest = store.put_bytes(data)
    return ExtractRequest(job_id="mf-" + "1" * 32, action=action,
                          artifact=ArtifactRef(digest=digest, media_type="application/pdf", bytes=len(data),
                                               modality="pdf"))


def test_worker_refuses_a_blob_that_does_not_match_its_digest(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    request = _stored_request(store, text_pdf(1))
    store._path(request.artifact.digest).write_bytes(text_pdf(2))  # tampered at rest
    outcome = run_request(request, manifest=default_manifest(), store=store)
    assert outcome.status == "failed" and outcome.error.code == ErrorCode.DIGEST_MISMATCH
    assert outcome.checks == {"digest_recomputed": False}


def test_worker_reports_a_missing_blob(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    request = ExtractRequest(job_id="mf-" + "2" * 32, action="ocr_pdf",
                             artifact=ArtifactRef(digest="sha256:" + "0" * 64, media_type="application/pdf", bytes=10,
                                                  modality="pdf"))
    assert run_request(request, manifest=default_manifest(), store=store).error.code == ErrorCode.BLOB_NOT_FOUND


def test_worker_fails_closed_on_its_own_manifest(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    request = _stored_request(store, text_pdf(1))
    disabled = default_manifest().narrow({"capabilities": {}})
    assert run_request(request, manifest=disabled, store=store).error.code == ErrorCode.CAPABILITY_NOT_DECLARED
    cpu_only = default_manifest().narrow({"capabilities": {"ocr_pdf": {"devices": ["cpu"]}}})
    out = run_request(request, manifest=cpu_only, store=store, device=DeviceClass.GPU)
    assert out.status == "failed" and out.error.code == ErrorCode.CAPABILITY_NOT_DECLARED


def test_worker_rejects_a_result_with_undeclared_locus_kinds(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    narrowed = default_manifest().narrow({"capabilities": {"ocr_pdf": {"produces": ["PageBox"]}}})
    out = run_request(_stored_request(store, text_pdf(1)), manifest=narrowed, store=store)
    assert out.status == "failed" and out.error.code == ErrorCode.UNDECLARED_LOCUS_KIND and out.result is None


def test_an_unexpected_exception_becomes_a_fixed_public_message(tmp_path: Path, monkeypatch) -> None:
    def explode(*_args, **_kwargs):
        raise RuntimeError(f"cannot open {tmp_path}/secret.pdf with password hunter2")

    monkeypatch.setattr(extractor_table, "_import", lambda spec: explode)
    store = LocalBlobStore(tmp_path / "blobs")
    out = run_request(_stored_request(store, text_pdf(1)), manifest=default_manifest(), store=store)
    assert out.status == "failed" and out.error.code == ErrorCode.INTERNAL_ERROR
    assert "hunter2" not in out.model_dump_json() and str(tmp_path) not in out.model_dump_json()


def test_outcome_times_come_from_the_clock(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    ticks = iter([datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)])
    out = run_request(_stored_request(store, text_pdf(1)), manifest=default_manifest(), store=store,
                      clock=lambda: next(ticks))
    assert (out.ended_at - out.started_at).total_seconds() == 2


def test_a_keyword_submit_does_not_know_is_refused(settings: Settings) -> None:
    """submit and submit_stored share one keyword set (Submission); a misspelt one fails loudly."""
    dispatcher = Dispatcher(settings)
    with pytest.raises(TypeError, match="optionz"):
        dispatcher.submit(text_pdf(1), optionz={"dpi": 300})
    with pytest.raises(TypeError, match="priorty"):
        dispatcher.submit_stored("sha256:" + "0" * 64, priorty=9)


def test_blob_references_cannot_leave_the_store(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    for bad in ["sha256:../../etc/passwd", "../x", "sha256:" + "A" * 64, "md5:" + "0" * 32]:
        with pytest.raises(IntegrityError) as err:
            with store.verified_path(bad):
                pass
        assert err.value.code == ErrorCode.BLOB_NOT_FOUND and str(err.value) == "malformed blob reference"


def test_video_speech_follows_the_manifest_in_force(tmp_path: Path) -> None:
    """Narrowing extract_keyframes to shots and frames turns its speech transcript off."""
    video = Path(__file__).parent / "data" / "speech.mp4"
    full = Dispatcher(Settings(blob_root=tmp_path / "a")).submit(video).bundle()
    kinds = {n.properties["locus_kind"] for n in full.nodes if n.node_type == "Evidence"}
    assert full.status == "ok" and "audio_range" in kinds

    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"capabilities": {
        "ocr_pdf": {}, "extract_keyframes": {"produces": ["VideoShot", "VideoFrameRange"]}}}))
    narrowed = Dispatcher(Settings(blob_root=tmp_path / "b", manifest_file=path))
    quiet = narrowed.submit(video).bundle()
    assert quiet.status == "ok"
    assert {n.properties["locus_kind"] for n in quiet.nodes if n.node_type == "Evidence"} == {
        "video_time_range", "frame_range"}
    asked = narrowed.submit(video, options={"speech": True}).bundle()
    assert asked.status == "failed" and asked.error.code == ErrorCode.CAPABILITY_NOT_DECLARED
