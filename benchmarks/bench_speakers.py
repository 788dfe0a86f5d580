"""Speaker turns: diarization error rate of the audio path's speaker labels on conversations built
at run time from real recordings of different people, against a one-speaker baseline.

The voices: the telephone prompts Debian ships for Asterisk, each language recorded by a different
person (8 kHz, real recordings, not synthesis): Allison Smith (US English,
``asterisk-core-sounds-en-wav``), June Wallack (Canadian French, ``-fr-wav``), Menardi (Italian,
female, ``asterisk-core-sounds-it-wav``), Carlo (Italian, male, ``asterisk-prompt-it-menardi-wav``'s
sibling set), the Russian IVR voice (``-ru-wav``), Armelle Desjardins (French,
``asterisk-prompt-fr-armelle``) and the Colombian Spanish prompts (``asterisk-prompt-es-co``).
The Mexican Spanish set is Allison again, so it is left out. Install them with
``apt-get install asterisk-core-sounds-{en,fr,it,ru}-wav asterisk-prompt-fr-armelle
asterisk-prompt-es-co asterisk-prompt-it-menardi-wav``; a voice whose package is missing is
skipped. ``--espeak`` adds a family of espeak-ng voices (synthetic: an extra family, reported apart).

A conversation: speakers chosen at random (seeded), turns alternating between them (never the same
speaker twice in a row), each turn one to three prompts of its speaker back to back, with pauses
of 0.15-0.9 s between turns and 0.05-0.3 s inside one. The truth is each turn's speech (prompts
trimmed of their silence by energy). Each conversation is transcribed in-process by
``extract_audio`` (tiny.en, one thread) with speakers estimated, with ``speakers=N``, and with
speakers off (``speakers=0``), in turn, so CPU times compare like for like.

DER (``der`` below): frames of 10 ms; a collar of 250 ms either side of each reference boundary is
not scored (the standard 0.25 s collar, as NIST md-eval and pyannote.metrics' ``collar=0.5`` total
width); DER = (missed speech + false alarm + speaker confusion) / scored reference speech, with the
best one-to-one mapping of hypothesis to reference speakers. The baseline labels every transcribed
segment with one speaker (the same segments, so its miss and false alarm are the system's).

Memory on two hours: ``--hours 2`` streams two hours of these conversations' speech through the
speaker track in 30-second windows (the windows transcription hands it) and labels a transcript
of words placed on the truth's turns, reporting the peak resident memory and the CPU time (no
Whisper in that run: the embedding and the clustering only).

Run: ``.venv/bin/python benchmarks/bench_speakers.py [--conversations 4] [--hours 2] [--espeak]``.
Writes ``benchmarks/results/speakers.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"  # before numpy loads its BLAS: one thread, as a worker runs

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import need_tools, table, write_results  # noqa: E402

SOUNDS = Path("/usr/share/asterisk/sounds")
# Folder (under SOUNDS), file pattern, ffmpeg input format (None: by extension), who.
VOICES = {
    "allison-en": ("en_US_f_Allison", "*.wav", None),
    "june-fr-ca": ("fr_CA_f_June", "*.wav", None),
    "menardi-it": ("it_IT_f_Menardi", "*.wav", None),
    "carlo-it": ("it_IT_m_Carlo", "*.wav", None),
    "ivr-ru": ("ru_RU_f_IvrvoiceRU", "*.wav", None),
    "armelle-fr": ("fr", "*.gsm", "gsm"),
    "es-co": ("es", "*.gsm", "gsm"),
}
ESPEAK_VOICES = {"espeak-en-us-f2": "en-us+f2", "espeak-en-sc-m7": "en-gb-scotland+m7", "espeak-en-klatt": "en+klatt",
                 "espeak-en-us-m3": "en-us+m3"}
RATE = 16000
FRAME_MS = 10
COLLAR_MS = 250
MIN_PROMPT_S, MAX_PROMPT_S = 0.8, 6.0


@dataclass
class Clip:
    speaker: str
    samples: np.ndarray  # 16 kHz float32, trimmed of leading and trailing silence


@dataclass
class Conversation:
    samples: np.ndarray
    turns: list[tuple[str, int, int]]  # speaker, start_ms, end_ms


def _decode(path: Path, fmt: str | None) -> np.ndarray:
    args = ["ffmpeg", "-loglevel", "error"] + (["-f", fmt] if fmt else []) + ["-i", str(path), "-ac", "1",
                                                                              "-ar", str(RATE), "-f", "s16le", "-"]
    raw = subprocess.run(args, capture_output=True, check=True).stdout
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768


def _trim(samples: np.ndarray) -> np.ndarray:
    """Leading and trailing frames more than 35 dB below the loudest 10 ms frame cut off."""
    frame = RATE // 100
    count = samples.size // frame
    if count == 0:
        return samples[:0]
    energy = np.sqrt(np.mean(samples[: count * frame].reshape(count, frame) ** 2, axis=1)) + 1e-9
    loud = np.flatnonzero(20 * np.log10(energy / energy.max()) > -35)
    return samples[loud[0] * frame: (loud[-1] + 1) * frame]


def real_voices(per_voice: int, rng: random.Random) -> dict[str, list[Clip]]:
    voices: dict[str, list[Clip]] = {}
    for name, (folder, pattern, fmt) in VOICES.items():
        files = sorted((SOUNDS / folder).glob(pattern)) if (SOUNDS / folder).is_dir() else []
        if not files:
            print(f"skipped {name}: no {SOUNDS / folder}/{pattern} (its package is not installed)", file=sys.stderr)
            continue
        rng.shuffle(files)
        clips = []
        for path in files:
            samples = _trim(_decode(path, fmt))
            if MIN_PROMPT_S * RATE <= samples.size <= MAX_PROMPT_S * RATE:
                clips.append(Clip(name, samples))
            if len(clips) >= per_voice:
                break
        voices[name] = clips
    return voices


def espeak_voices(per_voice: int, rng: random.Random) -> dict[str, list[Clip]]:
    sentences = [s.strip() for s in Path("/usr/share/common-licenses/GPL-3").read_text().split(".") if 20 < len(s.strip()) < 140]
    voices: dict[str, list[Clip]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, voice in ESPEAK_VOICES.items():
            clips = []
            for i, text in enumerate(rng.sample(sentences, per_voice)):
                out = Path(tmp) / f"{name}-{i}.wav"
                subprocess.run(["espeak-ng", "-v", voice, "-w", str(out), " ".join(text.split())], check=True)
                clips.append(Clip(name, _trim(_decode(out, None))))
            voices[name] = clips
    return voices


def conversation(voices: dict[str, list[Clip]], speakers: int, turns: int, rng: random.Random) -> Conversation:
    chosen = rng.sample(sorted(voices), speakers)
    pools = {name: list(voices[name]) for name in chosen}
    for pool in pools.values():
        rng.shuffle(pool)
    parts: list[np.ndarray] = [np.zeros(int(0.5 * RATE), np.float32)]
    at = parts[0].size
    truth: list[tuple[str, int, int]] = []
    previous = None
    for turn in range(turns):
        speaker = chosen[turn % speakers] if turn < speakers else rng.choice([s for s in chosen if s != previous])
        previous = speaker
        start = at
        for k in range(rng.randint(1, 3)):
            if k:
                gap = np.zeros(int(rng.uniform(0.05, 0.3) * RATE), np.float32)
                parts.append(gap)
                at += gap.size
            pool = pools[speaker]
            clip = pool.pop() if pool else rng.choice(voices[speaker])
            parts.append(clip.samples)
            at += clip.samples.size
        truth.append((speaker, start * 1000 // RATE, at * 1000 // RATE))
        gap = np.zeros(int(rng.uniform(0.15, 0.9) * RATE), np.float32)
        parts.append(gap)
        at += gap.size
    return Conversation(np.concatenate(parts), truth)


def write_wav(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


def _frames(turns: list[tuple[str, int, int]], length: int, names: dict[str, int]) -> np.ndarray:
    labels = np.full(length, -1, dtype=np.int64)
    for speaker, start, end in turns:
        labels[start // FRAME_MS: end // FRAME_MS] = names.setdefault(speaker, len(names))
    return labels


def der(reference: list[tuple[str, int, int]], hypothesis: list[tuple[str, int, int]],
        collar_ms: int = COLLAR_MS) -> dict[str, float]:
    """Diarization error rate (no overlap in the reference), with ``collar_ms`` either side of each
    reference boundary left out, under the best one-to-one speaker mapping."""
    length = max([e for _, _, e in reference + hypothesis] + [0]) // FRAME_MS + 1
    ref_names: dict[str, int] = {}
    hyp_names: dict[str, int] = {}
    ref = _frames(reference, length, ref_names)
    hyp = _frames(hypothesis, length, hyp_names)
    scored = np.ones(length, dtype=bool)
    for _, start, end in reference:
        for edge in (start, end):
            scored[max(0, (edge - collar_ms) // FRAME_MS): (edge + collar_ms) // FRAME_MS] = False
    ref, hyp = ref[scored], hyp[scored]
    total = int((ref >= 0).sum())
    missed = int(((ref >= 0) & (hyp < 0)).sum())
    false_alarm = int(((ref < 0) & (hyp >= 0)).sum())
    both = (ref >= 0) & (hyp >= 0)
    overlap = np.zeros((len(ref_names), max(len(hyp_names), 1)), dtype=np.int64)
    np.add.at(overlap, (ref[both], hyp[both]), 1)
    best = _best_mapping(overlap)
    confusion = int(both.sum()) - best
    return {"der": (missed + false_alarm + confusion) / max(total, 1), "missed": missed / max(total, 1),
            "false_alarm": false_alarm / max(total, 1), "confusion": confusion / max(total, 1),
            "scored_s": total * FRAME_MS / 1000}


def _best_mapping(overlap: np.ndarray) -> int:
    """The largest total overlap of a one-to-one mapping of rows to columns (exhaustive; few speakers)."""
    rows, cols = overlap.shape
    if rows > cols:
        overlap, rows, cols = overlap.T, cols, rows
    best = 0
    for perm in itertools.permutations(range(cols), rows):
        best = max(best, int(sum(overlap[r, c] for r, c in enumerate(perm))))
    return best


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_extract(path: Path, speakers: int | None) -> tuple[Any, float]:
    from mediafleet.contract.audio import AudioOptions
    from mediafleet.contract.manifest import load_manifest
    from mediafleet.workers.audio.transcribe import extract_audio

    limits = load_manifest().capability("transcribe_segments").limits
    before = _cpu()
    result = extract_audio(path, AudioOptions(speakers=speakers), limits)
    return result, _cpu() - before


def hypothesis(result: Any, one_speaker: bool = False) -> list[tuple[str, int, int]]:
    return [("S1" if one_speaker else s.speaker, s.start_ms, s.end_ms) for s in result.segments]


def family(name: str, voices: dict[str, list[Clip]], sizes: list[int], count: int, turns: int,
           rng: random.Random, tmp: Path) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for speakers in sizes:
        if speakers > len(voices):
            continue
        for index in range(count):
            talk = conversation(voices, speakers, turns, rng)
            path = tmp / f"{name}-{speakers}-{index}.wav"
            write_wav(path, talk.samples)
            estimated, cpu_est = run_extract(path, None)
            given, _ = run_extract(path, speakers)
            off, cpu_off = run_extract(path, 0)
            oracle = oracle_der(talk)
            row = {
                "speakers": speakers, "seconds": round(talk.samples.size / RATE, 1),
                "speech_s": round(sum(e - s for _, s, e in talk.turns) / 1000, 1),
                "estimated": der(talk.turns, hypothesis(estimated)),
                "found_speakers": estimated.speaker_count,
                "given_n": der(talk.turns, hypothesis(given)),
                "one_speaker": der(talk.turns, hypothesis(off, one_speaker=True)),
                "oracle_segments": oracle,
                "cpu_s_speakers_on": round(cpu_est, 2), "cpu_s_speakers_off": round(cpu_off, 2),
            }
            rows.append(row)
            print(f"{name} {speakers} speakers #{index}: DER est {row['estimated']['der']:.3f} "
                  f"(found {row['found_speakers']}), given {row['given_n']['der']:.3f}, "
                  f"one {row['one_speaker']['der']:.3f}; CPU {cpu_est:.1f} vs {cpu_off:.1f} s", file=sys.stderr)
    return {"conversations": rows, "summary": summarise(rows)}


def _truth_segments(turns: list[tuple[str, int, int]]) -> list[Any]:
    from mediafleet.contract.audio import AudioSegment

    return [AudioSegment(start_ms=s, end_ms=e, text="words", confidence=1.0, avg_logprob=0.0, no_speech_prob=0.0,
                         words=[{"start_ms": s, "end_ms": e, "word": " words", "probability": 1.0}])
            for _, s, e in turns]


def turn_windows(turns: list[tuple[str, int, int]], samples: np.ndarray, at: int) -> list[Any]:
    """The turns' speech as transcription would hand it on with a perfect VAD: regions packed into
    windows of at most 30 s (``at``: the samples' first sample on the recording)."""
    from mediafleet.workers.audio.vad import Speech, Window

    windows, regions, audio, held = [], [], [], 0
    for _, start, end in turns:
        a, b = start * RATE // 1000, end * RATE // 1000
        if held + b - a > 30 * RATE and regions:
            windows.append(Window(regions, np.concatenate(audio)))
            regions, audio, held = [], [], 0
        regions.append(Speech(at + a, at + b))
        audio.append(samples[a:b])
        held += b - a
    if regions:
        windows.append(Window(regions, np.concatenate(audio)))
    return windows


def oracle_der(talk: Conversation) -> dict[str, float]:
    """DER of the speaker labelling alone: the reference turns as the transcript's segments, so
    transcription's misses (tiny.en on French, Italian, Russian, Spanish) take no part."""
    from mediafleet.workers.audio.speaker_turns import SpeakerTrack, label_segments
    from mediafleet.workers.audio.speaker_weights import encoder_weights

    track = SpeakerTrack(encoder_weights())
    for window in turn_windows(talk.turns, talk.samples, 0):
        track.add(window)
    labelled, _ = label_segments(_truth_segments(talk.turns), *track.arrays(), None)
    return der(talk.turns, [(s.speaker, s.start_ms, s.end_ms) for s in labelled])


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Scored-time-weighted DER per system, and the speaker labels' CPU per minute of speech."""
    def pooled(key: str) -> dict[str, float]:
        total = sum(r[key]["scored_s"] for r in rows) or 1.0
        return {m: round(sum(r[key][m] * r[key]["scored_s"] for r in rows) / total, 4)
                for m in ("der", "missed", "false_alarm", "confusion")}
    speech_min = sum(r["speech_s"] for r in rows) / 60 or 1.0
    extra = sum(r["cpu_s_speakers_on"] - r["cpu_s_speakers_off"] for r in rows)
    transcription = sum(r["cpu_s_speakers_off"] for r in rows)
    exact = sum(r["found_speakers"] == r["speakers"] for r in rows)
    return {"estimated": pooled("estimated"), "given_n": pooled("given_n"), "one_speaker": pooled("one_speaker"),
            "oracle_segments": pooled("oracle_segments"),
            "speaker_count_right": f"{exact}/{len(rows)}",
            "cpu_s_per_speech_min_speakers": round(extra / speech_min, 2),
            "cpu_s_per_speech_min_transcription": round(transcription / speech_min, 2)}


def two_hours(voices: dict[str, list[Clip]], hours: float, rng: random.Random) -> dict[str, Any]:
    """Peak memory and CPU of the speaker track and labelling over ``hours`` of speech, streamed."""
    from mediafleet.workers.audio.speaker_turns import SpeakerTrack, label_segments
    from mediafleet.workers.audio.speaker_weights import encoder_weights

    track = SpeakerTrack(encoder_weights())
    encoder_weights()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    before = _cpu()
    at = 0  # samples of the recording
    truth: list[tuple[str, int, int]] = []
    while at < hours * 3600 * RATE:
        talk = conversation(voices, min(3, len(voices)), 12, rng)
        for speaker, start, end in talk.turns:
            truth.append((speaker, (at * 1000 // RATE) + start, (at * 1000 // RATE) + end))
        for window in turn_windows(talk.turns, talk.samples, at):
            track.add(window)
        at += talk.samples.size
    embed_cpu = _cpu() - before
    segments = _truth_segments(truth)
    before = _cpu()
    labelled, count = label_segments(segments, *track.arrays(), None)
    label_cpu = _cpu() - before
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    embeddings = track.arrays()[0]
    return {"hours": hours, "speech_min": round(sum(e - s for _, s, e in truth) / 60000, 1),
            "partials": int(embeddings.shape[0]), "partials_mb": round(embeddings.nbytes / 2**20, 1),
            "peak_rss_mb_before": round(rss_before), "peak_rss_mb_after": round(rss_after),
            "embed_cpu_s": round(embed_cpu, 1), "label_cpu_s": round(label_cpu, 1),
            "cpu_s_per_recording_min": round((embed_cpu + label_cpu) / (hours * 60), 2),
            "speakers_found": count, "der_word_spans": der(truth, [(s.speaker, s.start_ms, s.end_ms) for s in labelled])}


def memory_run(hours: float, seed: int) -> dict[str, Any]:
    """:func:`two_hours` in a process of its own, so its peak resident memory is its own."""
    child = subprocess.run([sys.executable, __file__, "--memory-child", "--hours", str(hours), "--seed", str(seed)],
                           capture_output=True, text=True, check=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=3, help="per speaker count and family")
    parser.add_argument("--turns", type=int, default=14)
    parser.add_argument("--sizes", default="2,3,4")
    parser.add_argument("--hours", type=float, default=0.0, help="the memory run's length (0: none)")
    parser.add_argument("--espeak", action="store_true", help="add the synthetic espeak-ng family")
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory-only", action="store_true",
                        help="only the memory run, added to the results already in speakers.json")
    args = parser.parse_args()
    need_tools("ffmpeg", why="to decode the prompts")
    from mediafleet.workers.engines import EngineConfig, cap_threads, configure

    cap_threads(1)
    configure(EngineConfig(threads=1))
    rng = random.Random(args.seed)
    if args.memory_child:  # the memory run, in a process of its own so its peak is its own
        print(json.dumps(two_hours(real_voices(40, rng), args.hours, rng)))
        return
    if args.memory_only:
        results = json.loads((Path(__file__).parent / "results" / "speakers.json").read_text())
        results.pop("machine", None)
        results["memory_command"] = " ".join(["benchmarks/bench_speakers.py"] + sys.argv[1:])
        results["memory"] = memory_run(args.hours, args.seed)
        print(results["memory"])
        print(write_results("speakers", results))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, Any] = {"command": " ".join(["benchmarks/bench_speakers.py"] + sys.argv[1:]), "families": {}}
    with tempfile.TemporaryDirectory() as tmp:
        real = real_voices(40, rng)
        results["voices"] = {name: len(clips) for name, clips in real.items()}
        results["families"]["asterisk-prompts (real)"] = family("real", real, sizes, args.conversations, args.turns,
                                                                rng, Path(tmp))
        write_results("speakers", results)  # kept as it goes: each family is minutes of Whisper
        if args.espeak:
            need_tools("espeak-ng", why="for the synthetic family")
            synthetic = espeak_voices(30, rng)
            results["families"]["espeak-ng (synthetic)"] = family("espeak", synthetic, sizes, args.conversations,
                                                                  args.turns, rng, Path(tmp))
            write_results("speakers", results)
        if args.hours > 0:
            results["memory"] = memory_run(args.hours, args.seed)
    rows = [("family", "DER estimated", "DER speakers=N", "DER one speaker", "DER oracle segments", "count right", "CPU s/speech min (speakers)",
             "CPU s/speech min (transcription)")]
    for name, fam in results["families"].items():
        s = fam["summary"]
        rows.append((name, f"{s['estimated']['der']:.3f}", f"{s['given_n']['der']:.3f}", f"{s['one_speaker']['der']:.3f}",
                     f"{s['oracle_segments']['der']:.3f}", s["speaker_count_right"], str(s["cpu_s_per_speech_min_speakers"]),
                     str(s["cpu_s_per_speech_min_transcription"])))
    print(table(rows))
    if "memory" in results:
        print(results["memory"])
    print(write_results("speakers", results))


if __name__ == "__main__":
    main()
