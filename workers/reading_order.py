"""Reading order for boxes of text on a page or image: a recursive XY-cut.

Each region is cut in two at its widest clear gap, horizontal (between rows) or vertical (between
columns), and each half is read in turn: top before bottom, left before right. A vertical cut only
counts when both sides are real columns (the widest column on either side is at least
``min_column`` of the widest on the other) and its gutter is clearly wider than the gap between rows, so a margin
of line numbers or a ragged form stays read row by row instead of as columns of its own. A region
with no cut left is read as rows, each row left to right. Boxes count as separate along an axis
when they overlap by less than ``overlap`` of the smaller one, so the ascenders and descenders of
neighbouring lines do not glue a page into one block.

The cut runs in C where the package was built with a C compiler (``workers/_xycut.c``: the plain
XY-cut, about ten times faster); the Python form below gives the same order (both are checked
against the plain XY-cut in ``tests/test_pdf_speed_paths.py``), and reads what the C form leaves
to it (a NaN, or coordinates that are not floats).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate, islice
from operator import itemgetter, sub
from typing import Any, TypeVar

__all__ = ["reading_order", "reading_order_indices"]

try:
    from mediafleet.workers import _xycut  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler
    _xycut = None

T = TypeVar("T")
Rect = tuple[float, float, float, float]  # x0, y0, x1, y1
# A gutter must be clearly wider than the gap between rows to be read as one: form-like lines
# with ragged gaps stay rows.
_COLUMN_GAP_RATIO = 2.0

_Item = tuple[float, float, float, float, int]  # x0, y0, x1, y1, index
_Groups = tuple[list[list[_Item]], list[float], list[float]]  # groups, their starts, their ends
_X0 = itemgetter(0)
_X1 = itemgetter(2)
_BY_X = itemgetter(0, 2)
_BY_Y = itemgetter(1, 3)


def _grouped(ordered: list[_Item], axis: int, overlap: float) -> _Groups:
    """Items sorted along ``axis`` (0: x, 1: y) by (start, end), split wherever the projections do
    not overlap, with each group's extent along the axis (its first item's start, the largest
    end). Groups are runs of ``ordered``."""
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
    widest = list(map(sub, ends, starts))
    gaps = list(map(sub, islice(starts, 1, None), accumulate(ends, max)))  # before each group but the first
    gap = max(gaps)
    i = gaps.index(gap) + 1
    if min_part == 0.0 and min(widest) >= 0.0:  # every cut counts: the first widest gap
        return gap, i
    narrow, wide = max(widest[:i]), max(widest[i:])
    if wide < narrow:
        narrow, wide = wide, narrow
    if not narrow < min_part * wide:  # the first widest gap of all counts: none that counts is wider
        return gap, i
    if len(gaps) == 1:  # nor is there another
        return None
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
        gap = gaps[i - 1]
        if best is None or gap > best[0]:
            best = (gap, i)
    return best


def _one_column(items: list[_Item], overlap: float) -> bool:
    """True when no subset of ``items`` can be cut into columns: every item spans the common
    stretch ``[max x0, min x1]``, which is longer than ``overlap`` of the widest item, so any two
    of them overlap along x by more than ``overlap`` of either and :func:`_grouped` keeps them in
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
    if _xycut is not None and type(boxes) is list:
        order: list[int] | None = _xycut.order(boxes, overlap, min_column)
        if order is not None:
            return order
    return python_reading_order_indices(boxes, overlap=overlap, min_column=min_column)


def python_reading_order_indices(boxes: list[_Item], *, overlap: float = 0.3, min_column: float = 0.1) -> list[int]:
    """:func:`reading_order_indices` in Python (where the C form is not built, or declines)."""
    order: list[int] = []
    emit = order.append
    # Two kinds of region wait on the stack. (items, columns): a list of items whose rows are not
    # known yet, with its column groups when known (the items are then in x order): the groups
    # either side of a cut between columns are that side's groups of the whole, grouping being one
    # pass over the items sorted by x, and the items of a side, in x order already, sort to
    # themselves. (rows, a, b, gaps): rows a..b-1 of a region's rows (:data:`_RowSet`) and the gaps
    # between them: the rows of either side of a cut between rows are that side's rows of the
    # whole (the same pass, along y), so they are handed down instead of being found again; so
    # are the gaps where they are the same (see below). The items of rows a..b-1, in row order,
    # are one slice of the items in y order, as are their x0, x1 and widths.
    stack: list[Any] = [(boxes, None)]
    pop, push = stack.pop, stack.append
    while stack:
        task = pop()
        cols: _Groups | None = None
        if len(task) == 2:
            region, cols = task
            n = len(region)
            if n < 3:
                if n == 2:
                    pair = _pair(region[0], region[1], overlap, min_column)
                    if pair is not None:
                        order.extend(pair)
                        continue
                elif n:
                    emit(region[0][4])
                    continue
                else:
                    continue
            ordered = sorted(region, key=_BY_Y)
            rows, row_starts, row_ends = _grouped(ordered, 1, overlap)
            x0s, x1s = list(map(_X0, ordered)), list(map(_X1, ordered))
            widths = list(map(sub, x1s, x0s))
            p, q, x0max, x1min, wmax = 0, len(ordered), max(x0s), min(x1s), max(widths)
            common = x1min - x0max
            if common > overlap * wmax:
                # One column (:func:`_one_column`): without a column anywhere below, the cuts only
                # ever split between rows and end on single rows: the region reads row by row,
                # each row left to right.
                _read_rows(rows, order)
                continue
            pos = list(accumulate(map(len, rows), initial=0))
            rs = (rows, row_starts, row_ends, ordered, pos, x0s, x1s, widths)
            a, b = 0, len(rows)
            gaps = _row_gaps(row_starts, row_ends)
        else:
            rs, a, b, gaps = task
            rows, row_starts, row_ends, ordered, pos, x0s, x1s, widths = rs
            region = None
            p, q = pos[a], pos[b]
            if q - p == 1:
                emit(ordered[p][4])
                continue
            if q - p == 2:
                pair = _pair(ordered[p], ordered[p + 1], overlap, min_column)
                if pair is not None:
                    order.extend(pair)
                    continue
            x0max, x1min, wmax = max(x0s[p:q]), min(x1s[p:q]), max(widths[p:q])
            common = x1min - x0max
            if common > overlap * wmax:
                _read_rows(rows[a:b], order)
                continue
        if gaps is not None and b - a > 1 and -common <= _COLUMN_GAP_RATIO * min(gaps):
            # Every region the cuts between rows make of this one has no cut between columns that
            # could win: its own max x0 - min x1 is at most this one's, and its gaps between rows
            # at least these (the smallest of them included). So the cuts only ever split between
            # rows, down to single rows, top before bottom: the region reads as its rows in
            # order, each row read as a region of its own (a row alone may still hold columns).
            # The leading rows of one or two boxes are read at once; the rest wait on the stack.
            first = a
            while first < b:
                row = rows[first]
                if len(row) == 1:
                    emit(row[0][4])
                elif len(row) == 2 and (pair := _pair(row[0], row[1], overlap, min_column)) is not None:
                    order.extend(pair)
                else:
                    break
                first += 1
            stack.extend([(rs, i, i + 1, _NO_GAPS) for i in range(b - 1, first - 1, -1)])
            continue
        if b - a <= 1:
            h = None
        elif gaps is not None:
            gap = max(gaps)
            h = gap, gaps.index(gap) + 1
        else:
            h = _best_cut(row_starts[a:b], row_ends[a:b], 0.0)
        v = None
        if h is None or -common > _COLUMN_GAP_RATIO * h[0]:
            # Else no gap between columns can be wider than max x0 - min x1: none could beat h.
            if cols is None and (h is None or not _narrow_x_gaps(x0s, x1s, widths, p, q, x0max, wmax,
                                                                  _COLUMN_GAP_RATIO * h[0])):
                if region is None:
                    region = ordered[p:q]
                by_x = sorted(region, key=_BY_X)
                # Nor wider than the widest gap along x, which is found without grouping.
                if h is None or _widest_x_gap(by_x) > _COLUMN_GAP_RATIO * h[0]:
                    cols = _grouped(by_x, 0, overlap)
            if cols is not None and len(cols[0]) > 1:
                v = _best_cut(cols[1], cols[2], min_column)
        if v is not None and (h is None or v[0] > _COLUMN_GAP_RATIO * h[0]):
            _push_sides(cols, v[1], push, emit)  # type: ignore[arg-type]
        elif h is not None:
            j = h[1]
            k = a + j
            below_gaps = None
            if gaps is not None:
                # The gap before row i is its start less the largest end above it in the region:
                # below the cut that largest end is the same unless a row above reaches further
                # down than the first row below.
                below_gaps = gaps[j:] if row_ends[k] >= max(row_ends[a:k]) else _row_gaps(row_starts[k:b], row_ends[k:b])
            push((rs, k, b, below_gaps))
            if pos[k] - p == 1:  # the side above is one box, read next anyway
                emit(ordered[p][4])
            else:
                push((rs, a, k, gaps[: j - 1] if gaps is not None else None))
        else:
            _read_rows(rows[a:b], order)
    return order


def _push_sides(cols: _Groups, k: int, push: Callable[[Any], None], emit: Callable[[int], None]) -> None:
    """The two sides of a cut before column group ``k``, right then left, onto the stack, each with
    its column groups; a left side of one box is read at once (it would be next)."""
    groups, starts, ends = cols
    push(([it for g in groups[k:] for it in g], (groups[k:], starts[k:], ends[k:])))
    if k == 1 and len(groups[0]) == 1:
        emit(groups[0][0][4])
    else:
        push(([it for g in groups[:k] for it in g], (groups[:k], starts[:k], ends[:k])))


# A region's rows (as _grouped gives them), their starts and ends, the items in y order (the rows'
# items one after the other), where each row starts among them (and where the last ends), and
# the items' x0, x1 and widths in that order.
_RowSet = tuple[list[list[_Item]], list[float], list[float], list[_Item], list[int], list[float], list[float], list[float]]
_NO_GAPS: list[float] = []


def _pair(a: _Item, b: _Item, overlap: float, min_column: float) -> tuple[int, int] | None:
    """The reading order of the region ``[a, b]`` as the cuts read it, worked out for two boxes;
    None for a box of negative width or height (left to the general way)."""
    ax0, ay0, ax1, ay1, _ = a
    bx0, by0, bx1, by1, _ = b
    aw, bw, ah, bh = ax1 - ax0, bx1 - bx0, ay1 - ay0, by1 - by0
    if not (aw >= 0.0 and bw >= 0.0 and ah >= 0.0 and bh >= 0.0):
        return None
    # Rows: a stable sort on (y0, y1), then the grouping of _grouped.
    if (by0, by1) < (ay0, ay1):
        p, q, ph, qh = b, a, bh, ah
    else:
        p, q, ph, qh = a, b, ah, bh
    one_row = p[3] - q[1] > overlap * (ph if ph < qh else qh)
    common = (bx1 if bx1 < ax1 else ax1) - (bx0 if bx0 > ax0 else ax0)
    if common > overlap * (bw if bw > aw else aw):
        if one_row and q[0] < p[0]:
            return q[4], p[4]
        return p[4], q[4]
    # Columns: a stable sort on (x0, x1), then the same grouping along x.
    if (bx0, bx1) < (ax0, ax1):
        left, right, lw, rw = b, a, bw, aw
    else:
        left, right, lw, rw = a, b, aw, bw
    if one_row:  # no cut between rows: a cut between columns, if any, else the row left to right
        if left[2] - right[0] <= overlap * (lw if lw < rw else rw) and not (
                (lw if lw < rw else rw) < min_column * (rw if lw < rw else lw)):
            return left[4], right[4]
        if q[0] < p[0]:
            return q[4], p[4]
        return p[4], q[4]
    gap = q[1] - p[3]  # the cut between the two rows
    limit = _COLUMN_GAP_RATIO * gap
    if -common <= limit or right[0] - left[2] <= limit:
        return p[4], q[4]
    if left[2] - right[0] <= overlap * (lw if lw < rw else rw) and not (
            (lw if lw < rw else rw) < min_column * (rw if lw < rw else lw)):
        return left[4], right[4]
    return p[4], q[4]


def _widest_x_gap(by_x: list[_Item]) -> float:
    """The widest gap along x between an item and every item before it, items sorted by (x0, x1):
    ``max(x0[j] - max(x1[:j]))``. A cut between columns (:func:`_best_cut` of :func:`_grouped`)
    is at a group's first item and its gap is exactly that item's term, so no cut between columns
    is wider than this."""
    return max(map(sub, map(_X0, islice(by_x, 1, None)), accumulate(map(_X1, by_x), max)))


def _narrow_x_gaps(x0s: list[float], x1s: list[float], widths: list[float], p: int, q: int,
                   x0max: float, wmax: float, limit: float) -> bool:
    """True when :func:`_widest_x_gap` of items ``p..q-1`` (given by their x0, x1 and widths, the
    largest x0 and the largest width) is surely at most ``limit``, found without sorting them.

    With no negative width: in (x0, x1) order, each item after the widest one, w, has w's x1
    among the x1 before it, so its term is at most max x0 - x1(w); each up to w, at most
    x0(w) - min x0 (the first item's x1 is at least its x0, the least of all), and, where an item
    L of the least x0 reaches x1(L), at most max(x0(w) - x1(L), 0): after L it is at most
    x0 - x1(L), and before L (a tie on the least x0) at most min x0 - the first item's x1.
    Every step holds in floating point too (a difference moves with its terms), for finite boxes
    as text boxes are.
    """
    if min(widths[p:q]) < 0.0:
        return False
    w = widths.index(wmax, p, q)
    x0w = x0s[w]
    after = x0max - x1s[w]
    if after > limit:
        return False
    x0min = min(x0s[p:q])
    if x0w - x0min <= limit:
        return True
    return x0w - x1s[x0s.index(x0min, p, q)] <= limit and 0.0 <= limit


def _row_gaps(starts: list[float], ends: list[float]) -> list[float] | None:
    """The gap before each group but the first (its start less the largest end before it), which
    :func:`_best_cut` compares when every cut counts (``min_part`` 0 and no group of negative
    extent); None otherwise."""
    if min(map(sub, ends, starts)) < 0.0:
        return None
    return list(map(sub, islice(starts, 1, None), accumulate(ends, max)))


def _read_rows(rows: list[list[_Item]], order: list[int]) -> None:
    """Each row left to right (a stable sort on x0, as ``sorted`` with that key)."""
    for row in rows:
        if len(row) == 1:
            order.append(row[0][4])
        else:
            order.extend(it[4] for it in sorted(row, key=_X0))
