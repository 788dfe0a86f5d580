"""Where the speech is, found as the samples stream past, and speech packed into 30-second windows.

:class:`SpeechDetector` is faster-whisper's Silero VAD (``faster_whisper.vad``: the same ONNX model,
the same 512-sample windows with 64 samples of context, the same thresholds, splitting, minimum
silence and padding rules) rearranged to run on a stream: the model's recurrent state and context
are carried from one block to the next, and a speech region is handed on as soon as no later
audio can change it. Given the same samples it finds exactly the regions
``get_speech_timestamps`` finds on the whole array, but holds only the audio it still needs.

:class:`WindowPacker` is ``collect_chunks``: consecutive speech regions are joined (silence between
them left out) into windows of at most 30 s, the input Whisper decodes in one pass; each window
keeps the regions it is made of, to map its times back onto the recording.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["FixedWindows", "Samples", "Speech", "SpeechDetector", "Window", "WindowPacker"]

_WINDOW = 512
_CONTEXT = 64


@dataclass
class Speech:
    """A speech region ``[start, end)`` in samples of the recording."""

    start: int
    end: int


@dataclass
class Window:
    """Speech regions joined into one model input: ``audio`` is their samples, back to back."""

    regions: list[Speech]
    audio: np.ndarray

    @property
    def start(self) -> int:
        return self.regions[0].start

    @property
    def end(self) -> int:
        return self.regions[-1].end

    def original(self, t: float, sample_rate: int) -> float:
        """A time in this window's audio (seconds) -> seconds of the recording.

        The region holding ``t`` is found as ``SpeechTimestampsMap`` finds it; times past the
        window's end stay in its last region.
        """
        at = t * sample_rate
        before = 0
        for region in self.regions:
            length = region.end - region.start
            if at < before + length or region is self.regions[-1]:
                return (region.start + (at - before)) / sample_rate
            before += length
        raise AssertionError("a window has at least one region")


class Samples:
    """The recording's samples from ``start`` (an absolute sample index) to ``end``; older ones dropped."""

    def __init__(self) -> None:
        self.start = 0
        self._data = np.zeros(0, dtype=np.float32)

    @property
    def end(self) -> int:
        return self.start + self._data.shape[0]

    def append(self, block: np.ndarray) -> None:
        self._data = np.concatenate([self._data, block]) if self._data.shape[0] else block

    def take(self, start: int, end: int) -> np.ndarray:
        if start < self.start or end > self.end:
            raise AssertionError("samples asked for are no longer (or not yet) held")
        return self._data[start - self.start : end - self.start]

    def drop_before(self, position: int) -> None:
        if position > self.start:
            cut = min(position, self.end) - self.start
            self._data = self._data[cut:].copy()
            self.start += cut


@dataclass
class _Rules:
    """faster-whisper ``VadOptions`` turned into sample counts, as ``get_speech_timestamps`` does."""

    threshold: float
    neg_threshold: float
    min_speech: float
    pad: float
    max_speech: float
    min_silence: float
    min_silence_at_max: float

    @classmethod
    def of(cls, options: Any, sample_rate: int) -> _Rules:
        pad = sample_rate * options.speech_pad_ms / 1000
        neg = options.neg_threshold
        return cls(
            threshold=options.threshold,
            neg_threshold=max(options.threshold - 0.15, 0.01) if neg is None else neg,
            min_speech=sample_rate * options.min_speech_duration_ms / 1000,
            pad=pad,
            max_speech=sample_rate * options.max_speech_duration_s - _WINDOW - 2 * pad,
            min_silence=sample_rate * options.min_silence_duration_ms / 1000,
            min_silence_at_max=sample_rate * 98 / 1000,
        )


@dataclass
class SpeechDetector:
    """Silero VAD over a stream of 16 kHz float32 samples.

    ``feed`` each block in order, then ``finish`` with the total sample count; both return the
    speech regions that became final, in order. :attr:`keep_from` is the earliest sample a region
    not yet returned may start at.
    """

    options: Any  # faster_whisper.vad.VadOptions
    sample_rate: int = 16000
    _rules: _Rules = field(init=False)
    _session: Any = field(init=False)
    _h: np.ndarray = field(init=False)
    _c: np.ndarray = field(init=False)
    _context: np.ndarray = field(init=False)
    _rest: np.ndarray = field(init=False)
    _index: int = 0
    _triggered: bool = False
    _current: dict[str, int] = field(default_factory=dict)
    _temp_end: int = 0
    _prev_end: int = 0
    _next_start: int = 0
    _closed: list[Speech] = field(default_factory=list)  # raw regions, not yet padded
    _emitted: int = 0
    _pad_next_start: bool = False

    def __post_init__(self) -> None:
        from faster_whisper.vad import get_vad_model

        self._rules = _Rules.of(self.options, self.sample_rate)
        self._session = get_vad_model().session
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT, dtype=np.float32)
        self._rest = np.zeros(0, dtype=np.float32)

    @property
    def keep_from(self) -> int:
        starts = [s.start for s in self._closed]
        if self._triggered and "start" in self._current:
            starts.append(self._current["start"])
        starts.append(self._index * _WINDOW)
        return max(0, int(min(starts) - self._rules.pad))

    def feed(self, samples: np.ndarray) -> list[Speech]:
        data = np.concatenate([self._rest, samples]) if self._rest.shape[0] else samples
        whole = data.shape[0] // _WINDOW * _WINDOW
        self._rest = data[whole:].copy()
        return self._windows(data[:whole])

    def finish(self, length: int) -> list[Speech]:
        """The last regions, once the recording's ``length`` (in samples) is known."""
        # faster-whisper pads the audio up to the next multiple of 512 (a whole window when even).
        last = np.zeros(_WINDOW, dtype=np.float32)
        last[: self._rest.shape[0]] = self._rest
        out = self._windows(last)
        if self._current and length - self._current["start"] > self._rules.min_speech:
            self._close(Speech(self._current["start"], length), out)
        self._current = {}
        self._triggered = False
        while self._closed:
            out.append(self._finalise(length))
        return out

    def _probabilities(self, windows: np.ndarray) -> np.ndarray:
        context = np.concatenate([self._context[None, :], windows[:-1, -_CONTEXT:]])
        batch = np.concatenate([context, windows], axis=1)
        probs, self._h, self._c = self._session.run(None, {"input": batch, "h": self._h, "c": self._c})
        self._context = windows[-1, -_CONTEXT:].copy()
        return np.asarray(probs).reshape(-1)

    def _windows(self, data: np.ndarray) -> list[Speech]:
        out: list[Speech] = []
        if not data.shape[0]:
            return out
        for prob in self._probabilities(data.reshape(-1, _WINDOW)):
            self._step(float(prob), out)
            self._index += 1
        return out

    def _step(self, prob: float, out: list[Speech]) -> None:
        """One window of ``get_speech_timestamps``'s loop (same branches, same order)."""
        r, i = self._rules, self._index
        pos = _WINDOW * i
        if prob >= r.threshold and self._temp_end:
            self._temp_end = 0
            if self._next_start < self._prev_end:
                self._next_start = pos
        if prob >= r.threshold and not self._triggered:
            self._triggered = True
            self._current = {"start": pos}
            return
        if self._triggered and pos - self._current["start"] > r.max_speech:
            if self._prev_end:
                self._close(Speech(self._current["start"], self._prev_end), out)
                self._current = {}
                if self._next_start < self._prev_end:
                    self._triggered = False
                else:
                    self._current = {"start": self._next_start}
                self._prev_end = self._next_start = self._temp_end = 0
            else:
                self._close(Speech(self._current["start"], pos), out)
                self._current = {}
                self._prev_end = self._next_start = self._temp_end = 0
                self._triggered = False
                self._close_if_far(out)
                return
        if prob < r.neg_threshold and self._triggered:
            if not self._temp_end:
                self._temp_end = pos
            if pos - self._temp_end > r.min_silence_at_max:
                self._prev_end = self._temp_end
            if pos - self._temp_end < r.min_silence:
                return
            if self._temp_end - self._current["start"] > r.min_speech:
                self._close(Speech(self._current["start"], self._temp_end), out)
            self._current = {}
            self._prev_end = self._next_start = self._temp_end = 0
            self._triggered = False
        self._close_if_far(out)

    def _close(self, raw: Speech, out: list[Speech]) -> None:
        """A raw region is complete; the one before it can now be padded and handed on."""
        if self._pad_next_start:
            raw.start = int(max(0, raw.start - self._rules.pad))
            self._pad_next_start = False
        self._closed.append(raw)
        if len(self._closed) > 1:
            out.append(self._finalise(None))

    def _close_if_far(self, out: list[Speech]) -> None:
        """Silence now, and far enough from the last region that any later one gets full padding."""
        if self._triggered or not self._closed:
            return
        if (self._index + 1) * _WINDOW - self._closed[-1].end >= 2 * self._rules.pad:
            out.append(self._finalise(None))
            self._pad_next_start = True

    def _finalise(self, length: int | None) -> Speech:
        """Pad the oldest closed region as ``get_speech_timestamps``'s last loop does."""
        pad = self._rules.pad
        speech = self._closed.pop(0)
        if self._emitted == 0:
            speech.start = int(max(0, speech.start - pad))
        following = self._closed[0] if self._closed else None
        if following is not None:
            gap = following.start - speech.end
            if gap < 2 * pad:
                speech.end += int(gap // 2)
                following.start = int(max(0, following.start - gap // 2))
            else:
                speech.end = int(speech.end + pad)
                following.start = int(max(0, following.start - pad))
        elif length is not None:
            speech.end = int(min(length, speech.end + pad))
        else:  # finalised early: silence is known to last at least 2 * pad after it
            speech.end = int(speech.end + pad)
        self._emitted += 1
        return speech


@dataclass
class FixedWindows:
    """The recording cut into consecutive windows of ``size`` samples (no VAD): same interface."""

    size: int
    _next: int = 0
    _fed: int = 0

    @property
    def keep_from(self) -> int:
        return self._next

    def feed(self, samples: np.ndarray) -> list[Speech]:
        self._fed += samples.shape[0]
        return self._until(self._fed)

    def _until(self, end: int) -> list[Speech]:
        out = []
        while self._next + self.size <= end:
            out.append(Speech(self._next, self._next + self.size))
            self._next += self.size
        return out

    def finish(self, length: int) -> list[Speech]:
        out = self._until(length)
        if length > self._next:
            out.append(Speech(self._next, length))
            self._next = length
        return out


@dataclass
class WindowPacker:
    """Joins consecutive regions into windows of at most ``max_samples`` (``collect_chunks``)."""

    max_samples: int
    _regions: list[Speech] = field(default_factory=list)
    _audio: list[np.ndarray] = field(default_factory=list)
    _length: int = 0

    @property
    def pending_from(self) -> int | None:
        return self._regions[0].start if self._regions else None

    def add(self, region: Speech, audio: np.ndarray) -> Iterator[Window]:
        size = region.end - region.start
        if self._regions and self._length + size > self.max_samples:
            yield self._flush()
        self._regions.append(region)
        self._audio.append(np.array(audio, dtype=np.float32, copy=True))
        self._length += size

    def finish(self) -> Iterator[Window]:
        if self._regions:
            yield self._flush()

    def _flush(self) -> Window:
        window = Window(regions=self._regions, audio=np.concatenate(self._audio))
        self._regions, self._audio, self._length = [], [], 0
        return window
