"""Shared fixtures: the conformance corpus, a real redis-server and real worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mediafleet import Settings
from mediafleet.workers.engines import cap_threads
from tests.servers import MotoServer, RedisServer, free_port

# Before any test module loads an engine library: CTranslate2's OpenMP runtime takes its thread
# count when it loads, so the in-process runs of this process must start from the same count as
# the workers it starts (see cap_threads).
cap_threads(Settings().threads)

__all__ = ["AWS_ENV", "CORPUS", "ROOT", "MotoServer", "RedisServer", "WorkerProcess", "free_port"]

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"


# What makes a test need a service (a server process or a browser of its own): the fixtures that
# start one, the PostgreSQL side of the discovery index, and the modules that start theirs directly.
# Such tests are marked ``services`` at collection, so ``-m "not services"`` runs with nothing started.
SERVICE_FIXTURES = frozenset({"redis_server", "own_redis", "jobs", "fleet_env", "start_worker", "moto_server",
                              "engine_socket", "postgres_server"})
SERVICE_MARKERS = ("integration", "installed", "containers")
SERVICE_MODULES = frozenset({"tests.test_report"})  # Chromium renders the report


def needs_services(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    module = getattr(getattr(item, "module", None), "__name__", "")
    return bool(SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
                or params.get("index") == "postgresql"
                or any(item.get_closest_marker(name) for name in SERVICE_MARKERS)
                or module in SERVICE_MODULES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if needs_services(item):
            item.add_marker(pytest.mark.services)


@pytest.fixture(scope="session")
def corpus() -> Path:
    """``../shared/corpus``; tests that need it skip cleanly where it is absent."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent: conformance media are not available here")
    return CORPUS


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def manifest() -> Any:
    """The shipped manifest."""
    from mediafleet.contract.manifest import default_manifest

    return default_manifest()


@pytest.fixture
def blobs(tmp_path: Path) -> Any:
    """A local blob store of this test's own."""
    from mediafleet.blobs.local import LocalBlobStore

    return LocalBlobStore(tmp_path / "blobs")


@pytest.fixture
def jobs(redis_server: RedisServer, tmp_path: Path) -> Iterator[Any]:
    """The real job store on a real redis-server, in a database of this test's own (emptied before
    and after)."""
    import redis

    from mediafleet.fleet.store import JobStore

    db = 1 + (abs(hash(tmp_path.name)) % 14)
    client = redis.Redis.from_url(f"redis://127.0.0.1:{redis_server.port}/{db}")
    client.flushdb()
    yield JobStore(client, ttl_s=3600)
    client.flushdb()


@pytest.fixture
def fleet_env(redis_server: RedisServer, tmp_path: Path) -> dict[str, str]:
    """Environment for a dispatcher and its workers: one broker, one blob store, per test."""
    db = 1 + (abs(hash(tmp_path.name)) % 14)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    import redis

    redis.Redis.from_url(url).flushdb()
    return {"MEDIAFLEET_BROKER_URL": url, "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}


class WorkerProcess:
    """A real ``mediafleet worker`` subprocess (a Celery prefork worker)."""

    def __init__(self, env: dict[str, str], args: list[str], log: Path, module: str = "mediafleet.cli") -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.args = args
        self.module = module
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.hostname = f"w{free_port()}@test"

    def start(self, timeout: float = 60.0) -> WorkerProcess:
        cmd = [sys.executable, "-m", self.module, "worker", f"--hostname={self.hostname}", *self.args]
        self._fh = open(self.log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"worker exited early:\n{self.log.read_text()[-3000:]}")
            if b" ready." in self.log.read_bytes():
                return self
            time.sleep(0.1)
        pytest.fail(f"worker not ready in {timeout}s:\n{self.log.read_text()[-3000:]}")

    def child_pids(self) -> list[int]:
        assert self.proc is not None
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=10)
        self._fh.close()
        self.proc = None


@pytest.fixture
def start_worker(fleet_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real worker processes for this test's fleet; all are stopped afterwards."""
    workers: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, module: str = "mediafleet.cli") -> WorkerProcess:
        log = tmp_path / f"worker{len(workers)}.log"
        worker = WorkerProcess({**fleet_env, **(env or {})}, list(args), log, module)
        workers.append(worker)
        return worker.start()

    yield start
    for worker in workers:
        worker.stop()


# S3-compatible object store: moto's server mode over real HTTP on loopback.

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "mediafleet-test",
    "AWS_SECRET_ACCESS_KEY": "mediafleet-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/mediafleet-test",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/mediafleet-test",
}


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in AWS_ENV.items():
            mp.setenv(name, value)
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        server = MotoServer()
        server.start()
        yield server
        server.stop()


@pytest.fixture
def s3(moto_server: MotoServer) -> Any:
    """A raw client on the server (for arranging and inspecting, not the code under test)."""
    from mediafleet.blobs.s3 import make_client

    return make_client(moto_server.url, "us-east-1")


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"mf-{uuid.uuid4().hex[:20]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_settings(moto_server: MotoServer, bucket: str, tmp_path: Path) -> Any:
    from mediafleet.settings import Settings

    return Settings(blob_url=f"s3://{bucket}/fleet/blobs", s3_endpoint_url=moto_server.url, s3_region="us-east-1",
                    blob_root=tmp_path / "local")


# The callers' engine: a real epistemic-graph-server process (tests/engine.py).


@pytest.fixture(scope="session")
def engine_socket() -> Iterator[str]:
    """The unix socket of a real ``epistemic-graph-server`` (anonymous, durable store in a temp dir)."""
    from tests.engine import EngineServer, EngineUnavailable

    try:
        server = EngineServer().start()
    except EngineUnavailable as exc:
        pytest.fail(str(exc))
    try:
        yield server.socket_path
    finally:
        server.stop()
