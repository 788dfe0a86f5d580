"""One long PDF on the fleet: as one task, and split into page ranges on 1 and on 2 workers.

Used by ``bench_pdf`` (its ``split`` figures), for two kinds of PDF: a born-digital one
``bench_pdf`` generates (the text layer: milliseconds a page, so a range's fixed costs show), cut
in the shipped ranges of 32 pages; and a scanned one (OCR: seconds a page, where the ranges pay
off), cut in ranges of ``size`` pages by an operator's manifest. Each run submits fresh bytes (a
new job id) and waits for the joined bundle. "one task" is the same fleet with the operator's
manifest dropping the ``pages`` part (``"parts": {}``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness import fleet
from mediafleet import Dispatcher, Settings

__all__ = ["split_speedup"]


def _timed(remote: Dispatcher, make: Callable[[str], bytes], salt: str) -> float:
    data = make(salt)
    start = time.perf_counter()
    bundle = remote.submit(data).bundle(timeout=900)
    seconds = time.perf_counter() - start
    if bundle.status != "ok":
        raise SystemExit(f"the split benchmark's job failed: {bundle.error}")
    return seconds


def _median(env: dict[str, str], manifest: Path | None, make: Callable[[str], bytes], tag: str, repeat: int) -> float:
    remote = Dispatcher(Settings(broker_url=env["MEDIAFLEET_BROKER_URL"], blob_root=Path(env["MEDIAFLEET_BLOB_ROOT"]),
                                 manifest_file=manifest))
    _timed(remote, make, f"{tag}-warm-")  # each worker process loads PyMuPDF once
    return statistics.median(_timed(remote, make, f"{tag}-{i}-") for i in range(repeat))


def _manifest(tmp: Path, name: str, parts: dict[str, Any]) -> Path:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"capabilities": {"ocr_pdf": {"parts": parts}}}))
    return path


def split_speedup(make: Callable[[str], bytes], pages: int, repeat: int = 3, size: int | None = None) -> dict[str, Any]:
    """Seconds for one ``pages``-page PDF (``make(salt)`` builds it): one task on one worker, and
    split (ranges of ``size`` pages; None: the shipped manifest's 32) on one and on two
    single-process workers."""
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-split-"))
    whole = _manifest(tmp, "one-task", {})
    split = None if size is None else _manifest(tmp, "split", {"pages": {"split": "pages", "size": size}})
    runs = {}
    for name, manifest, workers in (("one_task_1_worker", whole, 1), ("split_1_worker", split, 1),
                                    ("split_2_workers", split, 2)):
        extra = {"MEDIAFLEET_MANIFEST_FILE": str(manifest)} if manifest is not None else {}
        with fleet(specs=[(["--concurrency=1"], extra)] * workers) as env:
            runs[name] = _median(env, manifest, make, name, repeat)
    t_whole, t_one, t_two = runs["one_task_1_worker"], runs["split_1_worker"], runs["split_2_workers"]
    return {
        "pages": pages,
        "range_pages": size or 32,
        "ranges": -(-pages // (size or 32)),
        "seconds": {"one_task_1_worker": round(t_whole, 3), "split_1_worker": round(t_one, 3),
                    "split_2_workers": round(t_two, 3)},
        "speedup_2_vs_1_workers": round(t_one / t_two, 2),
        "split_1_worker_vs_one_task": round(t_whole / t_one, 2),
    }
