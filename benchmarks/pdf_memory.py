"""Peak memory of one long PDF: bare PyMuPDF, ``extract --out`` (the bundle held whole), ``extract
--out --jsonl`` (written as it is made), and on the fleet the worker that joins a split job.

Each in-process path runs in a fresh process of its own, so its peak resident memory (``VmHWM``,
counted from the exec) is its own: bare PyMuPDF reading every page with ``get_text("dict")``; the
``mediafleet extract`` command with ``--out DIR --json`` (the bundle held whole: printed, and
written whole, as ``--out`` wrote it before it was streamed), ``--out DIR`` (the indented JSON and
the Turtle, written range by range: :mod:`mediafleet.adapters.pdf_stream`) and ``--out DIR --jsonl``
(the JSON Lines stream and the Turtle, likewise). On the fleet, a real redis-server and one ``mediafleet
worker --pool=solo`` (so the job runs in the worker's own process): the PDF is split into the
shipped ranges of 32 pages, all on that worker, which joins them when the last reports; its peak
is read from ``/proc`` before it stops. The waiting CLI (``extract --broker ... --out DIR
--jsonl``) is measured as a fresh process too, twice per PDF: on the new job (the bundle written
from the job's ranges' outcomes one at a time), then on the finished job (the first range's report
went with the join, so it reads the joined outcome and holds the bundle whole, as every waiting CLI
did before), and the two runs' files are compared byte for byte.

Used by ``bench_pdf`` (:func:`memory_peaks`); standalone:
``.venv/bin/python -m benchmarks.pdf_memory [PAGES ...] [--no-fleet | --fleet-only] [--reuse DIR]``
(default 900 and 1,800 pages of the generated 40-line pages, in-process and on the fleet;
``--reuse`` keeps the generated PDFs there, which take about a tenth of a second a page to make).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import ROOT, fleet, peak_mb, table, worker_pids, write_results  # noqa: E402

__all__ = ["memory_peaks"]

_HWM = 'print(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1], file=sys.stderr)'

_BARE = f"""
import sys
sys.modules.setdefault("pymupdf.layout", None)
import pymupdf
doc = pymupdf.open(sys.argv[1], filetype="pdf")
for page in doc:
    page.get_text("dict")
doc.close()
{_HWM}
"""

_CLI = f"""
import sys
from mediafleet.cli import main
code = main(sys.argv[1:])
{_HWM}
sys.exit(code)
"""


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    return {**env, **extra}


def _child(code: str, args: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(peak MB, seconds, CPU seconds) of ``python -c code args`` in a fresh process (its peak is
    stderr's last line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env, cwd=ROOT, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"{args[:1]} failed:\n{done.stderr[-3000:]}")
    return int(done.stderr.strip().splitlines()[-1]) / 1024, seconds, cpu


def _in_process(path: Path, tmp: Path) -> dict[str, dict[str, float]]:
    paths = {}
    peak, seconds, cpu = _child(_BARE, [str(path)], _env({}))
    paths["bare_pymupdf"] = {"peak_mb": round(peak, 1), "seconds": round(seconds, 2), "cpu_s": round(cpu, 2)}
    for name, extra in (("extract_out_json_whole", ["--json"]), ("extract_out_streamed", []),
                        ("extract_out_jsonl_streamed", ["--jsonl"])):
        out = tmp / f"{name}-{path.stem}"
        peak, seconds, cpu = _child(_CLI, ["extract", str(path), "--out", str(out), *extra],
                                    _env({"MEDIAFLEET_BLOB_ROOT": str(tmp / f"blobs-{name}")}))
        written = sum(f.stat().st_size for f in out.iterdir())
        paths[name] = {"peak_mb": round(peak, 1), "seconds": round(seconds, 2), "cpu_s": round(cpu, 2),
                       "written_mb": round(written / 1e6, 1)}
    return paths


def _on_fleet(paths: dict[int, Path], tmp: Path) -> dict[str, Any]:
    """On one solo worker, for each PDF in turn: the waiting CLI on a new job (``--out DIR
    --jsonl``: the bundle written from the job's ranges' outcomes one at a time), then the same
    command on the finished job (written from the ranges too): the two peaks, and whether they
    wrote the same bytes."""
    by_pages: dict[str, Any] = {}
    with fleet(specs=[(["--pool=solo"], {})]) as env:
        pids = worker_pids()
        at_start = max(peak_mb(pid) for pid in pids)
        for n, path in paths.items():
            runs = {}
            for name in ("streamed", "finished"):
                out = tmp / f"fleet-{name}-{path.stem}"
                peak, seconds, cpu = _child(_CLI, ["extract", str(path), "--broker", env["MEDIAFLEET_BROKER_URL"],
                                                   "--out", str(out), "--jsonl", "--timeout", "3600"], _env(env))
                runs[name] = {"peak_mb": round(peak, 1), "seconds": round(seconds, 2), "cpu_s": round(cpu, 2)}
            same = _same_files(tmp / f"fleet-streamed-{path.stem}", tmp / f"fleet-finished-{path.stem}")
            by_pages[str(n)] = {"waiting_cli_streamed": runs["streamed"], "waiting_cli_finished": runs["finished"],
                                "identical_files": same,
                                "worker_peak_mb_so_far": round(max(peak_mb(pid) for pid in pids), 1)}
        worker = max(peak_mb(pid) for pid in pids)
    first = by_pages[str(next(iter(paths)))]
    return {"pages": next(iter(paths)), "worker_peak_mb": first["worker_peak_mb_so_far"],
            "worker_peak_mb_at_start": round(at_start, 1), "worker_peak_mb_all": round(worker, 1),
            "waiting_cli_peak_mb": first["waiting_cli_streamed"]["peak_mb"],
            "waiting_cli_finished_peak_mb": first["waiting_cli_finished"]["peak_mb"],
            "seconds": first["waiting_cli_streamed"]["seconds"], "range_pages": 32, "by_pages": by_pages}


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(
        (a / name).read_bytes() == (b / name).read_bytes() for name in names)


def memory_peaks(make: Callable[[int], bytes], pages: tuple[int, ...] = (900, 1800), *, with_fleet: bool = True,
                 fleet_pages: int | tuple[int, ...] = 900, reuse: Path | None = None) -> dict[str, Any]:
    """Peak MB of each path for each page count (``make(pages)`` builds the PDF), and on the fleet
    for each of ``fleet_pages`` (the first one's figures at the top of ``fleet``, each one's under
    ``by_pages``)."""
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-memory-"))
    folder = reuse or tmp
    folder.mkdir(parents=True, exist_ok=True)
    on_fleet = (fleet_pages,) if isinstance(fleet_pages, int) else tuple(fleet_pages)
    made = {}
    for n in sorted({*pages, *(on_fleet if with_fleet else ())}):
        path = folder / f"generated-{n}.pdf"
        if not path.is_file():
            path.write_bytes(make(n))
        made[n] = path
    figures: dict[str, Any] = {"in_process": {str(n): {"bytes": made[n].stat().st_size, **_in_process(made[n], tmp)}
                                              for n in pages}}
    if with_fleet:
        figures["fleet"] = _on_fleet({n: made[n] for n in on_fleet}, tmp)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=int, default=[900, 1800])
    parser.add_argument("--no-fleet", action="store_true", help="leave out the fleet's worker")
    parser.add_argument("--fleet-only", action="store_true", help="only the fleet's worker and waiting CLI")
    parser.add_argument("--reuse", type=Path, help="keep the generated PDFs in this folder and reuse them")
    args = parser.parse_args()
    from benchmarks.documents import make_pdf

    figures = memory_peaks(make_pdf, () if args.fleet_only else tuple(args.pages), with_fleet=not args.no_fleet,
                           fleet_pages=tuple(args.pages), reuse=args.reuse)
    rows = [("generated PDF, 40 lines a page", "bare PyMuPDF", "extract --out --json (whole)", "extract --out",
             "extract --out --jsonl")]
    for n, fig in figures["in_process"].items():
        rows.append((f"{int(n):,} pages ({fig['bytes'] / 1e6:.1f} MB)", f"{fig['bare_pymupdf']['peak_mb']:,.0f} MB",
                     f"{fig['extract_out_json_whole']['peak_mb']:,.0f} MB",
                     f"{fig['extract_out_streamed']['peak_mb']:,.0f} MB",
                     f"{fig['extract_out_jsonl_streamed']['peak_mb']:,.0f} MB"))
    print("peak resident memory, each path in a fresh process")
    print(table(rows))
    if "fleet" in figures:
        f = figures["fleet"]
        for n, g in f["by_pages"].items():
            print(f"fleet, {int(n):,} pages in ranges of {f['range_pages']} on one solo worker: the joining worker "
                  f"peaks at {g['worker_peak_mb_so_far']:,.0f} MB ({f['worker_peak_mb_at_start']:,.0f} MB at start); "
                  f"the waiting CLI (--out --jsonl) at {g['waiting_cli_streamed']['peak_mb']:,.0f} MB on the new job, "
                  f"{g['waiting_cli_finished']['peak_mb']:,.0f} MB on the finished one "
                  f"(files {'identical' if g['identical_files'] else 'DIFFERENT'})")
    print(json.dumps(figures, indent=2))
    if "fleet" in figures:
        out = write_results("pdf_memory", {"load_average": os.getloadavg(), **figures})
        print(f"written to {out}")


if __name__ == "__main__":
    main()
