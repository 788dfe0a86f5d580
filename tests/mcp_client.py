"""A real MCP client session against a real ``mediafleet serve-mcp`` process, for the tests that
call the callers' tools (tests/test_mcp.py, tests/test_callers.py)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.conftest import ROOT

__all__ = ["TOOL_ACTIONS", "Caller", "mcp_server", "server_env"]

# The callers' tool per action (CONTRACT.md section 5).
TOOL_ACTIONS = {
    "pdf_action": "ocr_pdf",
    "image_decode": "analyze_image",
    "transcribe_media": "transcribe_segments",
    "video_keyframes": "extract_keyframes",
}


class Caller:
    """One MCP client session, driven synchronously from the tests through a blocking portal."""

    def __init__(self, portal: Any, session: ClientSession, log: Path) -> None:
        self.portal, self.session, self.log = portal, session, log

    def raw(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        result = self.portal.call(self.session.call_tool, tool, arguments)
        (content,) = result.content
        assert content.type == "text"
        data = json.loads(content.text)
        # Sent once, as text (the callers decode the text); a failure is the callers' own channel,
        # available: false, never isError (their client raises on it and loses the error).
        assert isinstance(data, dict) and result.structured_content is None and not result.is_error
        return data, data.get("available", True) is False

    def call(self, tool: str, params: dict[str, Any] | str, action: str | None = None) -> tuple[dict[str, Any], bool]:
        params_json = params if isinstance(params, str) else json.dumps(params)
        return self.raw(tool, {"action": action or TOOL_ACTIONS[tool], "params_json": params_json})

    def tools(self) -> dict[str, Any]:
        return {t.name: t for t in self.portal.call(self.session.list_tools).tools}


def server_env(blob_root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    return {**env, "MEDIAFLEET_BLOB_ROOT": str(blob_root), "OMP_NUM_THREADS": "1", **extra}


@contextmanager
def mcp_server(env: dict[str, str], *args: str, log: Path, cwd: Path = ROOT,
               executable: Path | None = None) -> Iterator[Caller]:
    """A stdio ``serve-mcp`` and a client session on it. ``executable``: a ``mediafleet`` command to
    start, as the callers' mcp_config starts it (default: this interpreter's ``python -m``)."""
    if executable is not None:
        command, argv = str(executable), ["serve-mcp", *args]
    else:
        command, argv = sys.executable, ["-m", "mediafleet.cli", "serve-mcp", *args]
    params = StdioServerParameters(command=command, args=argv, env=env, cwd=str(cwd))
    with open(log, "w") as errlog, start_blocking_portal() as portal, ExitStack() as stack:
        read, write = stack.enter_context(portal.wrap_async_context_manager(stdio_client(params, errlog=errlog)))
        session = stack.enter_context(portal.wrap_async_context_manager(ClientSession(read, write)))
        portal.call(session.initialize)
        yield Caller(portal, session, log)
