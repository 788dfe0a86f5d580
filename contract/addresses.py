"""Evidence addresses: exactly the evidence engine's ``EvidenceAddress`` wire shape.

Internally tagged JSON, tag key ``kind`` in snake_case. Field names, integer widths and validity
rules are the engine's; a locus that breaks them is silently dropped downstream, so nothing here
clamps or repairs a value: an invalid address is a validation error.

Coordinate spaces (the engine does not carry one, so the fleet states it on the evidence node):

* ``page_region`` and an ``image_region`` on a PDF page: PDF points (1/72 inch), origin at the
  top-left of the page as displayed (PyMuPDF's ``page.rect``), y growing downwards.
* ``image_region`` on an image: pixels of the upright image (EXIF orientation applied).
* ``character_range``: Unicode code point offsets, ``start`` inclusive, ``end`` exclusive.
* ``audio_range`` / ``video_time_range``: integer milliseconds from the start of the media.
* ``frame_range``: 1-based frame numbers, both ends inclusive.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter, model_validator

from mediafleet.contract.common import Strict

__all__ = [
    "AddressKind",
    "AudioRange",
    "CharacterRange",
    "EvidenceAddress",
    "FrameRange",
    "ImageRegion",
    "LocusKind",
    "PageRegion",
    "VideoTimeRange",
    "address_kind",
    "caller_name",
    "parse_address",
]

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

U32 = Annotated[int, Field(strict=True, ge=0, le=U32_MAX)]
U64 = Annotated[int, Field(strict=True, ge=0, le=U64_MAX)]
F64 = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class AddressKind(StrEnum):
    """The engine's tags for the address kinds the fleet produces."""

    PAGE_REGION = "page_region"
    CHARACTER_RANGE = "character_range"
    IMAGE_REGION = "image_region"
    AUDIO_RANGE = "audio_range"
    VIDEO_TIME_RANGE = "video_time_range"
    FRAME_RANGE = "frame_range"


class LocusKind(StrEnum):
    """The calling pipeline's manifest names for the same kinds."""

    PAGE_BOX = "PageBox"
    DOCUMENT_SPAN = "DocumentSpan"
    IMAGE_REGION = "ImageRegion"
    AUDIO_SEGMENT = "AudioSegment"
    VIDEO_SHOT = "VideoShot"
    VIDEO_FRAME_RANGE = "VideoFrameRange"


_CALLER_TO_KIND: dict[LocusKind, AddressKind] = {
    LocusKind.PAGE_BOX: AddressKind.PAGE_REGION,
    LocusKind.DOCUMENT_SPAN: AddressKind.CHARACTER_RANGE,
    LocusKind.IMAGE_REGION: AddressKind.IMAGE_REGION,
    LocusKind.AUDIO_SEGMENT: AddressKind.AUDIO_RANGE,
    LocusKind.VIDEO_SHOT: AddressKind.VIDEO_TIME_RANGE,
    LocusKind.VIDEO_FRAME_RANGE: AddressKind.FRAME_RANGE,
}
_KIND_TO_CALLER = {kind: name for name, kind in _CALLER_TO_KIND.items()}


def address_kind(name: str) -> AddressKind:
    """Resolve either spelling (``PageBox`` or ``page_region``) to the engine's tag.

    Raises:
        ValueError: the name is neither a caller-side name nor an engine tag the fleet produces.
    """
    if name in AddressKind._value2member_map_:
        return AddressKind(name)
    if name in LocusKind._value2member_map_:
        return _CALLER_TO_KIND[LocusKind(name)]
    raise ValueError(f"unknown locus kind {name!r}")


def caller_name(kind: str) -> LocusKind:
    """The caller-side manifest name for an engine tag (or a caller name, returned as is)."""
    return _KIND_TO_CALLER[address_kind(kind)]


class _Address(Strict):
    """Every address: strict and frozen like every contract model."""


class _Box(_Address):
    x: F64
    y: F64
    width: F64
    height: F64

    @model_validator(mode="after")
    def _positive_size(self) -> _Box:
        if not (self.width > 0 and self.height > 0):
            raise ValueError("width and height must be > 0")
        return self


class PageRegion(_Box):
    """A box on a page: ``page`` (u32; the fleet numbers pages from 1) and a box in points."""

    kind: Literal["page_region"] = "page_region"
    page: U32


class ImageRegion(_Box):
    """A box on an image (pixels) or on a PDF page (points); the evidence node names which."""

    kind: Literal["image_region"] = "image_region"


class CharacterRange(_Address):
    """Half-open code point range ``[start, end)`` of a text; valid when ``end > start``."""

    kind: Literal["character_range"] = "character_range"
    start: U64
    end: U64

    @model_validator(mode="after")
    def _non_empty(self) -> CharacterRange:
        if not self.end > self.start:
            raise ValueError("end must be > start")
        return self


class _TimeRange(_Address):
    start_ms: U64
    end_ms: U64

    @model_validator(mode="after")
    def _non_empty(self) -> _TimeRange:
        if not self.end_ms > self.start_ms:
            raise ValueError("end_ms must be > start_ms")
        return self


class AudioRange(_TimeRange):
    """Milliseconds ``[start_ms, end_ms)`` of a recording."""

    kind: Literal["audio_range"] = "audio_range"


class VideoTimeRange(_TimeRange):
    """Milliseconds ``[start_ms, end_ms)`` of a video (one shot)."""

    kind: Literal["video_time_range"] = "video_time_range"


class FrameRange(_Address):
    """1-based, inclusive frame numbers; valid when ``end_frame >= start_frame >= 1``.

    The engine itself accepts ``start_frame == 0`` but today's callers reject it, so the fleet
    never produces it and this model refuses it.
    """

    kind: Literal["frame_range"] = "frame_range"
    start_frame: U64
    end_frame: U64

    @model_validator(mode="after")
    def _ordered(self) -> FrameRange:
        if self.start_frame < 1:
            raise ValueError("start_frame must be >= 1 (frames are 1-based)")
        if not self.end_frame >= self.start_frame:
            raise ValueError("end_frame must be >= start_frame")
        return self


EvidenceAddress = Annotated[
    Union[PageRegion, CharacterRange, ImageRegion, AudioRange, VideoTimeRange, FrameRange],
    Field(discriminator="kind"),
]

_ADDRESS = TypeAdapter(EvidenceAddress)


def parse_address(data: object) -> PageRegion | CharacterRange | ImageRegion | AudioRange | VideoTimeRange | FrameRange:
    """Validate a JSON-like address; raises ``pydantic.ValidationError`` when invalid."""
    return _ADDRESS.validate_python(data)
