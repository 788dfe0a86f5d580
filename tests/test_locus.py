"""The governed locus envelope and opaque refs (CONTRACT.md section 3)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mediafleet.contract import EvidenceLocus, is_opaque_ref, opaque_ref

HEX16 = "0123456789abcdef"


@pytest.mark.parametrize(
    "ref",
    [f"eg:locus:{HEX16}", f"eg:a:b:c:d:{HEX16}", f"eg:x_y-z:{'f' * 128}", f"eg:policy:sub:{HEX16 * 2}"],
)
def test_well_formed_refs(ref: str) -> None:
    assert is_opaque_ref(ref)


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        (f"eg:{HEX16}", "two parts"),
        (f"eg:a:b:c:d:e:{HEX16}", "seven parts"),
        (f"eg:locus:{HEX16[:15]}", "token of 15"),
        (f"eg:locus:{'a' * 129}", "token of 129"),
        (f"eg:locus:{HEX16.upper()}", "uppercase hex"),
        (f"eg:Locus:{HEX16}", "uppercase namespace"),
        (f"eg:lo.cus:{HEX16}", "dot in namespace"),
        (f"eg:{'n' * 33}:{HEX16}", "namespace of 33"),
        (f"eg::{HEX16}", "empty namespace"),
        (f"xg:locus:{HEX16}", "not eg"),
        (f"eg:locus:{HEX16}g", "non-hex token"),
        (f" eg:locus:{HEX16}", "leading space"),
        (f"eg:locus:{HEX16}\n", "trailing newline"),
    ],
)
def test_malformed_refs(ref: str, why: str) -> None:
    assert not is_opaque_ref(ref)


def test_opaque_ref_builder_refuses_bad_parts() -> None:
    assert opaque_ref("locus", HEX16) == f"eg:locus:{HEX16}"
    assert opaque_ref("a:b", HEX16) == f"eg:a:b:{HEX16}"
    for ns, tok in [("Locus", HEX16), ("locus", "xyz"), ("a:b:c:d:e", HEX16)]:
        with pytest.raises(ValueError):
            opaque_ref(ns, tok)


def _locus(**over: object) -> dict:
    data = {
        "id": f"eg:locus:{HEX16}",
        "subject": {"kind": "occurrence", "id": f"eg:occurrence:{HEX16}"},
        "address": {"kind": "page_region", "page": 4, "x": 72.0, "y": 120.5, "width": 400.0, "height": 18.0},
        "policy_ref": f"eg:policy:{HEX16}",
        "derivation_ref": f"eg:derivation:{HEX16}",
    }
    data.update(over)
    return data


def test_the_engine_literal_locus_decodes() -> None:
    locus = EvidenceLocus.model_validate(_locus())
    assert locus.model_dump(mode="json")["address"]["page"] == 4


@pytest.mark.parametrize("missing", ["id", "subject", "address", "policy_ref", "derivation_ref"])
def test_a_locus_missing_any_key_is_refused(missing: str) -> None:
    data = _locus()
    del data[missing]
    with pytest.raises(ValidationError):
        EvidenceLocus.model_validate(data)


@pytest.mark.parametrize(
    "over",
    [
        {"id": "locus-1"},
        {"policy_ref": "eg:policy:xyz"},
        {"derivation_ref": ""},
        {"subject": {"kind": "occurrence", "id": "occurrence:abc"}},
        {"subject": {"kind": "document", "id": f"eg:occurrence:{HEX16}"}},
        {"address": {"kind": "page_region", "page": 1, "x": 0, "y": 0, "width": 0, "height": 1}},
        {"extra": 1},
    ],
)
def test_malformed_envelopes_are_refused(over: dict) -> None:
    with pytest.raises(ValidationError):
        EvidenceLocus.model_validate(_locus(**over))
