"""What the report shows of the artifact itself: PDF pages as images, an image, a waveform, a player.

Each helper reads a local, digest-checked file and returns plain data (``data:`` URIs, numbers), so
the page built from it needs nothing from the network. The engines are imported on first use:
a report of a PDF loads PyMuPDF only, one of a recording PyAV only.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PAGE_JPEG_QUALITY", "data_uri", "image_pages", "page_images", "page_scale", "waveform"]

PAGE_JPEG_QUALITY = 70
# Longer side of an embedded image page; bigger images are scaled down (boxes are placed in
# fractions of the page, so they land in the same place at any scale).
_MAX_IMAGE_SIDE = 2000
_BROWSER_IMAGES = ("image/png", "image/jpeg", "image/webp", "image/bmp")
_WAVE_RATE = 8000
# A page whose channels never differ by more than this is drawn in grey (anti-aliasing of black
# text on white stays below it).
_GREY_SPREAD = 24


def data_uri(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def page_scale(page_count: int) -> float:
    """Pixels per PDF point for the embedded page images: sharp for short documents, smaller per
    page for long ones so a 900-page report stays a file a browser opens in seconds."""
    if page_count <= 50:
        return 1.5
    if page_count <= 200:
        return 1.0
    return 0.6


def page_images(path: Path, pages: list[int], scale: float) -> Iterator[tuple[int, str]]:
    """``(page number, JPEG data URI)`` for each 1-based page in ``pages``, one page in memory at a time.

    The page is rendered as displayed (its rotation applied), the space the loci are in.
    A page with no colour (text, most scans) is a greyscale PNG, about half the bytes of a JPEG
    of the same text and sharper; a page with colour is a JPEG.
    """
    import numpy as np
    import pymupdf

    with pymupdf.open(path) as doc:
        matrix = pymupdf.Matrix(scale, scale)
        for number in pages:
            pix = doc[number - 1].get_pixmap(matrix=matrix, alpha=False)
            rgb = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.height, pix.width, pix.n)[..., :3]
            spread = rgb.max(axis=2).astype(np.int16) - rgb.min(axis=2)
            if int(spread.max(initial=0)) <= _GREY_SPREAD:
                grey = pymupdf.Pixmap(pymupdf.csGRAY, pix)
                yield number, data_uri(grey.tobytes("png"), "image/png")
            else:
                yield number, data_uri(pix.tobytes("jpeg", jpg_quality=PAGE_JPEG_QUALITY), "image/jpeg")


def image_pages(path: Path, media_type: str, count: int) -> list[str]:
    """A data URI per page (the first ``count``) of an image, upright as the loci's pixels are.

    A single-page PNG, JPEG, WebP or BMP small enough is embedded as it is (its EXIF orientation is
    applied by the browser, as the extractor applied it); anything else is re-encoded as PNG.
    """
    from PIL import Image, ImageOps

    with Image.open(path) as image:
        if media_type in _BROWSER_IMAGES and count == 1 and max(image.size) <= _MAX_IMAGE_SIDE:
            return [data_uri(path.read_bytes(), media_type)]
        uris = []
        for index in range(count):
            image.seek(index)
            frame = ImageOps.exif_transpose(image.copy())
            frame.thumbnail((_MAX_IMAGE_SIDE, _MAX_IMAGE_SIDE))
            if frame.mode not in ("RGB", "RGBA", "L"):
                frame = frame.convert("RGB")
            out = io.BytesIO()
            frame.save(out, format="PNG")
            uris.append(data_uri(out.getvalue(), "image/png"))
        return uris


def waveform(path: Path, buckets: int = 1200) -> tuple[int, list[float]]:
    """The recording's (or a video's soundtrack's) length in ms and its peak level per bucket (0..1).

    Decoded once to mono at 8 kHz, a block at a time; what is held is one peak per 10 ms.
    Returns ``(0, [])`` when the file has no audio stream.
    """
    import av
    import numpy as np

    peaks: list[float] = []  # one per 80 samples (10 ms)
    carry = np.zeros(0, dtype=np.float32)
    with av.open(str(path)) as container:
        if not container.streams.audio:
            return 0, []
        resampler = av.AudioResampler(format="flt", layout="mono", rate=_WAVE_RATE)
        samples = 0
        for frame in container.decode(audio=0):
            for out in resampler.resample(frame):
                block = np.concatenate([carry, out.to_ndarray().reshape(-1)])
                samples += out.samples
                whole = len(block) // 80 * 80
                if whole:
                    peaks.extend(np.abs(block[:whole]).reshape(-1, 80).max(axis=1).tolist())
                carry = block[whole:]
        for out in resampler.resample(None):
            carry = np.concatenate([carry, out.to_ndarray().reshape(-1)])
            samples += out.samples
    if len(carry):
        peaks.append(float(np.abs(carry).max()))
    duration_ms = samples * 1000 // _WAVE_RATE
    if not peaks:
        return duration_ms, []
    per = max(1, -(-len(peaks) // buckets))
    level = [max(peaks[i:i + per]) for i in range(0, len(peaks), per)]
    top = max(level) or 1.0
    return duration_ms, [round(v / top, 3) for v in level]
