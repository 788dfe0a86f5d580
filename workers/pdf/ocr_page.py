"""One PDF page through OCR: render, read the lines, map their boxes back to page points.

Boxes come back from :func:`mediafleet.workers.ocr.lines.read_lines` inside the rendered image; scaling by
the page's size over the image's keeps them inside the page (a right or bottom edge that float
rounding would push past the page is cut to it).
"""

from __future__ import annotations

from typing import Any

from mediafleet.contract.common import TextBox
from mediafleet.contract.manifest import Limits
from mediafleet.contract.pdf import PdfOptions, PdfPage
from mediafleet.workers.ocr.engine import OcrEngine
from mediafleet.workers.ocr.lines import read_lines
from mediafleet.workers.pdf.classify import OcrReason
from mediafleet.workers.pdf.render import page_pixels

__all__ = ["DETECT_DPI", "ocr_page"]

# Text lines are found on the page as if rendered at this resolution (then read at ``dpi``): 10 pt
# text stays well detectable, at a fraction of the detector's time at 200 dpi (docs/ocr.md).
DETECT_DPI = 110


def ocr_page(page: Any, number: int, options: PdfOptions, limits: Limits, reason: OcrReason,
             engine: OcrEngine) -> PdfPage:
    """OCR the displayed page ``page`` (page ``number``, 1-based).

    Raises:
        LimitExceeded: the page at ``options.dpi`` exceeds ``limits.max_pixels``.
    """
    image = page_pixels(page, number, options.dpi, limits)
    height_px, width_px = image.shape[:2]
    det_side = max(32, round(max(height_px, width_px) * min(1.0, DETECT_DPI / options.dpi)))
    lines = read_lines(image, det_max_side=det_side, rotated_lines=options.rotated_lines, engine=engine)
    rect = page.rect
    sx, sy = rect.width / width_px, rect.height / height_px
    boxes: list[TextBox] = []
    for line in lines:
        x0, y0, x1, y1 = line.box
        left, top = x0 * sx, y0 * sy
        right, bottom = min(x1 * sx, rect.width), min(y1 * sy, rect.height)
        if right > left and bottom > top:
            boxes.append(TextBox(text=line.text, x=left, y=top, width=right - left, height=bottom - top,
                                 confidence=line.confidence))
    confidence = sum(b.confidence or 0.0 for b in boxes) / len(boxes) if boxes else None
    return PdfPage(
        page=number,
        width=rect.width,
        height=rect.height,
        rotation=page.rotation % 360,
        text="\n".join(b.text for b in boxes),
        path="ocr",
        ocr_reason=reason,
        confidence=confidence,
        boxes=boxes,
    )
