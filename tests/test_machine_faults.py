"""A machine's fault is not an answer about the input: GPU and memory failures of the engines are
retryable ``engine_unavailable`` failures, with a public message, so a resubmission runs the job again.

The messages are the engines' own wording (CTranslate2's CUDA, cuBLAS and cuDNN checks and its
library loader; onnxruntime's CUDA provider and memory arena), as they raise them. No GPU runs here,
so a GPU's failure is raised by a stand-in extractor with those words; the fleet form of this test
(a real worker, a real redis-server) is in ``tests/test_audio_fleet.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mediafleet import Dispatcher, Settings
from mediafleet.contract.errors import ErrorCode
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, Outcome
from mediafleet.workers import engines, extractor
from mediafleet.workers.engines import MachineFault, broken_device, machine_fault, mark_broken
from mediafleet.workers.gpu import visible_gpus
from mediafleet.workers.runtime.middleware.delivery import Delivery
from mediafleet.workers.runtime.middleware.device import DeviceHealth

SPEECH = Path(__file__).parent / "data" / "speech.opus"

MEMORY = MachineFault("the worker ran out of GPU or host memory", lasting=False)
LIBRARY = MachineFault("a GPU library cannot be loaded on this worker", lasting=True)
GPU = MachineFault("the GPU failed", lasting=True)


@pytest.fixture(autouse=True)
def _healthy_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with this process's device unmarked, and leaves it so."""
    monkeypatch.setattr(engines, "_broken", None)


@pytest.mark.parametrize(("message", "phrase"), [
    ("CUDA failed with error out of memory", MEMORY),
    ("cuBLAS failed with status CUBLAS_STATUS_ALLOC_FAILED", MEMORY),
    ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Conv node. "
     "Name:'Conv_0' Status Message: CUDA failure 2: out of memory ; GPU=0 ; hostname=w ; expr=cudaMalloc", MEMORY),
    ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Failed to allocate memory for requested buffer of size 4194304",
     MEMORY),
    ("std::bad_alloc", MEMORY),
    ("Library libcublas.so.12 is not found or cannot be loaded", LIBRARY),
    ("Unable to load any of {libcudnn_ops.so.9.1.0, libcudnn_ops.so.9.1, libcudnn_ops.so.9, libcudnn_ops.so}", LIBRARY),
    ("CUDA failed with error an illegal memory access was encountered", GPU),
    ("CUDA failed with error CUDA driver version is insufficient for CUDA runtime version", GPU),
    ("cuBLAS failed with status CUBLAS_STATUS_EXECUTION_FAILED", GPU),
    ("cuDNN failed with status CUDNN_STATUS_EXECUTION_FAILED", GPU),
])
def test_the_engines_words_for_a_machine_fault_are_recognised(message: str, phrase: MachineFault) -> None:
    assert machine_fault(RuntimeError(message)) == phrase


@pytest.mark.parametrize("message", [
    "Invalid data found when processing input",
    "cannot open broken document",
    "unsupported audio format",
    "Unable to open file 'model.bin' in model '/models/x'",
    "list index out of range",
])
def test_failures_that_say_nothing_of_the_machine_are_not_taken_for_one(message: str) -> None:
    assert machine_fault(RuntimeError(message)) is None


def test_python_running_out_of_memory_is_a_machine_fault() -> None:
    assert machine_fault(MemoryError()) == MachineFault("the worker ran out of memory", lasting=False)


def gpu_fails(*_args: object, **_kwargs: object) -> None:
    """The stand-in for a GPU that fails: CTranslate2's words."""
    raise RuntimeError("cuBLAS failed with status CUBLAS_STATUS_EXECUTION_FAILED")


def has_a_bug(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("list index out of range")


def test_a_gpu_fault_in_process_is_retryable_and_tells_no_library_text(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(extractor.EXTRACTORS, "transcribe_segments", f"{__name__}:gpu_fails")
    bundle = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(SPEECH).bundle()
    assert bundle.status == "failed" and bundle.error is not None
    assert bundle.error.code == ErrorCode.ENGINE_UNAVAILABLE and bundle.error.retryable
    assert bundle.error.message == ("the GPU failed while running transcribe_segments; "
                                    "the job can be submitted again")
    assert broken_device() == "the GPU failed"  # a failed CUDA context lasts: a fleet worker would stop


def test_any_other_engine_failure_stays_an_internal_error(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(extractor.EXTRACTORS, "transcribe_segments", f"{__name__}:has_a_bug")
    bundle = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(SPEECH).bundle()
    assert bundle.status == "failed" and bundle.error is not None
    assert bundle.error.code == ErrorCode.INTERNAL_ERROR and not bundle.error.retryable


def _delivery(stops: list[str]) -> Delivery:
    request = ExtractRequest(job_id="mf-" + "0" * 32, action="transcribe_segments",
                             artifact=ArtifactRef(digest="sha256:" + "0" * 64, media_type="audio/ogg", bytes=1,
                                                  modality="audio"))
    return Delivery(request, jobs=None, retire=stops.append)  # type: ignore[arg-type]


def test_running_out_of_memory_passes_and_the_worker_goes_on() -> None:
    mark_broken(MEMORY)
    stops: list[str] = []
    DeviceHealth().after_run(_delivery(stops), Outcome.model_construct())
    assert broken_device() is None and stops == []


def test_a_lasting_gpu_fault_stops_the_worker_once() -> None:
    mark_broken(GPU)
    health, stops = DeviceHealth(), []
    for _ in range(3):
        health.after_run(_delivery(stops), Outcome.model_construct())
    assert stops == ["the GPU failed"]


@pytest.mark.parametrize(("message", "broken"), [
    ("Library libcublas.so.12 is not found or cannot be loaded", "a GPU library cannot be loaded on this worker"),
    ("CUDA failed with error out of memory", None),  # passes: the worker goes on
    ("Unable to open file 'model.bin' in model '/models/x'", None),  # the model's fault, not the machine's
])
def test_a_model_that_cannot_be_loaded_for_the_machines_sake_marks_the_device(
        monkeypatch: pytest.MonkeyPatch, message: str, broken: str | None) -> None:
    import faster_whisper

    from mediafleet.contract.errors import Unavailable
    from mediafleet.contract.manifest import DeviceClass
    from mediafleet.workers.audio.model import whisper

    def refuse(*_args: object, **_kwargs: object) -> None:  # the stand-in for a GPU's loader
        raise RuntimeError(message)

    monkeypatch.setattr(faster_whisper, "WhisperModel", refuse)
    with pytest.raises(Unavailable, match="the Whisper model cannot be loaded on this worker"):
        whisper(engines.EngineConfig(device=DeviceClass.CPU, threads=7))  # a key no other test loads
    assert broken_device() == broken


@pytest.mark.skipif(visible_gpus() > 0, reason="a CUDA device is visible here: the model runs on it")
def test_a_gpu_worker_whose_model_does_not_run_on_its_gpu_refuses_to_start(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # The driver is taken to list a GPU; the first run, in a separate interpreter, is real: this
    # machine's CTranslate2 has no CUDA device, so the model does not run there, and the check says so.
    from mediafleet.contract.errors import Unavailable
    from mediafleet.contract.manifest import DeviceClass
    from mediafleet.workers.audio import model

    monkeypatch.setattr(model, "visible_gpus", lambda: 1)
    with caplog.at_level("ERROR", logger="mediafleet.audio"), pytest.raises(Unavailable) as refused:
        model.check_device(DeviceClass.GPU)
    assert refused.value.message == ("the Whisper model does not run on this GPU: "
                                     "this GPU worker sees no CUDA device that runs float16")
    assert "did not run on this GPU (exit 1)" in caplog.text  # the engine's own words go to the log
    model.check_device(DeviceClass.CPU)  # a CPU worker runs nothing at start-up


@pytest.mark.parametrize(("raised", "said"), [
    (RuntimeError("Library libcublas.so.12 is not found or cannot be loaded"),
     "a GPU library cannot be loaded on this worker"),
    (RuntimeError("CUDA failed with error initialization error"), "the GPU failed"),
    (RuntimeError("CUDA failed with error out of memory"), "the worker ran out of GPU or host memory"),
    (ValueError("unsupported compute type"), ""),  # not the machine's: the parent gives its own phrase
])
def test_the_first_run_on_the_gpu_names_the_machines_fault_publicly(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], raised: Exception, said: str) -> None:
    import sys

    from mediafleet.workers.audio import model

    def run_fails(*_args: object) -> None:  # the stand-in for the model's first run on a GPU
        raise raised

    monkeypatch.setattr(model, "whisper", run_fails)
    monkeypatch.setattr(engines, "_config", engines.engine_config())  # the run configures this process for the GPU
    monkeypatch.setattr(sys, "argv", ["-c", "/models/whisper"])
    with pytest.raises(SystemExit) as exited:
        model._run_once_on_gpu()
    assert exited.value.code == 1
    out, err = capsys.readouterr()
    assert out.strip() == said
    assert str(raised) in err  # for the parent's log, never for the caller
