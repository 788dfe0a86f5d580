"""Shared benchmark plumbing: medians of repeated runs, a real redis-server and worker, results files."""

from __future__ import annotations

import gzip
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.servers import RedisServer, ServerFailed

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def median_seconds(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Median wall time of ``repeat`` calls (timings here vary by up to +-50%: compare within a run)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextmanager
def fleet(
    workers: int = 1, concurrency: int = 1, specs: list[tuple[list[str], dict[str, str]]] | None = None
) -> Iterator[dict[str, str]]:
    """A redis-server and real worker processes; yields the environment that finds them.

    ``workers`` identical workers with ``--concurrency``, or one worker per ``specs`` entry
    (extra ``mediafleet worker`` arguments, extra environment).
    """
    specs = specs or [([f"--concurrency={concurrency}"], {}) for _ in range(workers)]
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-"))
    redis = RedisServer(tmp)
    try:
        redis.start()
    except ServerFailed as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(f"{exc} (bash tests/run.sh installs it)")
    env = {"MEDIAFLEET_BROKER_URL": redis.url, "MEDIAFLEET_BLOB_ROOT": str(tmp / "blobs")}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, (args, extra) in enumerate(specs):
            log = open(tmp / f"worker{i}.log", "wb")  # noqa: SIM115
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "mediafleet.cli", "worker", *args, f"--hostname=bench{i}@%h",
                 "--loglevel=WARNING"],
                env={**os.environ, **env, **extra}, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
        if not _wait_ready(env, len(specs)):
            logs = "".join((tmp / f"worker{i}.log").read_text()[-2000:] for i in range(len(specs)))
            sys.exit(f"workers did not start:\n{logs}")
        yield env
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_ready(env: dict[str, str], workers: int, timeout: float = 120.0) -> bool:
    from celery import Celery

    app = Celery(broker=env["MEDIAFLEET_BROKER_URL"], set_as_current=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=0.5) or []) >= workers:
            return True
    return False


def peak_mb(pid: int | str = "self") -> float:
    """A process's peak resident memory (``VmHWM``) in MB, read from ``/proc``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def worker_pids() -> list[int]:
    """The processes of the workers :func:`fleet` started (their ``--hostname=bench...``)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.startswith(b"--hostname=bench") for a in cmd):
                pids.append(int(proc.name))
    return pids


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **data}, indent=2) + "\n")
    return path


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def words(text: str) -> list[str]:
    """Lower case, punctuation dropped: the normalisation word error is measured after."""
    return re.sub(r"[^a-z0-9']+", " ", text.lower()).split()


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: word-level edit distance over the reference's length.

    The edit distance's table a row at a time, each row in whole-array steps (a two-hour
    recording's ~20,000 words against as many is 400 million cells: minutes cell by cell, a few
    seconds so). A row's insertions chain along it: with ``d`` the row before them, the row is
    ``min over k <= j of d[k] + (j - k)``, a running minimum of ``d - j``, plus ``j``.
    """
    import numpy as np

    ref, hyp = words(reference), words(hypothesis)
    ids: dict[str, int] = {}
    ref_ids = np.array([ids.setdefault(w, len(ids)) for w in ref], dtype=np.int64)
    hyp_ids = np.array([ids.setdefault(w, len(ids)) for w in hyp], dtype=np.int64)
    steps = np.arange(len(hyp) + 1, dtype=np.int64)
    row = steps.copy()
    for i, word in enumerate(ref_ids, 1):
        d = np.empty_like(row)
        d[0] = i
        d[1:] = np.minimum(row[1:] + 1, row[:-1] + (hyp_ids != word))  # deletion, or match / substitution
        row = np.minimum.accumulate(d - steps) + steps  # then insertions along the row
    return int(row[-1]) / len(ref)


REAL_PDF_ROOT = Path("/usr/share/doc")


def real_pdfs(limit: int | None = None, unpack_to: Path | None = None) -> list[Path]:
    """The readable PDF files under /usr/share/doc (Debian packages' manuals), largest first.

    With ``unpack_to``, the gzipped ones too (``*.pdf.gz``: Debian compresses most long manuals),
    each decompressed at run time to ``unpack_to/<package folder>/<name>.pdf`` (so its folder
    still names its package); one that does not decompress to a PDF is skipped.
    """
    found = []
    for path in REAL_PDF_ROOT.rglob("*.pdf"):
        try:
            if path.is_file() and not path.is_symlink():
                found.append((path.stat().st_size, path))
        except OSError:
            continue
    if unpack_to is not None:
        for packed in sorted(REAL_PDF_ROOT.rglob("*.pdf.gz")):
            try:
                if not packed.is_file() or packed.is_symlink():
                    continue
                with gzip.open(packed, "rb") as src:
                    data = src.read()
            except (OSError, EOFError):
                continue
            if not data.startswith(b"%PDF"):
                continue
            target = unpack_to / packed.parent.name / packed.name.removesuffix(".gz")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            found.append((len(data), target))
    ordered = [p for _, p in sorted(found, reverse=True)]
    return ordered if limit is None else ordered[:limit]


def in_child(script: str, mode: str, path: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run ``script --child MODE FILE`` in a fresh process (so its peak memory is its own) and return
    the JSON object its last line prints; exits with the child's error when it fails."""
    done = subprocess.run([sys.executable, script, "--child", mode, str(path)], capture_output=True, text=True,
                          check=False, env=env)
    if done.returncode != 0:
        sys.exit(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def serve_child(child: Any, argv: list[str]) -> bool:
    """When this process is a benchmark's child (``--child MODE FILE``), run ``child(mode, path)``,
    print its figures as JSON and return True; otherwise return False."""
    if len(argv) != 3 or argv[0] != "--child":
        return False
    print(json.dumps(child(argv[1], Path(argv[2]))))
    return True


def need_tools(*tools: str, why: str) -> None:
    """Exit with a clear line when a command-line tool the benchmark needs is not installed."""
    for tool in tools:
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is needed {why}")

