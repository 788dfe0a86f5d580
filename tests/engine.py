"""A real ``epistemic-graph-server`` (the callers' engine) for tests.

``EngineServer`` starts the engine's own executable (PyPI ``epistemic-graph-server``) on a private unix
socket in a fresh temp directory, anonymous (``--auth-mode none``), with a durable store there
(``--persist-dir``, which the blob namespace needs) and a random ``EPISTEMIC_GRAPH_TXN_RECOVERY_KEY``;
it waits until the socket accepts connections and stops the process with SIGTERM (the engine's
graceful shutdown), killing it only if that does not finish.

``engine_blob_store(socket_path, data)`` is the callers' ``digest = await client.blob.store(data)``
done synchronously: the digest in the engine's own form. ``engine_verdict(socket_path, bundle)``
writes a bundle as the callers do and asks the engine's own ``ExplainEvidence`` whether it cites
every locus (tests/test_engine_judge.py says how).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mediafleet.contract import EvidenceBundle

T = TypeVar("T")


class EngineUnavailable(RuntimeError):
    """The engine's executable is not installed or did not start."""


def server_binary() -> str:
    """The installed ``epistemic-graph-server`` executable (the wheel's own lookup first)."""
    try:
        from epistemic_graph.server_binary import resolve_server_binary
    except ImportError:
        pass
    else:
        try:
            return resolve_server_binary()
        except RuntimeError:
            pass
    found = shutil.which("epistemic-graph-server")
    if found is None:
        raise EngineUnavailable("epistemic-graph-server is not installed (pip install -e '.[test]' brings it)")
    return found


class EngineServer:
    """One real engine process; use as a context manager, or ``start()`` / ``stop()``."""

    def __init__(self, *, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None
        self._log: Any = None

    @property
    def workdir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("the engine is not started")
        return Path(self._dir)

    @property
    def socket_path(self) -> str:
        return str(self.workdir / "eg.sock")

    @property
    def log_path(self) -> Path:
        return self.workdir / "engine.log"

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def start(self) -> EngineServer:
        exe = server_binary()
        # A short directory: a unix socket path is limited to about 107 bytes.
        self._dir = tempfile.mkdtemp(prefix="mf-eg-")
        # The engine also reads its settings from GRAPH_SERVICE_* / EPISTEMIC_GRAPH_*; none may leak in.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPH_SERVICE_", "EPISTEMIC_GRAPH_"))}
        env["EPISTEMIC_GRAPH_TXN_RECOVERY_KEY"] = secrets.token_hex(32)
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [exe, "--socket-path", self.socket_path, "--auth-mode", "none",
             "--persist-dir", str(self.workdir / "data")],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=self._dir)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise EngineUnavailable(f"epistemic-graph-server exited at start:\n{tail}")
            if self._accepts():
                return self
            time.sleep(0.05)
        tail = self.log_tail()
        self.stop()
        raise EngineUnavailable(f"epistemic-graph-server did not accept connections in {self.start_timeout}s:\n{tail}")

    def _accepts(self) -> bool:
        if not os.path.exists(self.socket_path):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            try:
                s.connect(self.socket_path)
            except OSError:
                return False
        return True

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> EngineServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def with_engine_client(socket_path: str, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``await work(client)`` on a fresh anonymous client of the engine at ``socket_path``, synchronously."""
    from epistemic_graph.client import EpistemicGraphClient

    async def main() -> T:
        client = await EpistemicGraphClient.connect(socket_path=socket_path, auth_mode="none")
        try:
            return await work(client)
        finally:
            await client.close()

    return asyncio.run(main())


def engine_blob_store(socket_path: str, data: bytes) -> str:
    """``await client.blob.store(data)`` as the callers do it (the client's default chunking); the engine's digest."""

    async def store(client: Any) -> str:
        return str(await client.blob.store(data))

    return with_engine_client(socket_path, store)


# -- the engine as the judge of a bundle (tests/test_engine_judge.py, tests/test_installed.py) -------

def evidence_of(bundle: EvidenceBundle) -> dict[str, dict[str, Any]]:
    """Locus id -> (Evidence node id, the locus as written)."""
    return {n.properties["evidence_locus"]["id"]: {"node": n.id, "locus": n.properties["evidence_locus"]}
            for n in bundle.nodes if n.node_type == "Evidence"}


def claim_of(bundle: EvidenceBundle) -> str:
    (claim,) = [n.id for n in bundle.nodes if n.node_type == "Claim"]
    return claim


async def write_bundle(client: Any, bundle: EvidenceBundle) -> None:
    for node in bundle.nodes:
        await client.nodes.add(node.id, {"node_type": node.node_type, **node.properties})
    for edge in bundle.edges:
        await client.edges.add(edge.source, edge.target, {"relationship": edge.relationship})


async def explain_evidence(client: Any, node_id: str) -> dict[str, Any]:
    """``ExplainEvidence`` for ``node_id``: the raw payload, after checking it against the engine's own result model."""
    from epistemic_graph.generated import query

    result = await query.send_explain_evidence(client, {"node_id": node_id})
    query.decode_explain_evidence(result)  # the engine's contract model (extra="forbid")
    payload: dict[str, Any] = result.payload
    return payload


def citation_problems(bundle: EvidenceBundle, payload: dict[str, Any]) -> list[str]:
    """Where ExplainEvidence on the bundle's claim differs from "every locus, once, unchanged, as support"."""
    written = evidence_of(bundle)
    citations = payload["citations"]
    cited = Counter(c["locus"]["id"] for c in citations)
    problems = [f"dropped {i} ({written[i]['locus']['address']['kind']})" for i in written if i not in cited]
    problems += [f"cited {i}, which the bundle does not hold" for i in cited if i not in written]
    problems += [f"cited {i} {n} times" for i, n in cited.items() if n > 1]
    for citation in citations:
        mine = written.get(citation["locus"]["id"])
        if mine is None:
            continue
        if citation["kind"] != "Supports":
            problems.append(f"{mine['node']} cited as {citation['kind']}")
        if citation["evidence_id"] != mine["node"]:
            problems.append(f"{citation['locus']['id']} cited from {citation['evidence_id']}, not {mine['node']}")
        if citation["locus"] != mine["locus"]:
            problems.append(f"{citation['locus']['id']} came back changed: {citation['locus']}")
    return problems


def engine_verdict(socket_path: str, bundle: EvidenceBundle) -> list[str]:
    """The bundle written into the engine as the callers write it, and where ``ExplainEvidence`` on its
    claim differs from "every locus, once, unchanged, as support" (empty: the engine cites it all)."""

    async def judge(client: Any) -> list[str]:
        await write_bundle(client, bundle)
        return citation_problems(bundle, await explain_evidence(client, claim_of(bundle)))

    return with_engine_client(socket_path, judge)
