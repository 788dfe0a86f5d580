"""What a modality is to the fleet: one :class:`ModalitySpec`, defined beside its extractor.

Each modality's folder (``workers/<modality>/spec.py``) defines a ``SPEC`` holding every part that
is specific to it, and :mod:`mediafleet.modalities.registry` lists them. Everything generic (the
manifest checks, the runner, the Celery task, the adapters, the MCP tools, the CLI) looks the
part up through the registry and never branches on a modality's name.

Code parts are :class:`Ref` s (``"package.module:attribute"``), imported on first use: reading
the registry imports no engine, so a PDF-only worker never imports Whisper.

The facts a capability shares with the callers and the operator (action, tool, media types it
accepts, limits, engine, **extractor version**) stay in the manifest, the only source of truth;
a spec reads its extractor version from there (:attr:`ModalitySpec.extractor_version`), so the
job id, the derivation ref and every locus id derive from that one value.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from mediafleet.contract.manifest import Capability, DeviceClass, Limits, Modality, default_manifest
from mediafleet.contract.results import OPTIONS_BY_MODALITY, RESULT_BY_MODALITY

if TYPE_CHECKING:
    from mediafleet.adapters.drafts import LocusDraft
    from mediafleet.contract.bundle import EvidenceBundle
    from mediafleet.workers.sink import BlobSink

__all__ = [
    "CallerShape",
    "DeviceCheck",
    "Extractor",
    "LociMapper",
    "ModalitySpec",
    "Numerics",
    "ProgressFn",
    "ReadCheck",
    "Ref",
    "SpecError",
    "Summary",
    "SPEECH_NUMERICS",
    "THREAD_NUMERICS",
    "no_device_check",
    "reads_whole",
    "threads_change_numbers",
]

ProgressFn = Callable[[int, "int | None"], None]
"""``progress(done, total)``: how far a job has come, in its spec's ``progress_unit``."""

T = TypeVar("T")
_REF = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


class SpecError(ValueError):
    """A modality spec that is incomplete, malformed or disagrees with the contract or manifest."""


class Extractor(Protocol):
    """``extract(path, options, limits, progress=None, sink=None) -> result``.

    Args:
        path: a local file holding the (digest-verified) artifact.
        options: the capability's options (its modality's options model).
        limits: the manifest's limits for the capability.
        progress: called with (done, total) as the work advances, in the spec's progress unit.
        sink: a :class:`mediafleet.workers.sink.BlobSink` that stores derived bytes (thumbnails,
            keyframes) and returns their digests.

    Returns:
        The modality's result model, its ``producer`` naming the spec's extractor and version.
    """

    def __call__(
        self,
        path: Path,
        options: Any,
        limits: Limits,
        progress: ProgressFn | None = None,
        sink: BlobSink | None = None,
    ) -> BaseModel: ...


DeviceCheck = Callable[[DeviceClass], None]
"""Run once when a worker starts, before any fork: raises ``Unavailable`` with a clear message
when the device class cannot really be served. Must create no model and no CUDA context."""

ReadCheck = Callable[[Path], bool]
"""Whether the (digest-verified) artifact reads whole; False only marks the claim unverified."""

Numerics = Callable[[Mapping[str, Any]], frozenset[str]]
"""``numerics(options)``: which engine settings change the numbers of a job with these options
(names from :data:`THREAD_NUMERICS` and :data:`SPEECH_NUMERICS`), so its job id names them; empty
for work no setting changes. :func:`mediafleet.workers.engines.numerics` gives their values."""

THREAD_NUMERICS = frozenset({"threads"})
"""An engine whose floating-point reductions depend on its thread count (onnxruntime's OCR)."""
SPEECH_NUMERICS = frozenset({"threads", "speech_batch"})
"""Whisper (CTranslate2): the thread count, and the windows a batch (a word's time can move by a frame with it)."""

LociMapper = Callable[[Any, str], "list[LocusDraft]"]
"""``loci(result, document_id)``: every locus of a result, in a stable order."""

CallerShape = Callable[["EvidenceBundle", Mapping[str, str]], dict[str, Any]]
"""``shape(bundle, inline)``: the response today's callers parse, read from the bundle's loci."""

Summary = Callable[[list[tuple[dict[str, Any], dict[str, Any]]]], list[str]]
"""``summary(loci)``: a few lines a person reads (the CLI's summary, the report's heading) from an
``ok`` bundle's loci, each an (address, Evidence properties) pair in the bundle's order; the first
line says what was found, the others quote a little of it."""


@dataclass(frozen=True)
class Ref(Generic[T]):
    """A lazily imported ``"package.module:attribute"``."""

    path: str

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not _REF.fullmatch(self.path):
            raise SpecError(f"{self.path!r} is not a 'package.module:attribute' reference")

    @property
    def module(self) -> str:
        return self.path.partition(":")[0]

    def load(self) -> T:
        """The attribute, importing its module on first use."""
        return resolve(self.path)  # type: ignore[no-any-return]


@cache
def resolve(path: str) -> Any:
    """``"package.module:attribute"`` -> the attribute (imported once per process)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def no_device_check(device: DeviceClass) -> None:
    """The device check of an extractor that needs nothing of its device beyond what the
    manifest's device classes already say."""


def reads_whole(path: Path) -> bool:
    """The read check of a modality whose extractor itself refuses what does not read whole."""
    return True


def threads_change_numbers(options: Mapping[str, Any]) -> frozenset[str]:
    """The numerics of a modality whose every job runs a thread-dependent engine."""
    return THREAD_NUMERICS


@dataclass(frozen=True)
class ModalitySpec:
    """Everything specific to one modality's capability; every field is required.

    Attributes:
        modality: the modality (its contract module holds the options and result models).
        action: the manifest capability it implements (the callers' action).
        extractor_name: names the extractor in every result's ``producer``.
        media_types: every type :attr:`sniff` can answer; the manifest's capability accepts a subset.
        sniff: the media type from an artifact's first bytes, or None when it is not this modality's.
        extractor: the pure extractor (:class:`Extractor`).
        device_check: the worker's start-up check of a device class (:data:`DeviceCheck`);
            :func:`no_device_check` when there is nothing to check.
        read_check: run on the verified file before extracting (:data:`ReadCheck`);
            :func:`reads_whole` when the extractor needs none.
        progress_unit: what ``progress(done, total)`` counts (``pages``, ``seconds``, ``frames``).
        loci: the adapter from a result to loci (:data:`LociMapper`).
        caller_shape: the callers' response for an ``ok`` bundle (:data:`CallerShape`).
        summary: what the CLI prints for an ``ok`` bundle (:data:`Summary`).
        opencv: whether the extractor needs OpenCV (the CLI checks it loads before running).
        numerics: which engine settings change a job's numbers, given its options (:data:`Numerics`).
        parts: the code of each part the manifest may declare for the capability, by part name
            (a :class:`mediafleet.workers.parts.PartKind`); none for a job that never fans out.
    """

    modality: Modality
    action: str
    extractor_name: str
    media_types: tuple[str, ...]
    sniff: Callable[[bytes], str | None]
    extractor: Ref[Extractor]
    device_check: Ref[DeviceCheck]
    read_check: Ref[ReadCheck]
    progress_unit: str
    loci: Ref[LociMapper]
    caller_shape: Ref[CallerShape]
    summary: Ref[Summary]
    opencv: bool
    numerics: Numerics
    parts: Mapping[str, Ref[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [f.name for f in fields(self) if getattr(self, f.name) in (None, "", ())]
        if missing:
            raise SpecError(f"the {self.action or '?'} spec lacks {', '.join(missing)}")
        if not isinstance(self.modality, Modality):
            raise SpecError(f"the {self.action} spec's modality is not one of the contract's")
        for f in fields(self):
            if str(f.type).startswith("Ref[") and not isinstance(getattr(self, f.name), Ref):
                raise SpecError(f"the {self.action} spec's {f.name} is not a Ref")
        for name in ("action", "extractor_name", "progress_unit"):
            if not isinstance(getattr(self, name), str):
                raise SpecError(f"the {self.action} spec's {name} is not a string")
        if not isinstance(self.media_types, tuple) or not all(
                isinstance(t, str) and "/" in t for t in self.media_types):
            raise SpecError(f"the {self.action} spec's media_types is not a tuple of media types")
        if not callable(self.sniff):
            raise SpecError(f"the {self.action} spec's sniff is not a function")
        if not callable(self.numerics):
            raise SpecError(f"the {self.action} spec's numerics is not a function")
        if not isinstance(self.opencv, bool):
            raise SpecError(f"the {self.action} spec's opencv is not true or false")
        if not isinstance(self.parts, Mapping) or not all(
                isinstance(k, str) and isinstance(v, Ref) for k, v in self.parts.items()):
            raise SpecError(f"the {self.action} spec's parts is not a mapping of names to Refs")

    @property
    def options(self) -> type[BaseModel]:
        """The modality's options model (from the contract)."""
        return OPTIONS_BY_MODALITY[self.modality.value]

    @property
    def result(self) -> type[BaseModel]:
        """The modality's result model (from the contract; its tag ``kind`` is the modality)."""
        return RESULT_BY_MODALITY[self.modality.value]

    @property
    def capability(self) -> Capability:
        """The shipped manifest's capability for :attr:`action` (an operator's file may narrow it,
        never change its engine or extractor version)."""
        return default_manifest().capability(self.action)

    @property
    def extractor_version(self) -> str:
        """The extractor's version: the manifest's, the one value every id derives from."""
        return self.capability.extractor_version

    def refs(self) -> dict[str, Ref[Any]]:
        """The spec's code parts by field name."""
        refs = {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Ref)}
        return refs | {f"parts.{name}": ref for name, ref in self.parts.items()}
