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
from mediafleet.contract.manifest import load_manifest
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


def test_json_gives_one_line_per_input_in_input_order_refused_ones_included(tmp_path: Path) -> None:
    good = tmp_path / "good.pdf"
    good.write_bytes(text_pdf(1))
    gif = tmp_path / "notice.gif"
    gif.write_bytes(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")
    unknown = tmp_path / "mystery.bin"
    unknown.write_bytes(bytes(range(256)) * 16)
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    inputs = [gif, tmp_path / "missing.pdf", good, unknown, empty]
    proc = run("extract", "--json", *map(str, inputs), tmp_path=tmp_path)
    # One line per input, in the order given; a failed one makes the exit code 1 (docs/cli.md).
    assert proc.returncode == 1, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["status"] for line in lines] == ["failed", "failed", "ok", "failed", "failed"]
    gif_line, missing, ok, unknown_line, empty_line = lines
    supported = sorted({t for c in load_manifest().capabilities.values() for t in c.media_types})
    for refused, media_type in ((gif_line, "image/gif"), (unknown_line, None)):
        bundle = EvidenceBundle.model_validate(refused)
        assert bundle.error is not None and bundle.error.code == "unsupported_media_type"
        assert bundle.artifact.media_type == media_type and bundle.nodes
        assert bundle.error.message.endswith("supported: " + ", ".join(supported)), bundle.error.message
    assert "convert it to PNG" in gif_line["error"]["message"]
    assert missing == {"format": "mediafleet.input-failure/v1", "input": "missing.pdf", "status": "failed",
                       "job_id": None, "error": {"code": "input_unavailable", "message": "no such file",
                                                 "retryable": False}}
    assert EvidenceBundle.model_validate(ok).artifact.bytes == len(text_pdf(1))
    assert EvidenceBundle.model_validate(empty_line).error.code == "empty_input"  # type: ignore[union-attr]
    # Each failure is also one line on stderr, naming its input.
    for name in ("notice.gif", "missing.pdf", "mystery.bin", "empty.pdf"):
        assert f"{name}: " in proc.stderr
    # `mediafleet report` reads the same lines: the input that gave no bundle is left out.
    (tmp_path / "lines.jsonl").write_text(proc.stdout)
    reported = run("report", str(tmp_path / "lines.jsonl"), "-o", str(tmp_path / "pages"), tmp_path=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert len(list((tmp_path / "pages").glob("*.html"))) == 4


def test_without_json_a_type_nothing_reads_is_still_a_mistake_and_nothing_runs(tmp_path: Path) -> None:
    good = tmp_path / "good.pdf"
    good.write_bytes(text_pdf(1))
    gif = tmp_path / "notice.gif"
    gif.write_bytes(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")
    proc = run("extract", str(good), str(gif), tmp_path=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("mediafleet extract: notice.gif: GIF (image/gif) is not supported; convert it to "
                                   "PNG (or, if animated, to MP4)")
