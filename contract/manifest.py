"""The capability manifest: the only source of truth for what the fleet will do.

Fail closed: an action, media type, option, device class or locus kind that the manifest in force
does not declare is refused, before enqueue and again on the worker. The default manifest ships as
``contract/manifest.default.json``; an operator may *narrow* it with their own file (keep fewer
capabilities, lower limits, fewer media types, devices or options) but never widen it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from mediafleet.contract.addresses import AddressKind, address_kind
from mediafleet.contract.common import Strict
from mediafleet.contract.errors import CapabilityRefused, ErrorCode, LimitExceeded

__all__ = [
    "Capability",
    "DeviceClass",
    "Engine",
    "Limits",
    "Manifest",
    "Modality",
    "OptionRule",
    "Part",
    "TimeLimits",
    "default_manifest",
    "load_manifest",
]

MANIFEST_FORMAT = "mediafleet.manifest/v1"

PositiveInt = Annotated[int, Field(strict=True, gt=0)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class Modality(StrEnum):
    """One member per modality: its models are listed in ``contract/results.py``, everything else
    about it in its spec (``workers/<modality>/spec.py``)."""

    PDF = "pdf"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"


# Modalities named like a top-level media type (``image/*``...), for types no capability declares.
_FAMILIES = frozenset(m.value for m in Modality) - {Modality.PDF.value}


class DeviceClass(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


class Limits(Strict):
    """Upper bounds checked before (bytes) and while (the rest, from the container) decoding."""

    max_bytes: PositiveInt
    max_pages: PositiveInt | None = None
    max_pixels: PositiveInt | None = Field(None, description="per page, image or frame")
    max_duration_s: PositiveFloat | None = None


class TimeLimits(Strict):
    soft_s: PositiveFloat
    hard_s: PositiveFloat

    @model_validator(mode="after")
    def _soft_first(self) -> TimeLimits:
        if not self.hard_s > self.soft_s:
            raise ValueError("hard_s must be > soft_s")
        return self


class Engine(Strict):
    """The engine a capability runs: its import name and the versions the fleet accepts."""

    name: str
    version: str = Field(description="PEP 440 specifier the installed engine must satisfy")


class OptionRule(Strict):
    """What values a request may give one option; an option without a rule is refused."""

    choices: list[str | int | float | bool] | None = None
    min: float | None = None
    max: float | None = None

    def allows(self, value: object) -> bool:
        # Exact JSON types: 1 and 0 are not true and false (Python's 1 == True), nor 1.0 the integer 1.
        if self.choices is not None and not any(type(value) is type(c) and value == c for c in self.choices):
            return False
        if self.min is not None or self.max is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
            if self.min is not None and value < self.min:
                return False
            if self.max is not None and value > self.max:
                return False
        return True

    def within(self, wider: OptionRule) -> bool:
        if wider.choices is not None and (self.choices is None or not set(self.choices) <= set(wider.choices)):
            return False
        if wider.min is not None and (self.min is None or self.min < wider.min):
            return False
        if wider.max is not None and (self.max is None or self.max > wider.max):
            return False
        return True


class Part(Strict):
    """A part a capability's job fans out on the fleet: the data the one parts module plans from.

    Two kinds. A *companion* part runs another capability (``action``) on the same artifact beside
    the job, turned on by one of the job's boolean options (``option``; a video's speech: the
    ``transcribe_segments`` capability, ``speech``); the parent must declare every locus kind the
    companion's capability produces. A *split* part (``split``: the unit, ``size`` of them per
    part) cuts the job itself into ranges that run as parts of the one job, on as many workers as
    are free, and are joined in order into the result one run gives (a long PDF's pages).
    In-process, neither fans out: the job makes the same result in one run.
    """

    action: str | None = Field(None, description="companion: the capability the part runs")
    option: str | None = Field(None, description="companion: the boolean option that turns the part on")
    split: Literal["pages"] | None = Field(None, description="split: the unit the job is cut into ranges of")
    size: Annotated[int, Field(strict=True, ge=1)] | None = Field(None, description="split: units per part")

    @model_validator(mode="after")
    def _one_kind(self) -> Part:
        companion = self.action is not None and self.option is not None and self.split is None and self.size is None
        split = self.split is not None and self.size is not None and self.action is None and self.option is None
        if not (companion or split):
            raise ValueError("a part is a companion (action and option) or a split (split and size)")
        return self


class Capability(Strict):
    """One thing the fleet can do, named by the callers' action."""

    action: str
    modality: Modality
    provider: str = Field(description="the sidecar server name today's callers use")
    tool: str
    media_types: list[str] = Field(min_length=1)
    produces: list[AddressKind] = Field(min_length=1)
    limits: Limits
    time_limits: TimeLimits
    devices: list[DeviceClass] = Field(min_length=1, description="allowed classes, preferred first")
    engine: Engine
    extractor_version: str = Field(
        description="bumped whenever output for the same input may change; the one value the job id, the "
        "derivation ref and every locus id derive from")
    options: dict[str, OptionRule] = Field(default_factory=dict)
    parts: dict[str, Part] = Field(
        default_factory=dict, description="the parts a job fans out on the fleet, by name (none: one task)")

    @field_validator("produces", mode="before")
    @classmethod
    def _either_spelling(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [address_kind(v) if isinstance(v, str) else v for v in value]
        return value

    @field_validator("devices")
    @classmethod
    def _no_repeats(cls, value: list[DeviceClass]) -> list[DeviceClass]:
        if len(set(value)) != len(value):
            raise ValueError("device classes repeat")
        return value

    def queue(self, device: DeviceClass) -> str:
        """The broker queue for this capability on one device class."""
        return f"mf.{self.action}.{device.value}"

    def check_media_type(self, media_type: str) -> None:
        if media_type not in self.media_types:
            raise CapabilityRefused(
                f"{self.action} does not accept {media_type}", code=ErrorCode.UNSUPPORTED_MEDIA_TYPE
            )

    def check_size(self, size: int) -> None:
        if size > self.limits.max_bytes:
            raise LimitExceeded(f"the artifact is larger than the {self.limits.max_bytes}-byte limit of {self.action}")

    def check_options(self, options: Mapping[str, Any]) -> None:
        for name, value in options.items():
            rule = self.options.get(name)
            if rule is None:
                raise CapabilityRefused(f"option {name!r} is not declared for {self.action}", code=ErrorCode.INVALID_REQUEST)
            if not rule.allows(value):
                raise CapabilityRefused(f"option {name!r} has a value {self.action} does not allow", code=ErrorCode.INVALID_REQUEST)

    def check_produces(self, kinds: set[str]) -> None:
        undeclared = sorted(k for k in kinds if address_kind(k) not in self.produces)
        if undeclared:
            raise CapabilityRefused(
                f"the result holds locus kinds {self.action} does not declare: {', '.join(undeclared)}",
                code=ErrorCode.UNDECLARED_LOCUS_KIND,
            )

    def narrowed_by(self, other: Capability) -> bool:
        lim, wider = other.limits, self.limits
        def le(a: float | None, b: float | None) -> bool:
            return b is None or (a is not None and a <= b)
        return (
            other.modality == self.modality
            and other.provider == self.provider
            and other.tool == self.tool
            and other.engine == self.engine
            and other.extractor_version == self.extractor_version
            and set(other.media_types) <= set(self.media_types)
            and set(other.produces) <= set(self.produces)
            and set(other.devices) <= set(self.devices)
            and lim.max_bytes <= wider.max_bytes
            and le(lim.max_pages, wider.max_pages)
            and le(lim.max_pixels, wider.max_pixels)
            and le(lim.max_duration_s, wider.max_duration_s)
            and other.time_limits.hard_s <= self.time_limits.hard_s
            and other.time_limits.soft_s <= self.time_limits.soft_s
            and all(n in self.options and r.within(self.options[n]) for n, r in other.options.items())
            # Parts may be dropped (the job then runs as one task) or cut in other sizes, not added.
            and all(n in self.parts and self.parts[n].model_copy(update={"size": p.size}) == p
                    for n, p in other.parts.items())
        )


class Manifest(Strict):
    format: str = MANIFEST_FORMAT
    capabilities: dict[str, Capability]

    @model_validator(mode="after")
    def _keys_are_actions(self) -> Manifest:
        if self.format != MANIFEST_FORMAT:
            raise ValueError(f"manifest format must be {MANIFEST_FORMAT}")
        for key, cap in self.capabilities.items():
            if key != cap.action:
                raise ValueError(f"capability {key!r} declares action {cap.action!r}")
        return self

    def capability(self, action: str) -> Capability:
        """The declared capability for ``action``; refuses anything undeclared."""
        cap = self.capabilities.get(action)
        if cap is None:
            raise CapabilityRefused(f"action {action!r} is not declared by the manifest in force")
        return cap

    def media_types(self) -> list[str]:
        """Every media type a declared capability accepts, sorted."""
        return sorted({t for c in self.capabilities.values() for t in c.media_types})

    def for_media_type(self, media_type: str, action: str | None = None) -> Capability:
        """The capability to run for an artifact of ``media_type`` (and the caller's action, if any)."""
        if action is not None:
            cap = self.capability(action)
            cap.check_media_type(media_type)
            return cap
        matches = [c for c in self.capabilities.values() if media_type in c.media_types]
        if not matches:
            raise CapabilityRefused(f"no declared capability accepts {media_type}; supported: "
                                    f"{', '.join(self.media_types())}", code=ErrorCode.UNSUPPORTED_MEDIA_TYPE)
        if len(matches) > 1:
            raise CapabilityRefused(f"{media_type} is accepted by several actions; name one", code=ErrorCode.INVALID_REQUEST)
        return matches[0]

    def modality_of(self, media_type: str) -> Modality | None:
        """The modality of a media type: a declared capability's, else its top-level type's
        (``image/*``, ``audio/*``, ``video/*``, ``application/pdf``); None for any other type."""
        for capability in self.capabilities.values():
            if media_type in capability.media_types:
                return capability.modality
        if media_type == "application/pdf":
            return Modality.PDF
        top = media_type.partition("/")[0]
        return Modality(top) if top in _FAMILIES else None

    def max_hard_time_limit_s(self) -> float:
        return max((c.time_limits.hard_s for c in self.capabilities.values()), default=0.0)

    def narrow(self, operator: Mapping[str, Any]) -> Manifest:
        """Apply an operator's file: capabilities it omits are disabled, the rest may only shrink.

        Each operator capability is a partial object merged over the default one.

        Raises:
            ValueError: the file names an undeclared capability or widens anything.
        """
        unknown = set(operator) - {"format", "capabilities"}
        if unknown:
            raise ValueError(f"unknown manifest keys: {sorted(unknown)}")
        kept: dict[str, Capability] = {}
        for action, partial in dict(operator.get("capabilities", {})).items():
            if action not in self.capabilities:
                raise ValueError(f"the operator manifest names undeclared capability {action!r}")
            base = self.capabilities[action]
            merged = _deep_merge(base.model_dump(mode="json"), partial)
            cap = Capability.model_validate(merged)
            if not base.narrowed_by(cap):
                raise ValueError(f"the operator manifest widens {action!r}; it may only narrow")
            kept[action] = cap
        return Manifest(capabilities=kept)


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict) and key not in ("options", "parts"):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


@cache
def _shipped() -> Manifest:
    text = resources.files("mediafleet.contract").joinpath("manifest.default.json").read_text(encoding="utf-8")
    return Manifest.model_validate_json(text)


def default_manifest() -> Manifest:
    """The manifest that ships with this version of the fleet (read once per process).

    It alone holds each capability's ``extractor_version``: the dispatcher's job id, the
    extractor's ``producer`` (through its modality spec), and so the derivation ref and every locus
    id all take it from here, and an operator's file may not change it.
    """
    return _shipped()


def load_manifest(operator_file: Path | None = None) -> Manifest:
    """The manifest in force: the default, narrowed by an operator's JSON file when given."""
    manifest = default_manifest()
    if operator_file is None:
        return manifest
    return manifest.narrow(json.loads(Path(operator_file).read_text(encoding="utf-8")))
