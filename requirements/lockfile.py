"""Reading requirements/lock.txt: its pins, what moved between two locks, and whether a lock (or an
environment) agrees with pyproject.toml.

Used by requirements/refresh.sh (``moved``, ``check``) and tests/test_lock.py. Standard library and
``packaging`` only (a dependency of mediafleet, and of every pip).

    python requirements/lockfile.py moved OLD NEW     # "name: old -> new", one line each
    python requirements/lockfile.py check [LOCK]      # the lock against pyproject.toml; exit 1 on a problem
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

__all__ = ["EXTRAS", "LOCK", "ROOT", "TARGET", "build_requirements", "check", "drift", "moved", "pins",
           "project_requirements", "read_pins"]

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
LOCK_IN = ROOT / "requirements" / "lock.in"
PYPROJECT = ROOT / "pyproject.toml"
# The extras the lock covers: every one the images and the README's install name.
EXTRAS = ("all", "test", "ocr-gpu", "cuda")
# The environment the lock is resolved for (markers are evaluated in it): the images' Python.
TARGET = {**default_environment(), "python_version": "3.11", "python_full_version": "3.11.2",
          "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
          "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython"}

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def pins(text: str) -> dict[str, str]:
    """Each ``name==version`` at the start of a line of a requirements file, by canonical name."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = _PIN.match(line)
        if m:
            found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def read_pins(path: Path = LOCK) -> dict[str, str]:
    return pins(path.read_text())


def moved(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """What changed from lock ``old`` to lock ``new``, one ``name: old -> new`` line per
    distribution in name order (``(none)`` for one only in one of them); nothing when none moved."""
    lines = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before != after:
            lines.append(f"{name}: {before or '(none)'} -> {after or '(none)'}")
    return lines


def _pyproject() -> dict:
    return tomllib.loads(PYPROJECT.read_text())


def project_requirements(extras: Iterable[str] = EXTRAS) -> list[Requirement]:
    """The dependencies of ``mediafleet[extras]`` that apply on :data:`TARGET`: the core's and every
    extra's, with the extras that name ``mediafleet[...]`` followed."""
    project = _pyproject()["project"]
    name = canonicalize_name(project["name"])
    optional = project.get("optional-dependencies", {})
    seen: set[str] = set()
    todo = list(extras)
    found = [Requirement(r) for r in project.get("dependencies", [])]
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise KeyError(f"pyproject.toml has no extra {extra!r}")
        for text in optional[extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == name:
                todo.extend(req.extras)
            else:
                found.append(req)
    return [r for r in found if r.marker is None or r.marker.evaluate({**TARGET, "extra": ""})]


def build_requirements() -> list[Requirement]:
    """pyproject's ``build-system.requires``: what the C extensions' isolated build installs."""
    return [Requirement(r) for r in _pyproject()["build-system"]["requires"]]


def _lock_in() -> list[Requirement]:
    return [Requirement(line.split("#", 1)[0].strip()) for line in LOCK_IN.read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def check(lock: Mapping[str, str]) -> list[str]:
    """Problems of ``lock`` (its pins) against pyproject.toml and requirements/lock.in: a
    requirement of the covered extras, of the build or of lock.in that the lock does not pin, or
    whose range does not admit the pinned version. Empty when it agrees."""
    problems = []
    wanted = [("pyproject", r) for r in project_requirements()]
    wanted += [("build-system.requires", r) for r in build_requirements()]
    wanted += [("requirements/lock.in", r) for r in _lock_in()]
    for where, req in wanted:
        name = canonicalize_name(req.name)
        if name not in lock:
            problems.append(f"{req} ({where}) is not pinned")
        elif not req.specifier.contains(Version(lock[name]), prereleases=True):
            problems.append(f"{name}=={lock[name]} is outside {req} ({where})")
    return problems


# Installed by venv itself or only into the isolated build environment, never by the install.
_NOT_INSTALLED_BY_US = frozenset({"setuptools", "wheel"})


def drift(lock: Mapping[str, str], installed: Mapping[str, str]) -> list[str]:
    """Each distribution installed (``installed``: canonical name to version) at another version
    than the lock pins, ``name: installed X, locked Y``. setuptools and wheel are left out: the lock
    pins them for the isolated build, and an environment has whatever venv put there."""
    return [f"{name}: installed {installed[name]}, locked {lock[name]}"
            for name in sorted(set(lock) & set(installed) - _NOT_INSTALLED_BY_US)
            if Version(installed[name]) != Version(lock[name])]


def _main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "moved":
        for line in moved(read_pins(Path(argv[1])), read_pins(Path(argv[2]))):
            print(line)
        return 0
    if argv[:1] == ["check"] and len(argv) <= 2:
        problems = check(read_pins(Path(argv[1]) if len(argv) == 2 else LOCK))
        for line in problems:
            print(line)
        return 1 if problems else 0
    print("usage: lockfile.py moved OLD NEW | lockfile.py check [LOCK]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
