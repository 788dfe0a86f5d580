"""Is a page's text layer usable, or must the page be OCR'd? Decided from the page itself.

A page is OCR'd (in ``auto`` mode) when its text layer:

* holds no text at all (``no_text``): a scan, or a page of vector outlines;
* is mostly glyphs without a Unicode mapping (``unmapped_glyphs``): MuPDF reports those as
  U+FFFD, and private-use or control characters are no better;
* covers next to nothing of a page dominated by images (``image_only``): a scan with a stamped
  page number or header, for instance. Images must cover at least ``IMAGE_DOMINATED`` of the
  page and the text lines less than ``TEXT_SPARSE`` of it.

A page that already carries an OCR text layer (invisible text over the scan) covers the page
with text and keeps the fast text-layer path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from mediafleet.contract.common import TextBox
from mediafleet.workers.pdf.mupdf import pymupdf

__all__ = ["GARBAGE_SHARE", "IMAGE_DOMINATED", "TEXT_SPARSE", "OcrReason", "ocr_reason", "text_layer_reason"]

OcrReason = Literal["no_text", "unmapped_glyphs", "image_only", "requested"]

GARBAGE_SHARE = 0.3
IMAGE_DOMINATED = 0.5
TEXT_SPARSE = 0.02


# U+FFFD and the non-whitespace characters of categories Cc (controls), Co (private use) and Cs
# (surrogates): one regular expression instead of a category lookup per character.
_GARBAGE = re.compile(
    "[\ufffd\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\ue000-\uf8ff\U000f0000-\U000ffffd"
    "\U00100000-\U0010fffd\ud800-\udfff]"
)
_SPACE = re.compile(r"\s")


def _image_share(page: Any, rect: Any) -> float:
    """Share of the displayed page that images cover (overlaps counted once per image, capped at 1)."""
    area = rect.width * rect.height
    if area <= 0:
        return 0.0
    matrix = page.rotation_matrix
    covered = 0.0
    for info in page.get_image_info():
        box = (pymupdf.Rect(info["bbox"]) * matrix) & rect
        if not box.is_empty:
            covered += box.width * box.height
    return min(covered / area, 1.0)


def ocr_reason(page: Any, lines: Sequence[TextBox], mode: Literal["auto", "never", "always"]) -> OcrReason | None:
    """Why ``page`` must be OCR'd, or None when its text layer (``lines``) is to be used."""
    return text_layer_reason(page, page.rect, "".join(line.text for line in lines),
                             sum(b.width * b.height for b in lines), mode)


def text_layer_reason(page: Any, rect: Any, text: str, text_area: float,
                      mode: Literal["auto", "never", "always"]) -> OcrReason | None:
    """:func:`ocr_reason` from what the text layer's reader has at hand: the page's displayed
    ``rect``, its lines' texts joined and the sum of their box areas (points squared)."""
    if mode == "never":
        return None
    if mode == "always":
        return "requested"
    if not text or text.isspace():  # no character but whitespace (str.isspace is regex \s)
        return "no_text"
    # Garbage is U+FFFD or a character of Cc, Co or Cs; none of those but U+FFFD (and whitespace
    # controls, which are not garbage) is printable. So a printable text without U+FFFD has none,
    # found by two scans in C instead of the expression's; only another text is searched.
    clean = text.isprintable() and "\ufffd" not in text
    if not clean and _GARBAGE.search(text) is not None:  # counted only when there is any: most pages have none
        chars = len(text) - len(_SPACE.findall(text))
        if len(_GARBAGE.findall(text)) >= GARBAGE_SHARE * chars:
            return "unmapped_glyphs"
    area = rect.width * rect.height
    text_share = text_area / area if area > 0 else 0.0
    if text_share < TEXT_SPARSE and _image_share(page, rect) >= IMAGE_DOMINATED:
        return "image_only"
    return None
