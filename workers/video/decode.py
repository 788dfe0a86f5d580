"""Decode the video stream once, in presentation order, with each frame's repaired pts.

Time comes from presentation timestamps, so variable frame rates need nothing special. A frame
with no pts, or one not after its predecessor's, is timed one step after it (the last observed
step, else the nominal frame duration) and counted. Decoding is strict: a packet the decoder
rejects, a frame it flags as corrupt, a stream that stops well short of what the container's index
declares, or one that runs past the duration limit fails the job rather than yield evidence with
shifted frame numbers.

With a thread budget over one, the frames flow through helper threads: one demuxes and decodes (so
FFmpeg's frame threads are fed while the caller works: calling into the decoder from the caller's
own loop leaves them idle whenever the caller is busy) and, for frames of 720p and up, the next
runs the caller's ``prepare`` step on each frame right after it is decoded (while the frame is
still in cache); the caller gets frames and their prepared values in order. Each hand-over queue
holds a few frames (:func:`_depth`), handed over a few at a time (:func:`_batch`: ``queue.Queue``
locks in Python, so one put and get per frame costs more than batches; measured in
``docs/shots.md``). The reader is a context manager: leaving it stops and joins the helpers before the container can be
closed under them.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any, Self

import av

from mediafleet.contract.errors import ErrorCode, InputRejected, LimitExceeded
from mediafleet.contract.manifest import Limits
from mediafleet.workers.video.probe import Probe

__all__ = ["FrameReader"]

# A stream may end this much before the end its container declares (rounding, a short last frame).
_END_TOLERANCE_S = Fraction(1, 2)
# Frames each hand-over queue may hold: as many as fit in this many bytes, within the bounds below.
_QUEUE_BYTES = 48 << 20
_QUEUE_FRAMES = (2, 8)  # 8 at 1080p (about 3 MB a frame), 3 at 4096x2160
_DONE = object()
# The preparing thread pays from 720p up, where a frame's preparation outweighs the extra hand-over
# (measured in docs/shots.md); below, ``prepare`` runs in the caller's thread.
_PREPARE_THREAD_PIXELS = 1280 * 720


def _depth(width: int, height: int) -> int:
    low, high = _QUEUE_FRAMES
    return max(low, min(high, _QUEUE_BYTES // max(1, width * height * 3 // 2)))


def _batch(depth: int) -> int:
    """Frames handed over at once: half the depth (4 up to 1080p), so two batches fill the queue."""
    return max(1, depth // 2)


class _Ahead:
    """Runs an iterator in a helper thread, handing its items (or its exception) over in order, in
    lists of up to ``batch`` items (the last one shorter); ``depth`` items at most wait in the queue."""

    def __init__(self, items: Iterator[Any], depth: int, name: str, batch: int = 1) -> None:
        self._batch = max(1, batch)
        self._queue: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(maxsize=max(1, depth // self._batch))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(items,), name=name, daemon=True)
        self._thread.start()

    def _run(self, items: Iterator[Any]) -> None:
        chunk: list[Any] = []
        try:
            for item in items:
                chunk.append(item)
                if len(chunk) >= self._batch:
                    if not self._put((chunk, None)):
                        return
                    chunk = []
            if chunk and not self._put((chunk, None)):
                return
            self._put((_DONE, None))
        except BaseException as exc:  # noqa: BLE001 - handed over and raised in the caller's thread
            if not chunk or self._put((chunk, None)):  # the items before it first
                self._put((None, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def _put(self, entry: tuple[Any, BaseException | None]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[Any]:
        get = self._queue.get
        while True:
            try:
                item, exc = get(timeout=0.05)
            except queue.Empty:
                if self._stop.is_set():
                    return  # stopping: a helper reading from this stage ends too
                continue
            if exc is not None:
                raise exc
            if item is _DONE:
                return
            yield from item

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.stop()
        while True:  # free the frames it holds; a blocked put sees the stop within its timeout
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()


class FrameReader:
    """Iterate ``(index, pts, frame, prepared)`` (see :meth:`frames`); after the loop, the facts of
    what was decoded.

    Args:
        probe: the opened container and its video stream.
        threads: the worker's thread budget. With 1 the decoder runs in the calling thread; with
            ``n > 1`` FFmpeg's frame threading gets ``n + 1`` threads, as FFmpeg's own automatic
            choice does, driven by helper threads that decode (and prepare) ahead of the caller.
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
        self._threaded = threads > 1
        self._stages: list[_Ahead] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop and join the helper threads, if any run (idempotent)."""
        for stage in self._stages:
            stage.stop()
        while self._stages:  # the caller's end first: each stage feeds the next
            self._stages.pop().close()

    def time_s(self, pts: int) -> Fraction:
        """Seconds on the media timeline of a pts in the stream's time base."""
        return Fraction(pts) * self.probe.time_base - self.probe.origin_s

    def _nominal_step(self) -> int:
        rate = self.probe.average_rate or self.probe.base_rate or Fraction(25)
        return max(1, round(1 / (rate * self.probe.time_base)))

    def _decoded(self) -> Iterator[Any]:
        probe = self.probe
        packet = None
        decoded = 0  # counted here: with a helper thread the caller's count lags behind
        try:
            for packet in probe.container.demux(probe.stream):
                for frame in packet.decode():
                    yield frame
                    decoded += 1
        except av.error.FFmpegError as exc:
            if packet is not None and packet.pos is not None and packet.pos + packet.size >= probe.size:
                # The packet runs to the end of the file: the data stops mid-frame.
                raise InputRejected(f"the video is truncated: it ends inside frame {decoded + 1}") from exc
            raise InputRejected(f"the video stream is corrupt: it fails to decode after frame {decoded}") from exc

    @staticmethod
    def _prepared(frames: Iterator[Any], prepare: Callable[[Any], Any] | None) -> Iterator[tuple[Any, Any]]:
        for frame in frames:
            yield frame, prepare(frame) if prepare is not None else None

    def __iter__(self) -> Iterator[tuple[int, int, Any, Any]]:
        return self.frames()

    def frames(self, prepare: Callable[[Any], Any] | None = None) -> Iterator[tuple[int, int, Any, Any]]:
        """``(index, pts, frame, prepare(frame))`` for every frame, in order (``None`` without ``prepare``).

        With helper threads and frames of 720p and up, ``prepare`` runs in its own helper right
        after each frame is decoded, while the caller works on earlier frames: it must not share
        state with what the caller does meanwhile. Otherwise it runs in the caller's thread.
        """
        max_pts = self._max_pts()
        if self._threaded:
            self.close()
            depth = _depth(self.probe.width, self.probe.height)
            batch = _batch(depth)
            decoding = _Ahead(self._decoded(), depth, "mediafleet-video-decode", batch)
            self._stages.append(decoding)
            if prepare is not None and self.probe.width * self.probe.height >= _PREPARE_THREAD_PIXELS:
                self._stages.append(_Ahead(self._prepared(iter(decoding), prepare), depth,
                                           "mediafleet-video-prepare", batch))
                decoded: Iterator[tuple[Any, Any]] = iter(self._stages[-1])
            else:
                decoded = self._prepared(iter(decoding), prepare)
        else:
            decoded = self._prepared(self._decoded(), prepare)
        try:
            yield from self._checked(decoded, max_pts)
        finally:
            self.close()
        self._check_complete()

    def _checked(self, frames: Iterator[tuple[Any, Any]], max_pts: int | None) -> Iterator[tuple[int, int, Any, Any]]:
        for frame, prepared in frames:
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
            yield self.count, pts, frame, prepared
            self.count += 1

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
