"""Remake the README's pictures of the report: extract media in-process, write each report, and
photograph it in headless Chromium (Debian's package), as tests/test_report.py renders it.

    .venv/bin/python docs/make_screenshots.py

Writes ``docs/report-pdf.png``, ``docs/report-audio.png``, ``docs/report-video.png`` and
``docs/report-video-speech.png``, reduced to a 64-colour palette so each stays small.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402

from mediafleet.cli.inputs import bundled_samples  # noqa: E402
from mediafleet.dispatch import Dispatcher  # noqa: E402
from mediafleet.report import build_report, store_inputs  # noqa: E402
from mediafleet.settings import Settings  # noqa: E402
from tests.chromium import screenshot  # noqa: E402


def _mixed_pdf() -> bytes:
    """A page with a text layer and a scanned page (the sample notice as an image): both kinds of line."""
    import pymupdf

    doc = pymupdf.open(stream=next(p for p in bundled_samples() if p.suffix == ".pdf").read_bytes(), filetype="pdf")
    doc.delete_page(1)
    doc[0].set_cropbox(pymupdf.Rect(0, 0, 595, 250))  # the text, without the blank half page below it
    scan = doc.new_page(width=595, height=280)
    scan.insert_image(pymupdf.Rect(40, 25, 555, 255), filename=str(next(p for p in bundled_samples() if p.suffix == ".png")))
    data = doc.tobytes()
    doc.close()
    return data


def main() -> None:
    samples = {p.suffix: p for p in bundled_samples()}
    with tempfile.TemporaryDirectory(prefix="mf-shots-") as tmp:
        fleet = Dispatcher(Settings.load(blob_root=Path(tmp) / "blobs"))
        shots = [
            ("report-pdf.png", "harbour-report.pdf, page 2 scanned", _mixed_pdf(), 900, 1000, "line"),
            ("report-audio.png", "memo.opus", samples[".opus"], 1000, 520, None),
            ("report-video.png", "scenes.mp4", samples[".mp4"], 1000, 680, None),
            ("report-video-speech.png", "speech.mp4", ROOT / "tests" / "data" / "speech.mp4", 1000, 800, None),
        ]
        for out_name, title, media, width, height, pick in shots:
            bundle = fleet.submit(media).bundle()
            assert bundle.status == "ok", bundle.error
            with store_inputs(bundle, fleet.store) as inputs:
                page = build_report(bundle, title, inputs)
            html = Path(tmp) / f"{out_name}.html"
            html.write_text(page, encoding="utf-8")
            fragment = ""
            if pick == "line":  # open one line's panel, as a click would
                lines = [n for n in bundle.nodes if n.node_type == "Evidence" and n.properties["locus_kind"] == "image_region"]
                fragment = "locus=" + lines[2].properties["evidence_locus"]["id"]
            raw = Path(tmp) / out_name
            screenshot(html, raw, width=width, height=height, fragment=fragment)
            with Image.open(raw) as image:
                small = image.convert("RGB").quantize(colors=64, method=Image.Quantize.FASTOCTREE)
                small.save(ROOT / "docs" / out_name, optimize=True)
            print(out_name, (ROOT / "docs" / out_name).stat().st_size, "bytes")


if __name__ == "__main__":
    main()
