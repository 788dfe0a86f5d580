"""The evidence bundle: what a caller finally gets for one artifact."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mediafleet.contract.common import Strict
from mediafleet.contract.errors import PublicError
from mediafleet.contract.common import Digest
from mediafleet.contract.manifest import Modality

__all__ = ["BUNDLE_FORMAT", "BundleArtifact", "CallerClaims", "Edge", "EvidenceBundle", "Node"]

BUNDLE_FORMAT = "mediafleet.evidence-bundle/v1"


class Node(Strict):
    id: str
    node_type: str
    properties: dict[str, Any]


class Edge(Strict):
    source: str
    target: str
    relationship: str


class CallerClaims(Strict):
    """What the caller of one call said about the artifact, and which comparison each claim got.

    Per call, not per job: two callers of the same bytes share one job and its evidence, and each
    gets its own claims back. ``digest_check`` names the comparison made: ``sha256_of_bytes``
    (the digest is the SHA-256 the fleet computed), ``engine_blob_manifest`` (it is the callers'
    engine blob digest, recomputed for an owner scope the operator configured), or
    ``not_compared`` (an engine blob digest whose owner scope the fleet does not know: kept as
    the caller's correlation id only, never counted as verified). A digest that was compared and
    did not match is refused, so it never reaches a bundle.
    """

    digest: str | None = Field(None, description="the caller's digest as sent (lowercase hex, sha256: kept)")
    digest_form: Literal["sha256", "engine_blob"] | None = None
    digest_check: Literal["sha256_of_bytes", "engine_blob_manifest", "not_compared"] | None = None
    media_type: str | None = Field(None, description="the media type the caller claimed")
    media_type_agrees: bool | None = Field(
        None, description="false: the bytes are another type of the same modality, and ran as what they are")


class BundleArtifact(Strict):
    """The artifact as the dispatcher saw it; type and modality are unknown when it was refused."""

    digest: Digest
    media_type: str | None
    bytes: int = Field(ge=0)
    modality: Modality | None
    claimed: CallerClaims | None = Field(None, description="the caller's claims for this call, when it made any")


class EvidenceBundle(Strict):
    format: Literal["mediafleet.evidence-bundle/v1"] = BUNDLE_FORMAT
    job_id: str
    action: str | None
    artifact: BundleArtifact
    status: Literal["ok", "failed"]
    error: PublicError | None
    nodes: list[Node]
    edges: list[Edge]
    prov: dict[str, Any] = Field(description="PROV-O as JSON-LD")
