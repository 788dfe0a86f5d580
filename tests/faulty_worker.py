"""A real ``mediafleet worker`` whose PDF extractor misbehaves on marked inputs.

Test scaffolding for crash safety: everything is the real worker (Celery, Redis, the task shell, the
job records) except that the ``ocr_pdf`` extractor first looks for a marker in the PDF's title:

* ``MF-CRASH``: the pool process kills itself with SIGKILL (a segfault or an OOM kill);
* ``MF-HANG``: it swallows the soft time limit and sleeps until the hard limit kills it;
* ``MF-SLOW``: it takes ~4 s, reporting progress, before extracting (time to kill or cancel it).

A range of a split PDF job misbehaves once when the worker's environment names its first page:
``MF_FAULTY_CRASH_SPAN=5`` with ``MF_FAULTY_ONCE=<file>``: the first delivery that reads pages
from 5 creates the file and kills its pool process with SIGKILL; later deliveries run normally.

The ``transcribe_segments`` extractor misbehaves for the whole worker instead (a video's speech
part carries no title of its own): ``MF_FAULTY_AUDIO=crash`` or ``=hang`` in the worker's
environment, as above; ``=gpu-oom`` raises what CTranslate2 raises when the GPU has no memory left
(``RuntimeError("CUDA failed with error out of memory")``: there is no GPU here to run out of), in
the first run only where ``MF_FAULTY_ONCE=<file>`` is set (it creates the file), else in every run;
``=gpu-broken`` raises what it raises when the GPU's CUDA context has failed (``RuntimeError("CUDA
failed with error an illegal memory access was encountered")``) in every run.

Run as ``python -m tests.faulty_worker worker ...`` (the same arguments as ``mediafleet``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from mediafleet.workers import extractor
from mediafleet.workers.pdf import textlayer

SLOW_STEPS = 40


def _misbehave(marker: bytes) -> None:
    if marker == b"MF-CRASH":
        os.kill(os.getpid(), signal.SIGKILL)
    if marker == b"MF-HANG":
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                time.sleep(0.05)
            except BaseException:  # noqa: BLE001, S110 - the soft limit: ignored on purpose
                pass


def _first_time(once: str) -> bool:
    """Whether this is the first run to get here: it creates the file ``once`` names."""
    try:
        Path(once).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def _gpu_out_of_memory() -> None:
    once = os.environ.get("MF_FAULTY_ONCE")
    if not once or _first_time(once):
        raise RuntimeError("CUDA failed with error out of memory")


def extract_audio(path: Path, options: Any, limits: Any, progress: Any = None, sink: Any = None) -> Any:
    from mediafleet.workers.audio.transcribe import extract_audio as real

    fault = os.environ.get("MF_FAULTY_AUDIO", "")
    if fault == "gpu-oom":
        _gpu_out_of_memory()
    elif fault == "gpu-broken":
        raise RuntimeError("CUDA failed with error an illegal memory access was encountered")
    else:
        _misbehave(b"MF-" + fault.upper().encode())
    return real(path, options, limits, progress, sink)


def _crash_once(options: Any) -> None:
    span, once = os.environ.get("MF_FAULTY_CRASH_SPAN"), os.environ.get("MF_FAULTY_ONCE")
    page_span = getattr(options, "page_span", None)
    if span and once and page_span is not None and page_span[0] == int(span) and _first_time(once):
        os.kill(os.getpid(), signal.SIGKILL)


def extract(path: Path, options: Any, limits: Any, progress: Any = None, sink: Any = None) -> Any:
    _crash_once(options)
    head = path.read_bytes()  # the title may sit past the pages of a long PDF
    for marker in (b"MF-CRASH", b"MF-HANG"):
        if marker in head:
            _misbehave(marker)
    if b"MF-SLOW" in head:
        for step in range(1, SLOW_STEPS + 1):
            time.sleep(0.1)
            if progress is not None:
                progress(step, SLOW_STEPS)
    return textlayer.extract_pdf(path, options, limits, None, sink)


extractor.EXTRACTORS["ocr_pdf"] = "tests.faulty_worker:extract"
extractor.EXTRACTORS["transcribe_segments"] = "tests.faulty_worker:extract_audio"

if __name__ == "__main__":
    from mediafleet.cli import main

    sys.exit(main(sys.argv[1:]))
