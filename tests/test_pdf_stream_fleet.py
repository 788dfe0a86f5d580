"""The waiting CLI writes a split PDF job's ``--out`` files from its ranges' outcomes (issue 13).

Through a real redis-server and a real worker process: ``mediafleet extract FILE --out DIR`` (and
``--jsonl``) with the broker set writes, from the job's ranges' outcomes one at a time, byte for
byte the files the held-whole path writes from the joined outcome (the same command run again on
the finished job with the ranges refused, so that run reads the joined outcome and writes the
bundle held whole); run again on the finished job as it is, it writes from the ranges too (the
finished record keeps the first range's report); it never reads the joined outcome (its blob moved
away before the files are written, the files are still written); and it falls back to the
held-whole path, with the same files and exit status, for a job that is not split, a range whose
record is gone or whose outcome's blob was altered, and a job that failed.

The CLI runs as a fresh process through a wrapper that only watches
:func:`mediafleet.adapters.pdf_stream.write_joined_bundle` (whether the files came from the ranges)
and, where a test asks, spoils what it would read just before it reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.media import scanned
from tests.test_pdf_stream import raw_pdf

_SPY = """
import os, sys
from pathlib import Path
from mediafleet.adapters import pdf_stream as stream

real = stream.write_joined_bundle


def spy(ranges, *args, **kwargs):
    if os.environ.get("MF_TEST_HOLD"):  # the ranges refused: the held-whole path, for the reference
        print("mf-test: held whole", file=sys.stderr)
        return None
    jobs = ranges._jobs
    record = jobs.get(ranges._job_id)
    root = Path(os.environ["MEDIAFLEET_BLOB_ROOT"])
    from mediafleet.blobs.local import LocalBlobStore
    store = LocalBlobStore(root)
    if os.environ.get("MF_TEST_HIDE_JOINED"):  # the joined outcome's blob moved away (put back by the test)
        path = store._path(record.outcome_ref)
        path.rename(Path(os.environ["MF_TEST_HIDE_JOINED"]))
    if name := os.environ.get("MF_TEST_DROP_PART"):  # a range's record gone
        jobs.client.delete(jobs.key(record.parts[name]))
    if name := os.environ.get("MF_TEST_SPOIL_PART"):  # a range's outcome blob altered, same size
        path = store._path(jobs.get(record.parts[name]).outcome_ref)
        data = bytearray(path.read_bytes())
        data[-2] = ord("x") if data[-2] != ord("x") else ord("y")
        path.chmod(0o644)
        path.write_bytes(bytes(data))
    written = real(ranges, *args, **kwargs)
    print(f"mf-test: from the ranges: {written is not None}", file=sys.stderr)
    return written


stream.write_joined_bundle = spy
from mediafleet.cli import main
sys.exit(main(sys.argv[1:]))
"""


def cli(env: dict[str, str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _SPY, "extract", *args, "--timeout", "120"], capture_output=True,
                          text=True, env={**os.environ, **env, **extra}, timeout=300)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def split_fleet(fleet_env, start_worker, tmp_path: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """One worker (one task at a time: the job's own range first) on ranges of 4 pages, with a
    pixel limit too low to OCR a scanned page (one fails its range); every outcome kept by reference,
    so the joined one is a blob of its own."""
    manifest = tmp_path / "split-manifest.json"
    manifest.write_text(json.dumps({"capabilities": {"ocr_pdf": {"parts": {"pages": {"split": "pages", "size": 4}},
                                                                 "limits": {"max_pixels": 1_000_000}}}}))
    env = {**fleet_env, "MEDIAFLEET_MANIFEST_FILE": str(manifest), "MEDIAFLEET_OUTCOME_INLINE_MAX_BYTES": "512"}
    start_worker("--concurrency=1", env=env)
    return env


def run_both(env: dict[str, str], pdf: Path, tmp_path: Path, form: tuple[str, ...], **spoil: str
             ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The waiting CLI on a new job, then again on the finished job with the ranges refused (the
    held-whole path)."""
    claimed = ("--media-type", "application/pdf")  # claims recorded on the bundle, as a caller makes them
    first = cli(env, str(pdf), "--out", str(tmp_path / f"first-{pdf.stem}"), *form, *claimed, **spoil)
    held = cli(env, str(pdf), "--out", str(tmp_path / f"held-{pdf.stem}"), *form, *claimed, MF_TEST_HOLD="1")
    assert "mf-test: from the ranges: True" not in held.stderr, held.stderr  # the joined outcome, read whole
    return first, held


@pytest.mark.integration
@pytest.mark.parametrize("form", [("--jsonl",), ()], ids=["jsonl", "json"])
def test_the_waiting_cli_writes_a_split_jobs_files_from_its_ranges_as_the_held_path_does(
        split_fleet, tmp_path: Path, form: tuple[str, ...]) -> None:
    pdf = tmp_path / "long.pdf"
    pdf.write_bytes(raw_pdf(13, lines=6, salt="-".join(form)))
    streamed, held = run_both(split_fleet, pdf, tmp_path, form)
    assert streamed.returncode == held.returncode == 0, streamed.stderr + held.stderr
    assert "mf-test: from the ranges: True" in streamed.stderr, streamed.stderr
    assert streamed.stdout == held.stdout and "13 pages (text layer), 78 text lines" in streamed.stdout
    written, expected = files(tmp_path / "first-long"), files(tmp_path / "held-long")
    assert sorted(written) == sorted(expected) and len(written) == 2  # the bundle and the Turtle, no temporary
    assert written == expected


@pytest.mark.integration
def test_on_a_finished_split_job_the_waiting_cli_writes_from_its_ranges_too(split_fleet, tmp_path: Path) -> None:
    """A resubmission of a job that finished: its record kept the first range's report, so the
    files come from the ranges again, the same bytes, the joined outcome unread."""
    pdf = tmp_path / "again.pdf"
    pdf.write_bytes(raw_pdf(13, lines=6, salt="again"))
    claimed = ("--media-type", "application/pdf")
    first = cli(split_fleet, str(pdf), "--out", str(tmp_path / "first"), "--jsonl", *claimed)
    aside = tmp_path / "joined-outcome"
    again = cli(split_fleet, str(pdf), "--out", str(tmp_path / "again"), "--jsonl", *claimed,
                MF_TEST_HIDE_JOINED=str(aside))
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert "mf-test: from the ranges: True" in again.stderr, again.stderr
    assert aside.is_file() and first.stdout == again.stdout
    assert files(tmp_path / "first") == files(tmp_path / "again")


@pytest.mark.integration
def test_the_streamed_path_never_reads_the_joined_outcome(split_fleet, tmp_path: Path) -> None:
    pdf = tmp_path / "hidden.pdf"
    pdf.write_bytes(raw_pdf(13, lines=6, salt="hidden"))
    aside = tmp_path / "joined-outcome"
    claimed = ("--media-type", "application/pdf")
    streamed = cli(split_fleet, str(pdf), "--out", str(tmp_path / "streamed"), "--jsonl", *claimed,
                   MF_TEST_HIDE_JOINED=str(aside))
    assert streamed.returncode == 0, streamed.stderr
    assert aside.is_file() and "mf-test: from the ranges: True" in streamed.stderr, streamed.stderr
    # The joined outcome put back: the held-whole path's files, for the reference
    from mediafleet.blobs.local import LocalBlobStore

    digest = "sha256:" + hashlib.sha256(aside.read_bytes()).hexdigest()
    target = LocalBlobStore(Path(split_fleet["MEDIAFLEET_BLOB_ROOT"]))._path(digest)
    assert not target.exists()
    aside.rename(target)
    held = cli(split_fleet, str(pdf), "--out", str(tmp_path / "held"), "--jsonl", *claimed, MF_TEST_HOLD="1")
    assert held.returncode == 0 and "mf-test: from the ranges: True" not in held.stderr, held.stderr
    assert streamed.stdout == held.stdout
    assert files(tmp_path / "streamed") == files(tmp_path / "held")


@pytest.mark.integration
@pytest.mark.parametrize("spoil", ["MF_TEST_DROP_PART", "MF_TEST_SPOIL_PART"], ids=["record-gone", "blob-altered"])
def test_a_range_that_cannot_be_read_as_joined_falls_back_to_the_held_path(
        split_fleet, tmp_path: Path, spoil: str) -> None:
    pdf = tmp_path / "spoiled.pdf"
    pdf.write_bytes(raw_pdf(13, lines=6, salt=spoil))
    fallback, held = run_both(split_fleet, pdf, tmp_path, ("--jsonl",), **{spoil: "pages:9-12"})
    assert "mf-test: from the ranges: False" in fallback.stderr, fallback.stderr  # tried, refused, fell back
    assert fallback.returncode == held.returncode == 0, fallback.stderr + held.stderr
    assert fallback.stdout == held.stdout
    assert files(tmp_path / "first-spoiled") == files(tmp_path / "held-spoiled")


@pytest.mark.integration
def test_a_job_that_is_not_split_or_that_failed_gives_the_held_paths_files_and_status(
        split_fleet, tmp_path: Path) -> None:
    short = tmp_path / "short.pdf"
    short.write_bytes(raw_pdf(4, lines=6, salt="short"))  # one range: one task, no parts
    one, held = run_both(split_fleet, short, tmp_path, ())
    assert one.returncode == held.returncode == 0 and "mf-test" not in one.stderr, one.stderr
    assert one.stdout == held.stdout and files(tmp_path / "first-short") == files(tmp_path / "held-short")

    # Page 6 is a scan too large to render under the pixel limit: the second range fails the job.
    failed = tmp_path / "failed.pdf"
    failed.write_bytes(scanned(raw_pdf(13, lines=4, salt="failed"), pages={6}, dpi=72))
    first, again = run_both(split_fleet, failed, tmp_path, ("--jsonl",))
    assert first.returncode == again.returncode == 1 and "mf-test" not in first.stderr, first.stderr
    assert "failed:" in first.stderr and first.stdout == again.stdout
    assert files(tmp_path / "first-failed") == files(tmp_path / "held-failed")


@pytest.mark.integration
def test_a_brief_read_leaves_the_parts_reports_out_but_the_one_kept(jobs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What the writing waiter reads at each slice: which parts reported, not what (a long
    document's ranges report tens of megabytes into the record), but the own task's report, kept."""
    from mediafleet.blobs.local import LocalBlobStore
    from mediafleet.contract.jobs import JobState
    from mediafleet.contract.manifest import default_manifest
    from mediafleet.workers.runner import run_request
    from tests.test_pdf_split import started_split

    manifest = default_manifest()
    store = LocalBlobStore(tmp_path / "blobs")
    own, part, token = started_split(jobs, store, raw_pdf(40, lines=2))
    outcome = run_request(own, manifest=manifest, store=store)
    assert jobs.report_part(own.job_id, "pdf", outcome, delivery=1) == 1

    full = jobs.get(own.job_id)
    brief, _ = jobs.look(own.job_id, brief=True)
    assert brief.reported("pdf") and brief.state == full.state and brief.parts == full.parts
    with pytest.raises(RuntimeError):
        brief.part("pdf")
    kept, _ = jobs.look(own.job_id, brief=True, keep_part="pdf")
    assert kept.kept_part("pdf").part("pdf") == full.part("pdf") == outcome
    assert kept.kept_part("pdf").token == token and brief.kept_part("pdf") is None

    assert jobs.claim(part, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=60) is not None
    assert jobs.finish(run_request(part, manifest=manifest, store=store))
    ranged = jobs.brief(part.job_id)
    assert ranged.final and ranged.request.span == part.span and jobs.get(part.job_id).outcome is not None
    with pytest.raises(RuntimeError):
        ranged.outcome  # noqa: B018 - the property refuses
