"""The MCP server around :class:`~mediafleet.mcp.server.SidecarTools`: its tool list and calls (with
an upstream catalog server behind it, if any), over stdio or streamable HTTP, with the HTTP body
limit answered as a tool result in the callers' channel (:mod:`mediafleet.mcp.http_cap`)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from mediafleet import release
from mediafleet.adapters.caller import failure_response
from mediafleet.contract.errors import (
    ErrorCode,
    PublicError,
)
from mediafleet.mcp.http_cap import BodyCap, tool_result
from mediafleet.mcp.server import TOOLS, SidecarTools

__all__ = ["build_server", "serve"]

log = logging.getLogger("mediafleet.mcp")


def build_server(tools: SidecarTools, *, errors_as_is_error: bool = False, upstream: Any = None) -> Any:
    """The low-level MCP server for the four tools (the SDK's ``mcp.server.lowlevel.Server``).

    The low-level server is used, not ``MCPServer``, so argument checking and every error message
    are ours: the SDK's own validation errors would echo the caller's values.

    A failure is answered in the callers' own channel, ``available: false`` with ``error`` (their
    client, fastmcp, raises on ``isError`` and they turn any exception into "sidecar
    unreachable", losing code and message); ``errors_as_is_error`` also sets ``isError``, for
    other MCP clients.

    With an ``upstream`` (:class:`mediafleet.mcp.upstream.Upstream`), mediafleet stands in for a
    catalog server under its name: a call is answered here only when it is one of the served tools
    with its action; every other call (another tool, or another action of a shared action-routed
    tool) is forwarded to the upstream verbatim, and the listing is the union.
    """
    import anyio
    import anyio.to_thread
    import mcp.types as types
    from mcp.server.lowlevel import Server

    listed = [types.Tool(**spec) for spec in tools.describe()]
    # One job at a time per server: extractors in this process are not shared across threads, and
    # the fleet's result backend is read by one thread. Created on first use, inside the event loop.
    limiter: list[Any] = []

    async def list_tools(ctx: Any, params: Any) -> Any:
        if upstream is None:
            return types.ListToolsResult(tools=listed)
        from mediafleet.mcp.upstream import UpstreamUnavailable, merge_tools

        try:
            theirs = await upstream.list_tools()
        except UpstreamUnavailable:
            log.warning("the upstream cannot be reached: listing its tools as last seen")
            theirs = list(getattr(upstream, "last_tools", None) or [])
        return types.ListToolsResult(tools=merge_tools(listed, theirs, tools.served))

    async def call_tool(ctx: Any, params: Any) -> Any:
        if upstream is not None:
            from mediafleet.mcp.upstream import route

            if route(params.name, params.arguments, tools.served) == "upstream":
                return await upstream.call_tool(params.name, params.arguments)
        if not limiter:
            limiter.append(anyio.CapacityLimiter(1))
        response, failed = await anyio.to_thread.run_sync(tools.call, params.name, params.arguments,
                                                          limiter=limiter[0])
        # Once, as text: the callers decode the text first (structured content would send the
        # bundle a second time). Their fields come first, the bundle last.
        text = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    is_error=failed and errors_as_is_error)

    return Server("mediafleet", version=release(), on_list_tools=list_tools, on_call_tool=call_tool,
                  instructions=f"The media sidecar tools of the evidence pipeline: {', '.join(TOOLS)}. "
                               "Each takes action and params_json.")


def _http_body_limit(max_inline_bytes: int) -> int:
    """The largest request body the HTTP transport takes: the base64 of the inline limit, plus room."""
    return (max_inline_bytes + 2) // 3 * 4 + 1024 * 1024


def _over_body_limit(max_inline_bytes: int, errors_as_is_error: bool, version: str | None) -> dict[str, Any]:
    """The tool result for a request over the HTTP body limit: ``too_large`` in the callers' channel."""
    limit = _http_body_limit(max_inline_bytes)
    error = PublicError(code=ErrorCode.TOO_LARGE,
                        message=f"the request is larger than this server's {limit}-byte HTTP body limit (the base64 "
                                f"of its {max_inline_bytes}-byte inline limit, plus 1 MiB); put the artifact in the "
                                "fleet's blob store and pass blob_ref, or have the operator raise serve-mcp's "
                                "--max-inline-bytes")
    text = json.dumps(failure_response(error), ensure_ascii=False, separators=(",", ":"))
    return tool_result(version, text, errors_as_is_error)


def _without_second_body_limit(manager: Any) -> None:
    """Take the SDK's own body limit out from behind :class:`BodyCap`, which enforces the same one:
    the SDK's buffers the body into a bytearray and copies it to bytes, two copies of a large
    request held for the whole call. Left in place if the SDK no longer wraps its handler so."""
    from mcp.server.transport_security import RequestBodyLimitMiddleware

    if isinstance(manager.asgi_app, RequestBodyLimitMiddleware):
        manager.asgi_app = manager.asgi_app.app


def serve(tools: SidecarTools, *, http: bool = False, host: str = "127.0.0.1", port: int = 8765,
          errors_as_is_error: bool = False, upstream: str | None = None) -> None:
    """Serve until stdin closes (stdio) or the process is stopped (streamable HTTP at ``/mcp``).

    HTTP answers with plain JSON bodies (no SSE stream), so a large response is not cut by an SSE
    client's event-size limit; on a loopback host the SDK's DNS-rebinding protection is on. A
    request body over the base64 of the inline limit plus 1 MiB is read to its end, kept no further
    than its first 64 KiB, and answered ``too_large`` as a tool result (:mod:`mediafleet.mcp.http_cap`).
    """
    import anyio

    forward = None
    if upstream is not None:
        from mediafleet.mcp.upstream import Upstream

        forward = Upstream.from_spec(upstream, unavailable_is_error=False)
    server = build_server(tools, errors_as_is_error=errors_as_is_error, upstream=forward)
    if not http:
        from mcp.server.stdio import stdio_server

        async def run_stdio() -> None:
            async with _held(forward), stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(run_stdio)
        return

    import uvicorn

    limit = _http_body_limit(tools.max_inline_bytes)
    # A body over the limit is answered as a tool result (too_large), not the transport's 413, which
    # the callers' client turns into "sidecar unreachable".
    app = BodyCap(server.streamable_http_app(json_response=True, host=host, max_request_body_size=limit), limit,
                  answer=lambda version: _over_body_limit(tools.max_inline_bytes, errors_as_is_error, version))
    _without_second_body_limit(server.session_manager)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    print(f"mediafleet serve-mcp: streamable HTTP at http://{host}:{port}/mcp", file=sys.stderr, flush=True)

    async def run_http() -> None:
        async with _held(forward):
            await uvicorn.Server(config).serve()

    anyio.run(run_http)


def _held(upstream: Any) -> Any:
    """The upstream's session for the server's life (nothing to hold without one)."""
    import contextlib

    return upstream if upstream is not None else contextlib.AsyncExitStack()
