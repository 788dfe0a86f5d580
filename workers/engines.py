"""How engines in this process should run: device class and threads, set once at start-up.

The worker sets it in each pool process (``worker_process_init``, i.e. after the fork, so no
engine state crosses a fork); the in-process dispatcher sets it for itself. Extractors read it
with :func:`engine_config` when they first build their engine; they never read the environment.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from mediafleet.contract.manifest import DeviceClass

log = logging.getLogger(__name__)

__all__ = [
    "THREAD_VARIABLES", "EngineConfig", "MachineFault", "broken_device", "cap_threads", "configure", "engine_config",
    "machine_fault", "mark_broken", "numerics",
]


@dataclass(frozen=True)
class EngineConfig:
    device: DeviceClass = DeviceClass.CPU
    threads: int = 1
    whisper_model_dir: Path | None = None  # a CTranslate2 Whisper folder; None: the packaged tiny.en
    speech_batch: int | None = None  # Whisper's windows a batch, as the running job's request names; None: the device's


_config = EngineConfig()


def configure(config: EngineConfig) -> None:
    global _config
    _config = config


def engine_config() -> EngineConfig:
    return _config


#: The thread pools the engines' native libraries size from the environment when they load.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_THREAD_LIMIT")
#: Engine modules whose native thread pools read :data:`THREAD_VARIABLES` as they load: CTranslate2's
#: OpenMP runtime. Not onnxruntime: its CPU build has no OpenMP and reads none of them (each session's
#: threads are set where it is made: the OCR engine's, faster-whisper's VAD at one), so a program
#: that imported it first (PyMuPDF 2 imports it) changes no number (``tests/test_engine_threads.py``).
_ENGINE_LIBRARIES = ("ctranslate2",)


def cap_threads(threads: int) -> None:
    """Size every native thread pool to ``threads``, on every path that runs engines (worker,
    ``serve-mcp``, in-process ``extract``), before any engine loads.

    Set, not defaulted: an inherited ``OMP_NUM_THREADS`` would change the numerics under the same
    job id (the thread count is part of a job's identity: see :func:`mediafleet.adapters.ids.job_id`).

    Too late once an engine's library is loaded: CTranslate2's OpenMP runtime reads the variables
    when it loads, and later settings do not reach its threads. (On an AMD EPYC host, Whisper's
    int8 numbers differ between one and two OpenMP threads: a process that had imported
    ``ctranslate2`` before this call, as a test module did, transcribed with its inherited two
    threads under the one-thread job id.) That case is logged as a warning; a process that
    embeds mediafleet and loads these libraries itself must set the variables before it does.
    """
    loaded = [name for name in _ENGINE_LIBRARIES if name in sys.modules]
    unequal = [var for var in THREAD_VARIABLES if os.environ.get(var) != str(threads)]
    if loaded and unequal:
        log.warning("engine libraries %s were loaded before their threads were capped to %d (%s unset or "
                    "other): their numbers follow the setting they loaded with", ", ".join(loaded), threads,
                    ", ".join(unequal))
    for var in THREAD_VARIABLES:
        os.environ[var] = str(threads)


def numerics(action: str, options: Mapping[str, Any], threads: int | None,
             speech_batch: int | None = None) -> dict[str, Any]:
    """What, beyond its options, changes a job's numbers: the settings its modality's spec names
    for these options (:attr:`~mediafleet.modalities.spec.ModalitySpec.numerics`), with their values.

    The thread count, for the engines whose floating-point reductions depend on it (CTranslate2's
    Whisper, onnxruntime's OCR); Whisper's windows a batch where set (a word's time can move by a
    frame with it). Empty for work that does not depend on them (a PDF's text layer with OCR off;
    shots and keyframes of a video without speech), so those ids stay the same across these
    settings; a batch left to its default names nothing, so the ids of jobs submitted without the
    setting are what they were before it existed. The device class is not here: a held job may run
    on any allowed class, so the class (and its compute type, and its default batch) is named in
    the derivation of the loci instead, by the producer's options.
    """
    from mediafleet.modalities.registry import spec_for

    named = spec_for(action).numerics(options)
    values = {"threads": threads, "speech_batch": speech_batch}
    return {name: values[name] for name in sorted(named) if values[name] is not None}


# What the engines' native code raises when the machine, not the input, fails a run, as it words it:
# CTranslate2's CUDA, cuBLAS and cuDNN checks ("CUDA failed with error out of memory", "cuBLAS failed
# with status CUBLAS_STATUS_ALLOC_FAILED") and its library loader ("Library libcublas.so.12 is not
# found or cannot be loaded"); onnxruntime's CUDA execution provider ("CUDA failure 2: out of memory",
# "CUBLAS failure 3", "CUDNN failure 4") and its memory arena ("Failed to allocate memory for
# requested buffer"); a C++ allocation failure passed up as text. Matched on the lower-cased message,
# the more specific first; each with its public phrase, and whether it lasts for the process.
_MACHINE_FAULTS: tuple[tuple[tuple[str, ...], str, bool], ...] = (
    (("out of memory", "failed to allocate memory", "std::bad_alloc", "status_alloc_failed"),
     "the worker ran out of GPU or host memory", False),
    (("is not found or cannot be loaded", "unable to load any of {libcudnn", "unable to load any of {libcublas"),
     "a GPU library cannot be loaded on this worker", True),
    (("cuda failed with error", "cuda failure", "cublas failed with status", "cublas failure", "cudnn failed with status",
      "cudnn failure", "cudaerror"),
     "the GPU failed", True),
)


@dataclass(frozen=True)
class MachineFault:
    """What about this machine made an engine fail."""

    phrase: str
    """Public: names the fault, never the library's text."""
    lasting: bool
    """The process's GPU cannot be trusted again (a CUDA context that failed stays failed; a library
    that cannot be loaded stays so): the worker stops so that a fresh process takes over. Running out
    of memory passes, so the process goes on."""


def machine_fault(exc: BaseException) -> MachineFault | None:
    """The machine's fault that made an engine fail (its GPU, a GPU library, its memory), or None
    when ``exc`` says nothing of the machine.

    Such a failure says nothing about the input: the run is reported as retryable
    (``engine_unavailable``), so a resubmission runs the job again, on this worker once the fault
    has passed or on another. Recognised by the engines' own wording, since CTranslate2 and
    onnxruntime raise plain ``RuntimeError`` (or their own exception types) for them.
    """
    if isinstance(exc, MemoryError):
        return MachineFault("the worker ran out of memory", lasting=False)
    text = str(exc).lower()
    for markers, phrase, lasting in _MACHINE_FAULTS:
        if any(marker in text for marker in markers):
            return MachineFault(phrase, lasting)
    return None


_broken: str | None = None


def mark_broken(fault: MachineFault) -> None:
    """Remember that this process's GPU failed for good (see :attr:`MachineFault.lasting`)."""
    global _broken
    if fault.lasting:
        _broken = fault.phrase


def broken_device() -> str | None:
    """Why this process's GPU cannot be used again, or None while nothing lasting has failed."""
    return _broken
