"""Image result -> loci: per page, an ImageRegion over the whole upright image, then one per line.

The whole-image region carries the page's pHash, size and thumbnail digest (so an image with no
text still yields located evidence); each line's region carries its text and confidence. Boxes
are pixels of the upright image; ``image_id`` names the page as ``<document>:page<n>``.
"""

from __future__ import annotations

from typing import Any

from mediafleet.adapters.drafts import Bounds, LocusDraft
from mediafleet.contract.addresses import ImageRegion
from mediafleet.contract.common import TextBox
from mediafleet.contract.image import ImageResult

__all__ = ["IMAGE_SPACE", "image_loci", "line_locus"]

IMAGE_SPACE = "image_pixels_upright"


def image_loci(result: ImageResult, document_id: str) -> list[LocusDraft]:
    """Per page: the whole image, then each text line in reading order."""
    drafts: list[LocusDraft] = []
    for page in result.pages:
        bounds = Bounds(width=float(page.width), height=float(page.height))
        on_page = {"image_id": f"{document_id}:page{page.page}", "page": page.page, "coordinate_space": IMAGE_SPACE}
        drafts.append(
            LocusDraft(
                address=ImageRegion(x=0.0, y=0.0, width=float(page.width), height=float(page.height)),
                bounds=bounds,
                properties={**on_page, "region": "image", "phash": page.phash, "thumbnail": page.thumbnail,
                            "orientation": page.orientation},
            )
        )
        drafts.extend(line_locus(box, bounds, {**on_page, "region": "text_line", "label": box.text})
                      for box in page.regions)
    return drafts


def line_locus(box: TextBox, bounds: Bounds, properties: dict[str, Any]) -> LocusDraft:
    """One text line's ImageRegion (pixels of an image, or points of a PDF page), with its text."""
    return LocusDraft(
        address=ImageRegion(x=box.x, y=box.y, width=box.width, height=box.height),
        bounds=bounds,
        text=box.text,
        confidence=box.confidence,
        properties=properties,
    )
