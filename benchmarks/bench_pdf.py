"""PDF text layer: pages/s three ways in one run, and the fleet's per-job overhead.

1. bare PyMuPDF: open, ``get_text("dict")`` per page (the floor: the same extraction work);
2. mediafleet in-process: ``Dispatcher.submit`` (sniff, hash, store, extract, reading order,
   loci, PROV-O, claim) with no broker;
3. mediafleet through Redis with one worker process (the same, plus the broker round trip).

Per-job overhead: many small (1-page) jobs through the fleet versus the same jobs in-process.
The same bare-vs-in-process ratio on every real PDF found at run time under ``/usr/share/doc``
(Debian packages' documentation, the gzipped manuals decompressed into the run's temporary folder;
each reported with its own ratio, largest first; none found is said, not faked), and the
peak memory of one in-process run on a generated 900-page document (a child process each, so
nothing else is counted), beside bare PyMuPDF's on the same file; and each output path of
``extract`` (the bundle held whole, streamed as indented JSON, streamed as JSON Lines) at 900 and
1,800 pages, with the worker that joins a 900-page split job (``benchmarks/pdf_memory.py``).
Bare and in-process are timed in interleaved rounds (bare, in-process, in-process, bare, ...),
so a busy machine slows both alike, and each is reported as the median of its rounds.
Split across workers (``benchmarks/pdf_split.py``): one long PDF as one task on one worker, and
split into page ranges on one and on two single-thread workers; the generated PDF in the shipped
ranges of 32 pages, and a scanned 8-page PDF (OCR) in ranges of 2.
Run: ``.venv/bin/python -m benchmarks.bench_pdf [pages] [--rounds N] [--no-fleet] [--speed-only]``
(``--help``; ``--speed-only``: the in-process vs bare ratios alone, printed with the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.modules.setdefault("pymupdf.layout", None)  # type: ignore[arg-type]

import pymupdf  # noqa: E402

from benchmarks.documents import make_pdf  # noqa: E402
from benchmarks.harness import REAL_PDF_ROOT, fleet, median_seconds, real_pdfs, table, write_results  # noqa: E402
from benchmarks.pdf_memory import memory_peaks  # noqa: E402
from benchmarks.pdf_split import split_speedup  # noqa: E402
from mediafleet import Dispatcher, Settings  # noqa: E402
from tests.media import scanned  # noqa: E402

def bare(path: Path) -> None:
    doc = pymupdf.open(path, filetype="pdf")
    for page in doc:
        page.get_text("dict")
    doc.close()


LONG_PAGES = 900
SCANNED_PAGES = 8


def interleaved(paths: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median seconds of each path over ``rounds`` rounds, the paths taking turns within a round
    (their order reversed every other round)."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            start = time.perf_counter()
            paths[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def page_count(path: Path) -> int:
    with pymupdf.open(path, filetype="pdf") as doc:
        return doc.page_count


def peak_child(mode: str, path: Path, blobs: Path) -> None:
    """In a child process: run once (``bare`` or ``mediafleet``) and print the peak RSS in MB."""
    if mode == "bare":
        bare(path)
    else:
        Dispatcher(Settings(blob_root=blobs, broker_url=None)).submit(path).bundle()
    print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def peak_mb(mode: str, path: Path, blobs: Path) -> float:
    out = subprocess.run([sys.executable, __file__, "--peak", mode, str(path), str(blobs)], check=True,
                         capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["peak_mb"])


def _through_redis(pages: int, small_jobs: int, smalls: list[bytes], tmp: Path) -> tuple[float, float]:
    """(seconds for the big PDF, seconds per small job) through Redis with one worker process."""
    with fleet(workers=1) as env:
        remote = Dispatcher(Settings(broker_url=env["MEDIAFLEET_BROKER_URL"], blob_root=Path(env["MEDIAFLEET_BLOB_ROOT"])))
        remote.submit(make_pdf(1, salt="warm")).bundle(timeout=120)
        # Each fleet run uses fresh bytes so idempotency cannot return an earlier result.
        paths = []
        for i in range(3):
            p = tmp / f"v{i}.pdf"
            p.write_bytes(make_pdf(pages, salt=f"v{i}-"))
            paths.append(p)
        it = iter(paths)
        t_fleet = median_seconds(lambda: remote.submit(next(it)).bundle(timeout=600))
        batches = iter([smalls[small_jobs * (k + 1): small_jobs * (k + 2)] for k in range(3)])
        t_small_fleet = median_seconds(lambda: [remote.submit(s).bundle(timeout=120) for s in next(batches)]) / small_jobs
    return t_fleet, t_small_fleet


def interleaved_cpu(paths: dict[str, Callable[[], Any]], rounds: int) -> dict[str, tuple[float, float]]:
    """:func:`interleaved`, with each path's median process CPU seconds beside its median wall
    seconds: on a shared machine the CPU time is what other work disturbs least."""
    wall: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            start, start_cpu = time.perf_counter(), time.process_time()
            paths[name]()
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in paths}


def speed(pages: int = 500, rounds: int = 5) -> None:
    """Only the in-process speed against bare PyMuPDF: the generated PDF and the real ones, in
    interleaved rounds, printed (nothing written: the results file holds the whole run's figures)."""
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-pdf-"))
    path = tmp / "big.pdf"
    path.write_bytes(make_pdf(pages))
    local = Dispatcher(Settings(blob_root=tmp / "blobs", broker_url=None))
    rows = [("PDF", "pages", "bare pages/s", "mediafleet pages/s", "vs bare", "vs bare, CPU time")]
    for doc_path, rounds_here in [(path, rounds), *[(p, max(rounds, 7)) for p in real_pdfs(unpack_to=tmp / "real")]]:
        local.submit(doc_path).bundle()  # warm: the first run of a file pays for its blob copy and imports
        both = interleaved_cpu({"bare": lambda p=doc_path: bare(p),
                                 "local": lambda p=doc_path: local.submit(p).bundle()}, rounds_here)
        (t_bare, c_bare), (t_local, c_local) = both["bare"], both["local"]
        n = page_count(doc_path)
        rows.append((f"{doc_path.parent.name}/{doc_path.name}" if doc_path != path
                     else f"generated ({pages} pages, 40 lines each)", str(n),
                     f"{n / t_bare:,.0f}", f"{n / t_local:,.0f}", f"{t_bare / t_local:.2f}x", f"{c_bare / c_local:.2f}x"))
    print(table(rows))
    print(f"medians of interleaved rounds ({rounds} generated, {max(rounds, 7)} real); load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))


def main(pages: int = 500, small_jobs: int = 20, rounds: int = 5, with_fleet: bool = True) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-pdf-"))
    path = tmp / "big.pdf"
    path.write_bytes(make_pdf(pages))
    local = Dispatcher(Settings(blob_root=tmp / "blobs", broker_url=None))

    local.submit(path).bundle()  # warm: the first run of a file pays for its blob copy and imports
    gen = interleaved({"bare": lambda: bare(path), "local": lambda: local.submit(path).bundle()}, rounds)
    t_bare, t_local = gen["bare"], gen["local"]
    smalls = [make_pdf(1, salt=f"s{i}-") for i in range(small_jobs * 4)]
    t_small_local = median_seconds(lambda: [local.submit(s).bundle() for s in smalls[:small_jobs]]) / small_jobs

    real = []
    for doc_path in real_pdfs(unpack_to=tmp / "real"):
        local.submit(doc_path).bundle()  # warm: the first run of a file pays for its blob copy
        both = interleaved({"bare": lambda p=doc_path: bare(p), "local": lambda p=doc_path: local.submit(p).bundle()},
                           max(rounds, 7))
        real.append((doc_path, page_count(doc_path), both["bare"], both["local"]))

    long_path = tmp / "long.pdf"
    long_path.write_bytes(make_pdf(LONG_PAGES, salt="long-"))
    peaks = {"bare": peak_mb("bare", long_path, tmp / "peak-blobs"),
             "mediafleet": peak_mb("mediafleet", long_path, tmp / "peak-blobs")}
    # Each output path of `extract` in a fresh process, at LONG_PAGES and twice that (the streamed
    # paths must not grow with the page count), and the worker that joins a split job.
    by_path = memory_peaks(lambda n: make_pdf(n, salt="memory-"), (LONG_PAGES, 2 * LONG_PAGES),
                           with_fleet=with_fleet, fleet_pages=LONG_PAGES, reuse=tmp / "memory")

    t_fleet = t_small_fleet = float("nan")
    split: dict[str, Any] = {}
    if with_fleet:
        t_fleet, t_small_fleet = _through_redis(pages, small_jobs, smalls, tmp)
        split["text_layer"] = split_speedup(lambda salt: make_pdf(pages, salt=salt), pages)
        split["scanned"] = split_speedup(lambda salt: scanned(make_pdf(SCANNED_PAGES, salt=salt), dpi=150),
                                         SCANNED_PAGES, repeat=1, size=2)

    rows = [("path", "seconds", "pages/s", "vs bare")]
    figures = {}
    for name, t in [("bare PyMuPDF get_text('dict')", t_bare), ("mediafleet in-process", t_local),
                    ("mediafleet via Redis, 1 worker", t_fleet)]:
        rows.append((name, f"{t:.3f}", f"{pages / t:,.0f}", f"{t_bare / t:.2f}x"))
        figures[name] = {"seconds": round(t, 4), "pages_per_s": round(pages / t, 1), "ratio_to_bare": round(t_bare / t, 3)}
    overhead_ms = (t_small_fleet - t_small_local) * 1000
    print(f"{pages}-page PDF, 40 lines a page")
    print(table(rows))
    print(f"per-job fleet overhead (1-page jobs, sequential): {overhead_ms:.1f} ms "
          f"({t_small_fleet * 1000:.1f} ms via Redis vs {t_small_local * 1000:.1f} ms in-process)")
    real_rows = [("real PDF (found at run time)", "pages", "bare pages/s", "mediafleet pages/s", "vs bare")]
    real_figures = []
    for doc_path, n, rb, rl in real:
        real_rows.append((f"{doc_path.parent.name}/{doc_path.name}", str(n), f"{n / rb:,.0f}", f"{n / rl:,.0f}", f"{rb / rl:.2f}x"))
        real_figures.append({"file": doc_path.name, "package_doc": doc_path.parent.name, "pages": n,
                             "bare_pages_per_s": round(n / rb, 1), "in_process_pages_per_s": round(n / rl, 1),
                             "ratio_to_bare": round(rb / rl, 3)})
    if real:
        print(table(real_rows))
    else:
        print(f"no real PDF under {REAL_PDF_ROOT}: the real-PDF ratio was not measured")
    print(f"peak memory, generated {LONG_PAGES}-page PDF ({long_path.stat().st_size / 1e6:.1f} MB), one run in a "
          f"child process: mediafleet in-process {peaks['mediafleet']:,.0f} MB; bare PyMuPDF {peaks['bare']:,.0f} MB")
    memory_rows = [("peak MB, fresh process", *(f"{n} pages" for n in by_path["in_process"]))]
    paths = next(iter(by_path["in_process"].values()))
    for name in (k for k, v in paths.items() if isinstance(v, dict)):
        memory_rows.append((name, *(f"{fig[name]['peak_mb']:,.0f}" for fig in by_path["in_process"].values())))
    print(table(memory_rows))
    if "fleet" in by_path:
        print(f"fleet, {by_path['fleet']['pages']} pages split: {json.dumps(by_path['fleet'])}")
    if not with_fleet:
        print("--no-fleet: results not written (the fleet's figures are missing)")
        return
    split_rows = [("one long PDF on the fleet", "ranges", "one task, 1 worker", "split, 1 worker",
                   "split, 2 workers", "2 vs 1 workers")]
    for name, fig in split.items():
        sec = fig["seconds"]
        split_rows.append((f"{name} ({fig['pages']} pages, ranges of {fig['range_pages']})", str(fig["ranges"]),
                           f"{sec['one_task_1_worker']:.2f} s", f"{sec['split_1_worker']:.2f} s",
                           f"{sec['split_2_workers']:.2f} s", f"{fig['speedup_2_vs_1_workers']:.2f}x"))
    print(table(split_rows))
    out = write_results("pdf", {"pages": pages, "lines_per_page": 40,
                                "timing": {"statistic": "median of interleaved rounds (bare, in-process)",
                                           "rounds": rounds, "real_pdf_rounds": max(rounds, 7),
                                           "fleet": "median of 3 runs"},
                                "paths": figures,
                                "small_job_ms": {"in_process": round(t_small_local * 1000, 2),
                                                 "fleet": round(t_small_fleet * 1000, 2),
                                                 "overhead": round(overhead_ms, 2)},
                                "real_pdfs": real_figures,
                                "split_across_workers": split,
                                "peak_memory_mb": {"pages": LONG_PAGES, "bytes": long_path.stat().st_size,
                                                   **{k: round(v, 1) for k, v in peaks.items()}},
                                "memory_by_path": by_path})
    print(f"wrote {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--peak":
        peak_child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
        parser.add_argument("pages", nargs="?", type=int, default=500, help="pages of the generated PDF (500)")
        parser.add_argument("--rounds", type=int, default=5,
                            help="interleaved rounds of bare and in-process (5; at least 7 on real PDFs)")
        parser.add_argument("--no-fleet", action="store_true", help="skip the runs through Redis and a worker")
        parser.add_argument("--speed-only", action="store_true",
                            help="only in-process vs bare PyMuPDF on the generated and the real PDFs (nothing written)")
        args = parser.parse_args()
        if args.speed_only:
            speed(args.pages, rounds=args.rounds)
        else:
            main(args.pages, rounds=args.rounds, with_fleet=not args.no_fleet)
