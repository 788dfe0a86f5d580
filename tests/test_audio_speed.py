"""What the audio path does to save time or memory changes no number: known answers against the plain way."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from faster_whisper import decode_audio
from faster_whisper.audio import pad_or_trim

from mediafleet.workers.audio import memory
from mediafleet.workers.audio import transcribe as transcribe_module
from mediafleet.workers.audio.decode import open_audio
from mediafleet.workers.audio.model import whisper

from tests.test_audio import DATA, LIMITS, pcm16, transcribe, write_wav


@pytest.mark.parametrize("name", ["speech.mp3", "speech.flac", "speech.opus", "speech.m4a", "speech.aac"])
def test_decoding_in_groups_gives_faster_whispers_samples(name: str) -> None:
    """Frames are resampled in groups, not one by one: the samples are still decode_audio's, to the bit."""
    with open_audio(DATA / name, LIMITS) as audio:
        ours = np.concatenate(list(audio.blocks(block_samples=16000)))
    theirs = decode_audio(str(DATA / name))
    assert ours.dtype == theirs.dtype == np.float32
    assert np.array_equal(ours, theirs)


@pytest.mark.slow
def test_encoding_one_window_at_a_time_gives_the_batch_encoding() -> None:
    engine = whisper()
    if engine.device != "cpu":
        pytest.skip("the encoder runs window by window on the CPU only")
    speech = pcm16(DATA / "speech.flac").astype(np.float32) / 32768.0
    extractor = engine.model.feature_extractor
    windows = [speech, speech[::-1].copy()]
    features = np.stack([pad_or_trim(extractor(w)[..., :-1]) for w in windows])  # as the pipeline makes them
    batched = np.asarray(engine.model.encode(features))
    one_by_one = np.asarray(transcribe_module._WindowByWindow(engine.model).encode(features))
    assert one_by_one.shape == batched.shape == (2, 1500, batched.shape[2])
    assert np.array_equal(one_by_one, batched)


@pytest.mark.slow
def test_a_transcription_of_several_batches_is_what_the_batched_encoder_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eighty seconds (three windows, two batches): the same result, segment for segment, word for word."""
    speech = pcm16(DATA / "speech.flac")
    pause = np.zeros(16000 // 2, dtype=np.int16)
    path = write_wav(tmp_path / "long.wav", np.concatenate([speech, pause] * 8))
    ours = transcribe(path)
    monkeypatch.setattr(transcribe_module, "_WindowByWindow", lambda model: model)
    plain = transcribe(path)
    assert len(ours.segments) >= 8
    assert ours.model_dump() == plain.model_dump()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _glibc() -> ctypes.CDLL:
    libc = memory._glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc (2.33 or later) only")
    libc.mallinfo2.restype = _MallInfo2
    return libc


def _mmapped_bytes(libc: ctypes.CDLL) -> int:
    return libc.mallinfo2().hblkhd


def test_big_blocks_come_from_the_heap_while_held_and_from_mmap_again_after() -> None:
    libc = _glibc()
    size = 64 << 20
    with memory.held_allocations():
        before = _mmapped_bytes(libc)
        block = np.ones(size, dtype=np.uint8)
        assert _mmapped_bytes(libc) - before < size  # from the heap: freed, it stays for the next one
        del block
    before = _mmapped_bytes(libc)
    block = np.ones(size, dtype=np.uint8)
    assert _mmapped_bytes(libc) - before >= size  # mmapped, and unmapped when freed, as glibc does by default
    del block


_FAULTS_CHILD = """
import contextlib, json, resource, sys
from pathlib import Path
from mediafleet.workers.audio import transcribe as transcribe_module
from tests.test_audio import transcribe
if sys.argv[1] != "held":
    transcribe_module.held_allocations = contextlib.nullcontext
first, *counted = (Path(p) for p in sys.argv[2:])
result = transcribe(first)  # the model's first run in this process, not counted
faults = []
for path in counted:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    transcribe(path)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"faults": faults, "result": result.model_dump(mode="json")}))
"""


def _faults_and_result(mode: str, first: Path, *counted: Path) -> tuple[list[int], dict]:
    """In a fresh process (glibc's dynamic mmap threshold remembers what the process freed before,
    so faults counted in a process that already ran other tests say little): the result of a first
    transcription of ``first``, then the page faults of a transcription of each of ``counted``."""
    done = subprocess.run([sys.executable, "-c", _FAULTS_CHILD, mode, str(first), *map(str, counted)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], check=False,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return [int(n) for n in out["faults"]], out["result"]


@pytest.mark.slow
def test_holding_allocations_spares_the_page_faults_and_changes_no_number(tmp_path: Path) -> None:
    """The encoder's big buffers are reused, not faulted in afresh for each layer of each window:
    held, three times the windows (nine against three) fault in well under twice the pages
    (2026-12-04, four runs: 1.22x to 1.48x), and the result is the same to the bit.

    Plain faster-whisper's allocations are not compared by count, because theirs depends on the
    process's past: the encoder's 54 MB buffers are mmapped, and faulted in, unless the heap holds
    that much free at its top, which it does only where glibc's dynamic mmap threshold ended up at
    its 32 MB cap (the trim threshold follows at twice that) and the run left the space free. In a
    process that first transcribed three windows, nine then faulted 255,080 to 553,359 pages (four
    runs); in one that first transcribed the nine, 57,144 to 529,056 (strace: twelve 54 MB mmaps in
    a slow three-window run, none in a fast one). Held: 42,821 to 54,676 pages on three windows,
    47,053 to 79,764 on nine (each transcription gives its free memory back when it ends)."""
    _glibc()
    if whisper().device != "cpu":
        pytest.skip("allocations are held on the CPU only")
    speech = pcm16(DATA / "speech.flac")
    pause = np.zeros(16000 // 2, dtype=np.int16)
    short = write_wav(tmp_path / "short.wav", np.concatenate([speech, pause] * 8))
    long = write_wav(tmp_path / "long.wav", np.concatenate([speech, pause] * 24))
    (held_short, held_long), held = _faults_and_result("held", short, short, long)
    _, plain = _faults_and_result("plain", short)
    assert held == plain
    assert held_long < 2 * held_short, (held_short, held_long)
