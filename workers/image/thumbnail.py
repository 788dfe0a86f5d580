"""A small PNG of the upright image, for the blob store (never the broker message)."""

from __future__ import annotations

import io

from PIL import Image

__all__ = ["THUMBNAIL_SIDE", "thumbnail_png"]

THUMBNAIL_SIDE = 256


def thumbnail_png(image: Image.Image) -> bytes:
    """PNG bytes of ``image`` scaled to at most :data:`THUMBNAIL_SIDE` pixels on its longer side."""
    thumb = image.copy()
    thumb.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    thumb.save(out, format="PNG")
    return out.getvalue()
