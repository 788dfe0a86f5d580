"""Image options and results (``analyze_image``).

Coordinates are pixels of the *upright* image: the EXIF orientation is applied first, so x grows
to the right and y downwards on the image as a person sees it, origin at its top-left corner.
Every box lies inside its page. A multi-page TIFF gives one page per frame; any other image has
exactly one page.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from mediafleet.contract.common import Digest, Producer, Strict, TextBox

__all__ = ["ImageOptions", "ImagePage", "ImageResult"]

_PHASH = re.compile(r"[0-9a-f]{16}")


def _check_phash(value: str) -> str:
    if not _PHASH.fullmatch(value):
        raise ValueError("a pHash is 16 lowercase hex characters (64 bits)")
    return value


PHash = Annotated[str, AfterValidator(_check_phash)]
PositiveInt = Annotated[int, Field(strict=True, gt=0)]


class ImageOptions(Strict):
    """Options of ``analyze_image``."""

    rotated_lines: bool = Field(
        False, description="also read lines that are upside down (runs the line-orientation classifier)"
    )


class ImagePage(Strict):
    """One image (or one frame of a multi-page TIFF), upright."""

    page: PositiveInt = Field(description="1-based frame number (1 for a single image)")
    width: PositiveInt = Field(description="pixels of the upright image")
    height: PositiveInt = Field(description="pixels of the upright image")
    orientation: Annotated[int, Field(strict=True, ge=1, le=8)] = Field(
        1, description="the EXIF orientation that was applied (1: none)"
    )
    phash: PHash = Field(description="DCT perceptual hash of the upright image: 64 bits as 16 hex characters")
    thumbnail: Digest | None = Field(
        None, description="blob digest of a PNG thumbnail (longer side at most 256 px); null when no store was given"
    )
    regions: list[TextBox] = Field(
        default_factory=list, description="one per recognised text line, in reading order; boxes in upright pixels"
    )


class ImageResult(Strict):
    kind: Literal["image"] = "image"
    page_count: PositiveInt
    pages: list[ImagePage]
    producer: Producer
