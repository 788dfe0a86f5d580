"""Reading order for boxes of text on a page or image: a recursive XY-cut.

Each region is cut in two at its widest clear gap, horizontal (between rows) or vertical (between
columns), and each half is read in turn: top before bottom, left before right. A vertical cut only
counts when both sides are real columns (the widest line on either side is at least ``min_column``
of the widest on the other) and its
gutter is clearly wider than the gap between rows, so a margin of line numbers or a ragged form
stays read row by row instead of as columns of its own. A
region with no cut left is read as rows, each row left to right. Boxes count as separate along an
axis when they overlap by less than ``overlap`` of the smaller one, so the ascenders and descenders
of neighbouring lines do not glue a page into one block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["reading_order"]

T = TypeVar("T")
# A gutter must be clearly wider than the gap between rows to be read as one: form-like lines
# with ragged gaps stay rows.
_COLUMN_GAP_RATIO = 2.0
Rect = tuple[float, float, float, float]  # x0, y0, x1, y1


def _groups(items: list[T], rect: Callable[[T], Rect], axis: int, overlap: float) -> list[list[T]]:
    """Items split along ``axis`` (0: x, 1: y) wherever the projections do not overlap."""
    lo, hi = (0, 2) if axis == 0 else (1, 3)
    ordered = sorted(items, key=lambda it: (rect(it)[lo], rect(it)[hi]))
    groups: list[list[T]] = []
    end = last_size = 0.0
    for it in ordered:
        r = rect(it)
        size = r[hi] - r[lo]
        if groups and end - r[lo] > overlap * min(size, last_size):
            groups[-1].append(it)
            end = max(end, r[hi])
        else:
            groups.append([it])
            end = r[hi]
        last_size = size
    return groups


def _span(group: list[T], rect: Callable[[T], Rect], axis: int) -> tuple[float, float]:
    lo, hi = (0, 2) if axis == 0 else (1, 3)
    return min(rect(it)[lo] for it in group), max(rect(it)[hi] for it in group)


def _best_cut(
    groups: list[list[T]], rect: Callable[[T], Rect], axis: int, min_part: float
) -> tuple[float, int] | None:
    """(gap, index) of the widest gap between consecutive groups.

    A cut counts only when the widest box on its narrower side is at least ``min_part`` of the
    widest box on the other side.
    """
    spans = [_span(g, rect, axis) for g in groups]
    widths = [s[1] - s[0] for s in spans]
    best: tuple[float, int] | None = None
    for i in range(1, len(groups)):
        narrow, wide = sorted((max(widths[:i]), max(widths[i:])))
        if narrow < min_part * wide:
            continue
        gap = spans[i][0] - max(s[1] for s in spans[:i])
        if best is None or gap > best[0]:
            best = (gap, i)
    return best


def _rows(items: list[T], rect: Callable[[T], Rect], overlap: float) -> list[T]:
    out: list[T] = []
    for row in _groups(items, rect, 1, overlap):
        out.extend(sorted(row, key=lambda it: rect(it)[0]))
    return out


def reading_order(
    items: Sequence[T], rect: Callable[[T], Rect], *, overlap: float = 0.3, min_column: float = 0.1
) -> list[T]:
    """``items`` in the order a person reads them: top to bottom, columns left to right."""
    out: list[T] = []
    stack: list[list[T]] = [list(items)]
    while stack:
        region = stack.pop()
        if len(region) <= 1:
            out.extend(region)
            continue
        rows = _groups(region, rect, 1, overlap)
        cols = _groups(region, rect, 0, overlap)
        h = _best_cut(rows, rect, 1, 0.0) if len(rows) > 1 else None
        v = _best_cut(cols, rect, 0, min_column) if len(cols) > 1 else None
        if v is not None and (h is None or v[0] > _COLUMN_GAP_RATIO * h[0]):
            first, second = cols[: v[1]], cols[v[1] :]
        elif h is not None:
            first, second = rows[: h[1]], rows[h[1] :]
        else:
            out.extend(_rows(region, rect, overlap))
            continue
        stack.append([it for g in second for it in g])
        stack.append([it for g in first for it in g])
    return out
