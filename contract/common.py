"""Types shared by every modality's options and results."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = ["Digest", "ModelRef", "Producer", "Strict", "TextBox", "sha256_digest"]

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _check_digest(value: str) -> str:
    if not _DIGEST.fullmatch(value):
        raise ValueError("a digest is 'sha256:' followed by 64 lowercase hex characters")
    return value


Digest = Annotated[str, AfterValidator(_check_digest)]
F64 = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Confidence = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


def sha256_digest(hex_digest: str) -> str:
    """``sha256:<hex>`` from a bare hex digest."""
    return _check_digest(f"sha256:{hex_digest}")


class Strict(BaseModel):
    """Base of every contract model: unknown fields are rejected, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(Strict):
    """A model file set an engine ran, named and pinned by a digest of its files."""

    name: str
    digest: Digest


class Producer(Strict):
    """What produced a result, so provenance is filled without guessing."""

    engine: str = Field(description="the library that did the decoding, e.g. pymupdf")
    engine_version: str
    extractor: str = Field(description="the fleet's extractor, e.g. mediafleet.pdf.textlayer")
    extractor_version: str
    models: list[ModelRef] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict, description="the options actually used")


class TextBox(Strict):
    """A line of text and its box (the callers' ``boxes`` entry); space given by the result."""

    text: str = Field(min_length=1)
    x: F64
    y: F64
    width: F64 = Field(gt=0)
    height: F64 = Field(gt=0)
    confidence: Confidence | None = None
