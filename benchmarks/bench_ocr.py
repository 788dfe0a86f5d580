"""OCR: seconds per scanned page and word accuracy, mediafleet versus the Tesseract CLI, in one run;
and pages/s on a mixed PDF (10% scanned) versus OCR-ing every page.

The scanned pages are made here: born-digital A4 pages of English prose (Python's own module
docstrings) in three fonts, rasterised at 200 dpi in grayscale; the born-digital text layer is the
answer key. Each engine gets the same pixels: mediafleet reads a one-page PDF of each scan (render + OCR),
Tesseract the same scan as a PNG file (encoded before timing); the engines take turns page by
page, so a busy moment on a shared machine falls on all of them. Everything runs on one thread
(``MEDIAFLEET_THREADS=1``; ``OMP_THREAD_LIMIT=1`` for Tesseract). Also shown: RapidOCR as shipped
(its own pipeline on the same pixels), which is what mediafleet improves on, and where mediafleet's
time goes on each generated page (detector, line crops, recogniser, word spaces; measured again
after the timed runs, so they do not slow them). Then real scanned
pages: pages of real PDFs under ``/usr/share/doc`` (Debian packages' manuals, the gzipped ones
decompressed at run time, the largest first; from each, the first ``real_per_pdf`` pages of prose
with at least ``REAL_MIN_WORDS`` words after the first ``real_skip`` such pages, ``real_pages`` in
all; a skip gives pages that were not looked at while the OCR's rules were set), rasterised the same way at run time,
their own text layers the answer key (none found is said, not faked).

Held-out pages: the same comparison on pages of a real PDF that no OCR rule was set on, the
Debian FAQ (``debian-faq``'s English PDF, fetched with ``apt-get download`` and unpacked into the
run's temporary folder, nothing installed), ``held_out`` prose pages spread evenly over it; any
PDF paths given after ``--held-out`` are used instead. Each page is scored by word accuracy (1 -
word error rate, in reading order) and by bag-of-words recall and precision (the reference's words
found, the words read that are in the reference, each word counted as often as it occurs), and
timed in wall and CPU seconds (mediafleet's process, Tesseract's child). Where the time goes is
measured last, on the real and held-out pages (render, detector, line crops, fast recogniser,
re-reads by the small one, the rest), so it does not slow the timed runs.

Setup: installs Debian's ``tesseract-ocr`` when it is missing (needs root and apt).
Run: ``.venv/bin/python benchmarks/bench_ocr.py [pages] [mixed_pages] [real_pages] [real_per_pdf] [real_skip]
[held_out] [--held-out PDF ...]`` (defaults 3, 10, 14, 2, 0, 8: two pages of each of the seven
manuals here, eight pages of the Debian FAQ).
"""

from __future__ import annotations

import argparse
import collections
import difflib
import gzip
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mediafleet  # noqa: F401 - imported first, as the package expects
from benchmarks.harness import REAL_PDF_ROOT, real_pdfs, table, write_results
from mediafleet.contract import DeviceClass, Limits, PdfOptions
from mediafleet.workers.engines import EngineConfig, configure
from mediafleet.workers.pdf.mupdf import pymupdf
from mediafleet.workers.pdf.textlayer import extract_pdf

DPI = 200
FONTS = ["helv", "tiro", "cour"]
LIMITS = Limits(max_bytes=1 << 30, max_pages=1000, max_pixels=50_000_000)
REAL_MIN_WORDS = 250
# The held-out document: Debian's FAQ, a package that is not installed here (so not among the
# manuals the OCR's rules were set on), fetched as a .deb and unpacked in the run's folder.
HELD_OUT_PACKAGE = "debian-faq"
HELD_OUT_PDF = "debian-faq.en.pdf.gz"


def ensure_tesseract() -> str:
    exe = shutil.which("tesseract")
    if exe is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "tesseract-ocr",
                        "tesseract-ocr-eng"], check=False, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        exe = shutil.which("tesseract")
    if exe is None:
        sys.exit("tesseract is not installed and cannot be installed here (apt-get install tesseract-ocr)")
    return exe


def prose() -> list[str]:
    text = " ".join(m.__doc__ or "" for m in (argparse, difflib, json, re, subprocess, textwrap, tempfile))
    return re.findall(r"[A-Za-z][A-Za-z'.,;:()-]*|\d+", text)


def born_digital(pages: int) -> tuple[bytes, list[str]]:
    words = prose()
    doc = pymupdf.open()
    at = 0
    for n in range(pages):
        page = doc.new_page(width=595, height=842)
        chunk = words[at:at + 400]
        at = (at + 400) % max(len(words) - 400, 1)
        page.insert_textbox(pymupdf.Rect(72, 72, 523, 770), " ".join(chunk), fontsize=11, fontname=FONTS[n % len(FONTS)])
    texts = [p.get_text() for p in doc]
    return doc.tobytes(garbage=3, deflate=True), texts


def scans(pdf: bytes, which: set[int] | None, folder: Path) -> tuple[bytes, list[Path]]:
    """A copy of ``pdf`` with pages in ``which`` (0-based; all when None) scanned; and their PNGs."""
    src = pymupdf.open(stream=pdf, filetype="pdf")
    out = pymupdf.open()
    pngs = []
    for i, page in enumerate(src):
        if which is None or i in which:
            pix = page.get_pixmap(dpi=DPI, colorspace=pymupdf.csGRAY)
            png = folder / f"scan{i}.png"
            pix.save(png)
            pngs.append(png)
            new = out.new_page(width=page.rect.width, height=page.rect.height)
            new.insert_image(new.rect, pixmap=pix)
        else:
            out.insert_pdf(src, from_page=i, to_page=i)
    return out.tobytes(garbage=3, deflate=True), pngs


def real_pages(limit: int, per_pdf: int = 2, unpack_to: Path | None = None, skip: int = 0) -> list[tuple[str, bytes, str]]:
    """(label, one-page PDF, its text layer) for text-heavy pages of real PDFs, largest PDF first,
    each PDF's first ``skip`` such pages passed over; with ``unpack_to``, the gzipped manuals too
    (decompressed there)."""
    out: list[tuple[str, bytes, str]] = []
    for path in real_pdfs(unpack_to=unpack_to):
        try:
            doc = pymupdf.open(path, filetype="pdf")
        except RuntimeError:  # an unreadable manual is skipped
            continue
        taken = passed = 0
        for i, page in enumerate(doc):
            text = page.get_text()
            tokens = text.split()
            # Prose, not a table of contents: most tokens hold a letter (dot leaders do not).
            if len(tokens) >= REAL_MIN_WORDS and sum(any(c.isalpha() for c in t) for t in tokens) >= 0.8 * len(tokens):
                if passed < skip:
                    passed += 1
                    continue
                one = pymupdf.open()
                one.insert_pdf(doc, from_page=i, to_page=i)
                out.append((f"{path.name} p{i + 1}", one.tobytes(), text))
                taken += 1
                if taken == per_pdf or len(out) == limit:
                    break
        if len(out) == limit:
            break
    return out


def held_out_pdfs(folder: Path) -> list[Path]:
    """The Debian FAQ's English PDF, fetched with ``apt-get download`` and unpacked into ``folder``
    (nothing installed); empty when apt cannot fetch it here."""
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return []
    subprocess.run(["apt-get", "download", "-qq", HELD_OUT_PACKAGE], cwd=folder, check=False, capture_output=True)
    debs = sorted(folder.glob(f"{HELD_OUT_PACKAGE}_*.deb"))
    if not debs:
        return []
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(folder / "root")], check=False, capture_output=True)
    out = []
    for packed in sorted((folder / "root").rglob(HELD_OUT_PDF)):
        target = folder / packed.name.removesuffix(".gz")
        target.write_bytes(gzip.decompress(packed.read_bytes()))
        out.append(target)
    return out


def spread_pages(paths: list[Path], limit: int, min_words: int = REAL_MIN_WORDS) -> list[tuple[str, bytes, str]]:
    """(label, one-page PDF, its text layer) for ``limit`` prose pages spread evenly over the
    prose pages of ``paths`` (the same test of prose as :func:`real_pages`)."""
    found: list[tuple[str, Any, int, str]] = []
    for path in paths:
        try:
            doc = pymupdf.open(path, filetype="pdf")
        except RuntimeError:
            continue
        for i, page in enumerate(doc):
            text = page.get_text()
            tokens = text.split()
            if len(tokens) >= min_words and sum(any(c.isalpha() for c in t) for t in tokens) >= 0.8 * len(tokens):
                found.append((path.name, doc, i, text))
    if not found or limit <= 0:
        return []
    step = max(len(found) / limit, 1.0)
    out = []
    for k in range(min(limit, len(found))):
        name, doc, i, text = found[int(k * step)]
        one = pymupdf.open()
        one.insert_pdf(doc, from_page=i, to_page=i)
        out.append((f"{name} p{i + 1}", one.tobytes(), text))
    return out


def recall_precision(reference: str, hypothesis: str) -> tuple[float, float]:
    """Bag-of-words recall (the reference's words read) and precision (the words read that are in
    the reference), each word counted as often as it occurs; reading order does not count."""
    ref, hyp = collections.Counter(reference.split()), collections.Counter(hypothesis.split())
    matched = sum((ref & hyp).values())
    return matched / max(sum(ref.values()), 1), matched / max(sum(hyp.values()), 1)


def word_accuracy(reference: str, hypothesis: str) -> float:
    """1 - word error rate (edit distance over words / reference words)."""
    ref, hyp = reference.split(), hypothesis.split()
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return 1.0 - prev[-1] / max(len(ref), 1)


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compare(pages: list[tuple[str, bytes, str]], tesseract: str, env: dict[str, str], tmp: Path,
            tag: str) -> list[dict[str, Any]]:
    """Each page scanned at ``DPI``, read by mediafleet (the one-page scanned PDF) and by Tesseract
    (its PNG), in turn page by page; wall and CPU seconds, word accuracy, recall and precision."""
    rows = []
    for k, (label, one_page, reference) in enumerate(pages):
        scanned_one, (png,) = scans(one_page, None, tmp)
        one = tmp / f"{tag}{k}.pdf"
        one.write_bytes(scanned_one)
        png = png.rename(tmp / f"{tag}{k}.png")
        cpu = time.process_time()
        dt, result = timed(lambda one=one: extract_pdf(one, PdfOptions(), LIMITS))
        cpu_mf = time.process_time() - cpu
        cpu = _children_cpu()
        dt_tess, out = timed(lambda png=png: subprocess.run([tesseract, str(png), "-", "--dpi", str(DPI)],
                                                            capture_output=True, text=True, env=env,
                                                            check=True).stdout)
        cpu_tess = _children_cpu() - cpu
        text = result.pages[0].text
        (mf_r, mf_p), (t_r, t_p) = recall_precision(reference, text), recall_precision(reference, out)
        rows.append({"page": label, "words": len(reference.split()), "mediafleet_s": round(dt, 3),
                     "tesseract_s": round(dt_tess, 3), "mediafleet_cpu_s": round(cpu_mf, 3),
                     "tesseract_cpu_s": round(cpu_tess, 3),
                     "mediafleet_word_accuracy": round(word_accuracy(reference, text), 4),
                     "tesseract_word_accuracy": round(word_accuracy(reference, out), 4),
                     "mediafleet_recall": round(mf_r, 4), "tesseract_recall": round(t_r, 4),
                     "mediafleet_precision": round(mf_p, 4), "tesseract_precision": round(t_p, 4)})
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over ``rows``: seconds per page (wall, CPU), their ratios, mean accuracy figures."""
    out: dict[str, Any] = {"pages": rows}
    if not rows:
        return out
    for engine in ("mediafleet", "tesseract"):
        out[f"{engine}_s_per_page"] = _mean([r[f"{engine}_s"] for r in rows], 3)
        out[f"{engine}_cpu_s_per_page"] = _mean([r[f"{engine}_cpu_s"] for r in rows], 3)
        for measure in ("word_accuracy", "recall", "precision"):
            out[f"{engine}_{measure}"] = _mean([r[f"{engine}_{measure}"] for r in rows], 4)
    out["wall_ratio"] = round(sum(r["mediafleet_s"] for r in rows) / sum(r["tesseract_s"] for r in rows), 3)
    tesseract_cpu = max(sum(r["tesseract_cpu_s"] for r in rows), 1e-9)
    out["cpu_ratio"] = round(sum(r["mediafleet_cpu_s"] for r in rows) / tesseract_cpu, 3)
    return out


def where_the_time_goes(engine: Any, pdfs: list[Path]) -> dict[str, float]:
    """Seconds per page in each step of mediafleet's OCR of the one-page PDFs ``pdfs`` (measured
    apart from the timed runs): render, detector (with its pre- and post-processing), line crops,
    the fast recogniser, the small one's re-reads, and the rest (spacing, quotes, order, PDF)."""
    import mediafleet.workers.pdf.ocr_page as ocr_page

    spent: dict[str, float] = collections.defaultdict(float)
    saved = {}

    def clocked(owner: Any, name: str, step: str) -> None:
        inner = getattr(owner, name)
        saved[(owner, name)] = inner

        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[step] += time.perf_counter() - start
        setattr(owner, name, run)

    clocked(ocr_page, "page_pixels", "render")
    clocked(engine, "detect", "detect")
    clocked(engine, "crops", "crops")
    clocked(engine, "read_fast", "fast recogniser")
    clocked(engine, "read_again", "re-reads")
    total = 0.0
    try:
        for path in pdfs:
            total += timed(lambda path=path: extract_pdf(path, PdfOptions(), LIMITS))[0]
    finally:
        for (owner, name), inner in saved.items():
            if owner is engine:
                delattr(engine, name)
            else:
                setattr(owner, name, inner)
    spent["rest"] = total - sum(spent.values())
    return {step: round(v / max(len(pdfs), 1), 3) for step, v in spent.items()}


def main(pages: int = 3, mixed_pages: int = 10, real: int = 14, real_per_pdf: int = 2, real_skip: int = 0,
         held_out: int = 8, held_out_paths: list[Path] | None = None) -> None:
    tesseract = ensure_tesseract()
    configure(EngineConfig(device=DeviceClass.CPU, threads=1))
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-ocr-"))
    pdf, texts = born_digital(pages)
    scanned, pngs = scans(pdf, None, tmp)
    (tmp / "scanned.pdf").write_bytes(scanned)

    from mediafleet.workers.ocr.engine import get_engine
    from mediafleet.workers.ocr.spacing import with_spaces
    from mediafleet.workers.pdf.ocr_page import DETECT_DPI

    t_load, engine = timed(get_engine)
    import cv2
    from rapidocr_onnxruntime import RapidOCR

    shipped = RapidOCR(use_cls=False, intra_op_num_threads=1, inter_op_num_threads=1)
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}

    # Page by page, the three engines in turn, so a busy moment on a shared machine hits all three.
    mf_t, tess_t, raw_t, mf_acc, tess_acc, raw_acc = [], [], [], [], [], []
    stages: dict[str, float] = {"detect": 0.0, "crops": 0.0, "recognise": 0.0, "spaces": 0.0}
    for i, (png, reference) in enumerate(zip(pngs, texts)):
        one = tmp / f"page{i}.pdf"
        one.write_bytes(_subset(scanned, {i}))
        dt, result = timed(lambda one=one: extract_pdf(one, PdfOptions(), LIMITS))
        mf_t.append(dt)
        mf_acc.append(word_accuracy(reference, result.pages[0].text))
        dt, out = timed(lambda png=png: subprocess.run([tesseract, str(png), "-", "--dpi", str(DPI)], capture_output=True,
                                               text=True, env=env, check=True).stdout)
        tess_t.append(dt)
        tess_acc.append(word_accuracy(reference, out))
        image = cv2.imread(str(png))
        dt, (res, _) = timed(lambda image=image: shipped(image, use_cls=False))
        raw_t.append(dt)
        raw = "\n".join(r[1] for r in sorted(res or [], key=lambda r: (r[0][0][1], r[0][0][0])))
        raw_acc.append(word_accuracy(reference, raw))
        side = round(max(image.shape[:2]) * DETECT_DPI / DPI)
        dt, quads = timed(lambda image=image, side=side: engine.detect(image, side))
        stages["detect"] += dt
        dt, crops = timed(lambda image=image, quads=quads: engine.crops(image, quads))
        stages["crops"] += dt
        dt, reads = timed(lambda crops=crops: engine.recognise(crops))
        stages["recognise"] += dt
        stages["spaces"] += timed(lambda reads=reads, crops=crops: [with_spaces(r, c) for r, c in zip(reads, crops)])[0]
    t_mf, t_tess, t_raw = sum(mf_t), sum(tess_t), sum(raw_t)

    # Real scanned pages, then held-out ones: the two engines in turn, page by page.
    real_list = real_pages(real, real_per_pdf, unpack_to=tmp / "manuals", skip=real_skip)
    real_rows = compare(real_list, tesseract, env, tmp, "real")
    if not real_rows:
        print(f"no real PDF with a page of {REAL_MIN_WORDS}+ words under {REAL_PDF_ROOT}: real pages not measured")
    held_paths = held_out_paths if held_out_paths else held_out_pdfs(tmp / "held-out")
    held_rows = compare(spread_pages(held_paths, held_out), tesseract, env, tmp, "held")
    if not held_rows:
        print(f"no held-out PDF ({HELD_OUT_PACKAGE} could not be fetched, none given): held-out pages not measured")
    time_goes = where_the_time_goes(engine, [tmp / f"real{k}.pdf" for k in range(len(real_rows))]
                                    + [tmp / f"held{k}.pdf" for k in range(len(held_rows))])

    # Mixed PDF: 10% scanned. auto (OCR only the scanned pages) vs always (OCR every page), and
    # the floor: OCR of just the scanned pages on their own.
    mixed_pdf, _ = born_digital(mixed_pages)
    step = max(mixed_pages // max(mixed_pages // 10, 1), 1)
    which = set(range(0, mixed_pages, step))
    mixed, _ = scans(mixed_pdf, which, tmp)
    only, _ = scans(_subset(mixed_pdf, which), None, tmp)
    (tmp / "mixed.pdf").write_bytes(mixed)
    (tmp / "only.pdf").write_bytes(only)
    autos, onlys = [], []
    for _ in range(2):  # interleaved, medians of two
        dt, auto = timed(lambda: extract_pdf(tmp / "mixed.pdf", PdfOptions(ocr="auto"), LIMITS))
        autos.append(dt)
        onlys.append(timed(lambda: extract_pdf(tmp / "only.pdf", PdfOptions(ocr="auto"), LIMITS))[0])
    t_auto, t_only = statistics.median(autos), statistics.median(onlys)
    t_always, _ = timed(lambda: extract_pdf(tmp / "mixed.pdf", PdfOptions(ocr="always"), LIMITS))
    assert sum(p.path == "ocr" for p in auto.pages) == len(which)

    n = len(pngs)
    figures = {
        "pages": n,
        "mediafleet_s_per_page_each": [round(t, 3) for t in mf_t],
        "tesseract_s_per_page_each": [round(t, 3) for t in tess_t],
        "dpi": DPI,
        "threads": 1,
        "engine_load_s": round(t_load, 3),
        "mediafleet_s_per_page": round(t_mf / n, 3),
        "tesseract_s_per_page": round(t_tess / n, 3),
        "rapidocr_as_shipped_s_per_page": round(t_raw / n, 3),
        "mediafleet_word_accuracy": round(sum(mf_acc) / n, 4),
        "tesseract_word_accuracy": round(sum(tess_acc) / n, 4),
        "rapidocr_as_shipped_word_accuracy": round(sum(raw_acc) / n, 4),
        "mediafleet_stage_s_per_page": {k: round(v / n, 3) for k, v in stages.items()},
        "models": [m.name for m in engine.models()],
        "per_font_word_accuracy": {
            FONTS[i % len(FONTS)]: {"mediafleet": round(mf_acc[i], 4), "tesseract": round(tess_acc[i], 4),
                                    "rapidocr_as_shipped": round(raw_acc[i], 4)} for i in range(n)},
        "real_pages": summary(real_rows),
        "held_out_pages": {"source": [p.name for p in held_paths], **summary(held_rows)},
        "mediafleet_real_and_held_out_s_per_page_by_step": time_goes,
        "mixed": {
            "pages": mixed_pages,
            "scanned_pages": len(which),
            "auto_pages_per_s": round(mixed_pages / t_auto, 3),
            "always_pages_per_s": round(mixed_pages / t_always, 3),
            "scanned_only_s": round(t_only, 3),
            "auto_s": round(t_auto, 3),
            "auto_over_scanned_only": round(t_auto / t_only, 3),
        },
    }
    write_results("ocr", figures)
    m = figures["mixed"]

    def rows_for(name: str, got: dict[str, Any]) -> list[tuple[str, ...]]:
        if "wall_ratio" not in got:
            return []
        n_pages = len(got["pages"])
        return [
            (f"{name} ({n_pages}): s/page wall", f"{got['mediafleet_s_per_page']:.2f}",
             f"tesseract {got['tesseract_s_per_page']:.2f}", f"{got['wall_ratio']:.2f}x"),
            (f"{name}: CPU s/page", f"{got['mediafleet_cpu_s_per_page']:.2f}",
             f"tesseract {got['tesseract_cpu_s_per_page']:.2f}", f"{got['cpu_ratio']:.2f}x"),
            (f"{name}: recall / precision", f"{got['mediafleet_recall']:.3f} / {got['mediafleet_precision']:.3f}",
             f"tesseract {got['tesseract_recall']:.3f} / {got['tesseract_precision']:.3f}", ""),
            (f"{name}: word accuracy", f"{got['mediafleet_word_accuracy']:.3f}",
             f"tesseract {got['tesseract_word_accuracy']:.3f}", ""),
        ]

    real_table = [*rows_for("real scanned pages", figures["real_pages"]),
                  *rows_for("held-out pages", figures["held_out_pages"]),
                  *[(f"  mediafleet {k} (real + held-out): s/page", f"{v:.2f}", "",
                     f"{v / max(sum(time_goes.values()), 1e-9):.0%}") for k, v in time_goes.items()]]
    print(table([
        ("measure", "mediafleet", "alternative", "ratio"),
        ("s per scanned page (1 thread)", f"{t_mf / n:.2f}", f"tesseract {t_tess / n:.2f}", f"{t_mf / t_tess:.2f}x"),
        ("word accuracy", f"{sum(mf_acc) / n:.3f}", f"tesseract {sum(tess_acc) / n:.3f}", ""),
        ("vs RapidOCR as shipped: s/page", f"{t_mf / n:.2f}", f"rapidocr {t_raw / n:.2f}", f"{t_mf / t_raw:.2f}x"),
        ("vs RapidOCR as shipped: word acc.", f"{sum(mf_acc) / n:.3f}", f"rapidocr {sum(raw_acc) / n:.3f}", ""),
        *[(f"  mediafleet {k}: s/page", f"{v / n:.2f}", "", f"{v / max(sum(stages.values()), 1e-9):.0%}")
          for k, v in stages.items()],
        *real_table,
        (f"mixed PDF, {m['scanned_pages']}/{mixed_pages} scanned: pages/s", f"auto {m['auto_pages_per_s']}",
         f"always {m['always_pages_per_s']}", f"{m['auto_pages_per_s'] / m['always_pages_per_s']:.1f}x"),
        ("mixed auto / OCR of scanned pages only", f"{t_auto:.2f} s", f"{t_only:.2f} s",
         f"{m['auto_over_scanned_only']:.2f}x"),
    ]))
    print(json.dumps({k: v for k, v in figures.items()
                      if k not in ("per_font_word_accuracy", "real_pages", "held_out_pages")}))


def _mean(values: list[float], digits: int) -> float | None:
    return round(sum(values) / len(values), digits) if values else None


def _subset(pdf: bytes, which: set[int]) -> bytes:
    src = pymupdf.open(stream=pdf, filetype="pdf")
    out = pymupdf.open()
    for i in sorted(which):
        out.insert_pdf(src, from_page=i, to_page=i)
    return out.tobytes()


if __name__ == "__main__":
    argv = sys.argv[1:]
    given: list[Path] | None = None
    if "--held-out" in argv:
        at = argv.index("--held-out")
        given = [Path(a) for a in argv[at + 1:]]
        argv = argv[:at]
    main(*[int(a) for a in argv[:6]], held_out_paths=given)
