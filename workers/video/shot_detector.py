"""mediafleet's own shot detector: hard cuts and gradual transitions from signals of one decoding pass.

Every signal comes from the small grey frame and thumbnail the pass already makes for sharpness
(:class:`~mediafleet.workers.video.shots.SignalFrames`). ``mad`` and the contrast are measured on
every frame; ``pix`` and the colour histogram only where a decision reads them (a still picture's
frames need ``pix``, a moving one's rarely; the histogram only near a weak content step), from the
recent frames the detector holds, with the same values as measuring them every frame:

* **content**: the mean absolute colour change between consecutive frames on a ~64-pixel thumbnail
  (56-111 pixels on its longer side: 80 at 360p; ``mad``), and the share of analysis-frame pixels
  whose grey level moved by more than :data:`PIXEL_DELTA` (``pix``: a line added to a slide moves 1-3 % of the pixels, and nothing else
  does between two stills);
* **histogram**: the total-variation distance between consecutive 8x8x8 colour histograms of the
  thumbnail (blind to motion: a pan keeps its histogram, a cut does not);
* **contrast**: the thumbnail's grey standard deviation, whose ramp to or from a near-uniform frame
  is what a fade is;
* and, only where a decision needs them, a 64-bit DCT **perceptual hash**, a 32-bin grey histogram
  and the **edge** change ratio (Canny edges that appear or vanish) of the two frames in question.

Decisions, each made :data:`LOOKAHEAD` frames late so that what follows a frame is known:

* a **cut** at frame ``t`` is a step: ``mad`` at ``t`` at least :data:`CUT_RATIO` times its
  neighbours' (two frames each side; the two frames either side of a pair of big steps, where the
  new shot's first frame is unlike its second; or a histogram or pixel step with a weaker content
  step), and persistent: ``t`` unlike every one of the :data:`LOOKAHEAD` frames before ``t - 1``,
  and ``t - 1`` unlike every one after ``t``, so neither end of a flash of up to that many frames
  (which returns to the picture it left) is a cut. A small step (under :data:`STRONG_MAD`:
  near-identical pictures, like two slides) must also move some pixels by :data:`PIXEL_DELTA` (a
  codec's refresh moves every pixel a little) and show in at least two of the perceptual hash,
  the grey histogram and the edges (a counter ticking in a still picture shows in none);
* a **gradual transition** opens where ``mad`` rises well above its level since the last boundary
  and closes where it falls back (or, once the picture went near-uniform, where the contrast stops
  rising). It is kept when the frames before and after it differ (as a cut's would), the path
  between them is nearly straight (a dissolve or a wipe moves each pixel once, motion moves it
  back and forth) and its frames are a blend of the two (dissolve; a fade where one side is
  near-uniform) or a pixel-wise choice between them (wipe). A fade to a near-uniform frame and back
  to the same picture (by content or perceptual hash) is inside a shot and reports nothing.

A transition reports its own frames: the shot before it ends where it starts and the next starts
after its last frame (:class:`Boundary`). A candidate longer than the detector's ``max_transition``
frames is motion, not a transition, and is dropped: the extractor must hold the frames of an open
candidate (their shot is not known yet), so that length is bounded by memory at large frame sizes
(:func:`max_transition_frames`).
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np

from mediafleet.workers.video.frame_signals import PIXEL_DELTA, FrameSignals
from mediafleet.workers.video.frame_signals import edge_change as _edge_change
from mediafleet.workers.video.frame_signals import mad as _mad
from mediafleet.workers.video.frame_signals import median as _median
from mediafleet.workers.video.frame_signals import phash as _phash
from mediafleet.workers.video.frame_signals import shifted_left as _shifted_left

__all__ = [
    "LOOKAHEAD",
    "Boundary",
    "CombinedDetector",
    "margin",
    "max_transition_frames",
    "share_margin",
]

TransitionKind = Literal["dissolve", "fade", "wipe"]

LOOKAHEAD = 6  # frames a decision waits for; also the longest flash that is never a cut
# Cuts: the content step against the largest of the two frames either side (+ a noise floor).
CUT_RATIO = 2.5
CUT_FLOOR = 0.5
CUT_MIN_MAD = 1.0
CUT_WEAK_RATIO = 1.5  # the content step that must come with a histogram or pixel step
HIST_MIN, HIST_RATIO, HIST_FLOOR = 0.15, 3.0, 0.02
PIX_MIN, PIX_RATIO, PIX_FLOOR = 0.003, 4.0, 0.001
PERSIST = 0.5  # the change must stay at least this share of the step for LOOKAHEAD frames
# A small content step (near-identical pictures, like two slides) is a cut only where at least two
# of the structure signals also see it: pHash bits, grey-histogram distance, edge change ratio.
STRONG_MAD = 8.0
WEAK_MAD = 4.0  # under it, a step that moves no pixel by PIXEL_DELTA is a codec's refresh, not a cut
WEAK_VOTES = 2
HASH_BITS, GREY_HIST, EDGE_CHANGE = 5, 0.012, 0.075
# Gradual transitions.
BASELINE_FRAMES = 10
ENTER_ABS, ENTER_K, ENTER_C = 1.5, 2.0, 1.0
STAY_ABS, STAY_SHARE = 1.0, 0.6
# Near-uniform (what a fade passes through): a grey std under MONO_SHARE of the picture's before,
# and either under MONO_ABS or dark (mean grey under DARK: black with a caption left on it).
MONO_ABS, MONO_SHARE, DARK = 4.0, 0.12, 32.0
MONO_HOLD = 12  # a near-uniform stretch this long ends a fade-out (the uniform frames are a shot)
PLATEAU = 0.97  # a fade-in is over when the contrast reaches this share of the next frames'
MIN_TRANSITION = 3
MIN_CHANGE = 5.0  # mad between the frames before and after a transition
STRAIGHT_MIN = 0.4
RESIDUAL_MAX = 0.35
FADE_SHARE = 0.25  # a near-uniform side with under this share of the other's contrast: a fade
SAME_SHOT = 0.3  # a fade's two sides within this share of their change to the uniform frame
SAME_HASH_BITS = 6
MAX_TRANSITION = 60
# Local cuts (a few percent of a still frame changing: slide text, a screen's window): the share of
# analysis pixels that must change by PIXEL_DELTA where nothing changed in the two frames either
# side (a typed character or a caret moves about a third of it, a word of slide text two to six times).
LOCAL_MIN = 0.0015
LOCAL_MAD_MAX = 16.0  # frames whose picture moves more than this are left to the content step
# and the content step must still stand out: mad at least LOCAL_STEP times its neighbours' (+ a
# floor far under CUT_FLOOR: a word of text moves the thumbnail by a tenth of a grey level).
LOCAL_STEP, LOCAL_FLOOR = 2.5, 0.02
# A local cut is held this many frames (at most the detector's max_transition): if the same region
# changes again meanwhile (this share of its pixels), it is a display that keeps changing (a clock,
# a counter ticking each second), not a cut.
LOCAL_HORIZON, LOCAL_REPEAT = 28, 0.3
LOCAL_BUSY = 7  # pixels around what changed in the neighbouring frames that count as busy too
LOCAL_KEEP = 0.5  # the changed region must stay this unlike the frame before it for LOOKAHEAD frames
LOCAL_STILL = 0.25  # and move no more than this share of its pixels in the frames before and after
# A step that a vertical or horizontal shift of the frame before explains (all but this share of its
# moved pixels) is a scroll or a pan, not a cut; searched up to a quarter of the frame.
SHIFT_LEFT = 0.35
SHIFT_MAD_MAX = 16.0  # a content step this large is never a shifted picture
SHIFT_MIN = 0.02  # nor is one that moves under this share of the pixels (a scroll moves a whole window)
CONFIDENCE_CAP = 0.99  # a measurement is never certainty
_HOLD_BYTES = 160 << 20
_UNSET = float("nan")  # a lazily measured signal not measured yet


def margin(measured: float, threshold: float) -> float:
    """The confidence a decision's margin gives: 0.5 where the measurement just meets its threshold,
    ``1 - threshold / (2 * measured)`` above it (0.75 at twice it), at most :data:`CONFIDENCE_CAP`."""
    if measured <= 0 or threshold <= 0:
        return CONFIDENCE_CAP if measured > 0 or threshold <= 0 else 0.5
    return round(min(CONFIDENCE_CAP, max(0.5, 1.0 - 0.5 * threshold / measured)), 3)


def share_margin(measured: float, threshold: float) -> float:
    """The confidence a share's margin gives (a measurement that cannot pass 1): 0.5 where it just
    meets its threshold, rising linearly to 1 at a share of 1, at most :data:`CONFIDENCE_CAP`."""
    if threshold >= 1.0:
        return 0.5
    return round(min(CONFIDENCE_CAP, max(0.5, 0.5 + 0.5 * (measured - threshold) / (1.0 - threshold))), 3)


def max_transition_frames(width: int, height: int) -> int:
    """The longest transition the detector waits for: :data:`MAX_TRANSITION` frames, fewer where
    holding that many decoded frames would pass ~160 MB (1080p: 53; 4K UHD: 13)."""
    frame_bytes = max(1, width * height * 3 // 2)
    return max(12, min(MAX_TRANSITION, _HOLD_BYTES // frame_bytes))


@dataclass(frozen=True)
class Boundary:
    """Where a segment starts: a shot (after a cut or a transition) or a gradual transition."""

    first: int  # 0-based index of the segment's first frame
    kind: Literal["shot", "transition"]
    transition: TransitionKind | None = None
    confidence: float = CONFIDENCE_CAP  # the detector's margin over its thresholds (see :func:`margin`)


@dataclass
class _Candidate:
    start: int
    baseline: float
    std_before: float
    mono_first: int | None = None
    mono_last: int | None = None
    confidence: float = CONFIDENCE_CAP


class CombinedDetector:
    """Feed every frame's :class:`FrameSignals` in order with :meth:`push`, then :meth:`finish`.

    :meth:`take` hands over the boundaries decided so far, in order; every frame before
    :attr:`settled` has its segment decided (the extractor assigns frames up to there).
    """

    def __init__(self, max_transition: int = MAX_TRANSITION) -> None:
        self.max_transition = max_transition
        self.settled = 0
        # Per frame, 8 bytes each (a 3-hour video at 30 fps: 13 MB for the five). ``pix`` and ``hist``
        # are measured only when a decision reads them (NaN until then): most frames' never do.
        self._mad = array("d")
        self._pix = array("d")
        self._hist = array("d")
        self._std = array("d")
        self._mean = array("d")
        self._frames: dict[int, FrameSignals] = {}  # the recent frames' signals (see _forget)
        self._moved: dict[int, np.ndarray] = {}  # frame -> its pixels that moved from the frame before
        self._oldest = 0  # the oldest frame _frames may still hold
        self._last: FrameSignals | None = None
        self._out: deque[Boundary] = deque()
        self._stepped = 0  # frames whose decision has been made
        self._last_cut = 0  # where the current segment's level starts (frame 0 opens the first)
        self._candidate: _Candidate | None = None
        self._held: tuple[int, float, np.ndarray, int] | None = None  # a local cut: frame, confidence, region, size
        self._region: np.ndarray | None = None  # the region of the local cut _is_cut just found
        self._count = 0

    # --- feeding ----------------------------------------------------------------------------

    def push(self, index: int, signals: FrameSignals) -> None:
        if index != self._count:
            raise ValueError("frames must be pushed in order, each once")
        self._count += 1
        last = self._last
        if last is None or last.grey.shape != signals.grey.shape:
            self._mad.append(0.0)
            self._pix.append(0.0)
            self._hist.append(0.0)
        else:
            self._mad.append(_mad(signals.thumb8, last.thumb8))
            self._pix.append(_UNSET)
            self._hist.append(_UNSET)
        self._std.append(signals.std)
        self._mean.append(signals.mean)
        self._frames[index] = self._last = signals
        while self._stepped <= index - LOOKAHEAD:
            self._step(self._stepped)

    def _pix_at(self, k: int) -> float:
        """The share of pixels whose grey moved by more than PIXEL_DELTA from frame ``k - 1`` to ``k``."""
        value = self._pix[k]
        if value != value:  # NaN: not measured yet
            moved = self._moved_at(k)
            value = self._pix[k] = cv2.countNonZero(moved) / moved.size
        return value

    def _moved_at(self, k: int) -> np.ndarray:
        """The mask (255) of the pixels whose grey moved by more than PIXEL_DELTA from frame ``k - 1``."""
        mask = self._moved.get(k)
        if mask is None:
            a, b = self._frames[k - 1].grey, self._frames[k].grey
            if a.shape != b.shape:
                mask = np.full(b.shape, 255, np.uint8)
            else:
                mask = cv2.threshold(cv2.absdiff(b, a), PIXEL_DELTA, 255, cv2.THRESH_BINARY)[1]
            self._moved[k] = mask
        return mask

    def _hist_at(self, k: int) -> float:
        """The total-variation distance of the colour histograms of frames ``k - 1`` and ``k``."""
        value = self._hist[k]
        if value != value:
            value = self._hist[k] = 0.5 * cv2.norm(self._frames[k].hist, self._frames[k - 1].hist, cv2.NORM_L1)
        return value

    def finish(self) -> None:
        """Decide the last frames (with what follows them, however little) and any open candidate."""
        while self._stepped < self._count:
            self._step(self._stepped)
        self._release_held()
        candidate = self._candidate
        if candidate is not None:
            self._candidate = None
            if candidate.mono_first is not None and candidate.mono_first - candidate.start >= MIN_TRANSITION:
                # A fade-out that the video ends in: the uniform frames after it are a shot.
                self._emit_transition(candidate, candidate.mono_first - 1, "fade")
                self._cut(candidate.mono_first, candidate.confidence)
            else:
                self._release(candidate)
        self.settled = self._count

    def take(self) -> list[Boundary]:
        if not self._out:
            return []
        out = list(self._out)
        self._out.clear()
        return out

    # --- cuts -------------------------------------------------------------------------------

    def _is_cut(self, t: int) -> float | None:
        """The confidence of a cut at frame ``t``, or None: a step of the whole picture, or of a small
        region of a still one, that no shift of the frame before explains."""
        self._region = None
        if t == 0:
            return None
        confidence = self._frame_cut(t)
        if confidence is None:
            confidence = self._local_cut(t)
        if confidence is None or self._mad[t] >= SHIFT_MAD_MAX:
            return confidence
        left = self._shift_left(t)
        return None if left < SHIFT_LEFT else min(confidence, share_margin(left, SHIFT_LEFT))

    def _frame_cut(self, t: int) -> float | None:
        """A step of the whole picture at ``t`` (see the module's docstring), with its confidence."""
        mads, count = self._mad, self._count
        mad = mads[t]
        if mad < CUT_MIN_MAD and self._pix_at(t) < PIX_MIN:
            return None
        near = [k for k in (t - 2, t - 1, t + 1, t + 2) if 1 <= k < count]
        content = mad / (max([mads[k] for k in near], default=0.0) + CUT_FLOOR)
        if content < CUT_RATIO and t + 1 < count and mads[t + 1] >= mad / CUT_RATIO:
            # Two big steps in a row (the new shot's first frame unlike its second): the frames either
            # side of the pair set the level, and the cut is the first step.
            outer = [k for k in (t - 2, t - 1, t + 2, t + 3) if 1 <= k < count]
            content = mad / (max([mads[k] for k in outer], default=0.0) + CUT_FLOOR)
        step = mad >= CUT_MIN_MAD and content >= CUT_RATIO
        confidence = CONFIDENCE_CAP
        if not step and content < CUT_WEAK_RATIO:
            return None
        if step:
            confidence = margin(content, CUT_RATIO)
        else:
            # A histogram or pixel step with a weaker content step (measured lazily, in this order).
            hist, pix = self._hist_at, self._pix_at
            if hist(t) >= HIST_MIN:
                hist_step = hist(t) / (max([hist(k) for k in near], default=0.0) + HIST_FLOOR)
                if hist_step >= HIST_RATIO:
                    step, confidence = True, min(margin(content, CUT_WEAK_RATIO), margin(hist_step, HIST_RATIO))
            if not step and pix(t) >= PIX_MIN:
                pix_step = pix(t) / (max([pix(k) for k in near], default=0.0) + PIX_FLOOR)
                if pix_step >= PIX_RATIO:
                    step, confidence = True, min(margin(content, CUT_WEAK_RATIO), margin(pix_step, PIX_RATIO))
        if not step:
            return None
        # Persistent: the picture after the step never returns to the one before it, nor does the
        # one before it resemble what follows (the end of a flash).
        need = PERSIST * mad
        frames = self._frames
        before, after = frames[t - 1].thumb8, frames[t].thumb8
        kept = float("inf")
        for j in range(1, LOOKAHEAD + 1):
            if t + j < count:
                kept = min(kept, _mad(before, frames[t + j].thumb8))
            if t - 1 - j >= 0 and (t - 1 - j) in frames:
                kept = min(kept, _mad(frames[t - 1 - j].thumb8, after))
            if kept < need:
                return None
        confidence = min(confidence, share_margin(min(1.0, kept / mad), PERSIST))
        if mad >= STRONG_MAD:
            return confidence
        # A small step must move some pixels far (a codec's refresh shifts every pixel a little) and
        # show in the picture's structure.
        if (self._pix_at(t) >= PIX_MIN or mad >= WEAK_MAD) and self._structure_votes(t) >= WEAK_VOTES:
            return confidence
        return None

    def _local_cut(self, t: int) -> float | None:
        """A step confined to a region of a still picture (a slide's text, a screen's window), with its
        confidence: pixels that move at ``t`` where nothing moved in the two frames either side,
        enough of them (:data:`LOCAL_MIN`), unlike the frame before for the next LOOKAHEAD frames
        and still in the LOOKAHEAD frames before and after (a caret, a cursor or typing never
        qualifies: too small, or moving again at once)."""
        count, mads = self._count, self._mad
        mad = mads[t]
        if mad >= LOCAL_MAD_MAX or t + 2 >= count or t < 3:
            return None
        if mad < LOCAL_STEP * (max(mads[t - 2], mads[t - 1], mads[t + 1], mads[t + 2]) + LOCAL_FLOOR):
            return None
        if self._pix_at(t) < LOCAL_MIN:
            return None
        moved = self._moved_at(t)
        busy = np.zeros_like(moved)
        for k in (t - 2, t - 1, t + 1, t + 2):
            if 1 <= k < count and k - 1 in self._frames:
                busy = cv2.bitwise_or(busy, self._moved_at(k))
        busy = cv2.dilate(busy, np.ones((LOCAL_BUSY, LOCAL_BUSY), np.uint8))
        new = cv2.bitwise_and(moved, cv2.bitwise_not(busy))
        changed = cv2.countNonZero(new)
        if changed < LOCAL_MIN * moved.size:
            return None
        frames = self._frames
        before, after = frames[t - 1].grey, frames[t].grey

        def share(a: np.ndarray, b: np.ndarray) -> float:
            """The share of the new region's pixels that differ between two frames."""
            if a.shape != b.shape:
                return 1.0
            differ = cv2.threshold(cv2.absdiff(a, b), PIXEL_DELTA, 255, cv2.THRESH_BINARY)[1]
            return cv2.countNonZero(cv2.bitwise_and(differ, new)) / changed

        kept, moving = 1.0, 0.0
        for j in range(1, LOOKAHEAD + 1):
            if t + j < count:
                later = frames[t + j].grey
                kept, moving = min(kept, share(before, later)), max(moving, share(after, later))
            if (t - 1 - j) in frames:
                moving = max(moving, share(before, frames[t - 1 - j].grey))
            if kept < LOCAL_KEEP or moving > LOCAL_STILL:
                return None
        self._region = new
        return min(margin(changed / moved.size, LOCAL_MIN), share_margin(kept, LOCAL_KEEP),
                   share_margin(1.0 - moving, 1.0 - LOCAL_STILL))

    def _shift_left(self, t: int) -> float:
        """The share of the pixels moved at ``t`` that the best vertical or horizontal shift of frame
        ``t - 1`` (up to a quarter of the frame, half-pixel steps) leaves unexplained."""
        a, b = self._frames[t - 1].grey, self._frames[t].grey
        if a.shape != b.shape:
            return 1.0
        moved = self._moved_at(t)
        total = cv2.countNonZero(moved)
        if total < SHIFT_MIN * moved.size:
            return 1.0
        points = cv2.findNonZero(moved)
        x, y, w, h = cv2.boundingRect(points)
        best = _shifted_left(a, b, moved, (y, y + h), (x, x + w), total)
        if best >= SHIFT_LEFT:
            best = min(best, _shifted_left(a.T, b.T, moved.T, (x, x + w), (y, y + h), total))
        return best

    def _structure_votes(self, t: int) -> int:
        """How many of pHash, grey histogram and edges see a change between frames ``t - 1`` and ``t``."""
        a, b = self._frames[t - 1].grey, self._frames[t].grey
        if a.shape != b.shape:
            return WEAK_VOTES
        bits = (_phash(a) ^ _phash(b)).bit_count()
        ha, hb = (cv2.calcHist([g], [0], None, [32], [0, 256]).ravel() / g.size for g in (a, b))
        return (bits >= HASH_BITS) + (0.5 * float(np.abs(ha - hb).sum()) >= GREY_HIST) + (
            _edge_change(a, b) >= EDGE_CHANGE)

    # --- the one decision per frame ---------------------------------------------------------

    def _step(self, t: int) -> None:
        self._stepped = t + 1
        if self._held is not None:
            self._watch_held(t)
        cut = self._is_cut(t)
        candidate = self._candidate
        if candidate is None:
            if cut is not None and self._region is not None:
                self._release_held()
                self._held = (t, cut, self._region, cv2.countNonZero(self._region))
            elif cut is not None:
                self._cut(t, cut)
            else:
                baseline = self._baseline(t)
                if baseline is not None and self._mad[t] > max(ENTER_ABS, ENTER_K * baseline + ENTER_C):
                    self._candidate = _Candidate(t, baseline, self._std[t - 1])
        else:
            self._advance(candidate, t, cut)
        candidate = self._candidate
        self.settled = candidate.start if candidate is not None else t + 1
        if self._held is not None:
            self.settled = min(self.settled, self._held[0])
        self._forget()

    def _watch_held(self, t: int) -> None:
        """A held local cut: dropped if its region changes again at ``t``, released once it has been
        held long enough."""
        held = self._held
        if held is None or t <= held[0]:
            return
        first, _, region, size = held
        if t - first > min(LOCAL_HORIZON, self.max_transition):
            self._release_held()
        elif (t - 1) in self._frames and cv2.countNonZero(cv2.bitwise_and(self._moved_at(t), region)) >= LOCAL_REPEAT * size:
            self._held = None

    def _release_held(self) -> None:
        """The held local cut is a cut: report it (before any boundary after it)."""
        held, self._held = self._held, None
        if held is not None:
            self._out.append(Boundary(held[0], "shot", confidence=held[1]))
            self._last_cut = max(self._last_cut, held[0])

    def _cut(self, t: int, confidence: float) -> None:
        self._release_held()
        self._out.append(Boundary(t, "shot", confidence=confidence))
        self._last_cut = t

    def _uniform(self, t: int) -> bool:
        return self._std[t] < MONO_ABS or self._mean[t] < DARK

    def _baseline(self, t: int) -> float | None:
        first = max(self._last_cut + 1, t - BASELINE_FRAMES)
        if t - first < 3:
            return None
        return _median(self._mad[first:t])

    def _advance(self, candidate: _Candidate, t: int, cut: float | None) -> None:
        if cut is not None:
            self._candidate = None
            if candidate.mono_first is not None and candidate.mono_first - candidate.start >= MIN_TRANSITION:
                self._emit_transition(candidate, candidate.mono_first - 1, "fade")  # faded out, then a cut
            else:
                self._release(candidate)
            self._cut(t, cut)
            return
        mono = self._std[t] < MONO_SHARE * candidate.std_before and self._uniform(t)
        if mono:
            if candidate.mono_first is None:
                candidate.mono_first = t
                candidate.confidence = margin(MONO_SHARE * candidate.std_before, max(self._std[t], 1e-3))
            candidate.mono_last = t
            if t - candidate.mono_first + 1 >= MONO_HOLD:  # faded out and stays uniform
                self._candidate = None
                if candidate.mono_first - candidate.start >= MIN_TRANSITION:
                    self._emit_transition(candidate, candidate.mono_first - 1, "fade")
                    self._cut(candidate.mono_first, candidate.confidence)
                else:
                    self._release(candidate)
                return
        elif candidate.mono_first is not None or self._uniform(candidate.start - 1):
            # Fading in: over where the contrast stops rising.
            ahead = self._std[t + 1 : t + 1 + 5]
            if not ahead or self._std[t] >= PLATEAU * _median(ahead):
                self._candidate = None
                self._close(candidate, t - 1)
                return
        else:
            level = _median(self._mad[candidate.start : t]) if t > candidate.start else self._mad[t]
            stay = max(STAY_ABS, STAY_SHARE * level)
            if self._mad[t] < stay and (t + 1 >= self._count or self._mad[t + 1] < stay):
                # The last raised step (at t - 1) is the one into the next shot's first frame.
                self._candidate = None
                self._close(candidate, t - 2)
                return
        if t - candidate.start + 1 > self.max_transition:
            self._candidate = None
            self._release(candidate)

    # --- closing a candidate ----------------------------------------------------------------

    def _close(self, candidate: _Candidate, last: int) -> None:
        kind = self._verify(candidate, last)
        if kind == "inside":  # a fade to uniform and back inside one shot: nothing happened
            self._last_cut = last + 1
        elif kind is None:
            self._release(candidate)
        else:
            self._emit_transition(candidate, last, kind)
            self._out.append(Boundary(last + 1, "shot", confidence=candidate.confidence))
            self._last_cut = last + 1

    def _verify(self, candidate: _Candidate, last: int) -> TransitionKind | Literal["inside"] | None:
        first = candidate.start
        if last - first + 1 < MIN_TRANSITION or first < 1 or last + 1 >= self._count:
            return None
        frames = self._frames
        a, b = frames[first - 1].thumb, frames[last + 1].thumb
        if any(frames[k].thumb8.shape != a.shape for k in range(first - 1, last + 2)):
            return None  # the frame size changed: not a transition
        change = _mad(a, b)
        if candidate.mono_first is not None:
            mono = frames[candidate.mono_first].thumb
            depth = max(_mad(a, mono), _mad(b, mono))
            grey_a, grey_b = (cv2.cvtColor(x.astype(np.uint8), cv2.COLOR_BGR2GRAY) for x in (a, b))
            if change < SAME_SHOT * depth or (_phash(grey_a) ^ _phash(grey_b)).bit_count() <= SAME_HASH_BITS:
                return "inside"
            candidate.confidence = min(candidate.confidence, margin(change, SAME_SHOT * depth))
            return "fade"
        least = max(MIN_CHANGE, 2.5 * (candidate.baseline + CUT_FLOOR))
        if change < least:
            return None
        path = sum(self._mad[first : last + 2])
        if change < STRAIGHT_MIN * path:
            return None
        n = last - first + 1
        picks = sorted({first + round(q * (n - 1)) for q in (0.25, 0.5, 0.75)})
        dissolve = wipe = 0.0
        span = b - a
        norm = float(np.vdot(span, span)) or 1.0
        for k in picks:
            frame = frames[k].thumb
            alpha = min(1.0, max(0.0, float(np.vdot(frame - a, span)) / norm))
            dissolve += _mad(frame, a + alpha * span)
            wipe += float(np.minimum(np.abs(frame - a).sum(axis=2), np.abs(frame - b).sum(axis=2)).mean()) / 3
        dissolve, wipe = dissolve / len(picks), wipe / len(picks)
        if min(dissolve, wipe) > RESIDUAL_MAX * change:
            return None
        candidate.confidence = min(margin(change, least), share_margin(min(1.0, change / path), STRAIGHT_MIN),
                                   share_margin(1.0 - min(dissolve, wipe) / change, 1.0 - RESIDUAL_MAX))
        (low, side), (high, _) = sorted(((self._std[first - 1], first - 1), (self._std[last + 1], last + 1)))
        if low < FADE_SHARE * high and self._uniform(side):  # one side near-uniform: a fade in or out
            return "fade"
        return "wipe" if wipe < dissolve else "dissolve"

    def _emit_transition(self, candidate: _Candidate, last: int, kind: TransitionKind) -> None:
        self._release_held()
        self._out.append(Boundary(candidate.start, "transition", kind, candidate.confidence))
        self._last_cut = last + 1

    def _release(self, candidate: _Candidate) -> None:
        """Not a transition: its frames stay in the current shot (the machine goes on after them)."""

    def _forget(self) -> None:
        # The map holds consecutive frames (pushed in order), so the oldest go first. What stays
        # covers every frame a decision reads: the persistence test's LOOKAHEAD frames before a
        # step, the frames before the next steps (``pix`` and ``hist`` of t - 2, measured lazily,
        # read frame t - 3), and an open candidate's frames.
        keep = self._stepped - LOOKAHEAD - 2
        if self._candidate is not None:
            keep = min(keep, self._candidate.start - 1)
        frames, moved, oldest = self._frames, self._moved, self._oldest
        while oldest < keep:
            frames.pop(oldest, None)
            moved.pop(oldest, None)
            oldest += 1
        self._oldest = oldest
