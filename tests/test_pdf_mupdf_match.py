"""The PDF text layer's C reader is used only with the MuPDF it was compiled for (issue 39).

An isolated build that resolved another PyMuPDF than the runtime's compiles ``workers/pdf/_stext.c``
against other headers. Such a reader is detected when ``mediafleet.workers.pdf.mupdf`` loads: it is
not used, one warning says why, and the text lines come through PyMuPDF's dict, the same lines.
Here a reader is really compiled against a copy of PyMuPDF's headers that names another MuPDF
version, and loaded in a fresh interpreter in place of the installed one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
from mediafleet.workers.pdf import mupdf as mupdf_module
from mediafleet.workers.pdf.mupdf import c_reader_status, pymupdf

from tests.helpers import can_compile

ROOT = Path(__file__).resolve().parents[1]


class _Reader:
    def __init__(self, version: str) -> None:
        self.MUPDF_VERSION = version


def test_the_status_names_each_case() -> None:
    running = pymupdf.mupdf_version
    assert c_reader_status(_Reader(running), running) == (True, f"used (built for MuPDF {running}, the one that runs)")
    used, why = c_reader_status(_Reader("1.28.6"), "1.28.5")
    assert not used and "built for MuPDF 1.28.6, but MuPDF 1.28.5 runs" in why and "requirements/install.sh" in why
    assert c_reader_status(None, running)[0] is False
    assert c_reader_status(_Reader(running), running, direct=False)[0] is False
    assert mupdf_module.FAST_LINES == c_reader_status(mupdf_module._stext, running, mupdf_module._DIRECT)[0]


def _compile_reader_for(version: str, out: Path) -> Path:
    """workers/pdf/_stext.c compiled against PyMuPDF's headers with FZ_VERSION set to ``version``."""
    include = Path(pymupdf.__file__).parent / "mupdf-devel" / "include"
    headers = out / "include"
    shutil.copytree(include / "mupdf", headers / "mupdf")
    version_h = headers / "mupdf" / "fitz" / "version.h"
    text = version_h.read_text()
    assert f'"{pymupdf.mupdf_version}"' in text
    version_h.write_text(text.replace(f'"{pymupdf.mupdf_version}"', f'"{version}"'))
    module = out / "mediafleet" / "workers" / "pdf" / f"_stext{sysconfig.get_config_var('EXT_SUFFIX')}"
    module.parent.mkdir(parents=True)
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}", f"-I{headers}",
                    str(ROOT / "workers" / "pdf" / "_stext.c"), "-o", str(module)], check=True, capture_output=True)
    return module


_PROBE = textwrap.dedent("""
    import importlib.util, json, logging, sys
    warnings = []
    class Keep(logging.Handler):
        def emit(self, record):
            warnings.append(record.getMessage())
    logging.getLogger("mediafleet.mupdf").addHandler(Keep())
    spec = importlib.util.spec_from_file_location("mediafleet.workers.pdf._stext", sys.argv[1])
    reader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reader)
    sys.modules["mediafleet.workers.pdf._stext"] = reader
    from mediafleet.workers.pdf import mupdf, textlayer
    assert mupdf._stext is reader
    flags = textlayer._TEXT_FLAGS
    lines, plain = [], []
    with mupdf.pymupdf.open(sys.argv[2]) as doc:
        for page in doc:
            lines.append(mupdf.text_lines(page, flags, page.rotation))
            plain.append([(
                "".join(s["text"] for s in line["spans"]), *line["bbox"])
                for block in page.get_text("dict", flags=flags)["blocks"] for line in block.get("lines", ())])
    print(json.dumps({"built_for": reader.MUPDF_VERSION, "fast": mupdf.FAST_LINES, "why": mupdf.C_READER,
                      "warnings": warnings, "same": lines == plain, "lines": sum(map(len, lines))}))
""")


@pytest.mark.slow
def test_a_reader_built_for_another_mupdf_is_not_used_and_the_lines_are_the_same(tmp_path: Path) -> None:
    if not can_compile():
        pytest.skip("no C compiler or Python headers here")
    if not (Path(pymupdf.__file__).parent / "mupdf-devel" / "include" / "mupdf" / "fitz.h").is_file():
        pytest.skip("this PyMuPDF ships no MuPDF headers")
    from tests.media import text_pdf

    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(text_pdf(2, lines=6))
    seen = {}
    for version in ("0.0.1-other", pymupdf.mupdf_version):
        module = _compile_reader_for(version, tmp_path / version)
        done = subprocess.run([sys.executable, "-P", "-c", _PROBE, str(module), str(pdf)],
                              capture_output=True, text=True, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr
        seen[version] = json.loads(done.stdout.strip().splitlines()[-1])
    other, same = seen["0.0.1-other"], seen[pymupdf.mupdf_version]
    assert other["built_for"] == "0.0.1-other" and other["fast"] is False
    assert other["warnings"] == [f"the PDF text layer's C reader (_stext) is {other['why']}"]
    assert f"built for MuPDF 0.0.1-other, but MuPDF {pymupdf.mupdf_version} runs" in other["why"]
    assert other["same"] and other["lines"] >= 12
    # The control: the same build against the running MuPDF's version is used, and agrees too.
    assert same["fast"] is True and same["warnings"] == [] and same["same"]
