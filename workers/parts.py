"""A job's parts on the fleet: planned from the manifest, reported into the job, joined in one place.

The manifest declares the parts a capability's job fans out (:class:`mediafleet.contract.manifest.Part`),
by name; the capability's modality spec names the code of each (``ModalitySpec.parts``: a
:class:`PartKind`). Two kinds exist:

* a **companion** runs another capability on the same artifact beside the job (a video's
  ``speech``: ``transcribe_segments`` on the audio queue, so the transcript is made in parallel by
  whichever audio worker, GPU first, is free, and video workers need no Whisper model);
* a **split** cuts the job itself into ranges of its unit (a long PDF's ``pages``, ``size`` per
  part): the job's own task reads the first range, each further range is a part, on as many
  workers as are free, and the ranges are joined in order into exactly the result one run gives.

This module plans a job's parts (:func:`plan`: the job's own request and one request per part,
with ids derived from the job's, so a resubmission finds the same parts), checks that a part a
worker is given is one the manifest in force authorises (:func:`part_capabilities`), and joins
the parts' outcomes into the one outcome the caller reads (:func:`join`). Each part reports its
outcome into the job's record under its name (``pages:33-64``, ``speech``; the job's own task under
its modality's name); whoever reports last joins. In-process nothing fans out: the job makes the
same result in one run (:func:`join_inline` for a companion's work).

A companion is authorised by its parent's capability (fail closed: the manifest in force must
declare the part, list its capability and declare every locus kind that capability produces),
and runs with its own capability's engine, limits, time limits and device classes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from mediafleet.adapters.loci import to_loci
from mediafleet.adapters.verify import loci_valid
from mediafleet.contract.errors import CapabilityRefused, ErrorCode, IntegrityError, PublicError
from mediafleet.contract.jobs import ExtractRequest, Outcome, PartOf, Span
from mediafleet.contract.manifest import Capability, Manifest, Part
from mediafleet.contract.results import OPTIONS_BY_MODALITY
from pydantic import BaseModel, ValidationError

__all__ = ["PartKind", "Planned", "ReportsGone", "decides", "head_of", "join", "join_inline", "kind_of", "named_job_id", "narrow", "options_for", "own_part", "part_capabilities", "plan", "probe", "report_head", "split_by_span", "verify_result", "within_manifest"]

Planned = tuple[ExtractRequest, dict[str, ExtractRequest]]
"""The job's own request (a split's first range) and its parts' requests by part name."""


class ReportsGone(RuntimeError):
    """A streamed outcome's sources (its parts' reports) went from the record while it was being
    written: another writer finished the record first (finishing drops the reports in the same
    step), so this write is the one that loses, and :meth:`JobStore.finish` stores nothing."""


class PartKind(Protocol):
    """The code of one declared part (a modality spec's ``parts`` entry).

    Attributes:
        option: a companion's boolean option (the manifest's ``Part.option`` must name it); None
            for a split.
        reverify: whether a result this part joined is checked again like an extractor's (a
            transcript attached to a video: yes; a split's ranges, each checked by the worker that
            read it and joined without a locus of their own: no, that would read the whole
            document's loci once more).
    """

    option: str | None
    reverify: bool

    def probe(self, source: Path | BinaryIO) -> Any:
        """What planning needs from the bytes, read by the dispatcher before they are stored (a
        video's audio track, a PDF's page count); None when it cannot tell (no part is planned)."""
        ...

    def plan(self, request: ExtractRequest, name: str, part: Part, capability: Capability, manifest: Manifest,
             fact: Any) -> Planned:
        """The job's own request and the parts' requests (none: the job runs as one task)."""
        ...

    def narrow(self, options: BaseModel, span: Span) -> BaseModel:
        """A split's options for one range (a companion never gets a span)."""
        ...

    def inline(self, result: BaseModel, path: Path, part: Part | None, manifest: Manifest) -> BaseModel:
        """In-process: do here what the part (as the manifest in force declares it, or None)
        would do on the fleet (a companion's work)."""
        ...

    def join(self, outcome: Outcome, reported: Mapping[str, Outcome | None], manifest: Manifest) -> Outcome:
        """``outcome`` (the job's own task's, or what is joined so far) with these parts' outcomes
        joined in (None: that part never reported)."""
        ...

    def decides(self, outcome: Outcome) -> bool:
        """Whether this part's outcome decides the job alone (a failed page range does; a failed
        companion only marks its part)."""
        ...


def kind_of(capability: Capability, name: str) -> PartKind:
    """The code of ``capability``'s part ``name`` (a part name, or a split part's ``name:a-b``)."""
    from mediafleet.modalities.registry import spec_for

    return spec_for(capability.action).parts[name.partition(":")[0]].load()


def own_part(capability: Capability) -> str:
    """The name a job's own task reports under into its record when the job has parts."""
    return capability.modality.value


def _companion_allowed(part: Part, capability: Capability, manifest: Manifest) -> bool:
    if part.action is None or part.action not in manifest.capabilities:
        return False
    return set(manifest.capability(part.action).produces) <= set(capability.produces)


def within_manifest(options: BaseModel, request: ExtractRequest, capability: Capability,
                    manifest: Manifest) -> BaseModel:
    """Turn off what a companion's option would add that the manifest in force does not declare.

    A video's speech transcript is AudioRange evidence made by the ``transcribe_segments`` engine:
    when the operator's manifest drops the part, the capability or the locus kind, speech is off by
    default and refused when asked for.
    """
    from mediafleet.modalities.registry import spec_for

    for name, ref in spec_for(capability.action).parts.items():
        option = ref.load().option
        if option is None or not getattr(options, option, False):
            continue
        part = capability.parts.get(name)
        if part is None or not _companion_allowed(part, capability, manifest):
            if request.options.get(option) is True:
                raise CapabilityRefused(f"{option} is not declared for this action by the manifest in force")
            options = options.model_copy(update={option: False})
    return options


def options_for(request: ExtractRequest, capability: Capability, manifest: Manifest) -> BaseModel:
    """The request's options as the capability's model, narrowed to what the manifest declares.

    Raises:
        CapabilityRefused: ``invalid_request`` for options that do not fit together (the message
            is the model's rule, never the values sent).
    """
    try:
        options = OPTIONS_BY_MODALITY[capability.modality.value].model_validate(request.options)
    except ValidationError as exc:
        rules = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors(include_input=False))
        raise CapabilityRefused(f"the options do not fit together: {rules}", code=ErrorCode.INVALID_REQUEST) from None
    return within_manifest(options, request, capability, manifest)


def probe(source: Path | BinaryIO, capability: Capability) -> dict[str, Any]:
    """What each declared part's planning needs from the bytes, by part name."""
    return {name: kind_of(capability, name).probe(source) for name in capability.parts}


def plan(request: ExtractRequest, capability: Capability, manifest: Manifest,
         facts: Mapping[str, Any] | None = None) -> Planned:
    """The job's own request and its parts' requests, from the parts the manifest declares.

    Raises:
        CapabilityRefused: options that do not fit together, or a companion asked for that the
            manifest in force does not declare.
    """
    own, parts = request, {}
    for name, part in capability.parts.items():
        own, more = kind_of(capability, name).plan(own, name, part, capability, manifest, (facts or {}).get(name))
        parts.update(more)
    return own, parts


def part_capabilities(request: ExtractRequest, manifest: Manifest) -> tuple[Capability, Capability]:
    """(the capability that runs the request, the one that admits its artifact).

    For a plain job both are the request's own. For a part, the parent's capability must declare
    the part (and admit the artifact: checked by the caller with it); a companion's own capability
    sets the engine, limits and device classes.

    Raises:
        CapabilityRefused: the manifest in force does not authorise this part or range.
    """
    capability = manifest.capability(request.action)
    if request.part_of is None:
        if request.span is not None and not any(p.split for p in capability.parts.values()):
            raise CapabilityRefused(f"{request.action} is not declared to run in ranges")
        return capability, capability
    parent = manifest.capability(request.part_of.action)
    name = request.part_of.part.partition(":")[0]
    part = parent.parts.get(name)
    if part is None:
        raise CapabilityRefused(f"{request.part_of.action} does not declare a {name} part")
    if part.split is not None:
        ok = request.action == parent.action and request.span is not None
    else:
        ok = request.action == part.action and request.span is None and _companion_allowed(part, parent, manifest)
    if not ok:
        raise CapabilityRefused(f"{request.part_of.action} does not declare a {request.action} part")
    return capability, parent


def named_job_id(request: ExtractRequest, manifest: Manifest) -> str:
    """The id this release names ``request`` by: a plain job's from its artifact, capability,
    extractor version, options and numerics (as admission named it); a part's from its job's id
    (and its range), as its job's planning named it. A request whose id is another means a
    dispatcher of another release named it, for extractors other than this process's.

    Raises:
        CapabilityRefused: the manifest in force does not declare the request's action.
    """
    from mediafleet.adapters.ids import job_id, part_job_id
    from mediafleet.workers.engines import numerics

    capability = manifest.capability(request.action)
    digest, version = request.artifact.digest, capability.extractor_version
    if request.part_of is not None:
        span = None if request.span is None else (request.span.first, request.span.last)
        return part_job_id(digest, request.action, version, request.part_of.job_id, span)
    numbers = numerics(request.action, request.options, request.threads, request.speech_batch)
    return job_id(digest, request.action, version, dict(request.options), numbers)


def narrow(options: BaseModel, request: ExtractRequest, capability: Capability, admits: Capability) -> BaseModel:
    """The options one delivery runs with: a split part's or a split job's own range narrowed in."""
    if request.span is None:
        return options
    splits = [name for name, part in admits.parts.items() if part.split is not None]
    return kind_of(admits, splits[0]).narrow(options, request.span)


def verify_result(result: BaseModel, digest: str, capability: Capability, checks: dict[str, bool]) -> None:
    """Map ``result`` to loci and check them: declared kinds only, every locus inside the artifact.

    Raises:
        CapabilityRefused: a locus kind the capability does not declare.
        IntegrityError: a locus outside the artifact.
    """
    drafts = to_loci(result, digest)
    capability.check_produces({d.address.kind for d in drafts})
    checks["locus_kinds_declared"] = True
    if not loci_valid(drafts):
        raise IntegrityError("the extractor produced a locus outside the artifact", code=ErrorCode.INVALID_LOCUS)
    checks["loci_valid"] = True


def join_inline(result: BaseModel, path: Path, manifest: Manifest, capability: Capability) -> BaseModel:
    """In-process: do here the work a fleet job's companions would do (a video's transcript)."""
    from mediafleet.modalities.registry import spec_for

    for name, ref in spec_for(capability.action).parts.items():
        result = ref.load().inline(result, path, capability.parts.get(name), manifest)
    return result


def decides(capability: Capability, name: str, outcome: Outcome) -> bool:
    """Whether part ``name``'s outcome decides its job alone (the job's own failure always does)."""
    if name == own_part(capability):
        return outcome.status != "ok"
    return kind_of(capability, name).decides(outcome)


def report_head(outcome: Outcome) -> Outcome:
    """A report without its result's pages (a split PDF's range): what a join reads of it before
    it reads the pages themselves; any other report as it is."""
    pages = getattr(outcome.result, "pages", None)
    if not pages:
        return outcome
    return outcome.model_copy(update={"result": outcome.result.model_copy(update={"pages": []})})  # type: ignore[union-attr]


def head_of(reported: Mapping[str, Outcome | None], name: str) -> Outcome | None:
    """``reported[name]``'s head (:func:`report_head`), from the mapping's own heads where it keeps
    them (the job store's record: each report then is read whole only when its pages are wanted)."""
    head = getattr(reported, "head", None)
    if head is not None:
        return head(name)  # type: ignore[no-any-return]
    outcome = reported[name]
    return None if outcome is None else report_head(outcome)


class _Named(Mapping[str, "Outcome | None"]):
    """The reports of one declared part (``pages`` -> ``pages:33-64``, ...), read from ``reported``
    when asked: a view, so a mapping that loads each report on demand is not read whole here."""

    def __init__(self, reported: Mapping[str, Outcome | None], part: str) -> None:
        self._reported = reported
        self._names = [n for n in reported if n.partition(":")[0] == part]

    def __getitem__(self, name: str) -> Outcome | None:
        if name not in self._names:
            raise KeyError(name)
        return self._reported[name]

    def head(self, name: str) -> Outcome | None:
        if name not in self._names:
            raise KeyError(name)
        return head_of(self._reported, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def join(request: ExtractRequest, reported: Mapping[str, Outcome | None], capability: Capability,
         manifest: Manifest) -> Any:
    """The caller's outcome from its parts' (by name; None: never reported, e.g. lost).

    ``reported`` may read each report when asked (:func:`mediafleet.fleet.reports.join_parts`
    passes the record's, so a long split document's ranges are never all in memory), and the
    result is an :class:`Outcome`, or a kind's outcome written as it is read (a split PDF's
    :class:`mediafleet.workers.pdf.split.JoinedPages`: ``job_id``, ``status``, ``error``, and
    ``outcome()`` for the whole).

    A failed own task, or a part whose failure decides the job, is the job's failure (under the
    job's id). Otherwise each declared part joins its outcomes into the own task's, and the joined
    result is checked again like any extractor's (declared kinds, every locus inside the artifact).
    """
    own = reported.get(own_part(capability))
    for name in reported:
        outcome = head_of(reported, name)
        if name != own_part(capability) and outcome is not None and decides(capability, name, outcome):
            error = outcome.error or PublicError(code=ErrorCode.INTERNAL_ERROR, message="a part of the job failed")
            return Outcome.failed(request, error, datetime.now(UTC))
    if own is None:
        error = PublicError(code=ErrorCode.WORKER_LOST, retryable=True, message="the job's own task did not report")
        return Outcome.failed(request, error, datetime.now(UTC))
    if own.status != "ok":
        return own
    outcome, reverify = own, False
    for name in capability.parts:
        mine = _Named(reported, name)
        kind = kind_of(capability, name)
        outcome = kind.join(outcome, mine, manifest)
        if outcome.status != "ok":
            return outcome
        reverify = reverify or (bool(mine) and kind.reverify)
    if not reverify or not isinstance(outcome, Outcome) or outcome.result is None:
        return outcome
    checks = dict(outcome.checks)
    try:
        verify_result(outcome.result, outcome.artifact.digest, capability, checks)
    except (CapabilityRefused, IntegrityError) as exc:
        return outcome.model_copy(update={"status": "failed", "result": None, "error": exc.public(), "checks": checks})
    return outcome.model_copy(update={"checks": checks})


def split_by_span(request: ExtractRequest, name: str, capability: Capability, first: Span,
                  rest: list[Span]) -> tuple[ExtractRequest, dict[str, ExtractRequest]]:
    """A split's plan: the job's own request narrowed to ``first``, and one part per further span,
    named ``<name>:<first>-<last>``, its id derived from the job's and its span."""
    from mediafleet.adapters.ids import part_job_id

    parts = {}
    for span in rest:
        label = f"{name}:{span.first}-{span.last}"
        parts[label] = request.model_copy(update={
            "job_id": part_job_id(request.artifact.digest, request.action, capability.extractor_version,
                                  request.job_id, (span.first, span.last)),
            "part_of": PartOf(job_id=request.job_id, action=request.action, part=label),
            "span": span,
        })
    return request.model_copy(update={"span": first}), parts
