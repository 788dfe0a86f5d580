"""The one interface every extractor implements, and the table of where each one lives.

Extractors are plain functions of a local, digest-verified file: no broker, no settings, no
environment. Their modules are imported only when a job for their capability arrives, so a
PDF-only worker never imports Whisper.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Protocol

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel

from mediafleet.contract.errors import ErrorCode, Unavailable
from mediafleet.contract.manifest import Capability, DeviceClass, Limits
from mediafleet.workers.sink import BlobSink

__all__ = ["DEVICE_CHECKS", "EXTRACTORS", "Extractor", "ProgressFn", "check_devices", "load_extractor"]

ProgressFn = Callable[[int, "int | None"], None]


class Extractor(Protocol):
    """``extract(path, options, limits, progress=None, sink=None) -> result``.

    ``path`` is a local, digest-verified file; ``progress(done, total)`` reports advance;
    ``sink`` (a :class:`mediafleet.workers.sink.BlobSink`) stores derived bytes and returns their digests.
    """

    def __call__(
        self,
        path: Path,
        options: BaseModel,
        limits: Limits,
        progress: ProgressFn | None = None,
        sink: BlobSink | None = None,
    ) -> BaseModel: ...


# action -> "module:function"
EXTRACTORS: dict[str, str] = {
    "ocr_pdf": "mediafleet.workers.pdf.textlayer:extract_pdf",
    "extract_keyframes": "mediafleet.workers.video.extract:extract_keyframes",
    "transcribe_segments": "mediafleet.workers.audio.transcribe:extract_audio",
    "analyze_image": "mediafleet.workers.image.analyze:analyze_image",
}


# action -> "module:function(device: DeviceClass) -> None": run once when a worker starts, before
# any fork; raises Unavailable with a clear message when the device class cannot really be served
# (e.g. a GPU worker with no visible GPU). Must not create models or initialise CUDA contexts.
DEVICE_CHECKS: dict[str, str] = {
    "transcribe_segments": "mediafleet.workers.audio.model:check_device",
    "ocr_pdf": "mediafleet.workers.ocr.device:check_device",
    "analyze_image": "mediafleet.workers.ocr.device:check_device",
}


def check_devices(manifest_actions: list[str], device: DeviceClass) -> None:
    """Run the start-up device check of every action a worker serves.

    Raises:
        Unavailable: a check found the device class unusable here.
    """
    for action in manifest_actions:
        spec = DEVICE_CHECKS.get(action)
        if spec is not None:
            _import(spec)(device)  # type: ignore[call-arg,arg-type]


@cache
def _import(spec: str) -> Extractor:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def load_extractor(capability: Capability) -> Extractor:
    """The extractor for a declared capability, after checking its engine is installed as declared.

    Raises:
        Unavailable: no extractor for the action, or the engine is missing or of another version.
    """
    spec = EXTRACTORS.get(capability.action)
    if spec is None:
        raise Unavailable(f"this worker has no extractor for {capability.action}", code=ErrorCode.CAPABILITY_NOT_DECLARED)
    try:
        installed = metadata.version(capability.engine.name)
    except metadata.PackageNotFoundError as exc:
        raise Unavailable(f"the {capability.engine.name} engine is not installed on this worker") from exc
    try:
        wanted = SpecifierSet(capability.engine.version)
    except InvalidSpecifier as exc:
        raise Unavailable("the manifest's engine version is not a valid specifier") from exc
    if installed not in wanted:
        raise Unavailable(f"{capability.engine.name} {installed} does not satisfy {capability.engine.version}")
    try:
        return _import(spec)
    except ImportError as exc:
        raise Unavailable(f"the {capability.action} extractor cannot be loaded on this worker") from exc
