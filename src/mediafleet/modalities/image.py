"""The image modality (``analyze_image``): what the fleet needs to know of it, in one place."""

from __future__ import annotations

from mediafleet.contract.manifest import Modality
from mediafleet.modalities.spec import ModalitySpec, Ref, threads_change_numbers

__all__ = ["SPEC"]


def _sniff(head: bytes) -> str | None:
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith((b"GIF87a", b"GIF89a")):  # named, so a refusal can say what it is
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "image/tiff"
    if head.startswith(b"BM") and len(head) >= 26:
        return "image/bmp"
    return None


SPEC = ModalitySpec(
    modality=Modality.IMAGE,
    action="analyze_image",
    extractor_name="mediafleet.image.analyze",
    media_types=("image/jpeg", "image/png", "image/gif", "image/webp", "image/tiff", "image/bmp"),
    sniff=_sniff,
    extractor=Ref("mediafleet.workers.image.analyze:analyze_image"),
    device_check=Ref("mediafleet.workers.ocr.device:check_device"),
    read_check=Ref("mediafleet.modalities.spec:reads_whole"),
    progress_unit="pages",
    loci=Ref("mediafleet.adapters.image:image_loci"),
    caller_shape=Ref("mediafleet.adapters.caller:image_shape"),
    summary=Ref("mediafleet.report.text:image_summary"),
    opencv=True,  # rapidocr
    numerics=threads_change_numbers,  # its OCR is onnxruntime's
)
