"""Evidence bundle -> the response objects today's callers parse (CONTRACT.md section 5).

Every entry a caller reads is read back from a governed locus of the bundle (the page from its
PageRegion, a box from its ImageRegion, a segment from its AudioRange, a shot from its
VideoTimeRange, a keyframe from its FrameRange), so what a caller writes into the graph is
exactly what the worker checked against the artifact's real extent, in the bundle's order.
Nothing here does I/O: images a caller wants inline are fetched by the server and passed in.
Each modality's spec names its shape (:attr:`mediafleet.modalities.spec.ModalitySpec.caller_shape`).

Shapes (a JSON object; ``available`` missing means true; ``error`` only on failure):

* pdf: ``pages: [{page, width, height, text, embedding?, boxes: [{text, x, y, width, height}]}]`` (PDF
  points, top-left origin; ``page`` 1-based; ``embedding``: the page text's static vector, when the
  server has the model)
* image: ``phash``, ``thumbnail_png_b64?``, ``regions: [{x, y, width, height, label?, confidence?,
  crop_png_b64?}]`` (pixels of the upright image; ``crop_png_b64``: a text line's pixels, for the
  first regions the server crops; the whole-image region's ``label`` is ``image``, or
  ``image (<type>; claimed <type>)`` when the bytes are not the type the caller claimed)
* audio: ``segments: [{start_ms, end_ms, text, confidence?, speaker?}]`` (integer milliseconds; ``speaker``
  "S1", "S2", ... when labelled)
* video: ``shots: [{start_ms, end_ms, label?, confidence?}]`` (integer milliseconds; ``label`` start,
  cut, dissolve, fade or wipe, a transition entry ``transition:<kind>``; ``confidence`` the detector's),
  ``keyframes: [{start_frame, end_frame?, png_b64?}]`` (1-based, inclusive frame numbers)

Every response also carries ``bundle``: the full evidence bundle (governed loci, PROV-O, claim);
``media_type`` (what the bytes are) and, when the caller claimed one, ``claimed_media_type`` and
``media_type_agrees``; ``embedding_model`` when pages carry embeddings; ``images_not_inlined``
counts images the response could not carry inline (the bundle names them).

What the server adds at response time comes in ``inline``: blob ref -> base64 PNG (thumbnails,
keyframes), ``crop:<evidence id>`` -> a region's base64 PNG crop, ``embedding:page:<n>`` -> a
page's vector (:mod:`mediafleet.mcp.extras`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.contract.digests import blob_ref
from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.modalities.registry import for_modality

__all__ = ["audio_shape", "caller_response", "failure_response", "image_shape", "inline_wanted", "pdf_shape",
           "video_shape"]

# The error codes that mean "this sidecar cannot do that here", which callers read as available: false.
_UNAVAILABLE = frozenset({ErrorCode.CAPABILITY_NOT_DECLARED, ErrorCode.ENGINE_UNAVAILABLE})


def _evidence(bundle: EvidenceBundle) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(address, node properties) of each Evidence node, in the bundle's (locus) order."""
    for node in bundle.nodes:
        if node.node_type == "Evidence":
            yield node.properties["evidence_locus"]["address"], node.properties


def _evidence_ids(bundle: EvidenceBundle) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(evidence id, address, node properties) of each Evidence node, in the bundle's order."""
    for node in bundle.nodes:
        if node.node_type == "Evidence":
            yield node.id, node.properties["evidence_locus"]["address"], node.properties


def _box(address: Mapping[str, Any]) -> dict[str, float]:
    return {k: address[k] for k in ("x", "y", "width", "height")}


def pdf_shape(bundle: EvidenceBundle, inline: Mapping[str, Any]) -> dict[str, Any]:
    """``pages``, each with its text, its text's ``embedding`` when the server gave one, and its line
    boxes (the PDF spec's caller shape)."""
    pages: dict[int, dict[str, Any]] = {}
    for address, props in _evidence(bundle):
        kind = address["kind"]
        if kind == "page_region":
            pages[address["page"]] = {"page": address["page"], "width": address["width"],
                                      "height": address["height"], "text": "", "boxes": []}
        elif kind == "character_range":
            pages[props["page"]]["text"] = props["text"]
            if (vector := inline.get(f"embedding:page:{props['page']}")) is not None:
                pages[props["page"]]["embedding"] = vector
        elif kind == "image_region":
            pages[props["page"]]["boxes"].append({"text": props["text"], **_box(address)})
    return {"pages": list(pages.values())}


def audio_shape(bundle: EvidenceBundle, inline: Mapping[str, str]) -> dict[str, Any]:
    """``segments`` (the audio spec's caller shape)."""
    segments = []
    for address, props in _evidence(bundle):
        if address["kind"] == "audio_range":
            segment: dict[str, Any] = {"start_ms": address["start_ms"], "end_ms": address["end_ms"],
                                       "text": props.get("text", "")}
            if props.get("confidence") is not None:
                segment["confidence"] = props["confidence"]
            if props.get("speaker") is not None:
                segment["speaker"] = props["speaker"]  # an extra key: today's callers read the others
            segments.append(segment)
    return {"segments": segments}


def video_shape(bundle: EvidenceBundle, inline: Mapping[str, str]) -> dict[str, Any]:
    """``shots`` and ``keyframes``, and ``segments`` when the video has speech (the video spec's caller shape)."""
    shots: list[dict[str, Any]] = []
    keyframes: list[dict[str, Any]] = []
    for address, props in _evidence(bundle):
        if address["kind"] == "video_time_range":
            shot: dict[str, Any] = {"start_ms": address["start_ms"], "end_ms": address["end_ms"]}
            if isinstance(props.get("label"), str):  # start, cut, dissolve, fade, wipe; "transition:<kind>"
                shot["label"] = props["label"]
            if isinstance(props.get("confidence"), float):  # the detector's, for the boundary
                shot["confidence"] = props["confidence"]
            shots.append(shot)
        elif address["kind"] == "frame_range":
            keyframe: dict[str, Any] = {"start_frame": address["start_frame"], "end_frame": address["end_frame"]}
            png = inline.get(props.get("image_blob_ref", ""))
            if png is not None:
                keyframe["png_b64"] = png
            keyframes.append(keyframe)
    shape: dict[str, Any] = {"shots": shots, "keyframes": keyframes}
    # The video's spoken words, when it has them: the audio callers' shape, on the same subject.
    if (speech := audio_shape(bundle, inline)["segments"]):
        shape["segments"] = speech
    return shape


def _thumbnail_ref(props: Mapping[str, Any]) -> str | None:
    digest = props.get("thumbnail")
    return blob_ref(digest) if isinstance(digest, str) else None


def _image_label(bundle: EvidenceBundle) -> str:
    """The whole-image region's label: ``image``, with the bytes' type and the claimed one when they
    differ (the callers' adapter keeps a region's label; it drops the response's other fields)."""
    claimed = bundle.artifact.claimed
    if claimed is None or claimed.media_type_agrees is not False:
        return "image"
    return f"image ({bundle.artifact.media_type}; claimed {claimed.media_type})"


def image_shape(bundle: EvidenceBundle, inline: Mapping[str, Any]) -> dict[str, Any]:
    """The image spec's caller shape: the first page's pHash and thumbnail; a region per ImageRegion
    locus (the whole image, labelled ``image``, then each text line, labelled with its text and
    with its crop when the server made one), each with its 1-based ``page``."""
    shape: dict[str, Any] = {"phash": None, "regions": []}
    for evidence_id, address, props in _evidence_ids(bundle):
        if address["kind"] != "image_region":
            continue
        region: dict[str, Any] = {**_box(address), "page": props.get("page", 1)}
        if props.get("region") == "image":
            region["label"] = _image_label(bundle)
            if shape["phash"] is None:
                shape["phash"] = props.get("phash")
                thumbnail = inline.get(_thumbnail_ref(props) or "")
                if thumbnail is not None:
                    shape["thumbnail_png_b64"] = thumbnail
        else:
            if props.get("label") is not None:
                region["label"] = props["label"]
            if props.get("confidence") is not None:
                region["confidence"] = props["confidence"]
            if (crop := inline.get(f"crop:{evidence_id}")) is not None:
                region["crop_png_b64"] = crop
        shape["regions"].append(region)
    return shape


def inline_wanted(bundle: EvidenceBundle) -> list[str]:
    """Blob refs (``blob:<hex>``) of the images a caller wants inline, in response order: the
    image's thumbnail (first page), each video keyframe.

    The server fetches these from the blob store (as PNG) and passes them to
    :func:`caller_response`; an image left out of the mapping is simply not inlined.
    """
    wanted: list[str] = []
    thumbnail_taken = False
    for _, props in _evidence(bundle):
        ref = props.get("image_blob_ref")
        if props.get("region") == "image" and not thumbnail_taken:
            ref, thumbnail_taken = _thumbnail_ref(props), True
        if isinstance(ref, str) and ref not in wanted:
            wanted.append(ref)
    return wanted


def caller_response(bundle: EvidenceBundle, inline: Mapping[str, Any] | None = None, *,
                    embedding_model: str | None = None) -> dict[str, Any]:
    """The callers' response for an ``ok`` bundle, with the bundle alongside.

    Args:
        bundle: an ``ok`` evidence bundle.
        inline: blob ref -> base64 PNG, for the images the caller gets inline (see
            :func:`inline_wanted`); ``crop:<evidence id>`` and ``embedding:page:<n>`` entries (see
            the module's docstring).
        embedding_model: the model (and version) of the embeddings in ``inline``.

    Raises:
        ValueError: the bundle is not ``ok`` (use :func:`failure_response`).
    """
    if bundle.status != "ok":
        raise ValueError("only an ok bundle has a caller response; a failed one is a failure_response")
    inline = inline or {}
    modality = bundle.artifact.modality.value if bundle.artifact.modality is not None else None
    spec = for_modality(modality) if modality is not None else None
    if spec is None:
        raise ValueError(f"no caller shape for modality {modality!r}")
    shape = spec.caller_shape.load()(bundle, inline)
    left_out = sum(ref not in inline for ref in inline_wanted(bundle))
    if left_out:
        # Over the server's inline budget (or unreadable): the bundle still names each image's blob.
        shape["images_not_inlined"] = left_out
    shape["media_type"] = bundle.artifact.media_type
    if bundle.artifact.claimed is not None and bundle.artifact.claimed.media_type is not None:
        shape["claimed_media_type"] = bundle.artifact.claimed.media_type
        shape["media_type_agrees"] = bundle.artifact.claimed.media_type_agrees
    if embedding_model and any(key.startswith("embedding:") for key in inline):
        shape["embedding_model"] = embedding_model
    return {"available": True, **shape, "bundle": bundle.model_dump(mode="json")}


def failure_response(error: PublicError, bundle: EvidenceBundle | None = None) -> dict[str, Any]:
    """The callers' response for a refused or failed call: their own failure channel.

    ``available`` is always false, so a caller never takes a failure for an empty extraction
    (theirs reads ``available: false`` and keeps ``error``, which therefore starts with the stable
    code: ``"digest_mismatch: the artifact's bytes ..."``). ``error_code``, ``message`` and
    ``retryable`` are beside it, and ``unsupported`` says whether the sidecar cannot do this here
    at all (the capability is not declared by the manifest in force, or its engine is missing).
    The failed bundle (a ``failed`` activity, no claim) is carried when the artifact got that far.
    """
    return {
        "available": False,
        "error": f"{error.code.value}: {error.message}",
        "error_code": error.code.value,
        "message": error.message,
        "retryable": error.retryable,
        "unsupported": error.code in _UNAVAILABLE,
        "bundle": bundle.model_dump(mode="json") if bundle is not None else None,
    }
