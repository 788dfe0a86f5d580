"""Generated documents the PDF and fleet benchmarks share: text PDFs of 40 lines a page."""

from __future__ import annotations

import pymupdf

__all__ = ["make_pdf"]

WORDS = "harbour ledger quartz orbit falcon granite willow copper velvet summit river canvas".split()


def make_pdf(pages: int, salt: str = "") -> bytes:
    """A text PDF of ``pages`` A4 pages, 40 lines each, every line starting with ``salt`` (new bytes per salt)."""
    doc = pymupdf.open()
    for n in range(pages):
        page = doc.new_page(width=595, height=842)
        for i in range(40):
            words = " ".join(WORDS[(n + i + k) % len(WORDS)] for k in range(10))
            page.insert_text((56, 60 + 18 * i), f"{salt}{n}.{i} {words}", fontsize=10)
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data
