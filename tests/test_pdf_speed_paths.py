"""The PDF path's fast ways give exactly what the plain ways give.

The reading order, the text lines (read by the C reader where it is built), the line boxes, pages, drafts, evidence nodes, edges, PROV
entities and the addresses' JSON are built on the hot path without a per-item model call or a
second sort; each is checked here against the plain form it replaces (a straightforward XY-cut,
``get_text``, validated models, ``model_dump``), and each check done once against doing it again.
"""

from __future__ import annotations

import gc
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from mediafleet.adapters import bundle as bundle_module
from mediafleet.adapters import loci as loci_module
from mediafleet.adapters.drafts import Bounds, LocusDraft, address_json, drafts_of
from mediafleet.adapters.ids import locus_ref, locus_refs
from mediafleet.adapters.nogc import collection_paused
from mediafleet.adapters.pdf import pdf_loci
from mediafleet.adapters.prov import ProvFacts, prov_jsonld
from mediafleet.adapters import verify as verify_module
from mediafleet.adapters.verify import loci_valid
from mediafleet.contract.addresses import (
    AudioRange,
    CharacterRange,
    FrameRange,
    ImageRegion,
    PageRegion,
    VideoTimeRange,
)
from mediafleet.contract.bundle import Edge, Node
from mediafleet.contract.common import TextBox
from mediafleet.contract.locus import EvidenceLocus
from mediafleet.contract.manifest import Limits
from mediafleet.contract.pdf import PdfOptions, PdfPage, PdfResult
from mediafleet.workers.pdf import mupdf as mupdf_module
from mediafleet.workers.pdf import textlayer
from mediafleet.workers.pdf.mupdf import pymupdf, text_lines
from mediafleet.workers import reading_order as reading_order_module
from mediafleet.workers.reading_order import python_reading_order_indices, reading_order_indices

from mediafleet import Dispatcher, Settings
from tests.helpers import can_compile
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
        if kind == 8 and i >= 6:
            break
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
        elif kind == 4:  # tall boxes among short ones: a row above reaching below the next one
            x0, y0 = rnd.uniform(0, 300), rnd.randint(0, 20) * 10.0
            w, h = rnd.uniform(1, 200), rnd.choice([8.0, 30.0, 60.0])
        elif kind == 5:  # ties everywhere: a few values for every edge, repeated and equal boxes
            x0, y0 = rnd.choice([0.0, 10.0, 20.0, 100.0]), rnd.choice([0.0, 5.0, 10.0, 30.0])
            w, h = rnd.choice([0.0, 10.0, 80.0, 100.0]), rnd.choice([0.0, 5.0, 10.0])
        elif kind == 6:  # nested columns: two columns, each of two columns, rows lined up or not
            outer, inner = rnd.randint(0, 1), rnd.randint(0, 1)
            x0 = 40.0 + 280.0 * outer + 130.0 * inner + rnd.choice([0.0, 0.0, 4.0])
            y0, w = rnd.randint(0, 30) * 12.0 + rnd.choice([0.0, 0.0, 1.5]), rnd.choice([60.0, 110.0, 110.0])
            h = 10.0
        elif kind == 7:  # formulas: rows of small pieces with narrow gaps, sub- and superscripts
            x0, y0 = 100.0 + rnd.randint(0, 30) * rnd.choice([4.5, 5.0, 9.0]), rnd.randint(0, 8) * 40.0
            y0 += rnd.choice([0.0, 0.0, -3.5, 2.0, 0.9])
            w, h = rnd.choice([4.5, 4.6, 26.0, 47.3, 7.8]), rnd.choice([6.4, 8.9, 9.7, 11.3])
        elif kind == 8:  # degenerate boxes: zero or negative width or height, a few values, few boxes
            x0, y0 = rnd.choice([0.0, 3.0, 10.0]), rnd.choice([0.0, 3.0, 10.0])
            w, h = rnd.choice([-5.0, 0.0, 3.0, 10.0]), rnd.choice([-5.0, 0.0, 3.0, 10.0])
        else:  # rows and columns overlapping a little (negative gaps), some boxes starting together
            x0, y0 = rnd.randint(0, 6) * 45.0, rnd.randint(0, 12) * 9.0
            w, h = rnd.choice([10.0, 50.0, 52.0, 140.0]), rnd.choice([10.0, 11.0, 30.0])
        boxes.append((x0, y0, x0 + w, y0 + h, i))
    return boxes


_KINDS = ["scattered", "grid", "two-columns", "form", "tall", "ties", "nested-columns", "formulas", "degenerate",
          "overlapping"]


@pytest.fixture(params=["c", "python"])
def order_of(request: pytest.FixtureRequest) -> Any:
    """Each form of the reading order: the C XY-cut (called directly, so that it cannot hand a
    layout back to Python unseen) and the Python one."""
    if request.param == "python":
        return python_reading_order_indices
    xycut = reading_order_module._xycut
    if xycut is None:
        pytest.skip("the C XY-cut is not built here (test_the_c_reader_is_built_where_a_compiler_was says why)")
    return lambda boxes, overlap=0.3, min_column=0.1: xycut.order(list(boxes), overlap, min_column)


@pytest.mark.parametrize("kind", range(len(_KINDS)), ids=_KINDS)
def test_the_reading_order_is_the_plain_xy_cuts(kind: int, order_of: Any) -> None:
    rnd = random.Random(kind)
    for _ in range(1500):
        boxes = _layout(rnd, kind)
        assert order_of(list(boxes)) == _plain_xy_cut(boxes)


@pytest.mark.parametrize("kind", range(len(_KINDS)), ids=_KINDS)
def test_small_regions_read_as_the_plain_xy_cuts(kind: int, order_of: Any) -> None:
    """Two and three boxes (worked out without grouping), in every order they can come in, and
    under other overlap and column settings."""
    rnd = random.Random(100 + kind)
    for _ in range(1500):
        boxes = _layout(rnd, kind)[:3]
        while len(boxes) < 2:
            boxes = _layout(rnd, kind)[:3]
        for perm in ([0, 1], [1, 0], [0, 1, 2], [2, 1, 0], [1, 2, 0]):
            if len(perm) <= len(boxes):
                some = [boxes[i] for i in perm]
                assert order_of(list(some)) == _plain_xy_cut(some)
                assert order_of(list(some), overlap=0.0, min_column=0.0) == _plain_xy_cut(some, 0.0, 0.0)
        assert order_of(list(boxes), overlap=0.6, min_column=0.5) == _plain_xy_cut(boxes, 0.6, 0.5)


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
        # Not undone (unfreezing would empty the permanent generation) and not redone (freezing
        # again would add every object since). Frozen objects can still be freed meanwhile, by
        # this thread or a test's leftover thread: the count may fall a little (one CI run: by 4).
        assert 0 < gc.get_freeze_count() <= frozen and gc.isenabled()
    finally:
        gc.unfreeze()


def test_whitespace_only_text_is_what_the_regex_calls_whitespace() -> None:
    """The classifier asks ``str.isspace`` where it once counted ``\\s`` matches."""
    every = "".join(chr(c) for c in range(0x3100))
    spaces = "".join(re.findall(r"\s", every))
    assert spaces.isspace() and all(c.isspace() == bool(re.fullmatch(r"\s", c)) for c in every)



# --- The text layer's lines, pages and loci built as validation builds them -------------------


def _mixed_pdf() -> bytes:
    """Lines as the extractor meets them: soft hyphens, a blank line, one partly and one wholly
    off the page, two columns, several spans on one line."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((50, 60), "exam\xadple soft\xad", fontsize=10)
    page.insert_text((50, 80), "well-", fontsize=10)
    page.insert_text((50, 92), "known two", fontsize=10)
    page.insert_text((300, 60), "right column line", fontsize=10)
    page.insert_text((50, 120), "   ", fontsize=10)
    page.insert_text((-50, 200), "partly off the page to the left", fontsize=10)
    page.insert_text((50, 900), "wholly below the page", fontsize=10)
    writer = pymupdf.TextWriter(page.rect)
    writer.append((50, 300), "one line ", fontsize=10)
    writer.append(writer.last_point, "in two fonts", font=pymupdf.Font("cour"), fontsize=12)
    writer.write_text(page)
    data = doc.tobytes()
    doc.close()
    return data


@pytest.fixture(scope="module")
def pdfs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("pdfs")
    made = {"mixed": _mixed_pdf(), **{f"rot{r}": text_pdf(2, rotation=r) for r in (0, 90, 180, 270)}}
    paths = []
    for name, data in made.items():
        path = tmp / f"{name}.pdf"
        path.write_bytes(data)
        paths.append(path)
    return paths


def _dict_lines(page: Any, flags: int) -> list[tuple[str, float, float, float, float]]:
    """Each line of ``page.get_text("dict")`` as the text layer takes it: its spans' text and its bbox."""
    return [("".join(span["text"] for span in line["spans"]), *line["bbox"])
            for block in page.get_text("dict", flags=flags)["blocks"] for line in block.get("lines", ())]


def test_the_text_lines_are_get_texts(pdfs: list[Path]) -> None:
    assert mupdf_module._DIRECT  # the direct form is the one under test here
    for path in pdfs:
        with pymupdf.open(path) as doc:
            for page in doc:
                flags = textlayer._TEXT_FLAGS
                assert text_lines(page, flags, page.rotation) == _dict_lines(page, flags)


def test_without_the_c_reader_the_lines_are_the_same(pdfs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the extension was not built, or declines a page, the dict is read: the same lines."""
    flags = textlayer._TEXT_FLAGS
    for fast in (False, True):
        monkeypatch.setattr(mupdf_module, "FAST_LINES", fast)
        monkeypatch.setattr(mupdf_module, "_stext", _Declines())
        for path in pdfs:
            with pymupdf.open(path) as doc:
                for page in doc:
                    assert text_lines(page, flags, page.rotation) == _dict_lines(page, flags)


class _Declines:
    """A C reader that declines every page (as the real one declines a vertical line)."""

    MUPDF_VERSION = pymupdf.mupdf_version

    @staticmethod
    def lines(address: int) -> None:
        assert address
        return None


def test_the_c_reader_is_built_where_a_compiler_was() -> None:
    """The extensions are optional; where the install had a C compiler they must be there and in use."""
    if not can_compile():
        pytest.skip("no C compiler or Python headers here: the package installs without the C reader")
    assert mupdf_module._stext is not None, "installed with a C compiler, but workers/pdf/_stext.c was not built"
    assert mupdf_module._stext.MUPDF_VERSION == pymupdf.mupdf_version
    assert mupdf_module.FAST_LINES
    assert reading_order_module._xycut is not None, "installed with a C compiler, but workers/_xycut.c was not built"
    boxes = [(0.0, 0.0, 10.0, 5.0, 0), (20.0, 0.0, 30.0, 5.0, 1)]
    assert reading_order_module._xycut.order(boxes, 0.3, 0.1) == reading_order_indices(boxes) == [0, 1]


def test_boxes_do_not_depend_on_pymupdfs_quad_corrections(many_pdfs: list[Path]) -> None:
    """A character's box is MuPDF's own quad: the module turns PyMuPDF's corrections off (as
    PyMuPDF 2 does when it imports pymupdf4llm, an older one not), and the C reader never uses them."""
    assert pymupdf.TOOLS.unset_quad_corrections() is True
    flags = textlayer._TEXT_FLAGS
    try:
        pymupdf.TOOLS.unset_quad_corrections(False)  # as on an install without pymupdf4llm
        for path in many_pdfs:
            with pymupdf.open(path) as doc:
                for i in _pages(doc):
                    page = doc.load_page(i)
                    corrected = _dict_lines(page, flags)
                    pymupdf.TOOLS.unset_quad_corrections(True)
                    plain = _dict_lines(page, flags)
                    if mupdf_module.FAST_LINES and page.rotation == 0:
                        assert text_lines(page, flags, 0) == plain, (path.name, i)
                    pymupdf.TOOLS.unset_quad_corrections(False)
                    # Same text either way; the boxes differ only where a font's ascender and
                    # descender span less than an em (TeX's fonts among them).
                    assert [line[0] for line in corrected] == [line[0] for line in plain]
    finally:
        pymupdf.TOOLS.unset_quad_corrections(True)


def _vertical_pdf() -> bytes:
    """A line of CJK text written vertically (the font's CMap turned to its -V form)."""
    doc = pymupdf.open()
    doc.new_page().insert_text((300, 100), "縦書きの文", fontname="china-t", fontsize=14)
    made = pymupdf.open(stream=doc.tobytes(), filetype="pdf")
    fonts = [x for x in range(1, made.xref_length()) if made.xref_get_key(x, "Subtype") == ("name", "/Type0")]
    made.xref_set_key(fonts[0], "Encoding", "/UniCNS-UTF16-V")
    return made.tobytes()


def test_the_c_reader_declines_a_vertical_line_and_the_dict_reads_it() -> None:
    """PyMuPDF stretches a vertical line's character boxes; the C reader leaves such a page to it."""
    if not mupdf_module.FAST_LINES:
        pytest.skip("the C reader is not built here (test_the_c_reader_is_built_where_a_compiler_was says why)")
    flags = textlayer._TEXT_FLAGS
    with pymupdf.open(stream=_vertical_pdf(), filetype="pdf") as doc:
        page = doc[0]
        textpage = pymupdf.mupdf.FzStextPage(
            mupdf_module._extra.page_get_textpage(page.this, None, flags, mupdf_module._UNIT))
        assert any(line.m_internal.wmode for block in textpage for line in block)
        assert mupdf_module._stext.lines(textpage.m_internal_value()) is None
        lines = text_lines(page, flags, 0)
        assert lines == _dict_lines(page, flags) and len(lines) >= 4
        # Each character of a vertical line is at least its font size high (PyMuPDF's rule).
        assert all(y1 - y0 >= 14 - 1e-3 for _, _, y0, _, y1 in lines)


@pytest.mark.slow
def test_the_c_reader_reads_what_the_dict_reads(many_pdfs: list[Path]) -> None:
    """Every page of every made and real PDF: the C reader's lines are the dict's, value for value."""
    if not mupdf_module.FAST_LINES:
        pytest.skip("the C reader is not built here (test_the_c_reader_is_built_where_a_compiler_was says why)")
    flags = textlayer._TEXT_FLAGS
    read = 0
    for path in many_pdfs:
        with pymupdf.open(path) as doc:
            for page in doc:
                if page.rotation:
                    continue  # a rotated page is read through get_text
                textpage = pymupdf.mupdf.FzStextPage(
                    mupdf_module._extra.page_get_textpage(page.this, None, flags, mupdf_module._UNIT))
                lines = mupdf_module._stext.lines(textpage.m_internal_value())
                assert lines == _dict_lines(page, flags), (path.name, page.number)
                read += len(lines)
    assert read > 0


def _same_model(made: Any, plain: Any) -> None:
    assert type(made) is type(plain) and made == plain
    assert made.__pydantic_fields_set__ == plain.__pydantic_fields_set__
    assert made.model_dump_json() == plain.model_dump_json()
    assert list(made.__dict__) == list(plain.__dict__)


def test_line_boxes_are_what_validation_makes(pdfs: list[Path]) -> None:
    seen = 0
    for path in pdfs:
        with pymupdf.open(path) as doc:
            for page in doc:
                boxes = textlayer._lines(page, page.rect, page.rotation)[0]
                for box in boxes:
                    _same_model(box, TextBox.model_validate(
                        {"text": box.text, "x": box.x, "y": box.y, "width": box.width, "height": box.height}))
                assert list(textlayer.page_lines(page)) == boxes
                seen += len(boxes)
    assert seen > 20


def test_pages_and_line_loci_are_what_validation_makes(pdfs: list[Path]) -> None:
    for path in pdfs:
        result = textlayer.extract_pdf(path, PdfOptions(), Limits(max_bytes=10**9))
        for page in result.pages:
            _same_model(page, PdfPage(page=page.page, width=page.width, height=page.height, rotation=page.rotation,
                                      text=page.text, path=page.path, boxes=list(page.boxes)))
        drafts = pdf_loci(result, DOCUMENT)
        lines = [d for d in drafts if d.address.kind == "image_region"]
        assert len(lines) == sum(len(p.boxes) for p in result.pages) > 0
        plain = pdf_loci_plain(result, DOCUMENT)
        assert drafts == plain
        for made, want in zip(drafts, plain, strict=True):
            _same_model(made.address, want.address)
            assert vars(made) == vars(want)


DOCUMENT = "sha256:" + "cd" * 32


def pdf_loci_plain(result: PdfResult, document_id: str) -> list[LocusDraft]:
    """pdf_loci as first written: every address validated, every draft made by its constructor."""
    total_text = sum(len(p.text) for p in result.pages) + max(len(result.pages) - 1, 0)
    drafts, offset = [], 0
    for page in result.pages:
        bounds = Bounds(width=page.width, height=page.height)
        on_page = {"page": page.page, "coordinate_space": "pdf_points_top_left", "path": page.path}
        if page.ocr_reason is not None:
            on_page["ocr_reason"] = page.ocr_reason
        drafts.append(LocusDraft(PageRegion(page=page.page, x=0.0, y=0.0, width=page.width, height=page.height),
                                 bounds, properties=dict(on_page)))
        if page.text:
            drafts.append(LocusDraft(CharacterRange(start=offset, end=offset + len(page.text)),
                                     Bounds(text_length=total_text), page.text, page.confidence,
                                     {"page": page.page, "path": page.path, "text_unit": "unicode_code_points"}))
        line_props = {"image_id": f"{document_id}:page{page.page}", **on_page}
        for b in page.boxes:
            drafts.append(LocusDraft(ImageRegion(x=b.x, y=b.y, width=b.width, height=b.height), bounds, b.text,
                                     b.confidence, line_props))
        offset += len(page.text) + 1
    return drafts


# --- The bundle's evidence nodes and PROV, against the plain forms ---------------------------


def _plain_evidence(drafts, derivation, policy, subject_json, occurrence_id, blob_id, claim_id):
    """The Evidence nodes, edges and locus ids as first written: models validated one by one."""
    nodes, edges, ids = [], [], []
    for index, draft in enumerate(drafts):
        locus_id = locus_ref(derivation, index)
        evidence_id = "evidence:" + locus_id[len("eg:locus:"):]
        envelope = EvidenceLocus(id=locus_id, subject=subject_json, address=draft.address, policy_ref=policy,
                                 derivation_ref=derivation).model_dump(mode="json")
        props = {"evidence_locus": envelope, "occurrence_id": occurrence_id, "blob_ref": blob_id,
                 "locus_kind": draft.address.kind, **draft.properties}
        if draft.text is not None:
            props["text"] = draft.text
        if draft.confidence is not None:
            props["confidence"] = draft.confidence
        nodes.append(Node(id=evidence_id, node_type="Evidence", properties=props))
        edges.append(Edge(source=evidence_id, target=occurrence_id, relationship="extractedFrom"))
        edges.append(Edge(source=evidence_id, target=claim_id, relationship="SUPPORTS"))
        ids.append(locus_id)
    return nodes, edges, ids


def test_evidence_nodes_and_edges_are_the_plain_ones() -> None:
    region = ImageRegion(x=1.0, y=2.0, width=3.0, height=4.0)
    bounds = Bounds(width=10.0, height=10.0)
    shared = {"image_id": "doc:page1", "page": 1}
    odd = {"text": "the properties' own", "locus_kind": "theirs", "confidence": 0.25}
    own = {"evidence_locus": {"id": "kept"}, "page": 2}
    drafts = [
        LocusDraft(PageRegion(page=1, x=0.0, y=0.0, width=10.0, height=10.0), bounds, properties={"page": 1}),
        LocusDraft(CharacterRange(start=0, end=5), Bounds(text_length=9), "hello", 0.5, {"page": 1}),
        *[LocusDraft(region, bounds, f"line {i}", None, shared) for i in range(3)],
        LocusDraft(region, bounds, "with confidence", 0.75, shared),
        LocusDraft(region, bounds, None, None, shared),
        LocusDraft(region, bounds, "text over theirs", None, odd),
        LocusDraft(region, bounds, None, None, odd),
        LocusDraft(region, bounds, "own envelope", None, own),
        LocusDraft(AudioRange(start_ms=0, end_ms=5), Bounds(duration_ms=9), "spoken", 0.9, {}),
    ]
    facts = ("eg:derivation:" + "ab" * 16, "eg:policy:" + "cd" * 16,
             {"kind": "occurrence", "id": "eg:occurrence:" + "ef" * 16}, "occurrence:" + "ef" * 16,
             "blob:" + "01" * 32, "claim:" + "23" * 16)
    nodes, edges = [], []
    ids = bundle_module._evidence(drafts, *facts, nodes, edges)
    plain_nodes, plain_edges, plain_ids = _plain_evidence(drafts, *facts)
    assert ids == plain_ids
    for made, want in zip(nodes, plain_nodes, strict=True):
        _same_model(made, want)
        assert list(made.properties) == list(want.properties)
    for made, want in zip(edges, plain_edges, strict=True):
        _same_model(made, want)


def test_prov_entities_are_the_plain_ones() -> None:
    from datetime import UTC, datetime

    at = datetime(2026, 1, 2, tzinfo=UTC)
    facts = ProvFacts("activity:" + "1" * 32, "blob:" + "2" * 64, "sha256:" + "2" * 64, "application/pdf",
                      "agent:" + "3" * 32, "label", {"engine": "pymupdf"}, "ocr_pdf", "ok", at, at,
                      [locus_ref("eg:derivation:" + "ab" * 16, i) for i in range(3)], "claim:" + "4" * 32)
    document = prov_jsonld(facts)
    entities = document["@graph"][3:]
    plain = [{"@id": i if i.startswith("eg:") else f"urn:mediafleet:{i}", "@type": "prov:Entity",
              "prov:wasGeneratedBy": {"@id": "urn:mediafleet:" + facts.activity_id},
              "prov:wasDerivedFrom": {"@id": "urn:mediafleet:" + facts.artifact_id}}
             for i in [*facts.locus_ids, facts.claim_id]]
    assert entities == plain
    assert json.dumps(document) == json.dumps({**document, "@graph": [*document["@graph"][:3], *plain]})


# --- Checks done once -------------------------------------------------------------------------


def test_the_drafts_mapped_last_are_checked_once_and_others_afresh(pdfs: list[Path]) -> None:
    result = textlayer.extract_pdf(pdfs[1], PdfOptions(), Limits(max_bytes=10**9))
    drafts = loci_module.to_loci(result, DOCUMENT)
    slot = loci_module.last_mapped(drafts)
    assert slot == [] and loci_valid(drafts) and slot == [True]
    assert loci_valid(loci_module.to_loci(result, DOCUMENT))  # the same drafts: the kept verdict
    outside = LocusDraft(ImageRegion(x=0.0, y=0.0, width=1e6, height=1.0), Bounds(width=10.0, height=10.0))
    changed = [*drafts[:-1], outside]
    assert loci_module.last_mapped(changed) is None and not loci_valid(changed)
    assert loci_module.last_mapped(drafts[:-1]) is None and loci_valid(drafts[:-1])
    assert loci_valid(tuple(drafts)) and not loci_valid((*drafts, outside))


def test_a_printable_text_without_a_replacement_character_has_no_garbage() -> None:
    """The classifier skips its expression for such a text: no character of it can match."""
    from mediafleet.workers.pdf.classify import _GARBAGE

    matched = [c for c in map(chr, range(0x110000)) if _GARBAGE.match(c) and c.isprintable() and c != "\ufffd"]
    assert not matched


def _plain_page_text(lines: list[TextBox]) -> str:
    """page_text as first written: each line asked whether it ends in a hyphen."""
    if not lines:
        return ""
    if not any(line.text.rstrip().endswith(("-", "\u2010")) for line in lines):
        return "\n".join(line.text for line in lines)
    parts = [lines[0].text]
    for prev, line in zip(lines, lines[1:]):
        head, rest = prev.text.rstrip(), line.text.lstrip()
        if (len(head) > 1 and head.endswith(("-", "\u2010")) and head[-2].isalpha() and rest[:1].islower()
                and textlayer._continues(prev, line)):
            parts[-1] = parts[-1].rstrip()[:-1]
            parts.append(rest)
        else:
            parts.append("\n")
            parts.append(line.text)
    return "".join(parts)


def test_page_text_is_the_plain_one_on_random_lines() -> None:
    rnd = random.Random(7)
    alphabet = ["a", "B", "-", "\u2010", " ", "\t", "\n", "x", "\xa0"]
    for _ in range(20000):
        lines = []
        for i in range(rnd.randint(0, 5)):
            text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 6)))
            if text.strip():
                lines.append(TextBox(text=text, x=rnd.choice([10.0, 12.0, 300.0]), y=10.0 + 12 * i, width=100.0,
                                     height=10.0))
        assert textlayer.page_text(lines) == _plain_page_text(lines)


# --- Real PDFs: each fast form against its plain one ------------------------------------------

REAL_ROOT = Path("/usr/share/doc")  # Debian packages' manuals, where installed
_CORPUS_PDFS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "pdf"
_PAGES_CHECKED = 40  # of each real PDF: enough of a manual's kinds of page, in a few seconds


@pytest.fixture(scope="module")
def many_pdfs(pdfs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The made PDFs, the conformance corpus's and every manual under /usr/share/doc (gzipped
    ones decompressed here), those that are there."""
    import gzip

    tmp = tmp_path_factory.mktemp("real")
    found = [*pdfs, *sorted(_CORPUS_PDFS.glob("*.pdf"))]
    found += sorted(p for p in REAL_ROOT.rglob("*.pdf") if p.is_file() and not p.is_symlink())
    for packed in sorted(REAL_ROOT.rglob("*.pdf.gz")):
        data = gzip.decompress(packed.read_bytes())
        if data.startswith(b"%PDF"):
            target = tmp / f"{packed.parent.name}-{packed.name.removesuffix('.gz')}"
            target.write_bytes(data)
            found.append(target)
    return found


def _pages(doc: Any) -> range:
    return range(min(doc.page_count, _PAGES_CHECKED))


@pytest.mark.slow
def test_every_page_reads_in_the_plain_xy_cuts_order(many_pdfs: list[Path], order_of: Any) -> None:
    """Every page of every real and made PDF (and the first of the benchmark's): its lines'
    boxes, as the text layer hands them to the reading order, in the plain XY-cut's order."""
    from benchmarks.documents import make_pdf

    documents = [pymupdf.open(path) for path in many_pdfs]
    # The benchmark's pages, as bench_pdf makes them (20 of its 500: making 500 takes some 18 s).
    documents.append(pymupdf.open(stream=make_pdf(20), filetype="pdf"))
    pages = 0
    for doc in documents:
        with doc:
            for page in doc:
                rects = textlayer._lines(page, page.rect, page.rotation)[1]
                assert order_of(list(rects)) == _plain_xy_cut(rects), (doc.name, page.number)
                pages += 1
    assert pages >= 24


def test_a_lean_document_reads_as_the_plain_one(many_pdfs: list[Path]) -> None:
    """open_document skips the outline and metadata; its pages are pymupdf.open's."""
    assert mupdf_module._LEAN  # the lean form is the one under test here
    flags = textlayer._TEXT_FLAGS
    for path in many_pdfs:
        lean, plain = mupdf_module.open_document(path), pymupdf.open(path, filetype="pdf")
        try:
            assert type(lean) is not type(plain) and lean.metadata is None
            assert (lean.page_count, lean.needs_pass, lean.is_encrypted, lean.is_pdf) == (
                plain.page_count, plain.needs_pass, plain.is_encrypted, plain.is_pdf)
            facts = (lean.page_count, lean.needs_pass, lean.is_encrypted)
            for i in _pages(plain):
                a, b = lean.load_page(i), plain.load_page(i)
                assert (a.rect, a.rotation) == (b.rect, b.rotation), (path.name, i)
                assert text_lines(a, flags, a.rotation) == _dict_lines(b, flags), (path.name, i)
        finally:
            lean.close()
            plain.close()
        from_bytes = mupdf_module.open_document(path.read_bytes())  # the dispatcher's page count opens bytes
        try:
            assert type(from_bytes) is type(lean) and from_bytes.metadata is None
            assert (from_bytes.page_count, from_bytes.needs_pass, from_bytes.is_encrypted) == facts
        finally:
            from_bytes.close()


def test_real_pdfs_give_the_plain_loci_and_evidence(many_pdfs: list[Path]) -> None:
    """The extractor, pdf_loci, the evidence builder and the containment check on real pages,
    each against the plain form (validated models, one call per locus)."""
    facts = ("eg:derivation:" + "ab" * 16, "eg:policy:" + "cd" * 16,
             {"kind": "occurrence", "id": "eg:occurrence:" + "ef" * 16}, "occurrence:" + "ef" * 16,
             "blob:" + "01" * 32, "claim:" + "23" * 16)
    lines = 0
    for path in many_pdfs:
        options = PdfOptions(ocr="never", page_span=(1, _PAGES_CHECKED))
        result = textlayer.extract_pdf(path, options, Limits(max_bytes=10**9))
        for page in result.pages:
            _same_model(page, PdfPage(page=page.page, width=page.width, height=page.height, rotation=page.rotation,
                                      text=page.text, path=page.path, boxes=list(page.boxes)))
        drafts = pdf_loci(result, DOCUMENT)
        assert drafts == pdf_loci_plain(result, DOCUMENT)
        assert verify_module._check(drafts) is all(verify_module.inside(d) for d in drafts) is True
        nodes, edges = [], []
        ids = bundle_module._evidence(drafts, *facts, nodes, edges)
        plain_nodes, plain_edges, plain_ids = _plain_evidence(drafts, *facts)
        assert ids == plain_ids
        assert [n.model_dump_json() for n in nodes] == [n.model_dump_json() for n in plain_nodes], path.name
        assert [e.model_dump_json() for e in edges] == [e.model_dump_json() for e in plain_edges]
        lines += sum(len(p.boxes) for p in result.pages)
    assert lines > 100


def test_streamed_evidence_moves_character_ranges_on() -> None:
    """evidence_properties with a text base: the envelope of the moved address, the draft's own
    address untouched."""
    text = LocusDraft(CharacterRange(start=3, end=8), Bounds(text_length=9), "hello", None, {"page": 2})
    line = LocusDraft(ImageRegion(x=1.0, y=2.0, width=3.0, height=4.0), Bounds(width=9.0, height=9.0), "l", None, {})
    facts = {"subject": {"kind": "occurrence", "id": "eg:occurrence:" + "ef" * 16},
             "policy": "eg:policy:" + "cd" * 16, "derivation": "eg:derivation:" + "ab" * 16,
             "occurrence_id": "occurrence:" + "ef" * 16, "blob_id": "blob:" + "01" * 32}
    ids = locus_refs(facts["derivation"], 2)
    made = bundle_module.evidence_properties([text, line], ids, **facts, text_base=100)
    moved = CharacterRange(start=103, end=108)
    for props, draft, address in zip(made, [text, line], [moved, line.address], strict=True):
        envelope = EvidenceLocus(id=props["evidence_locus"]["id"], subject=facts["subject"], address=address,
                                 policy_ref=facts["policy"], derivation_ref=facts["derivation"])
        assert props["evidence_locus"] == envelope.model_dump(mode="json")
        assert list(props) == ["evidence_locus", "occurrence_id", "blob_ref", "locus_kind", *draft.properties, "text"]
    assert text.address == CharacterRange(start=3, end=8)
    assert [p["evidence_locus"]["id"] for p in made] == ids


def test_the_containment_check_is_inside_for_each_locus() -> None:
    """_check (the box rule inlined) against inside() per locus, on loci in and out of bounds."""
    bounds = Bounds(width=10.0, height=20.0)
    nan = float("nan")
    cases = [
        LocusDraft(ImageRegion(x=0.0, y=0.0, width=10.0, height=20.0), bounds),
        LocusDraft(ImageRegion(x=0.0, y=0.0, width=10.0 + 1e-7, height=20.0), bounds),
        LocusDraft(ImageRegion(x=0.0, y=0.0, width=10.1, height=1.0), bounds),
        LocusDraft(ImageRegion(x=1.0, y=19.5, width=1.0, height=1.0), bounds),
        LocusDraft(PageRegion(page=1, x=0.0, y=0.0, width=10.0, height=20.0), bounds),
        LocusDraft(PageRegion(page=1, x=0.0, y=0.0, width=10.0, height=20.0), Bounds(width=10.0)),
        LocusDraft(PageRegion(page=1, x=0.0, y=0.0, width=10.0, height=20.0), Bounds(width=nan, height=20.0)),
        LocusDraft(ImageRegion(x=1.0, y=1.0, width=1.0, height=1.0), Bounds(text_length=5)),
        LocusDraft(CharacterRange(start=0, end=5), Bounds(text_length=5)),
        LocusDraft(CharacterRange(start=0, end=6), Bounds(text_length=5)),
        LocusDraft(AudioRange(start_ms=0, end_ms=5), Bounds(duration_ms=4)),
        LocusDraft(FrameRange(start_frame=1, end_frame=3), Bounds(frame_count=3)),
        LocusDraft(VideoTimeRange(start_ms=0, end_ms=5), Bounds(duration_ms=5)),
    ]
    verdicts = [verify_module.inside(d) for d in cases]
    assert True in verdicts and False in verdicts
    for draft, verdict in zip(cases, verdicts, strict=True):
        assert verify_module._check([draft]) is verdict
        assert verify_module._check([cases[0], draft, cases[0]]) is verdict
    assert verify_module._check(cases) is all(verdicts)
    not_contract = LocusDraft({"kind": "image_region", "x": 0.0, "y": 0.0, "width": 1.0, "height": 1.0}, bounds)
    assert verify_module._check([cases[0], not_contract]) is False


def test_a_blob_stored_again_is_kept_when_intact_and_replaced_when_not(tmp_path: Path) -> None:
    import io
    import os

    from mediafleet.blobs.local import _REHASH_MAX, LocalBlobStore

    store = LocalBlobStore(tmp_path / "blobs")
    data = text_pdf(1)
    digest, size, head = store.put_stream(io.BytesIO(data))
    path = store._path(digest)
    inode = path.stat().st_ino
    os.utime(path, (1, 1))
    assert store.put_stream(io.BytesIO(data)) == (digest, size, head)
    assert path.stat().st_ino == inode and path.stat().st_mtime > 1  # kept, its stamp refreshed
    path.write_bytes(data[:-1] + b"?")  # altered in place: the same size, another hash
    assert store.put_stream(io.BytesIO(data))[0] == digest
    assert path.read_bytes() == data and path.stat().st_ino != inode
    path.write_bytes(data[:10])  # cut short
    store.put_stream(io.BytesIO(data))
    assert path.read_bytes() == data
    big = b"%PDF" + bytes(_REHASH_MAX)  # above the size hashed in place: replaced, as before
    big_digest = store.put_stream(io.BytesIO(big))[0]
    first = store._path(big_digest).stat().st_ino
    assert store.put_stream(io.BytesIO(big))[0] == big_digest
    assert store._path(big_digest).stat().st_ino != first and store._path(big_digest).read_bytes() == big
    assert not list((tmp_path / "blobs" / "tmp").iterdir())  # no copy left behind


def test_what_is_made_once_per_process_is_what_each_job_made() -> None:
    from mediafleet.adapters.ids import canonical, ref
    from mediafleet.workers import extractor
    from packaging.specifiers import SpecifierSet

    for capability in Settings().manifest().capabilities.values():
        plain = ref("policy", canonical(capability.model_dump(mode="json")))
        assert bundle_module._policy(capability) == plain == bundle_module._policy(capability)
    for installed, spec in [("1.26.5", ">=1.24,<2"), ("2.0", ">=1.24,<2"), ("2.0", "==2.0"), ("1.0", "not a spec")]:
        try:
            want: bool | None = installed in SpecifierSet(spec)
        except Exception:
            want = None
        assert extractor._satisfies(installed, spec) is want


def test_the_c_xy_cut_leaves_what_it_cannot_compare_as_python_does_to_python() -> None:
    """A NaN (whose comparisons Python orders by position) or integer coordinates: the C form
    declines, and reading_order_indices gives the Python form's order."""
    xycut = reading_order_module._xycut
    if xycut is None:
        pytest.skip("the C XY-cut is not built here (test_the_c_reader_is_built_where_a_compiler_was says why)")
    nan = float("nan")
    for boxes in ([(0.0, 0.0, 10.0, 5.0, 0), (nan, 0.0, 30.0, 5.0, 1), (5.0, 9.0, 8.0, 12.0, 2)],
                  [(0, 0, 10, 5, 0), (20, 0, 30, 5, 1), (5, 9, 8, 12, 2)]):
        assert xycut.order(list(boxes), 0.3, 0.1) is None
        assert reading_order_indices(list(boxes)) == python_reading_order_indices(list(boxes))
    assert xycut.order([], 0.3, 0.1) == reading_order_indices([]) == []


def test_the_c_forms_keep_no_memory_once_they_return(pdfs: list[Path]) -> None:
    """Each call's tuples, strings and scratch are the caller's or freed: thousands of calls leave
    the memory allocated from this file's calls where one call left it (a leak of one object a
    call would show as ~100 kB: 4,800 calls of at least ~20 bytes each). Only allocations made
    under this file's frames are counted, which is where everything the C forms allocate is
    attributed: tracemalloc sees every thread, and in a whole-suite run threads other tests left
    behind (loggers, pools, clients) allocate meanwhile (one CI run counted 36,338 bytes from
    everywhere, an over-reach of the old whole-process count). The bound is 16 KiB, a sixth of the
    smallest leak it is there to catch."""
    import tracemalloc

    xycut, stext = reading_order_module._xycut, mupdf_module._stext
    if xycut is None or not mupdf_module.FAST_LINES:
        pytest.skip("the C forms are not built here (test_the_c_reader_is_built_where_a_compiler_was says why)")
    rnd = random.Random(7)
    layouts = [_layout(rnd, kind % len(_KINDS)) for kind in range(60)]
    this_file = [tracemalloc.Filter(True, __file__)]
    with pymupdf.open(pdfs[0]) as doc:
        page = doc[0]
        textpage = pymupdf.mupdf.FzStextPage(
            mupdf_module._extra.page_get_textpage(page.this, None, textlayer._TEXT_FLAGS, mupdf_module._UNIT))
        address = textpage.m_internal_value()

        def calls() -> None:
            for boxes in layouts:
                assert xycut.order(boxes, 0.3, 0.1) is not None
            for _ in range(60):
                assert stext.lines(address)

        calls()
        gc.collect()
        tracemalloc.start()
        try:
            calls()
            gc.collect()
            before = tracemalloc.take_snapshot().filter_traces(this_file)
            for _ in range(40):
                calls()
            gc.collect()
            after = tracemalloc.take_snapshot().filter_traces(this_file)
        finally:
            tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 16384, grown
