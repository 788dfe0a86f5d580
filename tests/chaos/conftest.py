"""The chaos suite's scaffolding: short test-only time limits, a Redis of its own, recovery times.

Every scenario runs real redis-server and real worker processes on loopback and is bounded in wall
time (pytest's timeout is the backstop; each scenario's own waits are tens of seconds at most).
Recovery times measured by a scenario are printed at the end of the run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mediafleet import Dispatcher, Settings
from tests.conftest import WorkerProcess
from tests.media import marked_pdf
from tests.servers import RedisServer

FAULTY = "tests.faulty_worker"
_TIMES: list[tuple[str, float]] = []


def write_manifest(tmp_path: Path, soft_s: float, hard_s: float) -> Path:
    """A manifest whose ``ocr_pdf`` has these time limits (the broker's visibility timeout follows)."""
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"capabilities": {"ocr_pdf": {"time_limits": {"soft_s": soft_s, "hard_s": hard_s}}}}))
    return path


def dispatcher(url: str, blobs: Path, manifest: Path | None = None, **over: Any) -> Dispatcher:
    return Dispatcher(Settings(broker_url=url, blob_root=blobs, manifest_file=manifest, **over))


def record_time(what: str, seconds: float) -> None:
    """Keep a measured recovery time for the run's summary."""
    _TIMES.append((what, seconds))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _TIMES:
        terminalreporter.section("chaos: measured recovery times")
        for what, seconds in _TIMES:
            terminalreporter.write_line(f"{seconds:7.1f} s  {what}")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server with append-only persistence, for this scenario alone (it may be restarted)."""
    server = RedisServer(tmp_path / "redis", appendonly=True)
    server.start()
    yield server
    server.stop()


@dataclass
class SlowFleet:
    """A dispatcher and ``tests.faulty_worker`` workers under one manifest with short ``ocr_pdf`` limits."""

    dispatcher: Dispatcher
    workers: list[WorkerProcess]
    add_worker: Callable[[], WorkerProcess]
    """Start one more faulty worker on the same broker, blobs and manifest."""

    def submit_slow(self, salt: str) -> tuple[bytes, Any]:
        """Submit an ``MF-SLOW`` PDF (~4 s on a faulty worker, with progress); return it and its job
        once the job has started."""
        pdf = marked_pdf("MF-SLOW", salt=salt)
        job = self.dispatcher.submit(pdf)
        wait_started(job)
        return pdf, job


@pytest.fixture
def slow_fleet(fleet_env: dict[str, str], start_worker: Any, tmp_path: Path) -> Callable[..., SlowFleet]:
    """``slow_fleet(soft_s, hard_s, workers=1, concurrency=1, broker_url=None, **env)``: a
    :class:`SlowFleet` on this test's broker (or ``broker_url``) and blob store."""

    def make(soft_s: float, hard_s: float, *, workers: int = 1, concurrency: int = 1,
             broker_url: str | None = None, **env: str) -> SlowFleet:
        manifest = write_manifest(tmp_path, soft_s=soft_s, hard_s=hard_s)
        url = broker_url or fleet_env["MEDIAFLEET_BROKER_URL"]
        worker_env = {"MEDIAFLEET_BROKER_URL": url, "MEDIAFLEET_MANIFEST_FILE": str(manifest), **env}

        def add_worker() -> WorkerProcess:
            return start_worker(f"--concurrency={concurrency}", module=FAULTY, env=worker_env)

        started = [add_worker() for _ in range(workers)]
        return SlowFleet(dispatcher(url, Path(fleet_env["MEDIAFLEET_BLOB_ROOT"]), manifest), started, add_worker)

    return make


def freeze(pid: int) -> None:
    os.killpg(pid, signal.SIGSTOP)


def thaw(pid: int) -> None:
    os.killpg(pid, signal.SIGCONT)


def wait_started(job: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (p := job.progress()) is not None and p.done > 0:
            return
        time.sleep(0.05)
    pytest.fail("the job did not start")
