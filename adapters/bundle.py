"""Outcome -> evidence bundle: the graph the callers write, PROV-O, and an earned claim.

Graph shape (CONTRACT.md section 4): ``SourceObject -hasOccurrence-> AssetOccurrence -hasBlob->
Blob``; ``Evidence -extractedFrom-> AssetOccurrence``; ``Evidence -SUPPORTS-> Claim``; plus one
provenance activity node per call. Pure: no I/O, no clock; every id is derived from the inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mediafleet.adapters.drafts import set_dict, set_extra, set_fields_set, set_private
from mediafleet.adapters.ids import LOCUS_PREFIX, canonical, locus_tokens, ref, token
from mediafleet.adapters.loci import LocusDraft, to_loci
from mediafleet.adapters.nogc import collection_paused
from mediafleet.adapters.prov import ProvFacts, prov_jsonld
from mediafleet.adapters.verify import loci_valid
from mediafleet.contract.bundle import (
    BundleArtifact,
    CallerClaims,
    Edge,
    EvidenceBundle,
    Node,
)
from mediafleet.contract.digests import blob_ref
from mediafleet.contract.errors import MediafleetError, PublicError
from mediafleet.contract.jobs import Outcome
from mediafleet.contract.locus import LocusSubject
from mediafleet.contract.manifest import Capability

__all__ = ["build_bundle", "evidence_properties", "refused_bundle", "with_claims"]

# The fields-sets the Evidence nodes and their edges share (see mediafleet.adapters.drafts).
_NODE_FIELDS = {"id", "node_type", "properties"}
_EDGE_FIELDS = {"source", "target", "relationship"}


def evidence_properties(
    drafts: Sequence[LocusDraft], locus_ids: Sequence[str], *, subject: dict[str, Any], policy: str,
    derivation: str, occurrence_id: str, blob_id: str, text_base: int = 0,
) -> list[dict[str, Any]]:
    """The properties of each draft's Evidence node (its id ``evidence:<token of its locus id>``),
    in draft order: the one form of an Evidence node, for the whole bundle and the streamed one.

    Each is ``{"evidence_locus": ..., "occurrence_id": ..., "blob_ref": ..., "locus_kind": ...,
    **draft.properties, "text": ..., "confidence": ...}`` (text and confidence when set), where the
    envelope is ``EvidenceLocus(id=locus_id, subject=subject, address=draft.address,
    policy_ref=policy, derivation_ref=derivation).model_dump(mode="json")`` written out: its refs
    are well formed by construction (the subject, policy and derivation validated once by the
    caller, each locus id a hash in the locus namespace) and its address was validated by the
    modality's mapping, so no envelope is validated again per locus. A draft whose properties hold
    their own ``evidence_locus`` keeps it. ``text_base`` moves a CharacterRange on (a range of a
    streamed document indexes the whole document's text).

    The dicts are copied from one template per run of drafts sharing a properties dict (a page's
    lines) instead of merged afresh for each, and share one subject value (read-only, as every
    property is). ``tests/test_pdf_speed_paths.py`` checks all of it against the plain form.
    """
    made: list[dict[str, Any]] = []
    add = made.append
    template: dict[str, Any] = {}
    shape: tuple[Any, ...] = ()
    shared = True
    for locus_id, draft in zip(locus_ids, drafts, strict=True):
        address, text, confidence, properties = draft.address, draft.text, draft.confidence, draft.properties
        kind = address.kind
        has_text, has_confidence = text is not None, confidence is not None
        if shape[:1] != (properties,) or shape[1:] != (kind, has_text, has_confidence):
            shape = (properties, kind, has_text, has_confidence)
            template = {"evidence_locus": None, "occurrence_id": occurrence_id, "blob_ref": blob_id,
                        "locus_kind": kind, **properties}
            if has_text:
                template["text"] = None
            if has_confidence:
                template["confidence"] = None
            shared = "evidence_locus" not in properties  # else the draft's own value is kept
        props = template.copy()
        if shared:
            # The address's JSON form is its own __dict__ (address_json), shared, not copied: a
            # frozen model's, never changed, and read-only in the bundle as every property is.
            where = address.__dict__
            if text_base and kind == "character_range":
                where = {**where, "start": where["start"] + text_base, "end": where["end"] + text_base}
            props["evidence_locus"] = {"id": locus_id, "subject": subject, "address": where,
                                       "policy_ref": policy, "derivation_ref": derivation}
        if has_text:
            props["text"] = text
        if has_confidence:
            props["confidence"] = confidence
        add(props)
    return made


def _evidence(
    drafts: list[LocusDraft], derivation: str, policy: str, subject_json: dict[str, Any], occurrence_id: str,
    blob_id: str, claim_id: str, nodes: list[Node], edges: list[Edge],
) -> list[str]:
    """An Evidence node per draft (:func:`evidence_properties`) and its two edges
    (``extractedFrom`` the occurrence, ``SUPPORTS`` the claim), added to ``nodes`` and ``edges``;
    returns the locus ids, in draft order.

    The node is ``Node(id=..., node_type="Evidence", properties=...)`` and each edge ``Edge(...)``
    as validation makes them (of strings and a dict of JSON values made here:
    :func:`mediafleet.adapters.drafts.trusted`, inlined), so no model call is made per locus.
    """
    tokens = locus_tokens(derivation, len(drafts))
    ids = [LOCUS_PREFIX + t for t in tokens]
    add_node, add_edge = nodes.append, edges.append
    new = object.__new__
    every = evidence_properties(drafts, ids, subject=subject_json, policy=policy, derivation=derivation,
                                occurrence_id=occurrence_id, blob_id=blob_id)
    for token_, props in zip(tokens, every, strict=True):
        evidence_id = "evidence:" + token_
        node = new(Node)
        set_dict(node, {"id": evidence_id, "node_type": "Evidence", "properties": props})
        set_fields_set(node, _NODE_FIELDS)
        set_extra(node, None)
        set_private(node, None)
        add_node(node)
        edge = new(Edge)
        set_dict(edge, {"source": evidence_id, "target": occurrence_id, "relationship": "extractedFrom"})
        set_fields_set(edge, _EDGE_FIELDS)
        set_extra(edge, None)
        set_private(edge, None)
        add_edge(edge)
        edge = new(Edge)
        set_dict(edge, {"source": evidence_id, "target": claim_id, "relationship": "SUPPORTS"})
        set_fields_set(edge, _EDGE_FIELDS)
        set_extra(edge, None)
        set_private(edge, None)
        add_edge(edge)
    return ids


_POLICIES: dict[int, tuple[Capability, str]] = {}


def _policy(capability: Capability) -> str:
    """``ref("policy", canonical(capability.model_dump(mode="json")))``, made once per capability
    object: a frozen model (its dump cannot change), and a process runs every job of a capability
    with the one its manifest holds (each job made it afresh: ~0.05 ms, a dump and its JSON).
    Kept for a few dozen capabilities (the entry holds its capability, so an id is never reused)."""
    hit = _POLICIES.get(id(capability))
    if hit is not None and hit[0] is capability:
        return hit[1]
    policy = ref("policy", canonical(capability.model_dump(mode="json")))
    if len(_POLICIES) >= 64:
        _POLICIES.clear()
    _POLICIES[id(capability)] = (capability, policy)
    return policy


def _artifact_nodes(artifact: BundleArtifact) -> tuple[list[Node], list[Edge], str, str]:
    source_id = f"sourceobject:{artifact.digest}"
    occurrence_id = f"occurrence:{token('occurrence', artifact.digest)}"
    blob_id = blob_ref(artifact.digest)
    nodes = [
        Node(id=source_id, node_type="SourceObject", properties={"digest": artifact.digest}),
        Node(
            id=occurrence_id,
            node_type="AssetOccurrence",
            properties={"media_type": artifact.media_type, "bytes": artifact.bytes, "modality": artifact.modality},
        ),
        Node(id=blob_id, node_type="Blob", properties={"digest": artifact.digest, "bytes": artifact.bytes}),
    ]
    edges = [
        Edge(source=source_id, target=occurrence_id, relationship="hasOccurrence"),
        Edge(source=occurrence_id, target=blob_id, relationship="hasBlob"),
    ]
    return nodes, edges, occurrence_id, blob_id


def _activity(
    activity_id: str,
    *,
    capability: Capability | None,
    action: str | None,
    status: str,
    started_at: datetime,
    ended_at: datetime,
    locus_count: int,
    error: PublicError | None,
    agent: dict[str, str],
) -> Node:
    return Node(
        id=activity_id,
        node_type="ProvenanceActivity",
        properties={
            "kind": "media_sidecar",
            "sidecar": capability.provider if capability else None,
            "tool": capability.tool if capability else None,
            "modality": capability.modality.value if capability else None,
            "action": action,
            "status": status,
            "at": ended_at.isoformat(),
            "startedAtTime": started_at.isoformat(),
            "endedAtTime": ended_at.isoformat(),
            "locusCount": locus_count,
            "error_code": error.code.value if error else None,
            **agent,
        },
    )


def _agent(outcome: Outcome | None) -> tuple[str, str, dict[str, str]]:
    producer = outcome.result.producer if outcome and outcome.result is not None else None
    if producer is None:
        return "agent:mediafleet", "mediafleet", {}
    facts = {
        "engine": producer.engine,
        "engineVersion": producer.engine_version,
        "extractor": producer.extractor,
        "extractorVersion": producer.extractor_version,
    }
    if producer.models:
        facts["models"] = canonical([m.model_dump() for m in producer.models])
    agent_id = "agent:" + token("agent", canonical(facts))
    label = f"{producer.extractor} {producer.extractor_version} ({producer.engine} {producer.engine_version})"
    return agent_id, label, facts


def refused_bundle(
    job_id: str, action: str | None, artifact: BundleArtifact, error: PublicError, at: datetime
) -> EvidenceBundle:
    """The bundle for a request refused before any worker saw it."""
    nodes, edges, _, _ = _artifact_nodes(artifact)
    activity_id = f"activity:{token('activity', job_id, at.isoformat())}"
    agent_id, label, facts = _agent(None)
    nodes.append(
        _activity(activity_id, capability=None, action=action, status="failed", started_at=at, ended_at=at,
                  locus_count=0, error=error, agent=facts)
    )
    prov = prov_jsonld(
        ProvFacts(activity_id, blob_ref(artifact.digest), artifact.digest, artifact.media_type,
                  agent_id, label, facts, action or "", "failed", at, at, (), None)
    )
    return EvidenceBundle(job_id=job_id, action=action, artifact=artifact, status="failed", error=error,
                          nodes=nodes, edges=edges, prov=prov)


def build_bundle(outcome: Outcome, capability: Capability) -> EvidenceBundle:
    """Map a worker outcome to the evidence bundle.

    The result is checked again here: a locus kind the capability does not declare fails the
    whole bundle (``undeclared_locus_kind``) rather than passing through.
    """
    with collection_paused():  # tens of thousands of acyclic nodes for a long document
        return _build_bundle(outcome, capability)


def _build_bundle(outcome: Outcome, capability: Capability) -> EvidenceBundle:
    art = outcome.artifact
    artifact = BundleArtifact(digest=art.digest, media_type=art.media_type, bytes=art.bytes, modality=art.modality)
    nodes, edges, occurrence_id, blob_id = _artifact_nodes(artifact)
    activity_id = f"activity:{token('activity', outcome.job_id, outcome.started_at.isoformat())}"
    agent_id, label, agent_facts = _agent(outcome)
    status, error = outcome.status, outcome.error
    drafts: list[LocusDraft] = []
    if status == "ok" and outcome.result is not None:
        drafts = to_loci(outcome.result, art.digest)
        try:
            capability.check_produces({d.address.kind for d in drafts})
        except MediafleetError as exc:
            status, error, drafts = "failed", exc.public(), []

    evidence_ids: list[str] = []
    claim_id: str | None = None
    if status == "ok":
        producer = outcome.result.producer  # type: ignore[union-attr]
        derivation = ref(
            "derivation", art.digest, capability.action, producer.extractor_version, producer.engine,
            producer.engine_version, canonical(producer.options),
        )
        policy = _policy(capability)
        subject = LocusSubject(id=f"eg:{occurrence_id}")
        checks = {**outcome.checks, "locus_kinds_declared": True, "loci_valid": loci_valid(drafts)}
        claim_id = f"claim:{token('claim', derivation)}"
        confidences = [d.confidence for d in drafts if d.confidence is not None]
        subject_json = subject.model_dump(mode="json")
        evidence_ids = _evidence(drafts, derivation, policy, subject_json, occurrence_id, blob_id, claim_id,
                                 nodes, edges)
        nodes.append(
            Node(
                id=claim_id,
                node_type="Claim",
                properties={
                    "claim_type": "observation",
                    "confidence": sum(confidences) / len(confidences) if confidences else 1.0,
                    "is_verified": all(checks.values()),
                    "checks": checks,
                    "source_ids": [activity_id],
                    "extracted_from": occurrence_id,
                    "domain": art.modality.value,
                    "locus_count": len(drafts),
                    "metadata": {
                        "was_generated_by": activity_id,
                        "generated_at_time": outcome.ended_at.isoformat(),
                        "artifact_id": art.digest,
                    },
                },
            )
        )
    nodes.append(
        _activity(activity_id, capability=capability, action=outcome.action, status=status,
                  started_at=outcome.started_at, ended_at=outcome.ended_at, locus_count=len(evidence_ids),
                  error=error, agent=agent_facts)
    )
    prov = prov_jsonld(
        ProvFacts(activity_id, blob_id, art.digest, art.media_type, agent_id, label, agent_facts, outcome.action,
                  status, outcome.started_at, outcome.ended_at, evidence_ids, claim_id)
    )
    return EvidenceBundle(job_id=outcome.job_id, action=outcome.action, artifact=artifact, status=status,
                          error=error, nodes=nodes, edges=edges, prov=prov)


def with_claims(bundle: EvidenceBundle, claims: CallerClaims | None) -> EvidenceBundle:
    """The bundle as one caller gets it: its claims recorded on the artifact, the activity and the
    PROV artifact entity, and the claim's checks saying exactly which comparison its digest got.

    A digest that was compared adds the check ``caller_digest_matches`` (true: a mismatch is
    refused before any work); one that could not be compared is listed in the claim's
    ``not_compared``, so ``is_verified`` never covers it. Nothing else changes: the loci, their
    ids and the job are the same for every caller of the same bytes.
    """
    if claims is None:
        return bundle
    facts = _claim_facts(claims)
    nodes = []
    for node in bundle.nodes:
        props = node.properties
        if node.node_type == "Claim":
            checks = dict(props.get("checks", {}))
            not_compared = [n for n in props.get("not_compared", []) if n != "caller_digest"]
            if claims.digest_check in ("sha256_of_bytes", "engine_blob_manifest"):
                checks["caller_digest_matches"] = True
            elif claims.digest_check == "not_compared":
                not_compared.append("caller_digest")
            props = {**props, "checks": checks, "is_verified": all(checks.values()),
                     **({"not_compared": not_compared} if not_compared else {})}
        elif node.node_type == "ProvenanceActivity":
            props = {**props, **facts}
        nodes.append(node.model_copy(update={"properties": props}))
    # The artifact's PROV entity is the one that carries its digest (see prov_jsonld).
    graph = [{**entry, **{f"mf:{k}": v for k, v in facts.items()}} if "mf:digest" in entry else entry
             for entry in bundle.prov.get("@graph", [])]
    return bundle.model_copy(update={"artifact": bundle.artifact.model_copy(update={"claimed": claims}),
                                     "nodes": nodes, "prov": {**bundle.prov, "@graph": graph}})


def _claim_facts(claims: CallerClaims) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    if claims.digest is not None:
        facts |= {"callerDigest": claims.digest, "callerDigestForm": claims.digest_form,
                  "callerDigestCheck": claims.digest_check}
    if claims.media_type is not None:
        facts |= {"claimedMediaType": claims.media_type, "mediaTypeAgrees": claims.media_type_agrees}
    return facts
