"""Every modality's result, as one tagged union (tag ``kind``), and every modality's options."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import BaseModel, Field, TypeAdapter

from mediafleet.contract.audio import AudioOptions, AudioResult
from mediafleet.contract.image import ImageOptions, ImageResult
from mediafleet.contract.pdf import PdfOptions, PdfResult
from mediafleet.contract.video import VideoOptions, VideoResult

__all__ = ["OPTIONS_BY_MODALITY", "ExtractionResult", "parse_result"]

# One entry per modality; a modality's module adds its result here and nowhere else.
_RESULTS: tuple[type[BaseModel], ...] = (PdfResult, AudioResult, VideoResult, ImageResult)

OPTIONS_BY_MODALITY: dict[str, type[BaseModel]] = {
    "pdf": PdfOptions,
    "audio": AudioOptions,
    "video": VideoOptions,
    "image": ImageOptions,
}

if len(_RESULTS) == 1:
    ExtractionResult = _RESULTS[0]
else:  # pragma: no cover - becomes the only branch once a second modality lands
    ExtractionResult = Annotated[Union[_RESULTS], Field(discriminator="kind")]  # type: ignore[misc,valid-type]

_RESULT = TypeAdapter(ExtractionResult)


def parse_result(data: object) -> BaseModel:
    """Validate a JSON-like result of any modality."""
    return _RESULT.validate_python(data)
