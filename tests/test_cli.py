"""The ``mediafleet`` command as a user runs it: a real subprocess, stdout/stderr/exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rdflib import Graph

from mediafleet.contract import EvidenceBundle, Manifest
from tests.helpers import assert_engine_valid
from tests.media import text_pdf


def run(*args: str, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    full_env.update({"MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "mediafleet.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=300)


@pytest.mark.corpus
def test_extract_json_prints_exactly_one_bundle(corpus: Path, tmp_path: Path) -> None:
    proc = run("extract", str(corpus / "pdf" / "crazyones.pdf"), "--json", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    bundle = EvidenceBundle.model_validate_json(lines[0])
    assert bundle.status == "ok" and bundle.artifact.digest.startswith("sha256:")
    assert assert_engine_valid(bundle) > 0
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] and set(claim.properties["checks"]) == {
        "digest_recomputed", "locus_kinds_declared", "loci_valid"}
    assert len(Graph().parse(data=json.dumps(bundle.prov), format="json-ld")) > 0


@pytest.mark.slow
def test_samples_and_out_dir(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run("extract", "--samples", "--out", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "harbour-report.pdf: ok" in proc.stdout
    bundles = sorted(out.glob("*.bundle.json"))
    assert bundles and all(EvidenceBundle.model_validate_json(b.read_text()).status == "ok" for b in bundles)
    for ttl in out.glob("*.prov.ttl"):
        assert len(Graph().parse(ttl, format="turtle")) > 0


def test_a_failed_file_exits_non_zero_with_the_error_on_stderr(tmp_path: Path) -> None:
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(text_pdf(2)[:300])
    good = tmp_path / "good.pdf"
    good.write_bytes(text_pdf(1))
    proc = run("extract", str(bad), str(good), "--json", tmp_path=tmp_path)
    assert proc.returncode == 1
    statuses = [json.loads(line)["status"] for line in proc.stdout.splitlines()]
    assert statuses == ["failed", "ok"]
    assert "corrupt_input" in proc.stderr
    assert str(tmp_path) not in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_usage_errors(tmp_path: Path) -> None:
    assert run("extract", tmp_path=tmp_path).returncode == 2
    assert run("extract", "x.pdf", tmp_path=tmp_path, env={"MEDIAFLEET_RESULT_TTL_S": "-1"}).returncode == 2
    assert run("worker", tmp_path=tmp_path).returncode == 2  # no broker configured
    missing = run("extract", str(tmp_path / "nope.pdf"), tmp_path=tmp_path)
    assert missing.returncode == 1 and "nope.pdf" in missing.stderr


def test_manifest_and_schema_print_json(tmp_path: Path) -> None:
    manifest = run("manifest", tmp_path=tmp_path)
    assert manifest.returncode == 0
    assert "ocr_pdf" in Manifest.model_validate_json(manifest.stdout).capabilities
    schema = json.loads(run("schema", tmp_path=tmp_path).stdout)
    assert {"EvidenceAddress", "EvidenceLocus", "Manifest", "ExtractRequest", "Outcome", "EvidenceBundle"} <= set(schema)


def test_a_widening_operator_manifest_is_refused_at_start(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"capabilities": {"ocr_pdf": {"limits": {"max_bytes": 10**15}}}}))
    proc = run("manifest", tmp_path=tmp_path, env={"MEDIAFLEET_MANIFEST_FILE": str(path)})
    assert proc.returncode == 2 and "widens" in proc.stderr
