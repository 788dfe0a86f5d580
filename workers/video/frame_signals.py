"""What the shot detector measures of frames (:mod:`mediafleet.workers.video.shot_detector`): one
frame's signals (its small grey frame, its thumbnail, contrast, colour histogram), and the
comparisons of two frames a decision reads (content change, perceptual hash, edge change, the shift
that explains a scroll)."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

__all__ = ["PIXEL_DELTA", "SHIFT_CANDIDATES", "THUMB", "FrameSignals", "edge_change", "frame_signals", "mad", "median",
           "phash", "shifted_left", "thumb_size"]

THUMB = 64  # the thumbnail's longer side, about: the analysis frame halved until it is under 112 pixels (56-111)
PIXEL_DELTA = 24  # grey levels a pixel must move to count in ``pix``


def thumb_size(width: int, height: int) -> tuple[int, int]:
    """The thumbnail's (width, height) for an analysis frame of this size: halved (odd pixels
    dropped) while the longer side is at least ``2 * THUMB - 16`` pixels."""
    while max(width, height) >= 2 * THUMB - 16 and min(width, height) >= 4:
        width, height = width // 2, height // 2
    return width, height


class FrameSignals:
    """What one analysis frame contributes, computed without any other frame (any thread).

    The colour histogram is made only when a decision asks for it (:attr:`hist`): most frames'
    decisions never read it.
    """

    __slots__ = ("grey", "thumb8", "std", "mean", "_hist")

    def __init__(self, grey: np.ndarray, thumb8: np.ndarray, std: float, mean: float) -> None:
        self.grey = grey  # the analysis frame in grey (uint8)
        self.thumb8 = thumb8  # the ~64-pixel colour thumbnail (uint8)
        self.std = std  # the thumbnail's grey standard deviation
        self.mean = mean  # and its mean
        self._hist: np.ndarray | None = None

    @classmethod
    def of(cls, grey: np.ndarray, thumb: np.ndarray, thumb_grey: np.ndarray) -> FrameSignals:
        """The signals of a grey analysis frame, its BGR thumbnail (uint8) and that in grey."""
        mean, std = cv2.meanStdDev(thumb_grey)
        return cls(grey, thumb, float(std[0, 0]), float(mean[0, 0]))

    @property
    def thumb(self) -> np.ndarray:
        """The thumbnail in float32 (what a transition's verification computes with)."""
        return self.thumb8.astype(np.float32)

    @property
    def hist(self) -> np.ndarray:
        """The thumbnail's normalised 8x8x8 colour histogram (made once, on first use)."""
        hist = self._hist
        if hist is None:
            hist = cv2.calcHist([self.thumb8], [0, 1, 2], None, [8, 8, 8], [0, 256, 0, 256, 0, 256]).ravel()
            hist /= max(1.0, float(hist.sum()))
            self._hist = hist
        return hist


def frame_signals(small_bgr: np.ndarray, grey: np.ndarray) -> FrameSignals:
    """The per-frame signals of a BGR analysis frame and its grey version."""
    thumb = small_bgr
    while max(thumb.shape[:2]) >= 2 * THUMB - 16 and min(thumb.shape[:2]) >= 4:
        # Halving by pixel-pair means is OpenCV's fast area path (other ratios cost 5-15x as much).
        height, width = thumb.shape[0] & ~1, thumb.shape[1] & ~1
        thumb = cv2.resize(thumb[:height, :width], (width // 2, height // 2), interpolation=cv2.INTER_AREA)
    return FrameSignals.of(grey, thumb, cv2.cvtColor(thumb, cv2.COLOR_BGR2GRAY))


def mad(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two thumbnails (0-255); frames of another size are all change.

    The same sum for uint8 and float32 thumbnails: whole numbers, summed exactly."""
    if a.shape != b.shape:
        return 255.0
    return float(cv2.norm(a, b, cv2.NORM_L1)) / a.size


def median(values: Sequence[float]) -> float:
    """``statistics.median`` (the same values, the same mean of the middle pair), without its checks."""
    ordered = sorted(values)
    n = len(ordered)
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def phash(grey: np.ndarray) -> int:
    """A 64-bit DCT hash (the pHash recipe: 32x32, the 8x8 low frequencies against their median)."""
    low = cv2.dct(cv2.resize(grey, (32, 32), interpolation=cv2.INTER_AREA).astype(np.float32))[:8, :8].ravel()
    bits = np.packbits(low > np.median(low))
    return int.from_bytes(bits.tobytes(), "big")


_EDGE_KERNEL = np.ones((3, 3), np.uint8)


SHIFT_CANDIDATES = 6  # shifts checked pixel by pixel: those whose row means match best


def shifted_left(a: np.ndarray, b: np.ndarray, moved: np.ndarray, rows: tuple[int, int], cols: tuple[int, int],
                  total: int) -> float:
    """The least share of ``total`` moved pixels left unexplained when the rows ``rows`` (columns
    ``cols``) of ``b`` are matched against ``a`` shifted vertically by ``dy`` or ``dy + 1/2``
    pixels (up to a third of the moved region's height): a pixel is explained where it lies within
    PIXEL_DELTA of row ``y + dy``, ``y + dy + 1`` or their mean (a scroll rarely moves a whole
    number of analysis pixels). Only the :data:`SHIFT_CANDIDATES` shifts whose row means (over
    ``cols``) match best are checked, on every other row and column."""
    r0, r1 = rows
    c0, c1 = cols
    height = a.shape[0]
    # A scroll moves the whole region it scrolls, several times the shift: a line added under the
    # last (a region one line high) is never explained by shifting the line above it down.
    reach = min(max(2, height // 4), (r1 - r0) // 3)
    means_a = cv2.reduce(a[:, c0:c1], 1, cv2.REDUCE_AVG, dtype=cv2.CV_32F).ravel()
    means_b = cv2.reduce(b[:, c0:c1], 1, cv2.REDUCE_AVG, dtype=cv2.CV_32F).ravel()
    shifts = np.array([dy for dy in range(-reach, reach + 1) if dy not in (0, -1)], np.int64)  # not the step
    if shifts.size == 0:
        return 1.0
    ys = np.arange(r0, r1)
    source = ys[None, :] + shifts[:, None]  # row y of b against rows y + dy and y + dy + 1 of a
    valid = (source >= 0) & (source + 1 < height)
    source = np.clip(source, 0, height - 2)
    target, upper, lower = means_b[ys][None, :], means_a[source], means_a[source + 1]
    error = np.minimum(np.minimum(np.abs(target - upper), np.abs(target - lower)),
                       np.abs(target - 0.5 * (upper + lower)))
    kept = valid.sum(axis=1)
    # The mean error over the rows compared, scaled up by the rows left out (which count against it).
    ranking = np.where(kept >= 4, np.where(valid, error, 0.0).sum(axis=1) * (r1 - r0) / np.maximum(kept, 1) ** 2,
                       np.inf)
    ranked = [(float(ranking[k]), int(shifts[k])) for k in np.argsort(ranking, kind="stable")[:SHIFT_CANDIDATES]
              if np.isfinite(ranking[k])]
    # Checked on every other row and column (the moved pixels counted on the same grid).
    total = max(1, cv2.countNonZero(np.ascontiguousarray(moved[r0:r1:2, c0:c1:2])))
    best = 1.0
    for _, dy in ranked:
        lo, hi = max(r0, -dy), min(r1, height - dy - 1)
        lo += (lo - r0) % 2  # on the grid
        target = np.ascontiguousarray(b[lo:hi:2, c0:c1:2])
        upper = np.ascontiguousarray(a[lo + dy:hi + dy:2, c0:c1:2])
        lower = np.ascontiguousarray(a[lo + dy + 1:hi + dy + 1:2, c0:c1:2])
        error = cv2.min(cv2.min(cv2.absdiff(target, upper), cv2.absdiff(target, lower)),
                        cv2.absdiff(target, cv2.addWeighted(upper, 0.5, lower, 0.5, 0)))
        unexplained = cv2.countNonZero(cv2.threshold(error, PIXEL_DELTA, 255, cv2.THRESH_BINARY)[1])
        unexplained += cv2.countNonZero(np.ascontiguousarray(moved[r0:lo:2, c0:c1:2]))
        unexplained += cv2.countNonZero(np.ascontiguousarray(moved[lo + (hi - lo + 1) // 2 * 2:r1:2, c0:c1:2]))
        best = min(best, unexplained / total)
    return best


def edge_change(a: np.ndarray, b: np.ndarray) -> float:
    """The edge change ratio: the larger share of edge pixels that appear or vanish (one pixel of slack)."""
    edges_a, edges_b = cv2.Canny(a, 100, 200), cv2.Canny(b, 100, 200)
    near_a, near_b = cv2.dilate(edges_a, _EDGE_KERNEL), cv2.dilate(edges_b, _EDGE_KERNEL)
    entering = cv2.countNonZero(cv2.bitwise_and(edges_b, cv2.bitwise_not(near_a))) / max(1, cv2.countNonZero(edges_b))
    leaving = cv2.countNonZero(cv2.bitwise_and(edges_a, cv2.bitwise_not(near_b))) / max(1, cv2.countNonZero(edges_a))
    return max(entering, leaving)
