"""Video shots and keyframes: frames/s and cut accuracy, mediafleet against the alternatives, one run.

First the shot benchmark (:mod:`benchmarks.bench_shots`): a clip with the truth known (hard cuts, some
between near-identical pictures; fades, dissolves, wipes; flashes, fast motion and a fade inside a
shot), F1 for cuts and for gradual transitions, mediafleet against every PySceneDetect detector at
its defaults and FFmpeg's scene filter, with frames/s against bare decoding. Then the speed paths
below on two plain clips.

Clips: ten synthetic scenes (ffmpeg's lavfi sources: test patterns, fractals, cellular automata,
gradients, colour bars) of 60 frames each at 30 fps, H.264 (libx264 veryfast, CRF 23), at 360p and
1080p; the nine cuts are known exactly (frame 60, 120, ...). They are generated at run time into
the system temp directory (cached between runs), never committed.

Paths, run in five interleaved rounds on the same clip; per path the median wall time and the
median CPU time (user + system, every thread and child process), and the best of each. The wall
ratio is what a caller waits; the CPU ratio is the work done, and the steadier figure on a shared
machine (the load average is recorded with the results):

1. ``ffmpeg -f null``: bare decode, the floor (FFmpeg's default threads);
2. ``ffmpeg select='gt(scene,0.3)'``: FFmpeg's scene filter;
3. PySceneDetect's CLI with its defaults (``list-scenes``; AdaptiveDetector, OpenCV backend),
   and with ``save-images -n 1`` (one keyframe per scene, which it gets by seeking);
4. PySceneDetect's API (``detect_scenes``), then one keyframe per shot by seeking to its middle;
5. mediafleet: ``extract_keyframes`` (shots, keyframes picked, hashed and JPEG-encoded in the same
   decoding pass) with its default detector (combined) and with ``detector=adaptive``, and the
   in-process dispatcher end to end (sniff, hash, store, extract, loci, PROV-O, claim), with the
   worker's thread count set to the machine's cores.

Run: ``.venv/bin/python benchmarks/bench_video.py [rounds]``; figures go to ``benchmarks/results/video.json``
and ``benchmarks/results/shots.json``.
"""

from __future__ import annotations

import csv
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_shots
from benchmarks.harness import table, write_results

SCENES = 10
SCENE_FRAMES = 60
RATE = 30
SOURCES = [
    "testsrc2", "mandelbrot", "life=mold=10:life_color=#00ff00:death_color=#aa0000", "cellauto=rule=110",
    "sierpinski", "gradients=speed=0.05", "smptehdbars", "rgbtestsrc", "testsrc", "yuvtestsrc",
]
KNOWN_CUTS = [SCENE_FRAMES * k for k in range(1, SCENES)]
CACHE = Path(tempfile.gettempdir()) / "mediafleet-bench-video"
VENV_BIN = Path(sys.executable).parent


def make_clip(width: int, height: int) -> Path:
    """Ten lavfi scenes, H.264; cached by size."""
    path = CACHE / f"scenes-{height}p.mp4"
    if path.exists():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    seconds = f"{SCENE_FRAMES / RATE:.6f}"
    args: list[str] = []
    chains = []
    for i, source in enumerate(SOURCES[:SCENES]):
        name, _, opts = source.partition("=")
        spec = f"{name}=s={width}x{height}:r={RATE}" + (f":{opts}" if opts else "")
        args += ["-f", "lavfi", "-t", seconds, "-i", spec]
        chains.append(f"[{i}:v]format=yuv420p,setsar=1[v{i}]")
    graph = ";".join(chains) + ";" + "".join(f"[v{i}]" for i in range(SCENES)) + f"concat=n={SCENES}:v=1:a=0[out]"
    tmp = path.with_suffix(".part.mp4")
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args, "-filter_complex", graph, "-map", "[out]",
                    "-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-pix_fmt", "yuv420p",
                    "-r", str(RATE), "-movflags", "faststart", str(tmp)], check=True)
    tmp.rename(path)
    return path


def accuracy(found: list[int]) -> dict[str, Any]:
    hits = sorted(set(found) & set(KNOWN_CUTS))
    return {"cuts": found, "exact_hits": len(hits), "missed": len(KNOWN_CUTS) - len(hits),
            "false": len(set(found) - set(KNOWN_CUTS))}


# --- the paths -------------------------------------------------------------------------------


def ffmpeg_null(path: Path) -> list[int]:
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "null", "-"], check=True)
    return []


def ffmpeg_scene(path: Path) -> list[int]:
    out = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-vf", "select='gt(scene,0.3)',metadata=print:file=-",
         "-f", "null", "-"],
        check=True, capture_output=True, text=True,
    ).stdout
    return [round(float(t) * RATE) for t in re.findall(r"pts_time:([0-9.]+)", out)]


def scenedetect_cli(path: Path, *extra: str) -> list[int]:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([str(VENV_BIN / "scenedetect"), "-i", str(path), "-o", out, "-q", "list-scenes", "-s", *extra],
                       check=True, capture_output=True)
        with open(Path(out) / f"{path.stem}-Scenes.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
    return [int(r["Start Frame"]) - 1 for r in rows[1:]]


def scenedetect_api(path: Path, seek_keyframes: bool) -> list[int]:
    from scenedetect import AdaptiveDetector, SceneManager, open_video

    video = open_video(str(path))
    manager = SceneManager()
    manager.add_detector(AdaptiveDetector())
    manager.detect_scenes(video)
    scenes = manager.get_scene_list(start_in_scene=True)
    if seek_keyframes:
        for start, end in scenes:
            video.seek((start.frame_num + end.frame_num) // 2)
            video.read()
    return [start.frame_num for start, _ in scenes[1:]]


def mediafleet_extract(path: Path, detector: str = "combined") -> list[int]:
    from mediafleet.contract.manifest import default_manifest
    from mediafleet.contract.video import VideoOptions
    from mediafleet.workers.sink import MemorySink
    from mediafleet.workers.video.extract import extract_keyframes

    limits = default_manifest().capability("extract_keyframes").limits
    result = extract_keyframes(path, VideoOptions(detector=detector), limits, None, MemorySink())  # type: ignore[arg-type]
    return [s.first_frame_index for s in result.shots[1:]]


def mediafleet_dispatch(dispatcher: Any, path: Path) -> list[int]:
    bundle = dispatcher.submit(path).bundle()
    assert bundle.status == "ok", bundle.error
    return [n.properties["start_frame"] - 1 for n in bundle.nodes
            if n.node_type == "Evidence" and n.properties.get("locus_kind") == "video_time_range"][1:]


def _measure(paths: list[tuple[str, Callable[[Path], list[int]]]], clip: Path, rounds: int) -> dict[str, Any]:
    """Run every path ``rounds`` times, interleaved (so a busy spell on a shared machine hits them
    all alike); per path the median and the best wall time, the median and the best CPU time (this
    process and its children, all threads) and the cuts found."""
    walls: dict[str, list[float]] = {name: [] for name, _ in paths}
    cpus: dict[str, list[float]] = {name: [] for name, _ in paths}
    found: dict[str, list[int]] = {}
    for _ in range(rounds):
        for name, fn in paths:
            cpu0, wall0 = _cpu(), time.perf_counter()
            found[name] = fn(clip)
            walls[name].append(time.perf_counter() - wall0)
            cpus[name].append(_cpu() - cpu0)
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name]), found[name],
                   min(walls[name]), min(cpus[name])) for name, _ in paths}


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(rounds: int = 5) -> None:
    if shutil.which("ffmpeg") is None:
        sys.exit("ffmpeg is not installed (bash tests/run.sh installs it)")
    from mediafleet import Dispatcher, Settings
    from mediafleet.workers.engines import EngineConfig, configure

    load_before = round(os.getloadavg()[0], 2)  # other work on a shared machine moves every figure
    bench_shots.run(rounds)
    threads = os.cpu_count() or 1
    configure(EngineConfig(threads=threads))
    blobs = Path(tempfile.mkdtemp(prefix="mf-bench-video-"))
    dispatcher = Dispatcher(Settings(blob_root=blobs, threads=threads, broker_url=None))
    paths: list[tuple[str, Callable[[Path], list[int]]]] = [
        ("ffmpeg -f null (bare decode, floor)", ffmpeg_null),
        ("ffmpeg select='gt(scene,0.3)'", ffmpeg_scene),
        ("PySceneDetect CLI, defaults (list-scenes)", scenedetect_cli),
        ("PySceneDetect CLI + save-images -n 1", lambda p: scenedetect_cli(p, "save-images", "-n", "1")),
        ("PySceneDetect API + seek a keyframe per shot", lambda p: scenedetect_api(p, True)),
        ("mediafleet extract_keyframes (shots + keyframes)", mediafleet_extract),
        ("mediafleet extract_keyframes, detector=adaptive", lambda p: mediafleet_extract(p, "adaptive")),
        ("mediafleet in-process dispatcher, end to end", lambda p: mediafleet_dispatch(dispatcher, p)),
    ]
    floor_name = paths[0][0]
    figures: dict[str, Any] = {}
    for label, (width, height) in {"360p": (640, 360), "1080p": (1920, 1080)}.items():
        clip = make_clip(width, height)
        frames = SCENES * SCENE_FRAMES
        mediafleet_extract(clip)  # warm imports and OpenCV before timing
        measured = _measure(paths, clip, rounds)
        floor_wall, floor_cpu, _, floor_best_wall, floor_best_cpu = measured[floor_name]
        rows = [("path", "wall s", "frames/s", "vs bare (wall)", "best", "CPU s", "vs bare (CPU)", "best",
                 "cuts exact", "false")]
        results: dict[str, Any] = {}
        for name, _ in paths:
            wall, cpu, cuts, best_wall, best_cpu = measured[name]
            acc = accuracy(cuts) if name != floor_name else None
            results[name] = {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "frames_per_s": round(frames / wall, 1),
                             "ratio_to_bare_decode_wall": round(floor_wall / wall, 3),
                             "ratio_to_bare_decode_cpu": round(floor_cpu / cpu, 3),
                             "best_wall_s": round(best_wall, 4), "best_cpu_s": round(best_cpu, 4),
                             "ratio_to_bare_decode_best_wall": round(floor_best_wall / best_wall, 3),
                             "ratio_to_bare_decode_best_cpu": round(floor_best_cpu / best_cpu, 3), "accuracy": acc}
            rows.append((name, f"{wall:.3f}", f"{frames / wall:,.0f}", f"{floor_wall / wall:.2f}x",
                         f"{floor_best_wall / best_wall:.2f}x", f"{cpu:.3f}", f"{floor_cpu / cpu:.2f}x",
                         f"{floor_best_cpu / best_cpu:.2f}x", f"{acc['exact_hits']}/{len(KNOWN_CUTS)}" if acc else "-",
                         str(acc["false"]) if acc else "-"))
        print(f"\n{label}: {frames} frames, {len(KNOWN_CUTS)} known cuts, {threads} threads, "
              f"medians (and best) of {rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f}")
        print(table(rows))
        figures[label] = {"width": width, "height": height, "frames": frames, "known_cuts": KNOWN_CUTS,
                          "load_average_after": round(os.getloadavg()[0], 2), "paths": results}
    shutil.rmtree(blobs, ignore_errors=True)
    out = write_results("video", {"threads": threads, "rounds": rounds, "load_average_before": load_before,
                                  "clips": figures,
                                  "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
