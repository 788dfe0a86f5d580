"""The evidence bundle as JSON Lines: one record per line, written and read one line at a time.

A long document's bundle is tens of megabytes as one JSON object, and writing it that way holds
the whole text in memory beside the bundle (and makes a reader parse it whole). The stream form
(``mediafleet.evidence-bundle/v1+jsonl``) carries exactly the same bundle, in this order:

1. ``{"record": "bundle", "format", "job_id", "action", "artifact", "status", "error"}``: the head;
2. ``{"record": "node", "id", "node_type", "properties"}``: each node, in the bundle's order
   (the artifact's three nodes, each locus's Evidence node in locus order, the Claim, the
   ProvenanceActivity);
3. ``{"record": "edge", "source", "target", "relationship"}``: each edge, in order;
4. ``{"record": "prov", "entry"}``: each entry of the PROV-O JSON-LD ``@graph``, in order;
5. ``{"record": "end", "nodes", "edges", "prov_entries", "prov_context"}``: the counts of what came
   before and the JSON-LD ``@context``. A stream without it, or whose counts differ, was cut short
   and is refused.

:func:`bundle_lines` and :func:`write_bundle_lines` serialise one record at a time;
:func:`read_bundle_lines` validates a stream back into the :class:`EvidenceBundle` it came from.
The record writers (:func:`head_line`, :func:`node_line`, :func:`edge_line`, :func:`prov_line`,
:func:`end_line`) are the one place each record's form is spelled, for a writer that makes the
bundle as it goes (a long PDF in-process: :mod:`mediafleet.adapters.pdf_stream`) rather than from a
bundle held whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

from mediafleet.contract.bundle import BUNDLE_FORMAT, EvidenceBundle

__all__ = ["BUNDLE_STREAM_FORMAT", "bundle_lines", "edge_line", "end_line", "head_line", "node_line", "prov_line",
           "read_bundle_lines", "write_bundle_lines"]

BUNDLE_STREAM_FORMAT = f"{BUNDLE_FORMAT}+jsonl"

_HEAD = ("job_id", "action", "artifact", "status", "error")


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def head_line(bundle: EvidenceBundle) -> str:
    """The head record of ``bundle``'s stream (its nodes, edges and PROV are not read)."""
    head = bundle.model_dump(mode="json", include=set(_HEAD))
    return _line({"record": "bundle", "format": BUNDLE_STREAM_FORMAT, **{k: head[k] for k in _HEAD}})


def node_line(node: Mapping[str, Any]) -> str:
    """A node record: ``node`` is the node's JSON form (``Node.model_dump(mode="json")``)."""
    return _line({"record": "node", **node})


def edge_line(edge: Mapping[str, Any]) -> str:
    """An edge record: ``edge`` is the edge's JSON form."""
    return _line({"record": "edge", **edge})


def prov_line(entry: Any) -> str:
    """A record of one entry of the PROV-O ``@graph``."""
    return _line({"record": "prov", "entry": entry})


def end_line(nodes: int, edges: int, prov_entries: int, prov_context: Any) -> str:
    """The end record: the counts of the records before it, and the JSON-LD ``@context``."""
    return _line({"record": "end", "nodes": nodes, "edges": edges, "prov_entries": prov_entries,
                  "prov_context": prov_context})


def bundle_lines(bundle: EvidenceBundle) -> Iterator[str]:
    """The stream form of ``bundle``, one newline-terminated JSON record at a time."""
    yield head_line(bundle)
    for node in bundle.nodes:
        yield node_line(node.model_dump(mode="json"))
    for edge in bundle.edges:
        yield edge_line(edge.model_dump(mode="json"))
    graph = bundle.prov.get("@graph", [])
    for entry in graph:
        yield prov_line(entry)
    yield end_line(len(bundle.nodes), len(bundle.edges), len(graph), bundle.prov.get("@context", {}))


def write_bundle_lines(bundle: EvidenceBundle, out: IO[str]) -> int:
    """Write the stream form of ``bundle`` to ``out`` line by line; returns the lines written."""
    count = 0
    for count, line in enumerate(bundle_lines(bundle), start=1):
        out.write(line)
    return count


def read_bundle_lines(lines: Iterable[str]) -> EvidenceBundle:
    """The bundle a stream carries, validated as a whole.

    Raises:
        ValueError: a line that is not a record in its place, a stream of another format, or one
            cut short (no end record, or counts that differ from the records read).
    """
    head: dict[str, Any] | None = None
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    graph: list[Any] = []
    end: dict[str, Any] | None = None
    order = {"node": 1, "edge": 2, "prov": 3}
    stage = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {number} is not JSON") from exc
        kind = record.pop("record", None) if isinstance(record, dict) else None
        if end is not None:
            raise ValueError(f"line {number} follows the end record")
        if head is None:
            if kind != "bundle" or record.pop("format", None) != BUNDLE_STREAM_FORMAT:
                raise ValueError(f"line {number} is not the head of a {BUNDLE_STREAM_FORMAT} stream")
            head = record
        elif kind in order:
            if order[kind] < stage:
                raise ValueError(f"line {number}: a {kind} record after the {kind}s' place")
            stage = order[kind]
            if kind == "node":
                nodes.append(record)
            elif kind == "edge":
                edges.append(record)
            else:
                graph.append(record.get("entry"))
        elif kind == "end":
            end = record
        else:
            raise ValueError(f"line {number} is not a bundle record")
    if head is None or end is None:
        raise ValueError("the stream is cut short: no end record")
    if (end.get("nodes"), end.get("edges"), end.get("prov_entries")) != (len(nodes), len(edges), len(graph)):
        raise ValueError("the stream is cut short: its counts differ from the end record's")
    prov = {"@context": end.get("prov_context", {}), "@graph": graph}
    return EvidenceBundle.model_validate({**head, "nodes": nodes, "edges": edges, "prov": prov})
