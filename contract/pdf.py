"""PDF options and results (``ocr_pdf``).

Boxes are in PDF points with the origin at the top-left of the page as displayed (PyMuPDF's
``page.rect``, rotation applied), y growing downwards; every box lies inside its page. That holds
for OCR'd pages too: their lines are found on the page rendered at ``dpi`` and mapped back to
points.
"""

from __future__ import annotations

from typing import Annotated, Literal

from mediafleet.contract.common import F64, Confidence, Producer, Strict, TextBox
from pydantic import Field, model_validator

__all__ = ["PdfOptions", "PdfPage", "PdfResult"]


_PageNumber = Annotated[int, Field(strict=True, ge=1)]


class PdfOptions(Strict):
    """Options of ``ocr_pdf``: when to OCR a page, and how finely to render it for OCR."""

    ocr: Literal["auto", "never", "always"] = Field(
        "auto",
        description="auto: OCR only pages whose text layer is unusable (no text, unmapped glyphs, or an "
        "image-dominated page with next to no text); never: text layer only; always: OCR every page",
    )
    dpi: Annotated[int, Field(strict=True, ge=72, le=600)] = Field(
        200, description="dots per inch at which a page is rendered for OCR"
    )
    rotated_lines: bool = Field(
        False, description="also read lines that are upside down (runs the line-orientation classifier)"
    )
    # Not in the manifest's options, so a caller's request naming it is refused at admission; and
    # excluded from dumps, so the producer (and the derivation) of a part equals the whole run's.
    page_span: tuple[_PageNumber, _PageNumber] | None = Field(
        None, exclude=True, description="set by the fleet for one part of a split job; never a caller's option"
    )

    @model_validator(mode="after")
    def _span_in_order(self) -> PdfOptions:
        if self.page_span is not None and self.page_span[0] > self.page_span[1]:
            raise ValueError("page_span's first page comes after its last")
        return self


class PdfPage(Strict):
    page: Annotated[int, Field(strict=True, ge=1)] = Field(description="1-based page number")
    width: F64 = Field(gt=0, description="points")
    height: F64 = Field(gt=0, description="points")
    rotation: Literal[0, 90, 180, 270] = 0
    text: str = Field(description="the page's text, lines joined by newlines")
    path: Literal["text_layer", "ocr"] = Field(description="how the text was obtained")
    ocr_reason: Literal["no_text", "unmapped_glyphs", "image_only", "requested"] | None = Field(
        None, description="why the page was OCR'd (null on the text-layer path)"
    )
    confidence: Confidence | None = Field(
        None, description="OCR pages: mean recognition confidence of the page's lines (null: text layer, or no lines)"
    )
    boxes: list[TextBox] = Field(default_factory=list, description="one per text line, reading order")


class PdfResult(Strict):
    kind: Literal["pdf"] = "pdf"
    page_count: Annotated[int, Field(strict=True, ge=0)]
    pages: list[PdfPage]
    producer: Producer
