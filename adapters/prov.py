"""W3C PROV-O for one fleet call, as JSON-LD (and Turtle, through rdflib).

The activity ``used`` the artifact entity and ``wasAssociatedWith`` a ``prov:SoftwareAgent``
naming the engine and extractor with their versions; every locus entity ``wasGeneratedBy`` the
activity and ``wasDerivedFrom`` the artifact; so does the claim. The context is inline, so parsing
needs no network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["PROV_CONTEXT", "ProvFacts", "prov_jsonld", "to_turtle"]

MF = "urn:mediafleet:ns#"

PROV_CONTEXT: dict[str, Any] = {
    "prov": "http://www.w3.org/ns/prov#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "xsd": "http://www.w3.org/2001/XMLSchema#",
    "mf": MF,
}


@dataclass(frozen=True)
class ProvFacts:
    activity_id: str
    artifact_id: str
    digest: str
    media_type: str | None
    agent_id: str
    agent_label: str
    agent_facts: dict[str, str]
    action: str
    status: str
    started_at: datetime
    ended_at: datetime
    locus_ids: Sequence[str]
    claim_id: str | None


def _iri(node_id: str) -> str:
    """A graph id as an absolute IRI: ``eg:`` refs already are; the rest go under ``urn:``."""
    return node_id if node_id.startswith("eg:") else f"urn:mediafleet:{node_id}"


def _time(value: datetime) -> dict[str, str]:
    return {"@value": value.isoformat(), "@type": "xsd:dateTime"}


def prov_jsonld(facts: ProvFacts) -> dict[str, Any]:
    """The PROV-O JSON-LD document for one fleet call."""
    activity = _iri(facts.activity_id)
    artifact = _iri(facts.artifact_id)
    agent = _iri(facts.agent_id)
    graph: list[dict[str, Any]] = [
        {
            "@id": activity,
            "@type": "prov:Activity",
            "prov:used": {"@id": artifact},
            "prov:wasAssociatedWith": {"@id": agent},
            "prov:startedAtTime": _time(facts.started_at),
            "prov:endedAtTime": _time(facts.ended_at),
            "mf:action": facts.action,
            "mf:status": facts.status,
            "mf:locusCount": len(facts.locus_ids),
        },
        {
            "@id": artifact,
            "@type": "prov:Entity",
            "mf:digest": facts.digest,
            **({"mf:mediaType": facts.media_type} if facts.media_type else {}),
        },
        {
            "@id": agent,
            "@type": ["prov:Agent", "prov:SoftwareAgent"],
            "rdfs:label": facts.agent_label,
            **{f"mf:{k}": v for k, v in facts.agent_facts.items()},
        },
    ]
    derived = [*facts.locus_ids, *([facts.claim_id] if facts.claim_id else [])]
    for node_id in derived:
        graph.append(
            {
                "@id": _iri(node_id),
                "@type": "prov:Entity",
                "prov:wasGeneratedBy": {"@id": activity},
                "prov:wasDerivedFrom": {"@id": artifact},
            }
        )
    return {"@context": PROV_CONTEXT, "@graph": graph}


def to_turtle(document: dict[str, Any]) -> str:
    """Serialise a PROV JSON-LD document as Turtle."""
    import json

    from rdflib import Graph

    g = Graph()
    g.parse(data=json.dumps(document), format="json-ld")
    g.bind("prov", PROV_CONTEXT["prov"])
    g.bind("mf", MF)
    return g.serialize(format="turtle")
