"""The PDF path's fast ways give exactly what the plain ways give.

The reading order, the evidence nodes, the drafts and the addresses' JSON are built on the hot
path without a per-item model call or a second sort; each is checked here against the plain form
it replaces (a straightforward XY-cut, validated models, ``model_dump``).
"""

from __future__ import annotations

import gc
import random
import re

import pytest
from mediafleet.adapters.drafts import Bounds, LocusDraft, address_json, drafts_of
from mediafleet.adapters.ids import locus_ref, locus_refs
from mediafleet.adapters.nogc import collection_paused
from mediafleet.contract.addresses import (
    AudioRange,
    CharacterRange,
    FrameRange,
    ImageRegion,
    PageRegion,
    VideoTimeRange,
)
from mediafleet.contract.bundle import Edge, Node
from mediafleet.workers.reading_order import reading_order_indices

from mediafleet import Dispatcher, Settings
from tests.media import text_pdf


def _plain_xy_cut(boxes: list[tuple[float, float, float, float, int]], overlap: float = 0.3,
                  min_column: float = 0.1) -> list[int]:
    """The recursive XY-cut as first written: every region grouped and sorted afresh."""

    def groups(items, axis):
        lo, hi = (0, 2) if axis == 0 else (1, 3)
        out, end, last = [], 0.0, 0.0
        for it in sorted(items, key=lambda r: (r[lo], r[hi])):
            size = it[hi] - it[lo]
            if out and end - it[lo] > overlap * min(size, last):
                out[-1].append(it)
                end = max(end, it[hi])
            else:
                out.append([it])
                end = it[hi]
            last = size
        return out

    def best_cut(gs, axis, min_part):
        lo, hi = (0, 2) if axis == 0 else (1, 3)
        starts = [min(it[lo] for it in g) for g in gs]
        ends = [max(it[hi] for it in g) for g in gs]
        widest = [e - s for s, e in zip(starts, ends)]
        best = None
        for i in range(1, len(gs)):
            narrow, wide = sorted((max(widest[:i]), max(widest[i:])))
            if narrow < min_part * wide:
                continue
            gap = starts[i] - max(ends[:i])
            if best is None or gap > best[0]:
                best = (gap, i)
        return best

    def rows_of(rows):
        return [it[4] for row in rows for it in sorted(row, key=lambda r: r[0])]

    def read(region):
        if len(region) <= 1:
            return [it[4] for it in region]
        rows = groups(region, 1)
        common = min(it[2] for it in region) - max(it[0] for it in region)
        if common > overlap * max(it[2] - it[0] for it in region):
            return rows_of(rows)
        cols = groups(region, 0)
        h = best_cut(rows, 1, 0.0) if len(rows) > 1 else None
        v = best_cut(cols, 0, min_column) if len(cols) > 1 else None
        if v is not None and (h is None or v[0] > 2.0 * h[0]):
            parts = cols[: v[1]], cols[v[1]:]
        elif h is not None:
            parts = rows[: h[1]], rows[h[1]:]
        else:
            return rows_of(rows)
        return [i for part in parts for i in read([it for g in part for it in g])]

    return read(boxes)


def _layout(rnd: random.Random, kind: int) -> list[tuple[float, float, float, float, int]]:
    boxes = []
    for i in range(rnd.randint(0, 40)):
        if kind == 0:  # anywhere
            x0, y0, w, h = rnd.uniform(0, 500), rnd.uniform(0, 700), rnd.uniform(1, 300), rnd.uniform(1, 20)
        elif kind == 1:  # a grid: ties in x and y
            x0, y0 = rnd.choice([50.0, 60.0, 300.0, 310.0]), rnd.randint(0, 30) * 12.0
            w, h = rnd.choice([100.0, 200.0, 240.0, 10.0]), 10.0
        elif kind == 2:  # two ragged columns
            x0 = (72.0 if rnd.random() < 0.5 else 320.0) + rnd.uniform(-3, 3)
            y0, w, h = rnd.randint(0, 40) * 14.0 + rnd.uniform(-2, 2), rnd.uniform(100, 220), 11.0
        elif kind == 3:  # a form: blocks of several widths
            x0, y0 = rnd.randint(0, 10) * 50.0, rnd.randint(0, 10) * 20.0
            w, h = rnd.randint(1, 6) * 40.0, rnd.choice([5.0, 10.0, 20.0])
        else:  # tall boxes among short ones: a row above reaching below the next one
            x0, y0 = rnd.uniform(0, 300), rnd.randint(0, 20) * 10.0
            w, h = rnd.uniform(1, 200), rnd.choice([8.0, 30.0, 60.0])
        boxes.append((x0, y0, x0 + w, y0 + h, i))
    return boxes


@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4], ids=["scattered", "grid", "two-columns", "form", "tall"])
def test_the_reading_order_is_the_plain_xy_cuts(kind: int) -> None:
    rnd = random.Random(kind)
    for _ in range(1500):
        boxes = _layout(rnd, kind)
        assert reading_order_indices(list(boxes)) == _plain_xy_cut(boxes)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("speed")
    path = tmp / "doc.pdf"
    path.write_bytes(text_pdf(3))
    return Dispatcher(Settings(blob_root=tmp / "blobs")).submit(path).bundle()


def test_evidence_nodes_are_what_validation_makes(bundle) -> None:
    evidence = [n for n in bundle.nodes if n.node_type == "Evidence"]
    assert evidence and len(bundle.edges) == 2 + 2 * len(evidence)
    for node in evidence:
        again = Node.model_validate(node.model_dump())
        assert again == node and again.__pydantic_fields_set__ == node.__pydantic_fields_set__
        assert again.model_dump_json() == node.model_dump_json()
    for edge in bundle.edges:
        assert type(edge) is Edge and Edge.model_validate(edge.model_dump()) == edge


def test_locus_ids_are_the_locus_refs() -> None:
    derivation = "eg:derivation:" + "ab" * 16
    assert locus_refs(derivation, 12) == [locus_ref(derivation, i) for i in range(12)]
    assert all(re.fullmatch(r"eg:locus:[0-9a-f]{32}", r) for r in locus_refs(derivation, 3))


@pytest.mark.parametrize(
    "address",
    [PageRegion(page=3, x=0.0, y=1.5, width=2.0, height=3.25), ImageRegion(x=1.0, y=2.0, width=3.0, height=4.0),
     CharacterRange(start=0, end=7), AudioRange(start_ms=5, end_ms=9), VideoTimeRange(start_ms=0, end_ms=40),
     FrameRange(start_frame=1, end_frame=2)],
    ids=lambda a: a.kind,
)
def test_an_address_as_json_is_its_model_dump(address) -> None:
    assert address_json(address) == address.model_dump(mode="json")
    assert list(address_json(address)) == list(address.model_dump(mode="json"))


def test_drafts_of_are_the_drafts_made_one_by_one() -> None:
    regions = [ImageRegion(x=1.0, y=2.0, width=3.0, height=4.0), ImageRegion(x=5.0, y=6.0, width=7.0, height=8.0)]
    bounds, props = Bounds(width=100.0, height=100.0), {"page": 1}
    made = drafts_of(regions, bounds, ["a", "b"], [None, 0.5], props)
    assert made == [LocusDraft(regions[0], bounds, "a", None, props), LocusDraft(regions[1], bounds, "b", 0.5, props)]
    assert [vars(d) for d in made] == [vars(LocusDraft(r, bounds, t, c, props))
                                       for r, t, c in zip(regions, "ab", [None, 0.5])]


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_paused_collection_resumes_and_still_finds_cycles_made_meanwhile() -> None:
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with collection_paused():
        assert not gc.isenabled()
        cycle = _Cycle()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    del cycle
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is _Cycle]


def test_a_freeze_made_by_someone_else_is_left_alone() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collection_paused():
            pass
        assert gc.get_freeze_count() == frozen and gc.isenabled()
    finally:
        gc.unfreeze()


def test_whitespace_only_text_is_what_the_regex_calls_whitespace() -> None:
    """The classifier asks ``str.isspace`` where it once counted ``\\s`` matches."""
    every = "".join(chr(c) for c in range(0x3100))
    spaces = "".join(re.findall(r"\s", every))
    assert spaces.isspace() and all(c.isspace() == bool(re.fullmatch(r"\s", c)) for c in every)

