"""The house a newcomer walks: each concept is a package, no module is over 600 lines, and no
module imports one that (directly or through others) imports it back.

Read from the sources with :mod:`ast`, nothing imported: an import inside a function counts too (it
is a dependency all the same, only a later one); an import under ``if TYPE_CHECKING`` does not (it
never runs). ``from package import name`` counts as an import of ``package.name`` when that is a
module, of ``package`` otherwise, as import graphs (grimp, import-linter) read it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The one package, from its four top-level folders (pyproject's package-dir).
SOURCES = {"mediafleet": ROOT / "src" / "mediafleet", "mediafleet.contract": ROOT / "contract",
           "mediafleet.workers": ROOT / "workers", "mediafleet.adapters": ROOT / "adapters",
           "benchmarks": ROOT / "benchmarks"}  # the benchmarks: in the circle check, not the length one
LONGEST = 600
# The rooms issue 40 names: each a package of its own, and none of the old flat modules left.
ROOMS = ("fleet", "orchestrators", "blobs", "mcp", "cli", "modalities", "discovery", "report")
GONE = ("jobstore", "jobscripts", "unreachable", "presence", "orchestrator", "orchestrator_celery",
        "orchestrator_inprocess", "fleet_job", "job", "blobstore", "s3store", "retention", "mcp_server",
        "mcp_upstream", "localjobs", "caller_digest", "inputs")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(n) for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    named: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            named |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & MODULES.keys()
            named |= submodules or {node.module}
    return named & MODULES.keys()


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_the_circle_finder_finds_a_circle_and_nothing_else() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back() -> None:
    graph = {name: _imports(path) - {name} for name, path in MODULES.items()}
    assert _circles(graph) == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("mediafleet")))
def test_no_module_is_over_600_lines(name: str) -> None:
    lines = MODULES[name].read_text(encoding="utf-8").count("\n")
    assert lines <= LONGEST, f"{MODULES[name].relative_to(ROOT)}: {lines} lines; split it by what it holds"


def test_each_concept_is_a_package_and_the_flat_modules_are_gone() -> None:
    for room in ROOMS:
        assert (SOURCES["mediafleet"] / room / "__init__.py").is_file(), room
    left = [name for name in GONE if (SOURCES["mediafleet"] / f"{name}.py").exists()]
    assert left == []


def test_the_extractor_folders_hold_no_celery_and_no_fleet_state() -> None:
    """The per-modality folders are pure extractors: no broker, no job store, no runtime."""
    runtime = ("celery", "kombu", "redis", "mediafleet.fleet", "mediafleet.workers.runtime",
               "mediafleet.orchestrators", "mediafleet.mcp", "mediafleet.cli")
    for name, path in MODULES.items():
        if not name.startswith(("mediafleet.workers.pdf", "mediafleet.workers.image", "mediafleet.workers.audio",
                                "mediafleet.workers.video", "mediafleet.workers.ocr")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        bad = sorted(m for m in imported if m.split(".")[0] in runtime or m.startswith(runtime))
        assert bad == [], f"{name} imports {bad}"


def test_the_adapters_read_the_modalities_without_importing_the_workers() -> None:
    """The adapters map results through the registered specs (``mediafleet.modalities``), whose
    code parts are references: no adapter, nor anything it imports, imports an extractor."""
    graph = {name: _imports(path) - {name} for name, path in MODULES.items()}
    seen: set[str] = set()
    todo = [name for name in MODULES if name.startswith("mediafleet.adapters")]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    reached = sorted(n for n in seen if n.startswith(("mediafleet.workers.pdf", "mediafleet.workers.image",
                                                       "mediafleet.workers.audio", "mediafleet.workers.video",
                                                       "mediafleet.workers.ocr", "mediafleet.workers.runtime")))
    assert reached == []
