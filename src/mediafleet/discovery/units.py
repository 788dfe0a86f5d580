"""Evidence bundle -> discovery units: one unit for each locus that carries text.

A unit is what the index holds and what delivery hands out: ``unit_id`` (the locus id), the
original text, and ``source_range``: the artifact (digest, media type, modality), the address
(page and box, character offsets, ``start_ms``/``end_ms``, frames) and the bundle's generation
(the derivation ref, which hashes the extractor version and options, so a re-extraction with
another version or other options is a new generation). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.discovery.text import matched_form

__all__ = ["Scope", "Unit", "text_digest", "units_from_bundle"]

_SCOPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
# Evidence-node properties carried into source_range as they are (all fixed by the adapters).
_CARRIED = ("page", "coordinate_space", "image_id", "audio_id", "video_id", "segment", "shot", "timeline",
            "time_unit", "text_unit", "path", "region", "language", "confidence", "start_frame", "end_frame",
            "speaker")


@dataclass(frozen=True)
class Scope:
    """Where a unit lives: fixed by the host when it indexes, never by anything the model sends."""

    workspace: str
    subject: str = "default"

    def __post_init__(self) -> None:
        for name in (self.workspace, self.subject):
            if not isinstance(name, str) or not _SCOPE_NAME.fullmatch(name):
                raise ValueError("a workspace or subject is 1-128 of A-Z a-z 0-9 . _ : @ -, starting alphanumeric")


@dataclass(frozen=True)
class Unit:
    """One searchable piece of evidence."""

    unit_id: str
    text: str
    digest: str  # the artifact's sha256:<hex>
    action: str
    derivation_ref: str
    source_range: dict[str, Any] = field(hash=False)

    @cached_property
    def folded(self) -> str:
        """The text as the index matches it: folded and normalised (:func:`~mediafleet.discovery.text.matched_form`)."""
        return matched_form(self.text)

    def source_json(self) -> str:
        return json.dumps(self.source_range, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def text_digest(text: str) -> str:
    """``sha256:<hex>`` of the UTF-8 text: what receipts and evidence objects name text by."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _generation(bundle: EvidenceBundle, derivation_ref: str) -> dict[str, Any]:
    facts: dict[str, Any] = {"derivation_ref": derivation_ref, "job_id": bundle.job_id}
    for node in bundle.nodes:
        if node.node_type == "ProvenanceActivity":
            props = node.properties
            for key, name in (("extractor", "extractor"), ("extractorVersion", "extractor_version"),
                              ("engine", "engine"), ("engineVersion", "engine_version")):
                if props.get(key) is not None:
                    facts[name] = props[key]
    return facts


def units_from_bundle(bundle: EvidenceBundle) -> list[Unit]:
    """The units of an ``ok`` bundle (none for a failed one), in the bundle's locus order.

    Only Evidence nodes with non-blank text become units: a PDF line or page text, an image's
    text region, an audio segment, a video's transcript segment.
    """
    if bundle.status != "ok" or bundle.action is None:
        return []
    artifact = {"digest": bundle.artifact.digest, "media_type": bundle.artifact.media_type,
                "modality": bundle.artifact.modality.value if bundle.artifact.modality else None}
    units: list[Unit] = []
    generations: dict[str, dict[str, Any]] = {}
    for node in bundle.nodes:
        props = node.properties
        if node.node_type != "Evidence" or not isinstance(props.get("text"), str) or not props["text"].strip():
            continue
        locus = props["evidence_locus"]
        derivation = locus["derivation_ref"]
        if derivation not in generations:
            generations[derivation] = _generation(bundle, derivation)
        source = {
            "artifact": artifact,
            "locus_kind": locus["address"]["kind"],
            "address": locus["address"],
            "occurrence_id": props.get("occurrence_id"),
            "generation": generations[derivation],
            **{key: props[key] for key in _CARRIED if key in props},
        }
        units.append(Unit(unit_id=locus["id"], text=props["text"], digest=bundle.artifact.digest,
                          action=bundle.action, derivation_ref=derivation, source_range=source))
    return units
