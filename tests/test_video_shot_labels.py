"""Cuts confined to a small region of a still frame (issue 43), and each shot's label and the
detector's confidence carried to the callers (issue 44, part 3).

Known answers on small clips drawn here with a real font (DejaVu Sans, which Debian installs with
fontconfig): a slide whose one word changes is cut at that frame; typing a character at a time,
a caret blinking and a terminal scrolling a line are not cuts. Then the labels and confidences
through the bundle into the callers' shape, read the way their video adapter reads them
(``label = str(shot.get("label") or "")``, ``confidence = float(shot.get("confidence", 1.0))``),
and the bundle judged by the callers' real engine."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from mediafleet import Dispatcher, Settings
from mediafleet.adapters.caller import caller_response
from mediafleet.contract.manifest import Limits
from mediafleet.contract.video import VideoOptions, VideoResult
from mediafleet.workers.video.extract import extract_keyframes
from tests.helpers import assert_engine_valid

LIMITS = Limits(max_bytes=2**32, max_pixels=8847360, max_duration_s=10800)
W, H = 640, 360
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
MONO = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")
LINES = ["Each file is replaced by a compressed", "Extensive font matching information",
         "and destination areas are usually the same", "this specification must have this namespace"]

pytestmark = pytest.mark.skipif(not FONT.exists() or not MONO.exists(), reason="DejaVu fonts are not installed")


def write(path: Path, frames: list[np.ndarray], rate: int = 25) -> Path:
    out = av.open(str(path), "w")
    stream = out.add_stream("libx264", rate=rate)
    stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
    stream.options = {"crf": "23", "preset": "ultrafast"}
    for index, image in enumerate(frames):
        frame = av.VideoFrame.from_ndarray(image, format="rgb24")
        frame.pts, frame.time_base = index, Fraction(1, rate)
        for packet in stream.encode(frame):
            out.mux(packet)
    for packet in stream.encode(None):
        out.mux(packet)
    out.close()
    return path


def slide(lines: list[str]) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (W, H), (248, 248, 244))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, W, 48), fill=(30, 60, 140))
    draw.text((30, 10), "What the manuals say", font=ImageFont.truetype(str(FONT), 22), fill=(255, 255, 255))
    font = ImageFont.truetype(str(FONT), 17)
    for k, line in enumerate(lines):
        draw.text((40, 72 + 30 * k), line, font=font, fill=(35, 35, 40))
    return np.asarray(image).copy()


def terminal(rows: list[str], caret: tuple[int, int] | None) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (W, H), (24, 26, 30))
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(MONO), 12)
    for r, text in enumerate(rows[-20:]):
        draw.text((8, 8 + 17 * r), text, font=font, fill=(205, 210, 200))
    if caret is not None:
        x, y = 8 + 7 * caret[1], 8 + 17 * caret[0]
        draw.rectangle((x, y + 1, x + 6, y + 15), fill=(205, 210, 200))
    return np.asarray(image).copy()


def run(path: Path) -> VideoResult:
    return extract_keyframes(path, VideoOptions(speech=False), LIMITS)


def test_one_changed_word_on_a_still_slide_is_a_cut_at_its_frame(tmp_path: Path) -> None:
    changed = [LINES[0], LINES[1].replace("matching", "rendering"), *LINES[2:]]
    result = run(write(tmp_path / "word.mp4", [slide(LINES)] * 40 + [slide(changed)] * 40))
    assert [(s.first_frame_index, s.label) for s in result.shots] == [(0, "start"), (40, "cut")]
    assert 0.5 <= result.shots[1].confidence <= 0.99


def test_typing_a_caret_and_a_scrolled_line_are_not_cuts(tmp_path: Path) -> None:
    rows = [f"{LINES[k % 4]} ({k})" for k in range(19)]
    frames: list[np.ndarray] = []
    typed = "Incremental CRC computation"
    for c in range(1, len(typed) + 1):  # a character every 3 frames
        frames += [terminal([*rows, typed[:c]], (19, c))] * 3
    for i in range(36):  # the caret blinks, 12 frames on, 12 off
        frames.append(terminal([*rows, typed], (19, len(typed)) if (i // 12) % 2 == 0 else None))
    scrolled = [*rows[1:], typed, ""]  # Enter at the foot: every line moves up one
    frames += [terminal(scrolled, (19, 0))] * 30
    result = run(write(tmp_path / "terminal.mp4", frames))
    assert [s.first_frame_index for s in result.shots] == [0]


def test_a_new_text_slide_is_still_a_cut_while_a_video_plays_inside_it(tmp_path: Path) -> None:
    """A picture-in-picture inset (a moving pattern) plays across the cut between two slides."""
    rng = np.random.default_rng(2)
    pattern = rng.integers(0, 255, (90, 300, 3), np.uint8)
    frames = []
    for t in range(80):
        image = slide(LINES if t < 40 else [line.upper() for line in LINES[:3]])
        image[250:340, 320:480] = np.roll(pattern, 4 * t, axis=1)[:, :160]
        frames.append(image)
    result = run(write(tmp_path / "inset.mp4", frames))
    assert [s.first_frame_index for s in result.shots] == [0, 40]


def caller_shots(raw: dict[str, Any]) -> list[tuple[str, float]]:
    """(label, confidence) of each shot as the callers' video adapter reads them."""
    out = []
    for shot in raw["shots"]:
        label = str(shot.get("label") or "")
        try:
            confidence = float(shot.get("confidence", 1.0))
        except (TypeError, ValueError):
            confidence = 1.0
        out.append((label, confidence))
    return out


def _labelled_bundle(tmp_path: Path) -> Any:
    """Slides: a cut at frame 40 (one word changed), then a dissolve into a new slide at 80-94."""
    a = slide(LINES)
    b = slide([LINES[0], LINES[1].replace("matching", "rendering"), *LINES[2:]])
    c = np.full((H, W, 3), (20, 90, 40), np.uint8)
    c[100:260, 100:540] = (230, 200, 60)
    blend = [((b * (1 - (k + 1) / 16) + c * ((k + 1) / 16)).round().astype(np.uint8)) for k in range(15)]
    path = write(tmp_path / "labelled.mp4", [a] * 40 + [b] * 40 + blend + [c] * 40)
    bundle = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(path).bundle()
    assert bundle.status == "ok", bundle.error
    return bundle


def test_labels_and_confidences_reach_the_callers_shape(tmp_path: Path) -> None:
    bundle = _labelled_bundle(tmp_path)
    assert_engine_valid(bundle)
    shots = caller_shots(caller_response(bundle))
    assert [label for label, _ in shots] == ["start", "cut", "transition:dissolve", "dissolve"]
    assert shots[0][1] == 1.0  # the start is not a detection
    assert all(0.5 <= confidence <= 0.99 for _, confidence in shots[1:])  # measured margins, never 1.0
    assert shots[3][1] == shots[2][1]  # the shot after a dissolve carries the dissolve's


def test_labelled_loci_are_cited_by_the_callers_engine(tmp_path: Path, engine_socket: str) -> None:
    from tests.engine import engine_verdict

    assert engine_verdict(engine_socket, _labelled_bundle(tmp_path)) == []
