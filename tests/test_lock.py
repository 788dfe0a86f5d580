"""requirements/lock.txt agrees with pyproject.toml, and this environment with the lock (issue 39).

The lock is what every install gets (requirements/install.sh): each requirement of the extras it
covers, of the C extensions' build and of requirements/lock.in pinned, at a version pyproject
admits, with hashes; an environment installed from it has exactly those versions, so a dependency
added to pyproject without re-locking, or an install that went around the lock, fails here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path
from types import ModuleType

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _lockfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mediafleet_lockfile", ROOT / "requirements" / "lockfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lockfile = _lockfile()
# The lock this environment was installed from: requirements/refresh.sh runs the suite against its
# candidate with INSTALL_LOCK naming it.
INSTALLED_FROM = Path(os.environ.get("INSTALL_LOCK") or lockfile.LOCK)


def test_the_lock_pins_every_requirement_within_pyprojects_ranges() -> None:
    assert lockfile.check(lockfile.read_pins()) == []


def test_the_build_gets_the_runtimes_pymupdf() -> None:
    """One PyMuPDF for the isolated build (its MuPDF headers) and the runtime: the lock pins it once,
    and install.sh hands the lock to the build as --build-constraint."""
    pins = lockfile.read_pins()
    build = {canonicalize_name(r.name) for r in lockfile.build_requirements()}
    assert {"setuptools", "pymupdf"} <= build
    assert {"setuptools", "wheel", "pymupdf", "pip"} <= set(pins)
    assert int(pins["pip"].split(".")[0]) >= 26  # --build-constraint
    runtime = {canonicalize_name(r.name) for r in lockfile.project_requirements(("pdf",))}
    assert "pymupdf" in runtime
    install = (ROOT / "requirements" / "install.sh").read_text()
    assert re.search(r'-c "\$lock" --build-constraint "\$lock"', install)


def test_every_pin_has_hashes() -> None:
    text = lockfile.LOCK.read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
    assert len(entries) == len(lockfile.read_pins())
    for entry in entries:
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), entry.splitlines()[0]


def test_the_gpu_extras_are_locked_for_cuda_12() -> None:
    pins = lockfile.read_pins()
    assert pins["onnxruntime-gpu"].startswith("1.26.")  # the last onnxruntime-gpu built for CUDA 12
    assert pins["nvidia-cublas-cu12"].startswith("12.") and pins["nvidia-cudnn-cu12"].startswith("9.")
    assert "onnxruntime" in pins  # the CPU build stays locked for the CPU install


def test_this_environment_is_what_the_lock_pins() -> None:
    """Every installed distribution the lock names is at the locked version (setuptools and wheel,
    which the lock pins for the isolated build, aside). Off the lock's platform the pins differ."""
    if not (sys.platform == "linux" and sys.version_info[:2] == (3, 11)):
        pytest.skip("the lock is resolved for CPython 3.11 on Linux")
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}
    assert "mediafleet" in installed
    problems = lockfile.drift(lockfile.read_pins(INSTALLED_FROM), installed)
    assert problems == [], (f"this environment differs from {INSTALLED_FROM.name}; "
                            "reinstall with bash requirements/install.sh PYTHON SPEC")


def test_moved_says_each_change() -> None:
    old = {"celery": "5.7.0", "pymupdf": "2.0", "gone": "1.0"}
    new = {"celery": "5.7.0", "pymupdf": "2.1", "added": "0.3"}
    assert lockfile.moved(old, new) == ["added: (none) -> 0.3", "gone: 1.0 -> (none)", "pymupdf: 2.0 -> 2.1"]
    assert lockfile.moved(old, dict(old)) == []


def test_pins_reads_a_requirements_file() -> None:
    text = ("# header\nPyMuPDF==2.0 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via x\n"
            "zope.interface==8.0 ; python_version >= '3.11'\n")
    assert lockfile.pins(text) == {"pymupdf": "2.0", "zope-interface": "8.0"}


def test_check_names_what_disagrees() -> None:
    pins = lockfile.read_pins()
    del pins["celery"]
    pins["pydantic"] = "1.10.0"
    problems = lockfile.check(pins)
    assert any(p.startswith("celery") and p.endswith("is not pinned") for p in problems)
    assert any(p.startswith("pydantic==1.10.0 is outside") for p in problems)


def test_the_command_line_exits_nonzero_on_a_problem(tmp_path: Path) -> None:
    bad = tmp_path / "lock.txt"
    bad.write_text("celery==5.7.0\n")
    done = subprocess.run([sys.executable, str(ROOT / "requirements" / "lockfile.py"), "check", str(bad)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "is not pinned" in done.stdout
    done = subprocess.run([sys.executable, str(ROOT / "requirements" / "lockfile.py"), "moved",
                           str(bad), str(lockfile.LOCK)], capture_output=True, text=True, check=True)
    assert "pymupdf: (none) -> " in done.stdout


def test_install_sh_refuses_without_a_spec() -> None:
    done = subprocess.run(["bash", str(ROOT / "requirements" / "install.sh"), sys.executable],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "usage" in done.stderr


def test_every_install_path_goes_through_install_sh() -> None:
    """tests/run.sh (and with it CI) installs with the lock; the docs name the same command."""
    run = (ROOT / "tests" / "run.sh").read_text()
    assert "requirements/install.sh .venv/bin/python -e '.[all,test]'" in run
    assert not re.search(r"^[^#]*pip install", run, re.M)
    assert "requirements/install.sh" in (ROOT / "docs" / "install.md").read_text()
