"""The Sentinel deployments hold together: docker/compose.ha.yaml over compose.yaml, and the
deploy/k8s-ha overlay of deploy/k8s, rendered by the real tools (docker-compose, kubectl
kustomize, yamllint), checked for what the fleet needs from them. Nothing is started."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
K8S_HA = ROOT / "deploy" / "k8s-ha"
SENTINELS = "sentinel://sentinel-1:26379;sentinel://sentinel-2:26379;sentinel://sentinel-3:26379"


def _tool(name: str) -> str:
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.skip(f"{name} is not installed here")
    return found


def _compose(tmp_path: Path, **env: str) -> dict[str, Any]:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "redis_password").write_text("tEst-0123456789abcdef\n")
    (secrets / "flower_basic_auth").write_text("admin:secret\n")
    done = subprocess.run([_tool("docker-compose"), "-f", "compose.yaml", "-f", "compose.ha.yaml", "--profile", "ha",
                           "config"], cwd=DOCKER, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "MEDIAFLEET_SECRETS": str(secrets), **env})
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_the_ha_profile_adds_a_replica_and_three_sentinels_and_points_the_fleet_at_them(tmp_path: Path) -> None:
    config = _compose(tmp_path, MEDIAFLEET_BROKER_URL=SENTINELS, MEDIAFLEET_SENTINEL_MASTER="mediafleet")
    services = config["services"]
    assert {"redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"} <= set(services)
    for name in ("worker-cpu", "mcp", "cli", "flower"):
        env = services[name]["environment"]
        assert env["MEDIAFLEET_BROKER_URL"] == SENTINELS and env["MEDIAFLEET_SENTINEL_MASTER"] == "mediafleet"
    script = "\n".join(services["sentinel-2"]["entrypoint"])
    assert "sentinel monitor mediafleet redis 6379 2" in script and "--sentinel" in script
    # The password is read from the secret at start, never written into the file compose renders.
    assert "tEst-0123456789abcdef" not in yaml.safe_dump(config)
    assert "replicaof redis 6379" in "\n".join(services["redis-replica"]["entrypoint"])


def test_without_the_variables_the_fleet_stays_on_its_one_redis(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        for name in ("MEDIAFLEET_BROKER_URL", "MEDIAFLEET_SENTINEL_MASTER"):
            mp.delenv(name, raising=False)
        config = _compose(tmp_path)
    assert config["services"]["worker-cpu"]["environment"]["MEDIAFLEET_BROKER_URL"] == "redis://redis:6379/0"


def test_the_k8s_ha_overlay_replaces_redis_and_counts_the_masters_queues_only() -> None:
    done = subprocess.run([_tool("kubectl"), "kustomize", str(K8S_HA)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    objects = [d for d in yaml.safe_load_all(done.stdout) if d]
    names = {(d["kind"], d["metadata"]["name"]) for d in objects}
    assert ("StatefulSet", "mediafleet-redis-ha") in names and ("StatefulSet", "mediafleet-redis") not in names
    assert ("Service", "mediafleet-redis") not in names
    redis_ha = next(d for d in objects if d["metadata"]["name"] == "mediafleet-redis-ha" and d["kind"] == "StatefulSet")
    assert redis_ha["spec"]["replicas"] == 3
    assert {c["name"] for c in redis_ha["spec"]["template"]["spec"]["containers"]} == {"redis", "sentinel",
                                                                                        "redis-exporter"}
    for deployment in (d for d in objects if d["kind"] == "Deployment"):
        env = {e["name"]: e.get("value") for c in deployment["spec"]["template"]["spec"]["containers"]
               for e in c.get("env", [])}
        sentinels = env["MEDIAFLEET_BROKER_URL"].split(";")
        assert len(sentinels) == 3 and all(s.startswith("sentinel://mediafleet-redis-ha-") for s in sentinels)
        assert env["MEDIAFLEET_SENTINEL_MASTER"] == "mediafleet"
    for scaled in (d for d in objects if d["kind"] == "ScaledObject"):
        assert 'redis_instance_info{role="master"}' in scaled["spec"]["triggers"][0]["metadata"]["query"]


def test_the_ha_files_lint_clean() -> None:
    done = subprocess.run([_tool("yamllint"), "--strict", "-d", "{extends: default, rules: {line-length: {max: 100}}}",
                           str(K8S_HA), str(DOCKER / "compose.ha.yaml")], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
