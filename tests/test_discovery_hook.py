"""Automatic indexing as jobs finish (``MEDIAFLEET_DISCOVERY_INDEX``): in-process and on the fleet,
exactly once per job, into the scope the setting fixes; a failure to index never fails a job."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from mediafleet import Dispatcher, Settings
from mediafleet.discovery.hook import parse_index_setting
from mediafleet.discovery.index_open import open_index
from mediafleet.discovery.text import fold, query_terms
from mediafleet.discovery.units import Scope, units_from_bundle
from tests.conftest import ROOT, free_port
from tests.media import text_pdf

SAMPLE_PDF = ROOT / "src" / "mediafleet" / "samples" / "harbour-report.pdf"
VIDEO = ROOT / "tests" / "data" / "speech.mp4"


def has_word(text: str, word: str) -> bool:
    return word in re.findall(r"\w+", fold(text))


def indexed_ids(url: str, scope: Scope, query: str) -> set[str]:
    index = open_index(url)
    try:
        return {n.unit_id for n in index.search(scope, query_terms(query), 100)}
    finally:
        index.close()


def test_an_in_process_job_is_indexed_once_into_the_configured_scope(tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'index.db'}"
    settings = Settings(blob_root=tmp_path / "blobs", discovery_index=f"{url}#workspace=harbour&subject=north-quay")
    dispatcher = Dispatcher(settings)
    bundle = dispatcher.submit(SAMPLE_PDF.read_bytes()).bundle()
    assert bundle.status == "ok"
    scope = Scope("harbour", "north-quay")
    expected = {u.unit_id for u in units_from_bundle(bundle) if has_word(u.text, "bollard")}
    assert expected and indexed_ids(url, scope, "bollard") == expected
    assert indexed_ids(url, Scope("harbour"), "bollard") == set()  # only the scope the setting names
    index = open_index(url)
    try:
        assert index.scope_generation(scope) == 1
        dispatcher.submit(SAMPLE_PDF.read_bytes()).bundle()  # the same job again changes nothing
        assert index.scope_generation(scope) == 1
    finally:
        index.close()


def test_no_setting_no_index(tmp_path: Path) -> None:
    bundle = Dispatcher(Settings(blob_root=tmp_path / "blobs")).submit(text_pdf(1)).bundle()
    assert bundle.status == "ok" and list(tmp_path.rglob("*.db")) == []


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_index_that_cannot_be_written_never_fails_the_job(kind: str, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    url = f"sqlite:{blocker / 'index.db'}" if kind == "sqlite" else f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    settings = Settings(blob_root=tmp_path / "blobs", discovery_index=f"{url}#workspace=w")
    with caplog.at_level(logging.WARNING, logger="mediafleet.discovery"):
        bundle = Dispatcher(settings).submit(text_pdf(1)).bundle()
    assert bundle.status == "ok"
    assert any("not indexed for discovery" in r.getMessage() for r in caplog.records)
    assert all(str(tmp_path) not in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("value", ["sqlite:/x.db", "sqlite:/x.db#", "sqlite:/x.db#subject=s", "mysql://h/d#workspace=w",
                                   "sqlite:/x.db#workspace=w&tenant=t", "sqlite:/x.db#workspace=../etc"])
def test_a_bad_setting_is_refused_at_start(value: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        Settings(blob_root=tmp_path, discovery_index=value)


def test_the_setting_keeps_the_database_url_whole() -> None:
    url, scope = parse_index_setting("postgresql://db.internal/evidence?sslmode=require#workspace=harbour")
    assert url == "postgresql://db.internal/evidence?sslmode=require" and scope == Scope("harbour", "default")


@pytest.mark.integration
def test_a_fleet_job_and_a_fanned_out_video_are_each_indexed_exactly_once(fleet_env, start_worker,
                                                                         tmp_path: Path) -> None:
    url = f"sqlite:{tmp_path / 'index.db'}"
    setting = {"MEDIAFLEET_DISCOVERY_INDEX": f"{url}#workspace=fleet"}
    video = start_worker("--concurrency=1", "--queues=mf.extract_keyframes.cpu,mf.ocr_pdf.cpu", env=setting)
    audio = start_worker("--concurrency=1", "--queues=mf.transcribe_segments.cpu", env=setting)
    dispatcher = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"],
                                     blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"])))
    pdf_job = dispatcher.submit(SAMPLE_PDF.read_bytes())
    video_job = dispatcher.submit(VIDEO)
    pdf, spoken = pdf_job.bundle(timeout=300), video_job.bundle(timeout=300)
    assert pdf.status == spoken.status == "ok"
    scope = Scope("fleet")
    # The caller's bundle is ready once the job is joined; its indexing follows, in the reporter
    # (a worker's first indexing also loads the embedding model): wait for both to be indexed.
    deadline = time.monotonic() + 120
    while not (indexed_ids(url, scope, "bollard") and indexed_ids(url, scope, "finance")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert indexed_ids(url, scope, "bollard") == {u.unit_id for u in units_from_bundle(pdf) if has_word(u.text, "bollard")}
    speech = {u.unit_id for u in units_from_bundle(spoken)}
    assert speech and indexed_ids(url, scope, "finance") <= speech and indexed_ids(url, scope, "finance")
    logs = video.log.read_text() + audio.log.read_text()
    for job in (pdf_job.id, video_job.id):
        # One indexing call, by the one reporter that finished the job.
        assert len(re.findall(rf"job {job}: \d+ discovery units indexed", logs)) == 1, logs[-3000:]
    speech_job = dispatcher.jobs().get(video_job.id).parts.get("speech")
    assert f"job {speech_job}: " not in logs  # the speech part is indexed as part of its video, not alone
    assert "not indexed for discovery" not in logs
    index = open_index(url)
    try:
        assert index.scope_generation(scope) == 2
    finally:
        index.close()
