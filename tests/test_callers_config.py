"""The callers' mcp_config.json as docs/callers.md gives it: right by construction, checked by
``serve-mcp --check-config``, and the wait ``serve-mcp`` derives from the client's timeout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mediafleet.contract.manifest import load_manifest
from mediafleet.mcp.callers_config import config_problems, wait_for
from tests.conftest import ROOT

DOC = ROOT / "docs" / "callers.md"

# The stdio config the README gave before issue 44: owners on one server, no --client-timeout.
OLD_STDIO = {"mcpServers": {
    "stirlingpdf-mcp": {"command": "mediafleet", "args": ["serve-mcp", "--tools", "pdf_action"],
                        "env": {"MEDIAFLEET_ENGINE_OWNERS": "[\"anonymous-local\"]"}, "timeout": 900000},
    "data-science-mcp": {"command": "mediafleet", "args": ["serve-mcp", "--tools", "image_decode"],
                         "env": {}, "timeout": 900000},
    "audio-transcriber-mcp": {"command": "mediafleet", "args": ["serve-mcp", "--tools", "transcribe_media"],
                              "env": {}},
}}


def callers() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for capability in load_manifest().capabilities.values():
        out.setdefault(capability.provider, []).append(capability.tool)
    return out


def doc_configs() -> list[dict[str, object]]:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)
    configs = [json.loads(block) for block in blocks]
    return [c for c in configs if isinstance(c, dict) and "mcpServers" in c]


def doc_http_command() -> list[str]:
    (line,) = [ln for ln in DOC.read_text().splitlines() if "mediafleet serve-mcp --http" in ln and "--client-timeout" in ln]
    return line.split("mediafleet ", 1)[1].split()


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    return subprocess.run([sys.executable, "-m", "mediafleet.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_the_documented_configs_have_no_problem() -> None:
    stdio, http = doc_configs()
    assert set(stdio["mcpServers"]) == set(http["mcpServers"]) == set(callers())  # type: ignore[call-overload]
    assert config_problems(stdio, callers()) == []
    command = doc_http_command()
    timeout = int(command[command.index("--client-timeout") + 1])
    assert config_problems(http, callers(), http_client_timeout_ms=timeout,
                           http_url="http://127.0.0.1:8765/mcp") == []
    # Every stdio server compares the callers' engine digests.
    for entry in stdio["mcpServers"].values():  # type: ignore[attr-defined]
        assert json.loads(entry["env"]["MEDIAFLEET_ENGINE_OWNERS"]) == ["anonymous-local"]


def test_the_old_config_fails_the_callers_in_each_way_the_issue_found() -> None:
    problems = config_problems(OLD_STDIO, callers())
    assert "audio-transcriber-mcp: no \"timeout\": the callers' client gives up after 60 s; set it above the longest " \
           "job, in ms" in problems
    assert sum("has no --client-timeout" in p for p in problems) == 3
    assert [p.split(":")[0] for p in problems if "MEDIAFLEET_ENGINE_OWNERS" in p] == ["data-science-mcp",
                                                                                      "audio-transcriber-mcp"]
    assert "data-science-mcp: --tools leaves out video_keyframes, which the callers send there" in problems
    mismatched = {"mcpServers": {"audio-transcriber-mcp": {
        "command": "mediafleet", "args": ["serve-mcp", "--client-timeout=60000"],
        "env": {"MEDIAFLEET_ENGINE_OWNERS": "[\"anonymous-local\"]"}, "timeout": 1800000}}}
    assert config_problems(mismatched, callers()) == [
        "audio-transcriber-mcp: --client-timeout 60000 is not the entry's \"timeout\" (1800000); give both the same "
        "number"]
    short = {"mcpServers": {"stirlingpdf-mcp": {"url": "http://127.0.0.1:8765/mcp", "timeout": 60000}}}
    assert config_problems(short, callers(), http_client_timeout_ms=1800000, http_url="http://127.0.0.1:8765/mcp") == [
        "stirlingpdf-mcp: its \"timeout\" (60000) is shorter than the server's --client-timeout 1800000: the client "
        "gives up first"]


def test_the_wait_ends_before_the_client_gives_up() -> None:
    assert wait_for(1800000, 7260) == 1790
    assert wait_for(60000, 7260) == 50  # the old default, under the callers' own 60 s
    assert wait_for(8000, 7260) == 4
    assert wait_for(0, 7260) == 7260  # no client timeout: as long as a job may run
    with pytest.raises(ValueError):
        wait_for(-1, 10)


def test_check_config_on_the_command_line(tmp_path: Path) -> None:
    stdio, http = doc_configs()
    (tmp_path / "good.json").write_text(json.dumps(stdio))
    (tmp_path / "http.json").write_text(json.dumps(http))
    (tmp_path / "old.json").write_text(json.dumps(OLD_STDIO))
    good = run_cli("serve-mcp", "--check-config", str(tmp_path / "good.json"), cwd=tmp_path)
    assert good.returncode == 0 and "returns in one call" in good.stdout, good.stderr
    served = run_cli(*doc_http_command(), "--check-config", str(tmp_path / "http.json"), cwd=tmp_path)
    assert served.returncode == 0, served.stdout + served.stderr
    shorter = run_cli("serve-mcp", "--http", "--port", "8765", "--client-timeout", "3600000", "--check-config",
                      str(tmp_path / "http.json"), cwd=tmp_path)
    assert shorter.returncode == 1 and shorter.stdout.count("is shorter than the server's") == 3
    old = run_cli("serve-mcp", "--check-config", str(tmp_path / "old.json"), cwd=tmp_path)
    assert old.returncode == 1 and len(old.stdout.splitlines()) == 7, old.stdout
    assert all(line.startswith("old.json: ") for line in old.stdout.splitlines())
