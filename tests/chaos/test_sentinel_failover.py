"""The fleet behind Redis Sentinel through a lost master and a cut-off worker, real processes on loopback.

A master, two replicas and three sentinels (:class:`tests.chaos.sentinel_cluster.SentinelCluster`,
down-after 1 s so a failover takes seconds), two ``tests.faulty_worker`` workers and a dispatcher,
all given ``MEDIAFLEET_BROKER_URL=sentinel://...;sentinel://...;sentinel://...`` and
``MEDIAFLEET_SENTINEL_MASTER``. 200 mixed jobs (one- to three-page text PDFs and ~4 s ``MF-SLOW``
ones) run while the master is killed with ``kill -9`` (a ``mediafleet extract`` pointed at the
three sentinels waiting on one of them meanwhile), or frozen (SIGSTOP) past down-after and then
thawed. Each job must finish exactly once
(one completion in its record, ok), none stays started, and the thawed master must step down.

A worker cut off from Redis while it runs a job (a TCP proxy the test controls, on a plain Redis:
the sentinels hand out the master's own address, so a proxy in front of them would cut nothing)
is replaced by lost-node recovery, and its late outcome, once let back, is refused.

Failover times, dispatch stalls and the cut-off takeover time are printed in the run's summary.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mediafleet import Dispatcher, Settings
from mediafleet.contract.jobs import JobState
from tests.chaos.conftest import FAULTY, record_time, wait_started, write_manifest
from tests.chaos.sentinel_cluster import MASTER_NAME, SentinelCluster
from tests.media import marked_pdf
from tests.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOBS = 200


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[SentinelCluster]:
    with SentinelCluster(tmp_path / "ha", down_after_ms=1000, failover_ms=3000) as deployment:
        yield deployment


def _ha_env(ha: SentinelCluster, tmp_path: Path) -> dict[str, str]:
    manifest = tmp_path / "manifest.json"
    if not manifest.exists():
        manifest = write_manifest(tmp_path, soft_s=60, hard_s=90)
    return {"MEDIAFLEET_BROKER_URL": ha.broker_url, "MEDIAFLEET_SENTINEL_MASTER": MASTER_NAME,
            "MEDIAFLEET_MANIFEST_FILE": str(manifest)}


def _ha_fleet(ha: SentinelCluster, fleet_env: dict[str, str], start_worker: Any, tmp_path: Path) -> Dispatcher:
    env = _ha_env(ha, tmp_path)
    manifest = Path(env["MEDIAFLEET_MANIFEST_FILE"])
    for _ in range(2):
        start_worker("--concurrency=2", module="tests.faulty_worker", env=env)
    return Dispatcher(Settings(broker_url=ha.broker_url, sentinel_master=MASTER_NAME, manifest_file=manifest,
                               blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"])))


def _mixed(salt: str) -> list[bytes]:
    """Mixed work: every fifth a ~4 s MF-SLOW PDF, the rest one- to three-page text PDFs."""
    return [marked_pdf("MF-SLOW" if i % 5 == 0 else "MF-QUICK", pages=1 if i % 5 == 0 else 1 + i % 3,
                       salt=f"{salt}-{i}") for i in range(JOBS)]


def _failover_clock(ha: SentinelCluster, old_port: int) -> Callable[[], float]:
    """Starts timing now; the returned call gives the seconds until the sentinels named another master."""
    began = time.monotonic()
    seen: list[float] = []

    def watch() -> None:
        while time.monotonic() - began < 60:
            port = ha.master_port()
            if port is not None and port != old_port:
                seen.append(time.monotonic() - began)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()

    def result() -> float:
        thread.join(timeout=60)
        assert seen, "the sentinels never named another master"
        return seen[0]

    return result


def _every_job_done_once(dispatcher: Dispatcher, jobs: list[Any], fault_at: float,
                         also: Callable[[], list[str]] = list) -> float:
    """Waits for every job (and for ``also``, which gives the ids of jobs waited on elsewhere);
    asserts each finished ok exactly once; returns the dispatch stall (the longest wait after the
    fault for the next job to finish)."""
    finished_at: list[float] = []
    for job in jobs:
        bundle = job.bundle(timeout=180)
        assert bundle.status == "ok", job.id
        finished_at.append(time.monotonic())
    ids = [job.id for job in jobs] + also()
    store = dispatcher.jobs()
    for job_id in ids:
        record = store.get(job_id)
        assert record is not None and record.state == JobState.DONE, job_id
        assert record.completions == 1, f"{job_id} finished {record.completions} times"
    assert not store.started(), "a job was left started"
    after = sorted(t for t in finished_at if t > fault_at)
    marks = [fault_at, *after]
    return max((b - a for a, b in zip(marks, marks[1:], strict=False)), default=0.0)


def test_a_master_killed_mid_run_loses_no_job_and_runs_none_twice(  # type: ignore[no-untyped-def]
        ha, fleet_env, start_worker, tmp_path) -> None:
    dispatcher = _ha_fleet(ha, fleet_env, start_worker, tmp_path)
    jobs = [dispatcher.submit(pdf) for pdf in _mixed("kill")]
    wait_started(jobs[0])
    # The command line too, given only the sentinels: it submits and waits through the failover.
    own = tmp_path / "by-cli.pdf"
    own.write_bytes(marked_pdf("MF-SLOW", pages=1, salt="cli"))
    cli_env = {**os.environ, **fleet_env, **_ha_env(ha, tmp_path)}
    cli = subprocess.Popen([sys.executable, "-m", "mediafleet.cli", "extract", str(own), "--json", "--timeout", "180"],
                           env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    old = ha.master()
    fault_at = time.monotonic()
    failover = _failover_clock(ha, old.port)
    ha.kill(old)

    def by_cli() -> list[str]:
        out, err = cli.communicate(timeout=200)
        assert cli.returncode == 0, err
        bundle = json.loads(out.splitlines()[0])
        assert bundle["status"] == "ok", err
        return [bundle["job_id"]]

    stall = _every_job_done_once(dispatcher, jobs, fault_at, also=by_cli)
    record_time("sentinel: master kill -9, until the sentinels named a new master", failover())
    record_time("sentinel: master kill -9, longest dispatch stall after it", stall)


def test_a_master_frozen_past_down_after_steps_down_when_thawed(  # type: ignore[no-untyped-def]
        ha, fleet_env, start_worker, tmp_path) -> None:
    dispatcher = _ha_fleet(ha, fleet_env, start_worker, tmp_path)
    jobs = [dispatcher.submit(pdf) for pdf in _mixed("freeze")]
    wait_started(jobs[0])
    old = ha.master()
    fault_at = time.monotonic()
    failover = _failover_clock(ha, old.port)
    ha.freeze(old)
    took = failover()
    ha.thaw(old)
    stall = _every_job_done_once(dispatcher, jobs, fault_at)
    deadline = time.monotonic() + 20
    while ha.role(old) != "slave" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ha.role(old) == "slave"
    with pytest.raises(redis.exceptions.ReadOnlyError):
        redis.Redis(port=old.port).set("mediafleet:probe", "1")
    record_time("sentinel: master SIGSTOP, until the sentinels named a new master", took)
    record_time("sentinel: master SIGSTOP, longest dispatch stall after it", stall)


class CutProxy:
    """A TCP proxy on loopback the test can cut (every connection dropped, new ones refused) and
    let back."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self._target = target_port
        self._open = threading.Event()
        self._open.set()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self._open.clear()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def let_back(self) -> None:
        self._open.set()

    def close(self) -> None:
        self.cut()
        self._server.close()


def test_a_cut_off_workers_job_is_taken_over_and_its_late_outcome_refused(  # type: ignore[no-untyped-def]
        fleet_env, start_worker, tmp_path) -> None:
    """Worker A reaches Redis through a proxy; B directly. A takes a slow job and is cut off; lost-node
    recovery (on by default) gives the job to B, which finishes it; A is let back and finishes its
    run late: the job is done once, with B's outcome."""
    manifest = write_manifest(tmp_path, soft_s=60, hard_s=90)
    url = fleet_env["MEDIAFLEET_BROKER_URL"]
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    db = url.rsplit("/", 1)[1]
    proxy = CutProxy(port)
    try:
        # A slow run: A must still be running when it is let back (MF_FAULTY_SLOW_S if the faulty
        # worker reads it; else its ~4 s, and A is cut off before it finishes).
        env_a = {"MEDIAFLEET_BROKER_URL": f"redis://127.0.0.1:{proxy.port}/{db}",
                 "MEDIAFLEET_MANIFEST_FILE": str(manifest)}
        a = start_worker("--concurrency=1", module=FAULTY, env=env_a)
        dispatcher = Dispatcher(Settings(broker_url=url, manifest_file=manifest,
                                         blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"])))
        job = dispatcher.submit(marked_pdf("MF-SLOW", salt="cut-off"))
        wait_started(job)
        store = dispatcher.jobs()
        record = store.get(job.id)
        assert record is not None and record.hostname == a.hostname
        proxy.cut()
        cut_at = time.monotonic()
        b = start_worker("--concurrency=1", module=FAULTY, env={"MEDIAFLEET_MANIFEST_FILE": str(manifest)})
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            record = store.get(job.id)
            if record is not None and record.hostname == b.hostname:
                break
            time.sleep(0.2)
        assert record is not None and record.hostname == b.hostname, "the job was not taken over"
        took = time.monotonic() - cut_at
        proxy.let_back()
        bundle = job.bundle(timeout=120)
        assert bundle.status == "ok"
        time.sleep(8)  # A's late outcome, if it had one to write, is written by now
        final = store.get(job.id)
        assert final is not None and final.state == JobState.DONE and final.completions == 1
        assert final.attempts == 2 and final.hostname == b.hostname
        record_time("cut-off worker: until lost-node recovery gave its job to another worker", took)
    finally:
        proxy.close()
