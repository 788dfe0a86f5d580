"""A bundle in a few lines of text: what ``mediafleet extract`` prints for each file.

What was found (pages and lines, the image's text, the transcript's first words, the shots) and
whether the claim was verified; read only from the bundle's loci, like the HTML report.
"""

from __future__ import annotations

from typing import Any

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.modalities.registry import for_modality

__all__ = ["audio_summary", "image_summary", "pdf_summary", "summary_lines", "video_summary"]

_WORDS = 14
_SHOTS = 6


def _first_words(texts: list[str], words: int = _WORDS) -> str:
    found = " ".join(" ".join(texts).split()).split(" ")
    if not found or found == [""]:
        return ""
    cut = " ".join(found[:words])
    return f'"{cut}{"…" if len(found) > words else ""}"'


def _s(ms: int) -> str:
    return f"{ms / 1000:.1f} s"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _evidence(bundle: EvidenceBundle) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(n.properties["evidence_locus"]["address"], n.properties) for n in bundle.nodes if n.node_type == "Evidence"]


def pdf_summary(loci: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    pages = [p for a, p in loci if a["kind"] == "page_region"]
    ocr = sum(1 for p in pages if p.get("path") == "ocr")
    lines = sum(1 for a, _ in loci if a["kind"] == "image_region")
    how = "OCR" if ocr == len(pages) and ocr else (f"{ocr} by OCR" if ocr else "text layer")
    head = f"{_plural(len(pages), 'page')} ({how}), {_plural(lines, 'text line')}"
    words = _first_words([p.get("text", "") for a, p in loci if a["kind"] == "character_range"])
    return [head, *([words] if words else ["no text"])]


def image_summary(loci: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    whole = [a for a, p in loci if a["kind"] == "image_region" and p.get("region") == "image"]
    lines = [p.get("text", "") for a, p in loci if a["kind"] == "image_region" and p.get("region") != "image"]
    size = f"{whole[0]['width']:.0f} x {whole[0]['height']:.0f} px" if whole else "no page"
    pages = f", {_plural(len(whole), 'page')}" if len(whole) > 1 else ""
    head = f"{size}{pages}, {_plural(len(lines), 'text line')}"
    return [head, " / ".join(f'"{t}"' for t in lines[:3]) + (" …" if len(lines) > 3 else "") if lines else "no text"]


def _speech(loci: list[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[str, list[str]]:
    segments = [(a, p) for a, p in loci if a["kind"] == "audio_range"]
    if not segments:
        return "no speech", []
    span = f"{_s(segments[0][0]['start_ms'])} to {_s(segments[-1][0]['end_ms'])}"
    words = _first_words([p.get("text", "") for _, p in segments])
    return f"{_plural(len(segments), 'speech segment')} ({span})", [words] if words else []


def audio_summary(loci: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    head, words = _speech(loci)
    return [head, *words]


def video_summary(loci: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """The length, the shots (a gradual transition between two is counted apart, not as a shot), the
    keyframes and the speech."""
    ranges = [(a, p) for a, p in loci if a["kind"] == "video_time_range"]
    shots = [a for a, p in ranges if not str(p.get("label") or "").startswith("transition:")]
    transitions = len(ranges) - len(shots)
    keys = sum(1 for a, _ in loci if a["kind"] == "frame_range")
    length = _s(ranges[-1][0]["end_ms"]) if ranges else "no frames"
    spans = ", ".join(f"{a['start_ms'] / 1000:.1f}-{a['end_ms'] / 1000:.1f}" for a in shots[:_SHOTS])
    more = ", …" if len(shots) > _SHOTS else ""
    between = f", {_plural(transitions, 'transition')}" if transitions else ""
    speech, words = _speech(loci)
    return [f"{length}, {_plural(len(shots), 'shot')} ({spans}{more} s){between}, {_plural(keys, 'keyframe')}, "
            f"{speech}", *words]


def summary_lines(name: str, bundle: EvidenceBundle) -> list[str]:
    """The lines for one bundle: ``<name>: <status> (<type>)`` then a few indented lines."""
    media_type = bundle.artifact.media_type or "type not recognised"
    if bundle.status != "ok":
        error = bundle.error
        why = f"{error.code.value}: {error.message}" if error else "no reason given"
        return [f"{name}: failed ({media_type}): {why}"]
    loci = _evidence(bundle)
    spec = for_modality(bundle.artifact.modality) if bundle.artifact.modality else None
    body = spec.summary.load()(loci) if spec is not None else [_plural(len(loci), "locus", "loci")]
    claim = next((n.properties for n in bundle.nodes if n.node_type == "Claim"), None)
    if claim is None:
        verdict = "no claim"
    elif claim.get("is_verified"):
        verdict = "claim verified: " + ", ".join(k.replace("_", " ") for k in claim.get("checks", {}))
    else:
        failed = [k.replace("_", " ") for k, ok in claim.get("checks", {}).items() if not ok]
        verdict = "claim NOT verified: failed " + ", ".join(failed)
    return [f"{name}: ok ({media_type}), {body[0]}", *(f"  {line}" for line in body[1:]), f"  {verdict}"]
