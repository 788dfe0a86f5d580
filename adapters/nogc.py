"""Pausing Python's cyclic garbage collector while a long document's values are built.

Building a 500-page document's lines, loci and bundle allocates hundreds of thousands of small
dicts and models. Each allocation burst makes the cyclic collector traverse everything young (and,
as the heap grows, everything), which measured here as about as much time as the building itself.
Those values hold no reference cycles, so reference counting frees them alone and the collector
has nothing to find: it is paused for the span and resumed after (it then runs as usual).

Resuming alone would only defer the work: the first young collection after it would traverse
every object the span built and still holds (measured: about 15 ms for a 300-page document's
bundle). So what the span built is promoted to the oldest generation instead (``gc.freeze()``
then ``gc.unfreeze()``: two list splices, no traversal), where only a full collection looks at
it, as it would at objects that had survived. Nothing is leaked: a cycle among them is found by
the next full collection. Skipped when something else in the process froze objects (the freeze
count is not 0), so a deliberate freeze (before a fork, for instance) is never undone.
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
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        gc.enable()
