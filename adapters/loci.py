"""Result -> located evidence: one :class:`LocusDraft` per locus, with the extent it must fit in.

Pure functions, one module per modality, picked by the result's ``kind``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from mediafleet.adapters.audio import audio_loci
from mediafleet.adapters.drafts import Bounds, LocusDraft
from mediafleet.adapters.image import image_loci
from mediafleet.adapters.nogc import collection_paused
from mediafleet.adapters.pdf import pdf_loci
from mediafleet.adapters.video import video_loci

__all__ = ["Bounds", "LocusDraft", "to_loci"]

# result kind -> mapping; each modality adds its own line here
_BY_KIND: dict[str, Callable[[Any, str], list[LocusDraft]]] = {
    "pdf": pdf_loci,
    "audio": audio_loci,
    "video": video_loci,
    "image": image_loci,
}


# The last result mapped and its drafts. In-process, the worker's check and the bundle map the
# same (immutable) result one after the other: the second call reuses the first's drafts. The
# entry holds the result weakly and is dropped when the result is, so no document outlives its run.
_last: tuple[weakref.ref[Any], str, list[LocusDraft]] | None = None


def _forget(gone: weakref.ref[Any]) -> None:
    global _last
    if _last is not None and _last[0] is gone:
        _last = None


def to_loci(result: Any, document_id: str) -> list[LocusDraft]:
    """Every locus of a result, in a stable order (the order fixes the locus ids).

    ``document_id`` names the artifact in node properties (e.g. ``<document>:page<n>``).
    """
    global _last
    last = _last
    if last is not None and last[0]() is result and last[1] == document_id:
        return list(last[2])
    with collection_paused():  # one draft per line of a long document, none in a cycle
        drafts = _BY_KIND[result.kind](result, document_id)
    _last = (weakref.ref(result, _forget), document_id, drafts)
    return list(drafts)
