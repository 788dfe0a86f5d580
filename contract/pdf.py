"""PDF options and results (``ocr_pdf``).

Boxes are in PDF points with the origin at the top-left of the page as displayed (PyMuPDF's
``page.rect``, rotation applied), y growing downwards; every box lies inside its page.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from contract.common import F64, Producer, Strict, TextBox

__all__ = ["PdfOptions", "PdfPage", "PdfResult"]


class PdfOptions(Strict):
    """Options of ``ocr_pdf``. None yet: the text layer is read as it is."""


class PdfPage(Strict):
    page: Annotated[int, Field(strict=True, ge=1)] = Field(description="1-based page number")
    width: F64 = Field(gt=0, description="points")
    height: F64 = Field(gt=0, description="points")
    rotation: Literal[0, 90, 180, 270] = 0
    text: str = Field(description="the page's text, lines joined by newlines")
    path: Literal["text_layer", "ocr"] = Field(description="how the text was obtained")
    boxes: list[TextBox] = Field(default_factory=list, description="one per text line, reading order")


class PdfResult(Strict):
    kind: Literal["pdf"] = "pdf"
    page_count: Annotated[int, Field(strict=True, ge=0)]
    pages: list[PdfPage]
    producer: Producer
