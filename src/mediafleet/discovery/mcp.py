"""The model's two tools over MCP: ``discovery-search`` and ``discovery-inspect``.

``discovery-search`` takes exactly ``lease_id`` and ``query``; ``discovery-inspect`` exactly
``lease_id`` and ``unit_id``; both strings. Any other field, a scope selector, another tool (a
write, a lease creation): refused. Every call presents the binding's credential, which the model
never sees: over streamable HTTP it is the request's ``Authorization: Bearer`` header; under stdio
it comes from the host-created credential file the process was started with. A failure is a tool
result with ``isError: true`` whose text is ``{"error_code", "error"}``: public, fixed messages.

Transports: :func:`serve_http` on a loopback address only, in front of a
:class:`~mediafleet.discovery.operations.DiscoveryService`; :func:`serve_stdio` either in front of
a local service or as a bridge to a loopback HTTP endpoint named in the credential file.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from mediafleet import release
from mediafleet.discovery.errors import DiscoveryError, Refusal
from mediafleet.discovery.host import LEASE_ID
from mediafleet.discovery.operations import DiscoveryService

__all__ = ["TOOL_FIELDS", "DiscoveryTools", "UnavailableTools", "build_server", "check_loopback_url", "is_loopback_host", "serve_http",
           "serve_stdio"]

log = logging.getLogger("mediafleet.discovery.mcp")

TOOL_FIELDS: dict[str, tuple[str, str]] = {
    "discovery-search": ("lease_id", "query"),
    "discovery-inspect": ("lease_id", "unit_id"),
}
_DESCRIPTIONS = {
    "discovery-search": "Search of the evidence your lease covers, by its words (abbreviations, numbers and "
                        "spellings normalised; units holding most of your words come after those holding all) "
                        "and, where the host enabled it, by meaning. Returns investigative evidence (text with "
                        "its located source, the query words it holds, the channels that nominated it); it never "
                        "assesses sufficiency, and an empty result does not mean the evidence is absent.",
    "discovery-inspect": "One evidence unit of your lease's scope by its unit_id, with its located source.",
}
_BRIDGE_TIMEOUT_S = 120.0
_FIELD_TEXT = {"lease_id": "the lease id the host gave you", "query": "words to look for",
               "unit_id": "a unit_id from a discovery answer"}


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_loopback_url(url: str) -> str:
    """An ``http://`` URL whose host is a loopback address, with a port.

    Raises:
        ValueError: anything else.
    """
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None or not is_loopback_host(parts.hostname):
        raise ValueError("the endpoint must be an http:// URL on a loopback address")
    if parts.port is None or parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("the endpoint must name a port, and nothing but a path after it")
    return url


def tool_specs() -> list[dict[str, Any]]:
    return [{
        "name": name,
        "description": _DESCRIPTIONS[name],
        "input_schema": {
            "type": "object",
            "properties": {f: {"type": "string", "description": _FIELD_TEXT[f]} for f in fields},
            "required": list(fields),
            "additionalProperties": False,
        },
    } for name, fields in TOOL_FIELDS.items()]


def check_arguments(tool: str, arguments: Mapping[str, Any] | None) -> dict[str, str]:
    """Exactly the tool's two string fields.

    Raises:
        DiscoveryError: another tool, a missing, extra or non-string field.
    """
    fields = TOOL_FIELDS.get(tool)
    if fields is None:
        raise DiscoveryError(Refusal.UNKNOWN_TOOL)
    arguments = dict(arguments or {})
    if set(arguments) != set(fields):
        raise DiscoveryError(Refusal.INVALID_REQUEST, f"{tool} takes exactly {fields[0]} and {fields[1]}")
    if not all(isinstance(arguments[f], str) for f in fields):
        raise DiscoveryError(Refusal.INVALID_REQUEST, f"{fields[0]} and {fields[1]} are strings")
    if not LEASE_ID.fullmatch(arguments["lease_id"]):
        raise DiscoveryError(Refusal.LEASE_NOT_FOUND)
    return arguments


class DiscoveryTools:
    """The two tools over one service, as plain synchronous calls (the MCP layer is thin)."""

    def __init__(self, service: DiscoveryService) -> None:
        self.service = service

    def call(self, tool: str, arguments: Mapping[str, Any] | None, credential: str | None) -> tuple[dict[str, Any], bool]:
        """Answer one call: ``(object, is_error)``. Never raises."""
        try:
            args = check_arguments(tool, arguments)
            if not credential:
                raise DiscoveryError(Refusal.UNAUTHENTICATED)
            if tool == "discovery-search":
                return self.service.search(credential, args["lease_id"], args["query"]), False
            return self.service.inspect(credential, args["lease_id"], args["unit_id"]), False
        except DiscoveryError as exc:
            log.info("%s refused: %s", tool if tool in TOOL_FIELDS else "(unknown tool)", exc.code.value)
            return exc.public(), True
        except Exception as exc:  # noqa: BLE001 - the boundary: a fixed public message
            log.warning("discovery call failed: %s", type(exc).__name__)
            return DiscoveryError(Refusal.INTERNAL_ERROR).public(), True


class UnavailableTools:
    """What a host that cannot serve (no key, no state, no credential) answers: ``host_unavailable``."""

    def call(self, tool: str, arguments: Mapping[str, Any] | None, credential: str | None) -> tuple[dict[str, Any], bool]:
        """Every call, valid or not: the public ``host_unavailable`` error. Never raises."""
        return DiscoveryError(Refusal.HOST_UNAVAILABLE).public(), True


Handler = Callable[[str, Mapping[str, Any] | None, Any], Awaitable[tuple[dict[str, Any], bool]]]


def build_server(handler: Handler) -> Any:
    """The low-level MCP server for the two tools; ``handler(tool, arguments, ctx)`` answers a call."""
    from mcp import types
    from mcp.server.lowlevel import Server

    listed = [types.Tool(**spec) for spec in tool_specs()]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        response, is_error = await handler(params.name, params.arguments, ctx)
        text = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=response, is_error=is_error)

    return Server("mediafleet-discovery", version=release(), on_list_tools=list_tools, on_call_tool=call_tool,
                  instructions="Evidence discovery under a host lease: discovery-search (lease_id, query) and "
                               "discovery-inspect (lease_id, unit_id).")


def _local_handler(tools: DiscoveryTools | UnavailableTools, credential_of: Callable[[Any], str | None]) -> Handler:
    import anyio
    import anyio.to_thread

    limiter: list[Any] = []  # one call at a time: the service's connections are shared

    async def handle(tool: str, arguments: Mapping[str, Any] | None, ctx: Any) -> tuple[dict[str, Any], bool]:
        if not limiter:
            limiter.append(anyio.CapacityLimiter(1))
        credential = credential_of(ctx)
        return await anyio.to_thread.run_sync(tools.call, tool, arguments, credential, limiter=limiter[0])

    return handle


def bearer(ctx: Any) -> str | None:
    """The credential of an HTTP request: its ``Authorization: Bearer`` value."""
    request = getattr(ctx, "request", None)
    header = request.headers.get("authorization") if request is not None else None
    if not header or not header.startswith("Bearer "):
        return None
    return header.removeprefix("Bearer ").strip() or None


def serve_http(tools: DiscoveryTools | UnavailableTools, *, host: str = "127.0.0.1", port: int = 8766) -> None:
    """Streamable HTTP at ``http://HOST:PORT/mcp``, loopback only, until the process is stopped.

    Raises:
        ValueError: ``host`` is not a loopback address.
    """
    if not is_loopback_host(host):
        raise ValueError("serve-discovery listens on a loopback address only")
    import anyio
    import uvicorn

    server = build_server(_local_handler(tools, bearer))
    app = server.streamable_http_app(json_response=True, host=host, max_request_body_size=256 * 1024)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    print(f"mediafleet serve-discovery: streamable HTTP at http://{host}:{port}/mcp", file=sys.stderr, flush=True)
    anyio.run(uvicorn.Server(config).serve)


def serve_stdio(credential: str, *, tools: DiscoveryTools | UnavailableTools | None = None, endpoint: str | None = None) -> None:
    """Serve the two tools on stdin/stdout with the credential from the host's file.

    With ``tools``, calls are answered here; with ``endpoint`` (a loopback URL, checked), each
    call is forwarded to the host's HTTP endpoint with the credential as its bearer header.
    """
    import anyio
    from mcp.server.stdio import stdio_server

    if (tools is None) == (endpoint is None):
        raise ValueError("serve_stdio takes tools or an endpoint")

    async def run(handler: Handler) -> None:
        server = build_server(handler)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    if tools is not None:
        anyio.run(run, _local_handler(tools, lambda ctx: credential))
        return

    url = check_loopback_url(endpoint or "")

    async def forward(tool: str, arguments: Mapping[str, Any] | None, ctx: Any) -> tuple[dict[str, Any], bool]:
        # One upstream session per call: a host endpoint that goes away fails that call
        # (host_unavailable), never the bridge, and nothing is retried behind the agent's back.
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        try:
            check_arguments(tool, arguments)
        except DiscoveryError as exc:
            return exc.public(), True
        try:
            with anyio.fail_after(_BRIDGE_TIMEOUT_S):
                async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential}"},
                                               timeout=_BRIDGE_TIMEOUT_S) as http,
                            streamable_http_client(url, http_client=http) as (up_read, up_write),
                            ClientSession(up_read, up_write) as upstream):
                    await upstream.initialize()
                    result = await upstream.call_tool(tool, dict(arguments or {}))
        except Exception as exc:  # noqa: BLE001 - the host endpoint failed: a fixed public message
            log.warning("discovery bridge: the host endpoint failed: %s", type(exc).__name__)
            return DiscoveryError(Refusal.HOST_UNAVAILABLE).public(), True
        data = result.structured_content
        if not isinstance(data, dict):
            return DiscoveryError(Refusal.INTERNAL_ERROR).public(), True
        return data, bool(result.is_error)

    anyio.run(run, forward)
