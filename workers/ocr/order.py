"""Reading order for the lines OCR found on one image: columns of text, and tables read by rows.

The order is the XY-cut of :mod:`mediafleet.workers.reading_order` (the text-layer path's), with
three things that only the OCR path needs:

- **Line cores.** Lines are compared by the middle half of their boxes (``ORDER_CORE`` of the
  height cut off at top and bottom). The detector's boxes reach into the lines above and below,
  and on a tightly set page a tall box overlapped its neighbour by the reading order's 30% of the
  smaller: the two became one row, read left to right, and a line came out before the one above
  it (a page of the Valgrind manual).
- **Rows of cells.** A run of at least ``TABLE_ROWS`` rows, one under the other, each holding two
  or more lines and every line in it a short cell (no wider than ``CELL_WIDTH`` of its own
  heights: about twenty characters), is a table. Each of its rows is read whole, left to right,
  before the next; the XY-cut sees a row as one box. Without this the gutters between a table's
  columns looked like the gutters between columns of text, and bzip2's table of memory use came
  out one table column after another, where its text layer and Tesseract read it row by row.
  A line of prose is wider than a cell, so two columns of text stay columns; so do the odd pair
  of short lines side by side (a run shorter than ``TABLE_ROWS``).
- **Narrow columns.** A vertical cut counts only when the narrower side's widest line is at least
  ``MIN_COLUMN`` of the other side's (the text-layer path takes 0.1). On a page the detector
  cut into lines, a narrow column beside a wide one is a table's first column (fontconfig's
  property names beside their types and descriptions), read row by row; a real column of text is
  rarely under a third of its neighbour's width.

The price: a column of marginal notes narrower than ``MIN_COLUMN`` of the text beside it is read
row by row with that text.

The boxes in the result are the detected ones, whole. What each rule changed on the benchmark's
real pages is in ``docs/ocr.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from mediafleet.workers.reading_order import reading_order

__all__ = ["CELL_WIDTH", "MIN_COLUMN", "ORDER_CORE", "TABLE_ROWS", "core", "ocr_reading_order", "rows"]

ORDER_CORE = 0.25
CELL_WIDTH = 10.0
TABLE_ROWS = 3
MIN_COLUMN = 0.3
# A line is in a row when its core and the row's overlap by more than this much of the smaller.
_SAME_ROW = 0.5

Box = tuple[float, float, float, float]  # x0, y0, x1, y1


class Boxed(Protocol):
    @property
    def box(self) -> Box: ...


T = TypeVar("T", bound=Boxed)


def core(box: Box) -> Box:
    """The middle of a box, ``ORDER_CORE`` of its height cut off at top and bottom."""
    x0, y0, x1, y1 = box
    cut = ORDER_CORE * (y1 - y0)
    return (x0, y0 + cut, x1, y1 - cut)


def rows(lines: Sequence[Boxed]) -> list[list[Boxed]]:
    """Lines grouped into rows, top to bottom, each row left to right. Taken by the middles of their
    boxes, a line joins the row above it when its core and the row's (the span of its members'
    cores) overlap by more than half of the smaller one's height."""
    out: list[tuple[list[Boxed], float, float]] = []
    for line in sorted(lines, key=lambda ln: (ln.box[1] + ln.box[3], ln.box[0])):
        _, y0, _, y1 = core(line.box)
        if out:
            members, top, bottom = out[-1]
            if min(y1, bottom) - max(y0, top) > _SAME_ROW * min(y1 - y0, bottom - top):
                members.append(line)
                out[-1] = (members, min(top, y0), max(bottom, y1))
                continue
        out.append(([line], y0, y1))
    return [sorted(members, key=lambda ln: ln.box[0]) for members, _, _ in out]


def _cell(line: Boxed) -> bool:
    x0, y0, x1, y1 = line.box
    return x1 - x0 <= CELL_WIDTH * (y1 - y0)


def _units(lines: Sequence[Boxed]) -> list[tuple[Box, list[Boxed]]]:
    """What the XY-cut orders: each row of a table as one box (the union of its cells' cores),
    every other line alone (its core)."""
    grouped = rows(lines)
    of_cells = [len(row) >= 2 and all(map(_cell, row)) for row in grouped]
    units: list[tuple[Box, list[Boxed]]] = []
    i = 0
    while i < len(grouped):
        j = i
        while j < len(grouped) and of_cells[j]:
            j += 1
        if j - i >= TABLE_ROWS:
            for row in grouped[i:j]:
                cores = [core(line.box) for line in row]
                units.append(((min(c[0] for c in cores), min(c[1] for c in cores),
                               max(c[2] for c in cores), max(c[3] for c in cores)), row))
        else:
            j = max(j, i + 1)
            units.extend((core(line.box), [line]) for row in grouped[i:j] for line in row)
        i = j
    return units


def ocr_reading_order(lines: Sequence[T]) -> list[T]:
    """``lines`` in reading order (see the module's text)."""
    ordered = reading_order(_units(lines), lambda unit: unit[0], min_column=MIN_COLUMN)
    return [line for _, members in ordered for line in members]  # type: ignore[misc]
