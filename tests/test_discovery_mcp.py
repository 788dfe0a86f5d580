"""Discovery as an agent reaches it: a real MCP client session against ``mediafleet serve-discovery``.

The host side runs through the real CLI, on a SQLite index and again on a PostgreSQL one (``index add`` of bundles from real extractions of the
sample media, ``discovery key new``, ``discovery lease open/revoke``); the agent side is the MCP
SDK's client, over stdio, over streamable HTTP with the credential as its bearer header, and
through the stdio bridge to that HTTP endpoint. Answers are checked as an agent would read them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession, StdioServerParameters, stdio_client

from mediafleet.contract import EvidenceBundle
from tests.conftest import ROOT, free_port
from tests.discovery_fixtures import postgres_server, sample_bundles, scanned_words  # noqa: F401


class Host:
    """The host's CLI on one state folder and one index."""

    def __init__(self, folder: Path, index_url: str) -> None:
        self.folder = folder
        self.index = ["--index", index_url]
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")},
                    "XDG_STATE_HOME": str(folder / "xdg")}

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        with_index = self.index if args[0] in ("index", "serve-discovery") or args[:3] == ("discovery", "lease", "open") \
            else []
        proc = subprocess.run([sys.executable, "-m", "mediafleet.cli", *args, "--state", str(self.folder / "host.db"),
                               *with_index],
                              cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120, check=False)
        if check:
            assert proc.returncode == 0, proc.stderr[-2000:]
        return proc

    def lease(self, *extra: str, operations: int = 20, evidence: int = 20) -> dict[str, Any]:
        out = self.cli("discovery", "lease", "open", "--workspace", "harbour", "--ttl-s", "600",
                       "--max-operations", str(operations), "--max-evidence", str(evidence), *extra)
        return json.loads(out.stdout)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def host(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         sample_bundles: dict[str, EvidenceBundle]) -> Host:
    """The sample evidence indexed through the CLI, in a SQLite file, then on the PostgreSQL server."""
    folder = tmp_path_factory.mktemp("discovery-host")
    if request.param == "sqlite":
        index_url = f"sqlite:{folder / 'index.db'}"
    else:
        index_url = request.getfixturevalue("postgres_server").database(f"mcp{uuid.uuid4().hex[:12]}")
    files = []
    for name, bundle in sample_bundles.items():
        path = folder / f"{name}.bundle.json"
        path.write_text(bundle.model_dump_json())
        files.append(str(path))
    host = Host(folder, index_url)
    host.cli("discovery", "key", "new")
    report = json.loads(host.cli("index", "add", *files, "--workspace", "harbour").stdout)
    assert report["bundles"] == len(files) and report["units_added"] > 20 and report["generation"] == len(files)
    return host


class Agent:
    """One MCP client session, driven synchronously through a blocking portal."""

    def __init__(self, portal: Any, session: ClientSession) -> None:
        self.portal, self.session = portal, session

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        result = self.portal.call(self.session.call_tool, tool, arguments)
        (content,) = result.content
        data = json.loads(content.text)
        assert result.structured_content == data
        return data, bool(result.is_error)

    def tools(self) -> dict[str, Any]:
        return {t.name: t for t in self.portal.call(self.session.list_tools).tools}


@contextmanager
def stdio_agent(host: Host, credential_file: str) -> Iterator[Agent]:
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=host.env,
                                   args=["-m", "mediafleet.cli", "serve-discovery", "--credential-file", credential_file,
                                         "--state", str(host.folder / "host.db"), *host.index])
    with open(host.folder / "stdio.log", "a") as errlog, start_blocking_portal() as portal, ExitStack() as stack:
        read, write = stack.enter_context(portal.wrap_async_context_manager(stdio_client(params, errlog=errlog)))
        session = stack.enter_context(portal.wrap_async_context_manager(ClientSession(read, write)))
        portal.call(session.initialize)
        yield Agent(portal, session)


def start_http(host: Host) -> tuple[str, subprocess.Popen[bytes]]:
    """``serve-discovery --http`` on a free port, listening; its URL and process."""
    port = free_port()
    log = host.folder / "http.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "mediafleet.cli", "serve-discovery", "--http", "--port", str(port),
                                 "--state", str(host.folder / "host.db"), *host.index], cwd=ROOT, env=host.env, stdout=fh,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()[-2000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return f"http://127.0.0.1:{port}/mcp", proc
        except OSError:
            assert time.monotonic() < deadline, "serve-discovery --http did not listen"
            time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=20)


@contextmanager
def http_endpoint(host: Host) -> Iterator[str]:
    url, proc = start_http(host)
    try:
        yield url
    finally:
        stop(proc)


@contextmanager
def http_agent(url: str, credential: str | None) -> Iterator[Agent]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {credential}"} if credential is not None else {}
    with start_blocking_portal() as portal, ExitStack() as stack:
        http = stack.enter_context(portal.wrap_async_context_manager(httpx2.AsyncClient(headers=headers, timeout=60)))
        read, write = stack.enter_context(
            portal.wrap_async_context_manager(streamable_http_client(url, http_client=http)))
        session = stack.enter_context(portal.wrap_async_context_manager(ClientSession(read, write)))
        portal.call(session.initialize)
        yield Agent(portal, session)


def credential_of(lease: dict[str, Any]) -> str:
    return json.loads(Path(lease["credential_file"]).read_text())["credential"]


# -- the done-when of issue 15 ------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_agent_finds_a_spoken_phrase_in_a_video_and_gets_its_time_frame(host: Host) -> None:
    lease = host.lease()
    with stdio_agent(host, lease["credential_file"]) as agent:
        answer, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "finance team"})
        assert not is_error, answer
        assert answer["format"] == "atmem-evidence-discovery-v1" and answer["sufficiency"] == "not_assessed"
        (video,) = [e for e in answer["evidence"] if e["source_range"]["media_type"] == "video/mp4"]
        assert "finance team" in video["text"]
        frame = video["time_frame"]
        assert frame["of"] == "video" and 0 <= frame["start_ms"] < frame["end_ms"] <= 12_000
        inspected, is_error = agent.call("discovery-inspect", {"lease_id": lease["lease_id"],
                                                                "unit_id": video["unit_id"]})
        assert video.pop("matched_terms") == ["finance", "team"] and video.pop("nominated_by") == ["lexical"]
        assert not is_error and inspected["evidence"] == [video] and inspected["operations_used"] == 2


def test_an_agent_finds_a_word_of_a_scanned_page_and_gets_its_page_box(host: Host, scanned_words: tuple[str, ...]) -> None:
    lease = host.lease()
    with stdio_agent(host, lease["credential_file"]) as agent:
        answer, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "armour"})
    assert not is_error, answer
    scanned = [e for e in answer["evidence"] if e["assurance"]["method"] == "ocr" and "page_box" in e]
    assert scanned and any("armour" in e["text"].lower() for e in scanned)
    box = scanned[0]["page_box"]
    assert box["page"] == 1 and box["coordinate_space"] == "pdf_points_top_left"
    assert 0 <= box["x"] < box["x"] + box["width"] <= 595 and 0 <= box["y"] < box["y"] + box["height"] <= 842
    assert 130 <= box["y"] + box["height"] / 2 <= 190  # the second line, drawn at y = 170 points
    assert set(scanned_words[3:]) & set(scanned[0]["text"].split())


# -- the two tools and nothing else --------------------------------------------------------------------------


def test_the_tools_take_exactly_their_two_fields(host: Host) -> None:
    lease = host.lease()
    with stdio_agent(host, lease["credential_file"]) as agent:
        tools = agent.tools()
        assert set(tools) == {"discovery-search", "discovery-inspect"}
        for name, fields in (("discovery-search", {"lease_id", "query"}), ("discovery-inspect", {"lease_id", "unit_id"})):
            schema = tools[name].input_schema
            assert set(schema["properties"]) == set(schema["required"]) == fields
            assert schema["additionalProperties"] is False
        lid = lease["lease_id"]
        bad = [
            ("discovery-search", {"lease_id": lid, "query": "quay", "workspace": "elsewhere"}, "invalid_request"),
            ("discovery-search", {"lease_id": lid, "query": "quay", "scope": {"subject": "*"}}, "invalid_request"),
            ("discovery-search", {"lease_id": lid}, "invalid_request"),
            ("discovery-search", {"lease_id": lid, "query": ["quay"]}, "invalid_request"),
            ("discovery-inspect", {"lease_id": lid, "query": "quay"}, "invalid_request"),
            ("discovery-search", {"lease_id": "../../etc", "query": "quay"}, "lease_not_found"),
            ("discovery-index", {"lease_id": lid, "bundle": "{}"}, "unknown_tool"),
            ("discovery-lease-open", {"workspace": "harbour"}, "unknown_tool"),
            ("discovery-search", {"lease_id": lid, "query": ""}, "invalid_request"),
            ("discovery-search", {"lease_id": lid, "query": "q" * 100_000}, "invalid_request"),
        ]
        for tool, arguments, code in bad:
            data, is_error = agent.call(tool, arguments)
            assert is_error and data["error_code"] == code, (tool, arguments, data)
            assert set(data) == {"error_code", "error"} and "qqqq" not in data["error"] and "etc" not in data["error"]
        # None of those counted an operation: the first real one is operation 1.
        data, is_error = agent.call("discovery-search", {"lease_id": lid, "query": '"QUAY" closed* ^(*'})
        assert not is_error and data["operations_used"] == 1 and data["evidence"]


@pytest.mark.slow
def test_budget_revocation_and_another_binding_fail_closed_through_the_session(host: Host) -> None:
    lease = host.lease(operations=1)
    other = host.lease("--agent", "second-agent")
    with stdio_agent(host, lease["credential_file"]) as agent:
        _, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "bollard"})
        assert not is_error
        data, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "bollard"})
        assert is_error and data["error_code"] == "budget_exhausted"
        data, is_error = agent.call("discovery-search", {"lease_id": other["lease_id"], "query": "bollard"})
        assert is_error and data["error_code"] == "lease_of_another_binding"
    with stdio_agent(host, other["credential_file"]) as agent:
        host.cli("discovery", "lease", "revoke", other["lease_id"])
        data, is_error = agent.call("discovery-search", {"lease_id": other["lease_id"], "query": "bollard"})
        assert is_error and data["error_code"] == "lease_revoked"
    shown = json.loads(host.cli("discovery", "lease", "show", lease["lease_id"]).stdout)
    assert shown["used"] == {"operations": 1, "evidence": shown["used"]["evidence"], "characters":
                             shown["used"]["characters"]} and shown["used"]["evidence"] >= 1
    assert [o["state"] for o in shown["operations"]] == ["prepared"]
    receipt = json.loads(host.cli("discovery", "receipt", "show", shown["operations"][0]["request_id"]).stdout)
    assert receipt["lease_id"] == lease["lease_id"] and receipt["prepared"]


# -- streamable HTTP and the stdio bridge ----------------------------------------------------------------------


@pytest.mark.slow
def test_streamable_http_takes_the_credential_from_the_bearer_header(host: Host) -> None:
    lease = host.lease()
    with http_endpoint(host) as url:
        with http_agent(url, credential_of(lease)) as agent:
            answer, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "berth"})
            assert not is_error and answer["evidence"], answer
        with http_agent(url, None) as agent:
            data, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "berth"})
            assert is_error and data["error_code"] == "unauthenticated"
        with http_agent(url, "mfdc1." + "0" * 32 + "." + "0" * 64) as agent:
            data, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "berth"})
            assert is_error and data["error_code"] == "unauthenticated"


@pytest.mark.slow
def test_the_stdio_bridge_forwards_to_a_loopback_endpoint(host: Host) -> None:
    with http_endpoint(host) as url:
        lease = host.lease("--endpoint", url, "--credential-file", str(host.folder / "bridge.json"))
        with stdio_agent(host, lease["credential_file"]) as agent:
            answer, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "QUAY"})
            assert not is_error and any(e["text"] == "QUAY 4 CLOSED" for e in answer["evidence"])
            data, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "x", "extra": 1})
            assert is_error and data["error_code"] == "invalid_request"


@pytest.mark.slow
def test_the_bridge_answers_host_unavailable_and_never_retries_when_the_endpoint_goes(host: Host) -> None:
    url, proc = start_http(host)
    try:
        lease = host.lease("--endpoint", url, "--credential-file", str(host.folder / f"gone-{uuid.uuid4().hex}.json"))
        with stdio_agent(host, lease["credential_file"]) as agent:
            _, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "QUAY"})
            assert not is_error
            stop(proc)
            data, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "QUAY"})
            assert is_error and data["error_code"] == "host_unavailable" and "127.0.0.1" not in data["error"]
    finally:
        stop(proc)
    shown = json.loads(host.cli("discovery", "lease", "show", lease["lease_id"]).stdout)
    assert shown["used"]["operations"] == 1  # the failed call was not retried behind the agent's back


def unavailable_everywhere(agent: Agent, lease_id: str) -> None:
    for tool, arguments in (("discovery-search", {"lease_id": lease_id, "query": "finance"}),
                            ("discovery-inspect", {"lease_id": lease_id, "unit_id": "eg:locus:" + "0" * 32}),
                            ("discovery-search", {"lease_id": lease_id})):
        data, is_error = agent.call(tool, arguments)
        assert is_error and data["error_code"] == "host_unavailable", (tool, data)


@pytest.mark.slow
def test_a_server_without_key_state_or_credential_answers_host_unavailable_instead_of_dying(
        host: Host, tmp_path: Path) -> None:
    lease = host.lease()
    # No credential file: the server starts, says why on stderr, and answers every call.
    with stdio_agent(host, str(tmp_path / "none.json")) as agent:
        assert set(agent.tools()) == {"discovery-search", "discovery-inspect"}
        unavailable_everywhere(agent, lease["lease_id"])
    # An untrusted credential file (readable by others): the same, and the credential is never echoed.
    shared = tmp_path / "shared.json"
    shared.write_text(Path(lease["credential_file"]).read_text())
    shared.chmod(0o644)
    with stdio_agent(host, str(shared)) as agent:
        unavailable_everywhere(agent, lease["lease_id"])
    log = (host.folder / "stdio.log").read_text()
    assert "none.json does not exist" in log and "mode 600" in log and credential_of(lease) not in log
    # No receipt key, then no state: the credential is good, the host is not.
    key = host.folder / "receipt.key"
    state = host.folder / "host.db"
    for moved, reason in ((key, "the receipt key does not exist: create it with 'mediafleet discovery key new'"),
                          (state, "the host's state does not exist")):
        moved.rename(moved.with_suffix(".away"))
        try:
            with stdio_agent(host, lease["credential_file"]) as agent:
                unavailable_everywhere(agent, lease["lease_id"])
        finally:
            moved.with_suffix(".away").rename(moved)
        assert reason in (host.folder / "stdio.log").read_text()
    with stdio_agent(host, lease["credential_file"]) as agent:  # everything back: it serves again
        data, is_error = agent.call("discovery-search", {"lease_id": lease["lease_id"], "query": "finance"})
        assert not is_error and data["evidence"]


@pytest.mark.slow
def test_serving_refuses_a_remote_address(host: Host, tmp_path: Path) -> None:
    proc = host.cli("serve-discovery", "--http", "--host", "0.0.0.0", check=False)
    assert proc.returncode == 2 and "loopback" in proc.stderr
    lease = host.lease()
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    proc = host.cli("discovery", "lease", "open", "--workspace", "harbour", "--ttl-s", "60", "--max-operations", "1",
                    "--max-evidence", "1", "--credential-file", str(tmp_path / "repo" / "c.json"), check=False)
    assert proc.returncode == 2 and "repository" in proc.stderr and not (tmp_path / "repo" / "c.json").exists()
    remote = dict(json.loads(Path(lease["credential_file"]).read_text()), endpoint="http://192.0.2.1:80/mcp")
    far = tmp_path / "far.json"
    far.write_text(json.dumps(remote))
    far.chmod(0o600)
    with stdio_agent(host, str(far)) as agent:  # a remote endpoint is never reached: host_unavailable
        unavailable_everywhere(agent, lease["lease_id"])
    assert "loopback" in (host.folder / "stdio.log").read_text()


def test_the_lease_is_printed_with_its_credential_file_readable_by_the_host_only(host: Host) -> None:
    lease = host.lease()
    assert lease["lease_id"].startswith("mfl-") and lease["budget"]["operations"] == 20
    path = Path(lease["credential_file"])
    assert path.is_absolute() and oct(path.stat().st_mode & 0o777) == "0o600"
    assert credential_of(lease).startswith("mfdc1.") and "credential" not in lease
