"""PDF text layer on a two-column document: mediafleet in-process against bare PyMuPDF.

A 400-page PDF (two columns of 50 lines a page, each line ten words, hyphenated words at some
column ends) is made at run time with PyMuPDF, then read in interleaved rounds (bare, mediafleet,
mediafleet, bare, ...): bare is ``page.get_text("dict")`` on every page; mediafleet is
``Dispatcher.submit(path).bundle()`` in-process (sniff, hash, store, extract, reading order, loci,
PROV-O, claim), and, where the C reader is used, the same with it turned off (the text lines read
through PyMuPDF's dict, as where the reader was built for another MuPDF). Each is the median of its
rounds, wall and process CPU time; the ratio is bare's time over mediafleet's (1.0x: as fast as bare;
the aim is 0.8x or more). The PyMuPDF and MuPDF versions and whether the C reader was used are
printed with the figures.

Run: ``.venv/bin/python -m benchmarks.pdf_columns [pages] [--rounds N] [--write]``
(``--write`` stores the figures in ``benchmarks/results/pdf_columns.json``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mediafleet import Dispatcher, Settings  # noqa: E402
from mediafleet.workers.pdf import mupdf as mupdf_module  # noqa: E402

from benchmarks.bench_pdf import bare, interleaved_cpu  # noqa: E402
from benchmarks.harness import table, write_results  # noqa: E402

pymupdf = mupdf_module.pymupdf
WORDS = ("harbour ledger quartz orbit falcon granite willow copper velvet summit river canvas "
         "inspection bollard fender berth delivery").split()
LINES_PER_COLUMN = 50


def make_two_column_pdf(pages: int) -> bytes:
    """``pages`` A4 pages, two columns of ``LINES_PER_COLUMN`` lines each, 9 pt Helvetica."""
    doc = pymupdf.open()
    for n in range(pages):
        page = doc.new_page(width=595, height=842)
        page.insert_text((56, 44), f"Report page {n + 1}", fontsize=11)
        for column, x in enumerate((56, 312)):
            lines = []
            for i in range(LINES_PER_COLUMN):
                words = " ".join(WORDS[(n * 7 + column * 3 + i + k) % len(WORDS)] for k in range(6))
                # Every seventh line ends on a hyphenated word, which the page text joins.
                lines.append(f"{n}.{column}.{i} {words}" + (" insp-" if i % 7 == 6 else ""))
            # One call a column (a call a line makes the PDF ten times slower to make).
            page.insert_text((x, 66), "\n".join(lines), fontsize=9, lineheight=1.5)
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data


def measure(pages: int = 400, rounds: int = 7) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-pdf-columns-"))
    path = tmp / "columns.pdf"
    path.write_bytes(make_two_column_pdf(pages))
    local = Dispatcher(Settings(blob_root=tmp / "blobs", broker_url=None))
    bundle = local.submit(path).bundle()  # warm: the first run pays for the blob copy and imports
    if bundle.status != "ok":
        raise RuntimeError(f"the two-column PDF did not extract: {bundle.status}")
    bare(path)
    paths = {"bare": lambda: bare(path), "mediafleet": lambda: local.submit(path).bundle()}
    if mupdf_module.FAST_LINES:
        paths["mediafleet, C reader off"] = lambda: _without_c_reader(lambda: local.submit(path).bundle())
    both = interleaved_cpu(paths, rounds)
    (w_bare, c_bare), (w_mf, c_mf) = both["bare"], both["mediafleet"]
    off = both.get("mediafleet, C reader off")
    return {
        "pages": pages, "lines_per_page": 2 * LINES_PER_COLUMN + 1, "bytes": path.stat().st_size,
        "pymupdf": pymupdf.VersionBind, "mupdf": pymupdf.mupdf_version, "c_reader": bool(mupdf_module.FAST_LINES),
        "timing": {"statistic": "median of interleaved rounds (bare, mediafleet in-process)", "rounds": rounds},
        "bare_seconds": round(w_bare, 4), "mediafleet_seconds": round(w_mf, 4),
        "bare_cpu_seconds": round(c_bare, 4), "mediafleet_cpu_seconds": round(c_mf, 4),
        "ratio_to_bare_wall": round(w_bare / w_mf, 3), "ratio_to_bare_cpu": round(c_bare / c_mf, 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        # The same run with the C reader not used (as where it was built for another MuPDF).
        "c_reader_off": None if off is None else {
            "seconds": round(off[0], 4), "cpu_seconds": round(off[1], 4),
            "ratio_to_bare_wall": round(w_bare / off[0], 3), "ratio_to_bare_cpu": round(c_bare / off[1], 3)},
    }


def _without_c_reader(run: Callable[[], Any]) -> None:
    mupdf_module.FAST_LINES = False
    try:
        run()
    finally:
        mupdf_module.FAST_LINES = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("pages", nargs="?", type=int, default=400, help="pages of the generated PDF (400)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (7)")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/pdf_columns.json")
    args = parser.parse_args()
    fig = measure(args.pages, args.rounds)
    print(f"two-column {fig['pages']}-page PDF, {fig['lines_per_page']} lines a page; PyMuPDF {fig['pymupdf']} "
          f"(MuPDF {fig['mupdf']}), C reader {'used' if fig['c_reader'] else 'NOT used'}")
    print(table([("path", "wall s", "pages/s", "CPU s"),
                 ("bare PyMuPDF get_text('dict')", f"{fig['bare_seconds']:.3f}",
                  f"{fig['pages'] / fig['bare_seconds']:,.0f}", f"{fig['bare_cpu_seconds']:.3f}"),
                 ("mediafleet in-process", f"{fig['mediafleet_seconds']:.3f}",
                  f"{fig['pages'] / fig['mediafleet_seconds']:,.0f}", f"{fig['mediafleet_cpu_seconds']:.3f}")]))
    print(f"vs bare: {fig['ratio_to_bare_wall']:.2f}x wall, {fig['ratio_to_bare_cpu']:.2f}x CPU "
          f"(medians of {args.rounds} interleaved rounds; load average {' '.join(map(str, fig['load_average']))})")
    if fig["c_reader_off"]:
        off = fig["c_reader_off"]
        print(f"same run, C reader off (as when built for another MuPDF): {off['ratio_to_bare_wall']:.2f}x wall, "
              f"{off['ratio_to_bare_cpu']:.2f}x CPU ({off['seconds']:.3f} s)")
    if args.write:
        print(f"wrote {write_results('pdf_columns', fig)}")


if __name__ == "__main__":
    main()
