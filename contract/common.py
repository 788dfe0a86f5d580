"""Types shared by every modality's options and results."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mediafleet.contract.digests import check_digest, sha256_digest

__all__ = ["Digest", "ModelRef", "Producer", "Strict", "TextBox", "matching", "sha256_digest"]

Digest = Annotated[str, AfterValidator(check_digest)]
F64 = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Confidence = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


def matching(pattern: str, says: str) -> Callable[[str], str]:
    """A validator that passes a string matching ``pattern`` whole and refuses anything else with
    ``says``: ``Annotated[str, AfterValidator(matching(r"mf-[0-9a-f]{32}", "a job id is ..."))]``."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(says)
        return value

    return check


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
