"""Audio in, 16 kHz mono samples out, a block at a time (PyAV), refusing what must not be used.

The container is opened and its header checked (an audio stream, its declared length against the
manifest's ``max_duration_s``) before anything is decoded. Decoding then streams: each block is
handed on and forgotten, so a two-hour recording never sits in memory whole.

The timeline is the audio stream's own, from its first decoded sample. Because every locus is a
millisecond position on that timeline, audio that loses data is refused rather than transcribed
with shifted times: a packet the decoder rejects, a jump in the stream's timestamps (data skipped),
or a stream that ends before the length its container declares (truncated) are all
``corrupt_input``. Samples are converted as faster-whisper's own ``decode_audio`` does (s16, then
scaled to float32), so both paths see the same numbers.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Self

import av
import numpy as np

from mediafleet.contract.audio import AudioSource
from mediafleet.contract.errors import ErrorCode, InputRejected, LimitExceeded, Unavailable
from mediafleet.contract.manifest import Limits

__all__ = ["SAMPLE_RATE", "AudioDecoder", "open_audio"]

SAMPLE_RATE = 16000
SAMPLES_PER_MS = SAMPLE_RATE // 1000
BLOCK_SAMPLES = 30 * SAMPLE_RATE

# Timestamps may wander this far from the samples decoded before data counts as missing.
_MAX_DRIFT_S = 0.1
# A stream may end this much (plus 0.1% of its length) before its declared end.
_MAX_SHORTFALL_S = 0.1
# Source samples gathered before each resampling call (about a second at 44.1 kHz).
_GROUP_SAMPLES = 1 << 15
# Containers whose headers state the stream length (rather than estimating it).
_EXACT_CONTAINERS = ("flac", "mov,", "matroska")


def _seconds(value: int | None, time_base: Fraction | None) -> float | None:
    if value is None or time_base is None:
        return None
    return float(value * time_base)


@dataclass(frozen=True)
class _Declared:
    seconds: float | None
    exact: bool  # the container states its length (so a shorter stream lost data)


class AudioDecoder:
    """One opened recording: :attr:`source` from its header, :meth:`blocks` to decode it."""

    def __init__(self, path: Path, limits: Limits) -> None:
        self._path = path
        self._limits = limits
        try:
            self._container: Any = av.open(str(path), mode="r", metadata_errors="ignore")
        except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
            raise InputRejected("the file cannot be read as audio: its container is damaged or not a media format") from exc
        try:
            self._stream = self._pick_stream()
            self._declared = self._declare()
            self.source = self._describe()
            self._check_duration_limit()
        except BaseException:
            self._container.close()
            raise
        self.decoded_samples = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._container.close()

    @property
    def declared_seconds(self) -> float | None:
        return self._declared.seconds

    def _pick_stream(self) -> Any:
        if not self._container.streams.audio:
            raise InputRejected("the file holds no audio stream", code=ErrorCode.NO_MEDIA_STREAM)
        stream = self._container.streams.best("audio") or self._container.streams.audio[0]
        if stream.codec_context is None or not stream.codec_context.name:
            raise Unavailable("the audio codec of this file cannot be decoded on this worker")
        return stream

    def _declare(self) -> _Declared:
        stream, container = self._stream, self._container
        fmt = container.format.name
        has_video = bool(container.streams.video)
        seconds = _seconds(stream.duration, stream.time_base)
        if seconds is None and not has_video and container.duration is not None:
            seconds = container.duration / av.time_base
        if fmt == "wav":
            _check_wav_complete(self._path)
            exact = False  # FFmpeg derives the length from the file itself
        elif fmt == "ogg":
            _check_ogg_complete(self._path)
            exact = False  # the length comes from the last page present
        elif fmt == "mp3":
            exact = _mp3_counts_frames(self._path)  # otherwise the length is a bitrate estimate
        else:
            exact = fmt.startswith(_EXACT_CONTAINERS)
        return _Declared(seconds=seconds, exact=exact and seconds is not None)

    def _describe(self) -> AudioSource:
        ctx = self._stream.codec_context
        declared = self._declared.seconds
        return AudioSource(
            container=self._container.format.name,
            codec=ctx.name,
            sample_rate=int(ctx.sample_rate or self._stream.sample_rate or SAMPLE_RATE),
            channels=int(ctx.channels or 0),
            declared_duration_ms=None if declared is None else max(int(declared * 1000), 0),
            from_video=bool(self._container.streams.video),
        )

    def _check_duration_limit(self) -> None:
        limit = self._limits.max_duration_s
        declared = self._declared.seconds
        if limit is not None and declared is not None and declared > limit:
            raise LimitExceeded(
                f"the recording lasts {declared:.0f} s; the limit is {limit:.0f} s", code=ErrorCode.TOO_LONG
            )

    def blocks(self, block_samples: int = BLOCK_SAMPLES) -> Iterator[np.ndarray]:
        """16 kHz mono float32 blocks of ``block_samples`` (the last one shorter), in order.

        Raises:
            InputRejected: a packet cannot be decoded, data is missing, or the stream is truncated.
            LimitExceeded: more audio than ``max_duration_s`` (when the header did not say so).
        """
        limit = self._limits.max_duration_s
        max_samples = None if limit is None else int(limit * SAMPLE_RATE)
        pending: list[np.ndarray] = []
        held = 0
        for pcm in self._pcm():
            pending.append(pcm)
            held += pcm.shape[0]
            self.decoded_samples += pcm.shape[0]
            if max_samples is not None and self.decoded_samples > max_samples:
                raise LimitExceeded(f"the recording lasts longer than the {limit:.0f} s limit", code=ErrorCode.TOO_LONG)
            while held >= block_samples:
                joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
                yield joined[:block_samples]
                rest = joined[block_samples:]
                pending, held = ([rest], rest.shape[0]) if rest.shape[0] else ([], 0)
        if held:
            yield np.concatenate(pending)
        self._check_not_short()

    def _pcm(self) -> Iterator[np.ndarray]:
        stream = self._stream
        time_base = stream.time_base
        resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
        # Frames are resampled in groups (as faster-whisper's decode_audio does): one call per
        # frame cost ~40% of decoding; the resampler streams, so the samples are the same.
        fifo = av.AudioFifo()
        first: float | None = None
        elapsed = 0.0  # seconds of source audio decoded so far
        for packet in self._container.demux(stream):
            try:
                frames = packet.decode()
            except av.error.FFmpegError as exc:
                where = _seconds(packet.pts, time_base)
                at = f" near {where:.1f} s" if where is not None else ""
                raise InputRejected(f"the audio is damaged or truncated: a packet{at} cannot be decoded") from exc
            for frame in frames:
                at = _seconds(frame.pts, time_base)
                if at is not None:
                    if first is None:
                        first = at - elapsed
                    elif abs(at - (first + elapsed)) > _MAX_DRIFT_S:
                        raise InputRejected(f"the audio is damaged: data is missing near {first + elapsed:.1f} s")
                if frame.sample_rate:
                    elapsed += frame.samples / frame.sample_rate
                frame.pts = None  # the resampler must not reorder by the source's timestamps
                fifo.write(frame)
                if fifo.samples >= _GROUP_SAMPLES:
                    yield from self._resampled(resampler, fifo.read())
        if fifo.samples:
            yield from self._resampled(resampler, fifo.read())
        yield from self._resampled(resampler, None)

    @staticmethod
    def _resampled(resampler: Any, frame: Any) -> Iterator[np.ndarray]:
        for out in resampler.resample(frame):
            yield _to_float(out)

    def _check_not_short(self) -> None:
        declared = self._declared
        if not declared.exact or declared.seconds is None:
            return
        decoded = self.decoded_samples / SAMPLE_RATE
        if decoded < declared.seconds - _MAX_SHORTFALL_S - declared.seconds / 1000:
            raise InputRejected(
                f"the audio is truncated or damaged: it ends at {decoded:.1f} s, "
                f"before the {declared.seconds:.1f} s its container declares"
            )


def _to_float(frame: Any) -> np.ndarray:
    samples = frame.to_ndarray().reshape(-1)
    return samples.astype(np.float32) / 32768.0


def open_audio(path: Path, limits: Limits) -> AudioDecoder:
    """Open a recording for streaming decode, checking its header first.

    Raises:
        InputRejected: not a readable media file (``corrupt_input``), no audio stream
            (``no_media_stream``), or visibly truncated (WAV data chunk, Ogg without its last page).
        LimitExceeded: the declared length is over ``limits.max_duration_s`` (``too_long``).
        Unavailable: the codec cannot be decoded here.
    """
    return AudioDecoder(path, limits)


def _check_wav_complete(path: Path) -> None:
    """A RIFF/WAVE file shorter than its ``data`` chunk says was cut off."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(12)
        if len(head) < 12 or head[:4] != b"RIFF":
            return  # RF64 and friends: nothing declared here to compare with
        offset = 12
        while offset + 8 <= size:
            fh.seek(offset)
            chunk_id, chunk_size = struct.unpack("<4sI", fh.read(8))
            if chunk_id == b"data":
                if chunk_size in (0, 0xFFFFFFFF):
                    return  # written while streaming: the size was never filled in
                if offset + 8 + chunk_size > size:
                    raise InputRejected("the WAV audio is truncated: its data ends before the length its header declares")
                return
            offset += 8 + chunk_size + (chunk_size & 1)


def _check_ogg_complete(path: Path) -> None:
    """An Ogg stream ends with a page flagged end-of-stream; one that does not was cut off."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(max(0, size - 65536))
        tail = fh.read()
    last = tail.rfind(b"OggS")
    if last < 0 or last + 6 > len(tail):
        raise InputRejected("the Ogg audio is truncated: its last page is missing")
    if not tail[last + 5] & 0x04:
        raise InputRejected("the Ogg audio is truncated: it does not end with an end-of-stream page")


def _mp3_counts_frames(path: Path) -> bool:
    """True when the first MP3 frame carries a Xing/Info/VBRI header (an exact frame count)."""
    with path.open("rb") as fh:
        head = fh.read(10)
        start = 0
        if head[:3] == b"ID3" and len(head) == 10:
            start = 10 + ((head[6] & 0x7F) << 21 | (head[7] & 0x7F) << 14 | (head[8] & 0x7F) << 7 | (head[9] & 0x7F))
            if head[5] & 0x10:
                start += 10
        fh.seek(start)
        frame = fh.read(4096)
    return any(tag in frame[:200] for tag in (b"Xing", b"Info", b"VBRI"))
