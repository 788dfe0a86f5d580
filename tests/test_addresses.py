"""Every evidence-address rule of the engine, each valid and invalid case (CONTRACT.md section 1)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from mediafleet.contract import AddressKind, LocusKind, address_kind, caller_name, parse_address

U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1

VALID = [
    {"kind": "page_region", "page": 1, "x": 0, "y": 0, "width": 612.0, "height": 792.0},
    {"kind": "page_region", "page": U32_MAX, "x": -1.5, "y": 2.5, "width": 0.001, "height": 1e9},
    {"kind": "character_range", "start": 0, "end": 1},
    {"kind": "character_range", "start": U64_MAX - 1, "end": U64_MAX},
    {"kind": "image_region", "x": 10, "y": 20, "width": 30, "height": 40},
    {"kind": "audio_range", "start_ms": 0, "end_ms": 1},
    {"kind": "video_time_range", "start_ms": 1000, "end_ms": 2001},
    {"kind": "frame_range", "start_frame": 1, "end_frame": 1},
    {"kind": "frame_range", "start_frame": 31, "end_frame": 180},
]

INVALID = [
    # boxes: zero, negative, non-finite, missing, wrong type
    ({"kind": "page_region", "page": 1, "x": 0, "y": 0, "width": 0, "height": 1}, "zero width"),
    ({"kind": "page_region", "page": 1, "x": 0, "y": 0, "width": 1, "height": 0}, "zero height"),
    ({"kind": "page_region", "page": 1, "x": 0, "y": 0, "width": -5, "height": 1}, "negative width"),
    ({"kind": "page_region", "page": 1, "x": math.inf, "y": 0, "width": 1, "height": 1}, "infinite x"),
    ({"kind": "page_region", "page": 1, "x": 0, "y": math.nan, "width": 1, "height": 1}, "NaN y"),
    ({"kind": "page_region", "page": -1, "x": 0, "y": 0, "width": 1, "height": 1}, "negative page"),
    ({"kind": "page_region", "page": U32_MAX + 1, "x": 0, "y": 0, "width": 1, "height": 1}, "page over u32"),
    ({"kind": "page_region", "page": 1.0, "x": 0, "y": 0, "width": 1, "height": 1}, "float page"),
    ({"kind": "page_region", "x": 0, "y": 0, "width": 1, "height": 1}, "missing page"),
    ({"kind": "image_region", "x": 0, "y": 0, "width": math.inf, "height": 1}, "infinite width"),
    ({"kind": "image_region", "x": True, "y": 0, "width": 1, "height": 1}, "boolean coordinate"),
    ({"kind": "image_region", "x": "1", "y": 0, "width": 1, "height": 1}, "string coordinate"),
    ({"kind": "image_region", "x": 0, "y": 0, "width": 1, "height": 1, "page": 1}, "unknown field"),
    # ranges: empty, reversed, negative, over u64, floats
    ({"kind": "character_range", "start": 5, "end": 5}, "empty range"),
    ({"kind": "character_range", "start": 6, "end": 5}, "reversed range"),
    ({"kind": "character_range", "start": -1, "end": 5}, "negative start"),
    ({"kind": "character_range", "start": 0, "end": U64_MAX + 1}, "end over u64"),
    ({"kind": "audio_range", "start_ms": 10, "end_ms": 10}, "zero-length segment"),
    ({"kind": "audio_range", "start_ms": 20, "end_ms": 10}, "reversed segment"),
    ({"kind": "audio_range", "start_ms": 0.5, "end_ms": 10}, "float milliseconds"),
    ({"kind": "video_time_range", "start_ms": 5, "end_ms": 5}, "zero-length shot"),
    ({"kind": "video_time_range", "start_ms": 0, "end_ms": -1}, "negative end"),
    ({"kind": "frame_range", "start_frame": 0, "end_frame": 3}, "frame 0 (frames are 1-based)"),
    ({"kind": "frame_range", "start_frame": 5, "end_frame": 4}, "reversed frames"),
    # tags
    ({"kind": "PageBox", "page": 1, "x": 0, "y": 0, "width": 1, "height": 1}, "caller name as tag"),
    ({"kind": "point", "x": 0, "y": 0}, "kind the fleet does not produce"),
    ({"page": 1, "x": 0, "y": 0, "width": 1, "height": 1}, "no tag"),
]


@pytest.mark.parametrize("data", VALID, ids=lambda d: d["kind"])
def test_valid_addresses_round_trip(data: dict) -> None:
    address = parse_address(data)
    assert address.kind == data["kind"]
    assert parse_address(address.model_dump(mode="json")) == address


@pytest.mark.parametrize(("data", "why"), INVALID, ids=[w for _, w in INVALID])
def test_invalid_addresses_are_refused(data: dict, why: str) -> None:
    with pytest.raises(ValidationError):
        parse_address(data)


def test_addresses_are_tagged_by_kind_with_engine_field_names() -> None:
    dumped = parse_address({"kind": "audio_range", "start_ms": 100, "end_ms": 2500}).model_dump(mode="json")
    assert dumped == {"kind": "audio_range", "start_ms": 100, "end_ms": 2500}


@pytest.mark.parametrize(
    ("caller", "kind"),
    [
        ("PageBox", "page_region"),
        ("DocumentSpan", "character_range"),
        ("ImageRegion", "image_region"),
        ("AudioSegment", "audio_range"),
        ("VideoShot", "video_time_range"),
        ("VideoFrameRange", "frame_range"),
    ],
)
def test_caller_names_map_both_ways(caller: str, kind: str) -> None:
    assert address_kind(caller) is AddressKind(kind)
    assert address_kind(kind) is AddressKind(kind)
    assert caller_name(kind) is LocusKind(caller)
    assert caller_name(caller) is LocusKind(caller)


def test_unknown_locus_kind_names_are_refused() -> None:
    with pytest.raises(ValueError):
        address_kind("TableCellRange")
