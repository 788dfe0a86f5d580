"""Shot boundaries by kind, with the truth known: mediafleet against every PySceneDetect detector at
its defaults and FFmpeg's scene filter, in one run.

The clip is made here, frame by frame, from FFmpeg's own sources (``testsrc2``, ``mandelbrot``,
``smptehdbars``, ``gradients``, ``testsrc``, ``rgbtestsrc``, ``cellauto``) and generated slides
(white pages with bars of "text", one slide to the next differing in a few lines: the
similar-looking cut a slide deck or an interview on one background makes). Between shots: hard
cuts (two of them between near-identical slides), a fade, a dissolve, a wipe and a fade through
black; inside shots, which must not be cut: a two-frame flash, a fast pan (24 px a frame) and a
fade to black and back. 640x360, 25 fps, H.264 (CRF 18), written to the system temp directory.

Scoring: a reported boundary within 1 frame of a true cut finds that cut; one inside a gradual
transition (1 frame of slack on each side) finds that transition; any other is false. Cut F1 counts
every false boundary against the cuts (they are reported as cuts); transition recall is the share
of transitions found. None of the compared tools reports a transition as a span, so a transition
found is one cut placed somewhere inside it.

Run: ``.venv/bin/python benchmarks/bench_shots.py``; figures go to ``benchmarks/results/shots.json``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import table, write_results

W, H, RATE, SHOT = 640, 360, 25, 75
TRANSITION = 20
OUT = Path(tempfile.gettempdir()) / "mediafleet-bench-shots"


def source(spec: str, frames: int) -> np.ndarray:
    """``frames`` RGB frames of an FFmpeg lavfi source at the clip's size and rate."""
    spec += f"{':' if '=' in spec else '='}size={W}x{H}:rate={RATE}"
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", spec, "-frames:v", str(frames),
         "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(frames, H, W, 3).copy()


def slide(lines: list[int], frames: int, seed: int) -> np.ndarray:
    """A white slide: a title bar and "text" lines of the given lengths (in tenths of the width)."""
    image = np.full((H, W, 3), 250, np.uint8)
    image[30:58, 40:400] = (30, 60, 140)
    rng = np.random.default_rng(seed)
    for k, tenths in enumerate(lines):
        y = 90 + 34 * k
        x = 60
        while x < 60 + tenths * 52:  # words of dark ink with gaps
            width = int(rng.integers(20, 70))
            image[y:y + 14, x:min(x + width, 60 + tenths * 52)] = 40
            x += width + 10
    return np.repeat(image[None], frames, axis=0)


@dataclass
class Truth:
    cuts: list[int] = field(default_factory=list)  # first frame of the new shot
    transitions: list[tuple[int, int, str]] = field(default_factory=list)  # first, last frame, kind
    inside: list[tuple[int, int, str]] = field(default_factory=list)  # events that are not boundaries


def make_clip() -> tuple[Path, Truth, int]:
    OUT.mkdir(exist_ok=True)
    path = OUT / "shots.mp4"
    shots: list[tuple[str, np.ndarray]] = [
        ("testsrc2", source("testsrc2", SHOT)),
        ("mandelbrot", source("mandelbrot", SHOT)),
        ("smptehdbars", source("smptehdbars", SHOT)),
        ("slide A", slide([9, 8, 9, 6, 7], SHOT, 1)),
        ("slide B", slide([9, 8, 9, 6, 7, 8], SHOT, 1)),  # slide A with one more line
        ("slide C", slide([9, 8, 9, 6, 7, 8, 5], SHOT, 1)),  # and another
        ("gradients", source("gradients=speed=0.02", SHOT)),
        ("testsrc", source("testsrc", SHOT)),
        ("rgbtestsrc", source("rgbtestsrc", SHOT)),
        ("cellauto", source("cellauto=rule=110", SHOT)),
        ("testsrc2 pan", source("testsrc2", SHOT)),
        ("mandelbrot 2", source("mandelbrot", SHOT)),
    ]
    # What joins shot k to shot k+1.
    joins = ["cut", "fade", "cut", "cut", "cut", "dissolve", "wipe", "cut", "fadeblack", "cut", "cut"]
    # Events inside shots (not boundaries), clear of the transitions at their ends:
    # (shot, first frame, last frame, kind)
    events = [(6, 28, 47, "fade to black inside a shot"), (8, 30, 31, "flash"), (10, 0, SHOT - 1, "fast pan")]
    rgb = shots[8][1]
    rgb[30:32] = np.clip(rgb[30:32].astype(np.int16) + 180, 0, 255).astype(np.uint8)
    pan = shots[10][1]
    for i in range(SHOT):
        pan[i] = np.roll(pan[i], 24 * i, axis=1)
    grad = shots[6][1]
    ramp = np.concatenate([np.linspace(1, 0, 9), np.zeros(2), np.linspace(0, 1, 9)])
    grad[28:48] = (grad[28:48] * ramp[:, None, None, None]).astype(np.uint8)

    truth = Truth()
    frames: list[np.ndarray] = []
    for k, (_, clip) in enumerate(shots):
        join = joins[k - 1] if k else None
        start = len(frames) - (TRANSITION if join not in (None, "cut") else 0)  # where this shot's frame 0 goes
        truth.inside.extend((start + a, start + b, kind) for shot, a, b, kind in events if shot == k)
        if join in (None, "cut"):
            if join == "cut":
                truth.cuts.append(len(frames))
            frames.extend(clip)
            continue
        # A gradual transition: the previous shot's last TRANSITION frames blend into this one's first.
        prev = np.stack(frames[-TRANSITION:]).astype(np.float32)
        nxt = clip[:TRANSITION].astype(np.float32)
        a = (np.arange(1, TRANSITION + 1, dtype=np.float32) / (TRANSITION + 1))[:, None, None, None]
        if join in ("fade", "dissolve"):
            if join == "dissolve":  # a dissolve with grain: each pixel switches at its own moment
                rng = np.random.default_rng(7)
                a = (a + rng.uniform(-0.15, 0.15, (1, H, W, 1)).astype(np.float32)).clip(0, 1)
            mixed = prev * (1 - a) + nxt * a
        elif join == "wipe":
            edge = (np.arange(W)[None, None, :, None] < a * W).astype(np.float32)
            mixed = prev * (1 - edge) + nxt * edge
        else:  # fadeblack
            out = np.clip(1 - 2 * a, 0, 1)
            inn = np.clip(2 * a - 1, 0, 1)
            mixed = prev * out + nxt * inn
        start = len(frames) - TRANSITION
        frames[-TRANSITION:] = list(mixed.round().clip(0, 255).astype(np.uint8))
        truth.transitions.append((start, start + TRANSITION - 1, join))
        frames.extend(clip[TRANSITION:])
    proc = subprocess.Popen(
        ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{W}x{H}", "-r", str(RATE),
         "-i", "-", "-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-pix_fmt", "yuv420p", str(path)],
        stdin=subprocess.PIPE)
    assert proc.stdin is not None
    for frame in frames:
        proc.stdin.write(frame.tobytes())
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError("ffmpeg could not write the clip")
    return path, truth, len(frames)


def score(found: list[int], truth: Truth) -> dict[str, object]:
    cuts_hit: set[int] = set()
    spans_hit: set[int] = set()
    false: list[int] = []
    for f in found:
        cut = next((c for c in truth.cuts if abs(f - c) <= 1), None)
        if cut is not None:
            cuts_hit.add(cut)
            continue
        span = next((k for k, (a, b, _) in enumerate(truth.transitions) if a - 1 <= f <= b + 1), None)
        if span is not None:
            spans_hit.add(span)
            continue
        false.append(f)
    tp, fn = len(cuts_hit), len(truth.cuts) - len(cuts_hit)
    f1 = 2 * tp / (2 * tp + len(false) + fn) if tp or false or fn else 1.0
    missed = [c for c in truth.cuts if c not in cuts_hit]
    return {
        "cuts_found": tp, "cuts": len(truth.cuts), "cut_f1": round(f1, 3),
        "transitions_found": len(spans_hit), "transitions": len(truth.transitions),
        "transition_recall": round(len(spans_hit) / len(truth.transitions), 3),
        "false": len(false), "false_at": false, "missed_cuts": missed,
        "missed_transitions": [truth.transitions[k][2] for k in range(len(truth.transitions)) if k not in spans_hit],
        "false_on": sorted({kind for f in false for a, b, kind in truth.inside if a - 1 <= f <= b + 1}),
    }


def mediafleet(path: Path, detector: str) -> list[int]:
    from mediafleet.contract.manifest import Limits
    from mediafleet.contract.video import VideoOptions
    from mediafleet.workers.video.extract import extract_keyframes

    limits = Limits(max_bytes=2**32, max_pixels=8847360, max_duration_s=10800)
    result = extract_keyframes(path, VideoOptions(detector=detector, speech=False), limits)  # type: ignore[arg-type]
    return [shot.first_frame_index for shot in result.shots[1:]]


def pyscenedetect(path: Path, name: str) -> list[int]:
    import scenedetect

    detector = getattr(scenedetect, name)()
    scenes = scenedetect.detect(str(path), detector, show_progress=False)
    return [start.frame_num for start, _ in scenes[1:]]


def ffmpeg_scene(path: Path, threshold: float = 0.3) -> list[int]:
    err = subprocess.run(["ffmpeg", "-hide_banner", "-i", str(path), "-vf", f"select='gt(scene,{threshold})',showinfo",
                          "-f", "null", "-"], check=False, capture_output=True, text=True).stderr
    return [round(float(t) * RATE) for t in re.findall(r"pts_time:([0-9.]+)", err)]


def main() -> None:
    path, truth, frames = make_clip()
    runs = {
        "mediafleet (adaptive, default)": lambda: mediafleet(path, "adaptive"),
        "mediafleet (content)": lambda: mediafleet(path, "content"),
        **{f"PySceneDetect {n}": (lambda n=n: pyscenedetect(path, n))
           for n in ("AdaptiveDetector", "ContentDetector", "HistogramDetector", "HashDetector", "ThresholdDetector")},
        "ffmpeg scene > 0.3": lambda: ffmpeg_scene(path),
    }
    results = {name: {"boundaries": (found := run()), **score(found, truth)} for name, run in runs.items()}
    write_results("shots", {
        "clip": {"frames": frames, "size": f"{W}x{H}", "rate": RATE, "cuts": truth.cuts,
                 "transitions": truth.transitions, "inside_shots": truth.inside},
        "detectors": results,
    })
    rows = [("detector", "cuts found", "cut F1", "transitions found", "false (on)")]
    for name, r in results.items():
        rows.append((name, f"{r['cuts_found']}/{r['cuts']}", f"{r['cut_f1']:.2f}",
                     f"{r['transitions_found']}/{r['transitions']}",
                     f"{r['false']} ({', '.join(r['false_on']) or '-'})"))  # type: ignore[arg-type]
    print(table(rows))


if __name__ == "__main__":
    main()
