"""Result -> located evidence: one :class:`LocusDraft` per locus, with the extent it must fit in.

Pure functions, one module per modality, picked by the result's ``kind`` (its modality) from the
modality's spec (:attr:`mediafleet.modalities.spec.ModalitySpec.loci`).
"""

from __future__ import annotations

import weakref
from operator import is_
from typing import Any

from mediafleet.adapters.drafts import Bounds, LocusDraft
from mediafleet.adapters.nogc import collection_paused
from mediafleet.modalities.registry import for_modality

__all__ = ["Bounds", "LocusDraft", "last_mapped", "to_loci"]


# The last result mapped, its drafts and, once checked, whether they are valid (a list of one
# verdict, see checked_verdict). In-process, the worker's check and the bundle map the same
# (immutable) result one after the other: the second call reuses the first's drafts and verdict.
# The entry holds the result weakly and is dropped when the result is, so no document outlives its run.
_last: tuple[weakref.ref[Any], str, list[LocusDraft], list[bool]] | None = None


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
        drafts = _mapper(result.kind)(result, document_id)
    _last = (weakref.ref(result, _forget), document_id, drafts, [])
    return list(drafts)


def last_mapped(drafts: list[LocusDraft]) -> list[bool] | None:
    """When ``drafts`` are, item for item, the drafts :func:`to_loci` last made (the same
    objects, so the same frozen values), the place to keep their verdict in: a list empty until
    one is stored, dropped with the drafts. None for any other list."""
    last = _last
    if last is None:
        return None
    made = last[2]
    if len(drafts) != len(made) or not all(map(is_, drafts, made)):
        return None
    return last[3]


def _mapper(kind: str) -> Any:
    spec = for_modality(kind)
    if spec is None:
        raise ValueError(f"no registered modality maps {kind!r} results")
    return spec.loci.load()
