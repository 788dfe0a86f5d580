"""The PDF text-layer extractor on real PDFs: corpus texts, generated PDFs, invariants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mediafleet.contract import (
    CapabilityRefused,
    ErrorCode,
    InputRejected,
    LimitExceeded,
    Limits,
    PdfOptions,
    default_manifest,
)
from mediafleet.workers.pdf.textlayer import extract_pdf
from pydantic import ValidationError

from mediafleet import Dispatcher, Settings
from tests.media import encrypted_pdf, page_lines, text_pdf

LIMITS = Limits(max_bytes=10**9, max_pages=5000)
_LIGATURES = {0xFB00: "ff", 0xFB01: "fi", 0xFB02: "fl", 0xFB03: "ffi", 0xFB04: "ffl", 0xFB05: "st", 0xFB06: "st"}


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _write(tmp_path: Path, data: bytes, name: str = "a.pdf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.corpus
@pytest.mark.parametrize("name", ["crazyones", "scotus-transcript-p1"])
def test_corpus_text_layer_equals_upstream_text_modulo_whitespace(corpus: Path, name: str) -> None:
    result = extract_pdf(corpus / "pdf" / f"{name}.pdf", PdfOptions(), LIMITS)
    expected = (corpus / "pdf" / f"{name}.txt").read_text(encoding="utf-8")
    # upstream's text keeps ligature characters; the fleet reads them as their letters
    expected = expected.translate(_LIGATURES)
    assert _squash("".join(p.text for p in result.pages)) == _squash(expected)


@pytest.mark.corpus
def test_crazyones_first_line_box(corpus: Path) -> None:
    page = extract_pdf(corpus / "pdf" / "crazyones.pdf", PdfOptions(), LIMITS).pages[0]
    assert (page.width, page.height) == (612.0, 792.0)
    first = page.boxes[0]
    assert first.text == "The Crazy Ones"
    assert first.x == pytest.approx(72.0, abs=0.5) and 60 < first.y < 80


def test_generated_pdf_gives_every_line_in_order_with_boxes_inside(tmp_path: Path) -> None:
    progress: list[tuple[int, int | None]] = []
    result = extract_pdf(_write(tmp_path, text_pdf(3)), PdfOptions(), LIMITS, lambda d, t: progress.append((d, t)))
    assert result.page_count == 3 and [p.page for p in result.pages] == [1, 2, 3]
    assert progress == [(1, 3), (2, 3), (3, 3)]
    for page in result.pages:
        assert [b.text for b in page.boxes] == page_lines(page.page)
        assert page.text == "\n".join(page_lines(page.page))
        assert page.path == "text_layer"
        ys = [b.y for b in page.boxes]
        assert ys == sorted(ys)
        for b in page.boxes:
            assert b.width > 0 and b.height > 0
            assert 0 <= b.x and b.x + b.width <= page.width
            assert 0 <= b.y and b.y + b.height <= page.height


@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_rotated_pages_give_boxes_in_the_displayed_page(tmp_path: Path, rotation: int) -> None:
    result = extract_pdf(_write(tmp_path, text_pdf(1, rotation=rotation)), PdfOptions(), LIMITS)
    page = result.pages[0]
    assert page.rotation == rotation
    if rotation in (90, 270):
        assert (page.width, page.height) == (842, 595)
    assert [b.text for b in page.boxes] == page_lines(1) or sorted(b.text for b in page.boxes) == sorted(page_lines(1))
    for b in page.boxes:
        assert 0 <= b.x and b.x + b.width <= page.width + 1e-6
        assert 0 <= b.y and b.y + b.height <= page.height + 1e-6
        # lines on a quarter-turned page are taller than wide
        if rotation in (90, 270):
            assert b.height > b.width


def test_two_column_page_is_read_column_by_column(tmp_path: Path) -> None:
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    page.insert_text((72, 60), "A title across both columns of the page", fontsize=14)
    for i in range(5):
        page.insert_text((72, 120 + i * 16), f"left column line {i} with some words", fontsize=11)
        page.insert_text((340, 124 + i * 16), f"right column line {i} with words", fontsize=11)
    data = doc.tobytes()
    texts = [b.text for b in extract_pdf(_write(tmp_path, data), PdfOptions(), LIMITS).pages[0].boxes]
    assert texts == (
        ["A title across both columns of the page"]
        + [f"left column line {i} with some words" for i in range(5)]
        + [f"right column line {i} with words" for i in range(5)]
    )


def test_page_limit_is_checked_before_reading_pages(tmp_path: Path) -> None:
    with pytest.raises(LimitExceeded) as err:
        extract_pdf(_write(tmp_path, text_pdf(4)), PdfOptions(), Limits(max_bytes=10**9, max_pages=3))
    assert err.value.code == ErrorCode.TOO_MANY_PAGES


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (lambda: encrypted_pdf(), ErrorCode.ENCRYPTED_INPUT),
        (lambda: text_pdf(2)[:300], ErrorCode.CORRUPT_INPUT),
        (lambda: b"%PDF-1.7\n" + b"\x00garbage" * 50, ErrorCode.CORRUPT_INPUT),
    ],
    ids=["encrypted", "truncated", "garbage"],
)
def test_bad_pdfs_raise_public_errors(tmp_path: Path, data, code: ErrorCode) -> None:
    path = _write(tmp_path, data())
    with pytest.raises(InputRejected) as err:
        extract_pdf(path, PdfOptions(), LIMITS)
    assert err.value.code == code
    assert str(tmp_path) not in err.value.message and "a.pdf" not in err.value.message


@pytest.mark.slow
def test_large_pdf_is_read_page_by_page(tmp_path: Path) -> None:
    """2,000 pages: every page comes back, and progress is reported once per page."""
    seen = []
    result = extract_pdf(_write(tmp_path, text_pdf(2000, lines=2)), PdfOptions(), LIMITS, lambda d, t: seen.append(d))
    assert result.page_count == 2000 and len(result.pages) == 2000
    assert seen == list(range(1, 2001))
    assert result.pages[-1].boxes[0].text == page_lines(2000, 2)[0]


def test_page_spans_of_a_split_run_join_into_the_whole_run(tmp_path: Path) -> None:
    """Spans 1-3 and 4-5 of a 5-page PDF: their pages, in order, are the whole run's, field for
    field; the producer is the same (the span is not an option a result records); progress counts
    within the span; the page count is the document's."""
    path = _write(tmp_path, text_pdf(5))
    whole = extract_pdf(path, PdfOptions(), LIMITS)
    seen: dict[tuple[int, int], list[tuple[int, int | None]]] = {}
    parts = []
    for span in ((1, 3), (4, 5)):
        seen[span] = []
        parts.append(extract_pdf(path, PdfOptions(page_span=span), LIMITS, lambda d, t, s=span: seen[s].append((d, t))))
    assert [p.model_dump() for part in parts for p in part.pages] == [p.model_dump() for p in whole.pages]
    assert [[p.page for p in part.pages] for part in parts] == [[1, 2, 3], [4, 5]]
    assert all(part.page_count == 5 and part.producer == whole.producer for part in parts)
    assert "page_span" not in whole.producer.options
    assert seen == {(1, 3): [(1, 3), (2, 3), (3, 3)], (4, 5): [(1, 2), (2, 2)]}


def test_a_page_span_is_cut_to_the_document_and_refused_outside_it(tmp_path: Path) -> None:
    path = _write(tmp_path, text_pdf(5))
    tail = extract_pdf(path, PdfOptions(page_span=(4, 9)), LIMITS)
    assert [p.page for p in tail.pages] == [4, 5] and tail.page_count == 5
    assert [p.page for p in extract_pdf(path, PdfOptions(page_span=(2, 2)), LIMITS).pages] == [2]
    with pytest.raises(InputRejected) as err:
        extract_pdf(path, PdfOptions(page_span=(6, 7)), LIMITS)
    assert err.value.code == ErrorCode.INVALID_REQUEST
    for bad in ((0, 2), (3, 2), (1.0, 2)):
        with pytest.raises(ValidationError):
            PdfOptions(page_span=bad)


def test_a_caller_cannot_set_the_page_span(tmp_path: Path) -> None:
    """The manifest does not declare it: refused at admission, before any worker reads a page."""
    with pytest.raises(CapabilityRefused) as err:
        default_manifest().capability("ocr_pdf").check_options({"page_span": [1, 2]})
    assert err.value.code == ErrorCode.INVALID_REQUEST
    bundle = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(
        _write(tmp_path, text_pdf(3)), options={"page_span": [1, 2]}
    ).bundle()
    assert bundle.status == "failed" and bundle.error is not None
    assert bundle.error.code == ErrorCode.INVALID_REQUEST
    assert not [n for n in bundle.nodes if n.node_type in ("Evidence", "Claim")]


def _typeset_pdf(lines: list[tuple[float, float, str]]) -> bytes:
    """A page of ``lines`` (x, baseline y, text) set in an embedded Times with real ligature glyphs:
    the text ``\\ufb01`` is drawn with the font's fi glyph and mapped back to U+FB01, as typesetters do."""
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page(width=400, height=300)
    font = pymupdf.Font("tiro")
    assert font.has_glyph(0xFB01) and font.has_glyph(0xFB03)
    writer = pymupdf.TextWriter(page.rect)
    for x, y, text in lines:
        writer.append((x, y), text, font=font, fontsize=12)
    writer.write_text(page)
    data = doc.tobytes()
    doc.close()
    return data


def test_ligature_glyphs_are_read_as_their_letters_with_the_same_boxes(tmp_path: Path) -> None:
    import pymupdf

    data = _typeset_pdf([(50, 50, "the \ufb01le and \ufb02ow of the o\ufb03ce"), (50, 80, "e\ufb00ort and ba\ufb04e")])
    with pymupdf.open("pdf", data) as doc:  # the glyphs really are ligatures in the text layer
        raw = doc[0].get_text("text", flags=pymupdf.TEXT_PRESERVE_LIGATURES)
    assert "\ufb01" in raw and "\ufb03" in raw
    page = extract_pdf(_write(tmp_path, data), PdfOptions(), LIMITS).pages[0]
    assert [b.text for b in page.boxes] == ["the file and flow of the office", "effort and baffle"]
    assert page.text == "the file and flow of the office\neffort and baffle"
    assert not re.search("[\ufb00-\ufb06]", page.text)
    # each line's box still spans its whole drawn line
    with pymupdf.open("pdf", data) as doc:
        drawn = [ln["bbox"] for b in doc[0].get_text("dict")["blocks"] for ln in b["lines"]]
    for box, (x0, y0, x1, y1) in zip(page.boxes, drawn):
        assert (box.x, box.y, box.x + box.width, box.y + box.height) == pytest.approx((x0, y0, x1, y1), abs=0.01)


def test_hyphenation_and_soft_hyphens_read_as_a_reader_reads_them(tmp_path: Path) -> None:
    data = _typeset_pdf([
        (50, 50, "a long exam-"),
        (50, 65, "ple of hyphen\xadation in a para\xad"),
        (50, 80, "graph ends well-"),
        (50, 95, "Known words stay apart"),
        (50, 150, "far away-"),
        (50, 200, "line after a gap"),
    ])
    page = extract_pdf(_write(tmp_path, data), PdfOptions(), LIMITS).pages[0]
    # boxes keep what they cover: the drawn hyphens stay, the invisible soft hyphen goes
    assert [b.text for b in page.boxes] == [
        "a long exam-", "ple of hyphenation in a para-", "graph ends well-", "Known words stay apart",
        "far away-", "line after a gap",
    ]
    assert page.text == (
        "a long example of hyphenation in a paragraph ends well-\nKnown words stay apart\nfar away-\nline after a gap"
    )
    assert "\xad" not in page.text


def test_typeset_two_column_page_reads_title_then_each_column_then_the_folio(tmp_path: Path) -> None:
    """A page typeset the way articles are: a title across the page, two justified columns of
    running text (lines of the two columns at the same heights) and a page number."""
    import pymupdf

    left = " ".join(f"Left{i} evidence harbour ledger quartz orbit." for i in range(30))
    right = " ".join(f"Right{i} falcon granite willow copper." for i in range(30))
    title = "A Two-Column Article Title Across the Page"
    doc = pymupdf.open()
    page = doc.new_page(width=612, height=792)
    font = pymupdf.Font("tiro")
    writer = pymupdf.TextWriter(page.rect)
    writer.append((72, 60), title, font=font, fontsize=16)
    for rect, text in ((pymupdf.Rect(72, 90, 296, 720), left), (pymupdf.Rect(316, 90, 540, 720), right)):
        assert writer.fill_textbox(rect, text, font=font, fontsize=10, align=pymupdf.TEXT_ALIGN_JUSTIFY) == []
    writer.append((300, 760), "7", font=font, fontsize=10)
    writer.write_text(page)
    data = doc.tobytes()
    doc.close()
    result = extract_pdf(_write(tmp_path, data), PdfOptions(), LIMITS).pages[0]
    assert result.text.split() == f"{title} {left} {right} 7".split()
    columns = [b.x < 306 for b in result.boxes[1:-1]]
    assert columns == sorted(columns, reverse=True) and 20 < columns.count(True) < len(columns) - 10
