"""A tiny real MCP server standing in for a catalog server (data-science-mcp, stirlingpdf-mcp).

Run as ``python tests/upstream_server.py`` (stdio) or ``... --http --port P`` (streamable HTTP on
loopback, at ``/mcp``). Its tools answer from their arguments alone, so a test knows the answer:

* ``deep_train_predict`` ``{"values": [numbers]}``: ``{"prediction": sum, "count": n, "tag": ...}``,
  as text and as structured content (it declares an output schema); ``tag`` is the environment's
  ``UPSTREAM_TAG`` (to see what environment the upstream was given).
* ``pdf_action`` (action-routed, like stirlingpdf's): action ``merge_pdfs`` with params_json
  ``{"files": [names]}`` answers ``{"merged": "a+b", "count": 2, "served_by": "upstream"}``; action
  ``ocr_pdf`` answers ``{"served_by": "upstream"}`` (a call that should have stayed in mediafleet
  is seen); any other action is a tool error (``isError``).
* ``crash``: the process exits at once, mid-call (a session that breaks).
* ``refuse``: a JSON-RPC error (code -32602), not a tool result.

With ``UPSTREAM_PID_FILE`` set, the process writes its pid there at start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio
from mcp import MCPError, types
from mcp.server.lowlevel import Server

TOOLS = [
    types.Tool(
        name="deep_train_predict",
        description="Stand-in for data-science-mcp's deep_train_predict: the sum of the values.",
        input_schema={"type": "object", "properties": {"values": {"type": "array", "items": {"type": "number"}}},
                      "required": ["values"]},
        output_schema={"type": "object", "properties": {"prediction": {"type": "number"},
                                                        "count": {"type": "integer"},
                                                        "tag": {"type": ["string", "null"]}},
                       "required": ["prediction", "count"]},
    ),
    types.Tool(
        name="pdf_action",
        description="Stand-in for stirlingpdf-mcp's action-routed pdf_action.",
        input_schema={"type": "object",
                      "properties": {"action": {"type": "string", "enum": ["merge_pdfs", "split_pdf", "ocr_pdf"]},
                                     "params_json": {"type": "string"}},
                      "required": ["action"]},
        output_schema={"type": "object", "properties": {"served_by": {"type": "string"}}},
    ),
    types.Tool(name="crash", description="Exits the process mid-call.",
               input_schema={"type": "object", "properties": {}}),
    types.Tool(name="refuse", description="Answers with a JSON-RPC error.",
               input_schema={"type": "object", "properties": {}}),
]


def _text(data: dict[str, Any], *, structured: bool = False, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(data, sort_keys=True))],
                                structured_content=data if structured else None, is_error=is_error)


def answer(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    if name == "deep_train_predict":
        values = arguments.get("values") or []
        return _text({"prediction": sum(values), "count": len(values), "tag": os.environ.get("UPSTREAM_TAG")},
                     structured=True)
    if name == "pdf_action":
        action = arguments.get("action")
        if action == "merge_pdfs":
            files = json.loads(arguments.get("params_json") or "{}").get("files", [])
            return _text({"merged": "+".join(files), "count": len(files), "served_by": "upstream"}, structured=True)
        if action == "ocr_pdf":
            return _text({"served_by": "upstream"}, structured=True)
        return _text({"error": "unsupported action"}, is_error=True)
    if name == "crash":
        os._exit(3)
    if name == "refuse":
        raise MCPError(code=-32602, message="refused by the stand-in")
    return _text({"error": "unknown tool"}, is_error=True)


def build() -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return answer(params.name, dict(params.arguments or {}))

    return Server("upstream-stand-in", version="1", on_list_tools=list_tools, on_call_tool=call_tool)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if os.environ.get("UPSTREAM_PID_FILE"):
        with open(os.environ["UPSTREAM_PID_FILE"], "w") as out:
            out.write(str(os.getpid()))
    server = build()
    if not args.http:
        from mcp.server.stdio import stdio_server

        async def run_stdio() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(run_stdio)
        return
    import uvicorn

    app = server.streamable_http_app(json_response=True, host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    print(f"upstream stand-in at http://127.0.0.1:{args.port}/mcp", file=sys.stderr, flush=True)
    anyio.run(uvicorn.Server(config).serve)


if __name__ == "__main__":
    main()
