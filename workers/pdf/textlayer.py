"""The PDF text layer with PyMuPDF: page sizes, page text and one box per text line.

Lines are put in reading order (:mod:`mediafleet.workers.reading_order`) rather than content-stream order,
and the page text is those lines joined by newlines, so text and boxes always agree. The text is
as a reader reads it: ligature glyphs are expanded (``\ufb01`` -> ``fi``, MuPDF splitting the glyph's
box between the letters), a soft hyphen inside a line is dropped (it is invisible) and one at the
end of a line is shown as the hyphen it is drawn as. In the page text, a word hyphenated across
two lines is joined (:func:`page_text`); each line's box keeps the text it covers, hyphen included.

Each page is routed (:mod:`mediafleet.workers.pdf.classify`): a page whose text layer is usable keeps this
fast path; the others (scans, unmapped glyphs) are rendered and OCR'd (:mod:`mediafleet.workers.pdf.ocr_page`),
and the page says which path it took. The OCR engine is imported and built only when a page needs
it, so a born-digital PDF never loads it.

Pages are loaded one at a time and released before the next, so memory stays bounded by the
largest page, not the document (a 2,000-page PDF is never held whole).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from mediafleet.adapters.drafts import set_dict, set_extra, set_fields_set, set_private, trusted
from mediafleet.adapters.nogc import collection_paused
from mediafleet.contract.common import ModelRef, Producer, TextBox
from mediafleet.contract.errors import ErrorCode, InputRejected, LimitExceeded
from mediafleet.contract.manifest import Limits
from mediafleet.contract.pdf import PdfOptions, PdfPage, PdfResult
from mediafleet.workers.pdf.classify import text_layer_reason
from mediafleet.workers.pdf.mupdf import open_document, pymupdf, text_lines
from mediafleet.modalities.pdf import SPEC
from mediafleet.workers.reading_order import reading_order_indices
from mediafleet.workers.sink import BlobSink
from mediafleet.modalities.spec import ProgressFn

__all__ = ["extract_pdf", "open_pdf", "page_lines", "page_range", "page_text"]

# Text only (no image blocks), whitespace as written, clipped to the media box. Without
# TEXT_PRESERVE_LIGATURES MuPDF expands the ligatures U+FB00-U+FB06 into their letters.
_TEXT_FLAGS = pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP
_SOFT_HYPHEN = "\xad"
# What a line-end hyphenation is drawn with: HYPHEN-MINUS and HYPHEN (a soft hyphen is shown as "-").
_HYPHENS = ("-", "\u2010")
_LINE_END_HYPHEN = re.compile("[-\u2010]\\s*(?:\n|\\Z)")


def open_pdf(path: Path, limits: Limits) -> Any:
    """Open a PDF for page-by-page reading, refusing what cannot or must not be processed.

    Raises:
        InputRejected: corrupt (``corrupt_input``), encrypted (``encrypted_input``) or pageless.
        LimitExceeded: more pages than ``limits.max_pages`` (``too_many_pages``).
    """
    try:
        doc = open_document(path)
    except Exception as exc:
        raise InputRejected("the PDF cannot be parsed") from exc
    if doc.needs_pass or doc.is_encrypted:
        doc.close()
        raise InputRejected("the PDF is encrypted", code=ErrorCode.ENCRYPTED_INPUT)
    if doc.page_count < 1:
        doc.close()
        raise InputRejected("the PDF has no pages")
    if limits.max_pages is not None and doc.page_count > limits.max_pages:
        count = doc.page_count
        doc.close()
        raise LimitExceeded(
            f"the PDF has {count} pages; the limit is {limits.max_pages}", code=ErrorCode.TOO_MANY_PAGES
        )
    return doc


def page_lines(page: Any) -> Iterator[TextBox]:
    """Each non-blank text line of a page with its box in displayed, top-left page points.

    MuPDF reports boxes on the unrotated page; they are turned with the page's rotation matrix
    and cut to the visible page. A line wholly outside the page is not visible and is skipped.
    """
    yield from _lines(page, page.rect, page.rotation)[0]


_Rect = tuple[float, float, float, float, int]
_BOX_FIELDS = {"text", "x", "y", "width", "height"}  # shared by the boxes (see mediafleet.adapters.drafts)
_IDENTITY = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


def _lines(page: Any, rect: Any, rotation: int) -> tuple[list[TextBox], list[_Rect], list[str], float]:
    """The page's lines as :func:`page_lines` gives them (content order), each one's
    ``(x0, y0, x1, y1, index)`` as reading order takes it (``x1`` as ``x + width``, as from the
    box), their texts and the sum of their box areas. ``rect`` and ``rotation`` are the page's
    (each a MuPDF call).

    Each :class:`TextBox` is built as validation builds it (:func:`mediafleet.adapters.drafts.trusted`,
    inlined): the checks here are its rules. The text is a non-empty string; each box edge is a
    float cut to ``[0, page side]`` (a NaN or infinite MuPDF value never survives ``right > left``
    and ``bottom > top``), so every box is finite with a positive width and height.
    """
    # A page of rotation 0 has the identity matrix (PyMuPDF's own rule): not asked for.
    a, b, c, d, e, f = _IDENTITY if rotation == 0 else page.rotation_matrix
    width, height = rect.width, rect.height
    lines: list[TextBox] = []
    rects: list[_Rect] = []
    texts: list[str] = []
    area = 0.0
    new, box_type = object.__new__, TextBox
    add_line, add_rect, add_text = lines.append, rects.append, texts.append
    for text, x0, y0, x1, y1 in text_lines(page, _TEXT_FLAGS, rotation):
        if _SOFT_HYPHEN in text:
            text = _soft_hyphens(text)
        if not text or text.isspace():
            continue
        # Rotations are quarter turns, so the turned box's corners are two opposite corners.
        px, py = a * x0 + c * y0 + e, b * x0 + d * y0 + f
        qx, qy = a * x1 + c * y1 + e, b * x1 + d * y1 + f
        # max(min(px, qx), 0.0), min(max(px, qx), width) and the same for y, inlined.
        low, high = (qx, px) if qx < px else (px, qx)
        left = 0.0 if 0.0 > low else low
        right = width if width < high else high
        low, high = (qy, py) if qy < py else (py, qy)
        top = 0.0 if 0.0 > low else low
        bottom = height if height < high else high
        if not (right > left and bottom > top):  # NaN fails too
            continue
        w, h = right - left, bottom - top
        area += w * h
        add_rect((left, top, left + w, top + h, len(lines)))
        box = new(box_type)
        set_dict(box, {"text": text, "x": left, "y": top, "width": w, "height": h, "confidence": None})
        set_fields_set(box, _BOX_FIELDS)
        set_extra(box, None)
        set_private(box, None)
        add_line(box)
        add_text(text)
    return lines, rects, texts, area


def _soft_hyphens(text: str) -> str:
    """A line's soft hyphens as a reader sees them: the last one (ending the line) is the hyphen
    it is drawn as; any other is invisible and dropped."""
    body = text.rstrip()
    tail = text[len(body):]
    if body.endswith(_SOFT_HYPHEN):
        return body[:-1].replace(_SOFT_HYPHEN, "") + "-" + tail
    return text.replace(_SOFT_HYPHEN, "")


def _continues(line: TextBox, nxt: TextBox) -> bool:
    """True when ``nxt`` is the next line of the same column as ``line``: below it, no more than a
    line's height further down, and overlapping it horizontally."""
    return (
        nxt.y > line.y
        and nxt.y - (line.y + line.height) < line.height
        and nxt.x < line.x + line.width
        and line.x < nxt.x + nxt.width
    )


def page_text(lines: Sequence[TextBox]) -> str:
    """The page text of lines in reading order: joined by newlines, except a word hyphenated at
    the end of a line, which is joined to its rest on the next line without the hyphen.

    A line ends in a hyphenation when it ends with a letter and a hyphen (``-`` or U+2010) and the
    next line of the same column starts with a lower-case letter (``exam-`` / ``ple`` gives
    ``example``). A compound broken at its own hyphen (``well-`` / ``known``) reads the same way and
    loses its hyphen in the page text; the line's box text keeps it.
    """
    if not lines:
        return ""
    joined = "\n".join([line.text for line in lines])
    # A line ending in a hyphen (trailing whitespace aside) is a hyphen followed by whitespace up
    # to a newline or the end in the joined text; the expression can also match where none does
    # (a newline inside a line), which only costs the exact loop below.
    if _LINE_END_HYPHEN.search(joined) is None:
        return joined  # no line ends in a hyphen: nothing to join
    parts = [lines[0].text]
    for prev, line in pairwise(lines):
        head = prev.text.rstrip()
        rest = line.text.lstrip()
        if (
            len(head) > 1
            and head.endswith(_HYPHENS)
            and head[-2].isalpha()
            and rest[:1].islower()
            and _continues(prev, line)
        ):
            parts[-1] = parts[-1].rstrip()[:-1]
            parts.append(rest)
        else:
            parts.append("\n")
            parts.append(line.text)
    return "".join(parts)


class _Ocr:
    """The OCR engine, fetched on the first page that needs it; remembers that it was used."""

    def __init__(self) -> None:
        self.engine: Any = None

    def get(self) -> Any:
        if self.engine is None:
            from mediafleet.workers.ocr.engine import get_engine

            self.engine = get_engine()
        return self.engine


def _read_page(doc: Any, index: int, options: PdfOptions, limits: Limits, ocr: _Ocr) -> PdfPage:
    page = doc.load_page(index)
    rect, rotation = page.rect, page.rotation
    lines, rects, texts, area = _lines(page, rect, rotation)
    reason = text_layer_reason(page, rect, "".join(texts), area, options.ocr)
    if reason is not None:
        from mediafleet.workers.pdf.ocr_page import ocr_page

        return ocr_page(page, index + 1, options, limits, reason, ocr.get())
    boxes = [lines[i] for i in reading_order_indices(rects)]
    # The page's own values (its size is the PDF's, not ours) are validated; its boxes are
    # TextBoxes already, which validation would only check one by one for being TextBoxes.
    head = PdfPage(
        page=index + 1,
        width=rect.width,
        height=rect.height,
        rotation=rotation % 360,
        text=page_text(boxes),
        path="text_layer",
    )
    return trusted(PdfPage, {**head.__dict__, "boxes": boxes}, {*head.__pydantic_fields_set__, "boxes"})


def page_range(page_span: tuple[int, int] | None, page_count: int) -> tuple[int, int]:
    """The 0-based, end-exclusive page indices a run reads: every page, or ``page_span`` (1-based,
    inclusive) cut to the document.

    Raises:
        InputRejected: the span starts after the document's last page.
    """
    if page_span is None:
        return 0, page_count
    first, last = page_span
    if first > page_count:
        raise InputRejected(f"the page span starts at page {first}; the PDF has {page_count} pages",
                            code=ErrorCode.INVALID_REQUEST)
    return first - 1, min(last, page_count)


def producer(options: PdfOptions, models: list[ModelRef] | None = None, ocr_threads: int | None = None) -> Producer:
    """PyMuPDF reads and renders; when a page was OCR'd, ``models`` names the OCR engine's files and
    ``ocr_threads`` its threads (they change OCR's numbers; the text layer's do not depend on them)."""
    used = options.model_dump(mode="json")
    if ocr_threads is not None:
        used["ocr_threads"] = ocr_threads
    return Producer(
        engine="pymupdf",
        engine_version=pymupdf.VersionBind,
        extractor=SPEC.extractor_name,
        extractor_version=SPEC.extractor_version,
        models=models or [],
        options=used,
    )


def extract_pdf(
    path: Path,
    options: PdfOptions,
    limits: Limits,
    progress: ProgressFn | None = None,
    sink: BlobSink | None = None,
) -> PdfResult:
    """Read a PDF page by page: the text layer where it is usable, OCR where it is not.

    Args:
        path: a local file holding the (digest-verified) PDF.
        options: the capability's options; ``options.page_span`` (set by the fleet for one part of
            a split job) reads only those pages, cut to the document.
        limits: the manifest's limits for the capability.
        progress: called with (pages done, pages to read) after each page.
        sink: unused (nothing derived is stored).

    Returns:
        One :class:`PdfPage` per page read, in order; ``page_count`` is the document's.

    Raises:
        InputRejected: the PDF is corrupt, encrypted or has no pages, or the page span lies
            outside it.
        LimitExceeded: over the page limit, or a page to OCR over the pixel limit at ``options.dpi``.
        Unavailable: a page needs OCR and the OCR engine is not installed here.
    """
    doc = open_pdf(path, limits)
    try:
        total = doc.page_count
        first, last = page_range(options.page_span, total)
        span = last - first
        pages: list[PdfPage] = []
        ocr = _Ocr()
        with collection_paused():  # every page's text dicts and boxes: none is in a cycle
            for index in range(first, last):
                try:
                    pages.append(_read_page(doc, index, options, limits, ocr))
                except (RuntimeError, ValueError) as exc:
                    raise InputRejected(f"page {index + 1} of the PDF cannot be read") from exc
                if progress is not None:
                    progress(index + 1 - first, span)
        models = ocr.engine.models(with_classifier=options.rotated_lines) if ocr.engine is not None else None
        threads = ocr.engine.threads if ocr.engine is not None else None
        return PdfResult(page_count=total, pages=pages, producer=producer(options, models, threads))
    finally:
        doc.close()
