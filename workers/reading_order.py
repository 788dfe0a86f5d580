"""Reading order for boxes of text on a page or image: a recursive XY-cut.

Rows first: the region is split at horizontal gaps (top to bottom); a region with no horizontal
gap is split at vertical gaps (columns, left to right); a region with neither is read by rows.
Boxes count as separate along an axis when they overlap by less than ``overlap`` of the smaller
one, so the ascenders and descenders of neighbouring lines do not glue a page into one block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["reading_order"]

T = TypeVar("T")
Rect = tuple[float, float, float, float]  # x0, y0, x1, y1


def _split(items: list[T], rect: Callable[[T], Rect], axis: int, overlap: float) -> list[list[T]]:
    lo, hi = (0, 2) if axis == 0 else (1, 3)
    ordered = sorted(items, key=lambda it: (rect(it)[lo], rect(it)[hi]))
    groups: list[list[T]] = []
    end = last_size = 0.0
    for it in ordered:
        r = rect(it)
        size = r[hi] - r[lo]
        if groups and end - r[lo] > overlap * min(size, last_size):
            groups[-1].append(it)
        else:
            groups.append([it])
            end = r[hi]
        end = max(end, r[hi])
        last_size = size
    return groups


def reading_order(items: Sequence[T], rect: Callable[[T], Rect], overlap: float = 0.3) -> list[T]:
    """``items`` in the order a person reads them: rows top to bottom, columns left to right."""
    out: list[T] = []
    stack: list[list[T]] = [list(items)]
    while stack:
        region = stack.pop()
        if len(region) <= 1:
            out.extend(region)
            continue
        groups = _split(region, rect, 1, overlap)
        if len(groups) == 1:
            groups = _split(region, rect, 0, overlap)
        if len(groups) == 1:
            out.extend(sorted(region, key=lambda it: (rect(it)[1], rect(it)[0])))
            continue
        stack.extend(reversed(groups))
    return out
