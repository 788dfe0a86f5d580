"""PDF result -> loci: the page, its text, its lines."""

from __future__ import annotations

from mediafleet.adapters.drafts import Bounds, LocusDraft, set_dict, set_extra, set_fields_set, set_private
from mediafleet.contract.addresses import CharacterRange, ImageRegion, PageRegion
from mediafleet.contract.pdf import PdfResult

__all__ = ["PDF_SPACE", "pdf_loci"]

PDF_SPACE = "pdf_points_top_left"
_SET_DRAFT = LocusDraft.__dict__["__dict__"].__set__  # a frozen dataclass's __dict__, set in one step
_REGION_FIELDS = {"x", "y", "width", "height"}  # shared by the regions (see mediafleet.adapters.drafts)


def pdf_loci(result: PdfResult, document_id: str) -> list[LocusDraft]:
    """Per page: a PageRegion over the page, a CharacterRange over its text, an ImageRegion per line.

    Character offsets index the document text: the page texts joined by form feeds (``\\f``).
    """
    total_text = sum(len(p.text) for p in result.pages) + max(len(result.pages) - 1, 0)
    drafts: list[LocusDraft] = []
    offset = 0
    new = object.__new__
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
            # One ImageRegion per line; its lines share one properties dict (read-only, as every
            # draft's). A line's box is a validated TextBox, whose rules (finite floats, width and
            # height > 0) are an ImageRegion's: the region is built as validation would build it
            # (mediafleet.adapters.drafts.trusted, inlined), and its draft as drafts_of does.
            line_props = {"image_id": f"{document_id}:page{page.page}", **on_page}
            add = drafts.append
            for box in page.boxes:
                values = box.__dict__
                region = new(ImageRegion)
                set_dict(region, {"x": values["x"], "y": values["y"], "width": values["width"],
                                  "height": values["height"], "kind": "image_region"})
                set_fields_set(region, _REGION_FIELDS)
                set_extra(region, None)
                set_private(region, None)
                draft = new(LocusDraft)
                _SET_DRAFT(draft, {"address": region, "bounds": page_bounds, "text": values["text"],
                                   "confidence": values["confidence"], "properties": line_props})
                add(draft)
        offset += len(page.text) + 1
    return drafts
