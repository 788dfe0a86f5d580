"""The HTTP body cap of ``serve-mcp --http``, answered in the callers' channel rather than as HTTP 413.

The MCP SDK's streamable HTTP transport answers a body over its cap with ``413 Request body too
large``: the callers' client raises on it and they record only "sidecar unreachable", losing the
reason. :class:`BodyCap` sits in front of the transport: a POST whose body is over the cap is read
to its end without being kept (its first 64 KiB excepted, where the JSON-RPC request's ``id`` is)
and answered with an ordinary tool result, ``available: false`` and ``too_large``, for that ``id``.
A body within the cap goes on to the transport untouched.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["BodyCap", "request_id", "tool_result"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_HEAD = 64 * 1024
_NOT_FOUND = object()


def request_id(head: bytes) -> Any:
    """The top-level ``"id"`` of the JSON object that ``head`` begins (a string or an integer), or
    None when it is not within ``head``.

    The SDK's client writes ``jsonrpc``, ``id`` and ``method`` before ``params``, so the id of a
    request of any size is in its first bytes. Strings are skipped as wholes, so an ``"id"`` inside
    the arguments is never taken for the request's.
    """
    text = head.decode("utf-8", errors="replace")
    depth, i, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                return None
            if depth == 1 and text[i:j + 1] == '"id"':
                k = j + 1
                while k < n and text[k] in " \t\r\n":
                    k += 1
                if k < n and text[k] == ":":
                    value = _value_at(text, k + 1)
                    return None if value is _NOT_FOUND else value
            i = j + 1
            continue
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        i += 1
    return None


def _value_at(text: str, at: int) -> Any:
    """The JSON string or integer starting at ``at`` (after blanks), else ``_NOT_FOUND``."""
    decoder = json.JSONDecoder()
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    try:
        value, _ = decoder.raw_decode(text, at)
    except ValueError:
        return _NOT_FOUND
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else _NOT_FOUND


def tool_result(version: str | None, text: str, is_error: bool) -> dict[str, Any]:
    """A ``tools/call`` result with one text content, shaped for the protocol ``version`` the
    client speaks (a 2026-era version requires ``resultType``), as the SDK's server shapes its own."""
    from mcp_types import methods
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    data: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if version is None:
        return data
    try:
        data = methods.serialize_server_result("tools/call", version, data)
    except (ValueError, KeyError):  # a version without a core surface for it: the plain shape
        pass
    if version in MODERN_PROTOCOL_VERSIONS and data.get("resultType") is None:
        data["resultType"] = "complete"
    return data


class BodyCap:
    """ASGI middleware: a POST body over ``cap`` bytes becomes ``answer(request id)``, a JSON-RPC
    result sent with status 200, after the body is read to its end and dropped.

    Args:
        app: the MCP transport's ASGI app.
        cap: the most request-body bytes passed on.
        answer: builds the JSON-RPC ``result`` object (a tool result) for a capped request, given
            the protocol version the request names in its ``mcp-protocol-version`` header.
    """

    def __init__(self, app: App, cap: int, answer: Callable[[str | None], dict[str, Any]]) -> None:
        if cap <= 0:
            raise ValueError("cap must be > 0")
        self.app, self.cap, self.answer = app, cap, answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared <= self.cap:
            await self.app(scope, receive, send)
            return
        kept: list[Message] = []
        size, head, complete = 0, b"", False
        while not complete:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            body = message.get("body", b"")
            size += len(body)
            complete = not message.get("more_body", False)
            if size > self.cap or (declared is not None and declared > self.cap):
                head = (head + b"".join(m.get("body", b"") for m in kept) + body)[:_HEAD]
                kept.clear()
                break
            kept.append(message)
        else:
            await self.app(scope, _replay(kept, receive), send)
            return
        while not complete:  # read the rest, keeping nothing but the head
            message = await receive()
            if message["type"] != "http.request":
                return
            if len(head) < _HEAD:
                head += message.get("body", b"")[:_HEAD - len(head)]
            complete = not message.get("more_body", False)
        await self._answer(request_id(head), _header(scope, b"mcp-protocol-version"), send)

    async def _answer(self, rid: Any, version: str | None, send: Send) -> None:
        if rid is None:  # not a JSON-RPC request we can answer: the transport's own refusal
            body, status, kind = b"Request body too large", 413, b"text/plain; charset=utf-8"
        else:
            body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": self.answer(version)},
                              ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            status, kind = 200, b"application/json"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode("ascii"))]})
        await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == wanted:
            return str(value.decode("latin-1").strip())
    return None


def _content_length(scope: Scope) -> int | None:
    text = _header(scope, b"content-length")
    return int(text) if text is not None and text.isdigit() else None


def _replay(kept: list[Message], receive: Receive) -> Receive:
    async def replay() -> Message:
        if kept:
            return kept.pop(0)
        return await receive()

    return replay
