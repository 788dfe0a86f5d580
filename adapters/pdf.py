"""PDF result -> loci: the page, its text, its lines."""

from __future__ import annotations

from mediafleet.adapters.drafts import Bounds, LocusDraft, drafts_of
from mediafleet.contract.addresses import CharacterRange, ImageRegion, PageRegion
from mediafleet.contract.pdf import PdfResult
from pydantic import TypeAdapter

__all__ = ["PDF_SPACE", "pdf_loci"]

PDF_SPACE = "pdf_points_top_left"
_IMAGE_REGIONS: TypeAdapter[list[ImageRegion]] = TypeAdapter(list[ImageRegion])


def pdf_loci(result: PdfResult, document_id: str) -> list[LocusDraft]:
    """Per page: a PageRegion over the page, a CharacterRange over its text, an ImageRegion per line.

    Character offsets index the document text: the page texts joined by form feeds (``\\f``).
    """
    total_text = sum(len(p.text) for p in result.pages) + max(len(result.pages) - 1, 0)
    drafts: list[LocusDraft] = []
    offset = 0
    for page in result.pages:
        page_bounds = Bounds(width=page.width, height=page.height)
        on_page = {"page": page.page, "coordinate_space": PDF_SPACE, "path": page.path}
        if page.ocr_reason is not None:
            on_page["ocr_reason"] = page.ocr_reason
        drafts.append(
            LocusDraft(
                address=PageRegion(page=page.page, x=0.0, y=0.0, width=page.width, height=page.height),
                bounds=page_bounds,
                properties=dict(on_page),
            )
        )
        if page.text:
            drafts.append(
                LocusDraft(
                    address=CharacterRange(start=offset, end=offset + len(page.text)),
                    bounds=Bounds(text_length=total_text),
                    text=page.text,
                    confidence=page.confidence,
                    properties={"page": page.page, "path": page.path, "text_unit": "unicode_code_points"},
                )
            )
        if page.boxes:
            # One ImageRegion per line, validated in one call; its lines share one properties dict
            # (read-only, as every draft's): what line_locus makes, line by line.
            line_props = {"image_id": f"{document_id}:page{page.page}", **on_page}
            regions = _IMAGE_REGIONS.validate_python(
                [{"x": b.x, "y": b.y, "width": b.width, "height": b.height} for b in page.boxes]
            )
            drafts.extend(drafts_of(regions, page_bounds, [b.text for b in page.boxes],
                                    [b.confidence for b in page.boxes], line_props))
        offset += len(page.text) + 1
    return drafts
