"""The three compiled parts, all optional; everything else is in pyproject.toml.

* ``workers/pdf/_stext.c``: the PDF text layer's reader of MuPDF's text lines. It reads MuPDF's
  structs, so it is compiled against the headers that PyMuPDF's wheel ships
  (``pymupdf/mupdf-devel/include``; PyMuPDF is a build requirement for that).
* ``workers/_xycut.c``: the XY-cut reading order. Its arithmetic must round as Python's does, so
  nothing is contracted into fused multiply-adds.
* ``workers/video/_sharp.c``: a video frame's sharpness (the variance of its Laplacian) in one
  pass, with the same double operations as the OpenCV form, so nothing is contracted there either.

Without a C compiler or Python's headers (or PyMuPDF's, for the first), the package installs
without them, and the same results come from the Python forms (README: PDF, speed).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _mupdf_include() -> Path | None:
    spec = importlib.util.find_spec("pymupdf")
    if spec is None or spec.origin is None:
        return None
    include = Path(spec.origin).parent / "mupdf-devel" / "include"
    return include if (include / "mupdf" / "fitz.h").is_file() else None


def _extensions() -> list[Extension]:
    built = [Extension("mediafleet.workers._xycut", ["workers/_xycut.c"], extra_compile_args=["-ffp-contract=off"],
                       optional=True),
             Extension("mediafleet.workers.video._sharp", ["workers/video/_sharp.c"],
                       extra_compile_args=["-ffp-contract=off"], optional=True)]
    include = _mupdf_include()
    if include is not None:
        built.append(Extension("mediafleet.workers.pdf._stext", ["workers/pdf/_stext.c"], include_dirs=[str(include)],
                               optional=True))
    return built


class _AlwaysBuildExt(build_ext):
    """Compiles every time. setuptools skips an extension whose output in ``build/`` is newer than
    its sources, and a ``build/`` left by an earlier install against another PyMuPDF would then hand
    over a C reader built for that MuPDF (only the sources' times are compared, not the headers')."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.force = True


setup(ext_modules=_extensions(), cmdclass={"build_ext": _AlwaysBuildExt})
