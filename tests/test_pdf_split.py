"""A long PDF split into page ranges that run as parts of one job (issue 13), through the fleet's parts.

Planning and joining are checked here without a broker (known answers: the ranges, the ids, the
joined bundle equal to one run's); then through a real redis-server and real worker processes:
the ranges run on two workers and join into exactly the bundle one in-process run gives, progress
counts pages across the ranges, cancelling the job cancels every range, and a range whose pool
process is killed is delivered again alone.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from mediafleet import Dispatcher, Settings
from mediafleet.adapters.bundle import build_bundle
from mediafleet.blobs.local import LocalBlobStore
from mediafleet.contract.errors import CapabilityRefused, ErrorCode
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, JobState, Outcome, PartOf, Span
from mediafleet.contract.manifest import Modality, default_manifest
from mediafleet.workers import parts
from mediafleet.workers.pdf.split import JoinedPages, page_count, ranges
from mediafleet.workers.runner import run_request
from tests.helpers import wait_for, without_run
from tests.media import marked_pdf, text_pdf

SIZE = 4  # pages per range in these tests (the shipped manifest cuts at 32)


def split_manifest(tmp_path: Path, size: int = SIZE) -> Path:
    """An operator manifest that keeps only ``ocr_pdf``, cut into ranges of ``size`` pages."""
    path = tmp_path / "split-manifest.json"
    path.write_text(json.dumps({"capabilities": {"ocr_pdf": {"parts": {"pages": {"split": "pages", "size": size}}}}}))
    return path


def pdf_request(store: LocalBlobStore, data: bytes, job_id: str = "mf-" + "5" * 32) -> ExtractRequest:
    digest = store.put_bytes(data)
    return ExtractRequest(job_id=job_id, action="ocr_pdf", artifact=ArtifactRef(
        digest=digest, media_type="application/pdf", bytes=len(data), modality=Modality.PDF))


def started_split(jobs: Any, store: LocalBlobStore, data: bytes) -> tuple[ExtractRequest, ExtractRequest, str]:
    """A 40-page PDF job planned as its own task (pages 1-32) and one range (33-40), its record
    claimed with that part and started by ``w1@test``: (the own request, the part's, the claim's token)."""
    manifest = default_manifest()
    own, planned = parts.plan(pdf_request(store, data), manifest.capability("ocr_pdf"), manifest, {"pages": 40})
    part = planned["pages:33-40"]
    token = jobs.claim(own, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=60,
                       parts={"pages:33-40": part.job_id})
    assert token is not None and jobs.start(own.job_id, "w1@test", token)[0] == 1
    return own, part, token


# --- planning and joining, no broker --------------------------------------------------------------


def test_a_pdf_longer_than_the_parts_size_is_planned_as_ranges(tmp_path: Path) -> None:
    manifest = default_manifest().narrow(json.loads(split_manifest(tmp_path).read_text()))
    capability = manifest.capability("ocr_pdf")
    store = LocalBlobStore(tmp_path / "blobs")
    data = text_pdf(10)
    request = pdf_request(store, data)
    assert page_count(tmp_path.joinpath("x.pdf")) is None  # no such file: no count, no split
    (tmp_path / "ten.pdf").write_bytes(data)
    assert page_count(tmp_path / "ten.pdf") == 10
    stream = io.BytesIO(b"junk" + data)
    stream.seek(4)
    assert page_count(stream) == 10 and stream.tell() == 4  # a stream is read from where it is, and put back
    assert page_count(io.BytesIO(b"%PDF-1.7 not a pdf")) is None
    assert ranges(10, 4) == [Span(first=1, last=4), Span(first=5, last=8), Span(first=9, last=10)]

    own, planned = parts.plan(request, capability, manifest, parts.probe(tmp_path / "ten.pdf", capability))
    assert own.job_id == request.job_id and own.span == Span(first=1, last=4)
    assert list(planned) == ["pages:5-8", "pages:9-10"]
    for name, part in planned.items():
        assert part.part_of == PartOf(job_id=request.job_id, action="ocr_pdf", part=name)
        assert part.action == "ocr_pdf" and part.options == request.options
    assert planned["pages:5-8"].span == Span(first=5, last=8)
    assert len({request.job_id, *(p.job_id for p in planned.values())}) == 3
    again = parts.plan(request, capability, manifest, {"pages": 10})[1]
    assert {n: p.job_id for n, p in again.items()} == {n: p.job_id for n, p in planned.items()}  # same ids

    assert parts.plan(request, capability, manifest, {"pages": 4}) == (request, {})  # not longer: one task
    assert parts.plan(request, capability, manifest, {"pages": None}) == (request, {})  # unknown: one task
    whole = default_manifest().narrow({"capabilities": {"ocr_pdf": {"parts": {}}}})
    assert parts.plan(request, whole.capability("ocr_pdf"), whole, {"pages": 10}) == (request, {})


class _Loads(Mapping[str, Any]):
    """Reports as the job store's record gives them: each read (here, counted) when asked."""

    def __init__(self, reported: dict[str, Any]) -> None:
        self._reported = reported
        self.reads: dict[str, int] = dict.fromkeys(reported, 0)

    def __getitem__(self, name: str) -> Any:
        self.reads[name] += 1
        return self._reported[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._reported)

    def __len__(self) -> int:
        return len(self._reported)


def test_the_ranges_joined_give_the_bundle_one_run_gives(tmp_path: Path) -> None:
    manifest = default_manifest().narrow(json.loads(split_manifest(tmp_path).read_text()))
    capability = manifest.capability("ocr_pdf")
    store = LocalBlobStore(tmp_path / "blobs")
    request = pdf_request(store, text_pdf(10, lines=5))
    whole = run_request(request, manifest=manifest, store=store)
    own, planned = parts.plan(request, capability, manifest, {"pages": 10})
    reported = {"pdf": run_request(own, manifest=manifest, store=store)}
    reported.update({n: run_request(p, manifest=manifest, store=store) for n, p in reversed(planned.items())})
    assert [len(o.result.pages) for o in reported.values()] == [4, 2, 4]
    loads = _Loads(reported)
    streamed = parts.join(request, loads, capability, manifest)
    assert isinstance(streamed, JoinedPages) and streamed.status == "ok" and streamed.job_id == request.job_id
    before = dict(loads.reads)
    joined = streamed.outcome()
    # Each range is read again only as the joined pages are made, once (the own range is held).
    assert {name: loads.reads[name] - before[name] for name in loads.reads} == {"pdf": 0, "pages:5-8": 1,
                                                                                "pages:9-10": 1}
    assert joined.result == whole.result and joined.checks == whole.checks
    assert without_run(build_bundle(joined, capability)) == without_run(build_bundle(whole, capability))
    # Written range by range, it is the joined outcome's JSON byte for byte.
    out = io.BytesIO()
    streamed.write_json(out)
    assert out.getvalue() == joined.model_dump_json().encode()
    assert Outcome.model_validate_json(out.getvalue()) == joined

    failed = run_request(planned["pages:9-10"].model_copy(update={"span": Span(first=30, last=31)}),
                         manifest=manifest, store=store)
    assert failed.status == "failed"
    broken = parts.join(request, {**reported, "pages:9-10": failed}, capability, manifest)
    assert broken.status == "failed" and broken.job_id == request.job_id and broken.error == failed.error
    lost = parts.join(request, {**reported, "pages:5-8": None}, capability, manifest)
    assert lost.status == "failed" and lost.error.code == ErrorCode.WORKER_LOST and lost.error.retryable


def test_a_range_is_run_only_for_a_job_the_manifest_splits(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    request = pdf_request(store, text_pdf(3))
    whole = default_manifest().narrow({"capabilities": {"ocr_pdf": {"parts": {}}}})
    ranged = request.model_copy(update={"span": Span(first=1, last=2)})
    refused = run_request(ranged, manifest=whole, store=store)
    assert refused.status == "failed" and refused.error.code == ErrorCode.CAPABILITY_NOT_DECLARED
    stray = ranged.model_copy(update={"part_of": PartOf(job_id="mf-" + "6" * 32, action="ocr_pdf", part="pages:1-2")})
    assert run_request(stray, manifest=whole, store=store).error.code == ErrorCode.CAPABILITY_NOT_DECLARED
    speech = stray.model_copy(update={"part_of": PartOf(job_id="mf-" + "6" * 32, action="ocr_pdf", part="speech")})
    assert run_request(speech, manifest=default_manifest(), store=store).error.code == ErrorCode.CAPABILITY_NOT_DECLARED
    with pytest.raises(CapabilityRefused):
        parts.part_capabilities(speech, default_manifest())


# --- through the fleet ------------------------------------------------------------------------------


def fleet(fleet_env: dict[str, str], manifest: Path) -> Dispatcher:
    return Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"],
                               blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"]), manifest_file=manifest))


@pytest.mark.integration
def test_a_long_pdf_runs_as_ranges_on_two_workers_and_joins_into_one_runs_bundle(
        fleet_env, start_worker, tmp_path: Path) -> None:
    manifest = split_manifest(tmp_path)
    env = {"MEDIAFLEET_MANIFEST_FILE": str(manifest)}
    first = start_worker("--concurrency=1", env=env)
    second = start_worker("--concurrency=1", env=env)
    dispatcher = fleet(fleet_env, manifest)
    data = text_pdf(13, lines=8)
    job = dispatcher.submit(data)
    remote = job.bundle(timeout=120)
    assert remote.status == "ok", remote.error
    here = Dispatcher(Settings(blob_root=tmp_path / "local", manifest_file=manifest)).submit(data).bundle()
    assert without_run(remote) == without_run(here)  # the same evidence, the same ids

    jobs = dispatcher.jobs()
    record = jobs.get(job.id)
    assert list(record.parts) == ["pages:5-8", "pages:9-12", "pages:13-13"]
    assert record.completions == 1 and record.summary()["parts"] == record.parts
    ranges_run = [jobs.get(part) for part in record.parts.values()]
    assert all(r.state == JobState.DONE and r.completions == 1 and r.attempts == 1 for r in ranges_run)
    assert {r.hostname for r in [record, *ranges_run]} <= {first.hostname, second.hostname}
    progress = job.progress()
    assert (progress.done, progress.total, progress.unit) == (13, 13, "pages")

    again = dispatcher.submit(data)  # an idempotent resubmit: nothing runs again
    assert again.id == job.id and without_run(again.bundle(timeout=60)) == without_run(remote)
    assert jobs.get(job.id).completions == 1
    assert all(jobs.get(part).completions == 1 for part in record.parts.values())


@pytest.mark.integration
def test_progress_counts_pages_across_ranges_and_cancel_reaches_every_range(
        fleet_env, start_worker, tmp_path: Path) -> None:
    manifest = split_manifest(tmp_path)
    start_worker("--concurrency=1", module="tests.faulty_worker", env={"MEDIAFLEET_MANIFEST_FILE": str(manifest)})
    dispatcher = fleet(fleet_env, manifest)
    job = dispatcher.submit(marked_pdf("MF-SLOW", pages=12, salt="split"))  # ~4 s per range, one worker
    jobs = dispatcher.jobs()
    wait_for(lambda: jobs.get(job.id).own_reported, timeout=60, what="the first range")
    progress = job.progress()
    assert progress.total == 12 and progress.unit == "pages" and 4 <= progress.done < 12
    assert dispatcher.cancel(job.id) == JobState.CANCELLED
    cancelled = job.bundle(timeout=30)
    assert cancelled.status == "failed" and cancelled.error.code == ErrorCode.CANCELLED
    record = jobs.get(job.id)
    assert all(jobs.get(part).state == JobState.CANCELLED for part in record.parts.values())
    wait_for(lambda: all(jobs.get(p).final for p in record.parts.values()), timeout=30, what="the ranges to end")
    assert sum(jobs.get(part).completions for part in record.parts.values()) == 0


@pytest.mark.integration
def test_a_range_whose_pool_process_is_killed_runs_again_alone(fleet_env, start_worker, tmp_path: Path) -> None:
    manifest = split_manifest(tmp_path)
    once = tmp_path / "crashed-once"
    env = {"MEDIAFLEET_MANIFEST_FILE": str(manifest), "MF_FAULTY_CRASH_SPAN": "5", "MF_FAULTY_ONCE": str(once)}
    start_worker("--concurrency=1", module="tests.faulty_worker", env=env)
    start_worker("--concurrency=1", module="tests.faulty_worker", env=env)
    dispatcher = fleet(fleet_env, manifest)
    data = text_pdf(12, lines=6)
    job = dispatcher.submit(data)
    remote = job.bundle(timeout=120)
    assert once.exists() and remote.status == "ok", remote.error
    here = Dispatcher(Settings(blob_root=tmp_path / "local", manifest_file=manifest)).submit(data).bundle()
    assert without_run(remote) == without_run(here)
    jobs = dispatcher.jobs()
    record = jobs.get(job.id)
    killed = jobs.get(record.parts["pages:5-8"])
    assert killed.attempts == 2 and killed.completions == 1  # delivered again, alone
    assert record.attempts == 1 and jobs.get(record.parts["pages:9-12"]).attempts == 1


class _Ended:
    """Celery's view of tasks: the ones named have ended (SUCCESS), every other is pending."""

    def __init__(self, ended: set[str]) -> None:
        self.ended = ended

    def AsyncResult(self, task_id: str):  # noqa: N802 - Celery's name  # type: ignore[no-untyped-def]
        from types import SimpleNamespace

        done = task_id in self.ended
        return SimpleNamespace(ready=lambda: done, state="SUCCESS" if done else "PENDING", info=None, worker=None)


@pytest.mark.integration
def test_a_waiter_never_takes_a_queued_range_for_lost_when_another_task_ended(jobs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The job's own task ended (and reported) between the waiter's read and its look at why: the
    range now waited on is still queued, so nothing is lost and nothing is written."""
    from mediafleet.orchestrators.fleet_job import FleetJob

    manifest = default_manifest()
    capability = manifest.capability("ocr_pdf")
    store = LocalBlobStore(tmp_path / "blobs")
    own, part, _ = started_split(jobs, store, text_pdf(40, lines=2))
    assert jobs.claim(part, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=60) is not None
    outcome = run_request(own, manifest=manifest, store=store)
    assert jobs.report_part(own.job_id, "pdf", outcome, delivery=1) == 1  # the own task's report: 1 range left
    waiter = FleetJob(_Ended({own.job_id}), jobs, capability, own, manifest)
    assert waiter._settle(own.job_id) is None  # the own task ended; the range is still to run
    assert jobs.get(part.job_id).state == JobState.QUEUED and not jobs.get(own.job_id).final


@pytest.mark.integration
def test_of_two_joiners_one_writes_the_joined_outcome_and_the_other_stores_nothing(jobs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A waiter that joins for a joiner it thought lost races the joiner: the joined outcome is
    written range by range, so the one that finishes second finds the ranges' reports gone (the
    first finish dropped them) and stores nothing, without an error, as it would have lost the
    finishing write itself."""
    from mediafleet.fleet.store import JobStore
    from mediafleet.fleet.reports import _Reports, join_parts

    blobs = LocalBlobStore(tmp_path / "blobs")
    store = JobStore(jobs.client, 3600, blobs=blobs, inline_max_bytes=512)
    own, part, _ = started_split(store, blobs, text_pdf(40, lines=3))
    manifest = default_manifest()
    capability = manifest.capability("ocr_pdf")
    assert store.report_part(own.job_id, "pdf", run_request(own, manifest=manifest, store=blobs)) == 1
    assert store.report_part(own.job_id, "pages:33-40", run_request(part, manifest=manifest, store=blobs)) == 0
    second = parts.join(own, _Reports(store, own.job_id, ["pdf", "pages:33-40"]), capability, manifest)
    assert isinstance(second, JoinedPages)  # its head read; its pages wait until it is written
    first = join_parts(store, own.job_id, manifest)
    assert isinstance(first, JoinedPages)
    assert store.finish(second) is False
    record = store.get(own.job_id)
    assert record.state == JobState.DONE and record.outcome.job_id == own.job_id
    assert [page.page for page in record.outcome.result.pages] == list(range(1, 41))
    assert record.reported("pdf") and not record.reported("pages:33-40")  # the first range's report kept
