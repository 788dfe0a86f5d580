"""Import PyMuPDF the way a worker wants it: quiet, and without the layout analyzer.

PyMuPDF 2.0 imports ``pymupdf.layout`` (an ONNX layout model) when it is installed; the fleet
never uses it and it costs ~0.2 s and ~50 MB per process, so it is kept out of ``sys.modules``.
MuPDF's own messages would otherwise go to stdout (and corrupt ``--json`` output): they are
routed to Python logging instead.
"""

from __future__ import annotations

import sys
from types import ModuleType

__all__ = ["pymupdf"]


def _load() -> ModuleType:
    sys.modules.setdefault("pymupdf.layout", None)  # type: ignore[arg-type]
    import pymupdf as mod

    mod.no_recommend_layout()
    mod.set_messages(pylogging=True, pylogging_name="mediafleet.mupdf")
    mod.TOOLS.mupdf_display_errors(False)
    mod.TOOLS.mupdf_display_warnings(False)
    return mod


pymupdf = _load()
