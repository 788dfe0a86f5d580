"""Segments end at sentences, not at abbreviations: the rule's table, then real speech made by espeak-ng.

The speech is synthesised at run time (espeak-ng 1.51, as tests/data/README.md describes for the
committed samples); without espeak-ng those tests are skipped.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks.harness import words
from tests.test_audio import assert_invariants, pcm16, transcribe, write_wav
from mediafleet.workers.audio import transcribe as transcribe_module
from mediafleet.workers.audio import vad
from mediafleet.workers.audio.decode import SAMPLE_RATE
from mediafleet.workers.audio.sentences import abbreviation, ends_sentence

DASHWOOD = "And Mr. John Dashwood had then leisure to consider how much there might be prudently in his power to do for them."
MORE = "Dr. Smith met Mrs. Jones on Elm Street at five. Then they all went home."

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@pytest.mark.parametrize(
    ("word", "following", "ends"),
    [
        (" them.", None, True),
        (" them.", " Then", True),
        (" Friday.", " Thank", True),
        (" why?", " Because", True),
        (" now!", None, True),
        (" so…", " Then", True),
        (' said."', " Then", True),
        (" Mr.", " John", False),
        (" Mrs.", " Jones", False),
        (" Dr.", " Smith", False),
        (" St.", " Paul's", False),
        (" Prof.", " Ada", False),
        (" e.g.", " Paris", False),
        (" i.e.", " the", False),
        (" (e.g.", " Paris", False),
        (" vs.", " Them", False),
        (" etc.", " and", False),
        (" etc.", " The", True),
        (" etc.", None, True),
        (" a.m.", " on", False),
        (" p.m.", " We", True),
        (" No.", " 5", False),
        (" no.", " Then", True),
        (" 3.", " 5", False),
        (" J.", " R.", False),
        (" I.", " Then", True),
        (" Inc.", " said", False),
        (" home", " And", False),
        (" home,", " and", False),
        (" 3.5", " percent", False),
    ],
)
def test_which_words_end_a_sentence(word: str, following: str | None, ends: bool) -> None:
    assert ends_sentence(word, following) is ends


@pytest.mark.parametrize(
    ("word", "following", "is_abbreviation"),
    [(" Mr.", " John", True), (" e.g.", " Paris", True), (" etc.", " and", True), (" etc.", " The", False),
     (" them.", " Then", False), (" so...", " Then", False), (" why?", " Because", False), (" home", " And", False)],
)
def test_which_full_stops_are_abbreviations(word: str, following: str, is_abbreviation: bool) -> None:
    assert abbreviation(word, following) is is_abbreviation


def _say(text: str, folder: Path, name: str) -> np.ndarray:
    wav = folder / f"{name}.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "140", "-w", str(wav), text], check=True, capture_output=True)
    return pcm16(wav)


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SAMPLE_RATE), dtype=np.int16)


def _segment_with(result, text: str):
    """The one segment whose words contain ``text``'s words in a row."""
    wanted = words(text)
    found = [s for s in result.segments
             if any(words(s.text)[i:i + len(wanted)] == wanted for i in range(len(words(s.text))))]
    assert len(found) == 1, [s.text for s in result.segments]
    return found[0]


@pytest.mark.slow
@needs_espeak
def test_mr_does_not_end_a_segment(tmp_path: Path) -> None:
    speech = _say(f"{DASHWOOD} {MORE}", tmp_path, "dashwood")
    path = write_wav(tmp_path / "dashwood.wav", np.concatenate([_silence(0.5), speech, _silence(0.5)]))
    result = transcribe(path)
    first = _segment_with(result, "And Mr. John")
    assert words(first.text)[-3:] == words("do for them.")  # it ends at the sentence's end
    assert first.start_ms < 1000
    _segment_with(result, "Dr. Smith")
    _segment_with(result, "Mrs. Jones")
    for segment in result.segments:
        last = segment.words[-1].word
        assert ends_sentence(last), segment.text
        assert not segment.text.endswith(("Mr.", "Mrs.", "Dr.", "St.", "e.g.", "i.e.")), segment.text
    assert_invariants(result)


@pytest.mark.slow
@needs_espeak
def test_a_sentence_cut_between_two_windows_is_one_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pause after "Mr." puts "John" in the next window: the window's first segment continues."""
    first, rest = DASHWOOD.split(" John ", 1)
    audio = np.concatenate([_silence(0.5), _say(first, tmp_path, "a"), _silence(0.6),
                            _say(f"John {rest}", tmp_path, "b"), _silence(0.5)])
    path = write_wav(tmp_path / "two-windows.wav", audio)
    windows: list[tuple[int, int]] = []

    class OneSecond(vad.WindowPacker):
        def _flush(self) -> vad.Window:
            window = super()._flush()
            windows.append((window.start, window.end))
            return window

    monkeypatch.setattr(transcribe_module, "WindowPacker", lambda max_samples: OneSecond(SAMPLE_RATE))
    result = transcribe(path)
    assert len(windows) == 2  # "And Mr." and "John Dashwood ..." were decoded apart
    (segment,) = result.segments
    assert words(segment.text)[:3] == words("And Mr. John")
    assert windows[0][1] * 1000 // SAMPLE_RATE <= segment.words[2].start_ms  # "John" came from the second
    assert_invariants(result)


@needs_espeak
def test_a_long_pause_after_mr_does_not_end_the_segment(tmp_path: Path) -> None:
    """1.5 s of silence after "Mr." (a pause that would otherwise start a segment): still one."""
    first, rest = DASHWOOD.split(" John ", 1)
    audio = np.concatenate([_silence(0.5), _say(first, tmp_path, "a"), _silence(1.5),
                            _say(f"John {rest}", tmp_path, "b"), _silence(0.5)])
    result = transcribe(write_wav(tmp_path / "pause.wav", audio))
    (segment,) = result.segments
    assert words(segment.text)[:3] == words("And Mr. John")
    mr, john = segment.words[1], segment.words[2]
    assert john.start_ms - mr.end_ms >= 1000  # the pause is there, and did not cut
    assert_invariants(result)


@pytest.mark.slow
@needs_espeak
def test_without_word_times_a_window_ending_at_mr_joins_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No word times to cut at: the window that stops at "Mr." and the next are one segment."""
    first, rest = DASHWOOD.split(" John ", 1)
    audio = np.concatenate([_silence(0.5), _say(first, tmp_path, "a"), _silence(0.6),
                            _say(f"John {rest}", tmp_path, "b"), _silence(0.6), _say(MORE, tmp_path, "c"),
                            _silence(0.5)])
    path = write_wav(tmp_path / "three-windows.wav", audio)
    windows: list[tuple[int, int]] = []

    class OneSecond(vad.WindowPacker):
        def _flush(self) -> vad.Window:
            window = super()._flush()
            windows.append((window.start * 1000 // SAMPLE_RATE, window.end * 1000 // SAMPLE_RATE))
            return window

    monkeypatch.setattr(transcribe_module, "WindowPacker", lambda max_samples: OneSecond(SAMPLE_RATE))
    result = transcribe(path, word_timestamps=False)
    assert len(windows) >= 3  # "And Mr.", "John Dashwood ...", then the rest
    joined, *others = result.segments
    assert words(joined.text)[:3] == words("And Mr. John")
    assert words(joined.text)[-3:] == words("do for them.")
    assert joined.words is None
    assert (joined.start_ms, joined.end_ms) == (windows[0][0], windows[1][1])  # both windows' span
    assert others  # a window that ended a sentence was not joined
    for segment in result.segments:
        assert not abbreviation(f" {segment.text.split()[-1]}", None), segment.text
    assert_invariants(result)
