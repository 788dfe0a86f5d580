"""``mediafleet``, the command line. ``main`` is imported on first use (the console script names
``mediafleet.cli:main``), so importing a submodule such as :mod:`.inputs` loads no parser."""

from __future__ import annotations

from typing import Any

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from mediafleet.cli.entry import main

        return main
    raise AttributeError(f"module 'mediafleet.cli' has no attribute {name!r}")
