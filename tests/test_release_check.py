"""A worker runs only jobs its own release names as their requests do (``ReleaseCheck``).

A job id names the extractor version and recipe of the release that named it; a worker of another
release (a rolling upgrade) would otherwise run its own extractors under that id, and every
resubmission would be answered with that other version's evidence.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from mediafleet.adapters.ids import job_id as make_job_id
from mediafleet.admission import Admission
from mediafleet.blobs.local import LocalBlobStore
from mediafleet.contract.errors import ErrorCode
from mediafleet.contract.jobs import ExtractRequest, JobState
from mediafleet.contract.manifest import Manifest, default_manifest
from mediafleet.fleet.store import JobStore
from mediafleet.settings import Settings
from mediafleet.workers.runtime.middleware.chain import fleet_middleware
from mediafleet.workers.runtime.middleware.delivery import Delivery, run_chain
from mediafleet.workers.runtime.middleware.release import ReleaseCheck
from mediafleet.workers.parts import named_job_id, plan
from tests.test_middleware import claimed, pdf_request, runner

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _another_release(request: ExtractRequest) -> ExtractRequest:
    """``request`` as a dispatcher whose extractor is at another version names it."""
    capability = default_manifest().capability(request.action)
    other = make_job_id(request.artifact.digest, request.action, capability.extractor_version + "-next",
                        dict(request.options))
    return request.model_copy(update={"job_id": other})


@pytest.mark.parametrize(("action", "media_type", "options", "threads", "batch"), [
    ("ocr_pdf", "application/pdf", {"ocr": "never"}, 1, None),
    ("ocr_pdf", "application/pdf", {}, 2, 8),
    ("analyze_image", "image/png", {}, 2, None),
    ("transcribe_segments", "audio/wav", {"language": "en"}, 1, 4),
    ("extract_keyframes", "video/mp4", {}, 2, 2),
    ("extract_keyframes", "video/mp4", {"speech": False}, 1, None),
])
def test_every_id_this_release_makes_it_recognises(tmp_path: Path, action: str, media_type: str, options: dict,
                                                   threads: int, batch: int | None) -> None:
    """The invariant the check rests on: admission's id of every request, and planning's id of each
    of its parts (a PDF's page ranges, a video's speech), is the id the worker derives again."""
    manifest = default_manifest()
    settings = Settings(blob_root=tmp_path, threads=threads, speech_batch=batch)
    admission = Admission(settings, manifest, LocalBlobStore(tmp_path / "blobs"), lambda: NOW)
    capability = manifest.capability(action)
    request = admission.request("sha256:" + "ab" * 32, 1000, media_type, capability, dict(options))
    assert named_job_id(request, manifest) == request.job_id
    facts = {"pages": 100, "speech": True}  # a long PDF splits; a video with an audio track has speech
    own, parts = plan(request, capability, manifest, {name: facts[name] for name in capability.parts})
    assert named_job_id(own, manifest) == own.job_id
    assert bool(parts) == (action == "ocr_pdf" or options.get("speech") is not False and action == "extract_keyframes")
    for part in parts.values():
        assert named_job_id(part, manifest) == part.job_id
        assert named_job_id(_with_parent(part, "mf-" + "9" * 32), manifest) != part.job_id  # derived from its job's


def _with_parent(part: ExtractRequest, parent: str) -> ExtractRequest:
    assert part.part_of is not None
    return part.model_copy(update={"part_of": part.part_of.model_copy(update={"job_id": parent})})


@pytest.mark.integration
def test_a_job_named_by_another_release_fails_retryably_and_is_not_run(jobs: JobStore, blobs: LocalBlobStore,
                                                                        manifest: Manifest) -> None:
    request = _another_release(pdf_request(blobs))
    delivery = claimed(jobs, request)
    ran: list[bool] = []
    run = runner(manifest, blobs, request)
    outcome = run_chain(fleet_middleware(manifest), delivery, lambda progress: ran.append(True) or run(progress))
    assert not ran
    assert outcome.status == "failed" and outcome.error.code == ErrorCode.ENGINE_UNAVAILABLE and outcome.error.retryable
    assert "another mediafleet release" in outcome.error.message
    record = jobs.get(request.job_id)
    assert record.state == JobState.FAILED and record.outcome == outcome and delivery.announced
    # Named as this release names it, the same artifact runs.
    same = pdf_request(blobs)
    assert ReleaseCheck(manifest).before_run(claimed(jobs, same)) is None


def test_a_request_for_an_action_the_manifest_lacks_is_left_to_the_runner(blobs: LocalBlobStore) -> None:
    """The check decides nothing it cannot name: the runner refuses an undeclared action itself."""
    shipped = default_manifest()
    narrowed = shipped.model_copy(update={"capabilities": {"ocr_pdf": shipped.capability("ocr_pdf")}})
    request = pdf_request(blobs).model_copy(update={"action": "analyze_image"})
    assert ReleaseCheck(narrowed).before_run(Delivery(request, None)) is None  # type: ignore[arg-type]  # reads no record

