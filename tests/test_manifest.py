"""The capability manifest fails closed, narrows but never widens, and refuses before and on the worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mediafleet.contract import CapabilityRefused, ErrorCode, LimitExceeded, Manifest, default_manifest, load_manifest


@pytest.fixture
def manifest() -> Manifest:
    return default_manifest()


def test_default_manifest_declares_the_pdf_capability_as_the_callers_name_it(manifest: Manifest) -> None:
    pdf = manifest.capability("ocr_pdf")
    assert (pdf.provider, pdf.tool, pdf.modality.value) == ("stirlingpdf-mcp", "pdf_action", "pdf")
    assert {k.value for k in pdf.produces} >= {"page_region", "character_range", "image_region"}
    assert pdf.queue(pdf.devices[0]) == f"mf.ocr_pdf.{pdf.devices[0].value}"


def test_undeclared_action_is_refused(manifest: Manifest) -> None:
    with pytest.raises(CapabilityRefused) as err:
        manifest.capability("summarise_pdf")
    assert err.value.code == ErrorCode.CAPABILITY_NOT_DECLARED


def test_undeclared_media_type_is_refused(manifest: Manifest) -> None:
    with pytest.raises(CapabilityRefused) as err:
        manifest.for_media_type("application/zip")
    assert err.value.code == ErrorCode.UNSUPPORTED_MEDIA_TYPE
    with pytest.raises(CapabilityRefused):
        manifest.for_media_type("image/gif", "ocr_pdf")


def test_undeclared_option_and_value_out_of_range_are_refused(manifest: Manifest) -> None:
    pdf = manifest.capability("ocr_pdf")
    with pytest.raises(CapabilityRefused) as err:
        pdf.check_options({"password": "hunter2"})
    assert err.value.code == ErrorCode.INVALID_REQUEST
    assert "hunter2" not in err.value.message


def test_size_limit(manifest: Manifest) -> None:
    pdf = manifest.capability("ocr_pdf")
    pdf.check_size(pdf.limits.max_bytes)
    with pytest.raises(LimitExceeded) as err:
        pdf.check_size(pdf.limits.max_bytes + 1)
    assert err.value.code == ErrorCode.TOO_LARGE


def test_result_with_an_undeclared_locus_kind_is_rejected(manifest: Manifest) -> None:
    pdf = manifest.capability("ocr_pdf")
    pdf.check_produces({"page_region", "PageBox"})
    with pytest.raises(CapabilityRefused) as err:
        pdf.check_produces({"page_region", "audio_range"})
    assert err.value.code == ErrorCode.UNDECLARED_LOCUS_KIND


def test_operator_file_narrows(tmp_path: Path, manifest: Manifest) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"capabilities": {"ocr_pdf": {"limits": {"max_bytes": 1000, "max_pages": 3}}}}))
    narrowed = load_manifest(path)
    assert narrowed.capability("ocr_pdf").limits.max_pages == 3
    assert narrowed.capability("ocr_pdf").produces == manifest.capability("ocr_pdf").produces


def test_operator_file_disables_what_it_omits(tmp_path: Path, manifest: Manifest) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"capabilities": {}}))
    with pytest.raises(CapabilityRefused):
        load_manifest(path).capability("ocr_pdf")


@pytest.mark.parametrize(
    "partial",
    [
        {"limits": {"max_bytes": 10**13}},
        {"limits": {"max_pages": 10**7}},
        {"media_types": ["application/pdf", "application/zip"]},
        {"produces": ["PageBox", "AudioSegment"]},
        {"devices": ["cpu", "gpu"]},
        {"time_limits": {"soft_s": 10, "hard_s": 10**6}},
        {"engine": {"name": "pymupdf", "version": ">=0"}},
        {"options": {"anything": {}}},
    ],
)
def test_operator_file_cannot_widen(tmp_path: Path, partial: dict) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"capabilities": {"ocr_pdf": partial}}))
    with pytest.raises(ValueError):
        load_manifest(path)


def test_operator_file_cannot_add_a_capability(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    cap = default_manifest().capability("ocr_pdf").model_dump(mode="json")
    path.write_text(json.dumps({"capabilities": {"exfiltrate": {**cap, "action": "exfiltrate"}}}))
    with pytest.raises(ValueError):
        load_manifest(path)


def test_manifest_rejects_unknown_fields_and_mismatched_keys(manifest: Manifest) -> None:
    data = manifest.model_dump(mode="json")
    data["capabilities"]["ocr_pdf"]["allow_all"] = True
    with pytest.raises(ValueError):
        Manifest.model_validate(data)
    data = manifest.model_dump(mode="json")
    data["capabilities"]["other"] = data["capabilities"].pop("ocr_pdf")
    with pytest.raises(ValueError):
        Manifest.model_validate(data)


def test_an_option_choice_matches_by_json_type_not_python_equality() -> None:
    from mediafleet.contract.manifest import OptionRule

    flags = OptionRule(choices=[True, False])
    assert flags.allows(True) and flags.allows(False)
    assert not flags.allows(1) and not flags.allows(0)  # 1 == True in Python, not in JSON
    sizes = OptionRule(choices=[1, 2])
    assert sizes.allows(2) and not sizes.allows(True) and not sizes.allows(2.0)
