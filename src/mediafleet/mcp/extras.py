"""What a response adds to the bundle at response time for the callers' optional fields: PNG crops
of an image's text-line regions (``crop_png_b64``) and each PDF page's text embedding
(``embedding``).

Both are derived, never extracted: a crop is the pixels inside a region's box, cut from the
artifact the blob store holds (its digest checked) and decoded as the extractor decoded it; an
embedding is the static WordLlama vector of the page's text as the bundle gives it
(:mod:`mediafleet.discovery.embedding`, the model inside the ``wordllama`` wheel, so nothing is
downloaded). The bundle itself is unchanged: the box and the text are its evidence. Images get no
``embedding``: no image-embedding model ships inside a package from a registry this fleet installs
from (CLIP-like models load their weights from a model hub at run time).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from mediafleet.contract.bundle import EvidenceBundle

__all__ = ["crop_key", "crop_targets", "embedding_key", "page_embeddings", "page_texts"]

log = logging.getLogger("mediafleet.mcp")


def crop_key(evidence_id: str) -> str:
    """The key of a region's crop in the response's inline mapping."""
    return f"crop:{evidence_id}"


def embedding_key(page: int) -> str:
    """The key of a page's embedding in the response's inline mapping."""
    return f"embedding:page:{page}"


def _evidence(bundle: EvidenceBundle) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for node in bundle.nodes:
        if node.node_type == "Evidence":
            yield node.id, node.properties["evidence_locus"]["address"], node.properties


def crop_targets(bundle: EvidenceBundle) -> list[tuple[str, Any]]:
    """(evidence id, :class:`~mediafleet.workers.image.crops.Box`) of each text-line region of an
    image bundle, in the bundle's order; none for the whole-image region (its pixels are the
    image, and the thumbnail shows it)."""
    from mediafleet.workers.image.crops import Box

    if bundle.artifact.modality is None or bundle.artifact.modality.value != "image":
        return []
    return [(evidence_id, Box(page=int(props.get("page", 1)), x=address["x"], y=address["y"],
                              width=address["width"], height=address["height"]))
            for evidence_id, address, props in _evidence(bundle)
            if address["kind"] == "image_region" and props.get("region") != "image"]


def page_texts(bundle: EvidenceBundle) -> list[tuple[int, str]]:
    """(page, text) of each page of a PDF bundle with text, in page order."""
    if bundle.artifact.modality is None or bundle.artifact.modality.value != "pdf":
        return []
    return [(int(props["page"]), str(props["text"])) for _, address, props in _evidence(bundle)
            if address["kind"] == "character_range" and props.get("text")]


def page_embeddings(texts: list[tuple[int, str]]) -> tuple[dict[int, list[float]], str] | None:
    """Each page's unit-length 256-dimension vector (6 decimals), and the model's id with its
    version; None when the ``wordllama`` wheel is not installed."""
    if not texts:
        return {}, ""
    try:
        from mediafleet.discovery.embedding import default_embedder
        from mediafleet.discovery.text import matched_form

        embedder = default_embedder()
    except ImportError:
        log.info("page embeddings left out: the wordllama wheel is not installed (pip install 'mediafleet[discovery]')")
        return None
    vectors = embedder.embed([matched_form(text) for _, text in texts])
    return ({page: [round(float(v), 6) for v in vector] for (page, _), vector in zip(texts, vectors, strict=True)},
            f"{embedder.model_id}@{embedder.version}")
