"""The registered modalities: the one list every generic part of the fleet iterates over.

Adding a modality is adding its folder (``workers/<modality>/`` with its extractor and
``spec.py``) and one line here. :func:`register` refuses, when this module is first imported (so
at the start of every process that sniffs, dispatches or works), a spec that is incomplete, names
a modality the contract has no result for, implements an action the shipped manifest does not
declare (or declares for another modality), or cannot sniff a media type its capability accepts.
:func:`check_refs` (run when a worker starts) also finds the module of every code part, without
importing it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import get_args

from mediafleet.contract.errors import ErrorCode, Unavailable
from mediafleet.contract.manifest import Manifest, Modality, default_manifest
from mediafleet.contract.results import RESULT_BY_MODALITY
from mediafleet.modalities.audio import SPEC as AUDIO
from mediafleet.modalities.image import SPEC as IMAGE
from mediafleet.modalities.pdf import SPEC as PDF
from mediafleet.modalities.spec import ModalitySpec, SpecError
from mediafleet.modalities.video import SPEC as VIDEO

__all__ = ["SPECS", "check_refs", "for_modality", "progress_unit", "register", "sniff", "spec_for"]

# Parts that a second spec of the same modality (a second engine) must share: they are looked up
# by modality (a result's kind, a bundle's artifact), not by action.
_SHARED = ("media_types", "progress_unit", "loci", "caller_shape", "summary")


def register(specs: Iterable[ModalitySpec], manifest: Manifest | None = None) -> tuple[ModalitySpec, ...]:
    """Check ``specs`` against each other, the contract and the shipped ``manifest``; returns them,
    in order (the order :func:`sniff` asks them in).

    Raises:
        SpecError: a spec is not a :class:`ModalitySpec`, repeats an action, disagrees with another
            spec of its modality, or disagrees with the contract or the manifest.
    """
    manifest = manifest or default_manifest()
    out: list[ModalitySpec] = []
    by_modality: dict[Modality, ModalitySpec] = {}
    for spec in specs:
        if not isinstance(spec, ModalitySpec):
            raise SpecError(f"{spec!r} is not a ModalitySpec")
        if any(s.action == spec.action for s in out):
            raise SpecError(f"two specs implement {spec.action}")
        if spec.modality.value not in RESULT_BY_MODALITY:
            raise SpecError(f"the contract lists no options and result for {spec.modality.value}")
        kind = get_args(spec.result.model_fields["kind"].annotation)
        if kind != (spec.modality.value,):
            raise SpecError(f"the contract's {spec.modality.value} result is tagged {kind}, not its modality")
        first = by_modality.setdefault(spec.modality, spec)
        for name in _SHARED:
            if getattr(spec, name) != getattr(first, name):
                raise SpecError(f"{spec.action} and {first.action} are both {spec.modality.value} but differ in {name}")
        capability = manifest.capabilities.get(spec.action)
        if capability is None:
            raise SpecError(f"the shipped manifest does not declare {spec.action}")
        if capability.modality != spec.modality:
            raise SpecError(f"the manifest declares {spec.action} as {capability.modality.value}, "
                            f"its spec as {spec.modality.value}")
        unsniffed = sorted(set(capability.media_types) - set(spec.media_types))
        if unsniffed:
            raise SpecError(f"{spec.action} accepts {', '.join(unsniffed)}, which its spec cannot sniff")
        unknown = sorted(set(capability.parts) - set(spec.parts))
        if unknown:
            raise SpecError(f"the manifest declares {spec.action} parts {', '.join(unknown)}, which its spec has no code for")
        for name, part in capability.parts.items():
            if part.action is not None and part.action not in manifest.capabilities:
                raise SpecError(f"{spec.action}'s {name} part runs {part.action}, which the manifest does not declare")
            if part.split is not None and part.split != spec.progress_unit:
                raise SpecError(f"{spec.action}'s {name} part splits by {part.split}, not its progress unit")
        out.append(spec)
    declared = {s.action for s in out}
    unserved = sorted(set(manifest.capabilities) - declared)
    if unserved:
        raise SpecError(f"the shipped manifest declares {', '.join(unserved)}, which no registered spec implements")
    return tuple(out)


def check_refs(specs: Iterable[ModalitySpec]) -> None:
    """Find the module of every code part of ``specs`` (importing only their packages).

    Raises:
        SpecError: a part names a module that is not there.
    """
    for spec in specs:
        for name, ref in spec.refs().items():
            try:
                found = importlib.util.find_spec(ref.module)
            except ModuleNotFoundError:
                found = None
            if found is None:
                raise SpecError(f"the {spec.action} spec's {name} names {ref.module}, which is not installed here")
        capability = default_manifest().capabilities.get(spec.action)
        for name, part in (capability.parts.items() if capability is not None else ()):
            if part.option != spec.parts[name].load().option:
                raise SpecError(f"{spec.action}'s {name} part is turned on by {part.option}, its code by another option")


# One line per modality. The order is the order sniff asks them in: audio before video (an ISO
# file of brand M4A is audio; any other is video).
SPECS: tuple[ModalitySpec, ...] = register((PDF, IMAGE, AUDIO, VIDEO))


def spec_for(action: str) -> ModalitySpec:
    """The registered spec that implements ``action``.

    Raises:
        Unavailable: no registered spec implements it (``capability_not_declared``).
    """
    for spec in SPECS:
        if spec.action == action:
            return spec
    raise Unavailable(f"this worker has no extractor for {action}", code=ErrorCode.CAPABILITY_NOT_DECLARED)


def for_modality(modality: Modality | str) -> ModalitySpec | None:
    """The first registered spec of ``modality`` (its modality-wide parts), or None."""
    for spec in SPECS:
        if spec.modality == modality:
            return spec
    return None


def progress_unit(action: str) -> str:
    """What a job of ``action`` counts its progress in (``items`` for an action no spec implements)."""
    return next((spec.progress_unit for spec in SPECS if spec.action == action), "items")


def sniff(head: bytes) -> str | None:
    """The media type of an artifact from its first bytes (each spec asked in turn), or None."""
    for spec in SPECS:
        if (media_type := spec.sniff(head)) is not None:
            return media_type
    return None
