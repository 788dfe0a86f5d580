"""A PDF's bundle written as it is made (``adapters/pdf_stream.py``, run in ranges by ``orchestrators/pdf_ranges.py``): byte for byte the one-run
bundle as JSON Lines and as indented JSON, the one-run failure when a range fails, nothing
complete-looking left when it is cut off, the CLI's ``--out`` path, and a peak memory that does not
grow with the pages."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mediafleet import Settings
from mediafleet.adapters.bundle import build_bundle, with_claims
from mediafleet.adapters.prov import to_turtle
from mediafleet.adapters.stream import read_bundle_lines, write_bundle_lines
from mediafleet.admission import Admission
from mediafleet.blobs.local import LocalBlobStore
from mediafleet.contract import EvidenceBundle
from mediafleet.contract.bundle import CallerClaims
from mediafleet.contract.errors import ErrorCode
from mediafleet.contract.jobs import ExtractRequest
from mediafleet.contract.manifest import Manifest, default_manifest
from mediafleet.report.text import summary_lines
from mediafleet.orchestrators.pdf_ranges import streams, write_pdf_bundle
from mediafleet.workers.runner import run_request
from tests.helpers import without_run
from tests.media import scanned

AT = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
WORDS = "harbour ledger quartz orbit falcon granite willow copper velvet summit river canvas".split()


def raw_pdf(pages: int, lines: int = 40, salt: str = "") -> bytes:
    """A born-digital PDF written out directly (milliseconds for hundreds of pages, where drawing
    them with PyMuPDF takes a tenth of a second a page): ``lines`` lines of 10 pt Helvetica a page."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for n in range(pages):
        text = "".join(f"BT /F1 10 Tf 1 0 0 1 56 {782 - 18 * i} Tm ({salt}{n}.{i} "
                       + " ".join(WORDS[(n + i + k) % len(WORDS)] for k in range(10)) + ") Tj ET\n"
                       for i in range(lines)).encode()
        objects.append(b"<< /Length %d >>\nstream\n" % len(text) + text + b"endstream")
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R >> >> "
                       b"/Contents %d 0 R >>" % len(objects))
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids) + b"] /Count %d >>" % pages
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def with_ligatures(pdf: bytes, at: tuple[int, ...]) -> bytes:
    """``pdf`` with a small page set in an embedded Times with real ligature glyphs inserted to
    become each page of ``at``."""
    import pymupdf

    lig = pymupdf.open()
    page = lig.new_page(width=400, height=300)
    writer = pymupdf.TextWriter(page.rect)
    for y, text in ((60, "The \ufb01le was \ufb02agged"), (90, "an e\ufb03cient o\ufb00er")):
        writer.append((40, y), text, font=pymupdf.Font("tiro"), fontsize=12)
    writer.write_text(page)
    doc = pymupdf.open(stream=pdf, filetype="pdf")
    for number in sorted(at):
        doc.insert_pdf(lig, start_at=number - 1)
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    lig.close()
    return data


class Run:
    """One artifact admitted into a store, run both ways with one fixed clock."""

    def __init__(self, tmp: Path, data: bytes, manifest: Manifest | None = None) -> None:
        self.tmp, self.manifest = tmp, manifest or default_manifest()
        self.store = LocalBlobStore(tmp / "blobs")
        admission = Admission(Settings(blob_root=tmp / "blobs"), self.manifest, self.store, lambda: AT)
        digest, size = admission.store_stream(io.BytesIO(data))
        self.capability = self.manifest.capability("ocr_pdf")
        self.request: ExtractRequest = admission.request(digest, size, "application/pdf", self.capability, {})

    def whole(self, claims: CallerClaims | None = None) -> EvidenceBundle:
        outcome = run_request(self.request, manifest=self.manifest, store=self.store, clock=lambda: AT)
        return with_claims(build_bundle(outcome, self.capability), claims)

    def streamed(self, name: str = "doc", **kwargs):  # type: ignore[no-untyped-def]
        out = self.tmp / "out"
        out.mkdir(exist_ok=True)
        written = write_pdf_bundle(self.request, self.capability, self.manifest, self.store, out / f"{name}.jsonl",
                                   turtle_to=out / f"{name}.ttl", clock=lambda: AT, **kwargs)
        return written, out / f"{name}.jsonl", out / f"{name}.ttl"


def lines_of(bundle: EvidenceBundle) -> str:
    buffer = io.StringIO()
    write_bundle_lines(bundle, buffer)
    return buffer.getvalue()


def test_the_stream_is_byte_for_byte_the_one_run_bundles(tmp_path: Path) -> None:
    run = Run(tmp_path, raw_pdf(70, lines=12))
    assert streams(run.capability)
    whole = run.whole()
    written, lines, ttl = run.streamed(range_pages=32)  # three ranges: 1-32, 33-64, 65-70
    assert lines.read_text(encoding="utf-8") == lines_of(whole)
    assert ttl.read_text(encoding="utf-8") == to_turtle(whole.prov)
    assert written.status == "ok" and written.summary_lines("doc") == summary_lines("doc", whole)
    assert sorted(p.name for p in lines.parent.iterdir()) == ["doc.jsonl", "doc.ttl"]  # no temporary left
    written, indented, _ = run.streamed("indented", range_pages=32, form="json")
    assert indented.read_text(encoding="utf-8") == whole.model_dump_json(indent=2)

    claims = CallerClaims(media_type="application/pdf", media_type_agrees=True)  # a caller's, as the CLI makes them
    _, lines, ttl = run.streamed("claimed", range_pages=32, claims=claims)
    assert lines.read_text(encoding="utf-8") == lines_of(run.whole(claims))


def test_ligatures_and_a_scanned_page_in_a_later_range_give_the_one_run_bundle(tmp_path: Path) -> None:
    # The scanned page is OCR'd in the second range: its producer (the OCR engine's threads) changes
    # every locus id, so the stream starts again after the first range was written without it.
    data = scanned(with_ligatures(raw_pdf(38, lines=8), at=(3, 36)), pages={36})
    run = Run(tmp_path, data)
    whole = run.whole()
    activity = next(n for n in whole.nodes if n.node_type == "ProvenanceActivity")
    assert activity.properties.get("models"), "the scanned page was not OCR'd"
    texts = [n.properties.get("text", "") for n in whole.nodes if n.node_type == "Evidence"]
    assert any("The file was flagged" in t for t in texts)
    written, lines, ttl = run.streamed(range_pages=16)
    assert lines.read_text(encoding="utf-8") == lines_of(whole)
    assert ttl.read_text(encoding="utf-8") == to_turtle(whole.prov)
    assert written.summary_lines("doc") == summary_lines("doc", whole)


def test_a_range_that_fails_gives_the_one_run_failure_and_nothing_half_written(tmp_path: Path) -> None:
    # Page 40 is a scan too large to render under this manifest's pixel limit: the second range fails.
    manifest = default_manifest().narrow({"capabilities": {"ocr_pdf": {"limits": {"max_pixels": 1_000_000}}}})
    run = Run(tmp_path, scanned(raw_pdf(70, lines=4), pages={40}, dpi=72), manifest)
    whole = run.whole()
    assert whole.status == "failed" and whole.error is not None and whole.error.code == ErrorCode.TOO_MANY_PIXELS
    written, lines, ttl = run.streamed(range_pages=32)
    assert (written.status, written.error) == ("failed", whole.error)
    assert lines.read_text(encoding="utf-8") == lines_of(whole)
    assert ttl.read_text(encoding="utf-8") == to_turtle(whole.prov)
    assert written.summary_lines("doc") == summary_lines("doc", whole)
    assert sorted(p.name for p in lines.parent.iterdir()) == ["doc.jsonl", "doc.ttl"]
    _, indented, _ = run.streamed("indented", range_pages=32, form="json")
    assert indented.read_text(encoding="utf-8") == whole.model_dump_json(indent=2)


def test_a_run_cut_off_midway_leaves_no_file(tmp_path: Path) -> None:
    run = Run(tmp_path, raw_pdf(70, lines=4))

    def interrupt(done: int, total: int | None, unit: str | None = None) -> None:
        if done == 40:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run.streamed(range_pages=32, progress=interrupt)
    assert list((tmp_path / "out").iterdir()) == []


def cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    env["MEDIAFLEET_BLOB_ROOT"] = str(tmp_path / "blobs")
    return subprocess.run([sys.executable, "-m", "mediafleet.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.slow
def test_extract_out_writes_the_bundle_the_whole_path_writes(tmp_path: Path) -> None:
    # --report keeps the bundle whole (the page shows every locus): the reference
    pdf = tmp_path / "long.pdf"
    pdf.write_bytes(raw_pdf(70, lines=6))
    claimed = ("--media-type", "application/pdf")
    lines = cli("extract", str(pdf), "--out", str(tmp_path / "lines"), "--jsonl", *claimed, tmp_path=tmp_path)
    indented = cli("extract", str(pdf), "--out", str(tmp_path / "indented"), *claimed, tmp_path=tmp_path)
    whole = cli("extract", str(pdf), "--out", str(tmp_path / "whole"), "--report", *claimed, tmp_path=tmp_path)
    assert lines.returncode == indented.returncode == whole.returncode == 0, lines.stderr + whole.stderr
    assert lines.stdout == indented.stdout == whole.stdout and "70 pages (text layer), 420 text lines" in lines.stdout
    expected = without_run(EvidenceBundle.model_validate_json(next((tmp_path / "whole").glob("*.bundle.json")).read_text()))
    assert expected["artifact"]["claimed"] is not None
    (jsonl,) = (tmp_path / "lines").glob("*.bundle.jsonl")
    with jsonl.open(encoding="utf-8") as stream:
        assert without_run(read_bundle_lines(stream)) == expected
    (json_file,) = (tmp_path / "indented").glob("*.bundle.json")
    assert without_run(EvidenceBundle.model_validate_json(json_file.read_text())) == expected
    turtle = jsonl.name.replace(".bundle.jsonl", ".prov.ttl")
    assert sorted(p.name for p in (tmp_path / "lines").iterdir()) == sorted([jsonl.name, turtle])
    assert sorted(p.name for p in (tmp_path / "indented").iterdir()) == sorted([json_file.name, turtle])


# The CLI in a fresh process, then its own peak resident memory (VmHWM, in kB: counted from the exec,
# unlike a child's ru_maxrss, which starts from the forking process's) as stderr's last line.
_PEAK = """
import sys
from mediafleet.cli import main
code = main(sys.argv[1:])
print(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1], file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.slow
def test_the_streamed_peak_does_not_grow_with_the_pages_as_the_whole_bundles_does(tmp_path: Path) -> None:
    """``extract --out --json`` (the bundle held whole, printed and written) against ``extract
    --out --jsonl`` (written as it is made) on 200 and 400 pages, each in a fresh process: peak
    resident memory, not time."""
    children = {}
    for pages in (200, 400):
        pdf = tmp_path / f"p{pages}.pdf"
        pdf.write_bytes(raw_pdf(pages, salt=f"{pages}-"))
        for mode, extra in (("whole", ["--json"]), ("stream", ["--jsonl"])):
            env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
            env["MEDIAFLEET_BLOB_ROOT"] = str(tmp_path / f"blobs-{mode}{pages}")
            children[mode, pages] = subprocess.Popen(
                [sys.executable, "-c", _PEAK, "extract", str(pdf), "--out", str(tmp_path / f"{mode}{pages}"), *extra],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks = {}
    for key, child in children.items():
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, (key, err[-2000:])
        peaks[key] = int(err.strip().splitlines()[-1]) / 1024
    assert list((tmp_path / "stream400").glob("*.bundle.jsonl")) and list((tmp_path / "whole400").glob("*.bundle.json"))
    whole = peaks["whole", 400] - peaks["whole", 200]
    stream = peaks["stream", 400] - peaks["stream", 200]
    # 200 pages more of 40 lines: tens of MB more held whole; streamed, a range's worth whatever the length
    assert whole > 20, peaks
    assert stream < whole / 4, peaks
    assert peaks["stream", 400] < peaks["whole", 400], peaks
