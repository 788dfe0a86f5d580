"""A long PDF split across workers: the ``pages`` part of ``ocr_pdf`` (:mod:`mediafleet.workers.parts`).

A PDF of more pages than the part's ``size`` (the manifest's; 32 shipped) is cut into ranges of
``size`` pages: the job's own task reads pages 1 to ``size``, and each further range is a part of
the job (``pages:33-64``, ...) on the same queue, run by as many workers as are free. Each range is
read exactly as the whole run reads those pages (the extractor's ``page_span``), so joining the
ranges in page order gives the result one run gives, and the same ids: the pages, the page count,
the producer (the OCR engine's models named when any range OCR'd a page, as one run names them
when any page was), the checks all ranges passed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel

from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import ExtractRequest, Outcome, PartOf, Span
from mediafleet.contract.manifest import Capability, Manifest, Part
from mediafleet.contract.pdf import PdfResult

__all__ = ["PAGES", "PagesPart", "page_count", "ranges"]


def page_count(source: Path | BinaryIO) -> int | None:
    """The PDF's page count from its cross-reference table, without reading a page; None when
    MuPDF cannot open it (the job then runs as one task and reports why)."""
    from mediafleet.workers.pdf.mupdf import pymupdf

    try:
        if isinstance(source, Path):
            doc = pymupdf.open(source, filetype="pdf")
        elif isinstance(getattr(source, "name", None), str) and os.path.isfile(source.name):
            doc = pymupdf.open(source.name, filetype="pdf")
        else:
            at = source.tell()
            data = source.read()
            source.seek(at)
            doc = pymupdf.open(stream=data, filetype="pdf")
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
        from mediafleet.adapters.ids import job_id as make_job_id

        assert part.size is not None
        limit = capability.limits.max_pages
        if fact is None or fact <= part.size or (limit is not None and fact > limit):
            return request, {}  # one task (one over the page limit fails there, as it would whole)
        first, *rest = ranges(fact, part.size)
        parts = {}
        for span in rest:
            label = f"{name}:{span.first}-{span.last}"
            parts[label] = request.model_copy(update={
                "job_id": make_job_id(request.artifact.digest, request.action, capability.extractor_version,
                                      {"part_of": request.job_id, "span": [span.first, span.last]}),
                "part_of": PartOf(job_id=request.job_id, action=request.action, part=label),
                "span": span,
            })
        return request.model_copy(update={"span": first}), parts

    def narrow(self, options: BaseModel, span: Span) -> BaseModel:
        return options.model_copy(update={"page_span": (span.first, span.last)})

    def inline(self, result: BaseModel, path: Path, part: Part | None, manifest: Manifest) -> BaseModel:
        return result  # in-process the job reads every page itself

    def join(self, outcome: Outcome, reported: Mapping[str, Outcome | None], manifest: Manifest) -> Outcome:
        """The own task's range, then every part's, in page order, as one result."""
        if not reported:
            return outcome
        if any(o is None for o in reported.values()):
            error = PublicError(code=ErrorCode.WORKER_LOST, retryable=True,
                                message="a page range of the job did not report")
            return outcome.model_copy(update={"status": "failed", "result": None, "error": error})
        outcomes = [outcome, *sorted((o for o in reported.values() if o is not None), key=_first_page)]
        results = [o.result for o in outcomes]
        if not all(isinstance(r, PdfResult) for r in results):
            return outcome
        pdfs: list[PdfResult] = results  # type: ignore[assignment]
        producer = next((r.producer for r in pdfs if r.producer.models), pdfs[0].producer)
        names = dict.fromkeys(name for o in outcomes for name in o.checks)
        checks = {name: all(o.checks.get(name, False) for o in outcomes) for name in names}
        joined = pdfs[0].model_copy(update={"pages": [p for r in pdfs for p in r.pages], "producer": producer})
        return outcome.model_copy(update={
            "result": joined, "checks": checks,
            "started_at": min(o.started_at for o in outcomes), "ended_at": max(o.ended_at for o in outcomes),
        })

    def decides(self, outcome: Outcome) -> bool:
        return outcome.status != "ok"  # a range that failed is the job's failure, as in one run


def _first_page(outcome: Outcome) -> int:
    pages = getattr(outcome.result, "pages", None)
    return pages[0].page if pages else 0


PAGES = PagesPart()
