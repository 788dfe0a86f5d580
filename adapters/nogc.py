"""Pausing Python's cyclic garbage collector while a long document's values are built.

Building a 500-page document's lines, loci and bundle allocates hundreds of thousands of small
dicts and models. Each allocation burst makes the cyclic collector traverse everything young (and,
as the heap grows, everything), which measured here as about as much time as the building itself.
Those values hold no reference cycles, so reference counting frees them alone and the collector
has nothing to find: it is paused for the span and resumed after (it then runs as usual).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collection_paused"]


@contextmanager
def collection_paused() -> Iterator[None]:
    """Pause cyclic garbage collection for the ``with`` body when it is on; resume it after.

    Nested or concurrent uses are safe: only the use that paused it resumes it.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
