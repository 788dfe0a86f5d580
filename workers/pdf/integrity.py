"""Whether a PDF was read whole: MuPDF repairs a damaged file silently, so ask it what it repaired.

A PDF cut short loses its cross-reference table first; MuPDF rebuilds it by scanning the file and
reads on. When only the table was lost, every page is still there: the job is ``ok``, but its claim
is not verified (the ``read_whole`` check is recorded as False). When a repaired file also has
pages whose objects or content streams cannot be loaded, text is missing without a sign in the
result: that is ``corrupt_input``, as for a truncated video.
"""

from __future__ import annotations

from pathlib import Path

from mediafleet.contract.errors import InputRejected
from mediafleet.workers.pdf.mupdf import pymupdf

__all__ = ["read_whole"]

# What MuPDF says while it rebuilds a lost cross-reference table, and nothing else.
_REPAIR_ONLY = ("cannot find startxref", "trying to repair broken xref", "repairing PDF document")


def read_whole(path: Path) -> bool:
    """True when the PDF needed no repair, False when only its cross-reference table was rebuilt.

    Raises:
        InputRejected: ``corrupt_input``, the PDF cannot be parsed, or its repair left objects or
            page contents that cannot be loaded (the file was cut short or damaged inside).
    """
    try:
        # MuPDF's own open, without PyMuPDF's Document (which loads the outline and metadata, more
        # than a millisecond on a real manual): enough to ask whether it repaired anything.
        repaired = pymupdf.mupdf.pdf_was_repaired(pymupdf.mupdf.pdf_open_document(str(path)))
    except Exception as exc:
        raise InputRejected("the PDF cannot be parsed") from exc
    if not repaired:
        return True
    pymupdf.TOOLS.reset_mupdf_warnings()
    try:
        doc = pymupdf.open(path, filetype="pdf")
    except Exception as exc:
        raise InputRejected("the PDF cannot be parsed") from exc
    try:
        if not doc.is_repaired:
            return True
        if doc.needs_pass or doc.is_encrypted:
            return False  # open_pdf refuses it with its own reason
        for page in doc:
            page.read_contents()
        said = [line for line in pymupdf.TOOLS.mupdf_warnings().splitlines() if line.strip()]
    except Exception as exc:
        raise InputRejected("the PDF is damaged: a page cannot be read") from exc
    finally:
        doc.close()
    if any(not any(known in line for known in _REPAIR_ONLY) for line in said):
        raise InputRejected("the PDF is damaged (cut short or broken inside): some of its content cannot be read")
    return False
