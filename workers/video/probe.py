"""Open a video file and check it against the manifest's limits from the container, before decoding.

Everything here reads headers and indexes only: the frame size (``max_pixels``) and the declared
duration (``max_duration_s``) are refused before the first packet is decoded. The media timeline's
origin is the earliest start of any stream (or pts 0 when a stream starts before it), so a video
stream that starts after its audio keeps its offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO, Self

import av

from mediafleet.contract.errors import ErrorCode, InputRejected, LimitExceeded
from mediafleet.contract.manifest import Limits

__all__ = ["Probe", "has_audio_track", "open_video"]


@dataclass
class Probe:
    """An open container, its chosen video stream, and what the headers declare about it."""

    container: Any
    stream: Any
    size: int  # bytes in the file
    container_name: str
    codec: str
    width: int
    height: int
    time_base: Fraction
    average_rate: Fraction | None
    base_rate: Fraction | None
    declared_frames: int | None
    origin_s: Fraction
    declared_end_s: Fraction | None  # in pts seconds (not yet moved to the media timeline)
    has_audio: bool
    audio_start_s: Fraction | None  # the start of the audio stream a transcription would use, pts seconds

    def close(self) -> None:
        self.container.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _rate(value: Any) -> Fraction | None:
    if value is None:
        return None
    rate = Fraction(value.numerator, value.denominator)
    return rate if rate > 0 else None


def _pick_stream(container: Any) -> Any:
    """The first default-flagged video stream that is not cover art, else the first such stream."""
    candidates = [
        s for s in container.streams.video if not s.disposition & av.stream.Disposition.attached_pic
    ]
    if not candidates:
        raise InputRejected("the file holds no video stream", code=ErrorCode.NO_MEDIA_STREAM)
    defaults = [s for s in candidates if s.disposition & av.stream.Disposition.default]
    return (defaults or candidates)[0]


def _origin(container: Any) -> Fraction:
    """Time 0 of the media timeline, in pts seconds: the earliest stream start, or 0 when a stream
    starts before pts 0 (codec priming: the negative part is never presented)."""
    starts = [Fraction(s.start_time) * s.time_base for s in container.streams if s.start_time is not None]
    if not starts and container.start_time is not None:
        starts = [Fraction(container.start_time, av.time_base)]
    return max(Fraction(0), min(starts, default=Fraction(0)))


def _audio_start(container: Any) -> Fraction | None:
    """Start of the audio stream ``transcribe_segments`` picks (FFmpeg's best), if there is one."""
    if not container.streams.audio:
        return None
    stream = container.streams.best("audio") or container.streams.audio[0]
    return Fraction(stream.start_time or 0) * stream.time_base


def has_audio_track(source: Path | BinaryIO) -> bool | None:
    """Whether the container holds an audio stream, from its header alone (what the dispatcher asks
    before queueing a speech part); None when the header cannot be read (the video job decides)."""
    try:
        with av.open(source if not isinstance(source, Path) else str(source), mode="r") as container:
            return bool(container.streams.audio)
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError, OSError):
        return None


def open_video(path: Path, limits: Limits) -> Probe:
    """Open ``path`` and pick its video stream, refusing what must not be decoded.

    Raises:
        InputRejected: empty or unparseable (``empty_input``, ``corrupt_input``), no video stream
            (``no_media_stream``), a codec this build cannot decode (``unsupported_media_type``).
        LimitExceeded: frames larger than ``limits.max_pixels`` (``too_many_pixels``) or a declared
            duration over ``limits.max_duration_s`` (``too_long``).
    """
    size = path.stat().st_size
    if size == 0:
        raise InputRejected("the video file is empty", code=ErrorCode.EMPTY_INPUT)
    try:
        container = av.open(str(path), mode="r")
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
        raise InputRejected("the video container cannot be parsed") from exc
    try:
        return _probe(container, size, limits)
    except BaseException:
        container.close()
        raise


def _probe(container: Any, size: int, limits: Limits) -> Probe:
    stream = _pick_stream(container)
    try:
        codec_context = stream.codec_context
        codec = codec_context.codec.name
    except (av.error.FFmpegError, AttributeError, ValueError) as exc:
        raise InputRejected("the video codec is not supported", code=ErrorCode.UNSUPPORTED_MEDIA_TYPE) from exc
    width, height = codec_context.width, codec_context.height
    if width <= 0 or height <= 0:
        raise InputRejected("the video stream declares no frame size")
    if limits.max_pixels is not None and width * height > limits.max_pixels:
        raise LimitExceeded(
            f"the video's frames are {width}x{height} pixels; the limit is {limits.max_pixels} pixels per frame",
            code=ErrorCode.TOO_MANY_PIXELS,
        )
    time_base = Fraction(stream.time_base.numerator, stream.time_base.denominator)
    origin = _origin(container)
    declared_end = None
    if stream.duration is not None and stream.duration > 0:
        start = Fraction(stream.start_time or 0) * time_base
        declared_end = start + Fraction(stream.duration) * time_base
    elif container.duration is not None and container.duration > 0 and len(container.streams) == 1:
        # Matroska/WebM declares no per-stream duration, only the segment's: with the video its only
        # stream, that is the video's end (a file cut short still declares it, so truncation shows).
        declared_end = Fraction(container.start_time or 0, av.time_base) + Fraction(container.duration, av.time_base)
    declared = [declared_end - origin] if declared_end is not None else []
    if container.duration is not None and container.duration > 0:
        declared.append(Fraction(container.duration, av.time_base))
    if limits.max_duration_s is not None and declared and min(declared) > Fraction(limits.max_duration_s):
        raise LimitExceeded(
            f"the video declares {float(min(declared)):.0f} s; the limit is {limits.max_duration_s:g} s",
            code=ErrorCode.TOO_LONG,
        )
    return Probe(
        container=container,
        stream=stream,
        size=size,
        container_name=container.format.name,
        codec=codec,
        width=width,
        height=height,
        time_base=time_base,
        average_rate=_rate(stream.average_rate),
        base_rate=_rate(stream.base_rate),
        declared_frames=stream.frames if stream.frames and stream.frames > 0 else None,
        origin_s=origin,
        declared_end_s=declared_end,
        has_audio=bool(container.streams.audio),
        audio_start_s=_audio_start(container),
    )
