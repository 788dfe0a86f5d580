"""What every modality's mapping produces: a validated address plus what its node says."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Bounds", "LocusDraft", "address_json", "drafts_of"]


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


def drafts_of(
    addresses: Iterable[Any], bounds: Bounds, texts: Iterable[str | None], confidences: Iterable[float | None],
    properties: dict[str, Any],
) -> list[LocusDraft]:
    """``[LocusDraft(a, bounds, t, c, properties) for a, t, c in zip(...)]``, for the many lines of
    one page: the same drafts, each set up in one step rather than a frozen field at a time.

    ``properties`` is shared by the drafts (read-only, as every draft's properties are).
    """
    made = []
    for address, text, confidence in zip(addresses, texts, confidences, strict=True):
        draft = _new(LocusDraft)
        _set(draft, "__dict__", {"address": address, "bounds": bounds, "text": text, "confidence": confidence,
                                 "properties": properties})
        made.append(draft)
    return made


_new = object.__new__
_set = object.__setattr__


def address_json(address: Any) -> dict[str, Any]:
    """``address.model_dump(mode="json")`` of a validated contract address, without the serializer.

    Every address of the contract is flat: numbers (finite, as validated) and its ``kind`` tag, held
    in field order, so its values as they are already are its JSON form.
    """
    return dict(address.__dict__)
