"""Checks that earn a claim its ``is_verified``: each locus valid and inside the real extent.

One containment rule per address kind of the contract, whichever modality produced it: a new
modality that uses the contract's addresses adds nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, get_args

from mediafleet.adapters.drafts import Bounds, LocusDraft
from mediafleet.adapters.loci import last_mapped
from mediafleet.contract.addresses import EvidenceAddress

__all__ = ["inside", "loci_valid"]

# Float boxes computed from the same page size may differ in the last bits.
_EPS = 1e-6


def _box(a: Any, b: Bounds) -> bool:
    if b.width is None or b.height is None:
        return False
    return a.x >= -_EPS and a.y >= -_EPS and a.x + a.width <= b.width + _EPS and a.y + a.height <= b.height + _EPS


def _text(a: Any, b: Bounds) -> bool:
    return b.text_length is not None and a.end <= b.text_length


def _time(a: Any, b: Bounds) -> bool:
    return b.duration_ms is not None and a.end_ms <= b.duration_ms


def _frames(a: Any, b: Bounds) -> bool:
    return b.frame_count is not None and a.end_frame <= b.frame_count


# address kind -> whether an address of that kind lies inside its bounds
_INSIDE: dict[str, Callable[[Any, Bounds], bool]] = {
    "page_region": _box,
    "image_region": _box,
    "character_range": _text,
    "audio_range": _time,
    "video_time_range": _time,
    "frame_range": _frames,
}

_ADDRESSES = get_args(get_args(EvidenceAddress)[0])  # the contract's address models
if {a.model_fields["kind"].default for a in _ADDRESSES} != set(_INSIDE):  # pragma: no cover - caught at import
    raise RuntimeError("every address kind of the contract needs exactly one containment rule here")


def inside(draft: LocusDraft) -> bool:
    """True when the locus lies inside the extent of what it points into."""
    rule = _INSIDE.get(draft.address.kind)
    return rule is not None and rule(draft.address, draft.bounds)


def loci_valid(drafts: Sequence[LocusDraft]) -> bool:
    """Every address is one of the contract's (validated when built) and lies inside its extent.

    The drafts :func:`mediafleet.adapters.loci.to_loci` made last are checked once: in-process,
    the worker's check and the bundle's ask about the same draft objects, and the second gets the
    first's verdict (frozen drafts cannot have changed). Any other drafts are checked afresh.
    """
    verdict = last_mapped(drafts) if isinstance(drafts, list) else None
    if verdict:
        return verdict[0]
    valid = _check(drafts)
    if verdict is not None:
        verdict.append(valid)
    return valid


def _check(drafts: Sequence[LocusDraft]) -> bool:
    rules = _INSIDE
    eps = _EPS
    for draft in drafts:  # inside(draft) for each, inlined: one call per locus of a long document
        address = draft.address
        if not isinstance(address, _ADDRESSES):
            return False
        kind = address.kind
        if kind == "image_region" or kind == "page_region":  # _box, inlined (a document's lines)
            b = draft.bounds
            width, height = b.width, b.height
            if width is None or height is None:
                return False
            x, y = address.x, address.y
            if not (x >= -eps and y >= -eps and x + address.width <= width + eps
                    and y + address.height <= height + eps):
                return False
            continue
        rule = rules.get(kind)
        if rule is None or not rule(address, draft.bounds):
            return False
    return True
