"""Shot detectors as the extractor drives them (:class:`Segmenter`), and PySceneDetect's detectors fed
the frames PySceneDetect itself would see.

The default detector is mediafleet's own (:mod:`mediafleet.workers.video.shot_detector`: cuts and gradual
transitions from the analysis frame's signals); ``adaptive`` and ``content`` are PySceneDetect's,
kept exactly as upstream places their cuts.

The analysis frame is exactly the one PySceneDetect's ``SceneManager`` makes: the decoded frame
converted to BGR at full size (FFmpeg's swscale), then ``cv2.resize`` with linear interpolation to
upstream's automatic size (the longer side scaled to ~256 pixels). Cheaper routes (scaling the YUV
planes first, or letting swscale convert and scale at once) move scores near the thresholds by a
few hundredths and change upstream's golden cuts, so they are not used.

What is used instead, for 4:2:0 frames tall enough that it pays (1080p and up): linear resizing
reads only two source rows per output row (about 290 of 1080), and swscale's YUV->BGR conversion
of a row reads only that row and its chroma row (its direct converter, used for even heights). So those rows alone are gathered into a small
4:2:2 frame (each row with its own chroma row), converted by the same swscale kernel, put back at
their places in a full-size BGR buffer and resized from there: the same bytes as the full path,
from about a quarter of the conversion. Rows the resize never reads hold stale pixels, which it
never reads. ``tests/test_video_analysis.py`` checks the rows and the bytes against the full path.

The detectors are upstream's, with one change: the per-frame score (the mean absolute HSV change)
is computed in one ``absdiff`` and ``sumElems`` instead of three NumPy passes. The integer sums
and the float operations that follow are the same, so scores, and therefore cuts, are identical
(``tests/test_video_shots.py`` checks it against upstream's own method).

The combined detector (:mod:`mediafleet.workers.video.shot_detector`) is ours and needs no
byte-exact PySceneDetect frame, so it reads the decoded planes instead (:class:`SignalFrames`): the
luma plane halved (pixel-pair means, OpenCV's fast area path) until its longer side is under 512
pixels, or for smaller frames resized linearly to PySceneDetect's analysis size (the grey frame:
what converting to BGR and then to grey would give, without converting a full-size pixel), the
chroma planes to the thumbnail's size, and the ~64-px colour thumbnail made from those small planes.
Halving reads every pixel, so a line of text looks the same a few pixels further on, as a scroll
test needs; its cost against the linear resize is in ``docs/shots.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

import cv2
import numpy as np
from av.video.frame import VideoFrame
from av.video.reformatter import VideoReformatter
from scenedetect import AdaptiveDetector, ContentDetector
from scenedetect.common import FrameTimecode
from scenedetect.scene_manager import compute_downscale_factor

from mediafleet.contract.video import VideoOptions
from mediafleet.workers.video import shot_detector
from mediafleet.workers.video.frame_signals import FrameSignals, thumb_size
from mediafleet.workers.video.shot_detector import Boundary, CombinedDetector, margin, max_transition_frames

try:
    from mediafleet.workers.video import _sharp  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the numpy form gives the same values
    _sharp = None

__all__ = [
    "AnalysisFrames",
    "DetectorSpec",
    "Segmenter",
    "SignalFrames",
    "build_detector",
    "build_segmenter",
    "grey_sharpness",
    "resize_rows",
    "sharpness",
    "signal_size",
]

DEFAULT_ADAPTIVE_THRESHOLD = 3.0
DEFAULT_CONTENT_THRESHOLD = 27.0
MIN_SCENE_LEN = 15  # frames; upstream's default for both detectors


class AnalysisFrames:
    """Decoded frames -> the small BGR frames the detectors and the sharpness measure read."""

    def __init__(self, width: int, height: int) -> None:
        factor = compute_downscale_factor(max(width, height))
        self.size = (max(1, round(width / factor)), max(1, round(height / factor))) if factor > 1 else (width, height)
        self.factor = float(factor)
        self._scale = factor > 1
        # Each keeps its swscale context between frames; two, so that small() and bgr() may run in
        # different threads (the reader's preparing thread and the caller's).
        self._reformatter = VideoReformatter()
        self._small_reformatter = VideoReformatter()
        self._rows: _Rows | None = None
        if self._scale and height % 2 == 0:
            # swscale's direct YUV->RGB converter, whose rows depend on their own pixels alone, only
            # serves even heights; odd ones go through its general scaler, which blends chroma rows.
            rows = resize_rows(height, self.size[1])
            if len(rows) % 2:
                rows = np.union1d(rows, [np.setdiff1d(np.arange(height), rows)[0]])  # an even count too
            if len(rows) <= height * _ROWS_WORTH_IT:
                self._rows = _Rows(width, height, rows)

    def bgr(self, frame: Any) -> np.ndarray:
        """The full-size BGR frame (a view on the converted frame's buffer).

        swscale runs in this thread, single-threaded: the decoder's threads are busy with the next
        frames meanwhile, and slice threads for one frame cost more in hand-offs than they save
        (measured in docs/shots.md).
        """
        return self._reformatter.reformat(frame, format="bgr24", threads=1).to_ndarray()

    def small(self, frame: Any) -> np.ndarray:
        """The analysis frame: what the SceneManager would feed its detectors for this frame."""
        rows = self._rows
        if rows is not None and rows.fits(frame):
            image = rows.bgr(frame)
        else:
            image = self._small_reformatter.reformat(frame, format="bgr24", threads=1).to_ndarray()
        if not self._scale:
            return image
        return cv2.resize(image, self.size, interpolation=cv2.INTER_LINEAR)


# The row path pays when linear resizing reads at most this share of the rows (1080p reads 0.27; at
# 720p, 0.40, gathering the rows costs what converting the rest would: docs/shots.md).
_ROWS_WORTH_IT = 1 / 3


def resize_rows(src: int, dst: int) -> np.ndarray:
    """The source rows ``cv2.resize(..., INTER_LINEAR)`` reads when it scales ``src`` rows to ``dst``.

    OpenCV's own arithmetic: ``scale = 1 / (dst / src)`` in doubles, output row ``d`` maps to
    ``fy = (float)((d + 0.5) * scale - 0.5)`` and blends rows ``floor(fy)`` and ``floor(fy) + 1``,
    clamped to the image (numpy's doubles and float32 round as C's do).
    """
    scale = 1.0 / (dst / src)
    fy = ((np.arange(dst, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    low = np.floor(fy).astype(np.int64)
    return np.unique(np.clip(np.concatenate([low, low + 1]), 0, src - 1))


class _Rows:
    """The BGR rows linear resizing reads, converted alone by swscale into a reused full-size buffer."""

    def __init__(self, width: int, height: int, rows: np.ndarray) -> None:
        self.width, self.height = width, height
        self.rows = rows
        self.chroma_rows = rows >> 1
        self.buffer = np.zeros((height, width, 3), np.uint8)
        self.frame = VideoFrame(width, len(rows), "yuv422p")  # each gathered row keeps its own chroma row
        self.planes = [_plane(plane) for plane in self.frame.planes]
        self.reformatter = VideoReformatter()  # its own: the keyframes' full-size conversions would reset it

    def fits(self, frame: Any) -> bool:
        return frame.format.name == "yuv420p" and frame.width == self.width and frame.height == self.height

    def bgr(self, frame: Any) -> np.ndarray:
        for index, (source, target) in enumerate(zip(frame.planes, self.planes, strict=True)):
            rows = self.rows if index == 0 else self.chroma_rows
            source_array = _plane(source)
            if source_array.shape[1] == target.shape[1]:
                np.take(source_array, rows, axis=0, out=target, mode="clip")  # contiguous: no buffering
            else:
                target[:, : source.width] = source_array[rows, : source.width]
        self.frame.colorspace = frame.colorspace
        self.frame.color_range = frame.color_range
        converted = self.reformatter.reformat(self.frame, format="bgr24", threads=1).to_ndarray()
        self.buffer[self.rows] = converted
        return self.buffer


def _plane(plane: Any) -> np.ndarray:
    """A plane's bytes as rows of its full line size (padding included, so the array is contiguous)."""
    return np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)


# Luma and chroma weights (Kr, Kb) of the colour matrices swscale knows, by FFmpeg's colorspace
# number; any other (unspecified included) is BT.601, as swscale's default.
_KR_KB = {1: (0.2126, 0.0722), 4: (0.30, 0.11), 7: (0.212, 0.087), 9: (0.2627, 0.0593), 10: (0.2627, 0.0593)}
_BT601 = (0.299, 0.114)
# 8-bit planar YUV formats whose planes are read directly (any chroma subsampling).
_PLANAR = frozenset({"yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "yuv440p", "yuvj440p"})


# Studio-range luma (16-235) stretched to 0-255 (rounded, clipped) as one saturating multiply-add
# (``cv2.addWeighted``): for each of the 256 levels the same value as the lookup table
# ``clip(round((y - 16) * 255 / 219))`` (the exact value is never a half, so both round alike),
# at a bit less cost than ``cv2.LUT``.
_STRETCH, _STRETCH_OFFSET = 255 / 219, -16 * 255 / 219


def _yuv_to_bgr(colorspace: int, full_range: bool) -> np.ndarray:
    """The 3x4 affine matrix from (full-range luma, Cb, Cr) to B, G, R for ``cv2.transform``."""
    kr, kb = _KR_KB.get(colorspace, _BT601)
    kg = 1.0 - kr - kb
    chroma = 1.0 if full_range else 255 / 224
    m = np.array([
        [1.0, 2 * (1 - kb) * chroma, 0.0],
        [1.0, -2 * kb * (1 - kb) / kg * chroma, -2 * kr * (1 - kr) / kg * chroma],
        [1.0, 0.0, 2 * (1 - kr) * chroma],
    ])
    return np.hstack([m, -128.0 * (m[:, 1:2] + m[:, 2:3])]).astype(np.float32)


def _plane_pixels(plane: Any) -> np.ndarray:
    """A plane's pixels (a view without the line padding, made in one step)."""
    return np.ndarray((plane.height, plane.width), np.uint8, plane, 0, (plane.line_size, 1))


def signal_size(width: int, height: int) -> tuple[int, int]:
    """The combined detector's analysis frame for frames of this size: halved (odd pixels dropped)
    until the longer side is under 512 pixels where it is 512 or more (360p: 320x180, 720p: 320x180,
    1080p: 480x270), else PySceneDetect's analysis size (the longer side scaled to ~256 pixels)."""
    if _halved(width, height):
        while max(width, height) >= _HALVE_FROM:
            width, height = width // 2, height // 2
        return width, height
    factor = compute_downscale_factor(max(width, height))
    return (max(1, round(width / factor)), max(1, round(height / factor))) if factor > 1 else (width, height)


# Longer sides from twice PySceneDetect's ~256 pixels are halved (pixel-pair means, every pixel read)
# rather than resized linearly, which reads two rows and columns in five at 720p and aliases text:
# a slide's word or a scrolled line must look the same a few pixels on (see docs/shots.md).
_HALVE_FROM = 512


def _halved(width: int, height: int) -> bool:
    """Whether :func:`signal_size` halves frames of this size (else it resizes them)."""
    return max(width, height) >= _HALVE_FROM


def _halves_to(width: int, height: int, size: tuple[int, int]) -> bool:
    """Whether halving (odd pixels dropped) turns a ``width`` x ``height`` plane into ``size``."""
    while (width, height) != size:
        if width // 2 < size[0] or height // 2 < size[1]:
            return False
        width, height = width // 2, height // 2
    return True


class SignalFrames:
    """Decoded frames -> the combined detector's :class:`FrameSignals` and the frame's sharpness,
    read from the YUV planes (in any thread, one call at a time; nothing is shared with the caller).

    The grey frame is the luma plane reduced to the analysis size (:func:`signal_size`: halved
    once, or resized with linear interpolation) and, for studio range, stretched to 0-255: the grey
    a BGR frame of that size would give (up to rounding), without converting the full-size frame.
    The chroma planes are halved to the thumbnail's size where halving reaches it, else resized to
    twice the thumbnail's size (linear) and halved; the thumbnail is the grey frame halved to the
    same size with them, converted to BGR with the frame's own colour matrix and range. Frames in
    any other pixel format (semi-planar, over 8 bits, RGB, grey) go through swscale to BGR at the
    analysis size, whose luma under the frame's matrix is the grey frame.
    """

    def __init__(self, width: int, height: int) -> None:
        self.size = signal_size(width, height)
        self.factor = width / self.size[0]
        self.halved = _halved(width, height)
        self.thumb = thumb_size(*self.size)
        self._chroma = (self.thumb[0] * 2, self.thumb[1] * 2) if self.thumb != self.size else self.thumb
        self._chroma_halves: dict[tuple[int, int], bool] = {}  # by chroma plane size: halving reaches the thumb
        self._matrices: dict[tuple[int, bool], np.ndarray] = {}
        self._reformatter = VideoReformatter()

    def signals(self, frame: Any) -> tuple[float, FrameSignals]:
        """The frame's sharpness (variance of the Laplacian of its grey frame) and its signals."""
        name = frame.format.name
        if name not in _PLANAR:
            return self._converted(frame)
        y, u, v = frame.planes
        full = name.startswith("yuvj") or frame.color_range == 2
        if self.halved:
            luma = _halve_to(_plane_pixels(y), self.size)
        else:
            luma = cv2.resize(_plane_pixels(y), self.size, interpolation=cv2.INTER_LINEAR)
        cb, cr = self._chroma_thumb(u), self._chroma_thumb(v)
        grey = luma if full else cv2.addWeighted(luma, _STRETCH, luma, 0.0, _STRETCH_OFFSET)
        key = (frame.colorspace, full)
        matrix = self._matrices.get(key)
        if matrix is None:
            matrix = self._matrices[key] = _yuv_to_bgr(*key)
        thumb_grey = _halve_to(grey, self.thumb)
        thumb = cv2.transform(cv2.merge((thumb_grey, cb, cr)), matrix)
        mean, std = cv2.meanStdDev(thumb_grey)
        return grey_sharpness(grey), FrameSignals(grey, thumb, float(std[0, 0]), float(mean[0, 0]))

    def _chroma_thumb(self, plane: Any) -> np.ndarray:
        """A chroma plane at the thumbnail's size."""
        pixels = _plane_pixels(plane)
        shape = (plane.width, plane.height)
        halves = self._chroma_halves.get(shape)
        if halves is None:
            halves = self._chroma_halves[shape] = _halves_to(*shape, self.thumb)
        if halves:
            return _halve_to(pixels, self.thumb)
        pixels = cv2.resize(pixels, self._chroma, interpolation=cv2.INTER_LINEAR)
        return pixels if self._chroma == self.thumb else _halve_to(pixels, self.thumb)

    def _converted(self, frame: Any) -> tuple[float, FrameSignals]:
        """Another pixel format: swscale's BGR at the analysis size, and its luma under the frame's
        matrix for the grey frame."""
        small = self._reformatter.reformat(frame, width=self.size[0], height=self.size[1], format="bgr24",
                                           src_color_range=frame.color_range or None, threads=1).to_ndarray()
        kr, kb = _KR_KB.get(frame.colorspace, _BT601)
        grey = cv2.transform(small, np.array([[kb, 1.0 - kr - kb, kr]], np.float32))
        thumb = _halve_to(small, self.thumb)
        return grey_sharpness(grey), FrameSignals.of(grey, thumb, _halve_to(grey, self.thumb))


def _halve_to(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Halve (pixel-pair means: OpenCV's fast area path) until the image is ``size`` (width, height)."""
    while (image.shape[1], image.shape[0]) != size:
        height, width = image.shape[0] & ~1, image.shape[1] & ~1
        image = cv2.resize(image[:height, :width], (width // 2, height // 2), interpolation=cv2.INTER_AREA)
    return image


def sharpness(small_bgr: np.ndarray, grey: np.ndarray | None = None) -> float:
    """Variance of the Laplacian of the grey analysis frame: higher is sharper (``grey``: that frame
    in grey, when the caller has it already)."""
    if grey is None:
        grey = cv2.cvtColor(small_bgr, cv2.COLOR_BGR2GRAY)
    return grey_sharpness(grey)


def grey_sharpness(grey: np.ndarray) -> float:
    """Variance of the Laplacian of a grey frame: mean square less squared mean, from exact integer
    sums (OpenCV's 16-bit Laplacian with its 1-pixel aperture and reflected border).

    In one C pass where the package was built with a C compiler (``workers/video/_sharp.c``, about
    0.4x the time of OpenCV's Laplacian and sums on a 320x180 frame), else from OpenCV's Laplacian
    summed in 64-bit integers: the same value either way. (OpenCV's own sum of squares, ``cv2.norm``,
    goes through a square root and back, which moves the last bits.)"""
    if _sharp is not None:
        value: float | None = _sharp.variance(grey)
        if value is not None:
            return value
    return _numpy_sharpness(grey)


def _numpy_sharpness(grey: np.ndarray) -> float:
    laplacian = cv2.Laplacian(grey, cv2.CV_16S).astype(np.int64)
    n = laplacian.size
    mean = int(laplacian.sum()) / n
    return float(int(np.dot(laplacian.ravel(), laplacian.ravel())) / n - mean * mean)


class _OnePassScore:
    """ContentDetector's frame score with the same integers and float operations, in one pass.

    Upstream: ``sum(|h - h'|)/n, sum(|s - s'|)/n, sum(|v - v'|)/n`` with NumPy on int32 copies, then
    the weighted mean of the components. Here the three sums come from one ``cv2.absdiff`` and
    ``cv2.sumElems`` (exact: integer sums far below 2**53). Edge scores and stats files take
    upstream's path unchanged.
    """

    _weights: ContentDetector.Components
    _last_hsv: np.ndarray | None = None
    _scores: dict[int, float]

    def _calculate_frame_score(self, timecode: FrameTimecode, frame_img: np.ndarray) -> float:
        score = self._one_pass_score(timecode, frame_img)
        scores = self.__dict__.setdefault("_scores", {})
        scores[timecode.frame_num] = score
        scores.pop(timecode.frame_num - 64, None)  # a cut is placed at most a window behind
        return score

    def cut_confidence(self, frame: int) -> float:
        """The margin of the frame's score over the threshold (see :func:`shot_detector.margin`)."""
        return margin(self.__dict__.get("_scores", {}).get(frame, 0.0), self._threshold)  # type: ignore[attr-defined]

    def _one_pass_score(self, timecode: FrameTimecode, frame_img: np.ndarray) -> float:
        if self._weights.delta_edges != 0.0 or self.stats_manager is not None:  # type: ignore[attr-defined]
            return super()._calculate_frame_score(timecode, frame_img)  # type: ignore[misc,no-any-return]
        hsv = cv2.cvtColor(frame_img, cv2.COLOR_BGR2HSV)
        last, self._last_hsv = self._last_hsv, hsv
        if last is None:
            return 0.0
        pixels = float(hsv.shape[0] * hsv.shape[1])
        hue, sat, lum, _ = cv2.sumElems(cv2.absdiff(hsv, last))
        components = ContentDetector.Components(
            delta_hue=hue / pixels, delta_sat=sat / pixels, delta_lum=lum / pixels, delta_edges=0.0
        )
        return sum(c * w for c, w in zip(components, self._weights, strict=True)) / sum(
            abs(w) for w in self._weights
        )


class _Adaptive(_OnePassScore, AdaptiveDetector):
    def cut_confidence(self, frame: int) -> float:
        """The margin of upstream's adaptive ratio (the frame's score over the mean of its window's)
        over its threshold, and of the score over its minimum content value: the smaller."""
        scores = self.__dict__.get("_scores", {})
        width = self.window_width
        window = [scores.get(frame + k, 0.0) for k in range(-width, width + 1) if k]
        average = sum(window) / (2.0 * width)
        score = scores.get(frame, 0.0)
        ratio = min(score / average, 255.0) if abs(average) >= 0.00001 else 255.0
        return min(margin(ratio, self.adaptive_threshold), margin(score, self.min_content_val))


class _Content(_OnePassScore, ContentDetector):
    pass


@dataclass(frozen=True)
class DetectorSpec:
    """The detector a request resolved to, with every parameter that shapes its cuts."""

    name: str
    threshold: float
    min_scene_len: int
    extra: tuple[tuple[str, Any], ...] = ()

    def provenance(self) -> dict[str, Any]:
        return {"detector_class": self.name, "threshold": self.threshold, "min_scene_len_frames": self.min_scene_len,
                **dict(self.extra)}


def build_detector(options: VideoOptions) -> tuple[Any, DetectorSpec]:
    """A fresh PySceneDetect detector for one video, and what it is (``detector`` adaptive or content)."""
    if options.detector == "combined":
        raise ValueError("the combined detector is not PySceneDetect's: use build_segmenter")
    if options.detector == "adaptive":
        threshold = options.adaptive_threshold if options.adaptive_threshold is not None else DEFAULT_ADAPTIVE_THRESHOLD
        detector: Any = _Adaptive(adaptive_threshold=threshold, min_scene_len=MIN_SCENE_LEN)
        extra = (("window_width", detector.window_width), ("min_content_val", detector.min_content_val))
        return detector, DetectorSpec("AdaptiveDetector", threshold, MIN_SCENE_LEN, extra)
    threshold = options.content_threshold if options.content_threshold is not None else DEFAULT_CONTENT_THRESHOLD
    detector = _Content(threshold=threshold, min_scene_len=MIN_SCENE_LEN)
    return detector, DetectorSpec("ContentDetector", threshold, MIN_SCENE_LEN)


class Segmenter(Protocol):
    """A shot detector as the extractor drives it: per decoded frame, ``prepare`` (any thread: the
    frame's sharpness and what ``push`` needs) then ``push`` (in order); ``take`` hands over the
    segment starts decided so far; frames before ``settled`` have their segment decided. ``size``
    is its analysis frame's (width, height) and ``factor`` the frame's width over that width."""

    settled: int
    size: tuple[int, int]
    factor: float

    def prepare(self, frame: Any) -> tuple[float, Any]: ...
    def push(self, index: int, prepared: Any) -> None: ...
    def finish(self) -> None: ...
    def take(self) -> list[Boundary]: ...


class _SceneDetectSegmenter:
    """PySceneDetect's detector, fed the exact analysis frames: a cut starts a shot; a frame is
    settled once the detector can no longer place a cut before it (its ``event_buffer_length``)."""

    def __init__(self, detector: Any, rate: Fraction, analysis: AnalysisFrames) -> None:
        self.detector = detector
        self.rate = rate
        self.analysis = analysis
        self.size, self.factor = analysis.size, analysis.factor
        self.lookback = detector.event_buffer_length
        self.settled = 0
        self._timecode: FrameTimecode | None = None
        self._out: list[Boundary] = []

    def prepare(self, frame: Any) -> tuple[float, Any]:
        small = self.analysis.small(frame)
        return sharpness(small), small

    def push(self, index: int, prepared: Any) -> None:
        self._timecode = FrameTimecode(index, fps=self.rate)
        self._out.extend(self._boundary(cut) for cut in self.detector.process_frame(self._timecode, prepared))
        self.settled = index - self.lookback + 1

    def finish(self) -> None:
        assert self._timecode is not None  # the reader refuses a stream with no frames
        self._out.extend(self._boundary(cut) for cut in self.detector.post_process(self._timecode))
        self.settled = self._timecode.frame_num + 1

    def take(self) -> list[Boundary]:
        out, self._out = self._out, []
        return out

    def _boundary(self, cut: FrameTimecode) -> Boundary:
        return Boundary(cut.frame_num, "shot", confidence=self.detector.cut_confidence(cut.frame_num))


class _CombinedSegmenter:
    def __init__(self, detector: CombinedDetector, frames: SignalFrames) -> None:
        self.detector = detector
        self.frames = frames
        self.size, self.factor = frames.size, frames.factor
        # The detector's own methods, bound once (each runs once a frame).
        self.prepare = frames.signals
        self.push = detector.push
        self.finish = detector.finish
        self.take = detector.take

    @property
    def settled(self) -> int:
        return self.detector.settled


def build_segmenter(options: VideoOptions, width: int, height: int, rate: Fraction) -> tuple[Segmenter, DetectorSpec]:
    """The shot detector the options name, ready for one video of this frame size and rate."""
    if options.detector == "combined":
        longest = max_transition_frames(width, height)
        frames = SignalFrames(width, height)
        spec = DetectorSpec("mediafleet.CombinedDetector", shot_detector.CUT_RATIO, 1, (
            ("lookahead_frames", shot_detector.LOOKAHEAD), ("max_transition_frames", longest),
            ("signals", "content, pixels, histogram, perceptual hash, edges, contrast"),
            ("analysis_frame", f"luma plane {'halved' if frames.halved else 'resized (linear)'} to "
                               f"{frames.size[0]}x{frames.size[1]}, thumbnail {frames.thumb[0]}x{frames.thumb[1]}"),
        ))
        return _CombinedSegmenter(CombinedDetector(longest), frames), spec
    detector, spec = build_detector(options)
    return _SceneDetectSegmenter(detector, rate, AnalysisFrames(width, height)), spec
