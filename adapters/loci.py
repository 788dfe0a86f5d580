"""Result -> located evidence: one :class:`LocusDraft` per locus, with the extent it must fit in.

Pure functions, one module per modality, picked by the result's ``kind``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters.audio import audio_loci
from adapters.drafts import Bounds, LocusDraft
from adapters.image import image_loci
from adapters.nogc import collection_paused
from adapters.pdf import pdf_loci
from adapters.video import video_loci

__all__ = ["Bounds", "LocusDraft", "to_loci"]

# result kind -> mapping; each modality adds its own line here
_BY_KIND: dict[str, Callable[[Any, str], list[LocusDraft]]] = {
    "pdf": pdf_loci,
    "audio": audio_loci,
    "video": video_loci,
    "image": image_loci,
}


def to_loci(result: Any, document_id: str) -> list[LocusDraft]:
    """Every locus of a result, in a stable order (the order fixes the locus ids).

    ``document_id`` names the artifact in node properties (e.g. ``<document>:page<n>``).
    """
    with collection_paused():  # one draft per line of a long document, none in a cycle
        return _BY_KIND[result.kind](result, document_id)
