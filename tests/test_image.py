"""``analyze_image``: the RapidOCR corpus images with their upstream answers, images made here
with known text, the pHash, thumbnails in the blob store, and every bad input the issue names."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from mediafleet.contract import ErrorCode, ImageOptions, InputRejected, LimitExceeded, Limits
from mediafleet import Dispatcher, Settings
from tests.helpers import assert_engine_valid
from mediafleet.workers.image.analyze import analyze_image
from mediafleet.workers.image.phash import hamming, phash
from mediafleet.workers.sink import MemorySink

LIMITS = Limits(max_bytes=1 << 30, max_pages=20, max_pixels=50_000_000)


def _analyze(path: Path, limits: Limits = LIMITS, sink: MemorySink | None = None):
    return analyze_image(path, ImageOptions(), limits, None, sink if sink is not None else MemorySink())


def text_image(text: str, size: tuple[int, int] = (640, 160), fg: int = 0, bg: int = 255) -> Image.Image:
    image = Image.new("L", size, bg)
    font = ImageFont.load_default(size=48)
    ImageDraw.Draw(image).text((24, max(4, (size[1] - 56) // 2)), text, fill=fg, font=font)
    return image


def encode(image: Image.Image, fmt: str, **kwargs: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` and whose data is a few bytes: a bomb."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b"")


# -- the corpus (answers from RapidOCR's own tests) ------------------------------------------------

@pytest.mark.corpus
def test_corpus_first_line_is_test(corpus: Path) -> None:
    page = _analyze(corpus / "image" / "issue_170.png").pages[0]
    assert page.regions[0].text == "TEST"


@pytest.mark.corpus
def test_corpus_chinese_and_numbers_has_18_lines(corpus: Path) -> None:
    page = _analyze(corpus / "image" / "ch_en_num.jpg").pages[0]
    assert len(page.regions) == 18
    assert page.regions[0].text == "正品促销"
    for box in page.regions:
        assert box.x >= 0 and box.y >= 0 and box.x + box.width <= page.width and box.y + box.height <= page.height


@pytest.mark.corpus
def test_corpus_exif_image_is_read_upright(corpus: Path) -> None:
    page = _analyze(corpus / "image" / "img_exif_orientation.jpg").pages[0]
    assert page.orientation == 3
    assert page.regions[0].text == "我是中国人"
    # Orientation 3 turns the image half way round: the text sits in the upright image's middle.
    box = page.regions[0]
    assert box.x + box.width <= page.width and box.y + box.height <= page.height


# -- images made here -------------------------------------------------------------------------------

def test_text_png_is_read_with_its_spaces(tmp_path: Path) -> None:
    sink = MemorySink()
    result = _analyze(_write(tmp_path, "t.png", encode(text_image("Located evidence"), "PNG")), sink=sink)
    page = result.pages[0]
    assert (result.page_count, page.page, page.width, page.height) == (1, 1, 640, 160)
    assert [r.text for r in page.regions] == ["Located evidence"]
    assert 0.5 <= page.regions[0].confidence <= 1.0
    assert result.producer.engine == "rapidocr-onnxruntime"
    assert {m.name.rsplit(": ", 1)[1] for m in result.producer.models} == {
        "ch_PP-OCRv4_det_infer.onnx", "PP-OCRv6_rec_tiny.onnx", "PP-OCRv6_rec_small.onnx"}


def test_the_thumbnail_goes_to_the_sink_and_only_its_digest_to_the_result(tmp_path: Path) -> None:
    sink = MemorySink()
    page = _analyze(_write(tmp_path, "t.jpg", encode(text_image("Thumb", (1200, 300)).convert("RGB"), "JPEG")),
                    sink=sink).pages[0]
    assert page.thumbnail in sink.blobs
    thumb = Image.open(io.BytesIO(sink.blobs[page.thumbnail]))
    assert thumb.format == "PNG" and max(thumb.size) == 256 and thumb.size == (256, 64)
    assert page.model_dump_json().count(page.thumbnail) == 1 and len(page.model_dump_json()) < 2000


def test_exif_orientation_is_applied_before_reading(tmp_path: Path) -> None:
    upright = text_image("Upright", (480, 120)).convert("RGB")
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # what a camera held sideways stores
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to view"
    page = _analyze(_write(tmp_path, "e.jpg", encode(stored, "JPEG", exif=exif, quality=95))).pages[0]
    assert (page.orientation, page.width, page.height) == (6, 480, 120)
    assert [r.text for r in page.regions] == ["Upright"]


@pytest.mark.slow
def test_each_tiff_frame_is_its_own_page(tmp_path: Path) -> None:
    first, second = text_image("First page"), text_image("Second page")
    data = encode(first, "TIFF", save_all=True, append_images=[second])
    result = _analyze(_write(tmp_path, "m.tif", data))
    assert result.page_count == 2 and [p.page for p in result.pages] == [1, 2]
    assert [[r.text for r in p.regions] for p in result.pages] == [["First page"], ["Second page"]]
    assert result.pages[0].phash != result.pages[1].phash


@pytest.mark.parametrize("fmt", ["WEBP", "BMP"])
def test_webp_and_bmp_are_read(tmp_path: Path, fmt: str) -> None:
    data = encode(text_image("Format check").convert("RGB"), fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    assert [r.text for r in _analyze(_write(tmp_path, f"f.{fmt.lower()}", data)).pages[0].regions] == ["Format check"]


@pytest.mark.parametrize("colour", [255, 0])
def test_an_image_with_no_text_is_ok_with_no_regions(tmp_path: Path, colour: int) -> None:
    page = _analyze(_write(tmp_path, "plain.png", encode(Image.new("RGB", (300, 200), (colour,) * 3), "PNG"))).pages[0]
    assert page.regions == [] and (page.width, page.height) == (300, 200)


def test_a_one_line_strip_is_read(tmp_path: Path) -> None:
    strip = text_image("A single line of text on a strip", (1100, 70))
    page = _analyze(_write(tmp_path, "strip.png", encode(strip, "PNG"))).pages[0]
    assert [r.text for r in page.regions] == ["A single line of text on a strip"]


@pytest.mark.parametrize("size", [(5, 3000), (5000, 5), (1, 1)])
def test_extreme_shapes_are_analysed_within_bounded_memory(tmp_path: Path, size: tuple[int, int]) -> None:
    # The detector scales the shorter side up to 736 px; unpadded, a 5 x 3000 strip would need ~4 GB.
    page = _analyze(_write(tmp_path, "odd.png", encode(Image.new("L", size, 0), "PNG"))).pages[0]
    assert (page.width, page.height) == size and page.regions == []


# -- pHash ----------------------------------------------------------------------------------------

def test_phash_is_64_bits_and_stable_under_re_encoding() -> None:
    image = text_image("Perceptual hash", (800, 400)).convert("RGB")
    again = Image.open(io.BytesIO(encode(image, "JPEG", quality=80)))
    smaller = image.resize((400, 200))
    h = phash(image)
    assert len(h) == 16 and int(h, 16) >= 0
    assert h == phash(image.copy())
    assert hamming(h, phash(again)) <= 4
    assert hamming(h, phash(smaller)) <= 4
    other = text_image("Something else entirely", (800, 400)).transpose(Image.Transpose.FLIP_TOP_BOTTOM)
    assert hamming(h, phash(other)) >= 12


# -- bad input ------------------------------------------------------------------------------------

def test_a_truncated_jpeg_is_corrupt_input(tmp_path: Path) -> None:
    data = encode(text_image("Truncated").convert("RGB"), "JPEG")
    with pytest.raises(InputRejected) as err:
        _analyze(_write(tmp_path, "cut.jpg", data[: len(data) // 2]))
    assert err.value.code == ErrorCode.CORRUPT_INPUT
    assert "cut.jpg" not in err.value.message and str(tmp_path) not in err.value.message


def test_garbage_after_a_png_signature_is_corrupt_input(tmp_path: Path) -> None:
    with pytest.raises(InputRejected) as err:
        _analyze(_write(tmp_path, "bad.png", b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 50))
    assert err.value.code == ErrorCode.CORRUPT_INPUT


def test_a_decompression_bomb_is_refused_from_its_header(tmp_path: Path) -> None:
    bomb = _write(tmp_path, "bomb.png", png_header_only(60_000, 60_000))  # 3.6 Gpx in ~100 bytes
    with pytest.raises(LimitExceeded) as err:
        _analyze(bomb)
    assert err.value.code == ErrorCode.TOO_MANY_PIXELS
    modest = _write(tmp_path, "big.png", png_header_only(8_000, 8_000))  # 64 Mpx: over the manifest's 50
    with pytest.raises(LimitExceeded) as err:
        _analyze(modest)
    assert err.value.code == ErrorCode.TOO_MANY_PIXELS


def test_too_many_tiff_pages_are_refused(tmp_path: Path) -> None:
    frames = [Image.new("L", (40, 40), 255) for _ in range(3)]
    path = _write(tmp_path, "many.tif", encode(frames[0], "TIFF", save_all=True, append_images=frames[1:]))
    with pytest.raises(LimitExceeded) as err:
        _analyze(path, Limits(max_bytes=1 << 20, max_pages=2, max_pixels=10_000))
    assert err.value.code == ErrorCode.TOO_MANY_PAGES


# -- through the dispatcher and the fleet ----------------------------------------------------------

def test_the_bundle_has_valid_image_loci(tmp_path: Path) -> None:
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    bundle = dispatcher.submit(encode(text_image("Evidence line"), "PNG")).bundle()
    assert bundle.status == "ok", bundle.error
    assert bundle.action == "analyze_image"
    assert assert_engine_valid(bundle) == 2
    evidence = [n.properties for n in bundle.nodes if n.node_type == "Evidence"]
    whole, line = evidence
    assert whole["region"] == "image" and len(whole["phash"]) == 16
    assert dispatcher.store.exists(whole["thumbnail"])
    assert line["text"] == "Evidence line" and line["coordinate_space"] == "image_pixels_upright"
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] is True


@pytest.mark.integration
def test_the_fleet_serves_a_good_image_after_a_corrupt_one(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1")
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    data = encode(text_image("Still serving").convert("RGB"), "JPEG")
    broken = fleet.submit(data[: len(data) // 2]).bundle(timeout=300)
    assert broken.status == "failed" and broken.error.code == ErrorCode.CORRUPT_INPUT
    good = fleet.submit(data).bundle(timeout=300)
    assert good.status == "ok", good.error
    texts = [n.properties.get("text") for n in good.nodes if n.node_type == "Evidence"]
    assert "Still serving" in texts
    assert assert_engine_valid(good) == 2


# -- region crops (the callers' crop_png_b64) --------------------------------------------------------------


def test_region_crops_are_the_upright_pixels_of_each_box_bounded_in_size_and_count(tmp_path: Path) -> None:
    import io
    import math

    from PIL import Image

    from mediafleet.contract.manifest import Limits
    from mediafleet.workers.image.crops import Box, region_crops

    upright = Image.new("RGB", (300, 200), "white")
    for x in range(300):
        for y in range(0, 200, 7):
            upright.putpixel((x, y), (x % 256, y, 90))
    # Stored rotated, with the EXIF orientation (6: turn 90 degrees clockwise) that makes it upright.
    stored = upright.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.png"
    stored.save(path, format="PNG", exif=exif)
    limits = Limits(max_bytes=10**8, max_pixels=10**7, max_pages=10)
    boxes = [Box(1, 10.5, 20.2, 50.0, 30.0), Box(1, 0, 0, 300, 200), Box(1, 290, 190, 0.2, 0.2), Box(1, 5, 5, 9, 9)]
    first, whole, tiny, past = region_crops(path, boxes, limits, max_side=128, max_count=3)
    crop = Image.open(io.BytesIO(first))
    assert crop.format == "PNG" and crop.size == (51, 31)
    assert crop.convert("RGB").tobytes() == upright.crop((10, 20, math.ceil(60.5), math.ceil(50.2))).tobytes()
    assert max(Image.open(io.BytesIO(whole)).size) == 128  # scaled down to max_side, aspect kept
    assert Image.open(io.BytesIO(whole)).size == (128, 85)
    assert tiny is not None and Image.open(io.BytesIO(tiny)).size == (1, 1)
    assert past is None  # past max_count
    assert region_crops(path, boxes, limits, max_count=0) == [None] * 4
