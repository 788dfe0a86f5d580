"""Speech to timed text: the ``transcribe_segments`` extractor.

One pass over the recording, in bounded memory: PyAV decodes a 30-second block
(:mod:`mediafleet.workers.audio.decode`), the streaming VAD finds the speech in it
(:class:`mediafleet.workers.audio.vad.SpeechDetector`), speech is packed into windows of at most 30 s
(:class:`mediafleet.workers.audio.vad.WindowPacker`), and every ``batch_size`` windows are decoded together
by faster-whisper's ``BatchedInferencePipeline`` (given the windows as ``clip_timestamps``, so it
decodes exactly them). What is held at any time is a block, the speech not yet packed and one
batch of windows, whatever the recording's length.

Segments: with word timestamps (the default) a window's text is cut into segments after each word
that ends a sentence (:func:`mediafleet.workers.audio.sentences.ends_sentence`: not after "Mr.", "e.g." or
"etc. and") and at pauses of a second or more (but never right after an abbreviation), and a
window's first segment continues the previous window's last when that one did not end a sentence
and no such pause parts them (up to ``_WINDOW_S`` long). Without word timestamps a window is one
segment, except that one whose text ends at an abbreviation joins the next window's (so no segment
ends at "Mr." either way; alignment, ~10% of the CPU time, is then never run).
Times come back onto the recording through the window's speech regions, in integer milliseconds.
Rules that keep every segment a valid AudioRange (documented in the README):

* a word's times are kept inside the speech its window was decoded from;
* a segment starts no earlier than the previous one ends;
* a segment left with no duration by these rules is merged into the segment before it (or, when
  it is its window's first, given its window's span);
* a segment with no letter or digit in its text (Whisper's "..." on silence) is dropped.

Speakers (unless ``speakers=0``): each decoded window's speech is also embedded by the speaker
encoder (:class:`mediafleet.workers.audio.speaker_turns.SpeakerTrack`: embeddings and times are kept,
not audio), and when the recording ends the segments are labelled and split at turn changes
(:func:`mediafleet.workers.audio.speaker_turns.label_segments`; docs/speakers.md).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mediafleet.contract.audio import AudioOptions, AudioResult, AudioSegment, AudioWord
from mediafleet.contract.common import Producer
from mediafleet.contract.errors import CapabilityRefused, ErrorCode, InternalError
from mediafleet.contract.manifest import Limits
from mediafleet.workers.audio.decode import SAMPLE_RATE, SAMPLES_PER_MS, open_audio
from mediafleet.workers.audio.memory import held_allocations
from mediafleet.workers.audio.model import Whisper, whisper
from mediafleet.workers.audio.sentences import abbreviation, ends_sentence
from mediafleet.workers.audio.speaker_encoder import PARTIAL_FRAMES, STEP_FRAMES
from mediafleet.workers.audio.speaker_turns import (
    MIN_SPEECH_PARTIALS,
    MIN_TURN_MS,
    THRESHOLD,
    SpeakerTrack,
    label_segments,
)
from mediafleet.workers.audio.speaker_weights import EncoderWeights, encoder_weights
from mediafleet.modalities.audio import SPEC
from mediafleet.workers.audio.vad import (
    FixedWindows,
    Samples,
    SpeechDetector,
    Window,
    WindowPacker,
)
from mediafleet.workers.sink import BlobSink
from mediafleet.modalities.spec import ProgressFn

__all__ = ["extract_audio"]

_WINDOW_S = 30  # Whisper's input length
_PAUSE_MS = 1000  # a pause this long between words starts a new segment
# The batched pipeline's VAD defaults (faster-whisper 1.2): windows never cut inside speech.
_VAD = {"max_speech_duration_s": _WINDOW_S, "min_silence_duration_ms": 160}


@dataclass
class _Piece:
    start_ms: int
    end_ms: int
    text: str
    avg_logprob: float
    no_speech_prob: float
    words: list[dict[str, Any]] | None

    def absorb(self, other: _Piece) -> None:
        self.end_ms = max(self.end_ms, other.end_ms)
        self.text = f"{self.text} {other.text}".strip() if other.text else self.text
        if self.words is not None and other.words is not None:
            self.words.extend(other.words)


@dataclass
class _Run:
    """The state of one transcription while blocks stream through it."""

    engine: Whisper
    options: AudioOptions
    total_s: int | None
    progress: ProgressFn | None
    samples: Samples = field(default_factory=Samples)
    regions: Any = None
    packer: WindowPacker = field(default_factory=lambda: WindowPacker(_WINDOW_S * SAMPLE_RATE))
    windows: list[Window] = field(default_factory=list)
    pieces: list[_Piece] = field(default_factory=list)
    language: str | None = None
    language_probability: float | None = None
    speech_samples: int = 0
    reported: int = -1
    pipeline: Any = None
    speakers: SpeakerTrack | None = None  # the voices of the decoded windows, when speakers are labelled

    def __post_init__(self) -> None:
        from faster_whisper import BatchedInferencePipeline
        from faster_whisper.vad import VadOptions

        model = self.engine.model
        self.pipeline = BatchedInferencePipeline(_WindowByWindow(model) if self.engine.device == "cpu" else model)
        if self.options.vad_filter:
            self.regions = SpeechDetector(VadOptions(**_VAD), SAMPLE_RATE)
        else:
            self.regions = FixedWindows(_WINDOW_S * SAMPLE_RATE)
        if self.options.language is not None:
            self.language, self.language_probability = self.options.language, 1.0
        elif not self.engine.multilingual:
            self.language, self.language_probability = "en", 1.0

    def feed(self, block: np.ndarray) -> None:
        self.samples.append(block)
        self._pack(self.regions.feed(block))
        self.samples.drop_before(self.regions.keep_from)
        self._report()

    def finish(self, length: int) -> None:
        self._pack(self.regions.finish(length))
        self.windows.extend(self.packer.finish())
        while self.windows:
            self._decode(self.windows[: self.engine.batch_size])
            del self.windows[: self.engine.batch_size]

    def _pack(self, regions: list[Any]) -> None:
        for region in regions:
            if region.end <= region.start:
                continue
            self.speech_samples += region.end - region.start
            self.windows.extend(self.packer.add(region, self.samples.take(region.start, region.end)))
        while len(self.windows) >= self.engine.batch_size:
            self._decode(self.windows[: self.engine.batch_size])
            del self.windows[: self.engine.batch_size]
            self._report()

    def _report(self) -> None:
        if self.progress is None:
            return
        done = min(
            self.regions.keep_from,
            self.samples.end,
            *(w.start for w in self.windows[:1]),
            *([self.packer.pending_from] if self.packer.pending_from is not None else []),
        )
        seconds = done // SAMPLE_RATE
        if seconds > self.reported:
            self.reported = seconds
            self.progress(seconds, self.total_s)

    def _decode(self, windows: list[Window]) -> None:
        """Transcribe a batch of windows and keep their segments, mapped onto the recording."""
        offsets, clips, at = [], [], 0
        for window in windows:
            size = window.audio.shape[0]
            offsets.append(at)
            # Half a sample in, so faster-whisper's int(seconds * rate) gives back these exact samples.
            clips.append({"start": (at + 0.5) / SAMPLE_RATE, "end": (at + size + 0.5) / SAMPLE_RATE})
            at += size
        audio = np.concatenate([w.audio for w in windows])
        segments, info = self.pipeline.transcribe(
            audio,
            language=self.language,
            clip_timestamps=clips,
            batch_size=len(windows),
            beam_size=self.options.beam_size,
            word_timestamps=self.options.word_timestamps,
            without_timestamps=True,
            vad_filter=False,
            log_progress=False,
        )
        decoded = list(segments)
        if len(decoded) != len(windows):
            raise InternalError("the model returned a different number of segments than windows it was given")
        if self.language is None and decoded:
            self.language, self.language_probability = info.language, float(info.language_probability)
        fps = self.engine.model.frames_per_second
        for window, offset, segment in zip(windows, offsets, decoded, strict=True):
            # faster-whisper times a clip's words from int(offset * frames per second) / fps.
            origin = int(offset / SAMPLE_RATE * fps) / fps
            self._keep(window, origin, segment)
            if self.speakers is not None:
                self.speakers.add(window)

    def _keep(self, window: Window, origin: float, segment: Any) -> None:
        low, high = window.start // SAMPLES_PER_MS, window.end // SAMPLES_PER_MS
        logprob, no_speech = min(float(segment.avg_logprob), 0.0), float(segment.no_speech_prob)
        if not self.options.word_timestamps or not segment.words:
            text = segment.text.strip()
            if _spoken(text) and high > low:
                piece = _Piece(low, high, text, logprob, no_speech, [] if self.options.word_timestamps else None)
                if self._after_abbreviation(piece):
                    self.pieces[-1].absorb(piece)  # the previous window stopped at "Mr." or "e.g."
                else:
                    self._add(piece)
            return
        words = []
        for word in segment.words:
            start = _clip(self._ms(window, word.start - origin), low, high)
            end = _clip(self._ms(window, word.end - origin), start, high)
            words.append({"start_ms": start, "end_ms": end, "word": word.word,
                          "probability": _clip(float(word.probability), 0.0, 1.0)})
        groups: list[list[dict[str, Any]]] = []
        for word in words:
            last = groups[-1][-1] if groups else None
            if (last is None or ends_sentence(last["word"], word["word"])
                    or (word["start_ms"] - last["end_ms"] >= _PAUSE_MS and not abbreviation(last["word"], word["word"]))):
                groups.append([])
            groups[-1].append(word)
        first = len(self.pieces)
        for group in groups:
            text = "".join(w["word"] for w in group).strip()
            if not _spoken(text):
                continue
            piece = _Piece(group[0]["start_ms"], group[-1]["end_ms"], text, logprob, no_speech, group)
            if piece.end_ms <= piece.start_ms and len(self.pieces) == first:
                piece.start_ms, piece.end_ms = low, high  # nothing before it in this window to join
            if len(self.pieces) == first and self._continues(piece):
                self.pieces[-1].absorb(piece)  # the previous window stopped inside a sentence
                continue
            self._add(piece)

    def _continues(self, piece: _Piece) -> bool:
        """Whether ``piece`` (a window's first) goes on with the sentence the last piece left open."""
        if not self.pieces or not piece.words:
            return False
        previous = self.pieces[-1]
        if not previous.words:
            return False
        last, first = previous.words[-1]["word"], piece.words[0]["word"]
        return (not ends_sentence(last, first)
                and (piece.start_ms - previous.end_ms < _PAUSE_MS or abbreviation(last, first))
                and piece.end_ms > previous.end_ms
                and piece.end_ms - previous.start_ms <= _WINDOW_S * 1000)

    def _after_abbreviation(self, piece: _Piece) -> bool:
        """Whether the last piece ends at an abbreviation ("Mr.", "e.g.") that ``piece`` (a window without
        word times) goes on from: then the two are one segment, however long."""
        if not self.pieces:
            return False
        last, first = self.pieces[-1].text.split()[-1:], piece.text.split()[:1]
        return bool(last and first) and abbreviation(f" {last[0]}", f" {first[0]}")

    @staticmethod
    def _ms(window: Window, seconds: float) -> int:
        return round(window.original(seconds, SAMPLE_RATE) * 1000)

    def _add(self, piece: _Piece) -> None:
        if self.pieces:
            previous = self.pieces[-1]
            piece.start_ms = max(piece.start_ms, previous.end_ms)
            if piece.end_ms <= piece.start_ms:
                previous.absorb(piece)
                return
        if piece.end_ms > piece.start_ms:
            self.pieces.append(piece)

    def segments(self) -> list[AudioSegment]:
        out = []
        for p in self.pieces:
            words = None
            if p.words is not None:
                words = [
                    AudioWord(
                        start_ms=_clip(w["start_ms"], p.start_ms, p.end_ms),
                        end_ms=_clip(w["end_ms"], _clip(w["start_ms"], p.start_ms, p.end_ms), p.end_ms),
                        word=w["word"],
                        probability=w["probability"],
                    )
                    for w in p.words
                ]
            out.append(AudioSegment(
                start_ms=p.start_ms, end_ms=p.end_ms, text=p.text, confidence=min(math.exp(p.avg_logprob), 1.0),
                avg_logprob=p.avg_logprob, no_speech_prob=_clip(p.no_speech_prob, 0.0, 1.0), words=words,
            ))
        return out


class _WindowByWindow:
    """The engine's ``WhisperModel`` with its encoder run one window at a time (CPU only).

    The batched pipeline encodes a whole batch in one call, and on the CPU each window in that call
    holds ~50 MB more while it runs (the attention of every head over 1,500 frames) for no gain:
    the encoder's CPU time per window is the same one at a time as two at a time, ~18% higher at
    eight (tiny.en, one thread), and its output is the same to the bit. So the encoder sees one
    window at a time (10 minutes: peak 446 -> 414 MB), while beam search and word alignment still
    see the whole batch (there batching does save time). Everything else is the model's own.
    """

    def __init__(self, model: Any) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def encode(self, features: np.ndarray) -> Any:
        import ctranslate2

        if features.ndim == 2 or features.shape[0] == 1:
            return self._model.encode(features)
        encoded = [np.asarray(self._model.encode(window[None])) for window in features]
        return ctranslate2.StorageView.from_array(np.concatenate(encoded))


def _spoken(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def _clip(value: Any, low: Any, high: Any) -> Any:
    return min(max(value, low), high)


def producer(options: AudioOptions, engine: Whisper, voices: EncoderWeights | None = None) -> Producer:
    import faster_whisper

    used: dict[str, Any] = options.model_dump(mode="json")
    used.update(
        device=engine.device,
        compute_type=engine.compute_type,
        threads=engine.threads,
        batch_size=engine.batch_size,
        window_s=_WINDOW_S,
        without_timestamps=True,
        temperature=0.0,
        vad_parameters=dict(_VAD) if options.vad_filter else None,
    )
    if voices is not None:
        used["speaker_turns"] = {
            "partial_frames": PARTIAL_FRAMES, "step_frames": STEP_FRAMES, "threshold": THRESHOLD,
            "min_speech_partials": MIN_SPEECH_PARTIALS, "min_turn_ms": MIN_TURN_MS,
        }
    return Producer(
        engine="faster-whisper",
        engine_version=faster_whisper.__version__,
        extractor=SPEC.extractor_name,
        extractor_version=SPEC.extractor_version,
        models=[engine.ref] + ([voices.ref] if voices is not None else []),
        options=used,
    )


def extract_audio(
    path: Path,
    options: AudioOptions,
    limits: Limits,
    progress: ProgressFn | None = None,
    sink: BlobSink | None = None,
) -> AudioResult:
    """Transcribe a recording (or a video's audio track) into timed segments: the audio spec's
    :class:`~mediafleet.modalities.spec.Extractor`.

    Args:
        path: a local, digest-verified media file (a recording, or a video for its soundtrack).
        limits: ``max_duration_s`` is checked from the container first.
        progress: called with (seconds of the recording done, its declared length in seconds or None).
        sink: unused (transcription derives no bytes).

    Returns:
        The segments in order with their words, the language, the durations and the producer.

    Raises:
        InputRejected: not decodable audio, no audio stream, damaged or truncated.
        LimitExceeded: longer than ``max_duration_s`` (``too_long``).
        CapabilityRefused: a language the configured model cannot transcribe.
        Unavailable: no model (Whisper's, or the speaker encoder's unless speakers=0), or it cannot
            be loaded here.
    """
    engine = whisper()
    if options.language not in (None, "en") and not engine.multilingual:
        raise CapabilityRefused("the configured Whisper model transcribes English only", code=ErrorCode.INVALID_REQUEST)
    voices = encoder_weights() if options.speakers != 0 else None
    held = held_allocations() if engine.device == "cpu" else contextlib.nullcontext()
    with held, open_audio(path, limits) as audio:
        declared = audio.declared_seconds
        run = _Run(engine, options, None if declared is None else math.ceil(declared), progress)
        run.speakers = SpeakerTrack(voices) if voices is not None else None
        for block in audio.blocks():
            run.feed(block)
        length = audio.decoded_samples
        run.finish(length)
        source = audio.source
    segments, speaker_count = run.segments(), None
    if run.speakers is not None:
        segments, speaker_count = label_segments(segments, *run.speakers.arrays(), options.speakers)
    if progress is not None:
        seconds = math.ceil(length / SAMPLE_RATE)
        progress(seconds, seconds)
    return AudioResult(
        duration_ms=length // SAMPLES_PER_MS,
        speech_ms=run.speech_samples // SAMPLES_PER_MS,
        language=run.language,
        language_probability=run.language_probability,
        source=source,
        segments=segments,
        speaker_count=speaker_count,
        producer=producer(options, engine, voices),
    )
