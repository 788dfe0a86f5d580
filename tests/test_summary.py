"""The lines ``mediafleet extract`` prints for a bundle, read from its loci (mediafleet/report/text.py)."""

from __future__ import annotations

from typing import Any

from mediafleet.report.text import video_summary


def shot(start_ms: int, end_ms: int, label: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"kind": "video_time_range", "start_ms": start_ms, "end_ms": end_ms}, ({"label": label} if label else {})


def key(frame: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"kind": "frame_range", "start_frame": frame, "end_frame": frame}, {}


def test_a_transition_between_two_shots_is_counted_apart_from_the_shots() -> None:
    loci = [shot(0, 2000), shot(2000, 2600, "transition:dissolve"), shot(2600, 5000), key(20), key(90)]
    (line,) = video_summary(loci)
    assert line == "5.0 s, 2 shots (0.0-2.0, 2.6-5.0 s), 1 transition, 2 keyframes, no speech"


def test_shots_without_transitions_read_as_before() -> None:
    (line,) = video_summary([shot(0, 2000), shot(2000, 4000), key(10), key(70)])
    assert line == "4.0 s, 2 shots (0.0-2.0, 2.0-4.0 s), 2 keyframes, no speech"
