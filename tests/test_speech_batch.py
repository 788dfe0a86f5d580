"""Whisper's windows a batch (``MEDIAFLEET_SPEECH_BATCH``): an operator's trade of speed for memory,
named in the job id where set, carried by the request to whoever runs it, recorded by the producer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from mediafleet import Dispatcher, Settings
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest
from mediafleet.contract.manifest import Modality, default_manifest
from mediafleet.workers import parts
from mediafleet.workers.audio.model import whisper
from mediafleet.workers.engines import configure, engine_config, numerics
from tests.test_audio import DATA, pcm16, write_wav


@pytest.mark.parametrize(("action", "options", "named"), [
    ("transcribe_segments", {}, True),
    ("extract_keyframes", {}, True),  # its speech part transcribes
    ("extract_keyframes", {"speech": False}, False),
    ("ocr_pdf", {}, False),
    ("analyze_image", {}, False),
])
def test_the_batch_is_in_the_numbers_of_speech_jobs_only_and_only_where_set(action: str, options: dict,
                                                                            named: bool) -> None:
    assert "speech_batch" not in numerics(action, options, 1)
    assert "speech_batch" not in numerics(action, options, 1, None)  # unset: ids as before the setting existed
    assert ("speech_batch" in numerics(action, options, 1, 2)) is named
    if named:
        assert numerics(action, options, 1, 2)["speech_batch"] == 2


@pytest.mark.parametrize("value", [0, 65])
def test_a_batch_outside_1_to_64_is_refused(value: int) -> None:
    with pytest.raises(ValidationError):
        Settings(speech_batch=value)


def test_a_videos_speech_part_runs_at_the_batch_its_job_names() -> None:
    manifest = default_manifest()
    capability = manifest.capability("extract_keyframes")
    request = ExtractRequest(
        job_id="mf-" + "b" * 32, action=capability.action, speech_batch=2,
        artifact=ArtifactRef(digest="sha256:" + "a" * 64, media_type="video/mp4", bytes=1, modality=Modality.VIDEO))
    speech = parts.plan(request, capability, manifest, {"speech": True})[1]["speech"]
    assert speech.speech_batch == 2 and speech.action == "transcribe_segments"


def test_the_engine_takes_the_running_jobs_batch_else_its_devices() -> None:
    before = engine_config()
    try:
        configure(replace(before, speech_batch=None))
        default = whisper()
        configure(replace(before, speech_batch=1))
        one = whisper()
    finally:
        configure(before)
    assert (default.batch_size, one.batch_size) == (4, 1)
    assert one.model is default.model  # the same loaded model, not a second one


@pytest.mark.slow
def test_a_set_batch_gives_its_own_job_and_the_same_text(tmp_path: Path) -> None:
    """Three windows, in-process: the default (4 on the CPU) and 1 a batch. The job ids differ, so
    do the loci's derivations (the producer's options name the batch), and the text is the same (a
    word's time may move by a frame)."""
    speech = pcm16(DATA / "speech.flac")
    pause = np.zeros(16000 // 2, dtype=np.int16)
    path = write_wav(tmp_path / "three.wav", np.concatenate([speech, pause] * 8))
    runs = {}
    for batch in (None, 1):
        bundle = Dispatcher(Settings(blob_root=tmp_path / f"blobs{batch}", speech_batch=batch)).submit(path).bundle()
        assert bundle.status == "ok"
        evidence = [n.properties for n in bundle.nodes if n.node_type == "Evidence"]
        runs[batch] = (bundle.job_id, {e["evidence_locus"]["derivation_ref"] for e in evidence},
                       [e["text"] for e in evidence])
    (default_id, default_derivation, default_text), (one_id, one_derivation, one_text) = runs[None], runs[1]
    assert default_id != one_id
    assert len(default_derivation) == len(one_derivation) == 1 and default_derivation != one_derivation
    assert len(default_text) > 3 and one_text == default_text
