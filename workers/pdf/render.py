"""A page rendered for OCR: PyMuPDF's pixmap handed over as an array, no PNG round trip.

The pixel count at the requested resolution is computed from the page size and checked against
the manifest's ``max_pixels`` before anything is rendered (a page the size of a building at
200 dpi is refused, not allocated).
"""

from __future__ import annotations

import math
from typing import Any

import cv2
import numpy as np

from mediafleet.contract.errors import ErrorCode, LimitExceeded
from mediafleet.contract.manifest import Limits
from mediafleet.workers.pdf.mupdf import pymupdf

__all__ = ["page_pixels", "render_size"]


def render_size(page: Any, dpi: int) -> tuple[int, int]:
    """(width, height) in pixels of the displayed page rendered at ``dpi``."""
    zoom = dpi / 72
    return math.ceil(page.rect.width * zoom), math.ceil(page.rect.height * zoom)


def page_pixels(page: Any, number: int, dpi: int, limits: Limits) -> np.ndarray:
    """The displayed page (rotation applied) as BGR uint8 pixels at ``dpi``.

    Raises:
        LimitExceeded: the rendering would exceed ``limits.max_pixels`` (``too_many_pixels``).
    """
    width, height = render_size(page, dpi)
    if limits.max_pixels is not None and width * height > limits.max_pixels:
        raise LimitExceeded(
            f"page {number} would be {width * height} pixels at {dpi} dpi; the limit is {limits.max_pixels}",
            code=ErrorCode.TOO_MANY_PIXELS,
        )
    pix = page.get_pixmap(dpi=dpi, colorspace=pymupdf.csRGB, alpha=False)
    rows = np.frombuffer(pix.samples_mv, dtype=np.uint8).reshape(pix.height, pix.stride)
    rgb = rows[:, : pix.width * 3].reshape(pix.height, pix.width, 3)
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
