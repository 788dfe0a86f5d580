"""One-line messages the commands print: an exception's first line, the broker without its secrets."""

from __future__ import annotations

from typing import Any

__all__ = ["broker_shown", "first_line"]


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else "no detail"

def broker_shown(settings: Any) -> str:
    """The broker as ``scheme://host:port``: no password, no database path."""
    from urllib.parse import urlsplit

    parts = urlsplit(settings.broker_url or "")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}" if parts.hostname else "the broker"
