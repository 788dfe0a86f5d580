"""A long recording split into windows of seconds (workers/audio/split.py): planning and joining
with known answers, without a broker. Not wired into the manifest yet (the ``seconds`` split
needs a contract change and the extractor's ``time_span_ms``; see the module)."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mediafleet.contract.audio import AudioResult, AudioSegment, AudioSource
from mediafleet.contract.common import Producer
from mediafleet.contract.errors import ErrorCode
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, Outcome, Span
from mediafleet.contract.manifest import Modality, Part, default_manifest
from mediafleet.workers.audio.split import SECONDS, recording_seconds, windows

START = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
DIGEST = "sha256:" + "ab" * 32


def request(speakers: int | None = 0) -> ExtractRequest:
    options: dict[str, Any] = {} if speakers is None else {"speakers": speakers}
    return ExtractRequest(job_id="mf-" + "7" * 32, action="transcribe_segments", options=options,
                          artifact=ArtifactRef(digest=DIGEST, media_type="audio/wav", bytes=1000, modality=Modality.AUDIO))


def window_result(first_s: int, last_s: int, texts: list[str], speakers: bool = False) -> AudioResult:
    start = (first_s - 1) * 1000
    segments = [AudioSegment(start_ms=start + 1000 * i, end_ms=start + 1000 * i + 800, text=text, confidence=0.9,
                             avg_logprob=-0.1, no_speech_prob=0.01, speaker="S1" if speakers else None)
                for i, text in enumerate(texts)]
    return AudioResult(duration_ms=last_s * 1000, speech_ms=800 * len(texts), language="en", language_probability=1.0,
                       source=AudioSource(container="wav", codec="pcm_s16le", sample_rate=16000, channels=1,
                                          declared_duration_ms=1_800_000, from_video=False),
                       segments=segments, speaker_count=1 if speakers else None,
                       producer=Producer(engine="faster-whisper", engine_version="1.2.0", extractor="x",
                                         extractor_version="1"))


def outcome(result: AudioResult, offset_s: int, ok: bool = True) -> Outcome:
    req = request()
    return Outcome(job_id=req.job_id, action=req.action, artifact=req.artifact, status="ok", result=result,
                   checks={"loci_valid": ok}, started_at=START + timedelta(seconds=offset_s),
                   ended_at=START + timedelta(seconds=offset_s + 30))


def test_windows_and_the_plan() -> None:
    assert windows(1800, 300) == [Span(first=f, last=f + 299) for f in range(1, 1801, 300)]
    assert windows(601, 300)[-1] == Span(first=601, last=601)
    capability = default_manifest().capability("transcribe_segments")
    part = Part(split="pages", size=300)  # the unit's name is the contract's; the split reads `size`
    own, parts = SECONDS.plan(request(), "seconds", part, capability, default_manifest(), 1800)
    assert own.span == Span(first=1, last=300)
    assert set(parts) == {f"seconds:{f}-{f + 299}" for f in (301, 601, 901, 1201, 1501)}
    ids = {p.job_id for p in parts.values()}
    assert len(ids) == 5 and own.job_id not in ids
    assert all(p.part_of is not None and p.part_of.job_id == own.job_id for p in parts.values())
    again = SECONDS.plan(request(), "seconds", part, capability, default_manifest(), 1800)[1]
    assert {n: p.job_id for n, p in again.items()} == {n: p.job_id for n, p in parts.items()}  # a resubmission finds them
    # One task: short, of unknown length, or with speakers labelled (the default estimates them).
    for fact, speakers in ((300, 0), (None, 0), (1800, None), (1800, 2)):
        assert SECONDS.plan(request(speakers), "seconds", part, capability, default_manifest(), fact)[1] == {}


def test_the_windows_join_in_time_order_into_one_result() -> None:
    own = outcome(window_result(1, 300, ["one", "two"]), 0)
    reported = {"seconds:601-900": outcome(window_result(601, 900, ["five"]), 20),
                "seconds:301-600": outcome(window_result(301, 600, ["three", "four"], ), 10, ok=False)}
    joined = SECONDS.join(own, reported, default_manifest())
    assert joined.status == "ok" and isinstance(joined.result, AudioResult)
    assert [s.text for s in joined.result.segments] == ["one", "two", "three", "four", "five"]
    assert [s.start_ms for s in joined.result.segments] == [0, 1000, 300_000, 301_000, 600_000]
    assert joined.result.duration_ms == 900_000 and joined.result.speech_ms == 4000
    assert joined.checks == {"loci_valid": False}  # one window failed a check: the job did
    assert (joined.started_at, joined.ended_at) == (START, START + timedelta(seconds=50))


def test_a_window_with_speaker_labels_or_without_a_report_fails_the_join() -> None:
    own = outcome(window_result(1, 300, ["one"]), 0)
    labelled = SECONDS.join(own, {"seconds:301-600": outcome(window_result(301, 600, ["two"], speakers=True), 5)},
                            default_manifest())
    assert labelled.status == "failed" and labelled.error is not None
    assert labelled.error.code == ErrorCode.INTERNAL_ERROR and "labels" in labelled.error.message
    lost = SECONDS.join(own, {"seconds:301-600": None}, default_manifest())
    assert lost.status == "failed" and lost.error is not None and lost.error.code == ErrorCode.WORKER_LOST


def test_the_recording_length_is_read_from_its_header(tmp_path: Path) -> None:
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed")
    path = tmp_path / "tone.wav"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000",
                    "-t", "7.5", str(path)], check=True, timeout=60)
    assert recording_seconds(path) == 8
    (tmp_path / "not.wav").write_bytes(b"RIFF0000WAVE")
    assert recording_seconds(tmp_path / "not.wav") is None
