"""W3C PROV-O for one fleet call, as JSON-LD (and Turtle).

The activity ``used`` the artifact entity and ``wasAssociatedWith`` a ``prov:SoftwareAgent``
naming the engine and extractor with their versions; every locus entity ``wasGeneratedBy`` the
activity and ``wasDerivedFrom`` the artifact; so does the claim. The context is inline, so parsing
needs no network. The Turtle form is written directly, a statement at a time (:func:`turtle_lines`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["PROV_CONTEXT", "ProvFacts", "prov_jsonld", "to_turtle", "turtle_lines"]

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
    # Every derived entity points at the same activity and artifact: one value of each, shared
    # (read-only, as the whole document is), instead of two new dicts per locus.
    generated_by, derived_from = {"@id": activity}, {"@id": artifact}
    graph.extend([
        {
            "@id": node_id if node_id.startswith("eg:") else _iri(node_id),  # _iri, without a call per locus
            "@type": "prov:Entity",
            "prov:wasGeneratedBy": generated_by,
            "prov:wasDerivedFrom": derived_from,
        }
        for node_id in derived
    ])
    return {"@context": PROV_CONTEXT, "@graph": graph}


def _term(name: str, context: dict[str, Any]) -> str:
    """A compact ``prefix:local`` name as a Turtle IRI term (its prefix must be in the context)."""
    prefix, sep, local = name.partition(":")
    if not sep or prefix not in context or not local.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"{name!r} is not a compact IRI of the document's context")
    return name


def _iri_term(value: str) -> str:
    if any(c in value for c in '<>"{}|^`\\ ') or ":" not in value:
        raise ValueError(f"{value!r} is not an absolute IRI")
    return f"<{value}>"


def _literal(value: Any, context: dict[str, Any]) -> str | None:
    if value is None:
        return None  # JSON-LD drops a null value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f'"{value}"^^xsd:integer'
    if isinstance(value, float):
        return f'"{value!r}"^^xsd:double'
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict) and set(value) == {"@id"}:
        return _iri_term(value["@id"])
    if isinstance(value, dict) and set(value) == {"@value", "@type"} and isinstance(value["@value"], str):
        return f"{json.dumps(value['@value'], ensure_ascii=False)}^^{_term(value['@type'], context)}"
    raise ValueError(f"a value of type {type(value).__name__} this writer does not know")


def turtle_lines(document: dict[str, Any]) -> Iterator[str]:
    """The PROV JSON-LD document as Turtle, one statement at a time (the graph is never built).

    Written directly for the documents :func:`prov_jsonld` makes (and callers' claims added to
    them): the same triples rdflib finds in the JSON-LD, without its in-memory graph (a long
    document's PROV has one entity per locus: through rdflib, seconds and hundreds of megabytes).

    Raises:
        ValueError: the document is not of that form (another context, a nested node, a list
            value, a key or IRI it cannot write).
    """
    context = document.get("@context")
    if context != PROV_CONTEXT:
        raise ValueError("the document's @context is not the fleet's PROV context")
    for prefix, iri in context.items():
        yield f"@prefix {prefix}: <{iri}> .\n"
    for entry in document.get("@graph", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("@id"), str):
            raise ValueError("a @graph entry without an @id")  # noqa: TRY004 (a malformed document, as the others)
        statements: list[str] = []
        types = entry.get("@type", [])
        for kind in [types] if isinstance(types, str) else types:
            statements.append(f"a {_term(kind, context)}")
        for key, value in entry.items():
            if key in ("@id", "@type"):
                continue
            term = _literal(value, context)
            if term is not None:
                statements.append(f"{_term(key, context)} {term}")
        if statements:
            yield f"\n{_iri_term(entry['@id'])} " + " ;\n    ".join(statements) + " .\n"


def to_turtle(document: dict[str, Any]) -> str:
    """Serialise a PROV JSON-LD document as Turtle (:func:`turtle_lines` joined)."""
    return "".join(turtle_lines(document))
