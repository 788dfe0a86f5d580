"""Every modality's options and result: one table, and the results as one tagged union (tag ``kind``).

The contract is the static wire schema (``mediafleet schema`` prints it without loading a worker),
so it lists each modality's models itself; the modality's spec (:mod:`mediafleet.modalities.spec`)
reads them from here.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import BaseModel, Field, TypeAdapter

from mediafleet.contract.audio import AudioOptions, AudioResult
from mediafleet.contract.image import ImageOptions, ImageResult
from mediafleet.contract.manifest import Modality
from mediafleet.contract.pdf import PdfOptions, PdfResult
from mediafleet.contract.video import VideoOptions, VideoResult

__all__ = ["OPTIONS_BY_MODALITY", "RESULT_BY_MODALITY", "ExtractionResult", "parse_result"]

# One line per modality: its options model and its result model (tagged ``kind`` = the modality).
_MODELS: dict[Modality, tuple[type[BaseModel], type[BaseModel]]] = {
    Modality.PDF: (PdfOptions, PdfResult),
    Modality.AUDIO: (AudioOptions, AudioResult),
    Modality.VIDEO: (VideoOptions, VideoResult),
    Modality.IMAGE: (ImageOptions, ImageResult),
}

OPTIONS_BY_MODALITY: dict[str, type[BaseModel]] = {m.value: options for m, (options, _) in _MODELS.items()}
RESULT_BY_MODALITY: dict[str, type[BaseModel]] = {m.value: result for m, (_, result) in _MODELS.items()}

ExtractionResult = Annotated[Union[tuple(RESULT_BY_MODALITY.values())], Field(discriminator="kind")]  # type: ignore[valid-type]

_RESULT = TypeAdapter(ExtractionResult)


def parse_result(data: object) -> BaseModel:
    """Validate a JSON-like result of any modality."""
    return _RESULT.validate_python(data)
