"""Audio transcription with the real packaged Whisper model on real recordings with known words."""

from __future__ import annotations

import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from mediafleet.adapters.audio import audio_loci
from mediafleet.adapters.verify import loci_valid
from benchmarks.harness import wer, words
from mediafleet.contract import AudioOptions, AudioResult, Limits, default_manifest
from mediafleet.contract.errors import (
    CapabilityRefused,
    ErrorCode,
    InputRejected,
    LimitExceeded,
    MediafleetError,
)
from mediafleet import Dispatcher, Settings
from mediafleet.sniff import sniff
from tests.helpers import assert_engine_valid
from mediafleet.workers.audio.decode import open_audio
from mediafleet.workers.audio.transcribe import extract_audio

DATA = Path(__file__).parent / "data"
SPEECH_TEXT = "Please send the report to the finance team before Friday. Thank you for listening, and have a good day."
JFK_TEXT = ("And so my fellow Americans, ask not what your country can do for you, "
            "ask what you can do for your country.")
LIMITS = default_manifest().capability("transcribe_segments").limits


# -- helpers shared with the other audio tests --------------------------------------------------

def pcm16(path: Path) -> np.ndarray:
    """The recording as 16 kHz mono int16 samples (PyAV)."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=16000)
    out = []
    with av.open(str(path)) as container:
        for frame in container.decode(audio=0):
            out.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
    out.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
    return np.concatenate(out)


def write_wav(path: Path, samples: np.ndarray, rate: int = 16000) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return path


def transcribe(path: Path, limits: Limits = LIMITS, progress=None, **options) -> AudioResult:
    return extract_audio(path, AudioOptions(**options), limits, progress)


def text_of(result: AudioResult) -> str:
    return " ".join(s.text for s in result.segments)


def assert_invariants(result: AudioResult) -> None:
    """Ordered, non-empty, non-overlapping segments inside the recording; words inside segments."""
    previous = 0
    for segment in result.segments:
        assert segment.start_ms >= previous
        assert segment.end_ms > segment.start_ms
        assert segment.text and any(c.isalnum() for c in segment.text)
        assert 0.0 <= segment.confidence <= 1.0
        for word in segment.words or ():
            assert segment.start_ms <= word.start_ms <= word.end_ms <= segment.end_ms
            assert 0.0 <= word.probability <= 1.0
        previous = segment.end_ms
    assert previous <= result.duration_ms
    assert result.speech_ms <= result.duration_ms
    drafts = audio_loci(result, "doc")
    assert len(drafts) == len(result.segments)
    assert loci_valid(drafts)


@pytest.fixture(scope="session")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_wav(tmp_path_factory.mktemp("audio") / "speech.wav", pcm16(DATA / "speech.flac"))


@pytest.fixture(scope="session")
def speech_result() -> AudioResult:
    return transcribe(DATA / "speech.flac")


# -- known answers -------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.corpus
def test_jfk_matches_the_upstream_transcript(corpus: Path) -> None:
    result = transcribe(corpus / "audio" / "jfk.flac")
    assert wer(JFK_TEXT, text_of(result)) <= 0.05, text_of(result)
    assert result.duration_ms == 11000
    assert result.language == "en" and result.language_probability == 1.0
    assert result.segments[0].start_ms < 1000
    assert 10000 < result.segments[-1].end_ms <= 11000
    assert_invariants(result)


def test_two_sentences_become_two_segments_with_the_pause_between(speech_result: AudioResult) -> None:
    result = speech_result
    assert wer(SPEECH_TEXT, text_of(result)) <= 0.05, text_of(result)
    first, second = result.segments
    assert words(first.text) == words("Please send the report to the finance team before Friday.")
    # espeak's speech: the first sentence within 0.3-4.5 s, a 1.2 s pause, the second after 5.6 s
    assert 200 <= first.start_ms < 1000 and first.end_ms <= 5000
    assert second.start_ms >= 5000 and second.end_ms <= result.duration_ms
    assert [w.word.strip() for w in first.words][:2] == ["Please", "send"]
    assert result.duration_ms == 9846  # 157,539 samples at 16 kHz
    assert result.source.container == "flac" and result.source.sample_rate == 16000
    assert not result.source.from_video
    assert_invariants(result)


@pytest.mark.parametrize(
    ("name", "media_type", "codec"),
    [
        ("speech.mp3", "audio/mpeg", "mp3float"),
        ("speech.opus", "audio/ogg", "opus"),
        ("speech.m4a", "audio/mp4", "aac"),
        ("speech.aac", "audio/aac", "aac"),
        ("speech.mp4", "video/mp4", "aac"),
    ],
)
def test_every_format_gives_the_same_words(name: str, media_type: str, codec: str) -> None:
    path = DATA / name
    assert sniff(path.read_bytes()[:4096]) == media_type
    result = transcribe(path)
    assert wer(SPEECH_TEXT, text_of(result)) <= 0.1, text_of(result)
    assert result.source.codec == codec
    assert result.source.from_video == (name == "speech.mp4")
    assert abs(result.duration_ms - 9846) < 150  # lossy codecs pad a frame or so
    assert_invariants(result)


def test_wav_gives_what_flac_gives(speech_wav: Path, speech_result: AudioResult) -> None:
    assert sniff(speech_wav.read_bytes()[:64]) == "audio/wav"
    result = transcribe(speech_wav)
    assert result.segments == speech_result.segments
    assert result.duration_ms == speech_result.duration_ms


def test_silence_is_ok_with_no_segments(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "silence.wav", np.zeros(3 * 16000, dtype=np.int16))
    result = transcribe(path)
    assert result.segments == [] and result.speech_ms == 0 and result.duration_ms == 3000
    assert result.language == "en"
    # Without VAD the model writes "..." on silence; text without a word is not evidence.
    assert transcribe(path, vad_filter=False).segments == []
    assert audio_loci(result, "doc") == []


def test_without_word_timestamps_a_window_is_one_segment(speech_result: AudioResult) -> None:
    result = transcribe(DATA / "speech.flac", word_timestamps=False)
    (segment,) = result.segments
    assert segment.words is None
    assert words(segment.text) == words(text_of(speech_result))
    assert segment.start_ms <= speech_result.segments[0].start_ms
    assert segment.end_ms >= speech_result.segments[-1].end_ms
    assert_invariants(result)


def test_without_vad_the_whole_recording_is_transcribed() -> None:
    result = transcribe(DATA / "speech.flac", vad_filter=False)
    assert result.speech_ms == result.duration_ms
    assert wer(SPEECH_TEXT, text_of(result)) <= 0.1
    assert result.producer.options["vad_parameters"] is None
    assert_invariants(result)


def test_the_result_says_what_produced_it(speech_result: AudioResult) -> None:
    producer = speech_result.producer
    assert producer.engine == "faster-whisper" and producer.extractor == "mediafleet.audio.transcribe"
    model, voices = producer.models  # Whisper, then the speaker encoder
    assert "tiny.en" in model.name and model.digest.startswith("sha256:")
    assert voices.name.startswith("resemblyzer voice encoder") and voices.digest.startswith("sha256:")
    assert speech_result.speaker_count == 1 and {s.speaker for s in speech_result.segments} == {"S1"}
    assert producer.options["language"] is None and producer.options["beam_size"] == 5
    assert producer.options["compute_type"] == "int8" and producer.options["device"] == "cpu"
    # Round trip through the wire form.
    assert AudioResult.model_validate_json(speech_result.model_dump_json()) == speech_result


def test_progress_counts_seconds_up_to_the_length(speech_wav: Path) -> None:
    calls: list[tuple[int, int | None]] = []
    transcribe(speech_wav, progress=lambda done, total: calls.append((done, total)))
    done = [d for d, _ in calls]
    assert done == sorted(done) and calls[-1] == (10, 10)
    assert {t for _, t in calls} == {10}


@pytest.mark.slow
def test_a_long_recording_is_streamed_not_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six minutes, speech at the start and the end: never more than a block or so is held."""
    from mediafleet.workers.audio import vad

    speech = pcm16(DATA / "speech.flac")
    silence = np.zeros(340 * 16000, dtype=np.int16)
    path = write_wav(tmp_path / "long.wav", np.concatenate([speech, silence, speech]))
    held: list[int] = []
    original = vad.Samples.append

    def spy(self: vad.Samples, block: np.ndarray) -> None:
        original(self, block)
        held.append(self.end - self.start)

    monkeypatch.setattr(vad.Samples, "append", spy)
    result = transcribe(path)
    assert len(held) >= 12 and max(held) <= 31 * 16000  # one 30 s block, plus what VAD still needs
    assert len(result.segments) == 4
    assert result.segments[2].start_ms > 340_000
    assert_invariants(result)


# -- bad input -----------------------------------------------------------------------------------

def _damage(data: bytes) -> bytes:
    out = bytearray(data)
    middle = len(out) // 3
    for i in range(middle, middle + 4000):
        out[i] = (out[i] * 7 + 13) & 0xFF
    return bytes(out)


def _video_only(path: Path) -> Path:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=5)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(5):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 40 * i, dtype=np.uint8), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, 5)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


BAD = {
    "truncated.flac": (lambda: (DATA / "speech.flac").read_bytes()[:70000], ErrorCode.CORRUPT_INPUT, "truncated"),
    "truncated.mp3": (lambda: (DATA / "speech.mp3").read_bytes()[:30000], ErrorCode.CORRUPT_INPUT, "truncated"),
    "truncated.opus": (lambda: (DATA / "speech.opus").read_bytes()[:11000], ErrorCode.CORRUPT_INPUT, "truncated"),
    "truncated.m4a": (lambda: (DATA / "speech.m4a").read_bytes()[:20000], ErrorCode.CORRUPT_INPUT, "damaged"),
    "damaged.flac": (lambda: _damage((DATA / "speech.flac").read_bytes()), ErrorCode.CORRUPT_INPUT, "damaged"),
    "damaged.opus": (lambda: _damage((DATA / "speech.opus").read_bytes()), ErrorCode.CORRUPT_INPUT, "damaged"),
    "damaged.m4a": (lambda: _damage((DATA / "speech.m4a").read_bytes()), ErrorCode.CORRUPT_INPUT, "damaged"),
    "damaged.mp3": (lambda: _damage((DATA / "speech.mp3").read_bytes()), ErrorCode.CORRUPT_INPUT, "damaged"),
    "noise.flac": (lambda: b"fLaC" + bytes(range(256)) * 20, ErrorCode.CORRUPT_INPUT, "cannot be read"),
    "noise.wav": (lambda: b"RIFF\x00\x10\x00\x00WAVE" + bytes(range(256)) * 20, ErrorCode.CORRUPT_INPUT,
                  "cannot be read"),
    "text.mp3": (lambda: b"ID3" + b"these bytes are a sentence, not audio. " * 50, ErrorCode.CORRUPT_INPUT,
                 "cannot be read"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_fails_with_a_specific_public_error(name: str, tmp_path: Path) -> None:
    make, code, phrase = BAD[name]
    path = tmp_path / name
    path.write_bytes(make())
    with pytest.raises(MediafleetError) as info:
        transcribe(path)
    assert info.value.code == code
    assert phrase in info.value.message
    assert str(tmp_path) not in info.value.message and "Errno" not in info.value.message


def test_truncated_wav_is_refused_from_its_header(speech_wav: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.wav"
    path.write_bytes(speech_wav.read_bytes()[:100_000])
    with pytest.raises(InputRejected, match="WAV audio is truncated"):
        open_audio(path, LIMITS)


def test_a_file_without_audio_has_no_media_stream(tmp_path: Path) -> None:
    with pytest.raises(InputRejected) as info:
        transcribe(_video_only(tmp_path / "mute.mp4"))
    assert info.value.code == ErrorCode.NO_MEDIA_STREAM


def test_too_long_is_refused_from_the_header_before_decoding(speech_wav: Path) -> None:
    short = Limits(max_bytes=LIMITS.max_bytes, max_duration_s=5)
    with pytest.raises(LimitExceeded) as info:
        open_audio(speech_wav, short)  # opening reads the header only
    assert info.value.code == ErrorCode.TOO_LONG and "limit is 5 s" in info.value.message


def test_too_long_is_also_caught_while_decoding_when_the_header_is_silent(speech_wav: Path) -> None:
    decoder = open_audio(speech_wav, Limits(max_bytes=LIMITS.max_bytes))
    decoder._limits = Limits(max_bytes=LIMITS.max_bytes, max_duration_s=5)  # as if the header had no length
    with decoder, pytest.raises(LimitExceeded) as info:
        for _ in decoder.blocks(16000):
            pass
    assert info.value.code == ErrorCode.TOO_LONG


def test_a_language_the_model_cannot_speak_is_refused() -> None:
    with pytest.raises(CapabilityRefused) as info:
        transcribe(DATA / "speech.flac", language="fr")
    assert info.value.code == ErrorCode.INVALID_REQUEST


# -- through the dispatcher, in-process ----------------------------------------------------------

def test_in_process_bundle_has_one_valid_audio_locus_per_segment(tmp_path: Path) -> None:
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    bundle = dispatcher.submit(DATA / "speech.opus").bundle()
    assert bundle.status == "ok", bundle.error
    assert bundle.action == "transcribe_segments" and bundle.artifact.modality == "audio"
    evidence = [n for n in bundle.nodes if n.node_type == "Evidence"]
    assert assert_engine_valid(bundle) == len(evidence) == 2
    for node in evidence:
        address = node.properties["evidence_locus"]["address"]
        assert address["kind"] == "audio_range" and address["end_ms"] > address["start_ms"]
        assert node.properties["text"] and 0 <= node.properties["confidence"] <= 1
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] is True


def test_in_process_refusals_are_failed_bundles(tmp_path: Path) -> None:
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    cut = dispatcher.submit((DATA / "speech.flac").read_bytes()[:70000]).bundle()
    assert cut.status == "failed" and cut.error is not None and cut.error.code == ErrorCode.CORRUPT_INPUT
    refused = dispatcher.submit(DATA / "speech.flac", options={"beam_size": 9}).bundle()
    assert refused.status == "failed" and refused.error is not None
    assert refused.error.code == ErrorCode.INVALID_REQUEST


# -- the word error rate the audio tests and benchmarks judge by ----------------------------------


@pytest.mark.parametrize(("reference", "hypothesis", "expected"), [
    ("a b c", "a b c", 0.0),
    ("a b c", "a x c", 1 / 3),  # a substitution
    ("a b c", "a b c d", 1 / 3),  # an insertion
    ("The cat, sat.", "cat sat on", 2 / 3),  # a deletion and an insertion, after normalising
    ("a b c", "", 1.0),
    ("a b", "x y z w", 2.0),  # more errors than reference words
])
def test_word_error_rate_known_answers(reference: str, hypothesis: str, expected: float) -> None:
    assert wer(reference, hypothesis) == pytest.approx(expected)


def test_word_error_rate_is_the_edit_distance_cell_by_cell() -> None:
    import random

    def cell_by_cell(reference: str, hypothesis: str) -> float:
        ref, hyp = words(reference), words(hypothesis)
        row = list(range(len(hyp) + 1))
        for i, r in enumerate(ref, 1):
            prev, row[0] = row[:], i
            for j, h in enumerate(hyp, 1):
                row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (r != h))
        return row[len(hyp)] / len(ref)

    rnd = random.Random(7)
    for _ in range(200):
        reference = " ".join(rnd.choice("abcdef") for _ in range(rnd.randint(1, 25)))
        hypothesis = " ".join(rnd.choice("abcdef") for _ in range(rnd.randint(0, 25)))
        assert wer(reference, hypothesis) == cell_by_cell(reference, hypothesis), (reference, hypothesis)
