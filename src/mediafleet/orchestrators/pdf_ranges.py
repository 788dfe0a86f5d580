"""A long PDF run here in ranges of pages, its bundle written as each range is read
(:mod:`mediafleet.adapters.pdf_stream`): ``mediafleet extract --out DIR`` in-process, with memory
bounded by a range, not the document.

Each range is read through :func:`mediafleet.workers.runner.run_request` with the request's
``span``, as the fleet's split reads it, so every check and every failure is the runner's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from mediafleet.adapters.bundle import build_bundle, with_claims
from mediafleet.adapters.pdf_stream import Written, streams, write_ranges, written_whole
from mediafleet.blobs.local import BlobStore
from mediafleet.contract.bundle import CallerClaims, EvidenceBundle
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome, Span
from mediafleet.contract.manifest import Capability, Manifest
from mediafleet.orchestrators.job import Job
from mediafleet.workers.pdf.split import page_count, ranges
from mediafleet.workers.runner import run_request
from mediafleet.modalities.spec import ProgressFn

__all__ = ["RANGE_PAGES", "StreamedPdfJob", "streams", "write_pdf_bundle"]

RANGE_PAGES = 64
"""Pages read at a time. Each range opens the document again (MuPDF parses its cross-reference
table and page tree: about 12 ms of CPU for a 900-page PDF, more for a longer one), so shorter
ranges cost time; a range's result (about 0.1 MB a page of 40 lines) is what is held meanwhile.
On the generated 900-page PDF: ranges of 32 peak at 118 MB, of 64 at 120 MB, of 128 at 127 MB, one
range at 197 MB (``benchmarks/pdf_memory.py``; 1,800 pages in ranges of 64: 124 MB)."""


class _HashedOnce:
    """The blob store, with the artifact's digest recomputed once for the whole run rather than
    once per range: the first ``verified_path`` is the store's own (its checks, its errors) and is
    held open until the run ends; later ones give the same path."""

    def __init__(self, store: BlobStore, stack: ExitStack) -> None:
        self._store, self._stack, self._paths = store, stack, {}

    @contextmanager
    def verified_path(self, digest: str) -> Iterator[Path]:
        if digest not in self._paths:
            self._paths[digest] = self._stack.enter_context(self._store.verified_path(digest))
        yield self._paths[digest]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def write_pdf_bundle(
    request: ExtractRequest,
    capability: Capability,
    manifest: Manifest,
    store: BlobStore,
    lines_to: Path,
    *,
    turtle_to: Path | None = None,
    claims: CallerClaims | None = None,
    progress: ProgressFn | None = None,
    clock: Callable[[], datetime] | None = None,
    range_pages: int = RANGE_PAGES,
    form: str = "jsonl",
) -> Written:
    """Run ``request`` (an ``ocr_pdf`` job, :func:`streams`) here and write its bundle to
    ``lines_to`` (and its PROV as Turtle to ``turtle_to``) as it is made.

    The file is exactly what the bundle one run gives would be written as, with ``claims`` recorded
    as :func:`mediafleet.adapters.bundle.with_claims` records them: ``write_bundle_lines`` of it
    (``form="jsonl"``) or its ``model_dump_json(indent=2)`` (``form="json"``).

    Args:
        request: the admitted request (no span, no part): the whole document.
        capability: its capability in the manifest in force, which must split it (:func:`streams`).
        manifest: the manifest in force.
        store: the blob store holding the artifact (its digest is recomputed once).
        lines_to: the bundle's file; written under a temporary name in its folder, renamed when done.
        turtle_to: where to write the PROV as Turtle, the same way (None: not written).
        claims: the caller's claims for this call, recorded on the bundle.
        progress: called with (pages done, pages) as ranges are read.
        clock: the runner's clock (None: its own).
        range_pages: pages read at a time.
        form: ``jsonl`` (the stream form) or ``json`` (one JSON object, indented by two).

    Returns:
        The bundle's status and error, and its summary.

    Raises:
        OSError: a file could not be written (nothing is left under either name).
    """
    timing = {} if clock is None else {"clock": clock}
    with ExitStack() as stack:
        once = _HashedOnce(store, stack)
        total = None
        try:
            with once.verified_path(request.artifact.digest) as path:
                total = page_count(path)
        except Exception:  # noqa: BLE001 - the runner says what is wrong, as for one run
            total = None
        if total is None or total == 0:
            outcome = run_request(request, manifest=manifest, store=store, device=request.device, progress=progress,
                                  **timing)
            return written_whole(with_claims(build_bundle(outcome, capability), claims), lines_to, turtle_to, form)
        source = _Runs(request, manifest, once, ranges(total, range_pages), total, timing)
        return write_ranges(source, capability, claims, lines_to, turtle_to, form, progress)


class _Runs:
    """In-process: each range run here, through the runner."""

    joins = False

    def __init__(self, request: ExtractRequest, manifest: Manifest, store: Any, spans: list[Span], total: int,
                 timing: dict[str, Any]) -> None:
        self.request, self.manifest, self.store, self.spans, self.total, self.timing = (
            request, manifest, store, spans, total, timing)

    def read(self, span: Span, progress: ProgressFn | None) -> Outcome:
        return run_request(self.request.model_copy(update={"span": span}), manifest=self.manifest, store=self.store,
                           device=self.request.device, progress=progress, **self.timing)


class StreamedPdfJob(Job):
    """An admitted PDF job not run yet (the in-process orchestrator's, for a caller that writes its
    bundle as it is made): :meth:`write` runs it range by range, writing as it goes; :meth:`bundle`
    runs it whole, as the in-process orchestrator does."""

    def __init__(self, orchestrator: Any, request: ExtractRequest, capability: Capability, submission: Any) -> None:
        self.id, self.action = request.job_id, request.action
        self.orchestrator, self.request, self.capability, self.submission = orchestrator, request, capability, submission

    def state(self) -> JobState:
        return JobState.QUEUED

    def bundle(self, timeout: float | None = None, on_progress: Any = None) -> EvidenceBundle:
        return self.orchestrator.run(self.request, self.capability, self.submission).bundle()

    def write(self, lines_to: Path, turtle_to: Path, *, claims: CallerClaims | None = None, form: str = "jsonl",
              timeout: float | None = None, on_progress: Any = None) -> Written:
        return write_pdf_bundle(self.request, self.capability, self.orchestrator.manifest, self.orchestrator.store,
                                lines_to, turtle_to=turtle_to, claims=claims, progress=self.submission.get("progress"),
                                form=form)
