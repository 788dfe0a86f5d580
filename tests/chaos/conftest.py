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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mediafleet import Dispatcher, Settings
from tests.conftest import RedisServer

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
