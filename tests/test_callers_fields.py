"""The optional fields the callers' adapters read, filled honestly and read back through their own
decoding (agent-utilities ``agent_utilities/media/image_sidecar.py`` and ``pdf_sidecar.py``,
mimicked line for line below): a region's ``crop_png_b64``, the media-type disagreement where the
image adapter keeps it (the whole-image region's label), and a PDF page's ``embedding``."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont

from mediafleet.dispatch import Dispatcher
from mediafleet.mcp.server import SidecarTools
from mediafleet.settings import Settings
from mediafleet.workers.image.crops import CROP_SIDE
from tests.media import text_pdf

LINES = ("HARBOUR REPORT 2024", "Second line of text")


def lines_png(size: tuple[int, int] = (900, 300), font_size: int = 40, lines: tuple[str, ...] = LINES) -> bytes:
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=font_size)
    for i, line in enumerate(lines):
        draw.text((40, 40 + i * font_size * 2.5), line, fill="black", font=font)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def call(tools: SidecarTools, tool: str, action: str, data: bytes, media_type: str) -> dict[str, Any]:
    params = {"digest": "sha256:" + hashlib.sha256(data).hexdigest(), "media_type": media_type,
              "artifact_b64": base64.b64encode(data).decode()}
    response, failed = tools.call(tool, {"action": action, "params_json": json.dumps(params)})
    assert not failed, response
    # The callers decode the tool result's text (sidecar_delegate._decode_result): one JSON object.
    decoded = json.loads(json.dumps(response))
    assert isinstance(decoded, dict) and decoded.get("available", True)
    return decoded


def their_region_records(raw: dict[str, Any]) -> list[tuple[bytes, str, tuple[float, ...]]]:
    """image_sidecar.ingest_jpeg_via_sidecar's region loop: the bytes and MIME type each region is
    stored with (the crop's PNG, else a JSON descriptor of label and confidence), and its box."""
    regions = raw.get("regions")
    regions = regions if isinstance(regions, list) else []
    out = []
    for region in regions:
        if not isinstance(region, dict):
            continue
        crop_b64 = region.get("crop_png_b64")
        region_bytes = b""
        if isinstance(crop_b64, str) and crop_b64:
            try:
                region_bytes = base64.b64decode(crop_b64)
            except (ValueError, TypeError):
                region_bytes = b""
        if region_bytes:
            region_mime = "image/png"
        else:
            region_bytes = json.dumps({"label": region.get("label"), "confidence": region.get("confidence")}).encode()
            region_mime = "application/json"
        box = tuple(float(region.get(k) or 0.0) for k in ("x", "y", "width", "height"))
        out.append((region_bytes, region_mime, box))
    return out


def their_page_embeddings(raw: dict[str, Any]) -> dict[int, list[float] | None]:
    """pdf_sidecar.ingest_pdf_via_sidecar's page loop: the embedding each page is stored with."""
    out: dict[int, list[float] | None] = {}
    for page in raw.get("pages") or []:
        embedding = page.get("embedding")
        out[int(page.get("page") or 0)] = list(embedding) if isinstance(embedding, list) else None
    return out


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> SidecarTools:
    root = tmp_path_factory.mktemp("fields")
    return SidecarTools(Dispatcher(Settings(blob_root=root / "blobs")), detached=False, wait_s=600,
                        jobs_root=root / "jobs")


def test_a_png_sent_as_jpeg_gets_png_crops_of_its_lines_and_says_the_disagreement(tools: SidecarTools) -> None:
    png = lines_png()
    raw = call(tools, "image_decode", "analyze_image", png, "image/jpeg")  # their adapter always says jpeg
    records = their_region_records(raw)
    (whole_bytes, whole_mime, whole_box), *lines = records
    # The whole image: no crop (the thumbnail shows it); its descriptor keeps the disagreement.
    assert whole_mime == "application/json" and whole_box == (0.0, 0.0, 900.0, 300.0)
    assert json.loads(whole_bytes) == {"label": "image (image/png; claimed image/jpeg)", "confidence": None}
    assert (raw["media_type"], raw["claimed_media_type"], raw["media_type_agrees"]) == ("image/png", "image/jpeg",
                                                                                         False)
    assert [r["label"] for r in raw["regions"][1:]] == list(LINES)
    original = Image.open(io.BytesIO(png)).convert("RGB")
    for crop_bytes, mime, (x, y, width, height) in lines:
        assert mime == "image/png"
        crop = Image.open(io.BytesIO(crop_bytes))
        assert crop.format == "PNG"
        box = (math.floor(x), math.floor(y), math.ceil(x + width), math.ceil(y + height))
        # Exactly the pixels inside the box (under 512 px, so not scaled).
        assert crop.size == (box[2] - box[0], box[3] - box[1])
        assert crop.convert("RGB").tobytes() == original.crop(box).tobytes()


def test_a_jpeg_sent_as_jpeg_keeps_the_plain_label(tools: SidecarTools) -> None:
    image = Image.open(io.BytesIO(lines_png()))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=95)
    raw = call(tools, "image_decode", "analyze_image", out.getvalue(), "image/jpeg")
    assert raw["regions"][0]["label"] == "image" and raw["media_type_agrees"] is True


def test_crops_are_bounded_in_size_and_count_and_can_be_turned_off(tmp_path: Path) -> None:
    big = lines_png((2400, 400), font_size=150, lines=("WIDE LINE",))
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    one = SidecarTools(dispatcher, detached=False, wait_s=600, jobs_root=tmp_path / "jobs", region_crops=1)
    raw = call(one, "image_decode", "analyze_image", big, "image/png")
    (_, line), = [(r, r) for r in raw["regions"][1:]]
    crop = Image.open(io.BytesIO(base64.b64decode(line["crop_png_b64"])))
    assert line["width"] > CROP_SIDE and max(crop.size) == CROP_SIDE  # scaled down, aspect kept
    assert abs(crop.size[0] / crop.size[1] - line["width"] / line["height"]) < 0.05
    two_lines = call(one, "image_decode", "analyze_image", lines_png(), "image/png")
    assert ["crop_png_b64" in r for r in two_lines["regions"]] == [False, True, False]  # at most 1
    off = SidecarTools(dispatcher, detached=False, wait_s=600, jobs_root=tmp_path / "jobs", region_crops=0)
    raw = call(off, "image_decode", "analyze_image", lines_png(), "image/png")
    assert not any("crop_png_b64" in r for r in raw["regions"])
    assert [mime for _, mime, _ in their_region_records(raw)] == ["application/json"] * 3


def test_pdf_pages_carry_the_static_embedding_of_their_text(tools: SidecarTools, tmp_path: Path) -> None:
    from mediafleet.discovery.embedding import default_embedder
    from mediafleet.discovery.text import matched_form

    raw = call(tools, "pdf_action", "ocr_pdf", text_pdf(2), "application/pdf")
    embeddings = their_page_embeddings(raw)
    assert sorted(embeddings) == [1, 2]
    expected = default_embedder().embed([matched_form(p["text"]) for p in raw["pages"]])
    for page, vector in embeddings.items():
        assert vector is not None and len(vector) == 256
        assert abs(math.fsum(v * v for v in vector) - 1.0) < 1e-4  # unit length
        assert max(abs(a - float(b)) for a, b in zip(vector, expected[page - 1], strict=True)) < 1e-6
    assert embeddings[1] != embeddings[2]
    assert raw["embedding_model"].startswith("wordllama/l2_supercat_256@")
    off = SidecarTools(Dispatcher(Settings(blob_root=tmp_path / "blobs")), detached=False, wait_s=600,
                       jobs_root=tmp_path / "jobs", embeddings=False)
    raw = call(off, "pdf_action", "ocr_pdf", text_pdf(2), "application/pdf")
    assert their_page_embeddings(raw) == {1: None, 2: None} and "embedding_model" not in raw
