"""Transient faults are not answers: a full blob disk, a frozen worker, a refused message.

Only a definite answer about the input is sticky. A job that failed because the machine, not the
input, was at fault is recorded as retryable and runs again when it is resubmitted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediafleet.contract import ErrorCode
from tests.chaos.conftest import dispatcher, freeze, record_time, thaw
from tests.conftest import ROOT
from tests.helpers import wait_for
from tests.media import text_pdf

pytestmark = pytest.mark.integration


def _cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    return subprocess.run([sys.executable, "-m", "mediafleet.cli", *args], capture_output=True, text=True,
                          env={**full, **env}, timeout=timeout, cwd=ROOT, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs for the blob store (root only; skipped with the reason elsewhere)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True,
                          check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip() or 'mount failed'}): needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_blob_disk_at_dispatch_is_a_public_retryable_error(fleet_env, start_worker, small_disk: Path,
                                                                   tmp_path: Path) -> None:
    """Failure 4: ENOSPC escaped ``Dispatcher.submit`` as a bare OSError; the CLI printed a traceback
    with install paths and skipped its other files. Once the disk is freed, the same files run."""
    blobs = small_disk / "blobs"
    env = {**fleet_env, "MEDIAFLEET_BLOB_ROOT": str(blobs)}
    start_worker("--concurrency=1", env=env)
    files = []
    for i in range(2):
        path = tmp_path / f"doc{i}.pdf"
        path.write_bytes(text_pdf(3 + i))
        files.append(path)
    filler = _fill(small_disk)
    full = _cli(["extract", *map(str, files), "--json", "--timeout", "30"], env)
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr and str(ROOT) not in full.stderr and ".venv" not in full.stderr
    lines = [line for line in full.stderr.splitlines() if line.startswith("mediafleet extract: doc")]
    assert [line.split(":")[1].strip() for line in lines] == ["doc0.pdf", "doc1.pdf"], full.stderr  # went on
    assert all("no space" in line.lower() for line in lines), full.stderr
    filler.unlink()
    freed = _cli(["extract", *map(str, files), "--json", "--timeout", "60"], env)
    assert freed.returncode == 0, freed.stderr
    assert [json.loads(line)["status"] for line in freed.stdout.splitlines()] == ["ok", "ok"]


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_on_a_worker_fails_its_job_retryably(small_disk: Path, tmp_path: Path) -> None:
    """Failure 4, on the worker: the keyframes a video job derives cannot be stored. That was
    ``internal_error``, not retryable; the disk freed, resubmitting returned it for good."""
    from mediafleet.contract.jobs import ArtifactRef, ExtractRequest
    from mediafleet.contract.manifest import default_manifest
    from mediafleet.blobs.local import LocalBlobStore
    from tests.clips import write_clip
    from mediafleet.workers.runner import run_request

    clip = tmp_path / "clip.mp4"
    write_clip(clip, [(0, 25), (1, 25)])
    store = LocalBlobStore(small_disk / "blobs")
    digest = store.put_bytes(clip.read_bytes())
    request = ExtractRequest(job_id="mf-" + "d" * 32, action="extract_keyframes", options={"speech": False},
                             artifact=ArtifactRef(digest=digest, media_type="video/mp4", bytes=clip.stat().st_size,
                                                  modality="video"))
    filler = _fill(small_disk)
    full = run_request(request, manifest=default_manifest(), store=store)
    assert full.status == "failed" and full.error.retryable, full.error
    assert full.error.code == ErrorCode.ENGINE_UNAVAILABLE and "full" in full.error.message
    filler.unlink()
    assert run_request(request, manifest=default_manifest(), store=store).status == "ok"


def test_a_worker_frozen_past_its_hard_limit_is_not_a_sticky_timeout(slow_fleet) -> None:  # type: ignore[no-untyped-def]
    """Failure 4: a worker frozen (SIGSTOP) past the job's limits, then thawed: the job fails with
    ``timeout``, but that says nothing about the input: a resubmission runs it again."""
    setup = slow_fleet(soft_s=6, hard_s=8)
    fleet, (worker,) = setup.dispatcher, setup.workers
    pdf, job = setup.submit_slow("frozen")
    freeze(worker.proc.pid)
    try:
        time.sleep(9)
    finally:
        thaw(worker.proc.pid)
    thawed = time.monotonic()
    bundle = job.bundle(timeout=30)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.TIMEOUT
    assert bundle.error.retryable
    again = fleet.submit(pdf).bundle(timeout=30)
    record_time("a worker frozen past its hard limit: the resubmitted job done", time.monotonic() - thawed)
    assert again.status == "ok", again.error
    assert fleet.jobs().get(job.id).completions == 1


def test_a_refused_message_does_not_wedge_its_job(redis_server, start_worker, tmp_path: Path) -> None:
    """Failure 3: a worker with signing on refuses an unsigned message, or one signed with a key it
    does not trust; the job's record stayed ``queued, sent=1`` for the record's TTL and a correct
    (signed) resubmission waited on it in vain."""
    from tests.certs import signing_env

    signing = signing_env(tmp_path)
    import redis

    url = f"redis://127.0.0.1:{redis_server.port}/14"
    redis.Redis.from_url(url).flushdb()
    base = {"MEDIAFLEET_BROKER_URL": url, "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}
    worker = start_worker("--concurrency=1", env={**base, **signing})
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(text_pdf(2))
    unsigned = _cli(["extract", str(pdf), "--json", "--timeout", "5"], base)
    assert unsigned.returncode != 0
    wait_for(lambda: b"refus" in worker.log.read_bytes().lower() or b"untrusted" in worker.log.read_bytes().lower(),
             timeout=20, what="the worker to refuse the unsigned message")
    started = time.monotonic()
    signed = _cli(["extract", str(pdf), "--json", "--timeout", "30"], {**base, **signing})
    record_time("a job whose unsigned message was refused: resubmitted signed, done", time.monotonic() - started)
    assert signed.returncode == 0, signed.stderr

    # Signed, but with a key whose certificate the workers do not trust.
    rogue = signing_env(tmp_path, name="rogue", store="rogue", subject="not the fleet")
    other = tmp_path / "other.pdf"
    other.write_bytes(text_pdf(3))

    def refusals() -> int:  # Celery's two ways of refusing: bad content type, failed signature
        log = worker.log.read_bytes().lower()
        return log.count(b"received invalid task message") + log.count(b"can't decode message body")

    before = refusals()
    wrongly = _cli(["extract", str(other), "--json", "--timeout", "5"], {**base, **rogue})
    assert wrongly.returncode != 0
    assert "Traceback" not in wrongly.stderr, wrongly.stderr
    wait_for(lambda: refusals() > before, timeout=20, what="the worker to refuse the wrongly signed message")
    signed = _cli(["extract", str(other), "--json", "--timeout", "30"], {**base, **signing})
    assert signed.returncode == 0, signed.stderr


def test_a_job_named_by_another_release_is_not_run_by_this_worker(fleet_env, start_worker,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A dispatcher whose extractor is at another version (a rolling upgrade) names a job this
    worker can read: the worker does not run its own extractors under that id (whose cached answer
    every resubmission would then get), it fails the job retryably; named by this release, the same
    file runs."""
    from mediafleet import admission

    start_worker("--concurrency=1")
    fleet = dispatcher(fleet_env["MEDIAFLEET_BROKER_URL"], Path(fleet_env["MEDIAFLEET_BLOB_ROOT"]))
    named = admission.make_job_id

    def other_release(digest: str, action: str, version: str, *rest: object) -> str:
        return named(digest, action, version + "-next", *rest)

    pdf = text_pdf(2)
    with monkeypatch.context() as patched:
        patched.setattr(admission, "make_job_id", other_release)
        started = time.monotonic()
        job = fleet.submit(pdf)
        bundle = job.bundle(timeout=60)
    record_time("a job named by another release: failed retryably", time.monotonic() - started)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.ENGINE_UNAVAILABLE and bundle.error.retryable
    assert "another mediafleet release" in bundle.error.message and "Traceback" not in bundle.error.message
    assert fleet.jobs().get(job.id).attempts == 1  # one delivery, which ran nothing
    again = fleet.submit(pdf)
    assert again.id != job.id and again.bundle(timeout=60).status == "ok"


def test_a_request_its_worker_cannot_read_does_not_wedge_its_job(fleet_env, start_worker,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A dispatcher of a later release sends a request field this worker does not know (as in a
    rolling upgrade): the worker's task fails before it starts the job, so no delivery owns the
    record and it used to stay ``queued`` for its lifetime, its waiter polling in vain. Now the
    waiter sees the task end with no delivery started and fails the job retryably at once; a
    request the worker can read then runs."""
    from mediafleet.contract.jobs import ExtractRequest

    start_worker("--concurrency=1")
    fleet = dispatcher(fleet_env["MEDIAFLEET_BROKER_URL"], Path(fleet_env["MEDIAFLEET_BLOB_ROOT"]))
    dump = ExtractRequest.model_dump

    def later_release(self: ExtractRequest, *args: object, **kwargs: object) -> dict:
        data = dump(self, *args, **kwargs)
        return {**data, "a_field_of_a_later_release": 1} if kwargs.get("mode") == "json" else data

    pdf = text_pdf(2)
    with monkeypatch.context() as patched:
        patched.setattr(ExtractRequest, "model_dump", later_release)
        started = time.monotonic()
        bundle = fleet.submit(pdf).bundle(timeout=60)
    record_time("a request its worker could not read: failed retryably", time.monotonic() - started)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.WORKER_LOST and bundle.error.retryable
    assert "another release" in bundle.error.message and "Traceback" not in bundle.error.message
    again = fleet.submit(pdf).bundle(timeout=60)
    assert again.status == "ok", again.error
