"""The fleet end to end: a real redis-server, real worker processes, the real dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediafleet import Dispatcher, Settings
from tests.helpers import assert_engine_valid, without_run
from tests.media import text_pdf

pytestmark = pytest.mark.integration


def test_pdf_through_the_fleet_equals_the_in_process_bundle(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    pdf = text_pdf(3)
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    local = Dispatcher(Settings(blob_root=tmp_path / "local-blobs"))

    remote_bundle = fleet.submit(pdf).bundle(timeout=120)
    local_bundle = local.submit(pdf).bundle()

    assert remote_bundle.status == "ok", remote_bundle.error
    assert without_run(remote_bundle) == without_run(local_bundle)
    assert assert_engine_valid(remote_bundle) == 3 * (1 + 1 + 6)


def test_resubmitting_returns_the_same_job_without_rework(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    pdf = text_pdf(2)
    first = fleet.submit(pdf)
    first_bundle = first.bundle(timeout=120)
    second = fleet.submit(pdf)
    assert second.id == first.id
    # Same outcome object from the backend: same activity (same start time), not a second run.
    assert second.bundle(timeout=30).model_dump() == first_bundle.model_dump()


def test_bad_input_fails_cleanly_and_the_worker_keeps_serving(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    broken = fleet.submit(text_pdf(2)[:400]).bundle(timeout=120)
    assert broken.status == "failed" and broken.error.code == "corrupt_input"
    assert str(tmp_path) not in broken.model_dump_json()
    after = fleet.submit(text_pdf(1)).bundle(timeout=120)
    assert after.status == "ok"


def test_cli_submits_to_the_fleet_with_broker(fleet_env, start_worker, tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    start_worker("--concurrency=1")
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(text_pdf(2))
    env = {**os.environ, "MEDIAFLEET_BLOB_ROOT": fleet_env["MEDIAFLEET_BLOB_ROOT"]}
    env.pop("MEDIAFLEET_BROKER_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "mediafleet.cli", "extract", str(pdf), "--json", "--timeout", "120",
         "--broker", fleet_env["MEDIAFLEET_BROKER_URL"]],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert json.loads(line)["status"] == "ok"


def test_cli_says_when_a_job_is_held_for_want_of_a_worker(fleet_env, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(text_pdf(1))
    env = {**os.environ, **fleet_env}
    proc = subprocess.run([sys.executable, "-m", "mediafleet.cli", "extract", str(pdf), "--timeout", "2"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    job_id = proc.stderr.split("job ", 1)[1].split()[0]
    assert proc.stderr.splitlines()[0] == f"doc.pdf: job {job_id} held; follow it with: mediafleet status {job_id}"
    assert "held: no live worker for ocr_pdf on cpu;" in proc.stderr
    assert f"stopped waiting after 2 s; job {job_id} goes on" in proc.stderr and "Traceback" not in proc.stderr
