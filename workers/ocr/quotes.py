"""Quotes told apart by their shape: straight ``'``, or curly ``’`` and ``‘``; and the double ones alike.

The recognisers read most quote marks as the ASCII apostrophe, whichever glyph the page shows
(on real scanned pages set in TeX and Nimbus fonts, most curly quotes came back as ``'``, each one a
wrong word: "it's" for "it’s"). The line image tells them apart. A straight quote is a short
vertical wedge or bar: every row of it is centred on the same column. A curly one is a comma
raised to cap height: a round head over a thin tail that swings sideways, so the centres of its
rows wander; its ink gathers at the top for a closing quote or apostrophe (``’``), at the bottom
for an opening one (``‘``).

For each single quote the recogniser read, the mark is found in the line's crop: the ink
component (pixels at least ``FAINT`` of the way from the ground to the line's dark ink, so a tail
drawn lighter than the head stays on it) nearest the character's CTC columns that rises above the
x-height band and ends above its middle. Measured on it: how far the centres of its rows (those with a tenth of the
busiest row's ink or more) wander, over its height, and the share of its ink in its upper half.
It is curly when the centres wander by ``CURLY_WANDER`` of its height or more (``‘`` when its
upper half holds under ``OPENING_TOP`` of the ink, else ``’``), straight when they wander by at
most ``STRAIGHT_WANDER``. Between the two, and for a mark under ``MIN_HEIGHT`` pixels or not
found, the recogniser's reading stands.

A double quote the recogniser read (``"``, ``“`` or ``”``) is two such marks side by side; the one
nearest its columns is measured the same way, and the double form of the single one it shows is
set (``"``, ``”`` or ``“``). Nimbus Mono's opening double quote still comes out closing.

The bounds were set on the straight quotes of generated pages (Helvetica, Times and Courier) and
the curly ones of real pages (Computer Modern, Nimbus Roman and Mono) at 200 dpi; how far each
kind wandered and what the rule changed are in ``docs/ocr.md``.
"""

from __future__ import annotations

import cv2
import numpy as np

from mediafleet.workers.ocr.ctc import Decoded
from mediafleet.workers.ocr.spacing import XBAND, band

__all__ = ["CURLY_WANDER", "FAINT", "MIN_HEIGHT", "OPENING_TOP", "STRAIGHT_WANDER", "with_quotes"]

SINGLE_QUOTES = frozenset("'\u2018\u2019")
DOUBLE_QUOTES = frozenset("\"\u201c\u201d")
# A double quote is two single marks side by side: each has the shape of the single form.
_DOUBLE = {"'": "\"", "\u2018": "\u201c", "\u2019": "\u201d"}
FAINT = 0.2
MIN_HEIGHT = 5
CURLY_WANDER = 0.12
STRAIGHT_WANDER = 0.08
OPENING_TOP = 0.4
# Rows of a mark with at least this share of its busiest row's ink place its centre line.
_ROW = 0.1
# Grey levels between ground and ink below which a crop shows no ink to measure.
_MIN_CONTRAST = 32


def with_quotes(line: Decoded, crop: np.ndarray) -> Decoded:
    """``line`` with each quote the recogniser read set to the form its glyph shows."""
    at = [i for i, c in enumerate(line.chars) if c in SINGLE_QUOTES or c in DOUBLE_QUOTES]
    if not at:
        return line
    darkness = _darkness(crop)
    # Dark ink: a line's ink covers a tenth to a quarter of its crop, so its 98th percentile is
    # ink, not the scanner's noise on the ground.
    strong = float(np.percentile(darkness, 98))
    if strong < _MIN_CONTRAST:
        return line
    xband = band((darkness >= 0.5 * strong).sum(axis=1), XBAND)
    if xband is None:
        return line
    band_top, band_mid = xband[0], (xband[0] + xband[1]) / 2
    count, labels, stats, _ = cv2.connectedComponentsWithStats((darkness >= FAINT * strong).astype(np.uint8),
                                                               connectivity=8)
    raised = [k for k in range(1, count)
              if stats[k, cv2.CC_STAT_TOP] <= band_top
              and stats[k, cv2.CC_STAT_TOP] + stats[k, cv2.CC_STAT_HEIGHT] <= band_mid]
    chars = list(line.chars)
    for i in at:
        mark = _nearest(raised, stats, line.spans[i])
        form = None if mark is None else _form(mark, labels, stats, darkness)
        if form is not None:
            chars[i] = _DOUBLE[form] if chars[i] in DOUBLE_QUOTES else form
    if chars == line.chars:
        return line
    return Decoded(chars=chars, probs=line.probs, spans=line.spans)


def _darkness(crop: np.ndarray) -> np.ndarray:
    """How far each pixel is from the ground, 0-255 (ink is the minority, dark or light)."""
    gray = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY) if crop.ndim == 3 else crop
    ground = float(np.median(gray))
    return np.clip(np.abs(gray.astype(np.float32) - ground), 0, 255)


def _nearest(raised: list[int], stats: np.ndarray, span: tuple[float, float]) -> int | None:
    """The raised component closest to the character's columns, within a mark's reach of them."""
    x0, x1 = span
    centre, reach = (x0 + x1) / 2, max(x1 - x0, 1.0)
    best, where = None, None
    for k in raised:
        left, width = stats[k, cv2.CC_STAT_LEFT], stats[k, cv2.CC_STAT_WIDTH]
        distance = abs(left + width / 2 - centre)
        if distance <= reach + width and (where is None or distance < where):
            best, where = k, distance
    return best


def _form(k: int, labels: np.ndarray, stats: np.ndarray, darkness: np.ndarray) -> str | None:
    """``'``, ``’`` or ``‘`` by the shape of component ``k``; None where the shape does not say."""
    left, top, width, height = (int(stats[k, s]) for s in (cv2.CC_STAT_LEFT, cv2.CC_STAT_TOP,
                                                           cv2.CC_STAT_WIDTH, cv2.CC_STAT_HEIGHT))
    if height < MIN_HEIGHT:
        return None
    box = np.s_[top:top + height, left:left + width]
    ink = np.where(labels[box] == k, darkness[box], 0.0).astype(np.float64)
    per_row = ink.sum(axis=1)
    if per_row.sum() <= 0:
        return None
    rows = per_row >= _ROW * per_row.max()
    centres = (ink[rows] * np.arange(width)).sum(axis=1) / per_row[rows]
    wander = float(centres.max() - centres.min()) / height
    upper = float(per_row[np.arange(height) + 0.5 < height / 2].sum() / per_row.sum())
    if wander >= CURLY_WANDER:
        return "\u2018" if upper < OPENING_TOP else "\u2019"
    if wander <= STRAIGHT_WANDER:
        return "'"
    return None
