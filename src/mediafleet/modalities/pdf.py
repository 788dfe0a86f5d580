"""The PDF modality (``ocr_pdf``): what the fleet needs to know of it, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediafleet.contract.manifest import Modality
from mediafleet.modalities.spec import THREAD_NUMERICS, ModalitySpec, Ref

__all__ = ["SPEC"]


def _sniff(head: bytes) -> str | None:
    return "application/pdf" if head.startswith(b"%PDF-") else None


def _numerics(options: Mapping[str, Any]) -> frozenset[str]:
    """The text layer is read exactly; only OCR (onnxruntime) depends on the thread count."""
    return frozenset() if options.get("ocr") == "never" else THREAD_NUMERICS


SPEC = ModalitySpec(
    modality=Modality.PDF,
    action="ocr_pdf",
    extractor_name="mediafleet.pdf.textlayer",
    media_types=("application/pdf",),
    sniff=_sniff,
    extractor=Ref("mediafleet.workers.pdf.textlayer:extract_pdf"),
    device_check=Ref("mediafleet.workers.ocr.device:check_device"),  # scanned pages are OCR'd
    # Imported only by processes that read PDFs: a lost xref MuPDF rebuilt leaves the claim unverified.
    read_check=Ref("mediafleet.workers.pdf.integrity:read_whole"),
    progress_unit="pages",
    loci=Ref("mediafleet.adapters.pdf:pdf_loci"),
    caller_shape=Ref("mediafleet.adapters.caller:pdf_shape"),
    summary=Ref("mediafleet.report.text:pdf_summary"),
    opencv=False,
    numerics=_numerics,
    parts={"pages": Ref("mediafleet.workers.pdf.split:PAGES")},
)
