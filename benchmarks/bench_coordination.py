"""The coordination ceiling: what one Redis primary sustains of the fleet's job-state layer alone.

Simulated workers, no media: each job is what the fleet asks of Redis for one plain job, step for
step, through the real job store and scripts: the dispatcher's routed claim (record, presence read
and message push in one script), the worker popping the message, the consumer's take (kombu's
unacknowledged record and the delivery's count in one script), one progress point, the finish
(outcome written, waiters woken with it), kombu's acknowledgement, the waiter's subscription and
its read of the record. Presence beats (one per worker per 5 s) are priced per worker.

Measured from the server's own counters (``INFO``), so the figures are Redis's, not this client's:
commands and bytes per job, the server CPU each job costs (one primary runs commands on one core:
1 / that is the jobs/s it can sustain), the jobs/s this run reached, and the same behind Sentinel
with one replica asked to hold each claim and outcome (``WAIT``). The fleet size at which one
primary saturates follows from a worker slot's job rate (docs/scaling.md has the arithmetic).

Run: ``.venv/bin/python -m benchmarks.bench_coordination [--jobs 3000] [--procs 4]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, Outcome
from mediafleet.contract.manifest import Modality
from mediafleet.fleet.deliveries import delivery_taker
from mediafleet.fleet.presence import INDEX_KEY, worker_key
from mediafleet.fleet.store import JobStore
from tests.chaos.sentinel_cluster import MASTER_NAME, SentinelCluster
from tests.servers import RedisServer

__all__ = ["main", "measure"]

QUEUE = "mf.ocr_pdf.cpu"
UNACKED = ("unacked_index", "unacked")
# A plain job's outcome is a few KB of JSON; named checks stand in for its result here (~2 KB in all).
CHECKS = {f"check_{i:03d}_stands_for_result_bytes": True for i in range(50)}


def _request(n: int, salt: str) -> ExtractRequest:
    return ExtractRequest(job_id=f"mf-{abs(hash((salt, n))) % (1 << 128):032x}", action="ocr_pdf", options={},
                          artifact=ArtifactRef(digest="sha256:" + f"{n:064x}", media_type="application/pdf",
                                               bytes=10_000, modality=Modality.PDF))


def _outcome(request: ExtractRequest) -> Outcome:
    now = datetime.now(UTC)
    return Outcome(job_id=request.job_id, action=request.action, artifact=request.artifact, status="ok",
                   started_at=now, ended_at=now, device=request.device, checks=CHECKS)


def _announce(client: Any, hostname: str) -> None:
    """One presence beat, as a worker's heartbeat writes it."""
    client.set(worker_key(hostname), json.dumps({"hostname": hostname, "device": "cpu", "queues": [QUEUE],
                                                 "pid": os.getpid(), "at": time.time()}), ex=60)
    client.zadd(INDEX_KEY, {hostname: time.time()})


def one_job(jobs: JobStore, take: Any, n: int, salt: str, hostname: str) -> None:
    """One plain job's coordination, dispatcher, worker and waiter alike."""
    request = _request(n, salt)
    client = jobs.client
    watch = jobs.watch()
    watch.follow(request.job_id, request.job_id)
    claim = jobs.claim_routed([(QUEUE, request)], held_reason="no live worker", priority=4, keep_s=3600,
                              message=lambda req, token: (QUEUE, json.dumps({"body": req.job_id, "token": token})))
    assert claim.token is not None and claim.sent
    payload = client.rpop(QUEUE)  # kombu's BRPOP, the message taken
    tag = f"tag-{n}"
    attempt, _, _ = take(request.job_id, hostname, claim.token, UNACKED, tag, payload.decode())
    jobs.progress(request.job_id, 0, 1, "pages")
    assert jobs.finish(_outcome(request), delivery=attempt, announce=True, progress=(1, 1, "pages"))
    pipe = client.pipeline()  # kombu's acknowledgement
    pipe.zrem(UNACKED[0], tag)
    pipe.hdel(UNACKED[1], tag)
    pipe.execute()
    watch.wait(5)
    record, _ = jobs.look(request.job_id, request.job_id) if watch.woken_by is None else (None, False)
    del record
    watch.close()


def _worker(args: tuple[dict[str, Any], int, int, str]) -> float:
    settings, start, count, salt = args
    jobs = _store(settings)
    take = delivery_taker(jobs.client, settings.get("acks", 0))  # the consumer's take waits as a worker's does
    hostname = f"sim{os.getpid()}@bench"
    _announce(jobs.client, hostname)
    began = time.perf_counter()
    for n in range(start, start + count):
        one_job(jobs, take, n, salt, hostname)
    return time.perf_counter() - began


def _store(spec: dict[str, Any]) -> JobStore:
    if "sentinel" in spec:
        from mediafleet.settings import Settings

        return JobStore.from_settings(Settings(broker_url=spec["sentinel"], sentinel_master=MASTER_NAME,
                                               replica_acks=spec["acks"], blob_root=Path(spec["blobs"])))
    return JobStore(redis.Redis(port=spec["port"]), ttl_s=3600)


def _counters(client: Any) -> dict[str, float]:
    stats, cpu = client.info("stats"), client.info("cpu")
    repl = client.info("replication")
    return {"commands": stats["total_commands_processed"],
            "bytes": stats["total_net_input_bytes"] + stats["total_net_output_bytes"],
            "cpu_s": cpu["used_cpu_user"] + cpu["used_cpu_sys"],
            "repl_bytes": repl.get("master_repl_offset", 0)}


def measure(spec: dict[str, Any], admin: Any, jobs: int, procs: int, salt: str) -> dict[str, float]:
    """Runs ``jobs`` jobs across ``procs`` simulated worker processes; the server's cost per job."""
    _worker((spec, 0, 20, salt + "-warm"))
    before = _counters(admin)
    began = time.perf_counter()
    share = jobs // procs
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        pool.map(_worker, [(spec, 1000 + i * share, share, salt) for i in range(procs)])
    wall = time.perf_counter() - began
    after = _counters(admin)
    done = share * procs
    cpu = (after["cpu_s"] - before["cpu_s"]) / done
    return {"jobs": done, "commands_per_job": (after["commands"] - before["commands"]) / done,
            "bytes_per_job": (after["bytes"] - before["bytes"]) / done,
            "replication_bytes_per_job": (after["repl_bytes"] - before["repl_bytes"]) / done,
            "server_cpu_us_per_job": cpu * 1e6, "ceiling_jobs_per_s": 1 / cpu if cpu > 0 else float("inf"),
            "reached_jobs_per_s": done / wall, "server_busy": (after["cpu_s"] - before["cpu_s"]) / wall,
            "latency_ms_per_job": wall / share * 1000}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="jobs per configuration (default 3000)")
    parser.add_argument("--procs", type=int, default=4, help="simulated worker processes (default 4)")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="mf-coord-") as tmp:
        server = RedisServer(Path(tmp) / "plain", appendonly=True, args=["--appendfsync", "everysec"])
        with server:
            results["one primary"] = measure({"port": server.port}, redis.Redis(port=server.port), args.jobs,
                                             args.procs, "plain")
        with SentinelCluster(Path(tmp) / "ha") as ha:
            admin = redis.Redis(port=ha.master().port)
            for acks in (0, 1):
                spec = {"sentinel": ha.broker_url, "acks": acks, "blobs": str(Path(tmp) / "blobs")}
                results[f"sentinel, WAIT {acks}"] = measure(spec, admin, args.jobs, args.procs, f"ha{acks}")
    keys = ["commands_per_job", "bytes_per_job", "replication_bytes_per_job", "server_cpu_us_per_job",
            "ceiling_jobs_per_s", "reached_jobs_per_s", "server_busy", "latency_ms_per_job"]
    print(f"{'measure':32}" + "".join(f"{name:>22}" for name in results))
    for key in keys:
        print(f"{key:32}" + "".join(f"{r[key]:>22.2f}" for r in results.values()))
    print(json.dumps({"procs": args.procs, "cpus": os.cpu_count(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
