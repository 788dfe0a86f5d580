"""The GPU device class for real: a ``mediafleet worker --device gpu`` transcribing on CUDA.

These tests run only where a CUDA device is visible (asked as the worker asks, of a separate
interpreter); elsewhere they skip, and ``test_audio_fleet`` checks that such a worker refuses to
start. They were run on an NVIDIA H200 (README: GPU workers, with the figures and what it took).

Real redis-server, real worker processes, the real packaged tiny.en model in float16 on the GPU.
The operator manifest keeps the capabilities these tests need (transcription; for the fan-out,
video keyframes too): a GPU worker refuses to start when a capability of its class cannot run
there, and image OCR on the GPU also needs onnxruntime's CUDA build.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mediafleet import Dispatcher, Settings
from mediafleet.contract.jobs import JobState
from mediafleet.workers.gpu import visible_gpus
from tests.helpers import assert_engine_valid, wait_for
from tests.test_audio import SPEECH_TEXT
from benchmarks.harness import wer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(visible_gpus() < 1, reason="no CUDA device is visible here: the GPU worker cannot run"),
]

DATA = Path(__file__).parent / "data"


def _manifest(tmp_path: Path, *actions: str) -> Path:
    path = tmp_path / "gpu-manifest.json"
    path.write_text(json.dumps({"capabilities": {a: {} for a in actions}}))
    return path


def _fleet(fleet_env: dict[str, str], manifest: Path) -> Dispatcher:
    return Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"],
                               blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"]), manifest_file=manifest))


def _spoken(bundle) -> str:  # type: ignore[no-untyped-def]
    return " ".join(n.properties["text"] for n in bundle.nodes
                    if n.node_type == "Evidence" and n.properties["locus_kind"] == "audio_range")


def test_the_model_runs_on_this_gpu_at_start_up() -> None:
    # The GPU worker's start-up run (a second of silence, in a separate interpreter) passes on a
    # working GPU; a worker whose run fails refuses to start (tests/test_machine_faults.py).
    from mediafleet.workers.audio.model import gpu_run_fault, model_dir
    from mediafleet.workers.engines import EngineConfig

    assert gpu_run_fault(model_dir(EngineConfig())) is None


def test_a_gpu_worker_transcribes_on_cuda_with_the_known_words(fleet_env, start_worker, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "transcribe_segments")
    start_worker("--device", "gpu", "--concurrency=1", "--hostname=gpu@%h",
                 env={"MEDIAFLEET_MANIFEST_FILE": str(manifest)})
    dispatcher = _fleet(fleet_env, manifest)
    wait_for(lambda: dispatcher.status()["workers"]["gpu"], what="the GPU worker's presence")

    job = dispatcher.submit(DATA / "speech.flac")
    bundle = job.bundle(timeout=300)
    assert bundle.status == "ok", bundle.error
    assert wer(SPEECH_TEXT, _spoken(bundle)) <= 0.05, _spoken(bundle)
    assert assert_engine_valid(bundle) == 2  # the two sentences, each an AudioRange locus
    (claim,) = [n for n in bundle.nodes if n.node_type == "Claim"]
    assert claim.properties["is_verified"] is True
    record = dispatcher.jobs().get(job.id)
    assert record.state == JobState.DONE and record.completions == 1 and record.hostname.startswith("gpu@")
    used = record.outcome.result.producer.options  # what the run recorded (part of the derivation ref)
    assert used["device"] == "cuda" and used["compute_type"] in ("float16", "int8_float16"), used


def test_a_videos_speech_fans_out_to_the_gpu_worker(fleet_env, start_worker, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, "extract_keyframes", "transcribe_segments")
    env = {"MEDIAFLEET_MANIFEST_FILE": str(manifest)}
    start_worker("--device", "cpu", "--concurrency=1", "--queues=mf.extract_keyframes.cpu", "--hostname=video@%h",
                 env=env)
    start_worker("--device", "gpu", "--concurrency=1", "--hostname=gpu@%h", env=env)
    dispatcher = _fleet(fleet_env, manifest)

    job = dispatcher.submit(DATA / "speech.mp4")
    bundle = job.bundle(timeout=300)
    assert bundle.status == "ok", bundle.error
    assert "finance team before friday" in _spoken(bundle).lower()
    jobs = dispatcher.jobs()
    record = jobs.get(job.id)
    assert record.state == JobState.DONE and record.hostname.startswith("video@")
    speech = jobs.get(record.parts.get("speech"))
    assert speech.state == JobState.DONE and speech.completions == 1 and speech.hostname.startswith("gpu@")
    assert speech.outcome.result.producer.options["device"] == "cuda"
