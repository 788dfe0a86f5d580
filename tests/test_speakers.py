"""Speaker turns: the encoder's weights read without torch, its embeddings against resemblyzer's own
(computed with torch, tests/data/resemblyzer_jfk.json), the clustering and splitting on embeddings
with known speakers, the contract's rules, and whole recordings of two voices."""

from __future__ import annotations

import io
import json
import pickle
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mediafleet.adapters.audio import audio_loci
from mediafleet.adapters.caller import audio_shape
from mediafleet.contract import AudioOptions, AudioResult
from mediafleet.contract.audio import AudioSegment
from mediafleet.contract.digests import hash_file
from mediafleet.contract.errors import Unavailable
from mediafleet.workers.audio import speaker_encoder
from mediafleet.workers.audio.speaker_turns import MIN_TURN_MS, label_segments
from mediafleet.workers.audio.speaker_weights import encoder_weights, read_checkpoint, weights_file

DATA = Path(__file__).parent / "data"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"

try:
    weights_file()
    HAVE_ENCODER = True
except Unavailable:
    HAVE_ENCODER = False
needs_encoder = pytest.mark.skipif(not HAVE_ENCODER, reason="resemblyzer is not installed (pip install --no-deps resemblyzer==0.1.4)")


# -- the weights ------------------------------------------------------------------------------------

@needs_encoder
def test_the_weights_are_read_without_torch_and_named_by_the_files_digest() -> None:
    weights = encoder_weights()
    assert [tuple(a.shape for a in layer) for layer in weights.lstm] == [
        ((40, 1024), (256, 1024), (1024,)), ((256, 1024), (256, 1024), (1024,)), ((256, 1024), (256, 1024), (1024,))]
    assert weights.linear_weight.shape == (256, 256) and weights.linear_bias.shape == (256,)
    assert weights.ref.digest == hash_file(weights_file())
    assert "resemblyzer 0.1.4" in weights.ref.name
    import sys
    assert "torch" not in sys.modules


def _legacy_file(checkpoint: bytes, keys: list[str], storages: list[bytes]) -> io.BytesIO:
    out = io.BytesIO()
    for head in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
        pickle.dump(head, out, protocol=2)
    out.write(checkpoint)
    pickle.dump(keys, out, protocol=2)
    for raw in storages:
        out.write(struct.pack("<q", len(raw) // 4) + raw)
    out.seek(0)
    return out


def test_a_checkpoint_naming_any_other_global_is_refused() -> None:
    # A pickle whose model_state holds os.system: the reader must refuse it, never call it.
    evil = b"\x80\x02}q\x00X\x0b\x00\x00\x00model_stateq\x01cos\nsystem\nq\x02X\x04\x00\x00\x00trueq\x03\x85q\x04Rq\x05s."
    with pytest.raises(ValueError, match="os.system"):
        read_checkpoint(_legacy_file(evil, [], []))


def _text(value: str) -> bytes:
    return b"X" + struct.pack("<I", len(value)) + value.encode()


def test_a_tensor_is_rebuilt_from_its_storage_with_offset_size_and_stride() -> None:
    # The pickle torch writes for {"model_state": {"w": tensor}}, opcode by opcode (no torch here):
    # _rebuild_tensor_v2(storage k1 (6 floats), offset 1, size (2, 2), stride (1, 2), False, {})
    storage = b"(" + _text("storage") + b"ctorch\nFloatStorage\n" + _text("k1") + _text("cpu") + b"K\x06Nt" + b"Q"
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage + b"K\x01(K\x02K\x02t(K\x01K\x02t\x89}tR")
    checkpoint = b"\x80\x02}" + _text("model_state") + b"}" + _text("w") + tensor + b"ss."
    state = read_checkpoint(_legacy_file(checkpoint, ["k1"], [np.arange(6, dtype="<f4").tobytes()]))
    assert state["w"].tolist() == [[1.0, 3.0], [2.0, 4.0]]


# -- the encoder against resemblyzer with torch -------------------------------------------------------

@needs_encoder
def test_the_numpy_encoder_gives_resemblyzers_embeddings_on_jfk() -> None:
    if not (CORPUS / "audio" / "jfk.flac").is_file():
        pytest.skip("../shared/corpus is absent")
    from tests.test_audio import pcm16

    reference = json.loads((DATA / "resemblyzer_jfk.json").read_text())
    wav = pcm16(CORPUS / "audio" / "jfk.flac").astype(np.float32) / 32768
    # resemblyzer's embed_utterance at its default rate (1.3 a second: a step of 77 frames), its tail padded
    step, count = 77, int(np.ceil((wav.size + 1) / 160))
    starts = list(range(0, max(1, count - 160 + step + 1), step))
    if (wav.size - starts[-1] * 160) / (160 * 160) < 0.75 and len(starts) > 1:
        starts = starts[:-1]
    padded = np.pad(wav, (0, max(0, (starts[-1] + 160) * 160 - wav.size)))
    mel = speaker_encoder.mel_spectrogram(padded)
    partials = speaker_encoder.embed(encoder_weights(), np.stack([mel[s:s + 160] for s in starts]))
    assert len(starts) == reference["partial_count"]
    assert [s * 160 for s in starts[:3]] == reference["partial_sample_starts"]
    np.testing.assert_allclose(partials[:3], np.array(reference["partials"]), atol=2e-6)
    utterance = partials.mean(axis=0)
    utterance /= np.linalg.norm(utterance)
    np.testing.assert_allclose(utterance, np.array(reference["utterance"]), atol=2e-6)


# -- clustering and splitting on known embeddings ---------------------------------------------------

def _voices(seed: int = 0, count: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((count, 256))
    return centres / np.linalg.norm(centres, axis=1, keepdims=True)


def _partials(turns: list[tuple[int, int, int]], voices: np.ndarray, seed: int = 1) -> tuple[np.ndarray, ...]:
    """Partials every 400 ms over each (voice, start_ms, end_ms), each its voice plus a little noise."""
    rng = np.random.default_rng(seed)
    rows, starts, ends = [], [], []
    for voice, start, end in turns:
        for at in range(start, end - 400, 400):
            vector = voices[voice] + 0.25 * rng.standard_normal(256) / 16
            rows.append(vector / np.linalg.norm(vector))
            starts.append(at)
            ends.append(min(at + 1600, end))
    return np.array(rows, np.float32), np.array(starts), np.array(ends)


def _segment(start: int, end: int, words: list[tuple[int, int, str]]) -> AudioSegment:
    return AudioSegment(start_ms=start, end_ms=end, text="".join(w for _, _, w in words).strip(), confidence=0.9,
                        avg_logprob=-0.1, no_speech_prob=0.01,
                        words=[{"start_ms": a, "end_ms": b, "word": w, "probability": 0.9} for a, b, w in words])


def _words(start: int, end: int, step: int = 500) -> list[tuple[int, int, str]]:
    return [(t, min(t + step - 50, end), f" w{t}") for t in range(start, end - 100, step)]


def test_speakers_are_named_in_the_order_they_first_speak() -> None:
    voices = _voices()
    turns = [(2, 0, 6000), (0, 6500, 12000), (2, 12500, 18000), (1, 18500, 25000)]
    segments = [_segment(s, e, _words(s, e)) for _, s, e in turns]
    labelled, count = label_segments(segments, *_partials(turns, voices), None)
    assert count == 3
    assert [s.speaker for s in labelled] == ["S1", "S2", "S1", "S3"]


def test_a_turn_change_inside_a_segment_splits_it_at_the_word_boundary() -> None:
    voices = _voices()
    turns = [(0, 0, 8000), (1, 8000, 16000)]
    words = _words(0, 16000)
    labelled, count = label_segments([_segment(0, 16000, words)], *_partials(turns, voices), None)
    assert count == 2
    assert [(s.speaker, s.start_ms, s.end_ms) for s in labelled] == [("S1", 0, 8000), ("S2", 8000, 16000)]
    assert labelled[0].text == "".join(w for a, _, w in words if a < 8000).strip()
    assert [w.start_ms for s in labelled for w in s.words] == [a for a, _, _ in words]


def test_a_given_number_of_speakers_is_kept_to() -> None:
    voices = _voices(count=3)
    turns = [(0, 0, 6000), (1, 6500, 12000), (2, 12500, 18000), (0, 18500, 24000)]
    segments = [_segment(s, e, _words(s, e)) for _, s, e in turns]
    arrays = _partials(turns, voices)
    assert label_segments(segments, *arrays, 2)[1] == 2
    assert [s.speaker for s in label_segments(segments, *arrays, 3)[0]] == ["S1", "S2", "S3", "S1"]


def test_a_short_run_of_words_is_not_a_turn_of_its_own() -> None:
    voices = _voices()
    # 300 ms of the other voice inside one speaker's segment: too short to be a turn
    turns = [(0, 0, 5000), (1, 5000, 5300), (0, 5300, 10000)]
    rows, starts, ends = _partials([(0, 0, 10000)], voices)
    inside = (starts >= 4800) & (starts < 5300)
    rows[inside] = voices[1]
    labelled, _ = label_segments([_segment(0, 10000, _words(0, 10000))], rows, starts, ends, None)
    assert [s.speaker for s in labelled] == ["S1"] and MIN_TURN_MS > 300
    del turns


def test_a_short_reply_of_whole_sentences_is_a_turn_of_its_own() -> None:
    from mediafleet.workers.audio.speaker_turns import _smooth

    # "...was placed." by one voice, then "Excellent." (500 ms) by the other, in one segment
    words = [(0, 400, " Every"), (500, 900, " box"), (1000, 1400, " was"), (1500, 1900, " placed."),
             (2000, 2500, " Excellent.")]
    segment = _segment(0, 2500, words)
    assert _smooth(segment.words, [0, 0, 0, 0, 1]) == [0, 0, 0, 0, 1]
    # the same 500 ms inside a sentence is no turn: it takes its neighbour's speaker
    words[3] = (1500, 1900, " placed")
    assert _smooth(_segment(0, 2500, words).words, [0, 0, 0, 0, 1]) == [0, 0, 0, 0, 0]
    assert _smooth(segment.words, [0, 0, 1, 0, 0]) == [0, 0, 0, 0, 0]


def test_no_segments_no_speakers_and_no_voices_one_speaker() -> None:
    assert label_segments([], np.zeros((0, 256), np.float32), np.zeros(0, int), np.zeros(0, int), None) == ([], 0)
    labelled, count = label_segments([_segment(0, 1000, [(0, 900, " hi")])], np.zeros((0, 256), np.float32),
                                     np.zeros(0, int), np.zeros(0, int), None)
    assert count == 1 and labelled[0].speaker == "S1"


# -- the contract --------------------------------------------------------------------------------------

def _result(labels: list[str | None], count: int | None) -> dict:
    segments = [{"start_ms": i * 1000, "end_ms": i * 1000 + 500, "text": "hi", "confidence": 0.5, "avg_logprob": -0.7,
                 "no_speech_prob": 0.1, "speaker": label} for i, label in enumerate(labels)]
    return {"duration_ms": 10000, "speech_ms": 1000, "language": "en", "language_probability": 1.0,
            "source": {"container": "wav", "codec": "pcm_s16le", "sample_rate": 16000, "channels": 1,
                       "declared_duration_ms": 10000, "from_video": False},
            "segments": segments, "speaker_count": count,
            "producer": {"engine": "x", "engine_version": "1", "extractor": "x", "extractor_version": "1"}}


@pytest.mark.parametrize(("labels", "count", "valid"), [
    (["S1", "S2", "S1"], 2, True),
    ([None, None], None, True),
    ([], 0, True),
    (["S2", "S1"], 2, False),  # not in the order of first speech
    (["S1", "S3"], 2, False),  # a label skipped
    (["S1", "S2"], 3, False),  # a count the labels do not give
    (["S1", None], 1, False),  # labels on some segments only
    (["S1"], None, False),
    (["speaker 1"], 1, False),
])
def test_the_result_checks_its_speakers(labels: list[str | None], count: int | None, valid: bool) -> None:
    if valid:
        AudioResult.model_validate(_result(labels, count))
    else:
        with pytest.raises(ValueError):
            AudioResult.model_validate(_result(labels, count))


def test_the_speakers_option() -> None:
    assert AudioOptions().speakers is None and AudioOptions(speakers=0).speakers == 0
    for bad in (-1, 17, 2.0, "2"):
        with pytest.raises(ValueError):
            AudioOptions(speakers=bad)


def test_the_label_is_a_locus_property_and_in_the_callers_segments() -> None:
    result = AudioResult.model_validate(_result(["S1", "S2"], 2))
    drafts = audio_loci(result, "doc")
    assert [d.properties["speaker"] for d in drafts] == ["S1", "S2"]
    assert {d.address.kind for d in drafts} == {"audio_range"}
    unlabelled = audio_loci(AudioResult.model_validate(_result([None], None)), "doc")
    assert "speaker" not in unlabelled[0].properties


# -- whole recordings ---------------------------------------------------------------------------------

def _espeak(tmp_path: Path, voice: str, text: str, name: str) -> np.ndarray:
    from tests.test_audio import pcm16

    out = tmp_path / f"{name}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(out), text], check=True)
    return pcm16(out)


@pytest.fixture(scope="module")
def dialogue(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, int, int]]]:
    """A two-voice dialogue (espeak-ng: a Scottish male and a US female voice, 0.62 apart in cosine), with its turns in ms."""
    from tests.test_audio import write_wav

    tmp = tmp_path_factory.mktemp("dialogue")
    lines = [("en-gb-scotland+m7", "Good morning. Did the shipment arrive at the warehouse yesterday afternoon?"),
             ("en-us+f2", "It did. Every box was counted and the invoice matches the order we placed."),
             ("en-gb-scotland+m7", "Excellent. Then please send the report to the finance team before Friday."),
             ("en-us+f2", "I will send it today, together with the photographs of the damaged pallets.")]
    pieces, turns, at = [np.zeros(8000, np.int16)], [], 8000
    for index, (voice, text) in enumerate(lines):
        samples = _espeak(tmp, voice, text, f"line{index}")
        pieces += [samples, np.zeros(9600, np.int16)]
        turns.append((voice, at * 1000 // 16000, (at + samples.size) * 1000 // 16000))
        at += samples.size + 9600
    return write_wav(tmp / "dialogue.wav", np.concatenate(pieces)), turns


@needs_encoder
@pytest.mark.slow
def test_a_dialogue_of_two_voices_is_labelled_turn_by_turn(dialogue: tuple[Path, list]) -> None:
    from tests.test_audio import transcribe

    path, turns = dialogue
    result = transcribe(path)
    assert result.speaker_count == 2
    truth = {"en-gb-scotland+m7": "S1", "en-us+f2": "S2"}
    for segment in result.segments:
        middle = (segment.start_ms + segment.end_ms) // 2
        voice = next(v for v, a, b in turns if a - 300 <= middle <= b + 300)
        assert segment.speaker == truth[voice], (segment.text, segment.speaker)
    assert [m.name for m in result.producer.models][1].startswith("resemblyzer voice encoder")
    assert result.producer.models[1].digest == hash_file(weights_file())
    given = transcribe(path, speakers=2)
    assert [s.speaker for s in given.segments] == [s.speaker for s in result.segments]
    off = transcribe(path, speakers=0)
    assert off.speaker_count is None and all(s.speaker is None for s in off.segments)
    assert len(off.producer.models) == 1


@needs_encoder
@pytest.mark.slow
def test_the_in_process_bundle_carries_the_speakers_on_valid_loci(dialogue: tuple[Path, list], tmp_path: Path) -> None:
    from mediafleet import Dispatcher, Settings
    from tests.helpers import assert_engine_valid

    path, _ = dialogue
    bundle = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(path).bundle()
    assert bundle.status == "ok"
    assert assert_engine_valid(bundle) >= 4
    speakers = [n.properties.get("speaker") for n in bundle.nodes if n.node_type == "Evidence"]
    assert set(speakers) == {"S1", "S2"}
    assert {s["speaker"] for s in audio_shape(bundle, {})["segments"]} == {"S1", "S2"}
