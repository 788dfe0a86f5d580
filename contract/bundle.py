"""The evidence bundle: what a caller finally gets for one artifact."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from contract.common import Strict
from contract.errors import PublicError
from contract.common import Digest
from contract.manifest import Modality

__all__ = ["BUNDLE_FORMAT", "BundleArtifact", "Edge", "EvidenceBundle", "Node"]

BUNDLE_FORMAT = "mediafleet.evidence-bundle/v1"


class Node(Strict):
    id: str
    node_type: str
    properties: dict[str, Any]


class Edge(Strict):
    source: str
    target: str
    relationship: str


class BundleArtifact(Strict):
    """The artifact as the dispatcher saw it; type and modality are unknown when it was refused."""

    digest: Digest
    media_type: str | None
    bytes: int = Field(ge=0)
    modality: Modality | None


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
