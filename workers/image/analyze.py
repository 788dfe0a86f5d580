"""``analyze_image``: per page of an image, its size, pHash, a thumbnail in the blob store, and
one region per text line read by RapidOCR, all in the upright image's pixels."""

from __future__ import annotations

from pathlib import Path

from mediafleet.contract.common import Producer, TextBox
from mediafleet.contract.image import ImageOptions, ImagePage, ImageResult
from mediafleet.contract.manifest import Limits
from mediafleet.workers.image.decode import Frame, frames, open_image
from mediafleet.workers.image.phash import phash
from mediafleet.modalities.image import SPEC
from mediafleet.workers.image.thumbnail import thumbnail_png
from mediafleet.workers.ocr.engine import ENGINE, OcrEngine, get_engine
from mediafleet.workers.ocr.lines import read_lines
from mediafleet.workers.sink import BlobSink
from mediafleet.modalities.spec import ProgressFn

__all__ = ["DETECT_MAX_SIDE", "analyze_image"]

# The detector sees an image scaled to at most this many pixels on its longer side (RapidOCR's
# own default); lines are then read from the full-resolution image.
DETECT_MAX_SIDE = 2000


def _page(frame: Frame, options: ImageOptions, engine: OcrEngine, sink: BlobSink | None) -> ImagePage:
    height, width = frame.bgr.shape[:2]
    lines = read_lines(frame.bgr, det_max_side=DETECT_MAX_SIDE, rotated_lines=options.rotated_lines, engine=engine)
    regions = [
        TextBox(text=line.text, x=line.box[0], y=line.box[1], width=line.box[2] - line.box[0],
                height=line.box[3] - line.box[1], confidence=line.confidence)
        for line in lines
    ]
    return ImagePage(
        page=frame.number,
        width=width,
        height=height,
        orientation=frame.orientation,
        phash=phash(frame.rgb),
        thumbnail=sink.put(thumbnail_png(frame.rgb)) if sink is not None else None,
        regions=regions,
    )


def analyze_image(
    path: Path,
    options: ImageOptions,
    limits: Limits,
    progress: ProgressFn | None = None,
    sink: BlobSink | None = None,
) -> ImageResult:
    """Analyse an image (every page of a multi-page TIFF): the image spec's
    :class:`~mediafleet.modalities.spec.Extractor`.

    Args:
        limits: ``max_pixels`` per page, ``max_pages`` for a TIFF.
        progress: called with (pages done, page count) after each page.
        sink: where thumbnails go; the result carries only their digests.

    Returns:
        One :class:`ImagePage` per page, upright. No text is a valid result with no regions.

    Raises:
        InputRejected: corrupt, truncated or not a supported image (``corrupt_input``).
        LimitExceeded: a page over ``max_pixels`` or a TIFF over ``max_pages``, found from the
            header before decoding.
        Unavailable: the OCR engine is not installed here.
    """
    image, count = open_image(path, limits)
    try:
        engine = get_engine()
        pages: list[ImagePage] = []
        for frame in frames(image, count, limits):
            pages.append(_page(frame, options, engine, sink))
            if progress is not None:
                progress(frame.number, count)
    finally:
        image.close()
    producer = Producer(
        engine=ENGINE,
        engine_version=engine.version,
        extractor=SPEC.extractor_name,
        extractor_version=SPEC.extractor_version,
        models=engine.models(with_classifier=options.rotated_lines),
        options={**options.model_dump(mode="json"), "threads": engine.threads},
    )
    return ImageResult(page_count=count, pages=pages, producer=producer)
