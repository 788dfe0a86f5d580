"""The exact success object of the seed's investigative profile, ``atmem-evidence-discovery-v1``.

::

    {"format": "atmem-evidence-discovery-v1", "request_id": "host-request:discovery:1",
     "generation": 1, "status": "investigative_evidence", "sufficiency": "not_assessed",
     "channels": ["lexical"], "evidence": [], "omitted_count": 0, "operations_used": 1}

Each evidence object holds ``unit_id``, the original ``text`` (and ``text_digest``) and
``source_range`` (the artifact's identity and digest, the address with its offsets, the
generation). Media units add explicitly named fields: ``time_frame`` for audio and a video's
speech, ``page_box`` for a box on a PDF page, ``image_box`` for a region of an image,
``character_offsets`` for a span of a document's text, and every unit an ``assurance`` saying how
its text was obtained (machine transcription and OCR are not verified readings). A search's items
add ``matched_terms`` (which of the query's words, normalised, the unit holds: limited assurance,
a partial or semantic nomination holds only some) and ``nominated_by`` (the channels that nominated it).
"""

from __future__ import annotations

from typing import Any

from mediafleet.discovery.index import StoredUnit
from mediafleet.discovery.units import text_digest

__all__ = ["ANSWER_FORMAT", "answer", "evidence_object"]

ANSWER_FORMAT = "atmem-evidence-discovery-v1"
_ASSURANCE_NOTE = "machine-extracted text at a located source; not verified, and not evidence of sufficiency"


def _method(source: dict[str, Any]) -> str:
    kind = source["locus_kind"]
    if kind == "audio_range":
        return "speech_recognition"
    if source.get("path") == "ocr" or source.get("coordinate_space") == "image_pixels_upright":
        return "ocr"
    if source.get("path") == "text_layer":
        return "pdf_text_layer"
    return "extraction"


def evidence_object(stored: StoredUnit, *, matched_terms: list[str] | None = None,
                    nominated_by: tuple[str, ...] | None = None) -> dict[str, Any]:
    """One delivered unit, as the model receives it.

    Args:
        stored: the unit, reloaded.
        matched_terms: a search's words (normalised) that the unit holds; ``None`` for an inspect.
        nominated_by: the channels that nominated it; ``None`` for an inspect.
    """
    unit = stored.unit
    source = unit.source_range
    address = source["address"]
    generation = source.get("generation", {})
    source_range: dict[str, Any] = {
        "artifact_digest": source["artifact"]["digest"],
        "media_type": source["artifact"]["media_type"],
        "modality": source["artifact"]["modality"],
        "occurrence_id": source.get("occurrence_id"),
        "locus_kind": source["locus_kind"],
        "address": address,
        "generation": stored.generation,
        "derivation_ref": unit.derivation_ref,
        **{k: generation[k] for k in ("job_id", "extractor", "extractor_version", "engine", "engine_version")
           if k in generation},
    }
    out: dict[str, Any] = {"unit_id": unit.unit_id, "text": unit.text, "text_digest": text_digest(unit.text),
                           "source_range": source_range}
    kind = source["locus_kind"]
    if kind in ("audio_range", "video_time_range"):
        out["time_frame"] = {"start_ms": address["start_ms"], "end_ms": address["end_ms"],
                             "timeline": source.get("timeline", "media_ms"),
                             "of": "video" if "video_id" in source else "audio"}
    elif kind == "page_region" or source.get("coordinate_space") == "pdf_points_top_left":
        out["page_box"] = {"page": address.get("page", source.get("page")), "x": address["x"], "y": address["y"],
                           "width": address["width"], "height": address["height"],
                           "coordinate_space": "pdf_points_top_left"}
    elif kind == "image_region":
        out["image_box"] = {"x": address["x"], "y": address["y"], "width": address["width"],
                            "height": address["height"], "coordinate_space": source.get("coordinate_space")}
    elif kind == "character_range":
        out["character_offsets"] = {"start": address["start"], "end": address["end"],
                                    "page": source.get("page"), "text_unit": "unicode_code_points"}
    out["assurance"] = {"method": _method(source), "confidence": source.get("confidence"), "note": _ASSURANCE_NOTE}
    if matched_terms is not None:
        out["matched_terms"] = matched_terms
    if nominated_by is not None:
        out["nominated_by"] = list(nominated_by)
    return out


def answer(request_id: str, generation: int, evidence: list[dict[str, Any]], omitted_count: int,
           operations_used: int, *, channels: list[str] | None = None) -> dict[str, Any]:
    """The success object, keys in the seed's order; ``channels``: those that took part (default lexical)."""
    return {
        "format": ANSWER_FORMAT,
        "request_id": request_id,
        "generation": generation,
        "status": "investigative_evidence",
        "sufficiency": "not_assessed",
        "channels": channels or ["lexical"],
        "evidence": evidence,
        "omitted_count": omitted_count,
        "operations_used": operations_used,
    }
