"""The product as its users install it: the wheel, not the clone.

The rest of the suite runs an editable install in a warm venv, which hides what a user meets. Here
the wheel is built from a copy of this clone's sources (its C extensions built against the locked
PyMuPDF), installed non-editable into a fresh venv through ``requirements/install.sh`` (the lock,
as the README's first command does), and run from the clone's root and from an empty folder:

* ``import mediafleet.contract`` (and the other mapped packages) gives the installed package;
* ``mediafleet extract --samples`` extracts every bundled sample, ``mediafleet report`` draws one;
* the callers' four tools over stdio (their mcp_config's ``mediafleet serve-mcp``) and over
  streamable HTTP, with their engine's digest, each bundle judged by the real engine;
* the discovery tools: index the samples' bundles, open a lease, search through ``serve-discovery``;
* ``docker/smoke.py --c-reader``, the images' build-time check, with the C reader loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession, StdioServerParameters, stdio_client
from mediafleet.contract import EvidenceBundle

from tests.conftest import ROOT, free_port
from tests.engine import engine_blob_store, engine_verdict
from tests.mcp_client import TOOL_ACTIONS, mcp_server
from tests.test_mcp import _wait_for_port

pytestmark = pytest.mark.installed

SAMPLES = ROOT / "src" / "mediafleet" / "samples"
# What the wheel is built from: what pyproject.toml and setup.py name, nothing the clone holds besides.
_SOURCES = ("pyproject.toml", "setup.py", "README.md", "contract", "workers", "adapters", "src")
_TOOL_SAMPLES = {"pdf_action": ("harbour-report.pdf", "application/pdf"),
                 "image_decode": ("notice.png", "image/png"),
                 "transcribe_media": ("memo.opus", "audio/ogg"),
                 "video_keyframes": ("scenes.mp4", "video/mp4")}


@dataclass(frozen=True)
class Installed:
    bin: Path  # the fresh venv's bin/
    site: Path  # its site-packages
    home: Path  # HOME and XDG folders of the product's own, outside the clone

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def mediafleet(self) -> Path:
        return self.bin / "mediafleet"

    def env(self, **extra: str) -> dict[str, str]:
        """The user's environment: no MEDIAFLEET_* of the test run, no PYTHONPATH, the venv first on PATH."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIAFLEET_", "PYTHON", "VIRTUAL_ENV"))}
        return {**env, "PATH": f"{self.bin}{os.pathsep}{env.get('PATH', '')}", "HOME": str(self.home),
                "XDG_CACHE_HOME": str(self.home / "cache"), "XDG_STATE_HOME": str(self.home / "state"),
                "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}

    def run(self, *argv: str | Path, cwd: Path, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(a) for a in argv], cwd=cwd, env=self.env(**extra), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel, built and installed from the lock into a fresh venv (a few minutes: it resolves,
    and installs every extra, as a user's first command does)."""
    base = tmp_path_factory.mktemp("installed")
    src = base / "sources"
    src.mkdir()
    for name in _SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = ["bash", str(ROOT / "requirements" / "install.sh"), python]
    lock = str(ROOT / "requirements" / "lock.txt")
    # The locked pip first (install.sh brings it), whose --build-constraint builds the wheel's C
    # extensions against the locked PyMuPDF, as every install does.
    done = subprocess.run([*install, "pip"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    dist = base / "dist"
    built = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-deps",
                            "--no-require-hashes", "-c", lock, "--build-constraint", lock, "--wheel-dir", str(dist),
                            str(src)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("mediafleet-*.whl")
    done = subprocess.run([*install, f"{wheel}[all]"], capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    (site,) = (venv / "lib").glob("python3*/site-packages")
    home = base / "home"
    home.mkdir()
    return Installed(venv / "bin", site, home)


@pytest.fixture(params=["clone root", "empty folder"])
def cwd(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where the user runs the commands: the clone's root (which holds contract/, workers/ and
    adapters/ but no mediafleet/) or a folder with nothing in it."""
    if request.param == "clone root":
        return ROOT
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


def test_the_installed_package_is_what_imports(installed: Installed, cwd: Path) -> None:
    code = ("import json, mediafleet, mediafleet.contract, mediafleet.workers, mediafleet.adapters, mediafleet.cli\n"
            "print(json.dumps([m.__file__ for m in (mediafleet, mediafleet.contract, mediafleet.workers, "
            "mediafleet.adapters)]))")
    files = json.loads(installed.run(installed.python, "-c", code, cwd=cwd).stdout)
    assert all(Path(f).is_relative_to(installed.site / "mediafleet") for f in files), files


def test_the_samples_extract_and_a_report_is_drawn(installed: Installed, cwd: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = installed.run(installed.mediafleet, "extract", "--samples", "--out", out, cwd=cwd)
    assert done.stdout.count(": ok (") == 4, done.stdout
    bundles = sorted(out.glob("*.bundle.json"))
    assert len(bundles) == 4
    for path in bundles:
        bundle = EvidenceBundle.model_validate_json(path.read_bytes())
        assert bundle.status == "ok" and any(n.node_type == "Evidence" for n in bundle.nodes), path.name
    page = tmp_path / "report.html"
    installed.run(installed.mediafleet, "report", bundles[0], "-o", page, cwd=cwd)
    html = page.read_text(encoding="utf-8")
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def _artifact(engine_socket: str, name: str, media_type: str) -> dict[str, Any]:
    """The callers' params: their engine's digest of the bytes, the type, the bytes inline."""
    import base64

    data = (SAMPLES / name).read_bytes()
    return {"digest": engine_blob_store(engine_socket, data), "media_type": media_type,
            "artifact_b64": base64.b64encode(data).decode("ascii")}


def _judge(engine_socket: str, answer: dict[str, Any], tool: str) -> None:
    assert answer.get("available", True) is not False, (tool, answer)
    bundle = EvidenceBundle.model_validate(answer["bundle"])
    assert bundle.artifact.claimed is not None and bundle.artifact.claimed.digest_check == "engine_blob_manifest"
    assert engine_verdict(engine_socket, bundle) == [], tool


def test_the_callers_four_tools_over_stdio(installed: Installed, cwd: Path, tmp_path: Path,
                                           engine_socket: str) -> None:
    env = installed.env(MEDIAFLEET_BLOB_ROOT=str(tmp_path / "blobs"), MEDIAFLEET_ENGINE_OWNERS='["anonymous-local"]')
    for tool, (name, media_type) in _TOOL_SAMPLES.items():
        # A server process per call, as the callers run stdio servers.
        with mcp_server(env, "--wait", "120", log=tmp_path / f"{tool}.log", cwd=cwd,
                        executable=installed.mediafleet) as caller:
            answer, failed = caller.call(tool, _artifact(engine_socket, name, media_type))
        assert not failed, (tool, answer)
        _judge(engine_socket, answer, tool)


def test_the_callers_four_tools_over_http(installed: Installed, cwd: Path, tmp_path: Path,
                                          engine_socket: str) -> None:
    import anyio
    from mcp.client.streamable_http import streamable_http_client

    calls = {tool: _artifact(engine_socket, name, media_type) for tool, (name, media_type) in _TOOL_SAMPLES.items()}
    answers: dict[str, dict[str, Any]] = {}

    async def session(url: str) -> None:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            for tool, params in calls.items():
                result = await client.call_tool(tool, {"action": TOOL_ACTIONS[tool], "params_json": json.dumps(params)})
                assert not result.is_error
                answers[tool] = json.loads(result.content[0].text)

    port = free_port()
    log = tmp_path / "http.log"
    env = installed.env(MEDIAFLEET_BLOB_ROOT=str(tmp_path / "blobs"), MEDIAFLEET_ENGINE_OWNERS='["anonymous-local"]')
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(installed.mediafleet), "serve-mcp", "--http", f"--port={port}", "--wait", "120"],
                                cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            _wait_for_port(port, proc, log)
            anyio.run(session, f"http://127.0.0.1:{port}/mcp")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    for tool, answer in answers.items():
        _judge(engine_socket, answer, tool)
    assert set(answers) == set(_TOOL_SAMPLES)


@contextmanager
def _discovery_agent(installed: Installed, cwd: Path, credential_file: str, log: Path, **extra: str) -> Iterator[Any]:
    params = StdioServerParameters(command=str(installed.mediafleet), cwd=str(cwd), env=installed.env(**extra),
                                   args=["serve-discovery", "--credential-file", credential_file])
    with open(log, "w") as errlog, start_blocking_portal() as portal, ExitStack() as stack:
        read, write = stack.enter_context(portal.wrap_async_context_manager(stdio_client(params, errlog=errlog)))
        session = stack.enter_context(portal.wrap_async_context_manager(ClientSession(read, write)))
        portal.call(session.initialize)
        yield portal, session


def test_the_discovery_tools_find_the_samples_evidence(installed: Installed, cwd: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    state = {"XDG_STATE_HOME": str(tmp_path / "state")}  # the host's key, leases and index: this test's own
    installed.run(installed.mediafleet, "extract", "--samples", "--out", out, cwd=cwd)
    installed.run(installed.mediafleet, "index", "add", *sorted(out.glob("*.bundle.json")), "--workspace", "harbour",
                  cwd=cwd, **state)
    installed.run(installed.mediafleet, "discovery", "key", "new", cwd=cwd, **state)
    lease = json.loads(installed.run(installed.mediafleet, "discovery", "lease", "open", "--workspace", "harbour",
                                     "--ttl-s", "600", "--max-operations", "4", "--max-evidence", "5",
                                     cwd=cwd, **state).stdout)
    with _discovery_agent(installed, cwd, lease["credential_file"], tmp_path / "discovery.log", **state) as agent:
        portal, session = agent
        result = portal.call(session.call_tool, "discovery-search", {"lease_id": lease["lease_id"], "query": "finance"})
    assert not result.is_error, result.content
    answer = json.loads(result.content[0].text)
    assert any("finance team" in item["text"] for item in answer["evidence"]), answer


def test_the_images_smoke_test_passes_with_the_c_reader(installed: Installed, cwd: Path) -> None:
    done = installed.run(installed.python, ROOT / "docker" / "smoke.py", "--c-reader", cwd=cwd, timeout=600)
    said = done.stdout.splitlines()
    assert any(line.startswith("ok    c reader:") for line in said), done.stdout
    assert not any(line.startswith("FAIL") for line in said), done.stdout


def test_nothing_of_the_clone_is_imported(installed: Installed) -> None:
    """The venv holds the wheel's files only: no path back into the clone (an editable install's
    finder or a .pth would put one there)."""
    clone = str(ROOT)
    for pth in installed.site.glob("*.pth"):
        assert clone not in pth.read_text(encoding="utf-8", errors="replace"), pth.name
    assert not list(installed.site.glob("__editable__*"))
