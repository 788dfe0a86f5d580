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
from itertools import accumulate, islice
from operator import itemgetter, sub
from typing import TypeVar

__all__ = ["reading_order", "reading_order_indices"]

T = TypeVar("T")
Rect = tuple[float, float, float, float]  # x0, y0, x1, y1
# A gutter must be clearly wider than the gap between rows to be read as one: form-like lines
# with ragged gaps stay rows.
_COLUMN_GAP_RATIO = 2.0

_Item = tuple[float, float, float, float, int]  # x0, y0, x1, y1, index
_Groups = tuple[list[list[_Item]], list[float], list[float]]  # groups, their starts, their ends
_Rows = tuple[list[list[_Item]], list[float], list[float], list[float] | None]  # and the gaps between
_X0 = itemgetter(0)
_X1 = itemgetter(2)
_BY_X = itemgetter(0, 2)
_BY_Y = itemgetter(1, 3)


def _groups(items: list[_Item], axis: int, overlap: float) -> _Groups:
    """Items split along ``axis`` (0: x, 1: y) wherever the projections do not overlap, with each
    group's extent along the axis (its first item's start, items being sorted by start; the
    largest end)."""
    return _grouped(sorted(items, key=_BY_X if axis == 0 else _BY_Y), axis, overlap)


def _grouped(ordered: list[_Item], axis: int, overlap: float) -> _Groups:
    """:func:`_groups` of items already sorted along ``axis`` by (start, end)."""
    lo, hi = (0, 2) if axis == 0 else (1, 3)
    groups: list[list[_Item]] = []
    starts: list[float] = []
    ends: list[float] = []
    group: list[_Item] = []
    end = last_size = 0.0
    for it in ordered:
        start, stop = it[lo], it[hi]
        size = stop - start
        if group and end - start > overlap * (last_size if last_size < size else size):  # noqa: FURB136 (min(), inlined)
            group.append(it)
            if stop > end:
                end = stop
                ends[-1] = stop
        else:
            group = [it]
            groups.append(group)
            starts.append(start)
            ends.append(stop)
            end = stop
        last_size = size
    return groups, starts, ends


def _best_cut(starts: list[float], ends: list[float], min_part: float) -> tuple[float, int] | None:
    """(gap, index) of the widest gap between consecutive groups (given by their extents).

    A cut counts only when the widest group on its narrower side is at least ``min_part`` of the
    widest group on the other side.
    """
    widest = [e - s for s, e in zip(starts, ends)]
    end_before = list(accumulate(ends, max))
    if min_part == 0.0 and min(widest) >= 0.0:  # every cut counts: the first widest gap
        gaps = [s - e for s, e in zip(starts[1:], end_before)]
        gap = max(gaps)
        return gap, gaps.index(gap) + 1
    wide_before = list(accumulate(widest, max))
    wide_after = list(accumulate(reversed(widest), max))
    wide_after.reverse()
    best: tuple[float, int] | None = None
    for i in range(1, len(starts)):
        narrow, wide = wide_before[i - 1], wide_after[i]
        if wide < narrow:
            narrow, wide = wide, narrow
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
    common = min(map(_X1, items)) - max(map(_X0, items))
    return common > overlap * max(map(sub, map(_X1, items), map(_X0, items)))


def reading_order(
    items: Sequence[T], rect: Callable[[T], Rect], *, overlap: float = 0.3, min_column: float = 0.1
) -> list[T]:
    """``items`` in the order a person reads them: top to bottom, columns left to right."""
    boxes: list[_Item] = [(*rect(it), i) for i, it in enumerate(items)]  # type: ignore[misc]
    return [items[i] for i in reading_order_indices(boxes, overlap=overlap, min_column=min_column)]


def reading_order_indices(boxes: list[_Item], *, overlap: float = 0.3, min_column: float = 0.1) -> list[int]:
    """:func:`reading_order` of boxes given as ``(x0, y0, x1, y1, index)``: their indices in that order."""
    order: list[int] = []
    # A region, and its rows when known: the rows of either side of a cut between rows are that
    # side's rows of the whole (grouping is one pass over the items sorted by y0), so they are
    # handed down instead of being found again; so are the gaps between them where they are the
    # same (see _row_cut).
    stack: list[tuple[list[_Item], _Rows | None]] = [(boxes, None)]
    while stack:
        region, known = stack.pop()
        if len(region) <= 1:
            order.extend(it[4] for it in region)
            continue
        if known is None:
            rows, row_starts, row_ends = _groups(region, 1, overlap)
            gaps = _row_gaps(row_starts, row_ends)
        else:
            rows, row_starts, row_ends, gaps = known
        common = min(map(_X1, region)) - max(map(_X0, region))
        if common > overlap * max(map(sub, map(_X1, region), map(_X0, region))):
            # One column (:func:`_one_column`): without a column anywhere below, the cuts only
            # ever split between rows and end on single rows: the region reads row by row, each
            # row left to right.
            _read_rows(rows, order)
            continue
        if gaps is not None and len(rows) > 1 and -common <= _COLUMN_GAP_RATIO * min(gaps):
            # Every region the cuts between rows make of this one has no cut between columns that
            # could win: its own max x0 - min x1 is at most this one's, and its gaps between rows
            # at least these (the smallest of them included). So the cuts only ever split between
            # rows, down to single rows, top before bottom: the region reads as its rows in
            # order, each row read as a region of its own (a row alone may still hold columns).
            # The leading rows of one box each are read at once; the rest wait on the stack.
            first = 0
            while first < len(rows) and len(rows[first]) == 1:
                order.append(rows[first][0][4])
                first += 1
            stack.extend([(rows[i], ([rows[i]], row_starts[i:i + 1], row_ends[i:i + 1], []))
                          for i in range(len(rows) - 1, first - 1, -1)])
            continue
        if len(rows) <= 1:
            h = None
        elif gaps is not None:
            gap = max(gaps)
            h = gap, gaps.index(gap) + 1
        else:
            h = _best_cut(row_starts, row_ends, 0.0)
        if h is not None and -common <= _COLUMN_GAP_RATIO * h[0]:
            # No gap between columns can be wider than max x0 - min x1: none could beat this cut.
            v = None
        else:
            by_x = sorted(region, key=_BY_X)
            if h is not None and _widest_x_gap(by_x) <= _COLUMN_GAP_RATIO * h[0]:
                # Nor wider than the widest gap along x, which is found without grouping.
                v = None
            else:
                cols, col_starts, col_ends = _grouped(by_x, 0, overlap)
                v = _best_cut(col_starts, col_ends, min_column) if len(cols) > 1 else None
        if v is not None and (h is None or v[0] > _COLUMN_GAP_RATIO * h[0]):
            k = v[1]
            stack.append(([it for g in cols[k:] for it in g], None))
            stack.append(([it for g in cols[:k] for it in g], None))
        elif h is not None:
            k = h[1]
            below_gaps = None
            if gaps is not None:
                # The gap before row i is its start less the largest end above it in the region:
                # below the cut that largest end is the same unless a row above reaches further
                # down than the first row below.
                below_gaps = gaps[k:] if row_ends[k] >= max(row_ends[:k]) else _row_gaps(row_starts[k:], row_ends[k:])
            stack.append(([it for g in rows[k:] for it in g], (rows[k:], row_starts[k:], row_ends[k:], below_gaps)))
            stack.append(([it for g in rows[:k] for it in g], (rows[:k], row_starts[:k], row_ends[:k], gaps[: k - 1] if gaps is not None else None)))
        else:
            _read_rows(rows, order)
    return order


def _widest_x_gap(by_x: list[_Item]) -> float:
    """The widest gap along x between an item and every item before it, items sorted by (x0, x1):
    ``max(x0[j] - max(x1[:j]))``. A cut between columns (:func:`_best_cut` of :func:`_grouped`)
    is at a group's first item and its gap is exactly that item's term, so no cut between columns
    is wider than this."""
    return max(map(sub, map(_X0, islice(by_x, 1, None)), accumulate(map(_X1, by_x), max)))


def _row_gaps(starts: list[float], ends: list[float]) -> list[float] | None:
    """The gap before each group but the first (its start less the largest end before it), which
    :func:`_best_cut` compares when every cut counts (``min_part`` 0 and no group of negative
    extent); None otherwise."""
    if min(e - s for s, e in zip(starts, ends)) < 0.0:
        return None
    return [s - e for s, e in zip(starts[1:], accumulate(ends, max))]


def _read_rows(rows: list[list[_Item]], order: list[int]) -> None:
    """Each row left to right (a stable sort on x0, as ``sorted`` with that key)."""
    for row in rows:
        if len(row) == 1:
            order.append(row[0][4])
        else:
            order.extend(it[4] for it in sorted(row, key=_X0))
