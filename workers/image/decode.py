"""Images decoded to upright pixels, one frame at a time, with limits checked from the header.

Pillow reads the header when a file is opened; each frame's pixel count is checked against the
manifest's ``max_pixels`` (and the frame count against ``max_pages``) before any pixel data is
decoded, so a decompression bomb is refused without being expanded. Only a TIFF has pages
beyond the first; for every other format the first frame is the image. The EXIF orientation is
applied, so every coordinate downstream is in the upright image.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from mediafleet.contract.errors import ErrorCode, InputRejected, LimitExceeded
from mediafleet.contract.manifest import Limits

__all__ = ["FORMATS", "Frame", "frames", "open_image"]

FORMATS = {"JPEG", "PNG", "WEBP", "TIFF", "BMP"}
_ORIENTATION = 0x0112
_BROKEN = (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError)


@dataclass(frozen=True)
class Frame:
    """One upright frame: its 1-based number, the EXIF orientation applied, RGB and BGR pixels."""

    number: int
    orientation: int
    rgb: Image.Image
    bgr: np.ndarray


def open_image(path: Path, limits: Limits) -> tuple[Image.Image, int]:
    """The opened image (header only) and how many pages it has.

    Raises:
        InputRejected: not an image Pillow can read, or not one of :data:`FORMATS`.
        LimitExceeded: too many pixels in the first frame, or too many frames.
    """
    try:
        with warnings.catch_warnings():
            # The fleet checks the pixel count itself, against the manifest's limit.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(path)
    except Image.DecompressionBombError as exc:
        raise LimitExceeded("the image has more pixels than this fleet decodes",
                            code=ErrorCode.TOO_MANY_PIXELS) from exc
    except UnidentifiedImageError as exc:
        raise InputRejected("the image cannot be decoded: it is corrupt or not an image") from exc
    except _BROKEN as exc:
        raise InputRejected("the image cannot be decoded: it is corrupt or truncated") from exc
    if image.format not in FORMATS:
        image.close()
        raise InputRejected("the image is not JPEG, PNG, WebP, TIFF or BMP", code=ErrorCode.UNSUPPORTED_MEDIA_TYPE)
    try:
        count = int(getattr(image, "n_frames", 1)) if image.format == "TIFF" else 1
    except _BROKEN as exc:
        image.close()
        raise InputRejected("the TIFF's page directory is corrupt") from exc
    if limits.max_pages is not None and count > limits.max_pages:
        image.close()
        raise LimitExceeded(f"the image has {count} pages; the limit is {limits.max_pages}",
                            code=ErrorCode.TOO_MANY_PAGES)
    return image, count


def _check_pixels(image: Image.Image, number: int, limits: Limits) -> None:
    width, height = image.size
    if width < 1 or height < 1:
        raise InputRejected(f"page {number} of the image has no pixels")
    if limits.max_pixels is not None and width * height > limits.max_pixels:
        raise LimitExceeded(
            f"page {number} of the image has {width * height} pixels; the limit is {limits.max_pixels}",
            code=ErrorCode.TOO_MANY_PIXELS,
        )


def _to_rgb(image: Image.Image) -> Image.Image:
    """8-bit RGB; transparency composited over white, high bit depths scaled down."""
    mode = image.mode
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if mode.startswith("I;16") else max(float(values.max()), 255.0)
        gray = np.clip(values * (255.0 / top), 0, 255).astype(np.uint8)
        return Image.fromarray(gray, mode="L").convert("RGB")
    if mode in ("RGBA", "LA", "PA", "La", "RGBa") or (mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB") if mode != "RGB" else image


def frames(image: Image.Image, count: int, limits: Limits) -> Iterator[Frame]:
    """Each page of ``image``, decoded and turned upright, after its pixel count is checked.

    Raises:
        LimitExceeded: a page has more than ``limits.max_pixels`` pixels (``too_many_pixels``).
        InputRejected: a page's data is corrupt or truncated (``corrupt_input``).
    """
    for index in range(count):
        number = index + 1
        try:
            image.seek(index)
        except _BROKEN as exc:
            raise InputRejected(f"page {number} of the image cannot be read") from exc
        _check_pixels(image, number, limits)
        try:
            orientation = int(image.getexif().get(_ORIENTATION, 1))
            image.load()
            upright = ImageOps.exif_transpose(image) or image
            rgb = _to_rgb(upright)
        except _BROKEN as exc:
            raise InputRejected(
                "the image cannot be decoded: it is corrupt or truncated" if count == 1
                else f"page {number} of the image cannot be decoded: it is corrupt or truncated"
            ) from exc
        if orientation not in range(1, 9):
            orientation = 1
        bgr = cv2.cvtColor(np.asarray(rgb), cv2.COLOR_RGB2BGR)
        yield Frame(number=number, orientation=orientation, rgb=rgb, bgr=bgr)
