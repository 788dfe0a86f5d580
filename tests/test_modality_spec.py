"""One place per modality: a spec missing any part is refused at start, the generic code reads
every part from the registered specs, and the extractor version has one source every id follows."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from mediafleet import Dispatcher, Settings
from mediafleet.contract import Manifest, Modality, Unavailable, default_manifest
from mediafleet.contract import manifest as manifest_module
from mediafleet.modalities import registry
from mediafleet.workers.extractor import EXTRACTORS, check_devices
from mediafleet.modalities.pdf import SPEC as PDF
from mediafleet.modalities.spec import ModalitySpec, Ref, SpecError
from tests.media import text_pdf

ROOT = Path(__file__).resolve().parent.parent
# Every field but ``parts`` (a modality whose jobs never fan out has none) is required.
PARTS = [f.name for f in dataclasses.fields(ModalitySpec) if f.default_factory is dataclasses.MISSING]


# -- a spec is complete, or refused --------------------------------------------------------------------


@pytest.mark.parametrize("part", PARTS)
def test_a_spec_missing_any_part_is_refused(part: str) -> None:
    with pytest.raises(SpecError):
        dataclasses.replace(PDF, **{part: None})
    given = {f: getattr(PDF, f) for f in PARTS if f != part}
    with pytest.raises(TypeError):  # left out altogether: the module defining it does not import
        ModalitySpec(**given)


@pytest.mark.parametrize("part", ["extractor", "device_check", "read_check", "loci", "caller_shape"])
def test_a_code_part_must_be_a_lazy_reference(part: str) -> None:
    with pytest.raises(SpecError):
        dataclasses.replace(PDF, **{part: "mediafleet.workers.pdf.textlayer:extract_pdf"})
    with pytest.raises(SpecError):
        Ref("mediafleet.workers.pdf.textlayer.extract_pdf")  # no ":attribute"


def test_a_part_of_the_wrong_type_is_refused() -> None:
    for part, value in (("action", 1), ("media_types", ["application/pdf"]), ("media_types", ("pdf",)),
                        ("sniff", "application/pdf"), ("opencv", "no"), ("modality", "pdf"),
                        ("numerics", ["threads"])):
        with pytest.raises(SpecError):
            dataclasses.replace(PDF, **{part: value})


def test_the_registry_is_every_shipped_capability_once() -> None:
    assert [s.action for s in registry.SPECS] == ["ocr_pdf", "analyze_image", "transcribe_segments",
                                                  "extract_keyframes"]
    assert {s.action for s in registry.SPECS} == set(default_manifest().capabilities) == set(EXTRACTORS)
    registry.check_refs(registry.SPECS)


def test_registration_refuses_what_disagrees_with_the_manifest_or_another_spec() -> None:
    others = [s for s in registry.SPECS if s is not PDF]
    with pytest.raises(SpecError, match="no registered spec implements"):
        registry.register(others)  # the shipped manifest's ocr_pdf would have no extractor
    with pytest.raises(SpecError, match="two specs"):
        registry.register([*registry.SPECS, PDF])
    with pytest.raises(SpecError, match="does not declare"):
        registry.register([*registry.SPECS, dataclasses.replace(PDF, action="summarise_pdf")])
    with pytest.raises(SpecError, match="declares ocr_pdf as pdf"):
        registry.register([dataclasses.replace(PDF, modality=Modality.IMAGE), *others])
    with pytest.raises(SpecError, match="cannot sniff"):
        registry.register([dataclasses.replace(PDF, media_types=("application/x-pdf",)), *others])


def test_a_second_engine_of_a_modality_registers_when_it_shares_the_modality_wide_parts() -> None:
    shipped = default_manifest()
    fast = shipped.capability("ocr_pdf").model_copy(update={"action": "ocr_pdf_fast", "tool": "pdf_fast"})
    manifest = Manifest(capabilities={**shipped.capabilities, "ocr_pdf_fast": fast})
    engine = dataclasses.replace(PDF, action="ocr_pdf_fast", extractor_name="mediafleet.pdf.fast",
                                 extractor=Ref("mediafleet.workers.pdf.textlayer:extract_pdf"))
    assert [s.action for s in registry.register([*registry.SPECS, engine], manifest)][-1] == "ocr_pdf_fast"
    with pytest.raises(SpecError, match="differ in progress_unit"):
        registry.register([*registry.SPECS, dataclasses.replace(engine, progress_unit="lines")], manifest)


def test_a_part_whose_module_is_not_installed_stops_the_worker_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = dataclasses.replace(PDF, device_check=Ref("mediafleet.workers.pdf.no_such_module:check_device"))
    with pytest.raises(SpecError, match="not installed"):
        registry.check_refs([broken])
    monkeypatch.setattr(registry, "SPECS", (broken, *registry.SPECS[1:]))
    with pytest.raises(Unavailable, match="not installed"):
        check_devices(["ocr_pdf"], default_manifest().capability("ocr_pdf").devices[0])


def test_reading_the_registry_imports_no_engine() -> None:
    code = ("import sys, mediafleet.modalities.registry, mediafleet.sniff, mediafleet.adapters, mediafleet.workers.extractor; "
            "print([m for m in ('faster_whisper', 'pymupdf', 'rapidocr_onnxruntime', 'av', 'cv2', 'scenedetect') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("head", "media_type"), [
    (b"%PDF-1.7", "application/pdf"),
    (b"\xff\xd8\xff\xe0", "image/jpeg"),
    (b"GIF89a", "image/gif"),
    (b"RIFF\0\0\0\0WAVEfmt ", "audio/wav"),
    (b"RIFF\0\0\0\0WEBPVP8 ", "image/webp"),
    (b"RIFF\0\0\0\0AVI LIST", "video/x-msvideo"),
    (b"\0\0\0\x20ftypM4A \0\0\0\0", "audio/mp4"),
    (b"\0\0\0\x20ftypisom\0\0\0\0", "video/mp4"),
    (b"\0\0\0\x14ftypqt  \0\0\0\0", "video/quicktime"),
    (b"\xff\xf1\x50\x80", "audio/aac"),
    (b"PK\x03\x04", None),
])
def test_each_spec_sniffs_its_own_types(head: bytes, media_type: str | None) -> None:
    from mediafleet.sniff import sniff

    assert sniff(head) == media_type


# -- one version -----------------------------------------------------------------------------------------


def _ids(tmp_path: Path) -> tuple[str, str, str, list[str], str]:
    bundle = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(text_pdf(2)).bundle()
    assert bundle.status == "ok", bundle.error
    loci = [n.properties["evidence_locus"] for n in bundle.nodes if n.node_type == "Evidence"]
    agent = next(n for n in bundle.nodes if n.node_type == "ProvenanceActivity").properties
    return (bundle.job_id, loci[0]["derivation_ref"], loci[0]["policy_ref"], [locus["id"] for locus in loci],
            str(agent.get("extractorVersion")))


def test_changing_the_extractor_version_changes_every_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The version has one source (the manifest); the job id, the derivation ref, the policy ref and
    every locus id follow it, so a bumped extractor never answers with stale evidence."""
    shipped = default_manifest()
    job, derivation, policy, loci, version = _ids(tmp_path / "before")
    assert version == shipped.capability("ocr_pdf").extractor_version == PDF.extractor_version

    pdf = shipped.capability("ocr_pdf")
    bumped = shipped.model_copy(update={"capabilities": {
        **shipped.capabilities, "ocr_pdf": pdf.model_copy(update={"extractor_version": pdf.extractor_version + ".1"})}})
    monkeypatch.setattr(manifest_module, "_shipped", lambda: bumped)
    assert PDF.extractor_version == pdf.extractor_version + ".1"
    job2, derivation2, policy2, loci2, version2 = _ids(tmp_path / "after")

    assert version2 == pdf.extractor_version + ".1"
    assert job2 != job and derivation2 != derivation and policy2 != policy
    assert len(loci2) == len(loci) and not set(loci2) & set(loci)
