"""Deterministic identifiers: the same input, capability, versions and options give the same ids.

Replays are idempotent because nothing here reads a clock or a random source: a job id, a locus
id or a claim id is a hash of what it is about.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from mediafleet.contract.locus import opaque_ref

__all__ = ["LOCUS_PREFIX", "canonical", "job_id", "locus_head", "locus_ref", "locus_refs", "locus_tokens",
           "part_job_id", "ref", "token"]

_SEP = "\x1f"
LOCUS_PREFIX = "eg:locus:"


def canonical(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces) of options or any JSON-like value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def token(*parts: str, length: int = 32) -> str:
    """Lowercase hex token of ``length`` characters derived from ``parts``."""
    return hashlib.sha256(_SEP.join(parts).encode("utf-8")).hexdigest()[:length]


def ref(namespace: str, *parts: str) -> str:
    """An opaque ref ``eg:<namespace>:<token>`` derived from ``parts``."""
    return opaque_ref(namespace, token(namespace, *parts))


def job_id(digest: str, action: str, extractor_version: str, options: Mapping[str, Any],
           numerics: Mapping[str, Any] | None = None) -> str:
    """The job for this artifact, capability, extractor version and options.

    ``numerics``: the settings that change an engine's numbers for this capability (its thread
    count): part of the request, so one job id never names two different results. Empty for a
    capability whose results do not depend on them (the id is then what it always was).
    """
    parts = [digest, action, extractor_version, canonical(dict(options))]
    if numerics:
        parts.append(canonical(dict(numerics)))
    return "mf-" + token("job", *parts)


def part_job_id(digest: str, action: str, extractor_version: str, parent: str,
                span: tuple[int, int] | None = None) -> str:
    """The job of one part of job ``parent`` (a video's speech; a page range of a split PDF, by its
    ``span``): derived from the parent's id, so a resubmission finds the same part."""
    recipe: dict[str, Any] = {"part_of": parent}
    if span is not None:
        recipe["span"] = list(span)
    return job_id(digest, action, extractor_version, recipe)


def locus_ref(derivation: str, index: int) -> str:
    """The ``index``-th locus of one derivation: ``ref("locus", derivation, str(index))``.

    Built without :func:`opaque_ref`'s checks (one call per locus of a long document): the
    namespace is the constant ``locus`` and the token a hex digest, so it is well formed.
    """
    return LOCUS_PREFIX + token("locus", derivation, str(index))


def locus_head(derivation: str) -> Any:
    """The hash of what every locus id of ``derivation`` starts with: a copy of it updated with a
    locus's index (its decimal digits) gives :func:`locus_ref`'s token."""
    return hashlib.sha256(f"locus{_SEP}{derivation}{_SEP}".encode())


def locus_tokens(derivation: str, count: int) -> list[str]:
    """The tokens of ``locus_refs(derivation, count)`` (each id less its ``eg:locus:`` prefix),
    hashing the common prefix once."""
    fork = locus_head(derivation).copy
    tokens = []
    add = tokens.append
    for index in range(count):
        h = fork()
        h.update(b"%d" % index)
        add(h.hexdigest()[:32])
    return tokens


def locus_refs(derivation: str, count: int) -> list[str]:
    """``[locus_ref(derivation, i) for i in range(count)]``, hashing the common prefix once."""
    return [LOCUS_PREFIX + t for t in locus_tokens(derivation, count)]
