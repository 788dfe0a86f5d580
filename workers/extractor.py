"""Loading extractors: the action -> extractor table (from the registered specs) and the
start-up device checks.

Extractors are plain functions of a local, digest-verified file: no broker, no settings, no
environment (the interface is :class:`mediafleet.modalities.spec.Extractor`). Their modules are
imported only when a job for their capability arrives, so a PDF-only worker never imports Whisper.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from mediafleet.contract.errors import ErrorCode, Unavailable
from mediafleet.contract.manifest import Capability, DeviceClass
from mediafleet.modalities.registry import SPECS, check_refs, spec_for
from mediafleet.modalities.spec import Extractor, ProgressFn, SpecError, resolve

__all__ = ["EXTRACTORS", "Extractor", "ProgressFn", "check_devices", "load_extractor"]

# action -> "module:function", from the registered specs (a test worker may point one elsewhere).
EXTRACTORS: dict[str, str] = {spec.action: spec.extractor.path for spec in SPECS}


def check_devices(manifest_actions: list[str], device: DeviceClass) -> None:
    """Run the start-up checks of every action a worker serves: each part of its spec is installed
    here, and its device check passes.

    Raises:
        Unavailable: a check found the device class unusable here, a spec names a module that is
            not installed, or no spec implements an action.
    """
    for action in manifest_actions:
        spec = spec_for(action)
        try:
            check_refs([spec])
        except SpecError as exc:
            raise Unavailable(str(exc)) from None
        spec.device_check.load()(device)


def _import(path: str) -> Any:
    return resolve(path)


@cache
def _installed(name: str) -> str:
    """The installed version of a distribution, read once per process (reading the metadata costs
    ~0.4 ms, on every job otherwise)."""
    return metadata.version(name)


@cache
def _satisfies(installed: str, specifier: str) -> bool | None:
    """Whether version ``installed`` is in ``specifier`` (None: not a valid specifier), worked out
    once per pair of strings (parsing the specifier costs ~0.05 ms, on every job otherwise)."""
    try:
        return installed in SpecifierSet(specifier)
    except InvalidSpecifier:
        return None


def load_extractor(capability: Capability) -> Extractor:
    """The extractor for a declared capability, after checking its engine is installed as declared.

    Raises:
        Unavailable: no extractor for the action, or the engine is missing or of another version.
    """
    path = EXTRACTORS.get(capability.action)
    if path is None:
        raise Unavailable(f"this worker has no extractor for {capability.action}", code=ErrorCode.CAPABILITY_NOT_DECLARED)
    try:
        installed = _installed(capability.engine.name)
    except metadata.PackageNotFoundError as exc:
        raise Unavailable(f"the {capability.engine.name} engine is not installed on this worker") from exc
    satisfied = _satisfies(installed, capability.engine.version)
    if satisfied is None:
        raise Unavailable("the manifest's engine version is not a valid specifier")
    if not satisfied:
        raise Unavailable(f"{capability.engine.name} {installed} does not satisfy {capability.engine.version}")
    try:
        return _import(path)  # type: ignore[no-any-return]
    except ImportError as exc:
        raise Unavailable(f"the {capability.action} extractor cannot be loaded on this worker") from exc
