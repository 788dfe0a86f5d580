"""Checks that earn a claim its ``is_verified``: each locus valid and inside the real extent."""

from __future__ import annotations

from collections.abc import Sequence

from mediafleet.adapters.drafts import LocusDraft
from mediafleet.contract.addresses import (
    AudioRange,
    CharacterRange,
    FrameRange,
    ImageRegion,
    PageRegion,
    VideoTimeRange,
)

__all__ = ["inside", "loci_valid"]

_ADDRESSES = (PageRegion, CharacterRange, ImageRegion, AudioRange, VideoTimeRange, FrameRange)

# Float boxes computed from the same page size may differ in the last bits.
_EPS = 1e-6


def inside(draft: LocusDraft) -> bool:
    """True when the locus lies inside the extent of what it points into."""
    a, b = draft.address, draft.bounds
    kind = a.kind
    if kind in ("page_region", "image_region"):
        if b.width is None or b.height is None:
            return False
        return a.x >= -_EPS and a.y >= -_EPS and a.x + a.width <= b.width + _EPS and a.y + a.height <= b.height + _EPS
    if kind == "character_range":
        return b.text_length is not None and a.end <= b.text_length
    if kind in ("audio_range", "video_time_range"):
        return b.duration_ms is not None and a.end_ms <= b.duration_ms
    if kind == "frame_range":
        return b.frame_count is not None and a.end_frame <= b.frame_count
    return False


def loci_valid(drafts: Sequence[LocusDraft]) -> bool:
    """Every address is one of the contract's (validated when built) and lies inside its extent."""
    return all(isinstance(d.address, _ADDRESSES) and inside(d) for d in drafts)
