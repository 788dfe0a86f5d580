"""The callers' ``mcp_config.json`` and ``serve-mcp``'s wait, named together.

The callers' client gives up on a call after the server entry's ``"timeout"`` (milliseconds; 60 s
without one) and reports only "sidecar unreachable"; ``serve-mcp`` answers "still running, call
again" after its wait, and the callers never call again. One call returns its result only when
the wait ends before the client gives up and covers the job. ``serve-mcp --client-timeout MS``
takes the very number the config gives and derives the wait from it (:func:`wait_for`);
:func:`config_problems` reads a config and says where an entry that starts or reaches mediafleet
would fail the callers (``mediafleet serve-mcp --check-config FILE``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CLIENT_DEFAULT_TIMEOUT_MS", "config_problems", "option_value", "wait_for"]

CLIENT_DEFAULT_TIMEOUT_MS = 60_000  # the callers' client without a "timeout" key
_MARGIN_S = 10.0  # answered this long before the client gives up (half the timeout, when it is short)


def wait_for(client_timeout_ms: int, longest_job_s: float) -> float:
    """The wait of a call whose client gives up after ``client_timeout_ms``: 10 s less (half of a
    timeout under 20 s); for ``0`` (the client's "no timeout") the longest a job may run."""
    if client_timeout_ms < 0:
        raise ValueError("a client timeout is a number of milliseconds >= 0")
    if client_timeout_ms == 0:
        return longest_job_s
    seconds = client_timeout_ms / 1000
    return seconds - min(_MARGIN_S, seconds / 2)


def option_value(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in a command line, else None."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _timeout(entry: Mapping[str, Any]) -> int | None:
    value = entry.get("timeout")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _runs_mediafleet(entry: Mapping[str, Any]) -> bool:
    command, args = str(entry.get("command", "")), entry.get("args") or []
    return command.rsplit("/", 1)[-1] == "mediafleet" and "serve-mcp" in args or (
        "mediafleet" in args and "serve-mcp" in args)


def config_problems(config: Mapping[str, Any], callers: Mapping[str, Sequence[str]], *,
                    http_client_timeout_ms: int | None = None, http_url: str | None = None) -> list[str]:
    """Where the callers' ``config`` would fail them, one line each (none: every call returns).

    Args:
        config: the callers' ``mcp_config.json``, parsed.
        callers: each server name the callers resolve -> the tools they send there (from the
            manifest: each capability's ``provider`` and ``tool``).
        http_client_timeout_ms: the ``--client-timeout`` of the HTTP server at ``http_url``, to
            compare with the entries that reach it.
        http_url: that server's ``/mcp`` URL.

    Checked for each name: an entry that starts ``mediafleet serve-mcp`` sets ``"timeout"``, passes
    the same number as ``--client-timeout``, serves the name's tools and sets
    ``MEDIAFLEET_ENGINE_OWNERS`` (else the callers' engine digests are not compared); an entry
    with the URL of the HTTP server sets a ``"timeout"`` no shorter than the server's.
    """
    servers = config.get("mcpServers")
    if not isinstance(servers, Mapping):
        return ["the config has no mcpServers object"]
    problems: list[str] = []
    for name, tools in callers.items():
        entry = servers.get(name)
        if not isinstance(entry, Mapping):
            continue  # not pointed at mediafleet: not ours to check
        timeout = _timeout(entry)
        if _runs_mediafleet(entry):
            args = [str(a) for a in entry.get("args") or []]
            if timeout is None:
                problems.append(f"{name}: no \"timeout\": the callers' client gives up after "
                                f"{CLIENT_DEFAULT_TIMEOUT_MS // 1000} s; set it above the longest job, in ms")
            given = option_value(args, "--client-timeout")
            if given is None:
                problems.append(f"{name}: serve-mcp has no --client-timeout: add \"--client-timeout\", "
                                f"\"{timeout if timeout is not None else CLIENT_DEFAULT_TIMEOUT_MS}\" to its args so "
                                "its wait ends before the client gives up")
            elif given != str(timeout if timeout is not None else CLIENT_DEFAULT_TIMEOUT_MS):
                problems.append(f"{name}: --client-timeout {given} is not the entry's \"timeout\" "
                                f"({timeout if timeout is not None else 'none: 60000'}); give both the same number")
            served = option_value(args, "--tools")
            missing = [t for t in tools if served is not None and t not in served.split(",")]
            if missing:
                problems.append(f"{name}: --tools leaves out {', '.join(missing)}, which the callers send there")
            env = entry.get("env") or {}
            if not isinstance(env, Mapping) or not str(env.get("MEDIAFLEET_ENGINE_OWNERS", "")).strip():
                problems.append(f"{name}: no MEDIAFLEET_ENGINE_OWNERS in its env: the callers' engine digests "
                                "cannot be compared (not_compared)")
        elif http_url is not None and str(entry.get("url", "")).rstrip("/") == http_url.rstrip("/"):
            wanted = http_client_timeout_ms if http_client_timeout_ms is not None else CLIENT_DEFAULT_TIMEOUT_MS
            if (timeout if timeout is not None else CLIENT_DEFAULT_TIMEOUT_MS) < wanted:
                problems.append(f"{name}: its \"timeout\" ({timeout if timeout is not None else 'none: 60000'}) "
                                f"is shorter than the server's --client-timeout {wanted}: the client gives up first")
    return problems
