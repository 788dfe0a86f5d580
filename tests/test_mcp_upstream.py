"""mediafleet under a catalog server's name: routing, the merged listing, and a real upstream process.

The upstream is ``tests/upstream_server.py``, a real MCP server (the SDK's low-level server) with
tools whose answers the tests know; it is reached over stdio (a process the session spawns) and
over streamable HTTP (a process the test runs).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp import MCPError, types

from mediafleet.mcp.upstream import (
    UNAVAILABLE,
    Upstream,
    UpstreamUnavailable,
    merge_tools,
    route,
)
from tests.conftest import ROOT, free_port

SERVED = {"pdf_action": "ocr_pdf", "image_decode": "analyze_image",
          "transcribe_media": "transcribe_segments", "video_keyframes": "extract_keyframes"}
STAND_IN = ROOT / "tests" / "upstream_server.py"


def spec() -> str:
    return f"stdio:{sys.executable} {STAND_IN}"


def text_of(result: types.CallToolResult) -> dict[str, Any]:
    (content,) = result.content
    assert content.type == "text"
    data = json.loads(content.text)
    assert isinstance(data, dict)
    return data


def assert_unavailable(result: types.CallToolResult) -> None:
    assert text_of(result) == UNAVAILABLE
    assert result.is_error and result.structured_content is None


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- routing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tool", "arguments", "expected"), [
    ("pdf_action", {"action": "ocr_pdf", "params_json": "{}"}, "ours"),
    ("image_decode", {"action": "analyze_image"}, "ours"),
    ("transcribe_media", {"action": "transcribe_segments", "params_json": "{}"}, "ours"),
    ("video_keyframes", {"action": "extract_keyframes", "params_json": "{}"}, "ours"),
    ("pdf_action", {"action": "merge_pdfs", "params_json": "{}"}, "upstream"),  # their action of a shared tool
    ("pdf_action", {"action": "OCR_PDF"}, "upstream"),  # no case folding
    ("pdf_action", {"action": " ocr_pdf"}, "upstream"),  # no trimming
    ("pdf_action", {"action": ["ocr_pdf"]}, "upstream"),
    ("pdf_action", {"params_json": "{}"}, "upstream"),  # no action
    ("pdf_action", None, "upstream"),
    ("pdf_action", {"action": "analyze_image"}, "upstream"),  # another of our tools' action
    ("deep_train_predict", {"values": [1]}, "upstream"),
    ("deep_train_predict", {"action": "ocr_pdf"}, "upstream"),
    ("", {}, "upstream"),
])
def test_route(tool: str, arguments: dict[str, Any] | None, expected: str) -> None:
    assert route(tool, arguments, SERVED) == expected


def test_route_serves_only_the_tools_served_here() -> None:
    only_pdf = {"pdf_action": "ocr_pdf"}
    assert route("pdf_action", {"action": "ocr_pdf"}, only_pdf) == "ours"
    assert route("image_decode", {"action": "analyze_image"}, only_pdf) == "upstream"


# -- the merged listing -------------------------------------------------------------------------


def our_tool(name: str, action: str) -> types.Tool:
    return types.Tool(name=name, description=f"mediafleet {action}", input_schema={
        "type": "object",
        "properties": {"action": {"type": "string", "enum": [action]}, "params_json": {"type": "string"}},
        "required": ["action", "params_json"], "additionalProperties": False})


OURS = [our_tool(name, action) for name, action in SERVED.items()]
THEIR_PDF = types.Tool(name="pdf_action", description="Stirling PDF actions.", input_schema={
    "type": "object",
    "properties": {"action": {"type": "string", "enum": ["merge_pdfs", "split_pdf"]}, "options": {"type": "object"}},
    "required": ["action"], "additionalProperties": False},
    output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
THEIR_PREDICT = types.Tool(name="deep_train_predict", description="Train and predict.",
                           input_schema={"type": "object", "properties": {"values": {"type": "array"}}},
                           output_schema={"type": "object"})


def test_merge_keeps_their_tools_and_adds_ours() -> None:
    merged = merge_tools(OURS, [THEIR_PREDICT, THEIR_PDF], set(SERVED))
    assert [t.name for t in merged] == ["deep_train_predict", "pdf_action", "image_decode", "transcribe_media",
                                        "video_keyframes"]
    assert merged[0] == THEIR_PREDICT  # theirs alone: as it is, output schema included
    assert merged[2:] == OURS[1:]  # ours alone: as they are


def test_merge_a_shared_tool_is_theirs_widened_and_says_which_action_is_ours() -> None:
    before = THEIR_PDF.model_copy(deep=True)
    for served in (set(SERVED), SERVED):  # the action read from our schema, or given
        (pdf,) = [t for t in merge_tools(OURS, [THEIR_PDF], served) if t.name == "pdf_action"]
        assert "Stirling PDF actions." in pdf.description and "'ocr_pdf'" in pdf.description
        assert "mediafleet" in pdf.description
        schema = pdf.input_schema
        assert schema["properties"]["action"]["enum"] == ["merge_pdfs", "split_pdf", "ocr_pdf"]
        assert schema["properties"]["options"] == {"type": "object"}  # theirs kept
        assert schema["properties"]["params_json"] == {"type": "string"}  # ours added
        assert schema["required"] == ["action"] and schema["additionalProperties"] is False
        assert pdf.output_schema is None  # our results do not follow their output schema
    assert THEIR_PDF == before  # pure


def test_merge_an_action_they_already_list_is_not_repeated() -> None:
    theirs = THEIR_PDF.model_copy(update={"input_schema": {
        "type": "object", "properties": {"action": {"type": "string", "enum": ["ocr_pdf", "merge_pdfs"]},
                                         "params_json": {"type": "string", "description": "theirs"}}}})
    (pdf,) = merge_tools(OURS[:1], [theirs], {"pdf_action"})
    assert pdf.input_schema["properties"]["action"]["enum"] == ["ocr_pdf", "merge_pdfs"]
    assert pdf.input_schema["properties"]["params_json"]["description"] == "theirs"


def test_merge_lists_only_the_tools_served_and_each_name_once() -> None:
    merged = merge_tools(OURS, [THEIR_PDF, THEIR_PDF.model_copy(update={"description": "again"}), THEIR_PREDICT],
                         {"image_decode"})
    assert [t.name for t in merged] == ["pdf_action", "deep_train_predict", "image_decode"]
    assert merged[0] == THEIR_PDF  # pdf_action is not served here: theirs, untouched
    assert merge_tools(OURS, [], set(SERVED)) == OURS
    assert merge_tools([], [THEIR_PDF], set(SERVED)) == [THEIR_PDF]


# -- specs ----------------------------------------------------------------------------------------


def test_from_spec_reads_stdio_and_http() -> None:
    up = Upstream.from_spec("stdio:python -m 'some server' --flag=\"a b\"")
    assert up.command == ["python", "-m", "some server", "--flag=a b"] and up.url is None
    assert up.label == "stdio:python"
    assert Upstream.from_spec("stdio:/opt/bin/server --name ''").command == ["/opt/bin/server", "--name", ""]
    assert Upstream.from_spec("stdio:/opt/bin/server").label == "stdio:server"
    up = Upstream.from_spec("https://user:s3cret@mcp.example.org:8443/mcp?token=s3cret")
    assert up.url == "https://user:s3cret@mcp.example.org:8443/mcp?token=s3cret" and up.command is None
    assert up.label == "https://mcp.example.org:8443" and "s3cret" not in repr(up)
    assert Upstream.from_spec("HTTP://127.0.0.1/mcp").label == "http://127.0.0.1"


@pytest.mark.parametrize("bad", [
    "", "   ", "stdio:", "stdio:   ", "stdio:python 'unclosed s3cret", "ftp://user:s3cret@host/x",
    "s3cret-token", "file:///etc/s3cret", "http://", "https:///s3cret", "http://host:99999999/s3cret",
    "tcp:s3cret@host",
])
def test_from_spec_refuses_anything_else_without_repeating_it(bad: str) -> None:
    with pytest.raises(ValueError) as refused:
        Upstream.from_spec(bad)
    assert "s3cret" not in str(refused.value)
    assert "stdio" in str(refused.value) or "URL" in str(refused.value) or "shell" in str(refused.value)


def test_an_upstream_is_one_transport() -> None:
    with pytest.raises(ValueError):
        Upstream()
    with pytest.raises(ValueError):
        Upstream(command=["x"], url="http://127.0.0.1/mcp")
    with pytest.raises(ValueError):
        Upstream(url="http://127.0.0.1/mcp", env={"A": "b"})
    with pytest.raises(ValueError):
        Upstream(command=["x"], headers={"Authorization": "b"})
    for command in ([], [""], ["x", 1]):
        with pytest.raises(ValueError):
            Upstream(command=command)  # type: ignore[arg-type]


# -- a real upstream process ----------------------------------------------------------------------


@pytest.mark.integration
def test_a_stdio_upstream_lists_and_answers_then_stops(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    seen: dict[str, Any] = {}

    async def session(errlog: IO[str]) -> None:
        async with Upstream.from_spec(spec(), env={"UPSTREAM_TAG": "t-17", "UPSTREAM_PID_FILE": str(pid_file)},
                                      errlog=errlog) as up:
            assert up.connected
            seen["pid"] = int(pid_file.read_text())
            seen["tools"] = [t.name for t in await up.list_tools()]
            assert [t.name for t in up.last_tools] == seen["tools"]
            seen["predict"] = await up.call_tool("deep_train_predict", {"values": [1, 2, 3.5]})
            seen["merge"] = await up.call_tool(
                "pdf_action", {"action": "merge_pdfs", "params_json": json.dumps({"files": ["a.pdf", "b.pdf"]})})
            seen["their_error"] = await up.call_tool("pdf_action", {"action": "rotate"})
            with pytest.raises(MCPError) as refused:
                await up.call_tool("refuse", {})
            seen["refused"] = refused.value.code
            seen["still"] = await up.call_tool("deep_train_predict", {"values": []})

    with open(tmp_path / "upstream.log", "w") as errlog:
        anyio.run(session, errlog)
    assert seen["tools"] == ["deep_train_predict", "pdf_action", "crash", "refuse"]
    predict = seen["predict"]
    assert not predict.is_error
    assert text_of(predict) == {"prediction": 6.5, "count": 3, "tag": "t-17"}  # the env reached the upstream
    assert predict.structured_content == {"prediction": 6.5, "count": 3, "tag": "t-17"}  # as it is
    assert text_of(seen["merge"]) == {"merged": "a.pdf+b.pdf", "count": 2, "served_by": "upstream"}
    their_error = seen["their_error"]
    assert their_error.is_error and text_of(their_error) == {"error": "unsupported action"}  # verbatim
    assert seen["refused"] == -32602  # a JSON-RPC error is raised as it came, for the server to relay
    assert text_of(seen["still"]) == {"prediction": 0, "count": 0, "tag": "t-17"}
    assert gone(seen["pid"])  # the upstream process is not left running


@pytest.mark.integration
def test_a_broken_session_answers_unavailable_and_the_next_call_reconnects(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    pids: list[int] = []
    seen: dict[str, Any] = {}

    async def session(errlog: IO[str]) -> None:
        async with Upstream.from_spec(spec(), env={"UPSTREAM_PID_FILE": str(pid_file)}, errlog=errlog) as up:
            pids.append(int(pid_file.read_text()))
            seen["crash"] = await up.call_tool("crash", {})
            seen["after"] = await up.call_tool("deep_train_predict", {"values": [2, 2]})
            pids.append(int(pid_file.read_text()))

    with open(tmp_path / "upstream.log", "w") as errlog:
        anyio.run(session, errlog)
    assert_unavailable(seen["crash"])
    assert text_of(seen["after"])["prediction"] == 4
    assert pids[0] != pids[1] and all(gone(pid) for pid in pids)


@pytest.mark.integration
def test_an_unreachable_upstream_answers_unavailable_not_an_exception(tmp_path: Path) -> None:
    seen: list[Any] = []

    async def session(up: Upstream) -> None:
        async with up:
            assert not up.connected
            seen.append(await up.call_tool("deep_train_predict", {"values": [1]}))
            seen.append(await up.call_tool("pdf_action", {"action": "merge_pdfs"}))
            with pytest.raises(UpstreamUnavailable) as down:
                await up.list_tools()
            assert "s3cret" not in str(down.value)
            results: list[types.CallToolResult] = []

            async def one() -> None:
                results.append(await up.call_tool("deep_train_predict", {"values": [1]}))

            async with anyio.create_task_group() as tg:  # concurrent calls: each answered, none raises
                for _ in range(4):
                    tg.start_soon(one)
            seen.extend(results)

    started = time.monotonic()
    with open(tmp_path / "upstream.log", "w") as errlog:
        anyio.run(session, Upstream(command=[str(tmp_path / "no-such-upstream")], errlog=errlog))
    anyio.run(session, Upstream.from_spec(f"http://127.0.0.1:{free_port()}/mcp?token=s3cret"))
    assert len(seen) == 12
    for result in seen:
        assert_unavailable(result)
    assert time.monotonic() - started < 30


@pytest.mark.integration
def test_an_upstream_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    mute = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    seen: list[Any] = []

    async def session(errlog: IO[str]) -> None:
        async with Upstream(command=[sys.executable, "-c", mute], connect_timeout_s=3, errlog=errlog) as up:
            seen.append(await up.call_tool("deep_train_predict", {"values": [1]}))

    started = time.monotonic()
    with open(tmp_path / "upstream.log", "w") as errlog:
        anyio.run(session, errlog)
    assert_unavailable(seen[0])
    assert time.monotonic() - started < 30
    pids = [int(pid_file.read_text())]
    assert all(gone(pid) for pid in pids)


@contextmanager
def http_stand_in(port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as errlog:
        proc = subprocess.Popen([sys.executable, str(STAND_IN), "--http", "--port", str(port)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=errlog)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("the HTTP stand-in did not start")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.integration
def test_an_http_upstream_answers_and_a_restart_is_survived(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    seen: dict[str, Any] = {}

    async def session() -> None:
        async with Upstream.from_spec(url) as up:
            seen["tools"] = [t.name for t in await up.list_tools()]
            seen["merge"] = await up.call_tool("pdf_action", {"action": "merge_pdfs",
                                                              "params_json": json.dumps({"files": ["x"]})})
            stand_in.terminate()
            await anyio.to_thread.run_sync(stand_in.wait, 20)
            seen["down"] = await up.call_tool("deep_train_predict", {"values": [1]})
            with http_stand_in(port, tmp_path / "upstream.log"):
                seen["back"] = await up.call_tool("deep_train_predict", {"values": [5, 6]})

    with http_stand_in(port, tmp_path / "upstream.log") as stand_in:
        anyio.run(session)
    assert seen["tools"] == ["deep_train_predict", "pdf_action", "crash", "refuse"]
    assert text_of(seen["merge"]) == {"merged": "x", "count": 1, "served_by": "upstream"}
    assert_unavailable(seen["down"])
    assert text_of(seen["back"])["prediction"] == 11
