"""The JSON Lines form of the evidence bundle: the same bundle back, in its documented order."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from mediafleet.adapters.stream import (
    BUNDLE_STREAM_FORMAT,
    bundle_lines,
    read_bundle_lines,
    write_bundle_lines,
)
from mediafleet.contract import EvidenceBundle
from mediafleet import Dispatcher, Settings
from tests.helpers import assert_engine_valid
from tests.media import text_pdf


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> EvidenceBundle:
    tmp = tmp_path_factory.mktemp("stream")
    path = tmp / "doc.pdf"
    path.write_bytes(text_pdf(3))
    return Dispatcher(Settings(blob_root=tmp / "blobs")).submit(path).bundle()


def test_the_stream_gives_back_exactly_the_bundle(bundle: EvidenceBundle) -> None:
    out = io.StringIO()
    count = write_bundle_lines(bundle, out)
    lines = out.getvalue().splitlines(keepends=True)
    assert count == len(lines) == 1 + len(bundle.nodes) + len(bundle.edges) + len(bundle.prov["@graph"]) + 1
    back = read_bundle_lines(lines)
    assert back == bundle
    assert back.model_dump_json() == bundle.model_dump_json()
    assert assert_engine_valid(back) == assert_engine_valid(bundle) > 0


def test_records_come_in_the_documented_order(bundle: EvidenceBundle) -> None:
    records = [json.loads(line) for line in bundle_lines(bundle)]
    kinds = [r["record"] for r in records]
    assert kinds[0] == "bundle" and records[0]["format"] == BUNDLE_STREAM_FORMAT
    assert kinds[-1] == "end"
    middle = kinds[1:-1]
    assert middle == sorted(middle, key=["node", "edge", "prov"].index)
    nodes = [r["id"] for r in records if r["record"] == "node"]
    assert nodes == [n.id for n in bundle.nodes]
    assert records[-1] == {"record": "end", "nodes": len(bundle.nodes), "edges": len(bundle.edges),
                           "prov_entries": len(bundle.prov["@graph"]), "prov_context": bundle.prov["@context"]}
    assert all(line.endswith("\n") and "\n" not in line[:-1] for line in bundle_lines(bundle))


@pytest.mark.parametrize("cut", ["no end", "lost line", "after end", "out of order", "no head", "not json"])
def test_a_damaged_stream_is_refused(bundle: EvidenceBundle, cut: str) -> None:
    lines = list(bundle_lines(bundle))
    damaged = {
        "no end": lines[:-1],
        "lost line": lines[:5] + lines[6:],
        "after end": lines + [lines[1]],
        "out of order": [lines[0], lines[-2], *lines[1:-2], lines[-1]],
        "no head": lines[1:],
        "not json": lines[:3] + ["{not json\n"] + lines[3:],
    }[cut]
    with pytest.raises(ValueError):
        read_bundle_lines(damaged)


def test_a_stream_is_written_to_a_file_line_by_line(bundle: EvidenceBundle, tmp_path: Path) -> None:
    path = tmp_path / "bundle.jsonl"
    with path.open("w", encoding="utf-8") as out:
        write_bundle_lines(bundle, out)
    with path.open(encoding="utf-8") as lines:
        assert read_bundle_lines(lines) == bundle


@pytest.mark.slow
def test_extract_out_jsonl_writes_the_stream_form(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    doc = tmp_path / "doc.pdf"
    doc.write_bytes(text_pdf(2))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    env["MEDIAFLEET_BLOB_ROOT"] = str(tmp_path / "blobs")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "mediafleet.cli", "extract", str(doc), "--out", str(out), "--jsonl"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    (stream,) = out.glob("doc.pdf.*.bundle.jsonl")
    assert not list(out.glob("*.bundle.json")) and len(list(out.glob("doc.pdf.*.prov.ttl"))) == 1
    with stream.open(encoding="utf-8") as lines:
        back = read_bundle_lines(lines)
    assert back.status == "ok" and assert_engine_valid(back) > 0
