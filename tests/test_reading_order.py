"""Reading order (recursive XY-cut), table-driven on boxes with known answers."""

from __future__ import annotations

import pytest

from mediafleet.workers.reading_order import reading_order

Box = tuple[str, float, float, float, float]  # name, x0, y0, x1, y1


def _order(boxes: list[Box]) -> list[str]:
    return [b[0] for b in reading_order(boxes, lambda b: (b[1], b[2], b[3], b[4]))]


CASES = {
    "single column": (
        [("b", 72, 100, 400, 112), ("a", 72, 80, 380, 92), ("c", 72, 120, 300, 132)],
        ["a", "b", "c"],
    ),
    "two columns under a title": (
        [("t", 72, 40, 540, 60)]
        + [(f"L{i}", 72, 100 + 14 * i, 290, 112 + 14 * i) for i in range(3)]
        + [(f"R{i}", 320, 102 + 14 * i, 540, 114 + 14 * i) for i in range(3)],
        ["t", "L0", "L1", "L2", "R0", "R1", "R2"],
    ),
    "line numbers stay with their lines": (
        [(f"n{i}", 90, 60 + 26 * i, 104, 74 + 26 * i) for i in range(3)]
        + [(f"s{i}", 126, 60 + 26 * i, 500, 74 + 26 * i) for i in range(3)],
        ["n0", "s0", "n1", "s1", "n2", "s2"],
    ),
    "one row left to right": (
        [("c", 300, 10, 350, 20), ("a", 10, 11, 60, 21), ("b", 100, 9, 150, 19)],
        ["a", "b", "c"],
    ),
    "touching lines do not merge into one block": (
        [("a", 10, 0, 300, 12), ("b", 10, 11, 300, 23), ("c", 10, 22, 300, 34)],
        ["a", "b", "c"],
    ),
    "ragged single column with a page number under it": (
        [(f"l{i}", 72 + (i % 3) * 12, 80 + 14 * i, 300 + (i * 37) % 240, 92 + 14 * i) for i in range(8)]
        + [("folio", 300, 760, 310, 770)],
        [f"l{i}" for i in range(8)] + ["folio"],
    ),
    "two columns whose rows line up": (
        [(f"L{i}", 72, 100 + 14 * i, 290, 112 + 14 * i) for i in range(4)]
        + [(f"R{i}", 320, 100 + 14 * i, 540, 112 + 14 * i) for i in range(4)],
        [f"L{i}" for i in range(4)] + [f"R{i}" for i in range(4)],
    ),
    "empty": ([], []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reading_order(name: str) -> None:
    boxes, expected = CASES[name]
    assert _order(boxes) == expected


def test_every_box_comes_back_once() -> None:
    boxes = [(str(i), (i * 37) % 500, (i * 53) % 700, (i * 37) % 500 + 40, (i * 53) % 700 + 10) for i in range(200)]
    assert sorted(_order(boxes), key=int) == [str(i) for i in range(200)]
