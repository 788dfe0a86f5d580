"""Evidence bundle + the artifact -> one self-contained HTML page (``mediafleet report``).

The page carries everything it shows: the loci and provenance as JSON, the rendered pages,
images, keyframes and the recording as ``data:`` URIs, and its own script and style inline. A
Content-Security-Policy forbids every network request, so opening it offline or from a mail
attachment shows the same thing. Page images are attached to the DOM only as a page comes near
the viewport, so a long document opens at once; ``#all`` (or printing) draws every page.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.contract.digests import digest_of_ref
from mediafleet.contract.errors import IntegrityError
from mediafleet.blobs.local import BlobStore, hash_file
from mediafleet.report import media

__all__ = ["DEFAULT_MAX_EMBED_BYTES", "ReportInputs", "build_report", "load_bundles", "report_file_name", "store_inputs"]

DEFAULT_MAX_EMBED_BYTES = 32 * 1024 * 1024
"""A recording or video larger than this is not embedded as a player (the time line still is)."""

_CSP = ("default-src 'none'; img-src data:; media-src data:; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'")
_KEEP = ("text", "confidence", "page", "path", "ocr_reason", "region", "label", "shot", "segment", "language",
         "start_frame", "end_frame", "time_ms", "phash", "sharpness", "near_duplicate_of_frame", "coordinate_space",
         "orientation", "width", "height", "timeline", "speaker", "speaker_count")


@dataclass(frozen=True)
class ReportInputs:
    """Where the report finds the artifact's bytes and the blobs derived from it.

    Args:
        artifact: a local copy of the artifact, already checked against the bundle's digest; None
            when it is not available (the report then shows loci and provenance without media).
        blob: ``sha256:<hex>`` -> the bytes of a derived blob (a keyframe), or None when missing.
        max_embed_bytes: the largest recording or video embedded as a player.
    """

    artifact: Path | None
    blob: Callable[[str], bytes | None]
    max_embed_bytes: int = DEFAULT_MAX_EMBED_BYTES


def load_bundles(text: str) -> list[EvidenceBundle]:
    """The bundles in a file: one JSON object (``--out``'s files) or one per line (``--json``).

    Raises:
        ValueError: the text holds no bundle, or something that is not one (the message says which line).
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("the file is empty")
    if stripped.startswith("{") and "\n{" not in stripped:
        return [EvidenceBundle.model_validate_json(stripped)]
    bundles = []
    for number, line in enumerate(stripped.splitlines(), start=1):
        if line.strip():
            try:
                bundles.append(EvidenceBundle.model_validate_json(line))
            except ValueError as exc:
                raise ValueError(f"line {number} is not an evidence bundle") from exc
    return bundles


def report_file_name(name: str, bundle: EvidenceBundle) -> str:
    """``<name>.<first 12 hex of the digest>.report.html``, beside ``--out``'s bundle files."""
    return f"{name}.{bundle.artifact.digest.removeprefix('sha256:')[:12]}.report.html"


def _locus(node_props: dict[str, Any]) -> dict[str, Any]:
    envelope = node_props["evidence_locus"]
    out = {"id": envelope["id"], "kind": envelope["address"]["kind"], "address": envelope["address"]}
    out.update({k: node_props[k] for k in _KEEP if node_props.get(k) is not None})
    return out


def _json_models(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [m for m in value if isinstance(m, dict)] if isinstance(value, list) else []


def _provenance(bundle: EvidenceBundle) -> dict[str, Any]:
    activity = next((n for n in bundle.nodes if n.node_type == "ProvenanceActivity"), None)
    claim = next((n for n in bundle.nodes if n.node_type == "Claim"), None)
    props = dict(activity.properties) if activity else {}
    agent = {k: props.pop(k) for k in ("engine", "engineVersion", "extractor", "extractorVersion") if k in props}
    models = _json_models(props.pop("models", None))
    graph = bundle.prov.get("@graph", []) if isinstance(bundle.prov, dict) else []
    types: dict[str, int] = {}
    for item in graph:
        kinds = item.get("@type", []) if isinstance(item, dict) else []
        for kind in [kinds] if isinstance(kinds, str) else kinds:
            types[kind] = types.get(kind, 0) + 1
    return {
        "activity": {"id": activity.id if activity else None, **props},
        "agent": agent,
        "models": models,
        "claim": ({"id": claim.id, **{k: claim.properties.get(k) for k in
                                      ("claim_type", "confidence", "is_verified", "checks", "locus_count", "domain")}}
                  if claim else None),
        "prov_types": types,
    }


def _pdf(evidence: list[dict[str, Any]], inputs: ReportInputs) -> tuple[dict[str, Any], dict[str, str]]:
    pages: dict[int, dict[str, Any]] = {}
    for locus in evidence:
        if locus["kind"] == "page_region":
            pages[locus["address"]["page"]] = {"page": locus["address"]["page"], "region": locus, "text": None,
                                               "boxes": [], "image": None}
    for locus in evidence:
        page = pages.get(locus.get("page", -1))
        if page is None:
            continue
        if locus["kind"] == "character_range":
            page["text"] = locus
        elif locus["kind"] == "image_region":
            page["boxes"].append(locus)
    images: dict[str, str] = {}
    if inputs.artifact is not None and pages:
        scale = media.page_scale(len(pages))
        for number, uri in media.page_images(inputs.artifact, sorted(pages), scale):
            images[f"mf-page-{number}"] = uri
            pages[number]["image"] = f"mf-page-{number}"
    return {"pages": [pages[n] for n in sorted(pages)]}, images


def _image(evidence: list[dict[str, Any]], inputs: ReportInputs, media_type: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    pages: dict[int, dict[str, Any]] = {}
    for locus in evidence:
        if locus["kind"] != "image_region":
            continue
        number = int(locus.get("page", 1))
        if locus.get("region") == "image":
            pages[number] = {"page": number, "region": locus, "boxes": [], "image": None}
        elif number in pages:
            pages[number]["boxes"].append(locus)
    images: dict[str, str] = {}
    if inputs.artifact is not None and pages and media_type:
        for number, uri in enumerate(media.image_pages(inputs.artifact, media_type, max(pages)), start=1):
            if number in pages:
                images[f"mf-page-{number}"] = uri
                pages[number]["image"] = f"mf-page-{number}"
    return {"pages": [pages[n] for n in sorted(pages)]}, images


def _player(inputs: ReportInputs, media_type: str | None, size: int) -> tuple[str | None, str | None]:
    """(data URI of the artifact, or None; why it is not embedded, or None)."""
    if inputs.artifact is None or media_type is None:
        return None, "the artifact is not available to this report"
    if size > inputs.max_embed_bytes:
        return None, f"the artifact ({size / 2**20:.0f} MiB) is larger than the {inputs.max_embed_bytes // 2**20} MiB embedded in a report"
    return media.data_uri(inputs.artifact.read_bytes(), media_type), None


def _timeline(evidence: list[dict[str, Any]], inputs: ReportInputs, media_type: str | None, size: int,
              video: bool) -> tuple[dict[str, Any], dict[str, str]]:
    segments = [loc for loc in evidence if loc["kind"] == "audio_range"]
    shots = [loc for loc in evidence if loc["kind"] == "video_time_range"]
    keyframes = [loc for loc in evidence if loc["kind"] == "frame_range"]
    ends = [loc["address"]["end_ms"] for loc in segments + shots] + [k.get("time_ms", 0) + 1 for k in keyframes]
    wave_ms, wave = (0, [])
    if inputs.artifact is not None:
        try:
            wave_ms, wave = media.waveform(inputs.artifact)
        except Exception:  # a soundtrack the decoder refuses: the time line stands without a waveform
            wave_ms, wave = 0, []
    duration = max([wave_ms, *ends, 1])
    images: dict[str, str] = {}
    for key in keyframes:
        ref = key.pop("image_blob_ref", None)
        digest = digest_of_ref(ref) if isinstance(ref, str) else None
        data = inputs.blob(digest) if digest is not None else None
        if data is not None:
            name = f"mf-frame-{key['address']['start_frame']}"
            images[name] = media.data_uri(data, key.get("image_media_type") or "image/jpeg")
            key["image"] = name
    player, why = _player(inputs, media_type, size)
    if player is not None:
        images["mf-player"] = player
    return {"duration_ms": duration, "wave": wave, "wave_ms": wave_ms, "segments": segments, "shots": shots,
            "keyframes": keyframes, "player": "mf-player" if player else None, "player_note": why,
            "video": video}, images


def _asset(name: str) -> str:
    return resources.files("mediafleet.report").joinpath("assets", name).read_text(encoding="utf-8")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element (no ``</script>``, no ``<!--``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def build_report(bundle: EvidenceBundle, title: str, inputs: ReportInputs, *,
                 generated_at: datetime | None = None) -> str:
    """The HTML page for one bundle.

    Args:
        bundle: any evidence bundle, ``ok`` or ``failed`` (a failed one shows its error and provenance).
        title: what the artifact is called (its file name).
        inputs: the artifact and derived blobs (see :class:`ReportInputs`).
        generated_at: the time printed in the footer (default: now).
    """
    evidence_nodes = [n for n in bundle.nodes if n.node_type == "Evidence"]
    evidence = [_locus(n.properties) | {"image_blob_ref": n.properties.get("image_blob_ref"),
                                        "image_media_type": n.properties.get("image_media_type")}
                for n in evidence_nodes]
    for locus in evidence:
        if locus["kind"] != "frame_range":
            locus.pop("image_blob_ref"), locus.pop("image_media_type")
    modality = bundle.artifact.modality.value if bundle.artifact.modality else None
    view: dict[str, Any] = {}
    images: dict[str, str] = {}
    if bundle.status == "ok":
        if modality == "pdf":
            view, images = _pdf(evidence, inputs)
        elif modality == "image":
            view, images = _image(evidence, inputs, bundle.artifact.media_type)
        elif modality in ("audio", "video"):
            view, images = _timeline(evidence, inputs, bundle.artifact.media_type, bundle.artifact.bytes,
                                     video=modality == "video")
    kinds: dict[str, int] = {}
    for locus in evidence:
        kinds[locus["kind"]] = kinds.get(locus["kind"], 0) + 1
    data = {
        "title": title,
        "job_id": bundle.job_id,
        "action": bundle.action,
        "status": bundle.status,
        "error": bundle.error.model_dump(mode="json") if bundle.error else None,
        "artifact": bundle.artifact.model_dump(mode="json"),
        "modality": modality,
        "kinds": kinds,
        "locus_count": len(evidence),
        "artifact_available": inputs.artifact is not None,
        "view": view,
        "provenance": _provenance(bundle),
        "generated_at": (generated_at or datetime.now(UTC)).isoformat(timespec="seconds"),
    }
    blobs = "\n".join(f'<script type="text/plain" id="{key}">{uri}</script>' for key, uri in images.items())
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="mediafleet report">',
        f"<title>{html.escape(title)}: evidence</title>",
        f"<style>{_asset('report.css')}</style>",
        "</head><body>",
        '<main id="mf-report"></main>',
        f'<script type="application/json" id="mf-data">{_script_json(data)}</script>',
        blobs,
        f"<script>{_asset('report.js')}</script>",
        "</body></html>",
        "",
    ])



@contextmanager
def store_inputs(bundle: EvidenceBundle, store: BlobStore, artifact: Path | None = None, *,
                 max_embed_bytes: int = DEFAULT_MAX_EMBED_BYTES) -> Iterator[ReportInputs]:
    """The report's inputs for ``bundle``: the artifact from ``artifact`` (checked against the
    bundle's digest) or from the blob store, and derived blobs from the store.

    The artifact is None in the inputs when neither has it (the report then draws the loci on blank
    pages and time lines).

    Raises:
        ValueError: ``artifact`` is not the bundle's artifact (its digest differs).
    """

    def blob(digest: str) -> bytes | None:
        try:
            with store.verified_path(digest) as path:
                return path.read_bytes()
        except IntegrityError:
            return None

    digest = bundle.artifact.digest
    if artifact is not None:
        if hash_file(artifact) != digest:
            raise ValueError("the file given with --artifact is not this bundle's artifact (its digest differs)")
        yield ReportInputs(artifact, blob, max_embed_bytes)
        return
    try:
        with store.verified_path(digest) as path:
            yield ReportInputs(path, blob, max_embed_bytes)
            return
    except IntegrityError:
        pass
    yield ReportInputs(None, blob, max_embed_bytes)
