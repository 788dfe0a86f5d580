"""An upstream MCP server behind ``mediafleet serve-mcp``: serve under a catalog server's name, lose none of its tools.

The callers hard-code the server names ``stirlingpdf-mcp``, ``data-science-mcp`` and
``audio-transcriber-mcp``. Those are real catalog servers with tools of their own
(``data-science-mcp`` also serves ``deep_train_predict``; stirlingpdf's ``pdf_action`` routes many
actions besides ``ocr_pdf``). A user who points one of those names at mediafleet names the real
server as its *upstream*; mediafleet then answers the calls that are its own and forwards every
other call, verbatim, to the upstream:

* :func:`route` decides, per call: ours only when the tool is one mediafleet serves **and** the
  call's ``action`` argument is the action mediafleet serves for that tool; everything else goes
  upstream (including a call to one of our tool names with another action, or with no action).
* :func:`merge_tools` builds the listing: the upstream's tools as they are, ours beside them; for
  a tool name both serve, the upstream's definition (its action-routed input schema is the
  superset), widened to accept our action and arguments, its description saying which action
  mediafleet serves, and no output schema (its results now come from two servers).
* :class:`Upstream` holds one long-lived client session to the upstream, a stdio command
  (``stdio:<shell-quoted command line>``) or a streamable HTTP URL. A call forwarded to an upstream
  that cannot be reached, or whose session breaks, is answered (not raised) with the result of
  :func:`unavailable_result`; the next call reconnects, at most one attempt per call.

Use it from inside the server's event loop, around the whole serving (stdio or HTTP), so the
session is opened once and closed (its child process stopped) when serving ends::

    async with Upstream.from_spec(spec) as upstream:
        theirs = await upstream.list_tools()          # raises UpstreamUnavailable when down
        ...
        if route(name, arguments, TOOLS) == "upstream":
            return await upstream.call_tool(name, arguments)

Nothing here names a secret: errors and logs carry :attr:`Upstream.label` (the program's name, or
the URL's scheme, host and port), never the command line, the environment, the URL's path,
query or credentials, or the headers.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import shlex
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Literal, Self, TextIO
from urllib.parse import urlsplit

import anyio
from mcp import ClientSession, MCPError, types

__all__ = [
    "UNAVAILABLE",
    "Upstream",
    "UpstreamUnavailable",
    "merge_tools",
    "route",
    "unavailable_result",
]

log = logging.getLogger("mediafleet.mcp.upstream")

# The JSON text of a call that could not reach the upstream: the callers' failure channel.
UNAVAILABLE: dict[str, Any] = {
    "available": False,
    "error": "upstream_unavailable: the upstream server cannot be reached",
    "error_code": "upstream_unavailable",
    "retryable": True,
}

_CONNECTION_CLOSED = -32000  # mcp_types.CONNECTION_CLOSED: the transport closed under a request
_INTERNAL_ERROR = -32603
_MAX_LIST_PAGES = 100


class UpstreamUnavailable(ConnectionError):
    """The upstream server cannot be reached (raised by :meth:`Upstream.list_tools` only)."""


def unavailable_result(*, is_error: bool = True) -> types.CallToolResult:
    """The answer to a forwarded call whose upstream cannot be reached: text only, ``UNAVAILABLE``."""
    text = json.dumps(UNAVAILABLE, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


# -- routing and listing: pure functions ------------------------------------------------------------


def route(tool: str, arguments: Mapping[str, Any] | None,
          served_actions: Mapping[str, str]) -> Literal["ours", "upstream"]:
    """Whose call this is, when an upstream is configured.

    Args:
        tool: the called tool's name.
        arguments: the call's arguments (``None`` when the caller sent none).
        served_actions: the tools mediafleet serves here -> the one action it serves for each.

    Returns ``"ours"`` only when ``tool`` is served here and ``arguments["action"]`` equals its
    action (same type, same text: no case folding, no trimming); ``"upstream"`` otherwise.
    """
    action = served_actions.get(tool)
    if action is None or not isinstance(arguments, Mapping):
        return "upstream"
    called = arguments.get("action")
    return "ours" if isinstance(called, str) and called == action else "upstream"


def _our_action(tool: types.Tool, served: Collection[str] | Mapping[str, str]) -> str | None:
    """The action mediafleet serves for ``tool``: from ``served`` when it maps, else the schema's one enum."""
    if isinstance(served, Mapping):
        action = served.get(tool.name)
        return action if isinstance(action, str) else None
    spec = (tool.input_schema.get("properties") or {}).get("action")
    enum = spec.get("enum") if isinstance(spec, dict) else None
    return enum[0] if isinstance(enum, list) and len(enum) == 1 and isinstance(enum[0], str) else None


def _widened(theirs: dict[str, Any], ours: dict[str, Any], action: str | None) -> dict[str, Any]:
    """Their input schema, accepting our calls too: our action in their action enum, our properties added.

    Nothing of theirs is removed or narrowed (their ``required`` stays theirs); a schema without
    ``properties`` is left as it is.
    """
    schema = copy.deepcopy(theirs)
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return schema
    for name, spec in (ours.get("properties") or {}).items():
        if name not in properties:
            properties[name] = copy.deepcopy(spec)
    enum = properties.get("action", {}).get("enum") if isinstance(properties.get("action"), dict) else None
    if action is not None and isinstance(enum, list) and action not in enum:
        enum.append(action)
    return schema


def _shared_description(theirs: types.Tool, ours: types.Tool, action: str | None) -> str:
    if action is not None:
        note = (f"Action {action!r} of this tool is served by mediafleet ({ours.description or action}); "
                "every other action is answered by the upstream server.")
    else:
        note = "Some calls to this tool are served by mediafleet; the others by the upstream server."
    return f"{theirs.description}\n\n{note}" if theirs.description else note


def merge_tools(ours: list[types.Tool], theirs: list[types.Tool],
                served: Collection[str] | Mapping[str, str]) -> list[types.Tool]:
    """The listing of mediafleet in front of an upstream. Pure: the inputs are not changed.

    Args:
        ours: mediafleet's tool definitions.
        theirs: the upstream's tool definitions (:meth:`Upstream.list_tools`).
        served: the names of our tools served here (a tool of ``ours`` not in it is not listed as
            ours); a mapping tool -> action (such as ``mcp_server.TOOLS``) also names the action,
            which is otherwise read from our input schema's one ``action`` enum value.

    Returns the upstream's tools in their order (the first of a repeated name), then our served
    tools they do not have. A name both serve is listed once, as theirs, with its input schema
    widened to accept our action and arguments (:func:`_widened`), its description saying which
    action mediafleet serves, and its output schema dropped: results of our action do not follow
    the upstream's output schema, and a client validating them against it would refuse them.
    """
    mine = {tool.name: tool for tool in ours if tool.name in served}
    out: list[types.Tool] = []
    seen: set[str] = set()
    for tool in theirs:
        if tool.name in seen:
            continue
        seen.add(tool.name)
        our = mine.get(tool.name)
        if our is None:
            out.append(tool)
            continue
        action = _our_action(our, served)
        out.append(tool.model_copy(update={
            "description": _shared_description(tool, our, action),
            "input_schema": _widened(tool.input_schema, our.input_schema, action),
            "output_schema": None,
        }))
    out.extend(tool for name, tool in mine.items() if name not in seen)
    return out


# -- the connection ---------------------------------------------------------------------------------


@dataclass(eq=False)
class _Connection:
    """One client session, held open by its own task (anyio scopes are entered and left by one task)."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    ready: anyio.Event = field(default_factory=anyio.Event)  # set once initialized, or once failed
    stop: anyio.Event = field(default_factory=anyio.Event)  # set to close the session
    done: anyio.Event = field(default_factory=anyio.Event)  # set once the session is gone
    session: ClientSession | None = None

    @property
    def live(self) -> bool:
        return self.session is not None and not self.done.is_set() and not self.stop.is_set()


class _Broken(Exception):
    """The session ended under a request."""


def _kinds(exc: BaseException) -> str:
    """The exception's type names (flattening groups): what a log may say, never the message."""
    if isinstance(exc, BaseExceptionGroup):
        return ", ".join(sorted({_kinds(e) for e in exc.exceptions}))
    return type(exc).__name__


class Upstream:
    """One upstream MCP server, reached over stdio (a command) or streamable HTTP (a URL).

    Args:
        command: the program and its arguments (stdio); exactly one of ``command`` and ``url``.
        url: the upstream's streamable HTTP endpoint, ``http://`` or ``https://``.
        env: stdio only: variables set for the upstream process, over the SDK's short default
            environment (``HOME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``, ``LOGNAME``); nothing
            else of this process's environment is passed on.
        cwd: stdio only: the upstream process's working directory.
        headers: HTTP only: headers sent with every request (an ``Authorization``, say).
        connect_timeout_s: how long one connection attempt (spawn or connect, then ``initialize``)
            may take before the upstream counts as unreachable.
        read_timeout_s: HTTP only: the longest wait for a response's bytes (``None``: no limit, as
            a forwarded call takes as long as the upstream takes; the caller's timeout governs).
        errlog: stdio only: where the upstream's stderr goes (a real file; default this stderr).
        unavailable_is_error: the ``isError`` of :func:`unavailable_result` answers.
    """

    def __init__(self, *, command: Sequence[str] | None = None, url: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 headers: Mapping[str, str] | None = None, connect_timeout_s: float = 30.0,
                 read_timeout_s: float | None = None, errlog: TextIO | None = None,
                 unavailable_is_error: bool = True) -> None:
        if (command is None) == (url is None):
            raise ValueError("an upstream is either a command (stdio) or a URL (streamable HTTP)")
        if command is not None:
            command = list(command)
            if not command or not command[0] or not all(isinstance(part, str) for part in command):
                raise ValueError("an upstream stdio command is a program and its arguments, as strings")
            if headers:
                raise ValueError("headers are for an HTTP upstream; a stdio upstream takes env")
            self.label = "stdio:" + PurePath(command[0]).name
        else:
            if env is not None or cwd is not None:
                raise ValueError("env and cwd are for a stdio upstream; an HTTP upstream takes headers")
            self.label = _http_label(url)  # type: ignore[arg-type]  # raises ValueError
        if connect_timeout_s <= 0:
            raise ValueError("connect_timeout_s must be > 0")
        self.command = command
        self.url = url
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.headers = dict(headers) if headers is not None else None
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.errlog = errlog
        self.unavailable_is_error = unavailable_is_error
        #: The upstream's tools as last listed (empty until a listing succeeds).
        self.last_tools: list[types.Tool] = []
        self._conn: _Connection | None = None
        self._conns: set[_Connection] = set()
        self._attempts = 0
        self._lock: anyio.Lock | None = None
        self._tg: Any = None
        self._closing = False

    def __repr__(self) -> str:
        return f"Upstream({self.label})"

    @classmethod
    def from_spec(cls, spec: str, **options: Any) -> Upstream:
        """An upstream from the user's one-string spec: ``stdio:<command line>`` or an HTTP(S) URL.

        The command line is split as a POSIX shell would (``shlex``: quotes, no expansion, no
        shell run). ``options`` are the constructor's (``env``, ``headers``, timeouts, ...).
        Anything else is refused with a ``ValueError`` that does not repeat the spec.
        """
        if not isinstance(spec, str) or not spec.strip():
            raise ValueError("an upstream spec is 'stdio:<command line>' or an http:// or https:// URL; got none")
        spec = spec.strip()
        if spec.startswith("stdio:"):
            try:
                command = shlex.split(spec[len("stdio:"):])
            except ValueError:
                raise ValueError("the upstream's stdio command line is not valid shell quoting") from None
            if not command:
                raise ValueError("the upstream spec 'stdio:' names no command")
            return cls(command=command, **options)
        if spec.split(":", 1)[0].lower() in ("http", "https"):
            return cls(url=spec, **options)
        raise ValueError("an upstream spec is 'stdio:<command line>' or an http:// or https:// URL; "
                         "this one is neither (not repeated here: it may hold a secret)")

    # -- lifetime -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise RuntimeError("this Upstream is already open")
        self._closing = False
        self._lock = anyio.Lock()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        async with self._lock:
            if await self._open() is None:
                log.warning("upstream %s cannot be reached now; each forwarded call tries again", self.label)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Every session is told to close (a stdio upstream: stdin closed, then the SDK's bounded
        # wait-and-kill); the body's own exception, if any, then propagates as it is.
        self._closing = True
        for conn in list(self._conns):
            self._close(conn)
        tg, self._tg = self._tg, None
        try:
            await tg.__aexit__(None, None, None)
        finally:
            self._conn = None
            self._lock = None

    @property
    def connected(self) -> bool:
        """A session is open now (the next call does not need to connect)."""
        return self._conn is not None and self._conn.live

    def _close(self, conn: _Connection) -> None:
        conn.stop.set()
        if not conn.ready.is_set():  # still connecting: nothing to close gracefully
            conn.scope.cancel()
        if self._conn is conn:
            self._conn = None

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        if self.command is not None:
            from mcp import StdioServerParameters, stdio_client

            params = StdioServerParameters(command=self.command[0], args=self.command[1:], env=self.env, cwd=self.cwd)
            return stdio_client(params, errlog=self.errlog if self.errlog is not None else sys.stderr)
        import httpx2
        from mcp.shared._httpx_utils import create_mcp_http_client

        timeout = httpx2.Timeout(self.connect_timeout_s, read=self.read_timeout_s)
        client = create_mcp_http_client(headers=self.headers, timeout=timeout)
        return _http_transport(client, self.url)  # type: ignore[arg-type]

    async def _hold(self, conn: _Connection) -> None:
        """Open the session, keep it until told to stop, close it: all in this one task."""
        try:
            with conn.scope:
                async with contextlib.AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._transport())
                    session = await stack.enter_async_context(ClientSession(read, write))
                    await session.initialize()
                    conn.session = session
                    conn.ready.set()
                    await conn.stop.wait()
        except Exception as exc:  # noqa: BLE001 - unreachable or broken: reported by the callers of _open
            log.warning("upstream %s: the session ended (%s)", self.label, _kinds(exc))
        finally:
            conn.session = None
            conn.ready.set()
            conn.done.set()
            self._conns.discard(conn)
            if self._conn is conn:
                self._conn = None

    async def _open(self) -> _Connection | None:
        """One connection attempt, bounded by ``connect_timeout_s`` (the caller holds the lock)."""
        self._attempts += 1
        if self._closing or self._tg is None:
            return None
        conn = _Connection()
        self._conns.add(conn)
        self._tg.start_soon(self._hold, conn)
        with anyio.move_on_after(self.connect_timeout_s):
            await conn.ready.wait()
        if not conn.live:
            self._close(conn)
            return None
        self._conn = conn
        return conn

    async def _live(self) -> _Connection | None:
        """The open session, or one new attempt at it (none when another call's attempt just failed)."""
        if self._lock is None:
            raise RuntimeError("use the Upstream inside 'async with'")
        conn = self._conn
        if conn is not None and conn.live:
            return conn
        attempts = self._attempts
        async with self._lock:
            conn = self._conn
            if conn is not None and conn.live:
                return conn
            if self._attempts != attempts:  # another call tried while this one waited, and failed
                return None
            return await self._open()

    async def _request(self, conn: _Connection, send: Any) -> Any:
        """``await send(session)``, cut short (``_Broken``) if the session ends meanwhile."""
        session = conn.session
        if session is None or not conn.live:
            raise _Broken
        outcome: list[Any] = []
        failure: list[Exception] = []
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                await conn.done.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                outcome.append(await send(session))
            except Exception as exc:  # noqa: BLE001 - re-raised below, unwrapped by the task group
                failure.append(exc)
            tg.cancel_scope.cancel()
        if failure:
            raise failure[0]
        if not outcome:
            raise _Broken
        return outcome[0]

    # -- the two calls ---------------------------------------------------------------------------

    async def list_tools(self) -> list[types.Tool]:
        """The upstream's tools, every page; also kept as :attr:`last_tools`.

        Raises:
            UpstreamUnavailable: it cannot be reached (or the session broke while listing).
            MCPError: the upstream answered the listing with an error.
        """
        conn = await self._live()
        if conn is None:
            raise UpstreamUnavailable(f"the upstream server cannot be reached ({self.label})")
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(_MAX_LIST_PAGES):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
                result = await self._request(conn, lambda s, p=params: s.list_tools(params=p))
                tools.extend(result.tools)
                cursor = result.next_cursor
                if cursor is None:
                    break
        except (_Broken, MCPError) as exc:
            if isinstance(exc, MCPError) and exc.code != _CONNECTION_CLOSED:
                raise
            self._close(conn)
            raise UpstreamUnavailable(f"the upstream server cannot be reached ({self.label})") from None
        self.last_tools = tools
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Forward one call verbatim; the upstream's result as it is (``isError`` included).

        The result is not checked against the upstream's output schema here: the calling client
        does that against the listing. An upstream that cannot be reached, or a session that breaks
        under the call, gives :func:`unavailable_result` (the call is not retried: it may have run).

        Raises:
            MCPError: the upstream answered with a JSON-RPC error (relayed as it is by the server),
                or with something that is not a tool result.
        """
        conn = await self._live()
        if conn is None:
            return unavailable_result(is_error=self.unavailable_is_error)
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
        try:
            return await self._request(conn, lambda s: s.send_request(request, types.CallToolResult))
        except (_Broken, MCPError) as exc:
            if isinstance(exc, MCPError) and exc.code != _CONNECTION_CLOSED:
                raise
            log.warning("upstream %s: the session broke under a call; the next call reconnects", self.label)
            self._close(conn)
            return unavailable_result(is_error=self.unavailable_is_error)
        except ValueError:  # pydantic's ValidationError: an answer that is no CallToolResult
            raise MCPError(code=_INTERNAL_ERROR, message="the upstream server's answer is not a tool result") from None


@contextlib.asynccontextmanager
async def _http_transport(client: Any, url: str) -> Any:
    from mcp.client.streamable_http import streamable_http_client

    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def _http_label(url: str) -> str:
    """``scheme://host[:port]`` of an upstream URL, checked; never its credentials, path or query."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("the upstream URL is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("the upstream URL must be http:// or https:// with a host")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")
