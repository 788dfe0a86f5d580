"""A long PDF split across workers: the ``pages`` part of ``ocr_pdf`` (:mod:`mediafleet.workers.parts`).

A PDF of more pages than the part's ``size`` (the manifest's; 32 shipped) is cut into ranges of
``size`` pages: the job's own task reads pages 1 to ``size``, and each further range is a part of
the job (``pages:33-64``, ...) on the same queue, run by as many workers as are free. Each range is
read exactly as the whole run reads those pages (the extractor's ``page_span``), so joining the
ranges in page order gives the result one run gives, and the same ids: the pages, the page count,
the producer (the OCR engine's models named when any range OCR'd a page, as one run names them
when any page was), the checks all ranges passed.

The joined outcome is never held whole by the joiner: :meth:`PagesPart.join` reads each range's
report for what the join needs of it (a few fields) and gives a :class:`JoinedPages`, which the
job store writes straight into the blob store, one range's pages at a time. So the worker that
reports last holds one range and the joined outcome's head, however long the document (a range
of 32 pages, not a 1,800-page result).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import ExtractRequest, Outcome, Span
from mediafleet.contract.manifest import Capability, Manifest, Part
from mediafleet.contract.pdf import PdfPage, PdfResult
from mediafleet.adapters.pdf_join import JoinHead
from mediafleet.workers.parts import ReportsGone, split_by_span
from pydantic import BaseModel, TypeAdapter

__all__ = ["PAGES", "JoinedPages", "PagesPart", "page_count", "ranges"]


def page_count(source: Path | BinaryIO) -> int | None:
    """The PDF's page count from its cross-reference table, without reading a page (nor the
    outline and metadata a plain open reads); None when MuPDF cannot open it (the job then runs
    as one task and reports why)."""
    from mediafleet.workers.pdf.mupdf import open_document

    try:
        if isinstance(source, Path):
            doc = open_document(source)
        elif isinstance(getattr(source, "name", None), str) and os.path.isfile(source.name):
            doc = open_document(source.name)
        else:
            at = source.tell()
            data = source.read()
            source.seek(at)
            doc = open_document(data)
    except Exception:  # noqa: BLE001 - any unreadable PDF: the job itself says what is wrong
        return None
    try:
        return None if doc.needs_pass or doc.is_encrypted else int(doc.page_count)
    finally:
        doc.close()


def ranges(pages: int, size: int) -> list[Span]:
    """Pages 1..``pages`` in ranges of ``size`` (the last one shorter)."""
    return [Span(first=first, last=min(first + size - 1, pages)) for first in range(1, pages + 1, size)]


class PagesPart:
    """The ``pages`` split of a PDF job."""

    option = None
    reverify = False  # each range's loci were checked by its worker; the join adds none

    def probe(self, source: Path | BinaryIO) -> int | None:
        return page_count(source)

    def plan(self, request: ExtractRequest, name: str, part: Part, capability: Capability, manifest: Manifest,
             fact: int | None) -> tuple[ExtractRequest, dict[str, ExtractRequest]]:
        """Nothing for a PDF of at most ``size`` pages (or an unknown count); else the first range
        on the job's own request and one part per further range, each with an id derived from the
        job's and its range."""
        assert part.size is not None
        limit = capability.limits.max_pages
        if fact is None or fact <= part.size or (limit is not None and fact > limit):
            return request, {}  # one task (one over the page limit fails there, as it would whole)
        first, *rest = ranges(fact, part.size)
        return split_by_span(request, name, capability, first, rest)

    def narrow(self, options: BaseModel, span: Span) -> BaseModel:
        return options.model_copy(update={"page_span": (span.first, span.last)})

    def inline(self, result: BaseModel, path: Path, part: Part | None, manifest: Manifest) -> BaseModel:
        return result  # in-process the job reads every page itself

    def join(self, outcome: Outcome, reported: Mapping[str, Outcome | None],
             manifest: Manifest) -> Outcome | JoinedPages:
        """The own task's range, then every part's, in page order, as one result.

        ``reported`` may load each report when asked (the job store's record does): each is read
        once here, for its head, and again, one at a time, when the joined outcome is written.
        """
        if not reported:
            return outcome
        names = sorted(reported, key=_span_first)
        joining = JoinHead()
        joining.add(outcome)
        from mediafleet.workers.parts import head_of

        for name in names:
            report = head_of(reported, name)  # its pages are read when the join is written
            if report is None:
                error = PublicError(code=ErrorCode.WORKER_LOST, retryable=True,
                                    message="a page range of the job did not report")
                return outcome.model_copy(update={"status": "failed", "result": None, "error": error})
            if not isinstance(report.result, PdfResult) or not isinstance(outcome.result, PdfResult):
                return outcome
            joining.add(report)
            del report  # nothing of it is kept but what the join's values took
        head = outcome.model_copy(update={
            "result": outcome.result.model_copy(update={"pages": [], "producer": joining.producer}),
            "checks": joining.checks, "started_at": joining.started_at, "ended_at": joining.ended_at,
        })
        loaders = [_pages_of(reported, name) for name in names]
        return JoinedPages(head, [outcome.result.pages, *loaders])

    def decides(self, outcome: Outcome) -> bool:
        return outcome.status != "ok"  # a range that failed is the job's failure, as in one run


def _span_first(name: str) -> int:
    """The first page of a range part's name (``pages:33-64`` -> 33)."""
    return int(name.partition(":")[2].partition("-")[0])


def _pages_of(reported: Mapping[str, Outcome | None], name: str) -> Callable[[], list[PdfPage]]:
    def pages() -> list[PdfPage]:
        report = reported[name]
        if report is None or not isinstance(report.result, PdfResult):
            raise ReportsGone(f"the report of {name} went while the joined outcome was written")
        return report.result.pages

    return pages


_PAGES_JSON = TypeAdapter(list[PdfPage])
_EMPTY_PAGES = b'"pages":[]'


class JoinedPages:
    """A split PDF job's joined outcome, written range by range (:meth:`write_json`), never held.

    It stands for the :class:`Outcome` one run gives (:meth:`outcome` makes that, for a caller that
    needs it whole: a discovery index): ``head`` is that outcome with no pages, and ``pages`` gives
    the pages in order, each entry a list, or a callable reading one range's pages when asked.
    """

    def __init__(self, head: Outcome, pages: list[list[PdfPage] | Callable[[], list[PdfPage]]]) -> None:
        self.head = head
        self._pages = pages

    @property
    def job_id(self) -> str:
        return self.head.job_id

    @property
    def action(self) -> str:
        return self.head.action

    @property
    def status(self) -> str:
        return self.head.status

    @property
    def error(self) -> PublicError | None:
        return self.head.error

    def _each(self) -> Iterator[list[PdfPage]]:
        for entry in self._pages:
            yield entry() if callable(entry) else entry

    def write_json(self, out: BinaryIO) -> None:
        """The outcome's JSON (``Outcome.model_dump_json()`` of :meth:`outcome`, byte for byte),
        one range's pages in memory at a time."""
        text = self.head.model_dump_json().encode()
        at = text.index(_EMPTY_PAGES, text.index(b'"result":'))  # the result's own pages, its second key
        out.write(text[: at + len(_EMPTY_PAGES) - 1])
        first = True
        for pages in self._each():
            if pages:
                if not first:
                    out.write(b",")
                out.write(_PAGES_JSON.dump_json(pages)[1:-1])
                first = False
        out.write(text[at + len(_EMPTY_PAGES) - 1:])

    def outcome(self) -> Outcome:
        """The joined outcome, whole."""
        pages = [page for range_pages in self._each() for page in range_pages]
        return self.head.model_copy(update={"result": self.head.result.model_copy(update={"pages": pages})})


PAGES = PagesPart()
