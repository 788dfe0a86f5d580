"""``ocr_pdf`` with OCR: scanned pages made here from born-digital ones with a known text layer.

A scanned page is the born-digital page rasterised (200 dpi, grayscale) and placed as an image on
a page of the same size with no text, so the original text layer is the answer key. The real
RapidOCR models run; one engine serves the whole session (it is per process).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mediafleet.contract import ErrorCode, LimitExceeded, Limits, PdfOptions, TextBox
from mediafleet.workers.pdf.classify import ocr_reason
from mediafleet.workers.pdf.mupdf import pymupdf
from mediafleet.modalities.pdf import SPEC as PDF_SPEC
from mediafleet.workers.pdf.textlayer import extract_pdf

from mediafleet import Dispatcher, Settings
from tests.helpers import assert_engine_valid, without_run
from tests.media import page_lines, scanned, text_pdf

LIMITS = Limits(max_bytes=1 << 30, max_pages=100, max_pixels=50_000_000)


def black_page_pdf() -> bytes:
    doc = pymupdf.open()
    page = doc.new_page(width=300, height=400)
    pix = pymupdf.Pixmap(pymupdf.csGRAY, pymupdf.IRect(0, 0, 600, 800), False)
    pix.clear_with(0)
    page.insert_image(page.rect, pixmap=pix)
    data = doc.tobytes()
    doc.close()
    return data


def words(text: str) -> list[str]:
    return text.split()


def recall(reference: list[str], found: list[str]) -> float:
    """Share of reference words found (as a multiset)."""
    left: dict[str, int] = {}
    for w in found:
        left[w] = left.get(w, 0) + 1
    hit = 0
    for w in reference:
        if left.get(w, 0) > 0:
            left[w] -= 1
            hit += 1
    return hit / len(reference)


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def mixed_result(tmp_path_factory: pytest.TempPathFactory):
    """Three pages: born-digital, scanned, born-digital."""
    path = _write(tmp_path_factory.mktemp("mixed"), "mixed.pdf", scanned(text_pdf(3), {2}))
    return extract_pdf(path, PdfOptions(), LIMITS)


def test_a_scanned_page_reads_back_its_words(mixed_result) -> None:
    page = mixed_result.pages[1]
    reference = [w for line in page_lines(2) for w in line.split()]
    assert recall(reference, words(page.text)) >= 0.95
    # Reading order and real spaces: the lines come back whole, top to bottom.
    assert [b.text for b in page.boxes] == page_lines(2)


def test_only_the_scanned_page_is_ocrd(mixed_result) -> None:
    assert [p.path for p in mixed_result.pages] == ["text_layer", "ocr", "text_layer"]
    assert [p.ocr_reason for p in mixed_result.pages] == [None, "no_text", None]
    assert mixed_result.pages[0].confidence is None
    assert 0.5 <= mixed_result.pages[1].confidence <= 1.0


def test_ocr_lines_lie_inside_the_page_in_points(mixed_result) -> None:
    page = mixed_result.pages[1]
    assert (page.width, page.height) == (595, 842)
    assert len(page.boxes) == 6
    for box in page.boxes:
        assert box.x >= 0 and box.y >= 0 and box.width > 0 and box.height > 0
        assert box.x + box.width <= page.width and box.y + box.height <= page.height
        assert 0.5 <= box.confidence <= 1.0
    # The born-digital page's lines start at x=72 pt, y=72 pt baseline; the scan's boxes agree.
    first = page.boxes[0]
    assert 60 < first.x < 80 and 55 < first.y < 75


def test_provenance_names_the_ocr_models(mixed_result) -> None:
    producer = mixed_result.producer
    assert producer.extractor_version == PDF_SPEC.extractor_version  # the shipped manifest's
    # The OCR engine's threads change its numbers: named, so they are part of the loci's derivation.
    assert producer.options == {"ocr": "auto", "dpi": 200, "rotated_lines": False, "ocr_threads": 1}
    names = [m.name for m in producer.models]
    assert any(n.endswith("ch_PP-OCRv4_det_infer.onnx") for n in names)
    # The recognisers: PP-OCRv6 tiny from the faster-paddle wheel reads every line, PP-OCRv6 small
    # (its dictionary inside it, from RapidOCR's rapidocr wheel) the lines tiny is unsure of.
    assert any(n.startswith("rapidocr ") and n.endswith(": PP-OCRv6_rec_small.onnx") for n in names)
    assert any(n.startswith("faster-paddle ") and n.endswith(": PP-OCRv6_rec_tiny.onnx") for n in names)
    assert all(n.startswith(("rapidocr-onnxruntime ", "rapidocr ", "faster-paddle ")) for n in names)
    assert all(m.digest.startswith("sha256:") for m in producer.models)


def test_a_born_digital_pdf_runs_no_ocr(tmp_path: Path) -> None:
    result = extract_pdf(_write(tmp_path, "t.pdf", text_pdf(2)), PdfOptions(), LIMITS)
    assert [p.path for p in result.pages] == ["text_layer", "text_layer"]
    assert result.producer.models == []


def test_ocr_never_keeps_the_empty_text_layer(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.pdf", scanned(text_pdf(1)))
    result = extract_pdf(path, PdfOptions(ocr="never"), LIMITS)
    assert result.pages[0].path == "text_layer"
    assert result.pages[0].text == "" and result.pages[0].boxes == []


def test_a_scan_with_a_stamped_page_number_is_image_only(tmp_path: Path) -> None:
    doc = pymupdf.open(stream=scanned(text_pdf(1), stamp="p. 12"), filetype="pdf")
    page = doc[0]
    lines = [TextBox(text="p. 12", x=535, y=815, width=20, height=8)]
    assert ocr_reason(page, lines, "auto") == "image_only"
    assert ocr_reason(page, lines, "never") is None
    assert ocr_reason(page, lines, "always") == "requested"


def test_unmapped_glyphs_send_a_page_to_ocr() -> None:
    doc = pymupdf.open(stream=text_pdf(1), filetype="pdf")
    page = doc[0]
    garbage = [TextBox(text="\ufffd\ufffd\ufffd \ufffd\ufffd ab", x=72, y=72, width=200, height=12)]
    assert ocr_reason(page, garbage, "auto") == "unmapped_glyphs"
    fine = [TextBox(text="a readable line", x=72, y=72, width=200, height=12)]
    assert ocr_reason(page, fine, "auto") is None
    assert ocr_reason(page, [], "auto") == "no_text"


def test_an_all_black_page_is_ok_with_no_lines(tmp_path: Path) -> None:
    result = extract_pdf(_write(tmp_path, "black.pdf", black_page_pdf()), PdfOptions(), LIMITS)
    page = result.pages[0]
    assert page.path == "ocr" and page.ocr_reason == "no_text"
    assert page.text == "" and page.boxes == [] and page.confidence is None


def test_a_page_over_the_pixel_limit_is_refused_before_rendering(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.pdf", scanned(text_pdf(1)))
    small = Limits(max_bytes=1 << 30, max_pages=10, max_pixels=1_000_000)  # A4 at 200 dpi is 3.9 Mpx
    with pytest.raises(LimitExceeded) as err:
        extract_pdf(path, PdfOptions(), small)
    assert err.value.code == ErrorCode.TOO_MANY_PIXELS
    assert str(path) not in err.value.message
    # At 72 dpi the same page fits (and is read, if less well).
    assert extract_pdf(path, PdfOptions(dpi=72), small).pages[0].path == "ocr"


def test_a_rotated_scanned_page_maps_boxes_to_the_displayed_page(tmp_path: Path) -> None:
    doc = pymupdf.open(stream=scanned(text_pdf(1, lines=2)), filetype="pdf")
    doc[0].set_rotation(90)
    path = _write(tmp_path, "r.pdf", doc.tobytes())
    page = extract_pdf(path, PdfOptions(), LIMITS).pages[0]
    assert (page.width, page.height, page.rotation) == (842, 595, 90)
    assert page.boxes
    for box in page.boxes:
        assert box.x + box.width <= page.width and box.y + box.height <= page.height


def test_the_bundle_of_a_mixed_pdf_has_valid_loci(tmp_path: Path) -> None:
    pdf = scanned(text_pdf(2), {2})
    bundle = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(pdf).bundle()
    assert bundle.status == "ok", bundle.error
    assert assert_engine_valid(bundle) == 2 * (1 + 1 + 6)
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] is True
    ocr_lines = [n for n in bundle.nodes if n.node_type == "Evidence" and n.properties.get("path") == "ocr"
                 and n.properties["locus_kind"] == "image_region"]
    assert len(ocr_lines) == 6
    assert all(0.5 <= n.properties["confidence"] <= 1.0 for n in ocr_lines)
    assert all(n.properties["image_id"].endswith(":page2") for n in ocr_lines)


@pytest.mark.integration
def test_a_mixed_pdf_through_the_fleet_equals_in_process(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    pdf = scanned(text_pdf(2), {1})
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    local = Dispatcher(Settings(blob_root=tmp_path / "local-blobs"))
    remote_bundle = fleet.submit(pdf, options={"ocr": "auto"}).bundle(timeout=300)
    assert remote_bundle.status == "ok", remote_bundle.error
    assert without_run(remote_bundle) == without_run(local.submit(pdf, options={"ocr": "auto"}).bundle())
    paths = {n.properties["page"]: n.properties["path"] for n in remote_bundle.nodes
             if n.node_type == "Evidence" and n.properties["locus_kind"] == "page_region"}
    assert paths == {1: "ocr", 2: "text_layer"}
