"""The combined shot detector's known answers on small generated clips: a cut between near-identical
slides at its exact frame, dissolves and fades reported as transitions with their frames, and no
boundary for a flash, fast motion or a fade to black inside a shot; then the result and its loci.

The clips are drawn at 320x180 and written at that size and at twice it, 640x360, where the
detector reads the decoded planes halved instead of resized (``shots.signal_size``): the same
answers either way."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from mediafleet.adapters.video import video_loci
from mediafleet.contract.manifest import Limits
from mediafleet.contract.video import VideoOptions, VideoResult
from mediafleet.workers.video.shot_detector import CombinedDetector, max_transition_frames
from mediafleet.workers.video.extract import extract_keyframes
from mediafleet.workers.video.shots import build_segmenter
from tests.clips import scene_frame

LIMITS = Limits(max_bytes=2**32, max_pixels=8847360, max_duration_s=10800)
W, H = 320, 180


# Both ways the detector reduces a frame: resized linearly (320x180) and halved (640x360).
SCALES = pytest.mark.parametrize("scale", [1, 2], ids=["320x180", "640x360-halved"])


def write_frames(path: Path, frames: list[np.ndarray], rate: int = 25, scale: int = 1) -> Path:
    """RGB frames as H.264 (CRF 18), one after another, drawn at W x H and written ``scale`` times
    that size."""
    out = av.open(str(path), "w")
    stream = out.add_stream("libx264", rate=rate)
    stream.width, stream.height, stream.pix_fmt = W * scale, H * scale, "yuv420p"
    stream.options = {"crf": "18", "preset": "ultrafast"}
    for index, image in enumerate(frames):
        if scale != 1:
            image = cv2.resize(image, (W * scale, H * scale), interpolation=cv2.INTER_LINEAR)
        frame = av.VideoFrame.from_ndarray(image, format="rgb24")
        frame.pts, frame.time_base = index, Fraction(1, rate)
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode(None):
        out.mux(packet)
    out.close()
    return path


def slide(lines: int) -> np.ndarray:
    """A white slide with a title bar and ``lines`` lines of dark "words"."""
    image = np.full((H, W, 3), 250, np.uint8)
    image[12:26, 20:200] = (30, 60, 140)
    rng = np.random.default_rng(3)
    for k in range(lines):
        y, x = 40 + 17 * k, 30
        while x < 260:
            width = int(rng.integers(10, 35))
            image[y : y + 7, x : min(x + width, 260)] = 40
            x += width + 6
    return image


def scene(number: int, count: int, start: int = 0) -> list[np.ndarray]:
    return [scene_frame(number, start + t, W, H) for t in range(count)]


def blend(a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
    """A linear dissolve over ``len(a)`` frames: frame k is (k+1)/(n+1) of the way to ``b``."""
    n = len(a)
    return [(a[k] * (1 - (k + 1) / (n + 1)) + b[k] * ((k + 1) / (n + 1))).round().astype(np.uint8) for k in range(n)]


def run(path: Path) -> VideoResult:
    return extract_keyframes(path, VideoOptions(speech=False), LIMITS)


def entries(result: VideoResult) -> list[tuple[int, int, str | None]]:
    return [(s.first_frame_index, s.last_frame_index, s.transition) for s in result.shots]


def test_the_default_detector_is_the_combined_one_and_says_so() -> None:
    assert VideoOptions().detector == "combined"
    _, spec = build_segmenter(VideoOptions(), W, H, Fraction(25))
    facts = spec.provenance()
    assert facts["detector_class"] == "mediafleet.CombinedDetector"
    assert facts["lookahead_frames"] == 6 and facts["max_transition_frames"] == 60
    with pytest.raises(ValueError, match="thresholds apply"):
        VideoOptions(detector="combined", content_threshold=30.0)


@SCALES
def test_a_cut_between_near_identical_slides_is_found_at_its_frame(tmp_path: Path, scale: int) -> None:
    """Slide 2 is slide 1 with one more line of text; slide 3 one more again: both cuts, exactly."""
    frames = [slide(4)] * 40 + [slide(5)] * 40 + [slide(6)] * 40
    result = run(write_frames(tmp_path / "slides.mp4", frames, scale=scale))
    assert entries(result) == [(0, 39, None), (40, 79, None), (80, 119, None)]
    # PySceneDetect's detectors at their defaults see no cut at all here.
    for detector in ("adaptive", "content"):
        other = extract_keyframes(tmp_path / "slides.mp4", VideoOptions(detector=detector, speech=False), LIMITS)
        assert len(other.shots) == 1


@SCALES
def test_a_dissolve_is_a_transition_with_its_frames(tmp_path: Path, scale: int) -> None:
    a, b = scene(0, 60), scene(1, 60)
    frames = a[:40] + blend(a[40:55], b[:15]) + b[15:]  # frames 40..54 blend
    result = run(write_frames(tmp_path / "dissolve.mp4", frames, scale=scale))
    (s1, t, s2) = result.shots
    assert t.kind == "transition" and t.transition == "dissolve"
    assert (t.first_frame_index, t.last_frame_index) == (40, 54)  # exactly the blended frames
    assert s1.last_frame_index + 1 == t.first_frame_index and t.last_frame_index + 1 == s2.first_frame_index
    assert s1.end_ms == t.start_ms and t.end_ms == s2.start_ms
    assert [k.shot for k in result.keyframes] == [1, 3]  # a transition has no keyframe


@SCALES
def test_a_fade_through_black_between_shots_is_one_fade(tmp_path: Path, scale: int) -> None:
    a, b = scene(2, 50), scene(3, 50)
    ramp = [max(0.0, 1 - (k + 1) / 8) for k in range(8)] + [0.0] * 2 + [(k + 1) / 9 for k in range(8)]
    middle = [(a[40 + min(k, 9)] if k < 10 else b[k - 10]) * r for k, r in enumerate(ramp)]
    frames = a[:40] + [m.round().astype(np.uint8) for m in middle] + b[8:]
    result = run(write_frames(tmp_path / "fadeblack.mp4", frames, scale=scale))
    transitions = [s for s in result.shots if s.kind == "transition"]
    assert [s.transition for s in transitions] == ["fade"]
    assert abs(transitions[0].first_frame_index - 40) <= 1 and abs(transitions[0].last_frame_index - 57) <= 1
    assert len(result.shots) == 3


@SCALES
def test_no_boundary_for_a_flash_fast_motion_or_a_fade_inside_a_shot(tmp_path: Path, scale: int) -> None:
    flash = scene(4, 40)
    for k in (18, 19):
        flash[k] = np.clip(flash[k].astype(np.int16) + 180, 0, 255).astype(np.uint8)
    base = scene_frame(5, 0, W, H)
    pan = [np.roll(base, 16 * k, axis=1) for k in range(40)]  # 16 px a frame
    inner = scene(6, 40)
    ramp = np.concatenate([np.linspace(1, 0, 7), np.zeros(2), np.linspace(0, 1, 7)])
    for k, r in enumerate(ramp):
        inner[12 + k] = (inner[12 + k] * r).astype(np.uint8)
    result = run(write_frames(tmp_path / "inside.mp4", flash + pan + inner, scale=scale))
    assert entries(result) == [(0, 39, None), (40, 79, None), (80, 119, None)]


def test_transition_loci_say_their_kind_and_frames(tmp_path: Path) -> None:
    a, b = scene(0, 60), scene(1, 60)
    result = run(write_frames(tmp_path / "dissolve.mp4", a[:40] + blend(a[40:55], b[:15]) + b[15:]))
    shots = [d for d in video_loci(result, "video-1") if d.address.kind == "video_time_range"]
    assert [d.properties.get("label") for d in shots] == ["start", "transition:dissolve", "dissolve"]
    assert [s.label for s in result.shots] == ["start", "dissolve", "dissolve"]
    # The detector's own margins: the start is not detected (1.0); the dissolve's is measured, and the
    # shot after it carries the same.
    confidences = [d.properties["confidence"] for d in shots]
    assert confidences[0] == 1.0 and 0.5 <= confidences[1] < 1.0 and confidences[2] == confidences[1]
    transition = result.shots[1]
    assert shots[1].properties["start_frame"] == transition.first_frame_index + 1
    assert shots[1].properties["end_frame"] == transition.last_frame_index + 1


def test_memory_bounds_the_longest_transition() -> None:
    assert max_transition_frames(640, 360) == 60
    assert max_transition_frames(1920, 1080) == 53
    assert max_transition_frames(3840, 2160) == 13


@pytest.mark.slow
def test_pushing_out_of_order_is_refused() -> None:
    from mediafleet.workers.video.frame_signals import frame_signals

    detector = CombinedDetector()
    small = np.zeros((144, 256, 3), np.uint8)
    with pytest.raises(ValueError):
        detector.push(1, frame_signals(small, small[..., 0]))
