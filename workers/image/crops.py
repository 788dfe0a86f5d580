"""PNG crops of an image's regions, for the callers' ``crop_png_b64``: the upright pixels inside each
box, scaled down to at most :data:`CROP_SIDE` pixels on the longer side, for at most
:data:`MAX_CROPS` boxes, in the order given."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from mediafleet.contract.manifest import Limits
from mediafleet.workers.image.decode import frames, open_image

__all__ = ["CROP_SIDE", "MAX_CROPS", "Box", "region_crops"]

CROP_SIDE = 512
MAX_CROPS = 64


@dataclass(frozen=True)
class Box:
    """A region of one page: 1-based ``page``, upright pixels."""

    page: int
    x: float
    y: float
    width: float
    height: float


def _crop_png(image: Image.Image, box: Box, max_side: int) -> bytes | None:
    left, top = max(0, math.floor(box.x)), max(0, math.floor(box.y))
    right = min(image.width, math.ceil(box.x + box.width))
    bottom = min(image.height, math.ceil(box.y + box.height))
    if right <= left or bottom <= top:
        return None
    crop = image.crop((left, top, right, bottom))
    if max(crop.size) > max_side:
        crop.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    crop.save(out, format="PNG", optimize=False)
    return out.getvalue()


def region_crops(path: Path, boxes: Sequence[Box], limits: Limits, *, max_side: int = CROP_SIDE,
                 max_count: int = MAX_CROPS) -> list[bytes | None]:
    """PNG bytes of each of the first ``max_count`` boxes (None past it, or for a box with no pixel).

    The image is decoded as the extractor decoded it (:mod:`mediafleet.workers.image.decode`: limits
    checked from the header, EXIF orientation applied), so each crop is the pixels its box names.

    Raises:
        InputRejected, LimitExceeded: as :func:`~mediafleet.workers.image.decode.open_image`.
    """
    if max_side <= 0 or max_count < 0:
        raise ValueError("max_side must be > 0 and max_count >= 0")
    out: list[bytes | None] = [None] * len(boxes)
    wanted = {i for i in range(min(max_count, len(boxes)))}
    if not wanted:
        return out
    pages = {boxes[i].page for i in wanted}
    image, count = open_image(path, limits)
    try:
        for frame in frames(image, min(count, max(pages)), limits):
            if frame.number not in pages:
                continue
            for i in sorted(wanted):
                if boxes[i].page == frame.number:
                    out[i] = _crop_png(frame.rgb, boxes[i], max_side)
    finally:
        image.close()
    return out
