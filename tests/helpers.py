"""Shared by tests: bundles compared without run times, loci checked as the engine does, waiting,
whether this install could build the optional C extensions."""

from __future__ import annotations

import shutil
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mediafleet.contract import EvidenceBundle, EvidenceLocus, is_opaque_ref

_TIME_KEYS = {"at", "startedAtTime", "endedAtTime", "generated_at_time", "prov:startedAtTime", "prov:endedAtTime"}


def without_run(bundle: EvidenceBundle) -> dict[str, Any]:
    """The bundle with timestamps and activity ids (which name one run) taken out."""
    data = bundle.model_dump(mode="json")
    activities = {n["id"] for n in data["nodes"] if n["node_type"] == "ProvenanceActivity"}
    prov_activities = {f"urn:mediafleet:{a}" for a in activities}

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items() if k not in _TIME_KEYS}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if value in activities:
            return "<activity>"
        if value in prov_activities:
            return "<activity>"
        return value

    return scrub(data)


def assert_engine_valid(bundle: EvidenceBundle) -> int:
    """Every Evidence node carries a locus the engine decodes (five keys, refs well formed)."""
    count = 0
    for node in bundle.nodes:
        if node.node_type != "Evidence":
            continue
        locus = node.properties["evidence_locus"]
        assert set(locus) == {"id", "subject", "address", "policy_ref", "derivation_ref"}
        for key in ("id", "policy_ref", "derivation_ref"):
            assert is_opaque_ref(locus[key]), locus[key]
        assert is_opaque_ref(locus["subject"]["id"])
        EvidenceLocus.model_validate(locus)
        assert node.properties["occurrence_id"] and node.properties["blob_ref"].startswith("blob:")
        count += 1
    return count


def wait_for(predicate: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    """Poll ``predicate`` until it is truthy (its value is returned) or fail the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def can_compile() -> bool:
    """Whether an install here builds the optional C extensions (setup.py): a C compiler and the
    Python headers are present. Where they are, the extensions must be built and in use."""
    has_headers = (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file()
    return bool(shutil.which("cc") or shutil.which("gcc")) and has_headers
