"""Audio through the fleet: a real redis-server, a real prefork worker, the real packaged model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediafleet.contract.errors import ErrorCode
from mediafleet.contract.jobs import JobState
from mediafleet import Dispatcher, Settings
from tests.helpers import assert_engine_valid, wait_for, without_run
from tests.test_audio import DATA
from mediafleet.workers.gpu import visible_gpus

pytestmark = pytest.mark.integration


def test_audio_through_the_fleet_equals_the_in_process_bundle(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    local = Dispatcher(Settings(blob_root=tmp_path / "local-blobs"))
    audio = (DATA / "speech.m4a").read_bytes()

    remote = fleet.submit(audio).bundle(timeout=300)
    here = local.submit(audio).bundle()

    assert remote.status == "ok", remote.error
    assert remote.action == "transcribe_segments"
    assert without_run(remote) == without_run(here)
    assert assert_engine_valid(remote) == 2


def test_a_worker_runs_a_job_at_the_whisper_batch_its_request_names(fleet_env, start_worker, tmp_path: Path) -> None:
    """The worker's own setting is the default; the dispatcher's ``speech_batch`` travels in the
    request and names the job: the fleet's bundle is the in-process one at that batch, not at 4."""
    start_worker("--concurrency=1")
    audio = (DATA / "speech.m4a").read_bytes()
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs",
                                speech_batch=1))
    remote = fleet.submit(audio).bundle(timeout=300)
    here = Dispatcher(Settings(blob_root=tmp_path / "local-blobs", speech_batch=1)).submit(audio).bundle()
    default = Dispatcher(Settings(blob_root=tmp_path / "default-blobs")).submit(audio).bundle()
    assert remote.status == "ok", remote.error
    assert without_run(remote) == without_run(here)
    assert remote.job_id != default.job_id
    derivations = [{n.properties["evidence_locus"]["derivation_ref"] for n in bundle.nodes if n.node_type == "Evidence"}
                   for bundle in (remote, default)]
    assert derivations[0] and derivations[0].isdisjoint(derivations[1])  # the producer names the batch it ran


def test_bad_audio_fails_and_the_worker_keeps_serving(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    broken = fleet.submit((DATA / "speech.flac").read_bytes()[:70000]).bundle(timeout=300)
    assert broken.status == "failed" and broken.error is not None
    assert broken.error.code == ErrorCode.CORRUPT_INPUT and "truncated" in broken.error.message
    after = fleet.submit(DATA / "speech.opus").bundle(timeout=300)
    assert after.status == "ok", after.error


def test_a_gpu_fault_is_retryable_and_the_resubmission_runs_the_job_again(fleet_env, start_worker,
                                                                          tmp_path: Path) -> None:
    # No GPU here: the faulty worker's first run raises CTranslate2's own out-of-memory error.
    start_worker("--concurrency=1", module="tests.faulty_worker",
                 env={"MF_FAULTY_AUDIO": "gpu-oom", "MF_FAULTY_ONCE": str(tmp_path / "once")})
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    first = fleet.submit(DATA / "speech.opus").bundle(timeout=300)
    assert first.status == "failed" and first.error is not None
    assert first.error.code == ErrorCode.ENGINE_UNAVAILABLE and first.error.retryable
    assert first.error.message == ("the worker ran out of GPU or host memory while running transcribe_segments; "
                                   "the job can be submitted again")

    again = fleet.submit(DATA / "speech.opus")  # the same job id, run again rather than answered from the record
    assert again.id == first.job_id
    bundle = again.bundle(timeout=300)
    assert bundle.status == "ok", bundle.error
    assert "finance team before friday" in " ".join(
        n.properties["text"] for n in bundle.nodes if n.node_type == "Evidence").lower()
    assert fleet.jobs().get(again.id).state == JobState.DONE


def test_a_worker_whose_gpu_failed_for_good_stops_and_a_fresh_one_runs_the_resubmission(
        fleet_env, start_worker, tmp_path: Path) -> None:
    # No GPU here: the faulty worker raises CTranslate2's words for a failed CUDA context in every run.
    broken = start_worker("--concurrency=1", module="tests.faulty_worker", env={"MF_FAULTY_AUDIO": "gpu-broken"})
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    job = fleet.submit(DATA / "speech.opus")
    waiting = fleet.submit(DATA / "speech.flac")  # queued behind it, or prefetched by the broken worker
    first = job.bundle(timeout=300)
    assert first.status == "failed" and first.error is not None
    assert first.error.code == ErrorCode.ENGINE_UNAVAILABLE and first.error.retryable
    assert first.error.message == "the GPU failed while running transcribe_segments; the job can be submitted again"

    assert broken.proc is not None
    # A warm shutdown, as on SIGTERM, reported as a failure: a supervisor that restarts failed
    # workers only (systemd's Restart=on-failure) starts a fresh one.
    assert broken.proc.wait(timeout=60) == 1
    log = broken.log.read_text()
    assert "stopping this worker: the GPU failed" in log
    assert "mediafleet worker: stopped: the GPU failed; start a fresh worker" in log
    wait_for(lambda: not any(fleet.status()["workers"].values()), what="the stopped worker's presence to go")

    start_worker("--concurrency=1")  # what its supervisor does: a fresh process
    again = fleet.submit(DATA / "speech.opus")
    assert again.id == first.job_id
    bundle = again.bundle(timeout=300)
    assert bundle.status == "ok", bundle.error
    later = waiting.bundle(timeout=300)  # not lost with the stopped worker, and not run by it
    assert later.status == "ok", later.error
    assert fleet.jobs().get(waiting.id).completions == 1


def _audio_worker_exit(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Start an audio-only worker (an operator manifest keeps just transcribe_segments) and wait."""
    manifest = tmp_path / "audio-only.json"
    manifest.write_text('{"capabilities": {"transcribe_segments": {}}}')
    cmd = [sys.executable, "-m", "mediafleet.cli", "worker", *args]
    return subprocess.run(cmd, env={**os.environ, **env, "MEDIAFLEET_MANIFEST_FILE": str(manifest)},
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_worker_without_its_model_refuses_to_start_naming_the_setting(fleet_env, tmp_path: Path) -> None:
    done = _audio_worker_exit({**fleet_env, "MEDIAFLEET_WHISPER_MODEL_DIR": str(tmp_path / "no-model")}, tmp_path)
    assert done.returncode == 2
    assert "MEDIAFLEET_WHISPER_MODEL_DIR" in done.stderr


@pytest.mark.skipif(visible_gpus() > 0, reason="a CUDA device is visible here")
def test_a_gpu_worker_without_a_gpu_refuses_to_start(fleet_env, tmp_path: Path) -> None:
    done = _audio_worker_exit(fleet_env, tmp_path, "--device", "gpu")
    assert done.returncode == 2
    assert "no CUDA device" in done.stderr
