"""The fleet itself: per-job overhead, small-job throughput with 1 and 2 worker processes, and a
10 MB artifact sent inline through the broker versus by blob reference.

* overhead: sequential 1-page PDF jobs; round trip (submit -> bundle) minus the time the worker
  spent in the job (the outcome's started/ended times);
* throughput: 40 ten-page PDF jobs submitted at once, one worker with ``--concurrency`` 1 then 2
  (this machine has 2 cores, shared with the dispatcher and Redis);
* transport: a 10 MB artifact as a base64 message argument (what today's callers send) versus a
  digest with the bytes in the blob store, through the same Redis (benchmarks/transport_app.py).

Run: ``.venv/bin/python benchmarks/bench_fleet.py``.
"""

from __future__ import annotations

import base64
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_pdf import make_pdf  # noqa: E402
from benchmarks.harness import ROOT, fleet, table, write_results  # noqa: E402
from mediafleet import Dispatcher, LocalBlobStore, Settings  # noqa: E402


def dispatcher(env: dict[str, str]) -> Dispatcher:
    return Dispatcher(Settings(broker_url=env["MEDIAFLEET_BROKER_URL"], blob_root=Path(env["MEDIAFLEET_BLOB_ROOT"])))


def overhead(env: dict[str, str], jobs: int = 30) -> dict[str, float]:
    d = dispatcher(env)
    d.submit(make_pdf(1, salt="warm")).bundle(timeout=120)
    rounds, inside = [], []
    for i in range(jobs):
        data = make_pdf(1, salt=f"o{i}-")
        start = time.perf_counter()
        job = d.submit(data)
        job.bundle(timeout=120)
        rounds.append(time.perf_counter() - start)
        outcome = d.jobs().get(job.id).outcome
        inside.append((outcome.ended_at - outcome.started_at).total_seconds())
    return {"round_trip_ms": statistics.median(rounds) * 1000, "in_worker_ms": statistics.median(inside) * 1000,
            "overhead_ms": (statistics.median(rounds) - statistics.median(inside)) * 1000}


def throughput(env: dict[str, str], jobs: int = 40, pages: int = 10, salt: str = "") -> float:
    """Jobs/s for ``jobs`` PDFs of ``pages`` pages submitted at once. The jobs are big enough that
    the workers, not this one dispatcher process (which shares the 2 cores), set the pace."""
    d = dispatcher(env)
    d.submit(make_pdf(1, salt=f"warm{salt}")).bundle(timeout=120)
    payloads = [make_pdf(pages, salt=f"t{salt}{i}-") for i in range(jobs)]
    start = time.perf_counter()
    handles = [d.submit(p) for p in payloads]
    for h in handles:
        assert h.bundle(timeout=300).status == "ok"
    return jobs / (time.perf_counter() - start)


def transport(env: dict[str, str], size: int = 10 * 1024 * 1024, repeat: int = 5) -> dict[str, float]:
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "benchmarks.transport_app", "worker",
                               "--concurrency=1", "--loglevel=WARNING", "--hostname=transport@%h"],
                              env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sys.path.insert(0, str(ROOT))
        os.environ.update(env)
        from benchmarks import transport_app

        app = transport_app.app
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=0.5) and time.monotonic() < deadline:
            pass
        data = os.urandom(size)
        store = LocalBlobStore(Path(env["MEDIAFLEET_BLOB_ROOT"]))
        inline_t, ref_t = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            app.send_task("bench.inline", args=[base64.b64encode(data).decode()]).get(timeout=120)
            inline_t.append(time.perf_counter() - start)
            start = time.perf_counter()
            digest = store.put_bytes(data)  # what the dispatcher does: store once, send the digest
            app.send_task("bench.by_reference", args=[digest]).get(timeout=120)
            ref_t.append(time.perf_counter() - start)
        return {"inline_ms": statistics.median(inline_t) * 1000, "by_reference_ms": statistics.median(ref_t) * 1000}
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def main() -> None:
    with fleet(workers=1, concurrency=1) as env:
        over = overhead(env)
        tput1 = throughput(env, salt="a")
        moved = transport(env)
    with fleet(workers=1, concurrency=2) as env:
        tput2 = throughput(env, salt="b")
    print(table([
        ("measure", "value"),
        ("round trip, 1-page PDF (median)", f"{over['round_trip_ms']:.1f} ms"),
        ("of which in the worker's job", f"{over['in_worker_ms']:.1f} ms"),
        ("fleet overhead per job", f"{over['overhead_ms']:.1f} ms"),
        ("10-page jobs/s, 1 worker process", f"{tput1:.1f}"),
        ("10-page jobs/s, 2 worker processes", f"{tput2:.1f} ({tput2 / tput1:.2f}x)"),
        ("10 MB inline (base64 in the message)", f"{moved['inline_ms']:.0f} ms"),
        ("10 MB by blob reference", f"{moved['by_reference_ms']:.0f} ms "
                                    f"({moved['inline_ms'] / moved['by_reference_ms']:.1f}x faster)"),
    ]))
    out = write_results("fleet", {"overhead": over, "jobs_per_s": {"1_process": tput1, "2_processes": tput2},
                                  "transport_10mb": moved})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
