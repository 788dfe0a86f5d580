"""The wheel puts one name in site-packages, ``mediafleet``: the repository's contract/, workers/
and adapters/ install as mediafleet.contract, mediafleet.workers and mediafleet.adapters.

The wheel is built from a copy of the working tree (nothing is written into the checkout),
installed with ``pip install --target`` into a temporary folder, and imported by ``python -S``
from an empty folder: no site, so no editable finder and no checkout on the path.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT

_PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
_PACKAGE_DIRS: dict[str, str] = _PYPROJECT["tool"]["setuptools"]["package-dir"]
_SOURCES = ("pyproject.toml", "setup.py", "README.md", *sorted(set(_PACKAGE_DIRS.values())))


def _folder(package: str) -> Path:
    """The repository folder a listed package is built from, through ``package-dir``."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        if (base := ".".join(parts[:cut])) in _PACKAGE_DIRS:
            return ROOT / _PACKAGE_DIRS[base] / Path(*parts[cut:])
    return ROOT / Path(*parts)


def test_every_package_folder_is_listed_and_every_listed_package_is_a_folder() -> None:
    listed = set(_PYPROJECT["tool"]["setuptools"]["packages"])
    folders = {_folder(p) for p in listed}
    on_disk = {init.parent for top in set(_PACKAGE_DIRS.values())
               for init in (ROOT / top).rglob("__init__.py") if "__pycache__" not in init.parts}
    assert on_disk - folders == set(), "package folders missing from [tool.setuptools] packages"
    assert all((folder / "__init__.py").is_file() for folder in folders), "a listed package has no folder"
    assert all(p == "mediafleet" or p.startswith("mediafleet.") for p in listed)


def _imports() -> dict[str, set[str]]:
    """Which of the package's modules each module imports: module level, in functions and under
    TYPE_CHECKING alike (a cycle through a lazy import is still a cycle)."""
    modules: dict[str, Path] = {}
    for package in _PYPROJECT["tool"]["setuptools"]["packages"]:
        for file in _folder(package).glob("*.py"):
            modules[package if file.stem == "__init__" else f"{package}.{file.stem}"] = file
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, file in modules.items():
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


@pytest.mark.parametrize("module", ["mediafleet.blobs.protocol", "mediafleet.blobs.local", "mediafleet.blobs.s3",
                                    "mediafleet.settings", "mediafleet.contract.digests"])
def test_the_stores_and_the_settings_are_in_no_import_cycle(module: str) -> None:
    graph = _imports()
    back = sorted(m for m in _reaches(graph, module) if module in _reaches(graph, m) or m == module)
    assert back == [], f"{module} is in an import cycle with {back}"


def _no_isolation() -> bool:
    """Whether this interpreter can build the wheel itself (offline): its setuptools meets the
    build requirement and has bdist_wheel (setuptools 70.1+, or the ``wheel`` package)."""
    try:
        version = Version(metadata.version("setuptools"))
    except metadata.PackageNotFoundError:
        return False
    wanted = [Requirement(r) for r in _PYPROJECT["build-system"]["requires"]]
    meets = all(version in r.specifier for r in wanted if r.name == "setuptools")
    has_bdist_wheel = version >= Version("70.1")
    try:
        metadata.version("wheel")
        has_bdist_wheel = True
    except metadata.PackageNotFoundError:
        pass
    return meets and has_bdist_wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in _SOURCES:
        path = ROOT / name
        if path.is_dir():
            # Not the extensions an editable install built in place: the wheel builds its own.
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
           "--wheel-dir", str(out), str(src)]
    if _no_isolation():
        cmd.insert(4, "--no-build-isolation")
    # Without it, pip fetches the build requirement (setuptools) from the package index once.
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=src)
    assert built.returncode == 0, built.stderr[-3000:]
    (whl,) = out.glob("mediafleet-*.whl")
    return whl


@pytest.mark.slow
def test_the_wheel_has_one_top_level_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    version = _PYPROJECT["project"]["version"]
    assert {n.split("/")[0] for n in names} == {"mediafleet", f"mediafleet-{version}.dist-info"}
    for package in _PYPROJECT["tool"]["setuptools"]["packages"]:
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    assert {"mediafleet/contract/manifest.default.json", "mediafleet/contract/py.typed",
            "mediafleet/py.typed"} <= set(names)


def test_the_wheel_carries_the_c_extensions_where_they_can_be_built(wheel: Path) -> None:
    """The three C extensions (setup.py: the PDF path's two, the video frame's sharpness) are
    compiled into the wheel wherever this install could build them (it did, in place:
    tests/test_pdf_speed_paths.py and tests/test_video_analysis.py check that)."""
    from mediafleet.workers import reading_order
    from mediafleet.workers.pdf import mupdf
    from mediafleet.workers.video import shots

    if reading_order._xycut is None or mupdf._stext is None or shots._sharp is None:
        pytest.skip("this install has no C extensions (no C compiler or headers when it was installed)")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert {f"mediafleet/workers/_xycut{suffix}", f"mediafleet/workers/pdf/_stext{suffix}",
            f"mediafleet/workers/video/_sharp{suffix}"} <= set(names)
    assert not any(n.endswith(".c") for n in names)  # the sources stay in the sdist


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check",
                           "--no-compile", "--target", str(target), str(wheel)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    yield target


_PROBE = """
import importlib.util, sys
target = sys.argv[1]
import mediafleet.adapters, mediafleet.contract, mediafleet.workers
from mediafleet.contract.digests import blob_ref
from mediafleet.contract.manifest import default_manifest
assert default_manifest().capabilities, "the default manifest (package data) did not load"
for module in (mediafleet.contract, mediafleet.adapters, mediafleet.workers, sys.modules["mediafleet.contract.digests"]):
    assert module.__file__.startswith(target), module.__file__
for name in ("contract", "workers", "adapters"):
    # find_spec, not import: a stray contract/ would be found, then fail on its own imports.
    if importlib.util.find_spec(name) is not None:
        raise SystemExit(f"import {name} finds a module: a second top-level name is on the path")
print("ok")
"""


def test_the_installed_wheel_imports_under_mediafleet_only(installed: Path, tmp_path: Path) -> None:
    """``import mediafleet.contract`` works and ``import contract`` fails, from the wheel alone (the
    dependencies come from this venv's site-packages, which holds no copy of mediafleet)."""
    deps = sysconfig.get_paths()["purelib"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join([str(installed), deps])
    probe = subprocess.run([sys.executable, "-S", "-c", _PROBE, str(installed)], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=120)
    assert probe.returncode == 0 and probe.stdout.strip() == "ok", probe.stderr[-3000:]


def test_every_python_child_process_is_started_with_dash_P() -> None:
    """mediafleet starts Python children (the detached job runner, the GPU probes) only through
    ``mediafleet.interpreter.python``, which passes ``-P``: a working directory holding a
    ``mediafleet`` folder never shadows the installed package in them."""
    from mediafleet.interpreter import python

    assert python("-m", "x")[1:] == ["-P", "-m", "x"]
    mention = {path.relative_to(ROOT).as_posix()
               for top in set(_PACKAGE_DIRS.values()) for path in (ROOT / top).rglob("*.py")
               if "sys.executable" in path.read_text(encoding="utf-8")}
    assert mention == {"src/mediafleet/interpreter.py"}
