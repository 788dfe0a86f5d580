"""The command line that starts a Python child process of mediafleet's own.

Every child runs this interpreter with ``-P`` (Python 3.11+): the working directory never joins
``sys.path``, so a job runner or a GPU probe started from a clone's root (or from any folder that
holds a ``mediafleet`` directory) imports the installed package, never whatever sits there.
"""

from __future__ import annotations

import sys

__all__ = ["python"]


def python(*args: str) -> list[str]:
    """``[sys.executable, "-P", *args]``: this interpreter, with the working directory kept off ``sys.path``."""
    return [sys.executable, "-P", *args]
