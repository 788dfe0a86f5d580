"""What every modality's mapping produces: a validated address plus what its node says."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["Bounds", "LocusDraft", "address_json", "drafts_of", "trusted"]

M = TypeVar("M", bound=BaseModel)

# The four slots validation fills on every model instance, set through their descriptors (a third
# faster than object.__setattr__, which looks each name up first). Loops over the lines of a long
# document use them inline, as :func:`trusted` does (a call per model costs as much as a slot).
# There, the instances of one model share one fields-set: every contract model is frozen, and
# pydantic changes a fields-set in place only on assignment (which a frozen model refuses); a copy
# (model_copy) gets a set of its own. That is a set of ~200 bytes fewer per line, whose memory
# (page faults included) cost more than making it.
set_dict = BaseModel.__dict__["__dict__"].__set__
set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def trusted(cls: type[M], values: dict[str, Any], fields_set: set[str]) -> M:
    """``cls`` as validation makes it from values this process made and already holds to its rules
    (no extra fields, no private attributes): ``values`` (every field, in field order) become its
    ``__dict__`` and ``fields_set`` the fields validation would count as set (a frozen model's may
    be shared, see above).

    For the per-line models of a long document, where a validator call per item would cost more
    than everything else done for the item; ``tests/test_pdf_speed_paths.py`` checks each use
    against validation.
    """
    model = _new(cls)
    set_dict(model, values)
    set_fields_set(model, fields_set)
    set_extra(model, None)
    set_private(model, None)
    return model


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
