"""The pieces of the audio path on their own: streaming VAD, windows, the model folder, the contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from faster_whisper.vad import VadOptions, collect_chunks, get_speech_timestamps
from pydantic import ValidationError

from mediafleet.contract import AudioResult, AudioSegment, AudioWord, parse_result
from mediafleet.contract.errors import Unavailable
from mediafleet.contract.manifest import DeviceClass
from mediafleet.sniff import sniff
from tests.test_audio import DATA, pcm16
from mediafleet.workers.audio import model
from mediafleet.workers.audio.vad import FixedWindows, Samples, SpeechDetector, WindowPacker
from mediafleet.workers.engines import EngineConfig, configure, engine_config
from mediafleet.workers.gpu import visible_gpus


@pytest.fixture(scope="module")
def mixture() -> np.ndarray:
    """Two minutes: speech, silences from 50 ms to 4 s, noise bursts, and 40 s of unbroken speech."""
    speech = pcm16(DATA / "speech.flac").astype(np.float32) / 32768.0
    rng = np.random.default_rng(7)
    parts = []
    for i in range(9):
        parts.append(np.zeros(int(rng.uniform(0.05, 4.0) * 16000), dtype=np.float32))
        parts.append(speech if i % 4 else np.tile(speech[4800:70000], 10))  # ~40 s, no pause
        if i % 5 == 0:
            parts.append((rng.standard_normal(6000) * 0.05).astype(np.float32))
    return np.concatenate(parts)


@pytest.mark.parametrize("block", [480000, 7 * 512 - 1])
@pytest.mark.parametrize(
    "options",
    [
        VadOptions(max_speech_duration_s=30, min_silence_duration_ms=160),  # what the fleet uses
        VadOptions(),
        VadOptions(max_speech_duration_s=5, min_silence_duration_ms=100, speech_pad_ms=200),
    ],
    ids=["fleet", "defaults", "short"],
)
def test_streaming_vad_finds_exactly_what_faster_whisper_finds(mixture, options, block) -> None:
    expected = get_speech_timestamps(mixture, options)
    detector = SpeechDetector(options)
    found = []
    for at in range(0, len(mixture), block):
        found += detector.feed(mixture[at : at + block])
        assert detector.keep_from <= at + block
    found += detector.finish(len(mixture))
    assert [{"start": s.start, "end": s.end} for s in found] == expected
    assert len(expected) >= 5


def test_windows_are_collect_chunks_and_map_back(mixture) -> None:
    options = VadOptions(max_speech_duration_s=30, min_silence_duration_ms=160)
    regions = get_speech_timestamps(mixture, options)
    chunks, _ = collect_chunks(mixture, [dict(r) for r in regions], max_duration=30)
    detector = SpeechDetector(options)
    packer = WindowPacker(30 * 16000)
    windows = []
    for region in detector.feed(mixture) + detector.finish(len(mixture)):
        windows += list(packer.add(region, mixture[region.start : region.end]))
    windows += list(packer.finish())
    assert len(windows) == len(chunks)
    for window, chunk in zip(windows, chunks, strict=True):
        assert np.array_equal(window.audio, chunk)
        assert window.audio.shape[0] <= 30 * 16000
    # A time inside the second region of a window maps past the silence that was left out.
    window = next(w for w in windows if len(w.regions) > 1)
    first, second = window.regions[:2]
    inside = (first.end - first.start + 10) / 16000
    assert window.original(inside, 16000) == pytest.approx((second.start + 10) / 16000)
    assert window.original(0.0, 16000) == pytest.approx(first.start / 16000)


def test_fixed_windows_cover_the_recording_without_vad() -> None:
    windows = FixedWindows(480000)
    regions = windows.feed(np.zeros(1_000_000, dtype=np.float32)) + windows.finish(1_000_000)
    assert [(r.start, r.end) for r in regions] == [(0, 480000), (480000, 960000), (960000, 1_000_000)]


def test_samples_drop_what_is_no_longer_needed() -> None:
    held = Samples()
    held.append(np.arange(10, dtype=np.float32))
    held.append(np.arange(10, 20, dtype=np.float32))
    held.drop_before(15)
    assert (held.start, held.end) == (15, 20)
    assert held.take(16, 18).tolist() == [16.0, 17.0]
    with pytest.raises(AssertionError):
        held.take(10, 12)


# -- the model folder ----------------------------------------------------------------------------

@pytest.fixture
def restore_engine_config():
    saved = engine_config()
    yield
    configure(saved)


def test_a_missing_model_folder_names_the_setting(tmp_path: Path, restore_engine_config) -> None:
    config = EngineConfig(whisper_model_dir=tmp_path / "nowhere")
    with pytest.raises(Unavailable) as info:
        model.model_dir(config)
    assert "MEDIAFLEET_WHISPER_MODEL_DIR" in info.value.message and str(tmp_path) not in info.value.message
    configure(config)
    with pytest.raises(Unavailable, match="MEDIAFLEET_WHISPER_MODEL_DIR"):
        model.check_device(DeviceClass.CPU)
    (tmp_path / "nowhere").mkdir()
    (tmp_path / "nowhere" / "model.bin").write_bytes(b"")
    with pytest.raises(Unavailable, match="tokenizer.json"):
        model.model_dir(config)


def test_the_packaged_model_passes_the_cpu_start_up_check(restore_engine_config) -> None:
    configure(EngineConfig())
    model.check_device(DeviceClass.CPU)


@pytest.mark.skipif(visible_gpus() > 0, reason="a CUDA device is visible here")
def test_a_gpu_worker_without_a_gpu_is_refused(restore_engine_config) -> None:
    configure(EngineConfig(device=DeviceClass.GPU))
    with pytest.raises(Unavailable, match="no CUDA device"):
        model.check_device(DeviceClass.GPU)


def test_model_identity_is_a_digest_of_its_files(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    for name in ("model.bin", "config.json", "tokenizer.json"):
        (folder / name).write_text(name)
    first = model.model_ref(folder)
    model.model_ref.cache_clear()
    assert model.model_ref(folder) == first and first.name == "m"
    (folder / "config.json").write_text("changed")
    model.model_ref.cache_clear()
    assert model.model_ref(folder).digest != first.digest


def test_another_model_folder_can_be_configured(tmp_path: Path) -> None:
    packaged = model.model_dir(EngineConfig())
    folder = tmp_path / "my-whisper"
    folder.mkdir()
    for file in packaged.iterdir():
        if file.is_file():
            (folder / file.name).symlink_to(file)
    engine = model.whisper(EngineConfig(whisper_model_dir=folder))
    assert engine.ref.name == "my-whisper"
    assert engine.ref.digest == model.whisper(EngineConfig()).ref.digest  # same files, same digest
    assert engine.compute_type == "int8" and not engine.multilingual


# -- the contract --------------------------------------------------------------------------------

def _segment(start: int, end: int, **kw) -> dict:
    return {"start_ms": start, "end_ms": end, "text": "hello", "confidence": 0.5, "avg_logprob": -0.7,
            "no_speech_prob": 0.01, **kw}


def _result(segments: list[dict], duration_ms: int = 5000) -> dict:
    return {
        "kind": "audio", "duration_ms": duration_ms, "speech_ms": 1000, "language": "en",
        "language_probability": 1.0, "segments": segments,
        "source": {"container": "wav", "codec": "pcm_s16le", "sample_rate": 16000, "channels": 1,
                   "declared_duration_ms": duration_ms, "from_video": False},
        "producer": {"engine": "faster-whisper", "engine_version": "1.2.1", "extractor": "x", "extractor_version": "1"},
    }


def test_a_valid_result_parses_as_the_audio_kind() -> None:
    result = parse_result(_result([_segment(0, 1000), _segment(1000, 2000)]))
    assert isinstance(result, AudioResult)


@pytest.mark.parametrize(
    "segments",
    [
        [_segment(1000, 1000)],  # empty
        [_segment(2000, 1000)],  # reversed
        [_segment(0, 1500), _segment(1000, 2000)],  # overlapping
        [_segment(4000, 6000)],  # past the end of the recording
        [_segment(0, 1000, text="")],  # no text
        [_segment(0, 1000, confidence=1.5)],
        [_segment(0, 1000, words=[{"start_ms": 900, "end_ms": 1100, "word": " hi", "probability": 0.9}])],
    ],
    ids=["empty", "reversed", "overlap", "past-end", "no-text", "confidence", "word-outside"],
)
def test_invalid_results_cannot_be_built(segments: list[dict]) -> None:
    with pytest.raises(ValidationError):
        AudioResult.model_validate(_result(segments))


def test_words_may_be_instants_but_not_reversed() -> None:
    assert AudioWord(start_ms=5, end_ms=5, word=" a", probability=0.3).end_ms == 5
    with pytest.raises(ValidationError):
        AudioWord(start_ms=6, end_ms=5, word=" a", probability=0.3)
    with pytest.raises(ValidationError):
        AudioSegment(**_segment(0, 10, extra_field=1))


def test_sniffing_recognises_raw_aac_and_not_mp3_as_aac() -> None:
    assert sniff(b"\xff\xf1\x60\x40" + bytes(60)) == "audio/aac"
    assert sniff(b"\xff\xfb\x90\x64" + bytes(60)) == "audio/mpeg"
