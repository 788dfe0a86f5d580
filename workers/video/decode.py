"""Decode the video stream once, in presentation order, with each frame's repaired pts.

Time comes from presentation timestamps, so variable frame rates need nothing special. A frame
with no pts, or one not after its predecessor's, is timed one step after it (the last observed
step, else the nominal frame duration) and counted. Decoding is strict: a packet the decoder
rejects, a frame it flags as corrupt, a stream that stops well short of what the container's index
declares, or one that runs past the duration limit fails the job rather than yield evidence with
shifted frame numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import av

from contract.errors import ErrorCode, InputRejected, LimitExceeded
from contract.manifest import Limits
from workers.video.probe import Probe

__all__ = ["FrameReader"]

# A stream may end this much before the end its container declares (rounding, a short last frame).
_END_TOLERANCE_S = Fraction(1, 2)


class FrameReader:
    """Iterate ``(index, pts, frame)``; after the loop, the facts of what was decoded.

    Args:
        probe: the opened container and its video stream.
        threads: the worker's thread budget. With 1 the decoder runs in the calling thread; with
            ``n > 1`` FFmpeg's frame threading gets ``n + 1`` threads, as FFmpeg's own automatic
            choice does, so one frame is always in flight while the caller converts the last one.
        limits: the capability's limits; ``max_duration_s`` is enforced on the decoded timestamps too.
    """

    def __init__(self, probe: Probe, threads: int, limits: Limits) -> None:
        self.probe = probe
        self.limits = limits
        context = probe.stream.codec_context
        context.thread_count = threads + 1 if threads > 1 else 1
        context.thread_type = "AUTO" if threads > 1 else "NONE"
        self.count = 0
        self.repaired = 0
        self.first_pts: int | None = None
        self.last_pts: int | None = None
        self.last_duration: int | None = None
        self.last_step: int | None = None
        self.min_step: int | None = None
        self.max_step: int | None = None
        self.rotation = 0

    def time_s(self, pts: int) -> Fraction:
        """Seconds on the media timeline of a pts in the stream's time base."""
        return Fraction(pts) * self.probe.time_base - self.probe.origin_s

    def _nominal_step(self) -> int:
        rate = self.probe.average_rate or self.probe.base_rate or Fraction(25)
        return max(1, round(1 / (rate * self.probe.time_base)))

    def _decoded(self) -> Iterator[Any]:
        probe = self.probe
        packet = None
        try:
            for packet in probe.container.demux(probe.stream):
                yield from packet.decode()
        except av.error.FFmpegError as exc:
            if packet is not None and packet.pos is not None and packet.pos + packet.size >= probe.size:
                # The packet runs to the end of the file: the data stops mid-frame.
                raise InputRejected(f"the video is truncated: it ends inside frame {self.count + 1}") from exc
            raise InputRejected(f"the video stream is corrupt: it fails to decode after frame {self.count}") from exc

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        max_pts = self._max_pts()
        for frame in self._decoded():
            if frame.is_corrupt:
                raise InputRejected(f"the video stream is corrupt: frame {self.count + 1} is damaged")
            pts = frame.pts
            if self.last_pts is None:
                if pts is None:
                    pts, self.repaired = 0, self.repaired + 1
                self.first_pts = pts
                # PyAV gives the display matrix's angle counter-clockwise; turned clockwise and
                # rounded to a quarter turn (the only ones ffmpeg's autorotate applies exactly).
                self.rotation = (-round(frame.rotation / 90) * 90) % 360
                if self.time_s(pts) < 0:
                    # Frames presented before every stream's declared start: they open the timeline.
                    self.probe.origin_s = Fraction(pts) * self.probe.time_base
                    max_pts = self._max_pts()
            else:
                if pts is None or pts <= self.last_pts:
                    step = self.last_step if self.last_step is not None else self._nominal_step()
                    pts, self.repaired = self.last_pts + step, self.repaired + 1
                step = self.last_step = pts - self.last_pts
                self.min_step = step if self.min_step is None else min(self.min_step, step)
                self.max_step = step if self.max_step is None else max(self.max_step, step)
            if max_pts is not None and pts > max_pts:
                raise LimitExceeded(
                    f"the video runs past the {self.limits.max_duration_s:g} s limit", code=ErrorCode.TOO_LONG
                )
            self.last_pts = pts
            self.last_duration = frame.duration if frame.duration and frame.duration > 0 else None
            yield self.count, pts, frame
            self.count += 1
        self._check_complete()

    def _max_pts(self) -> int | None:
        """The last pts inside the duration limit, in stream ticks (compared as integers per frame)."""
        if self.limits.max_duration_s is None:
            return None
        return math.floor((Fraction(self.limits.max_duration_s) + self.probe.origin_s) / self.probe.time_base)

    def end_pts(self) -> int:
        """The pts just after the last frame: its own duration, else the step before it, else nominal."""
        assert self.last_pts is not None
        step = self.last_duration or self.last_step or self._nominal_step()
        return self.last_pts + step

    @property
    def variable_rate(self) -> bool:
        return self.min_step is not None and self.max_step is not None and self.max_step - self.min_step > 1

    def _check_complete(self) -> None:
        if self.count == 0:
            raise InputRejected("the video stream holds no frames", code=ErrorCode.EMPTY_INPUT)
        declared = self.probe.declared_frames
        if declared is not None and declared - self.count > max(2, declared // 100):
            raise InputRejected(f"the video is truncated: {self.count} of {declared} declared frames decode")
        end = self.probe.declared_end_s
        if end is not None and Fraction(self.end_pts()) * self.probe.time_base + _END_TOLERANCE_S < end:
            raise InputRejected("the video is truncated: its frames stop before the end its container declares")
