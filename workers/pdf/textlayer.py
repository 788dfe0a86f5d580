"""The PDF text layer with PyMuPDF: page sizes, page text and one box per text line.

Lines are put in reading order (:mod:`workers.reading_order`) rather than content-stream order,
and the page text is those lines joined by newlines, so text and boxes always agree.

Each page is routed (:mod:`workers.pdf.classify`): a page whose text layer is usable keeps this
fast path; the others (scans, unmapped glyphs) are rendered and OCR'd (:mod:`workers.pdf.ocr_page`),
and the page says which path it took. The OCR engine is imported and built only when a page needs
it, so a born-digital PDF never loads it.

Pages are loaded one at a time and released before the next, so memory stays bounded by the
largest page, not the document (a 2,000-page PDF is never held whole).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from contract.common import ModelRef, Producer, TextBox
from contract.errors import ErrorCode, InputRejected, LimitExceeded
from contract.manifest import Limits
from contract.pdf import PdfOptions, PdfPage, PdfResult
from workers.pdf.classify import ocr_reason
from workers.pdf.mupdf import pymupdf
from workers.reading_order import reading_order
from workers.sink import BlobSink

__all__ = ["EXTRACTOR", "EXTRACTOR_VERSION", "extract_pdf", "open_pdf", "page_lines"]

EXTRACTOR = "mediafleet.pdf.textlayer"
EXTRACTOR_VERSION = "2"

ProgressFn = Callable[[int, int | None], None]

# Text only (no image blocks), ligatures and whitespace as written, clipped to the media box.
_TEXT_FLAGS = pymupdf.TEXT_PRESERVE_LIGATURES | pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP


def open_pdf(path: Path, limits: Limits) -> Any:
    """Open a PDF for page-by-page reading, refusing what cannot or must not be processed.

    Raises:
        InputRejected: corrupt (``corrupt_input``), encrypted (``encrypted_input``) or pageless.
        LimitExceeded: more pages than ``limits.max_pages`` (``too_many_pages``).
    """
    try:
        doc = pymupdf.open(path, filetype="pdf")
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
    a, b, c, d, e, f = page.rotation_matrix
    width, height = page.rect.width, page.rect.height
    content = page.get_text("dict", flags=_TEXT_FLAGS)
    for block in content["blocks"]:
        for line in block.get("lines", ()):
            text = "".join(span["text"] for span in line["spans"])
            if not text.strip():
                continue
            x0, y0, x1, y1 = line["bbox"]
            # Rotations are quarter turns, so the turned box's corners are two opposite corners.
            px, py = a * x0 + c * y0 + e, b * x0 + d * y0 + f
            qx, qy = a * x1 + c * y1 + e, b * x1 + d * y1 + f
            left, right = max(min(px, qx), 0.0), min(max(px, qx), width)
            top, bottom = max(min(py, qy), 0.0), min(max(py, qy), height)
            if right <= left or bottom <= top:
                continue
            yield TextBox(text=text, x=left, y=top, width=right - left, height=bottom - top)


def _rect(box: TextBox) -> tuple[float, float, float, float]:
    return box.x, box.y, box.x + box.width, box.y + box.height


class _Ocr:
    """The OCR engine, fetched on the first page that needs it; remembers that it was used."""

    def __init__(self) -> None:
        self.engine: Any = None

    def get(self) -> Any:
        if self.engine is None:
            from workers.ocr.engine import get_engine

            self.engine = get_engine()
        return self.engine


def _read_page(doc: Any, index: int, options: PdfOptions, limits: Limits, ocr: _Ocr) -> PdfPage:
    page = doc.load_page(index)
    lines = list(page_lines(page))
    reason = ocr_reason(page, lines, options.ocr)
    if reason is not None:
        from workers.pdf.ocr_page import ocr_page

        return ocr_page(page, index + 1, options, limits, reason, ocr.get())
    boxes = reading_order(lines, _rect)
    rect = page.rect
    return PdfPage(
        page=index + 1,
        width=rect.width,
        height=rect.height,
        rotation=page.rotation % 360,
        text="\n".join(b.text for b in boxes),
        path="text_layer",
        boxes=boxes,
    )


def producer(options: PdfOptions, models: list[ModelRef] | None = None, ocr_threads: int | None = None) -> Producer:
    """PyMuPDF reads and renders; when a page was OCR'd, ``models`` names the OCR engine's files and
    ``ocr_threads`` its threads (they change OCR's numbers; the text layer's do not depend on them)."""
    used = options.model_dump(mode="json")
    if ocr_threads is not None:
        used["ocr_threads"] = ocr_threads
    return Producer(
        engine="pymupdf",
        engine_version=pymupdf.VersionBind,
        extractor=EXTRACTOR,
        extractor_version=EXTRACTOR_VERSION,
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
        options: the capability's options.
        limits: the manifest's limits for the capability.
        progress: called with (pages done, page count) after each page.
        sink: unused (nothing derived is stored).

    Returns:
        One :class:`PdfPage` per page, in order.

    Raises:
        InputRejected: the PDF is corrupt, encrypted or has no pages.
        LimitExceeded: over the page limit, or a page to OCR over the pixel limit at ``options.dpi``.
        Unavailable: a page needs OCR and the OCR engine is not installed here.
    """
    doc = open_pdf(path, limits)
    try:
        total = doc.page_count
        pages: list[PdfPage] = []
        ocr = _Ocr()
        for index in range(total):
            try:
                pages.append(_read_page(doc, index, options, limits, ocr))
            except (RuntimeError, ValueError) as exc:
                raise InputRejected(f"page {index + 1} of the PDF cannot be read") from exc
            if progress is not None:
                progress(index + 1, total)
        models = ocr.engine.models(with_classifier=options.rotated_lines) if ocr.engine is not None else None
        threads = ocr.engine.threads if ocr.engine is not None else None
        return PdfResult(page_count=total, pages=pages, producer=producer(options, models, threads))
    finally:
        doc.close()
