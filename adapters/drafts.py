"""What every modality's mapping produces: a validated address plus what its node says."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Bounds", "LocusDraft"]


@dataclass(frozen=True)
class Bounds:
    """The real extent a locus must lie inside (only the fields that apply are set)."""

    width: float | None = None
    height: float | None = None
    text_length: int | None = None
    duration_ms: int | None = None
    frame_count: int | None = None


@dataclass(frozen=True)
class LocusDraft:
    """A validated address plus what the Evidence node says about it."""

    address: Any
    bounds: Bounds
    text: str | None = None
    confidence: float | None = None
    properties: dict[str, Any] = field(default_factory=dict)
