"""Audio transcription options and results (``transcribe_segments``).

Times are integer milliseconds from the start of the recording as decoded (the audio stream of the
file, resampled to 16 kHz mono): ``start_ms`` inclusive, ``end_ms`` exclusive. Segments are in
order, never overlap, are never empty (``end_ms > start_ms``) and lie inside ``duration_ms``;
the model validates all of it, so an invalid result cannot be built.

Speakers: each segment carries a ``speaker`` label, ``"S1"``, ``"S2"``, ... in the order the
speakers first speak, and the result ``speaker_count``, the number of labels used; a segment in
which the speaker changes is split at the word boundary, so one segment is one speaker. With
``speakers=0`` no speaker is labelled (``speaker`` None on every segment, ``speaker_count`` None).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from mediafleet.contract.common import Confidence, Producer, Strict

__all__ = ["MAX_SPEAKERS", "SPEAKER_PATTERN", "AudioOptions", "AudioResult", "AudioSegment", "AudioSource", "AudioWord"]

Ms = Annotated[int, Field(strict=True, ge=0)]
MAX_SPEAKERS = 16
SPEAKER_PATTERN = r"^S[1-9][0-9]?$"


class AudioOptions(Strict):
    """Options of ``transcribe_segments``; the manifest says which values a request may use."""

    language: str | None = Field(
        None,
        pattern=r"^[a-z]{2,3}$",
        description="ISO 639-1 code of the speech (Whisper's codes); None detects it. An English-only "
        "model accepts only 'en'.",
    )
    vad_filter: bool = Field(
        True, description="transcribe only what Silero VAD finds to be speech, so silence yields no text"
    )
    word_timestamps: bool = Field(
        True, description="keep each word's timing and probability; segments are then cut at sentence ends and pauses"
    )
    beam_size: Annotated[int, Field(strict=True, ge=1, le=5)] = Field(5, description="1 is greedy decoding")
    speakers: Annotated[int, Field(strict=True, ge=0, le=MAX_SPEAKERS)] | None = Field(
        None,
        description="how many people speak, when known; None estimates it from the voices; 0 labels no speakers "
        "(the speaker encoder is not run)",
    )


class AudioWord(Strict):
    """One word as the model aligned it, inside its segment (a word may last 0 ms)."""

    start_ms: Ms
    end_ms: Ms
    word: str = Field(description="the word as decoded, with its leading space and punctuation")
    probability: Confidence = Field(description="mean probability of the word's tokens")

    @model_validator(mode="after")
    def _ordered(self) -> AudioWord:
        if self.end_ms < self.start_ms:
            raise ValueError("a word's end_ms must be >= its start_ms")
        return self


class AudioSegment(Strict):
    """One stretch of speech and its text: the callers' ``segments`` entry and one AudioRange locus."""

    start_ms: Ms
    end_ms: Ms
    text: str = Field(min_length=1, description="the text, stripped of surrounding spaces")
    confidence: Confidence = Field(
        description="exp(avg_logprob): the geometric mean of the probabilities the model gave the tokens "
        "of the 30-second window this segment was decoded in"
    )
    avg_logprob: float = Field(le=0.0, allow_inf_nan=False, description="mean token log-probability of that window")
    no_speech_prob: Confidence = Field(description="the model's probability that the window holds no speech")
    words: list[AudioWord] | None = Field(None, description="None unless word_timestamps was on")
    speaker: str | None = Field(
        None, pattern=SPEAKER_PATTERN,
        description="who speaks: S1, S2, ... in the order the speakers first speak; None when speakers=0",
    )

    @model_validator(mode="after")
    def _valid(self) -> AudioSegment:
        if not self.end_ms > self.start_ms:
            raise ValueError("a segment's end_ms must be > its start_ms")
        for word in self.words or ():
            if word.start_ms < self.start_ms or word.end_ms > self.end_ms:
                raise ValueError("a word lies outside its segment")
        return self


class AudioSource(Strict):
    """What the container said about the audio stream that was transcribed."""

    container: str = Field(description="FFmpeg's demuxer name, e.g. 'flac', 'mov,mp4,m4a,3gp,3g2,mj2'")
    codec: str
    sample_rate: Annotated[int, Field(strict=True, gt=0)] = Field(description="Hz, before resampling to 16 kHz")
    channels: Annotated[int, Field(strict=True, ge=0)] = Field(description="before downmixing to mono")
    declared_duration_ms: Ms | None = Field(description="the length the container declares, when it does")
    from_video: bool = Field(description="the audio track of a file that also holds video")


class AudioResult(Strict):
    kind: Literal["audio"] = "audio"
    duration_ms: Ms = Field(description="length of the decoded audio (16 kHz samples / 16), rounded down")
    speech_ms: Ms = Field(description="how much of it was transcribed (all of it when vad_filter is off)")
    language: str | None = Field(description="the language transcribed; None only when nothing was heard to detect")
    language_probability: Confidence | None = Field(description="1.0 when given or the model is English-only")
    source: AudioSource
    segments: list[AudioSegment]
    speaker_count: Annotated[int, Field(strict=True, ge=0)] | None = Field(
        None, description="how many speakers the segments name (0: no segments); None when speakers=0")
    producer: Producer

    @model_validator(mode="after")
    def _segments_in_order(self) -> AudioResult:
        previous_end = 0
        for segment in self.segments:
            if segment.start_ms < previous_end:
                raise ValueError("segments overlap or are out of order")
            previous_end = segment.end_ms
        if previous_end > self.duration_ms:
            raise ValueError("a segment ends after the recording")
        if self.speech_ms > self.duration_ms:
            raise ValueError("speech_ms exceeds duration_ms")
        self._check_speakers()
        return self

    def _check_speakers(self) -> None:
        """Labels on every segment or on none, named S1.. in order of first speech, counted."""
        labels = [segment.speaker for segment in self.segments]
        if self.speaker_count is None:
            if any(label is not None for label in labels):
                raise ValueError("segments name speakers but speaker_count is None")
            return
        if any(label is None for label in labels):
            raise ValueError("speaker_count is set but a segment has no speaker")
        first_seen = list(dict.fromkeys(labels))
        if first_seen != [f"S{n}" for n in range(1, len(first_seen) + 1)]:
            raise ValueError("speakers must be named S1, S2, ... in the order they first speak")
        if len(first_seen) != self.speaker_count:
            raise ValueError("speaker_count differs from the number of speakers the segments name")
