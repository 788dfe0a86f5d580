"""Import PyMuPDF the way a worker wants it: quiet, without the layout analyzer, and with one rule
for character boxes; and read a page's text lines.

PyMuPDF 2.0 imports ``pymupdf.layout`` (an ONNX layout model) when it is installed; the fleet
never uses it and it costs ~0.2 s and ~50 MB per process, so it is kept out of ``sys.modules``.
MuPDF's own messages would otherwise go to stdout (and corrupt ``--json`` output): they are
routed to Python logging instead.

A character's box is MuPDF's own quad. PyMuPDF can recompute it from the font's ascender and
descender ("quad corrections"); PyMuPDF 2.0 turns that off when it imports ``pymupdf4llm``, and an
older PyMuPDF without it leaves it on, so the same PDF would give other boxes on another install.
It is turned off here, for the process (the state PyMuPDF 2.0 leaves every process in).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["C_READER", "FAST_LINES", "c_reader_status", "open_document", "pymupdf", "text_lines"]


def _load() -> ModuleType:
    sys.modules.setdefault("pymupdf.layout", None)  # type: ignore[arg-type]
    import pymupdf as mod

    mod.no_recommend_layout()
    mod.set_messages(pylogging=True, pylogging_name="mediafleet.mupdf")
    mod.TOOLS.mupdf_display_errors(False)
    mod.TOOLS.mupdf_display_warnings(False)
    mod.TOOLS.unset_quad_corrections(True)
    return mod


pymupdf = _load()


# What Page.get_text("dict", flags=...) runs underneath: the text page, then its dict. Called
# directly, a page skips the wrapper's Python (its crop box, rect, TextPage object and rotation
# checks: about 0.1 ms a page, a tenth of the extraction on a page of 40 lines).
_extra: Any = getattr(pymupdf, "_extra", None)
_DIRECT = _extra is not None and all(hasattr(_extra, n) for n in ("page_get_textpage", "JM_make_textpage_dict"))
_UNIT = pymupdf.Matrix(1, 1)

# The C reader of a text page's lines (workers/pdf/_stext.c): the same lines as the dict, at about a
# fifteenth of its cost. It reads MuPDF's structs, so it is used only with the MuPDF whose headers
# it was compiled against; where it was not built (no C compiler at install), the dict is read.
try:
    from mediafleet.workers.pdf import _stext  # type: ignore[attr-defined]
except ImportError:
    _stext = None


def c_reader_status(reader: Any, mupdf_version: str, direct: bool = True) -> tuple[bool, str]:
    """Whether the C reader ``reader`` (the ``_stext`` module, or None where it was not built) is
    used with the MuPDF ``mupdf_version`` that runs, and why, in words.

    It is used only when it was compiled against that MuPDF's headers (its ``MUPDF_VERSION``):
    a reader built against another MuPDF (an isolated build that resolved another PyMuPDF than the
    runtime's; ``requirements/install.sh`` gives the build the lock's) would read its structs at the
    wrong offsets, so the dict is read instead, with the same results.
    """
    if reader is None:
        return False, "not built (no C compiler at install): the text lines are read through PyMuPDF's dict"
    if not direct:
        return False, "this PyMuPDF lacks the text-page functions the C reader needs: read through the dict"
    built = getattr(reader, "MUPDF_VERSION", None)
    if built != mupdf_version:
        return False, (f"built for MuPDF {built}, but MuPDF {mupdf_version} runs: not used, the text lines are "
                       "read through PyMuPDF's dict (same results, slower); reinstall with requirements/install.sh")
    return True, f"used (built for MuPDF {built}, the one that runs)"


FAST_LINES, C_READER = c_reader_status(_stext, pymupdf.mupdf_version, _DIRECT)
if _stext is not None and not FAST_LINES:
    # Not silent: a C reader that is there but unusable is an install that resolved two PyMuPDFs.
    logging.getLogger("mediafleet.mupdf").warning("the PDF text layer's C reader (_stext) is %s", C_READER)

Line = tuple[str, float, float, float, float]


def text_lines(page: Any, flags: int, rotation: int) -> list[Line]:
    """Each text line of ``page.get_text("dict", flags=flags)``: its spans' text joined and its
    bbox, ``(text, x0, y0, x1, y1)``; ``rotation`` is the page's.

    An unrotated page's text page is made as ``get_text`` makes it, without its wrapper, and read
    by the C reader (:data:`FAST_LINES`), or, where that is not built or declines the page (a
    vertical line), through the dict; a rotated one (which ``get_text`` unrotates for the
    extraction) goes through ``get_text`` itself, as does every page of a PyMuPDF without those
    functions. ``tests/test_pdf_speed_paths.py`` checks that all give the same lines.
    """
    if rotation != 0 or not _DIRECT:
        return _dict_lines(page.get_text("dict", flags=flags)["blocks"])
    # The text page is owned by its wrapper (freed with it), as get_textpage's own is.
    textpage = pymupdf.mupdf.FzStextPage(_extra.page_get_textpage(page.this, None, flags, _UNIT))
    if FAST_LINES:
        lines: list[Line] | None = _stext.lines(textpage.m_internal_value())
        if lines is not None:
            return lines
    out: dict[str, Any] = {}
    _extra.JM_make_textpage_dict(textpage.m_internal, out, False)
    return _dict_lines(out["blocks"])


def _dict_lines(blocks: list[dict[str, Any]]) -> list[Line]:
    lines: list[Line] = []
    for block in blocks:
        for line in block.get("lines", ()):
            spans = line["spans"]
            text = spans[0]["text"] if len(spans) == 1 else "".join([span["text"] for span in spans])
            lines.append((text, *line["bbox"]))
    return lines


class _Document(pymupdf.Document):  # type: ignore[misc]
    """A Document that reads neither the outline nor the metadata when it opens (the extractor
    uses neither; a real manual's outline alone costs about a millisecond, a tenth of reading a
    17-page one's text): PyMuPDF's ``init_doc`` less those two, its check kept."""

    def init_doc(self) -> None:
        if self.is_encrypted:
            raise ValueError("cannot initialize - document still encrypted")
        self._outline = None


# Only where PyMuPDF opens through init_doc and reads the outline there (else the plain open).
_LEAN = callable(getattr(pymupdf.Document, "init_doc", None)) and callable(getattr(pymupdf.Document, "_loadOutline", None))


def open_document(source: Path | str | bytes) -> Any:
    """``pymupdf.open(path, filetype="pdf")`` (or ``stream=`` for bytes), without reading the
    outline and the metadata.

    Its pages are the plain Document's (``tests/test_pdf_speed_paths.py`` checks their text).
    """
    opener = _Document if _LEAN else pymupdf.open
    if isinstance(source, bytes):
        return opener(stream=source, filetype="pdf")
    return opener(source, filetype="pdf")
