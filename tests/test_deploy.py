"""The containers and the example deployment, checked without a Docker engine.

tests/test_containers.py builds the images and runs the stack on a real engine; this module checks
what needs none, in seconds: the Dockerfiles lint clean (hadolint), the compose file and its
loopback override validate (`docker-compose config`, Debian's v1, which needs no engine and
rejects unknown keys) and have the shape the README promises, the
Kubernetes manifests lint clean (yamllint) and agree with the code (queue names, worker names,
time limits), and the scripts the images run are run here, outside Docker, against real
processes: the entrypoint starts a real worker on a real password-protected Redis started by the
Redis start script, the health check answers for it and fails without it, Flower starts with
basic auth and persistent state, and the build-time smoke test passes on this machine's install.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mediafleet.fleet.keys import queue_lists
from tests.conftest import ROOT, free_port
from tests.helpers import can_compile

DOCKER = ROOT / "docker"
K8S = ROOT / "deploy" / "k8s"
BIN = Path(sys.executable).parent
COMPOSE_FILE = DOCKER / "compose.yaml"
YAMLLINT_CONFIG = "{extends: default, rules: {line-length: {max: 100}}}"
PASSWORD = "tEst-0123456789abcdef"  # what docker/redis-start.sh accepts: [A-Za-z0-9._~-]{16,}


def _tool(name: str) -> str:
    """A linter from the test extra, next to this interpreter (or on PATH)."""
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail(f"{name} is not installed: `pip install -e '.[test]'` installs it (bash tests/run.sh does)")
    return found


def _env(**extra: str) -> dict[str, str]:
    """A clean environment for the scripts: this venv first on PATH, no inherited fleet settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIAFLEET_", "FLOWER_", "REDIS_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def _sh(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)


def _k8s_documents() -> dict[str, list[dict[str, Any]]]:
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in sorted(K8S.glob("*.yaml"))}


def _k8s_objects(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for docs in _k8s_documents().values() for d in docs if d["kind"] == kind}


def _manifest() -> Any:
    from mediafleet.contract.manifest import load_manifest

    return load_manifest(None)


# --------------------------------------------------------------------------------------- images


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.gpu", "Dockerfile.redis"])
def test_dockerfile_lints_clean(dockerfile: str) -> None:
    done = subprocess.run([_tool("hadolint"), "--no-color", str(DOCKER / dockerfile)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_images_are_non_root_offline_checked_and_healthchecked(dockerfile: str) -> None:
    text = (DOCKER / dockerfile).read_text()
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users and users[-1] == "10001:10001"  # numeric, so runAsNonRoot can verify it
    assert "HF_HUB_OFFLINE=1" in text
    assert re.search(r"^RUN python /usr/local/lib/mediafleet/smoke\.py", text, re.MULTILINE)
    assert re.search(r"^HEALTHCHECK .*\n\s+CMD \[\"/usr/local/lib/mediafleet/healthcheck\.sh\"\]", text, re.MULTILINE)
    assert 'ENTRYPOINT ["/usr/local/lib/mediafleet/entrypoint.sh"]' in text
    # The smoke test runs in the final stage, as the image's user, after every install.
    final = text.rsplit("\nFROM ", 1)[1]
    smoke = final.index("RUN python /usr/local/lib/mediafleet/smoke.py")
    assert final.index("USER 10001:10001") < smoke < final.index("HEALTHCHECK")
    # The one install (requirements/install.sh: the lock, the C reader built against the locked
    # PyMuPDF, the headless OpenCV put back where cv2 does not import), into the image's venv.
    assert "COPY requirements/ requirements/" in text
    assert re.search(r'&& bash requirements/install\.sh /opt/mediafleet/bin/python "/src\[[a-z0-9,-]+\]"', text)
    # No `# syntax=` line: it would pull a frontend image, and no registry answers here.
    assert not re.search(r"^# *syntax=", text, re.MULTILINE)
    # pip gets a CA bundle only as a build secret, never in a layer.
    assert "--mount=type=secret,id=pip_cert" in text and "COPY --from=build /opt/mediafleet /opt/mediafleet" in text


def test_cpu_image_is_slim_python_311_with_flower() -> None:
    text = (DOCKER / "Dockerfile.cpu").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    assert '"/src[pdf,ocr,audio,video,monitor,s3,mcp,signing]"' in text
    assert "MEDIAFLEET_DEVICE=cpu" in text


def test_gpu_image_pairs_cuda_12_wheels_with_builds_made_for_them() -> None:
    """The GPU image: the CPU image's base, CUDA 12's libraries from the cuda extra's wheels on the
    loader's path, onnxruntime-gpu alone in the onnxruntime/ folder."""
    text = (DOCKER / "Dockerfile.gpu").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text
    assert not re.search(r"^(ARG|FROM) .*nvidia/cuda", text, re.MULTILINE)
    assert '"/src[pdf,ocr,audio,video,s3,signing,ocr-gpu,cuda]"' in text
    lock = (ROOT / "requirements" / "lock.txt").read_text()
    ort = re.search(r"^onnxruntime-gpu==(\d+)\.(\d+)\.\d+", lock, re.MULTILINE)
    # onnxruntime-gpu 1.27 and later on PyPI link CUDA 13; 1.26 is the last CUDA 12 build.
    assert ort is not None and (int(ort.group(1)), int(ort.group(2))) <= (1, 26)
    swap = text.index("pip uninstall -y onnxruntime")
    assert swap < text.index("-c requirements/lock.txt onnxruntime-gpu")
    # Every CUDA wheel of the cuda extra is on LD_LIBRARY_PATH (CTranslate2 and onnxruntime open
    # the libraries by name), and each is CUDA 12's.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    path = re.search(r"LD_LIBRARY_PATH=(\S+)", text)
    assert path is not None
    folders = {p.split("/nvidia/")[1].removesuffix("/lib") for p in path.group(1).split(":")}
    for requirement in pyproject["project"]["optional-dependencies"]["cuda"]:
        name = re.match(r"nvidia-([a-z-]+?)-cu12", requirement)
        assert name is not None, requirement
        assert name.group(1).replace("-", "_") in folders, requirement
        pinned = re.search(rf"^{re.escape(name.group(0))}==(\d+)", lock, re.MULTILINE)
        assert pinned is not None, requirement
    assert "MEDIAFLEET_DEVICE=gpu" in text
    assert "smoke.py --gpu" in text


def test_build_context_holds_what_the_images_copy() -> None:
    """.dockerignore sends only an allowlist: it must hold every package and script the images copy."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    rules = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert rules[0] == "*"  # everything out, then the allowlist
    redis = set(re.findall(r"^COPY --chmod=\S+ (\S+) ", (DOCKER / "Dockerfile.redis").read_text(), re.MULTILINE))
    assert redis == {"docker/redis-start.sh"} and redis <= allowed
    for dockerfile in ("Dockerfile.cpu", "Dockerfile.gpu"):
        text = (DOCKER / dockerfile).read_text()
        copied = set()
        for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.MULTILINE):
            copied.update(w.rstrip("/") for w in line.split()[:-1] if not w.startswith("--"))
        assert packages <= copied, f"{dockerfile} misses {packages - copied}"
        assert copied <= allowed, f".dockerignore keeps {copied - allowed} out of the build context"
        for source in copied:
            assert (ROOT / source).exists(), source
        assert "setup.py" in copied, f"{dockerfile} builds without setup.py (the PDF text layer's C reader)"
        assert "requirements" in copied, f"{dockerfile} installs without the lock"
        assert "smoke.py --c-reader" in text or "smoke.py --gpu --c-reader" in text
    assert "docker/secrets" not in allowed


@pytest.mark.slow
def test_smoke_test_passes_on_this_install() -> None:
    """The images' build-time check, run on this machine's venv (the CPU checks; the C extensions'
    check too where this install could build them, as the images can)."""
    compiled = can_compile()
    done = subprocess.run([sys.executable, str(DOCKER / "smoke.py"), *(["--c-reader"] if compiled else [])],
                          env=_env(HF_HUB_OFFLINE="1"), cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = [line.split()[1] for line in done.stdout.splitlines()]
    assert checks == ["engines:", "whisper:", "ocr:", "cv2:", *(["c"] if compiled else []), "samples:"]


# -------------------------------------------------------------------------------------- compose


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())  # merge keys and anchors resolved


def test_compose_file_validates_with_docker_compose() -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose (Debian package docker-compose, v1.29) is not installed; tests/run.sh installs it")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    done = subprocess.run([exe, "--file", str(COMPOSE_FILE), "config", "--quiet"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    resolved = subprocess.run([exe, "--file", str(COMPOSE_FILE), "config"], env=env, capture_output=True,
                              text=True, timeout=120, check=True).stdout
    services = yaml.safe_load(resolved)["services"]
    assert set(services) == {"redis", "worker-cpu", "worker-gpu", "flower", "flower-gateway", "mcp", "cli"}
    assert services["worker-cpu"]["command"][:2] == ["worker", "--concurrency=1"]


def test_loopback_override_puts_every_service_on_the_host_network_on_127_0_0_1() -> None:
    """compose.loopback.yaml: for an engine without bridge networking (docs/containers.md)."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose (Debian package docker-compose, v1.29) is not installed; tests/run.sh installs it")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "MEDIAFLEET_REDIS_PORT": "16379", "MEDIAFLEET_BLOBS": "/srv/blobs"}
    done = subprocess.run([exe, "-f", str(COMPOSE_FILE), "-f", str(DOCKER / "compose.loopback.yaml"), "config"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    # Published ports cannot go with the host's network: what has them is left to a profile.
    running = {name: s for name, s in services.items() if not s.get("profiles")}
    assert set(running) == {"redis", "worker-cpu", "flower", "mcp-loopback"}
    assert services["flower-gateway"]["profiles"] == ["gateway"] and services["mcp"]["profiles"] == ["bridge"]
    for name in ("redis", "worker-cpu", "worker-gpu", "flower", "mcp-loopback", "cli"):
        service = services[name]
        assert service["network_mode"] == "host", name
        assert "ports" not in service or service.get("profiles"), name
        if name != "redis":
            assert service["environment"]["MEDIAFLEET_BROKER_URL"] == "redis://127.0.0.1:16379/0", name
            assert service["environment"]["MEDIAFLEET_HOST_NETWORK"] == "true", name
            assert service["cap_drop"] == ["ALL"] and service["security_opt"] == ["no-new-privileges:true"], name
    assert services["redis"]["command"] == ["--bind", "127.0.0.1", "--port", "16379"]
    assert services["redis"]["image"] == "mediafleet:redis"
    assert services["flower"]["environment"]["FLOWER_ADDRESS"] == "127.0.0.1"
    assert services["mcp-loopback"]["command"][:4] == ["serve-mcp", "--http", "--host", "127.0.0.1"]
    assert "--allow-remote" not in services["mcp-loopback"]["command"]
    for name in ("worker-cpu", "worker-gpu", "mcp-loopback", "cli"):
        assert "/srv/blobs:/var/lib/mediafleet/blobs:rw" in services[name]["volumes"], name


def test_worker_names_on_the_host_network_carry_the_container_id(tmp_path: Path) -> None:
    """Every container on the host's network has the host's name: mf_worker_name adds the
    container's id, read where Docker mounts its /etc/hostname."""
    line = ("242 192 254:0 /var/lib/docker/containers/" + "61d798bcc10c" + "b" * 52
            + "/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("1 0 254:0 / / rw - ext4 /dev/vda rw\n" + line)
    # common.sh as it is, reading the file above instead of /proc/self/mountinfo.
    text = (DOCKER / "common.sh").read_text()
    assert text.count("/proc/self/mountinfo") == 1
    (tmp_path / "common.sh").write_text(text.replace("/proc/self/mountinfo", str(mountinfo)))
    named = _sh("-c", f". {tmp_path / 'common.sh'} && mf_worker_name", env=_env(MEDIAFLEET_HOST_NETWORK="true"))
    assert named.stdout.strip() == f"mf-cpu@{os.uname().nodename}-61d798bcc10c", named.stderr
    plain = _sh("-c", f". {tmp_path / 'common.sh'} && mf_worker_name", env=_env())
    assert plain.stdout.strip() == f"mf-cpu@{os.uname().nodename}"
    # Outside a container there is no id to read: refused rather than named like another container.
    refused = _sh("-c", ". docker/common.sh && mf_container_id() { :; } && mf_worker_name",
                  env=_env(MEDIAFLEET_HOST_NETWORK="true"))
    assert refused.returncode == 70 and "MEDIAFLEET_WORKER_NAME" in refused.stderr


def test_compose_redis_has_a_password_and_append_only_persistence() -> None:
    redis = _compose()["services"]["redis"]
    assert redis["secrets"] == ["redis_password"]
    assert redis["entrypoint"] == ["sh", "/usr/local/bin/mediafleet-redis-start"]
    assert "./redis-start.sh:/usr/local/bin/mediafleet-redis-start:ro" in redis["volumes"]
    assert "redis-data:/data" in redis["volumes"]
    assert "ports" not in redis
    assert "redis-cli ping" in redis["healthcheck"]["test"][1]


def test_compose_workers_scale_share_the_blob_store_and_gpu_is_a_profile() -> None:
    services = _compose()["services"]
    for name, device in (("worker-cpu", "cpu"), ("worker-gpu", "gpu")):
        worker = services[name]
        assert worker["command"][0] == "worker"
        assert worker["environment"]["MEDIAFLEET_DEVICE"] == device
        assert worker["environment"]["MEDIAFLEET_REDIS_PASSWORD_FILE"] == "/run/secrets/redis_password"
        assert worker["depends_on"] == {"redis": {"condition": "service_healthy"}}
        # Scalable: nothing that two replicas could not both have.
        assert "container_name" not in worker and "ports" not in worker
    assert "profiles" not in services["worker-cpu"]
    assert services["worker-gpu"]["profiles"] == ["gpu"]
    assert services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
    ]
    # Every process that reads or writes blobs (workers and the dispatcher) mounts the same volume
    # where its settings put the store.
    for name in ("worker-cpu", "worker-gpu", "mcp", "cli"):
        service = services[name]
        root = service["environment"]["MEDIAFLEET_BLOB_ROOT"]
        assert f"blobs:{root}" in service["volumes"], name
    assert services["cli"]["profiles"] == ["tools"]


def test_compose_flower_has_basic_auth_and_state_and_its_metrics_stay_unpublished() -> None:
    services = _compose()["services"]
    flower = services["flower"]
    assert flower["command"] == ["flower"]
    env = flower["environment"]
    assert env["FLOWER_BASIC_AUTH_FILE"] == "/run/secrets/flower_basic_auth"
    assert "flower_basic_auth" in flower["secrets"]
    assert env["FLOWER_PERSISTENT"] == "True"
    state_dir = str(Path(env["FLOWER_DB"]).parent)
    assert f"flower-data:{state_dir}" in flower["volumes"]
    # Flower's own port (UI and the unauthenticated /metrics) is never published...
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    assert sorted(published) == ["flower-gateway", "mcp"]
    # The MCP server has no authentication of its own: loopback by default.
    assert published["mcp"] == ["${MEDIAFLEET_MCP_BIND:-127.0.0.1}:${MEDIAFLEET_MCP_PORT:-8765}:8765"]
    (mapping,) = published["flower-gateway"]
    assert mapping.startswith("${MEDIAFLEET_FLOWER_BIND:-127.0.0.1}:") and mapping.endswith(":8080")
    # ...only the gateway is, and it does not pass /metrics on.
    conf = (DOCKER / "flower-gateway.conf").read_text()
    assert re.search(r"location \^~ /metrics \{\s*return 404;\s*\}", conf)
    assert "proxy_pass http://flower:5555;" in conf
    assert "listen 8080;" in conf


def test_compose_services_drop_privileges() -> None:
    services = _compose()["services"]
    for name, service in services.items():
        assert service["security_opt"] == ["no-new-privileges:true"], name
        if name != "redis":  # the official redis image switches to its own user at start
            assert service["cap_drop"] == ["ALL"], name


# ----------------------------------------------------------------------------------- kubernetes


def test_yaml_lints_clean() -> None:
    done = subprocess.run([_tool("yamllint"), "--strict", "-d", YAMLLINT_CONFIG, str(K8S), str(COMPOSE_FILE),
                           str(DOCKER / "compose.loopback.yaml")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests
    images = {i["name"] for i in kustomization["images"]}
    pods = [d["spec"]["template"]["spec"] for d in _k8s_objects("Deployment").values()]
    used = {c["image"] for pod in pods for c in pod["containers"]}
    assert used == images


def test_k8s_pods_run_non_root_and_workers_wait_out_the_longest_job() -> None:
    deployments = _k8s_objects("Deployment")
    assert set(deployments) == {"mediafleet-worker-cpu", "mediafleet-worker-gpu", "mediafleet-flower"}
    for name, deployment in {**deployments, **_k8s_objects("StatefulSet")}.items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        for container in pod["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], name
    longest = _manifest().max_hard_time_limit_s()
    for device in ("cpu", "gpu"):
        pod = deployments[f"mediafleet-worker-{device}"]["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] >= longest
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["MEDIAFLEET_DEVICE"] == device
        assert env["MEDIAFLEET_BROKER_URL"] == "redis://mediafleet-redis:6379/0"
        assert container["args"][0] == "worker"
        assert container["livenessProbe"]["exec"]["command"] == ["/usr/local/lib/mediafleet/healthcheck.sh"]
        limits = container["resources"]["limits"]
        assert ("nvidia.com/gpu" in limits) == (device == "gpu")
    assert deployments["mediafleet-worker-gpu"]["spec"]["template"]["spec"]["containers"][0]["resources"][
        "limits"]["nvidia.com/gpu"] == 1
    redis = _k8s_objects("StatefulSet")["mediafleet-redis"]["spec"]["template"]["spec"]["containers"][0]
    assert "appendonly yes" in redis["args"][0] and "requirepass" in redis["args"][0]
    assert _k8s_objects("Service")["mediafleet-flower"]["spec"]["type"] == "ClusterIP"


def _keda_regexes(device: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The queue-key and worker-name regexes of the device's ScaledObject query, as Prometheus reads them."""
    scaled = _k8s_objects("ScaledObject")[f"mediafleet-worker-{device}"]
    assert scaled["spec"]["scaleTargetRef"]["name"] in _k8s_objects("Deployment")
    (trigger,) = scaled["spec"]["triggers"]
    query = trigger["metadata"]["query"]
    keys = set(re.findall(r'key=~"([^"]+)"', query))
    workers = set(re.findall(r'worker=~"([^"]+)"', query))
    assert len(keys) == 1 and len(workers) == 1
    # PromQL string escapes: "\\." is the regex \. ; PromQL regexes are anchored at both ends.
    return (re.compile(keys.pop().replace("\\\\", "\\")), re.compile(workers.pop().replace("\\\\", "\\")))


def test_keda_counts_every_priority_list_of_its_class_and_only_those() -> None:
    from kombu.transport.redis import Channel

    assert queue_lists("q") == ["q", *(f"q{Channel.sep}{p}" for p in range(1, 10))]  # kombu's own naming
    manifest = _manifest()
    for device in ("cpu", "gpu"):
        key_re, _ = _keda_regexes(device)
        for capability in manifest.capabilities.values():
            for served in capability.devices:
                queue = capability.queue(served)
                lists = queue_lists(queue)  # kombu's real names: "<queue>\x06\x16<n>" per priority
                assert len(lists) == 10
                assert all(bool(key_re.fullmatch(k)) == (served.value == device) for k in lists), (device, queue)
        assert not key_re.fullmatch("_kombu.binding.mf.ocr_pdf.cpu")
        assert not key_re.fullmatch("unacked")


@pytest.mark.integration
def test_every_priority_of_a_queue_is_counted_where_kombu_puts_it(fleet_env: dict[str, str], tmp_path: Path) -> None:
    """One message at each fleet priority on a real Redis, through the fleet's own Celery app: each
    lands in a list of its own, those lists are exactly ``queue_lists``, ``status`` counts all ten,
    and the cpu ScaledObject's query matches every one of them (the gpu one none)."""
    import redis

    from mediafleet import Dispatcher, Settings
    from mediafleet.contract.manifest import DeviceClass
    from mediafleet.workers.runtime.message import redis_priority

    dispatcher = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    queue = dispatcher.manifest.capability("ocr_pdf").queue(DeviceClass.CPU)
    for level in range(10):
        dispatcher.app.send_task("mediafleet.nothing", args=[level], queue=queue, priority=redis_priority(level))
    client = redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"])
    lengths = {name: client.llen(name) for name in queue_lists(queue)}
    assert lengths == dict.fromkeys(queue_lists(queue), 1)
    assert {k.decode() for k in client.keys(f"{queue}*")} == set(queue_lists(queue))
    assert dispatcher.status()["queues"][queue] == 10
    cpu_keys, _ = _keda_regexes("cpu")
    gpu_keys, _ = _keda_regexes("gpu")
    assert all(cpu_keys.fullmatch(name) and not gpu_keys.fullmatch(name) for name in lengths)


def test_keda_worker_names_are_the_entrypoints_worker_names() -> None:
    for device in ("cpu", "gpu"):
        _, worker_re = _keda_regexes(device)
        name = _sh("-c", ". docker/common.sh && mf_worker_name", env=_env(MEDIAFLEET_DEVICE=device)).stdout.strip()
        assert name == f"mf-{device}@{os.uname().nodename}"
        assert worker_re.fullmatch(name)
        other = "gpu" if device == "cpu" else "cpu"
        assert not worker_re.fullmatch(f"mf-{other}@{os.uname().nodename}")
    named = _sh("-c", ". docker/common.sh && mf_worker_name", env=_env(MEDIAFLEET_WORKER_NAME="w1@here"))
    assert named.stdout.strip() == "w1@here"


def test_k8s_redis_start_command_runs(tmp_path: Path) -> None:
    """The Redis StatefulSet's start command, run here with its paths pointed at a scratch folder."""
    redis = _k8s_objects("StatefulSet")["mediafleet-redis"]["spec"]["template"]["spec"]["containers"][0]
    (tmp_path / "data").mkdir()
    (tmp_path / "password").write_text(PASSWORD + "\n")
    port = free_port()
    assert redis["command"] == ["sh", "-c"]
    script = redis["args"][0]
    for original, here in (("/run/secrets/redis_password", str(tmp_path / "password")),
                           ("/tmp/redis.conf", str(tmp_path / "redis.conf")),
                           ("dir /data", f"dir {tmp_path / 'data'}")):
        assert original in script
        script = script.replace(original, here)
    start = f"exec redis-server {tmp_path / 'redis.conf'}"
    assert start in script
    script = script.replace(start, f"{start} --port {port} --bind 127.0.0.1 --save ''")
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _check_secured_redis(port, proc)
        assert (tmp_path / "data" / "appendonlydir").is_dir()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# ------------------------------------------------------------------------------- start scripts


def _check_secured_redis(port: int, proc: subprocess.Popen[Any]) -> None:
    import redis

    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("redis did not start")
            time.sleep(0.05)
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    with pytest.raises(redis.AuthenticationError):  # no retries: redis-py would back off for seconds
        redis.Redis(port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0)).ping()
    client = redis.Redis(port=port, password=PASSWORD, socket_timeout=2)
    assert client.ping()
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    # The password is in no process's command line.
    assert PASSWORD.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()


def _redis_start(tmp_path: Path, password: str, *args: str) -> subprocess.Popen[bytes]:
    """docker/redis-start.sh, with a stand-in for the redis image's own entrypoint."""
    stub = tmp_path / "bin" / "docker-entrypoint.sh"
    stub.parent.mkdir(parents=True, exist_ok=True)
    stub.write_text('#!/bin/sh\nexec "$@"\n')
    stub.chmod(0o755)
    secret = tmp_path / "redis_password"
    secret.write_text(password + "\n")
    env = _env(REDIS_PASSWORD_FILE=str(secret), REDIS_CONFIG_FILE=str(tmp_path / "redis.conf"))
    env["PATH"] = f"{stub.parent}{os.pathsep}{env['PATH']}"
    return subprocess.Popen(["sh", str(DOCKER / "redis-start.sh"), *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def secured_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """A real redis-server started by docker/redis-start.sh: password from a file, append-only."""
    workdir = tmp_path_factory.mktemp("secured-redis")
    port = free_port()
    proc = _redis_start(workdir, PASSWORD, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
                        "--save", "")
    try:
        _check_secured_redis(port, proc)
        yield port, workdir
    finally:
        proc.terminate()
        proc.communicate(timeout=20)  # also closes the output pipe


def test_redis_start_script_secures_redis(secured_redis: tuple[int, Path]) -> None:
    _, workdir = secured_redis
    # The generated config holds the password: readable by its owner alone.
    assert (workdir / "redis.conf").stat().st_mode & 0o077 == 0
    assert (workdir / "appendonlydir").is_dir()


@pytest.mark.parametrize("password", ["short-but-ok", "has space in the middle!", "quote\"d-0123456789abc", ""])
def test_redis_start_script_refuses_passwords_that_urls_or_configs_would_mangle(tmp_path: Path,
                                                                                password: str) -> None:
    proc = _redis_start(tmp_path, password, "--port", str(free_port()))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 65
    assert password.encode() not in out or not password
    assert not (tmp_path / "redis.conf").exists()


def test_secrets_come_from_files_and_errors_never_show_them(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret-from-file\n")
    show = 'printf "%s|%s" "$MEDIAFLEET_REDIS_PASSWORD" "${MEDIAFLEET_REDIS_PASSWORD_FILE:-unset}"'
    done = _sh("docker/entrypoint.sh", "sh", "-c", show, env=_env(MEDIAFLEET_REDIS_PASSWORD_FILE=str(secret)))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "s3cret-from-file|unset"

    both = _sh("docker/entrypoint.sh", "true", env=_env(MEDIAFLEET_REDIS_PASSWORD_FILE=str(secret),
                                                        MEDIAFLEET_REDIS_PASSWORD="s3cret-inline"))
    assert both.returncode == 64 and "not both" in both.stderr
    missing = _sh("docker/entrypoint.sh", "true", env=_env(FLOWER_BASIC_AUTH_FILE=str(tmp_path / "absent")))
    assert missing.returncode == 66 and "FLOWER_BASIC_AUTH_FILE" in missing.stderr
    (tmp_path / "empty").write_text("\n")
    empty = _sh("docker/entrypoint.sh", "true", env=_env(AWS_SECRET_ACCESS_KEY_FILE=str(tmp_path / "empty")))
    assert empty.returncode == 66 and "empty" in empty.stderr
    for done in (both, missing, empty):
        assert "s3cret" not in done.stdout + done.stderr


def test_entrypoint_refuses_what_would_break_the_health_check_or_expose_flower() -> None:
    hostname = _sh("docker/entrypoint.sh", "worker", "--host=other", env=_env())
    assert hostname.returncode == 64 and "MEDIAFLEET_WORKER_NAME" in hostname.stderr
    flower = _sh("docker/entrypoint.sh", "flower", env=_env())
    assert flower.returncode == 64 and "basic auth" in flower.stderr
    usage = _sh("docker/healthcheck.sh", "redis", env=_env())
    assert usage.returncode == 64


def test_entrypoint_runs_mediafleet_commands() -> None:
    done = _sh("docker/entrypoint.sh", "manifest", env=_env())
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)["capabilities"]) == set(_manifest().capabilities)


class _Process:
    """A script started in its own process group, its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._fh = log.open("ab")
        self.proc = subprocess.Popen(["sh", *args], env=env, cwd=ROOT, stdout=self._fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_for(self, ready: Any, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"exited early:\n{self.log.read_text()[-3000:]}")
            if ready():
                return
            time.sleep(0.2)
        pytest.fail(f"not ready in {timeout}s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._fh.close()


@pytest.mark.integration
def test_worker_entrypoint_serves_jobs_and_the_health_check_follows_it(secured_redis: tuple[int, Path],
                                                                        tmp_path: Path) -> None:
    from mediafleet import Dispatcher, Settings
    from tests.media import text_pdf

    secret = tmp_path / "redis_password"
    secret.write_text(PASSWORD + "\n")
    broker = f"redis://127.0.0.1:{secured_redis[0]}/0"
    name = f"mf-cpu@deploy-test-{free_port()}"
    env = _env(MEDIAFLEET_BROKER_URL=broker, MEDIAFLEET_REDIS_PASSWORD_FILE=str(secret),
               MEDIAFLEET_BLOB_ROOT=str(tmp_path / "blobs"), MEDIAFLEET_WORKER_NAME=name,
               MEDIAFLEET_HEALTHCHECK_TIMEOUT_S="5")
    worker = _Process(["docker/entrypoint.sh", "worker", "--concurrency=1"], env, tmp_path / "worker.log")
    try:
        worker.wait_for(lambda: b" ready." in worker.log.read_bytes())
        health = _sh("docker/healthcheck.sh", env=env)
        assert health.returncode == 0, health.stderr

        fleet = Dispatcher(Settings(broker_url=broker, redis_password=PASSWORD, blob_root=tmp_path / "blobs"))
        bundle = fleet.submit(text_pdf(2)).bundle(timeout=120)
        assert bundle.status == "ok", bundle.error
    finally:
        worker.stop()
    assert PASSWORD not in worker.log.read_text()
    gone = _sh("docker/healthcheck.sh", env=env)
    assert gone.returncode != 0


@pytest.mark.integration
def test_healthcheck_fails_when_the_broker_is_unreachable(tmp_path: Path) -> None:
    env = _env(MEDIAFLEET_BROKER_URL=f"redis://127.0.0.1:{free_port()}/0", MEDIAFLEET_HEALTHCHECK_TIMEOUT_S="1")
    assert _sh("docker/healthcheck.sh", env=env).returncode != 0
    assert _sh("docker/healthcheck.sh", "flower", env=_env(FLOWER_PORT=str(free_port()))).returncode != 0


def _get(url: str, auth: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


@pytest.mark.integration
def test_flower_entrypoint_requires_basic_auth_and_keeps_state(fleet_env: dict[str, str], tmp_path: Path) -> None:
    auth = tmp_path / "flower_basic_auth"
    auth.write_text("admin:flower-pass-123\n")
    port = free_port()
    db = tmp_path / "state" / "flower" / "flower.db"
    env = _env(MEDIAFLEET_BROKER_URL=fleet_env["MEDIAFLEET_BROKER_URL"], MEDIAFLEET_BLOB_ROOT=str(tmp_path / "blobs"),
               FLOWER_BASIC_AUTH_FILE=str(auth), FLOWER_PORT=str(port), FLOWER_ADDRESS="127.0.0.1",
               FLOWER_DB=str(db))
    base = f"http://127.0.0.1:{port}"
    flower = _Process(["docker/entrypoint.sh", "flower"], env, tmp_path / "flower.log")

    def answers() -> bool:
        try:
            return _get(f"{base}/healthcheck")[1] == b"OK"
        except OSError:
            return False

    try:
        flower.wait_for(answers)
        assert _get(f"{base}/")[0] == 401
        assert _get(f"{base}/", "admin:wrong")[0] == 401
        assert _get(f"{base}/workers", "admin:flower-pass-123")[0] == 200
        # Upstream serves /metrics without authentication: why compose publishes only the gateway,
        # which refuses /metrics (test_compose_flower_...), and Kubernetes keeps Flower ClusterIP.
        status, body = _get(f"{base}/metrics")
        assert status == 200 and b"flower_events_total" in body
        health = _sh("docker/healthcheck.sh", "flower", env=env)
        assert health.returncode == 0, health.stderr
    finally:
        flower.stop()
    assert "flower-pass-123" not in flower.log.read_text()
    assert list(db.parent.glob("flower.db*")), "persistent mode saved no state"
