"""The images built and the compose stack run for real, on a Docker engine of this machine.

`bash docker/build.sh` builds mediafleet:cpu, mediafleet:gpu and mediafleet:redis (from a base made
of Debian's packages where no registry answers), then docker/compose.yaml with
docker/compose.loopback.yaml runs Redis, two CPU workers, Flower and the MCP server on the host's
network, on 127.0.0.1. The host's own CLI (this venv's `mediafleet`) extracts a PDF, an image, a
recording and a video through that Redis, sharing the blob store with the containers (a host folder
bind-mounted into them); a worker container is killed mid-job and the job finishes once on the
other; `docker-compose run --rm cli status` sees the fleet. Everything is torn down after.

Where no dockerd answers, one is started (root only): `dockerd --bridge=none --iptables=false`
with its state in /var/lib/mediafleet-test-docker (kept, so a later run reuses the build cache; the
images a rebuild leaves untagged are pruned after) and
its socket under /run/mediafleet-test-docker; it is stopped after. A machine that cannot run one
skips these tests, except in CI (CI=true), where that is a failure.

The figures (build times, image sizes, job times) are printed as the tests run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from base64 import b64encode
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.containers, pytest.mark.timeout(2400)]

DOCKER = "/usr/bin/docker"  # Debian's client (BuildKit built in); another on the PATH may need buildx
STATE = Path("/var/lib/mediafleet-test-docker")
RUN_DIR = Path("/run/mediafleet-test-docker")
SOCKET = RUN_DIR / "docker.sock"
UID = 10001  # the images' user
COMPOSE = ["-f", str(ROOT / "docker" / "compose.yaml"), "-f", str(ROOT / "docker" / "compose.loopback.yaml")]
SAMPLES = ROOT / "src" / "mediafleet" / "samples"
BUILD_TIMEOUT_S = 1800
JOB_TIMEOUT_S = 300


def _say(config: pytest.Config, text: str) -> None:
    """A line in the test log even while output is captured (CI logs keep the figures)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n[containers] {text}", flush=True)


def _unusable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the container tests cannot run here: {reason}")
    pytest.skip(reason)


def _answers(env: dict[str, str]) -> bool:
    try:
        done = subprocess.run([DOCKER, "version", "--format", "{{.Server.Version}}"], env=env,
                              capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


@pytest.fixture(scope="module")
def docker_env(pytestconfig: pytest.Config) -> Iterator[dict[str, str]]:
    """The environment for docker and docker-compose: a dockerd that answers, started if need be."""
    if not os.path.exists(DOCKER) or shutil.which("docker-compose") is None:
        _unusable("Debian's docker.io and docker-compose are not installed (tests/run.sh installs them)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIAFLEET_", "COMPOSE_"))}
    env["DOCKER_BUILDKIT"] = "1"
    if _answers(env):
        _say(pytestconfig, f"using the dockerd that answers at {env.get('DOCKER_HOST', 'the default socket')}")
        yield env
        return
    env["DOCKER_HOST"] = f"unix://{SOCKET}"
    if _answers(env):  # this test's own, left running by someone on purpose
        _say(pytestconfig, f"using the dockerd at {SOCKET}")
        yield env
        return
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        _unusable("no dockerd answers, and this user cannot start one (needs root and Debian's docker.io)")
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    STATE.mkdir(parents=True, exist_ok=True)
    log = open(RUN_DIR / "dockerd.log", "ab")  # noqa: SIM115 - kept open for dockerd's life
    started = time.monotonic()
    daemon = subprocess.Popen(
        ["dockerd", "--bridge=none", "--iptables=false", "--ip-masq=false", "--data-root", str(STATE),
         "--exec-root", str(RUN_DIR / "exec"), "--pidfile", str(RUN_DIR / "dockerd.pid"), "-H", f"unix://{SOCKET}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while not _answers(env):
            if daemon.poll() is not None or time.monotonic() - started > 90:
                tail = (RUN_DIR / "dockerd.log").read_text(errors="replace")[-3000:]
                _unusable(f"dockerd did not start (exit {daemon.poll()}); its log ends:\n{tail}")
            time.sleep(1)
        _say(pytestconfig, f"started dockerd (pid {daemon.pid}) in {time.monotonic() - started:.1f} s, "
                           f"state in {STATE}")
        yield env
    finally:
        # The state is kept for the build cache; the images each rebuild leaves untagged are not
        # (a CPU and a GPU image a run, about 6 GB: they filled this disk once).
        subprocess.run(["docker", "image", "prune", "--force"], env=env, capture_output=True, timeout=300,
                       check=False)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def images(docker_env: dict[str, str], pytestconfig: pytest.Config) -> dict[str, str]:
    """`bash docker/build.sh` (all three images); returns each image's figure line."""
    started = time.monotonic()
    try:
        done = subprocess.run(["bash", str(ROOT / "docker" / "build.sh")], env=docker_env, cwd=ROOT,
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"docker/build.sh ran past {BUILD_TIMEOUT_S} s; its output ends:\n{str(exc.stdout)[-4000:]}")
    assert done.returncode == 0, f"docker/build.sh failed:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    figures = {line.split(": built in ")[0]: line for line in done.stdout.splitlines() if ": built in " in line}
    for line in figures.values():
        _say(pytestconfig, line)
    _say(pytestconfig, f"docker/build.sh took {time.monotonic() - started:.0f} s in all")
    assert set(figures) == {"mediafleet:cpu", "mediafleet:gpu", "mediafleet:redis"}, done.stdout
    return figures


@dataclass
class Stack:
    env: dict[str, str]  # docker-compose's
    project: str
    folder: Path  # secrets/, blobs/ and home/ of the host's CLI
    redis_url: str
    password: str
    flower_port: int
    mcp_port: int

    def compose(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker-compose", "-p", self.project, *COMPOSE, *args], env=self.env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def containers(self, service: str) -> list[str]:
        done = subprocess.run([DOCKER, "ps", "-q", "--no-trunc",
                               "--filter", f"label=com.docker.compose.project={self.project}",
                               "--filter", f"label=com.docker.compose.service={service}"],
                              env=self.env, capture_output=True, text=True, timeout=30, check=True)
        return done.stdout.split()

    def cli_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
        env.update(HOME=str(self.folder / "home"), MEDIAFLEET_BROKER_URL=self.redis_url,
                   MEDIAFLEET_REDIS_PASSWORD=self.password, MEDIAFLEET_BLOB_ROOT=str(self.folder / "blobs"))
        return env

    def cli(self, *args: str) -> list[str]:
        """The host's `mediafleet`, as the images' uid so the containers read the blobs it writes (the
        store writes each blob readable by its writer only); it keeps CAP_DAC_READ_SEARCH so that
        uid can still read this venv's interpreter wherever it lies (e.g. under /root)."""
        return ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--inh-caps=+dac_read_search",
                "--ambient-caps=+dac_read_search", str(ROOT / ".venv" / "bin" / "mediafleet"), *args]

    def run_cli(self, *args: str, timeout: float = JOB_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.cli(*args), env=self.cli_env(), cwd=self.folder / "home", capture_output=True,
                              text=True, timeout=timeout, check=False)

    def record(self, job_id: str) -> dict[str, Any]:
        """The job's record as `mediafleet status JOB` shows it, read here (polling the CLI costs a
        process start, about a CPU second, each time)."""
        from mediafleet.fleet.store import JobStore
        from mediafleet.settings import Settings

        store = JobStore.from_settings(Settings(broker_url=self.redis_url, redis_password=self.password))
        try:
            found = store.get(job_id)
            return found.summary() if found is not None else {"state": "unknown"}
        finally:
            store.client.close()

    def status(self, job_id: str | None = None) -> dict[str, Any]:
        done = self.run_cli("status", *([job_id] if job_id else []), timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def stack(docker_env: dict[str, str], images: dict[str, str], tmp_path_factory: pytest.TempPathFactory,
          pytestconfig: pytest.Config) -> Iterator[Stack]:
    """Redis, two CPU workers, Flower and the MCP server, up; torn down (volumes too) after."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        _unusable("the host's CLI shares the blob store as the images' uid 10001 (setpriv): needs root")
    folder = tmp_path_factory.mktemp("stack")
    folder.chmod(0o755)
    for name in ("secrets", "blobs", "home"):
        (folder / name).mkdir()
    password = uuid.uuid4().hex + uuid.uuid4().hex[:8]
    (folder / "secrets" / "redis_password").write_text(password + "\n")
    (folder / "secrets" / "flower_basic_auth").write_text(f"admin:{uuid.uuid4().hex}\n")
    for path in (folder / "secrets", folder / "blobs", folder / "home", *(folder / "secrets").iterdir()):
        os.chown(path, UID, UID)
    for secret in (folder / "secrets").iterdir():
        secret.chmod(0o400)
    redis_port, flower_port, mcp_port = free_port(), free_port(), free_port()
    env = {**docker_env, "MEDIAFLEET_SECRETS": str(folder / "secrets"), "MEDIAFLEET_BLOBS": str(folder / "blobs"),
           "MEDIAFLEET_REDIS_PORT": str(redis_port), "MEDIAFLEET_FLOWER_PORT": str(flower_port),
           "MEDIAFLEET_MCP_PORT": str(mcp_port), "MEDIAFLEET_STOP_GRACE": "10s"}
    built = Stack(env=env, project=f"mftest{os.getpid()}", folder=folder,
                  redis_url=f"redis://127.0.0.1:{redis_port}/0", password=password, flower_port=flower_port,
                  mcp_port=mcp_port)
    started = time.monotonic()
    try:
        up = built.compose("up", "-d", "--no-build", "--scale", "worker-cpu=2", timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        # Both workers live (their heartbeats in Redis), Flower and the MCP server listening.
        deadline = time.monotonic() + 240
        while True:
            done = built.run_cli("status", timeout=60)
            if done.returncode == 0 and len(json.loads(done.stdout)["workers"]["cpu"]) == 2 \
                    and _listening(flower_port) and _listening(mcp_port):
                break
            assert time.monotonic() < deadline, f"the stack did not come up: {done.stdout}{done.stderr}\n{_logs(built)}"
            time.sleep(2)
        _say(pytestconfig, f"stack up (Redis, 2 CPU workers, Flower, MCP) in {time.monotonic() - started:.1f} s")
        yield built
    finally:
        down = built.compose("down", "-v", "-t", "10", "--remove-orphans", timeout=300)
        if down.returncode != 0:
            _say(pytestconfig, f"docker-compose down failed: {down.stderr[-2000:]}")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _logs(stack: Stack) -> str:
    done = stack.compose("logs", "--no-color", "--tail", "40", timeout=60)
    return done.stdout[-8000:]


def test_host_cli_extracts_each_kind_of_media_on_the_containers(stack: Stack, pytestconfig: pytest.Config) -> None:
    """A PDF, an image, a recording and a video, from the host's CLI, run by the containers' workers."""
    started = time.monotonic()
    done = stack.run_cli("extract", "--samples", "--json")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + _logs(stack)
    bundles = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(b["action"] for b in bundles) == ["analyze_image", "extract_keyframes", "ocr_pdf",
                                                    "transcribe_segments"]
    assert all(b["status"] == "ok" for b in bundles), [b["error"] for b in bundles]
    workers = set()
    for bundle in bundles:
        job = stack.status(bundle["job_id"])["job"]
        assert job["state"] == "done" and job["completions"] == "1", job
        workers.add(job["hostname"])
    # Run in the containers (nodes named by container id on the host's network), not here.
    assert all(re.fullmatch(r"mf-cpu@.+-[0-9a-f]{12}", name) for name in workers), workers
    _say(pytestconfig, f"4 samples (PDF, PNG, Opus, MP4) through the containers' fleet in {took:.1f} s, "
                       f"on {len(workers)} worker(s)")


def test_mcp_server_and_flower_serve_on_loopback(stack: Stack, pytestconfig: pytest.Config) -> None:
    """The MCP server's image tool runs a job on the fleet; Flower answers with auth, refuses without."""
    import hashlib

    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    data = (SAMPLES / "notice.png").read_bytes()
    params = {"digest": hashlib.sha256(data).hexdigest(), "media_type": "image/png",
              "artifact_b64": b64encode(data).decode()}

    async def call() -> tuple[list[str], str]:
        with anyio.fail_after(120):
            async with streamable_http_client(f"http://127.0.0.1:{stack.mcp_port}/mcp") as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                tools = [tool.name for tool in (await session.list_tools()).tools]
                result = await session.call_tool("image_decode", {"action": "analyze_image",
                                                                  "params_json": json.dumps(params)})
                return tools, result.content[0].text

    started = time.monotonic()
    tools, text = anyio.run(call)
    assert set(tools) == {"pdf_action", "image_decode", "transcribe_media", "video_keyframes"}
    answer = json.loads(text)
    assert answer.get("available") is True, text[:1000]
    assert "QUAY 4 CLOSED" in [r.get("label") for r in answer["regions"]]
    _say(pytestconfig, f"MCP image_decode over HTTP on the fleet: {time.monotonic() - started:.1f} s")

    user, _, secret = (stack.folder / "secrets" / "flower_basic_auth").read_text().strip().partition(":")
    url = f"http://127.0.0.1:{stack.flower_port}/api/workers"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=30)
    assert refused.value.code == 401
    refused.value.close()  # the error holds the response open
    # ?refresh=1: Flower asks the workers now (without it, only those it has heard from so far).
    auth = "Basic " + b64encode(f"{user}:{secret}".encode()).decode()
    request = urllib.request.Request(f"{url}?refresh=1", headers={"Authorization": auth})
    with urllib.request.urlopen(request, timeout=30) as reply:
        seen = json.load(reply)
    assert sorted(seen) == sorted(stack.status()["workers"]["cpu"])


def test_compose_cli_service_reports_the_fleet(stack: Stack) -> None:
    done = stack.compose("run", "--rm", "cli", "status", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert len(report["workers"]["cpu"]) == 2, report


def _long_recording(folder: Path) -> Path:
    """About 6.5 minutes of the test speech, looped, with a title of its own (fresh bytes each run)."""
    out = folder / "long.flac"
    speech = ROOT / "tests" / "data" / "speech.flac"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-stream_loop", "39", "-i", str(speech),
                    "-metadata", f"title={uuid.uuid4()}", "-c:a", "flac", str(out)], check=True, timeout=120)
    os.chown(out, UID, UID)
    return out


def test_worker_container_killed_mid_job_the_job_finishes_once_on_the_other(stack: Stack,
                                                                            pytestconfig: pytest.Config) -> None:
    """SIGKILL to the container running a job (a lost node): the other worker runs it, once."""
    recording = _long_recording(stack.folder / "home")
    containers = {cid[:12]: cid for cid in stack.containers("worker-cpu")}
    assert len(containers) == 2
    started = time.monotonic()
    extract = subprocess.Popen(stack.cli("extract", str(recording), "--json"), env=stack.cli_env(),
                               cwd=stack.folder / "home", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert extract.stderr is not None
        line = extract.stderr.readline()  # "long.flac: job mf-... queued; follow it with: ..."
        found = re.search(r"job (mf-[0-9a-f]+) ", line)
        assert found, line
        job_id = found.group(1)
        deadline = time.monotonic() + 120
        while True:  # started, with some progress made, on a node named by its container id
            job = stack.record(job_id)
            if job["state"] == "started" and job.get("hostname") and job.get("progress", {}).get("done", 0) > 0:
                break
            assert job["state"] in ("unknown", "queued", "started") and time.monotonic() < deadline, job
            time.sleep(0.5)
        victim = job["hostname"].rsplit("-", 1)[1]
        assert victim in containers, (job["hostname"], containers)
        killed_at = time.monotonic()
        subprocess.run([DOCKER, "kill", "--signal", "KILL", containers[victim]], env=stack.env, check=True,
                       capture_output=True, timeout=60)
        _say(pytestconfig, f"killed worker container {victim} {killed_at - started:.1f} s into job {job_id} "
                           f"({job['progress']['done']} of {job['progress']['total']} s transcribed)")
        out, err = extract.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if extract.poll() is None:
            extract.kill()
            extract.wait(timeout=30)
    assert extract.returncode == 0, err[-3000:] + _logs(stack)
    (bundle,) = [json.loads(line) for line in out.splitlines()]
    assert bundle["status"] == "ok" and bundle["job_id"] == job_id
    job = stack.status(job_id)["job"]
    survivor = [short for short in containers if short != victim][0]
    assert job["state"] == "done", job
    assert job["completions"] == "1", job  # once
    assert job["hostname"].endswith(f"-{survivor}"), job  # on the other worker
    assert int(job["attempts"]) >= 2, job
    _say(pytestconfig, f"job {job_id} done once on {job['hostname']} {time.monotonic() - killed_at:.1f} s after "
                       f"the kill ({time.monotonic() - started:.1f} s in all, {job['attempts']} deliveries)")
