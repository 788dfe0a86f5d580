"""The host's discovery commands, run through ``mediafleet.cli.entry`` in this process."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from mediafleet.contract import EvidenceBundle
from mediafleet.cli.entry import main
from mediafleet.cli.parser import build_parser
from tests.discovery_fixtures import sample_bundles  # noqa: F401


COMMANDS = ("index", "discovery", "serve-discovery")


def _parsers(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _parsers(child, f"{path} {name}")
    return found


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help(command: str) -> None:
    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for path, parser in _parsers(subcommands.choices[command], command):
        for action in parser._actions:
            assert action.help, f"{path} {action.option_strings or action.dest} has no help"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_index_add_takes_bundle_files_and_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     sample_bundles: dict[str, EvidenceBundle]) -> None:
    one = tmp_path / "pdf.bundle.json"
    one.write_text(sample_bundles["pdf"].model_dump_json(indent=2))
    lines = tmp_path / "extract.jsonl"
    lines.write_text(sample_bundles["opus"].model_dump_json() + "\n" + sample_bundles["png"].model_dump_json() + "\n")
    state = str(tmp_path / "state" / "host.db")
    code, out, _ = run(capsys, "index", "add", str(one), str(lines), "--workspace", "harbour", "--state", state)
    report = json.loads(out)
    assert code == 0 and report["bundles"] == 3 and report["generation"] == 3 and report["units_added"] > 10
    assert (tmp_path / "state" / "index.db").is_file()  # the default index lies beside the state
    code, out, _ = run(capsys, "index", "add", str(one), "--workspace", "harbour", "--state", state)
    assert code == 0 and json.loads(out)["units_added"] == 0 and json.loads(out)["generation"] == 3


def test_mistakes_are_one_line_without_paths_or_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "host.db")
    junk = tmp_path / "junk.json"
    junk.write_text('{"not": "a bundle"}')
    cases = [
        (["index", "add", str(junk), "--workspace", "harbour"], "junk.json: not an evidence bundle"),
        (["index", "add", str(junk), "--workspace", "../etc"], "a workspace or subject is"),
        (["discovery", "lease", "revoke", "mfl-" + "0" * 32], "there is no such lease"),
        (["discovery", "binding", "disable", "mfb-x"], "there is no such binding"),
        (["discovery", "lease", "open", "--workspace", "w", "--ttl-s", "0", "--max-operations", "1",
          "--max-evidence", "1"], "ttl must be > 0"),
        (["discovery", "lease", "open", "--workspace", "w", "--ttl-s", "9", "--max-operations", "0",
          "--max-evidence", "1"], "navigation budget"),
        (["serve-discovery"], "needs --credential-file"),
        (["serve-discovery", "--http", "--host", "10.1.2.3"], "loopback address only"),
    ]
    for args, message in cases:
        code, out, err = run(capsys, *args, "--state", state)
        assert code == 2 and out == "" and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1 and str(tmp_path / "host.db") not in err
    run(capsys, "discovery", "key", "new", "--state", state)
    code, _, err = run(capsys, "discovery", "key", "new", "--state", state)
    assert code == 2 and err.strip().endswith("receipt.key exists already: it is never replaced")
    code, _, err = run(capsys, "serve-discovery", "--credential-file", "c.json", "--channels", "semantic",
                       "--state", state)
    assert code == 2 and err.strip().endswith("the discovery channels are lexical or lexical,semantic")
    code, _, err = run(capsys, "discovery", "receipt", "show", "host-request:discovery:1", "--state", state)
    assert code == 2 and "no receipt" in err


def test_lease_open_creates_a_missing_receipt_key_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state" / "host.db"
    lease_args = ["discovery", "lease", "open", "--workspace", "harbour", "--ttl-s", "60", "--max-operations", "1",
                  "--max-evidence", "1", "--state", str(state)]
    code, out, _ = run(capsys, *lease_args)
    opened = json.loads(out)
    key = tmp_path / "state" / "receipt.key"
    assert code == 0 and opened["receipt_key_created"] is True and opened["receipt_key"] == str(key.resolve())
    assert oct(key.stat().st_mode & 0o777) == "0o600" and len(key.read_text().strip()) == 64
    before = key.read_text()
    code, out, _ = run(capsys, *lease_args)
    assert code == 0 and json.loads(out)["receipt_key_created"] is False and key.read_text() == before


def test_lease_open_refuses_an_unusable_key_in_one_line_naming_key_new(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "host.db"
    key = tmp_path / "receipt.key"
    key.write_text("not hex\n")
    key.chmod(0o600)
    code, out, err = run(capsys, "discovery", "lease", "open", "--workspace", "harbour", "--ttl-s", "60",
                         "--max-operations", "1", "--max-evidence", "1", "--state", str(state))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "mediafleet discovery key new" in err and "no lease was opened" in err and str(tmp_path) not in err
    key.chmod(0o644)
    code, _, err = run(capsys, "discovery", "lease", "open", "--workspace", "harbour", "--ttl-s", "60",
                       "--max-operations", "1", "--max-evidence", "1", "--state", str(state))
    assert code == 2 and "mode 600" in err and "mediafleet discovery key new" in err
