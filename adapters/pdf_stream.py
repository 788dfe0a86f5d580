"""A long PDF's evidence bundle written as JSON Lines (or indented JSON) range by range, never held
whole: from ranges run in this process (:mod:`mediafleet.orchestrators.pdf_ranges`) or from a split
job's ranges' outcomes on the fleet (:func:`write_joined_bundle`).

The file is byte for byte what :func:`mediafleet.adapters.stream.write_bundle_lines` (or
``model_dump_json(indent=2)``) makes of the bundle one run gives. Each range's Evidence nodes are
written as soon as it is read; what the rest of the bundle needs of the whole run is carried as
running values only (counts, the document text's length, the OCR confidences' sum, the checks, the
producer, the first start and the last end). The claim, the activity and every per-locus edge and
PROV entry are taken from :func:`mediafleet.adapters.bundle.build_bundle` run on a one-page stand-in,
so this module spells none of them. A page OCR'd after ranges were written without OCR changes the
locus ids (they hash the producer's options): the stream starts again with the OCR producer. The
file is written under a temporary name and renamed when complete. How it works and what it costs:
docs/capabilities.md, "Long documents".
"""

from __future__ import annotations

import os
import secrets
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Protocol

from mediafleet.adapters.bundle import build_bundle, evidence_properties, with_claims
from mediafleet.adapters.ids import LOCUS_PREFIX, locus_ref, locus_refs
from mediafleet.adapters.loci import to_loci
from mediafleet.adapters.prov import turtle_lines
from mediafleet.adapters.stream import edge_line, end_line, head_line, node_line, prov_line, write_bundle_lines
from mediafleet.adapters.verify import loci_valid
from mediafleet.contract.bundle import CallerClaims, EvidenceBundle
from mediafleet.contract.common import Producer
from mediafleet.contract.errors import MediafleetError, PublicError
from mediafleet.contract.jobs import ExtractRequest, Outcome, Span
from mediafleet.contract.manifest import Capability, Modality
from mediafleet.contract.pdf import PdfPage, PdfResult
from mediafleet.adapters.pdf_join import JoinHead
from mediafleet.modalities.registry import for_modality
from mediafleet.modalities.spec import ProgressFn
from pydantic import TypeAdapter

from mediafleet.report.text import summary_lines

__all__ = ["RangeOutcomes", "RangeSource", "Written", "streams", "write_joined_bundle", "write_ranges", "written_whole"]

_WORDS_KEPT = 200  # words of the document's first texts kept for the summary (it prints the first 14)


def streams(capability: Capability) -> bool:
    """Whether ``capability``'s bundle can be written by :func:`write_pdf_bundle`: a PDF
    capability that the manifest in force lets run in page ranges."""
    return capability.modality == Modality.PDF and any(p.split is not None for p in capability.parts.values())


@dataclass
class Written:
    """What :func:`write_pdf_bundle` wrote: the bundle's status and error, and its summary."""

    status: str
    error: PublicError | None
    _summary: Callable[[str], list[str]] = field(repr=False)

    def summary_lines(self, name: str) -> list[str]:
        """What ``mediafleet extract`` prints for the bundle (:func:`mediafleet.report.text.summary_lines`)."""
        return self._summary(name)


def _stand_in(producer: Producer, page_total: int) -> PdfResult:
    """A one-page result with one locus of each kind a page gives (its region, its text, a line)."""
    page = PdfPage.model_validate({
        "page": 1, "width": 10.0, "height": 10.0, "text": "x", "path": "ocr", "ocr_reason": "no_text",
        "confidence": 0.5, "boxes": [{"x": 1.0, "y": 1.0, "width": 2.0, "height": 2.0, "text": "x", "confidence": 0.5}],
    })
    return PdfResult(page_count=page_total, pages=[page], producer=producer)


class _Forms:
    """What the bundle of a run with this producer, checks and times looks like around its loci:
    ``build_bundle`` (and the caller's claims) on the stand-in, cut into what comes before the
    Evidence nodes, the per-locus forms, and what comes after."""

    def __init__(self, outcome: Outcome, capability: Capability, claims: CallerClaims | None) -> None:
        stand_in = outcome.model_copy(update={"result": _stand_in(outcome.result.producer, outcome.result.page_count)})  # type: ignore[union-attr]
        bundle = with_claims(build_bundle(stand_in, capability), claims)
        if bundle.status != "ok":
            raise RuntimeError("the stand-in's bundle failed: the streamed bundle cannot follow the one-run form")
        self.bundle = bundle
        nodes = [n.model_dump(mode="json") for n in bundle.nodes]
        at = [i for i, n in enumerate(nodes) if n["node_type"] == "Evidence"]
        if len(at) != 3 or at != list(range(at[0], at[0] + 3)):
            raise RuntimeError("the stand-in's Evidence nodes are not three in a row")
        self.before, self.evidence, self.after = nodes[:at[0]], nodes[at[0]:at[-1] + 1], nodes[at[-1] + 1:]
        first = self.evidence[0]["properties"]["evidence_locus"]
        self.derivation, self.policy, self.subject = first["derivation_ref"], first["policy_ref"], first["subject"]
        self.occurrence_id, self.blob_ref = self.evidence[0]["properties"]["occurrence_id"], self.evidence[0]["properties"]["blob_ref"]
        self.locus_ids = [n["properties"]["evidence_locus"]["id"] for n in self.evidence]
        if self.locus_ids != locus_refs(self.derivation, 3):
            raise RuntimeError("the stand-in's locus ids are not locus_refs of its derivation")
        evidence_ids = [n["id"] for n in self.evidence]
        if evidence_ids != [_evidence_id(i) for i in self.locus_ids]:
            raise RuntimeError("the stand-in's Evidence ids are not its locus ids' tokens")
        mine = self.nodes(self.locus_ids, to_loci(stand_in.result, outcome.artifact.digest), 0)
        for node, made in zip(self.evidence, mine, strict=True):
            if list(_walk(made)) != list(_walk(node)):
                raise RuntimeError("build_bundle's Evidence node has a form this module does not write")
        edges = [e.model_dump(mode="json") for e in bundle.edges]
        mine_edges = [i for i, e in enumerate(edges) if e["source"] in evidence_ids]
        per = len(mine_edges) // 3
        if not per or mine_edges != list(range(mine_edges[0], mine_edges[0] + 3 * per)):
            raise RuntimeError("the stand-in's per-locus edges are not in a row")
        self.edges_before, self.edges_after = edges[:mine_edges[0]], edges[mine_edges[-1] + 1:]
        self.edge_forms = edges[mine_edges[0]:mine_edges[0] + per]
        graph = bundle.prov["@graph"]
        mine_prov = [i for i, e in enumerate(graph) if e.get("@id") in self.locus_ids]
        if len(mine_prov) != 3 or mine_prov != list(range(mine_prov[0], mine_prov[0] + 3)):
            raise RuntimeError("the stand-in's per-locus PROV entries are not three in a row")
        self.prov_before, self.prov_form, self.prov_after = graph[:mine_prov[0]], graph[mine_prov[0]], graph[mine_prov[-1] + 1:]
        self.context = bundle.prov["@context"]

    def nodes(self, locus_ids: list[str], drafts: list[Any], text_base: int) -> Iterator[dict[str, Any]]:
        """The Evidence nodes of ``drafts`` (CharacterRanges moved on by ``text_base``), as
        ``build_bundle`` makes them (:func:`mediafleet.adapters.bundle.evidence_properties`), in
        their JSON form."""
        every = evidence_properties(drafts, locus_ids, subject=self.subject, policy=self.policy,
                                    derivation=self.derivation, occurrence_id=self.occurrence_id,
                                    blob_id=self.blob_ref, text_base=text_base)
        for locus_id, props in zip(locus_ids, every, strict=True):
            yield {"id": _evidence_id(locus_id), "node_type": "Evidence", "properties": props}

    def counted(self, loci: int, confidence: float) -> None:
        """Set the stand-in's counts to the run's (its claim, its activity node and PROV entry)."""
        for node in self.after:
            props = node["properties"]
            if node["node_type"] == "Claim":
                props["locus_count"], props["confidence"] = loci, confidence
            elif node["node_type"] == "ProvenanceActivity":
                props["locusCount"] = loci
        for entry in self.prov_before:
            if "mf:locusCount" in entry:
                entry["mf:locusCount"] = loci

    def edges(self, locus_id: str) -> Iterator[dict[str, Any]]:
        stand_in, evidence_id = _evidence_id(self.locus_ids[0]), _evidence_id(locus_id)
        for form in self.edge_forms:
            yield {k: evidence_id if v == stand_in else v for k, v in form.items()}

    def prov(self, locus_id: str) -> dict[str, Any]:
        return {k: locus_id if v == self.locus_ids[0] else v for k, v in self.prov_form.items()}


def _evidence_id(locus_id: str) -> str:
    return "evidence:" + locus_id[len(LOCUS_PREFIX):]


def _walk(value: Any) -> Iterator[Any]:
    """Keys in order and values, nested: two values with the same walk serialise alike."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _walk(v)
    else:
        yield type(value).__name__, value


class _Run:
    """The running values of one streamed run."""

    def __init__(self) -> None:
        self.loci = 0
        self.text_base = 0
        self.confidences = array("d")
        self.checks: dict[str, bool] = {}
        self.pages = {"text_layer": 0, "ocr": 0}
        self.lines = 0
        self.texts: list[str] = []
        self.words = 0
        self.page_count = 0

    def range_read(self, outcome: Outcome) -> None:
        for name, ok in outcome.checks.items():
            self.checks[name] = self.checks.get(name, True) and ok


class RangeOutcomes(Protocol):
    """The outcomes of a split job's ranges, read one at a time (the fleet's: each range's record)."""

    spans: list[Span]
    """The job's ranges in page order: pages 1 to the last, each range right after the one before."""

    def read(self, span: Span) -> Outcome | None:
        """The outcome range ``span`` reported (as the job's join read it: validated, its signature
        checked with signing on, its blob re-hashed); None when it cannot be had as it was joined."""
        ...


def write_joined_bundle(
    outcomes: RangeOutcomes,
    capability: Capability,
    lines_to: Path,
    *,
    turtle_to: Path | None = None,
    claims: CallerClaims | None = None,
    form: str = "jsonl",
) -> Written | None:
    """Write the bundle of a split job that finished ok (:mod:`mediafleet.workers.pdf.split`)
    from its ranges' outcomes, read one at a time in page order, never joined.

    The file is exactly what ``build_bundle`` of the job's joined outcome (``PagesPart.join``:
    the first range's outcome with every range's pages, the first producer that names OCR models
    or else the first range's, each check passed by every range, the earliest start and the latest
    end) would be written as, with ``claims`` recorded, in ``form`` (as :func:`write_pdf_bundle`).

    Returns:
        What was written; None when a range's outcome cannot be had as it was joined, or is not a
        passed range of these pages (nothing is left under either name: the caller reads the
        joined outcome instead).

    Raises:
        OSError: a file could not be written (nothing is left under either name).
    """
    if not outcomes.spans:
        return None
    try:
        return write_ranges(_Reported(outcomes), capability, claims, lines_to, turtle_to, form, None)
    except _NotJoinable:
        return None


class _NotJoinable(Exception):
    """A range's outcome is not one the job's join took as it is here (missing, failed, forged)."""


class RangeSource(Protocol):
    """Where a split document's ranges come from: run here (in-process) or as the fleet's parts reported them."""

    spans: list[Span]
    total: int
    joins: bool  # the head is the parts' join's (PagesPart.join), not one run's
    request: ExtractRequest | None  # the whole run's (in-process)

    def read(self, span: Span, progress: ProgressFn | None) -> Outcome: ...


class _Reported:
    """On the fleet: each range's outcome as its part reported it."""

    joins = True
    request = None

    def __init__(self, outcomes: RangeOutcomes) -> None:
        self.outcomes, self.spans = outcomes, list(outcomes.spans)
        self.total = self.spans[-1].last
        if [s.first for s in self.spans] != [1, *(s.last + 1 for s in self.spans[:-1])] \
                or any(s.last < s.first for s in self.spans):
            raise _NotJoinable  # not pages 1 to the last, each range right after the one before

    def read(self, span: Span, progress: ProgressFn | None) -> Outcome:
        outcome = self.outcomes.read(span)
        if outcome is None or outcome.status != "ok" or outcome.error is not None \
                or not isinstance(outcome.result, PdfResult) \
                or [p.page for p in outcome.result.pages] != list(range(span.first, span.last + 1)):
            raise _NotJoinable
        return outcome


def write_ranges(source: RangeSource, capability: Capability, claims: CallerClaims | None, lines_to: Path,
           turtle_to: Path | None, form: str, progress: ProgressFn | None) -> Written:
    pinned: Producer | None = None
    while True:
        with _Temp(lines_to) as out:
            done = _stream(source, capability, pinned, claims, out, form, progress)
            if isinstance(done, Producer):  # OCR met after ranges written without it: again
                pinned = done
                continue
            if isinstance(done, EvidenceBundle):  # a range failed: the one-run failure's bundle
                return written_whole(done, lines_to, turtle_to, form)
            forms, run = done
            if turtle_to is not None:
                _write_turtle(turtle_to, {"@context": forms.context, "@graph": _graph(forms, run)})
            out.keep()
        return Written("ok", None, lambda name: _summary(name, forms, run))


def _stream(source: RangeSource, capability: Capability, pinned: Producer | None, claims: CallerClaims | None,
            out: _Temp, form: str, progress: ProgressFn | None) -> Producer | EvidenceBundle | tuple[_Forms, _Run]:
    run = _Run()
    forms: _Forms | None = None
    producer = pinned
    started = ended = None
    head: Outcome | None = None
    write = _FORMS_OF[form](out.file)
    joining = JoinHead()  # a join's values, as PagesPart.join takes them
    for span in source.spans:
        shown = _shifted(progress, span.first - 1, source.total)
        outcome = source.read(span, shown)
        if source.joins:  # the join's: the earliest start, the latest end
            joining.add(outcome)
            started, ended = joining.started_at, joining.ended_at
        else:
            started = started or outcome.started_at
        if outcome.status != "ok" or not isinstance(outcome.result, PdfResult):
            failed = outcome.model_copy(update={"started_at": started})
            return with_claims(build_bundle(failed, capability), claims)
        if not source.joins:
            ended = outcome.ended_at
        if head is None:
            head = outcome.model_copy(update={"result": None})
            run.page_count = outcome.result.page_count
        result: PdfResult = outcome.result
        if producer is None:
            producer = result.producer
        elif result.producer.models and not producer.models:
            if forms is not None and _Forms(_joined(outcome, result.producer, started), capability,
                                            claims).derivation != forms.derivation:
                return result.producer
            producer = result.producer
        if forms is None:
            forms = _Forms(_joined(outcome, producer, started), capability, claims)
            write.head(forms.bundle)
            for node in forms.before:
                write.node(node)
        if not source.joins:
            run.range_read(outcome)
        drafts = to_loci(result, outcome.artifact.digest)
        if source.joins:  # as build_bundle checks the joined result's loci
            try:
                capability.check_produces({d.address.kind for d in drafts})
            except MediafleetError:
                raise _NotJoinable from None
            if not loci_valid(drafts):
                raise _NotJoinable
        ids = _locus_ids(forms.derivation, run.loci, len(drafts))
        for node in forms.nodes(ids, drafts, run.text_base):
            write.node(node)
        run.confidences.extend([d.confidence for d in drafts if d.confidence is not None])
        run.loci += len(drafts)
        _tally(run, result, drafts)
        del drafts, ids, result, outcome
    assert forms is not None and started is not None and ended is not None and head is not None
    if source.joins:  # the first range's outcome, as PagesPart.join keeps it, with the join's values
        final = head.model_copy(update={
            "result": _stand_in(producer, run.page_count), "checks": joining.checks,  # type: ignore[arg-type]
            "started_at": started, "ended_at": ended,
        })
    else:
        request = source.request
        assert request is not None
        final = Outcome.model_validate({
            "job_id": request.job_id, "action": request.action, "artifact": request.artifact, "status": "ok",
            "result": _stand_in(producer, source.total), "checks": run.checks,  # type: ignore[arg-type]
            "started_at": started, "ended_at": ended, "device": request.device,
        })
    forms = _Forms(final, capability, claims)
    confidences = list(run.confidences)
    forms.counted(run.loci, sum(confidences) / len(confidences) if confidences else 1.0)
    del confidences
    for node in forms.after:
        write.node(node)
    for edge in forms.edges_before:
        write.edge(edge)
    for locus_id in _all_ids(forms.derivation, run.loci):
        for edge in forms.edges(locus_id):
            write.edge(edge)
    for edge in forms.edges_after:
        write.edge(edge)
    entries = 0
    for entry in _graph(forms, run):
        write.prov(entry)
        entries += 1
    nodes = len(forms.before) + run.loci + len(forms.after)
    edges = len(forms.edges_before) + len(forms.edge_forms) * run.loci + len(forms.edges_after)
    write.end(nodes, edges, entries, forms.context)
    return forms, run


def _joined(outcome: Outcome, producer: Producer, started: datetime) -> Outcome:
    """A range's outcome standing for the run's so far (for the forms' ids and the head)."""
    result = outcome.result.model_copy(update={"producer": producer})  # type: ignore[union-attr]
    return outcome.model_copy(update={"result": result, "started_at": started})


def _graph(forms: _Forms, run: _Run) -> Iterator[dict[str, Any]]:
    yield from forms.prov_before
    for locus_id in _all_ids(forms.derivation, run.loci):
        yield forms.prov(locus_id)
    yield from forms.prov_after


_CHUNK = 4096


def _locus_ids(derivation: str, first: int, count: int) -> list[str]:
    """Locus ids ``first`` to ``first + count - 1`` of the derivation (as ``locus_refs`` numbers them)."""
    if first == 0:
        return locus_refs(derivation, count)
    return [locus_ref(derivation, i) for i in range(first, first + count)]


def _all_ids(derivation: str, count: int) -> Iterator[str]:
    for first in range(0, count, _CHUNK):
        yield from _locus_ids(derivation, first, min(_CHUNK, count - first))


def _tally(run: _Run, result: PdfResult, drafts: list[Any]) -> None:
    for page in result.pages:
        run.pages[page.path] = run.pages.get(page.path, 0) + 1
        run.text_base += len(page.text) + 1
        run.lines += len(page.boxes)
    if run.words < _WORDS_KEPT:
        for draft in drafts:
            if draft.address.kind == "character_range" and run.words < _WORDS_KEPT:
                run.texts.append(draft.text or "")
                run.words += len((draft.text or "").split())


class _Loci:
    """The (address, properties) pairs a summary reads, remade from the counts on each pass: the
    pages by how they were read, one line per text line, and the document's first texts."""

    def __init__(self, run: _Run) -> None:
        self.run = run

    def __iter__(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        for path, count in self.run.pages.items():
            for _ in range(count):
                yield {"kind": "page_region"}, {"path": path}
        line = ({"kind": "image_region"}, {})
        for _ in range(self.run.lines):
            yield line
        for text in self.run.texts:
            yield {"kind": "character_range"}, {"text": text}


def _summary(name: str, forms: _Forms, run: _Run) -> list[str]:
    """``summary_lines`` of the bundle written: the claim's verdict from the stand-in's (its
    checks are the run's), the body from the PDF summary over the counts."""
    stand_in = summary_lines(name, forms.bundle)
    spec = for_modality(Modality.PDF.value)
    assert spec is not None
    body = spec.summary.load()(_Loci(run))
    media_type = forms.bundle.artifact.media_type or "type not recognised"
    return [f"{name}: ok ({media_type}), {body[0]}", *(f"  {line}" for line in body[1:]), stand_in[-1]]


def _shifted(progress: ProgressFn | None, before: int, total: int) -> ProgressFn | None:
    if progress is None:
        return None

    def shown(done: int, _span: int, *unit: Any) -> None:
        progress(before + done, total, *unit)

    return shown


def written_whole(bundle: EvidenceBundle, lines_to: Path, turtle_to: Path | None, form: str) -> Written:
    """Write a bundle held whole (a failure's, a few records; or a PDF whose pages cannot be counted)."""
    with _Temp(lines_to) as out:
        if form == "jsonl":
            write_bundle_lines(bundle, out.file)
        else:
            out.file.write(bundle.model_dump_json(indent=2))
        if turtle_to is not None:
            _write_turtle(turtle_to, bundle.prov)
        out.keep()
    return Written(bundle.status, bundle.error, lambda name: summary_lines(name, bundle))


def _write_turtle(target: Path, prov: dict[str, Any]) -> None:
    """``prov`` (its ``@graph`` may be an iterator) as Turtle, under a temporary name renamed to ``target``."""
    with _Temp(target) as ttl:
        for line in turtle_lines(prov):
            ttl.file.write(line)
        ttl.keep()


class _Lines:
    """Records written as JSON Lines (:mod:`mediafleet.adapters.stream`)."""

    def __init__(self, file: IO[str]) -> None:
        self.write = file.write

    def head(self, bundle: EvidenceBundle) -> None:
        self.write(head_line(bundle))

    def node(self, node: dict[str, Any]) -> None:
        self.write(node_line(node))

    def edge(self, edge: dict[str, Any]) -> None:
        self.write(edge_line(edge))

    def prov(self, entry: dict[str, Any]) -> None:
        self.write(prov_line(entry))

    def end(self, nodes: int, edges: int, entries: int, context: Any) -> None:
        self.write(end_line(nodes, edges, entries, context))


_ANY: TypeAdapter[Any] = TypeAdapter(Any)


class _Indented:
    """Records written as the bundle's ``model_dump_json(indent=2)``: the head is that of the
    bundle with empty lists, cut where they are; each node, edge and PROV entry is pydantic's own
    indented JSON of it, moved in to its depth (a JSON text has no newline but between tokens)."""

    _LISTS = ('"nodes": [', '"edges": [', '"@graph": [')

    def __init__(self, file: IO[str]) -> None:
        self.write = file.write
        self.list = -1
        self.first = True

    def head(self, bundle: EvidenceBundle) -> None:
        empty = bundle.model_copy(update={"nodes": [], "edges": [],
                                          "prov": {**bundle.prov, "@graph": []}}).model_dump_json(indent=2)
        # the text up to each list's "[", and after the last one's: "]" and what follows it
        ends = [empty.index(name + "]") + len(name) for name in self._LISTS]
        if ends != sorted(ends):
            raise RuntimeError("the bundle's lists are not in the order nodes, edges, PROV graph")
        self.pieces = [empty[start:end] for start, end in zip([0, *ends], [*ends, len(empty)], strict=True)]
        self.write(self.pieces[0])
        self._start(0)

    def _start(self, index: int) -> None:
        self.list, self.first = index, True
        self.pad = " " * (2 * (2 if index < 2 else 3))

    def _item(self, index: int, value: Any) -> None:
        while self.list < index:
            self._close()
        text = _ANY.dump_json(value, indent=2).decode()
        self.write(("\n" if self.first else ",\n") + self.pad + text.replace("\n", "\n" + self.pad))
        self.first = False

    def _close(self) -> None:
        if not self.first:
            self.write("\n" + self.pad[2:])
        self.write(self.pieces[self.list + 1])
        if self.list < 2:
            self._start(self.list + 1)
        else:
            self.list = 3

    def node(self, node: dict[str, Any]) -> None:
        self._item(0, node)

    def edge(self, edge: dict[str, Any]) -> None:
        self._item(1, edge)

    def prov(self, entry: dict[str, Any]) -> None:
        self._item(2, entry)

    def end(self, nodes: int, edges: int, entries: int, context: Any) -> None:
        while self.list < 3:
            self._close()


_FORMS_OF = {"jsonl": _Lines, "json": _Indented}


class _Temp:
    """A file written under a temporary name beside ``target`` and renamed to it by ``keep``;
    removed when the ``with`` ends without ``keep``."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.file: IO[str]
        self._name = ""

    def __enter__(self) -> _Temp:
        self._open()
        return self

    def _open(self) -> None:
        # open(..., "x") rather than mkstemp: the file gets the mode any file written here gets (umask)
        self._name = str(self.target.parent / f".{self.target.name}.{secrets.token_hex(6)}.part")
        self.file = open(self._name, "x", encoding="utf-8")  # noqa: SIM115 - closed by keep or __exit__

    def keep(self) -> None:
        self.file.close()
        os.replace(self._name, self.target)
        self._name = ""

    def __exit__(self, *exc: object) -> None:
        if self._name:
            self.file.close()
            try:
                os.unlink(self._name)
            except FileNotFoundError:
                pass
