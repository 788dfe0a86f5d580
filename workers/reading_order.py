"""Reading order for boxes of text on a page or image: a recursive XY-cut.

Each region is cut in two at its widest clear gap, horizontal (between rows) or vertical (between
columns), and each half is read in turn: top before bottom, left before right. A vertical cut only
counts when both sides are real columns (the widest column on either side is at least
``min_column`` of the widest on the other) and its gutter is clearly wider than the gap between rows, so a margin
of line numbers or a ragged form stays read row by row instead of as columns of its own. A region
with no cut left is read as rows, each row left to right. Boxes count as separate along an axis
when they overlap by less than ``overlap`` of the smaller one, so the ascenders and descenders of
neighbouring lines do not glue a page into one block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["reading_order"]

T = TypeVar("T")
Rect = tuple[float, float, float, float]  # x0, y0, x1, y1
# A gutter must be clearly wider than the gap between rows to be read as one: form-like lines
# with ragged gaps stay rows.
_COLUMN_GAP_RATIO = 2.0

_Item = tuple[float, float, float, float, int]  # x0, y0, x1, y1, index


def _groups(items: list[_Item], axis: int, overlap: float) -> list[list[_Item]]:
    """Items split along ``axis`` (0: x, 1: y) wherever the projections do not overlap."""
    lo, hi = (0, 2) if axis == 0 else (1, 3)
    groups: list[list[_Item]] = []
    end = last_size = 0.0
    for it in sorted(items, key=lambda r: (r[lo], r[hi])):
        size = it[hi] - it[lo]
        if groups and end - it[lo] > overlap * min(size, last_size):
            groups[-1].append(it)
            end = max(end, it[hi])
        else:
            groups.append([it])
            end = it[hi]
        last_size = size
    return groups


def _best_cut(groups: list[list[_Item]], axis: int, min_part: float) -> tuple[float, int] | None:
    """(gap, index) of the widest gap between consecutive groups.

    A cut counts only when the widest group on its narrower side is at least ``min_part`` of the
    widest group on the other side.
    """
    lo, hi = (0, 2) if axis == 0 else (1, 3)
    n = len(groups)
    starts = [min(it[lo] for it in g) for g in groups]
    ends = [max(it[hi] for it in g) for g in groups]
    widest = [e - s for s, e in zip(starts, ends)]
    end_before, wide_before = [ends[0]], [widest[0]]
    for i in range(1, n):
        end_before.append(max(end_before[-1], ends[i]))
        wide_before.append(max(wide_before[-1], widest[i]))
    wide_after = [0.0] * n
    wide_after[-1] = widest[-1]
    for i in range(n - 2, -1, -1):
        wide_after[i] = max(wide_after[i + 1], widest[i])
    best: tuple[float, int] | None = None
    for i in range(1, n):
        narrow, wide = sorted((wide_before[i - 1], wide_after[i]))
        if narrow < min_part * wide:
            continue
        gap = starts[i] - end_before[i - 1]
        if best is None or gap > best[0]:
            best = (gap, i)
    return best


def _one_column(items: list[_Item], overlap: float) -> bool:
    """True when no subset of ``items`` can be cut into columns: every item spans the common
    stretch ``[max x0, min x1]``, which is longer than ``overlap`` of the widest item, so any two
    of them overlap along x by more than ``overlap`` of either and :func:`_groups` keeps them in
    one column however the region is later cut into rows."""
    common = min(it[2] for it in items) - max(it[0] for it in items)
    return common > overlap * max(it[2] - it[0] for it in items)


def reading_order(
    items: Sequence[T], rect: Callable[[T], Rect], *, overlap: float = 0.3, min_column: float = 0.1
) -> list[T]:
    """``items`` in the order a person reads them: top to bottom, columns left to right."""
    boxes: list[_Item] = [(*rect(it), i) for i, it in enumerate(items)]  # type: ignore[misc]
    order: list[int] = []
    stack: list[list[_Item]] = [boxes]
    while stack:
        region = stack.pop()
        if len(region) <= 1:
            order.extend(it[4] for it in region)
            continue
        rows = _groups(region, 1, overlap)
        if _one_column(region, overlap):
            # Without a column anywhere below, the cuts only ever split between rows and end on
            # single rows: the region reads row by row, each row left to right.
            for row in rows:
                order.extend(it[4] for it in sorted(row, key=lambda r: r[0]))
            continue
        cols = _groups(region, 0, overlap)
        h = _best_cut(rows, 1, 0.0) if len(rows) > 1 else None
        v = _best_cut(cols, 0, min_column) if len(cols) > 1 else None
        if v is not None and (h is None or v[0] > _COLUMN_GAP_RATIO * h[0]):
            first, second = cols[: v[1]], cols[v[1] :]
        elif h is not None:
            first, second = rows[: h[1]], rows[h[1] :]
        else:
            for row in rows:
                order.extend(it[4] for it in sorted(row, key=lambda r: r[0]))
            continue
        stack.append([it for g in second for it in g])
        stack.append([it for g in first for it in g])
    return [items[i] for i in order]
