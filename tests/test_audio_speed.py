"""What the audio path does to save time or memory changes no number: known answers against the plain way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from faster_whisper import decode_audio
from faster_whisper.audio import pad_or_trim

from mediafleet.workers.audio import transcribe as transcribe_module
from mediafleet.workers.audio.decode import open_audio
from mediafleet.workers.audio.model import whisper
from tests.test_audio import DATA, LIMITS, pcm16, transcribe, write_wav


@pytest.mark.parametrize("name", ["speech.mp3", "speech.flac", "speech.opus", "speech.m4a", "speech.aac"])
def test_decoding_in_groups_gives_faster_whispers_samples(name: str) -> None:
    """Frames are resampled in groups, not one by one: the samples are still decode_audio's, to the bit."""
    with open_audio(DATA / name, LIMITS) as audio:
        ours = np.concatenate(list(audio.blocks(block_samples=16000)))
    theirs = decode_audio(str(DATA / name))
    assert ours.dtype == theirs.dtype == np.float32
    assert np.array_equal(ours, theirs)


def test_encoding_one_window_at_a_time_gives_the_batch_encoding() -> None:
    engine = whisper()
    if engine.device != "cpu":
        pytest.skip("the encoder runs window by window on the CPU only")
    speech = pcm16(DATA / "speech.flac").astype(np.float32) / 32768.0
    extractor = engine.model.feature_extractor
    windows = [speech, speech[::-1].copy()]
    features = np.stack([pad_or_trim(extractor(w)[..., :-1]) for w in windows])  # as the pipeline makes them
    batched = np.asarray(engine.model.encode(features))
    one_by_one = np.asarray(transcribe_module._WindowByWindow(engine.model).encode(features))
    assert one_by_one.shape == batched.shape == (2, 1500, batched.shape[2])
    assert np.array_equal(one_by_one, batched)


def test_a_transcription_of_several_batches_is_what_the_batched_encoder_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eighty seconds (three windows, two batches): the same result, segment for segment, word for word."""
    speech = pcm16(DATA / "speech.flac")
    pause = np.zeros(16000 // 2, dtype=np.int16)
    path = write_wav(tmp_path / "long.wav", np.concatenate([speech, pause] * 8))
    ours = transcribe(path)
    monkeypatch.setattr(transcribe_module, "_WindowByWindow", lambda model: model)
    plain = transcribe(path)
    assert len(ours.segments) >= 8
    assert ours.model_dump() == plain.model_dump()
