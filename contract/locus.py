"""The governed locus envelope the evidence engine decodes off an Evidence node.

``{"id", "subject": {"kind": "occurrence", "id"}, "address", "policy_ref", "derivation_ref"}``;
every reference is an opaque ref ``eg:<ns>[:<subns>...]:<token>`` (3 to 6 colon-separated parts,
namespaces ``[a-z0-9_-]{1,32}``, token 16 to 128 lowercase hex). A locus missing a key or carrying a
malformed ref is dropped by the engine, so both are validation errors here.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator

from mediafleet.contract.addresses import EvidenceAddress
from mediafleet.contract.common import Strict

__all__ = ["EvidenceLocus", "LocusSubject", "OpaqueRef", "is_opaque_ref", "opaque_ref"]

_OPAQUE_REF = re.compile(r"eg(?::[a-z0-9_-]{1,32}){1,4}:[0-9a-f]{16,128}")
_NAMESPACE = re.compile(r"[a-z0-9_-]{1,32}")
_TOKEN = re.compile(r"[0-9a-f]{16,128}")


def is_opaque_ref(value: object) -> bool:
    """True when ``value`` is a well-formed opaque ref."""
    return isinstance(value, str) and _OPAQUE_REF.fullmatch(value) is not None


def opaque_ref(namespace: str, token: str) -> str:
    """Build ``eg:<namespace>:<token>``; ``namespace`` may hold a sub-namespace (``a:b``).

    Raises:
        ValueError: the result would not be a well-formed opaque ref.
    """
    parts = namespace.split(":")
    if not all(_NAMESPACE.fullmatch(p) for p in parts) or not _TOKEN.fullmatch(token):
        raise ValueError("malformed opaque ref parts")
    ref = f"eg:{namespace}:{token}"
    if not is_opaque_ref(ref):
        raise ValueError("malformed opaque ref")
    return ref


def _check_ref(value: str) -> str:
    if not is_opaque_ref(value):
        raise ValueError("not an opaque ref of the form eg:<ns>[:<subns>]:<16-128 lowercase hex>")
    return value


OpaqueRef = Annotated[str, AfterValidator(_check_ref)]


class LocusSubject(Strict):
    """What the locus is located in: always an asset occurrence."""

    kind: Literal["occurrence"] = "occurrence"
    id: OpaqueRef


class EvidenceLocus(Strict):
    """The governed envelope: an address plus the identity and governance refs around it."""

    id: OpaqueRef
    subject: LocusSubject
    address: EvidenceAddress
    policy_ref: OpaqueRef
    derivation_ref: OpaqueRef
