"""Large outcomes by blob reference: the record holds a digest and a size, never the big text.

The real job store on a real redis-server, the real runner and blob store; the fleet test runs a
real worker process whose inline limit is set through its settings (``MEDIAFLEET_OUTCOME_INLINE_MAX_BYTES``).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from mediafleet import Dispatcher, Settings
from mediafleet.blobs.local import LocalBlobStore
from mediafleet.contract.digests import hash_bytes
from mediafleet.contract.errors import ErrorCode
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, JobState, Outcome
from mediafleet.contract.manifest import Modality, default_manifest
from mediafleet.fleet.signing import OutcomeSigner
from mediafleet.fleet.store import INLINE_OUTCOME_MAX_BYTES, JobStore
from mediafleet.blobs.retention import Retention, collect_garbage
from mediafleet.workers.runner import run_request
from tests.helpers import without_run
from tests.media import text_pdf

SMALL = 2000  # bytes: every PDF outcome here is larger


class Case(NamedTuple):
    store: JobStore
    blobs: LocalBlobStore
    outcome: Outcome


def run_pdf(jobs: JobStore, tmp_path: Path, *, inline_max_bytes: int = SMALL, signer: Any = None) -> Case:
    """A PDF job claimed, started and run by delivery 1 on a job store with this inline limit; its
    outcome is not stored yet."""
    blobs = LocalBlobStore(tmp_path / "blobs")
    store = JobStore(jobs.client, 3600, signer, blobs, inline_max_bytes=inline_max_bytes)
    data = text_pdf(2)
    digest = blobs.put_bytes(data)
    request = ExtractRequest(job_id="mf-" + digest.removeprefix("sha256:")[:32], action="ocr_pdf",
                             options={"ocr": "never"},
                             artifact=ArtifactRef(digest=digest, media_type="application/pdf", bytes=len(data),
                                                  modality=Modality.PDF))
    token = jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
    assert token is not None and jobs.start(request.job_id, "w1@test", token)[0] == 1
    outcome = run_request(request, manifest=default_manifest(), store=blobs)
    assert outcome.status == "ok" and len(outcome.model_dump_json()) > SMALL
    return Case(store, blobs, outcome)


@pytest.fixture
def large(jobs: JobStore, tmp_path: Path) -> Case:
    """A PDF job whose outcome was stored by its delivery, by reference."""
    case = run_pdf(jobs, tmp_path)
    assert case.store.finish(case.outcome, delivery=1)
    return case


def fields(jobs: JobStore, job_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in jobs.client.hgetall(jobs.key(job_id)).items()}


def blob_path(blobs: LocalBlobStore, ref: str) -> Path:
    return blobs.root / "sha256" / ref[7:9] / ref[9:11] / ref[7:]


def test_the_inline_limit_is_a_documented_default_the_settings_can_change() -> None:
    assert INLINE_OUTCOME_MAX_BYTES == 1 << 20
    assert Settings().outcome_inline_max_bytes is None  # unset: the job store's default
    assert Settings(outcome_inline_max_bytes=SMALL).outcome_inline_max_bytes == SMALL


def test_a_large_outcome_is_kept_by_reference_and_read_back_whole(large: Case) -> None:
    store, _, outcome = large
    stored = fields(store, outcome.job_id)
    text = outcome.model_dump_json()
    assert "outcome" not in stored and text not in "".join(stored.values())
    assert stored["outcome_ref"] == hash_bytes(text.encode()) and stored["outcome_bytes"] == str(len(text.encode()))
    assert sum(len(v) for v in stored.values()) < SMALL  # the record stays small
    record = store.get(outcome.job_id)
    assert record.state == JobState.DONE and record.outcome_ref == stored["outcome_ref"]
    assert record.outcome == outcome and not record.untrusted


def test_a_small_outcome_stays_inline(jobs: JobStore, tmp_path: Path) -> None:
    store, _, outcome = run_pdf(jobs, tmp_path, inline_max_bytes=INLINE_OUTCOME_MAX_BYTES)
    assert store.finish(outcome, delivery=1)
    stored = fields(store, outcome.job_id)
    assert stored["outcome"] == outcome.model_dump_json() and "outcome_ref" not in stored
    assert store.get(outcome.job_id).outcome == outcome


def test_a_finished_record_by_reference_is_never_overwritten(large: Case) -> None:
    store, _, outcome = large
    before = fields(store, outcome.job_id)
    later = outcome.model_copy(update={"started_at": outcome.started_at + timedelta(seconds=5)})
    assert not store.finish(later, delivery=1)  # a second writer (a stale redelivery, a joiner) stores nothing
    assert not store.finish(later)
    assert fields(store, outcome.job_id) == before
    assert store.get(outcome.job_id).outcome == outcome


def test_a_stale_delivery_cannot_write_its_large_outcome(jobs: JobStore, tmp_path: Path) -> None:
    store, _, outcome = run_pdf(jobs, tmp_path)
    token = fields(store, outcome.job_id)["token"]
    assert store.start(outcome.job_id, "w2@test", token)[0] == 2  # a newer delivery owns the record
    assert not store.finish(outcome, delivery=1)
    stored = fields(store, outcome.job_id)
    assert "outcome_ref" not in stored and "outcome" not in stored and stored["state"] == "started"


@pytest.mark.parametrize("forgery", ["other_bytes", "missing", "altered"])
def test_a_forged_reference_fails_closed_with_a_public_error(large: Case, forgery: str) -> None:
    store, blobs, outcome = large
    key, ref = store.key(outcome.job_id), fields(store, outcome.job_id)["outcome_ref"]
    if forgery == "other_bytes":  # another job's outcome, really in the store under its own digest
        other = outcome.model_copy(update={"job_id": "mf-" + "0" * 32}).model_dump_json().encode()
        store.client.hset(key, mapping={"outcome_ref": blobs.put_bytes(other), "outcome_bytes": str(len(other))})
    elif forgery == "missing":
        blob_path(blobs, ref).unlink()
    else:
        path = blob_path(blobs, ref)
        path.write_bytes(path.read_bytes().replace(b'"ok"', b'"no"', 1))
    record = store.get(outcome.job_id)
    got = record.outcome
    assert got is not None and got.status == "failed" and got.result is None
    assert got.error.code == (ErrorCode.BLOB_NOT_FOUND if forgery == "missing" else ErrorCode.DIGEST_MISMATCH)
    assert got.error.retryable and "was not returned" in got.error.message and str(blobs.root) not in got.error.message
    assert record.untrusted == (forgery == "missing")  # a resubmission runs a job whose outcome is gone


def test_signing_on_a_swapped_reference_is_refused_like_a_forged_record(jobs: JobStore, tmp_path: Path) -> None:
    from tests.certs import signing_env

    env = signing_env(tmp_path)
    signer = OutcomeSigner(Path(env["MEDIAFLEET_SIGNING_KEY_FILE"]), Path(env["MEDIAFLEET_SIGNING_CERT_FILE"]),
                           Path(env["MEDIAFLEET_SIGNING_CERT_STORE"]))
    store, blobs, outcome = run_pdf(jobs, tmp_path, signer=signer)
    assert store.finish(outcome, delivery=1)
    assert not store.get(outcome.job_id).forged and store.get(outcome.job_id).outcome == outcome
    # A planted outcome, stored under its own digest and so intact in the store, swapped in.
    planted = outcome.model_copy(update={"started_at": datetime(2020, 1, 1, tzinfo=UTC)}).model_dump_json().encode()
    store.client.hset(store.key(outcome.job_id),
                      mapping={"outcome_ref": blobs.put_bytes(planted), "outcome_bytes": str(len(planted))})
    record = store.get(outcome.job_id)
    assert record.forged and record.outcome is None and record.untrusted
    assert store.discard_forged(outcome.job_id) and store.get(outcome.job_id) is None  # claimable again


def test_gc_keeps_an_outcome_blob_a_live_record_references(large: Case) -> None:
    store, blobs, outcome = large
    ref = fields(store, outcome.job_id)["outcome_ref"]
    orphan = blobs.put_bytes(b"an outcome blob no record names")
    later = datetime.now(UTC) + timedelta(days=30)  # every blob is past the time window
    report = collect_garbage(blobs, Retention(blob_s=60, temp_s=60, result_ttl_s=3600), now=later, redis=store.client)
    assert blobs.exists(ref) and not blobs.exists(orphan) and report.blobs_referenced >= 1
    assert store.get(outcome.job_id).outcome == outcome


@pytest.mark.integration
def test_a_fleet_job_returns_its_large_bundle_by_reference(fleet_env, start_worker, tmp_path: Path) -> None:
    start_worker("--concurrency=1", env={"MEDIAFLEET_OUTCOME_INLINE_MAX_BYTES": str(SMALL)})
    pdf = text_pdf(3)
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    local = Dispatcher(Settings(blob_root=tmp_path / "local-blobs"))

    job = fleet.submit(pdf)
    remote = job.bundle(timeout=120)
    in_process = local.submit(pdf).bundle()
    assert remote.status == "ok", remote.error
    assert without_run(remote) == without_run(in_process)
    evidence = [n.id for n in remote.nodes if n.node_type != "ProvenanceActivity"]  # an activity names one run
    assert evidence == [n.id for n in in_process.nodes if n.node_type != "ProvenanceActivity"] and evidence

    jobs = fleet.jobs()
    stored = fields(jobs, job.id)
    assert "outcome" not in stored and stored["outcome_ref"].startswith("sha256:")
    assert sum(len(v) for v in stored.values()) < 4 * SMALL
    # The result backend holds no copy: the record is the answer, and the delivery that wrote it
    # woke the waiters, so Celery's result of the task is not stored at all (looked at once the
    # message is acknowledged, which its worker does after the task's result would be stored).
    deadline = time.monotonic() + 30
    while jobs.client.hlen("unacked"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert jobs.client.get(f"celery-task-meta-{job.id}") is None

    again = fleet.submit(pdf)  # a resubmission returns the same bundle, read back by reference
    assert again.id == job.id and again.bundle(timeout=30).model_dump() == remote.model_dump()

    # The outcome's blob lost: the caller gets a public failure, never wrong evidence, and a
    # resubmission runs the job again.
    fleet.store.delete_idle(stored["outcome_ref"], datetime.now(UTC) + timedelta(days=1))
    lost = fleet.job(job.id).bundle(timeout=30)
    assert lost.status == "failed" and lost.error.code == ErrorCode.BLOB_NOT_FOUND
    rerun = fleet.submit(pdf).bundle(timeout=120)
    assert rerun.status == "ok" and without_run(rerun) == without_run(in_process)
    assert fields(jobs, job.id)["token"] != stored["token"]


def test_a_parts_large_outcome_is_kept_by_reference_in_its_jobs_record(jobs: JobStore, tmp_path: Path) -> None:
    """A part's outcome waiting in its job's record to be joined is kept as a record's outcome is:
    by reference past the inline limit (a 32-page range of a long PDF, not megabytes in Redis),
    signed with signing on, and never read back as evidence when its blob is gone or its field
    was planted."""
    from tests.certs import signing_env

    env = signing_env(tmp_path)
    signer = OutcomeSigner(Path(env["MEDIAFLEET_SIGNING_KEY_FILE"]), Path(env["MEDIAFLEET_SIGNING_CERT_FILE"]),
                           Path(env["MEDIAFLEET_SIGNING_CERT_STORE"]))
    store, blobs, outcome = run_pdf(jobs, tmp_path, signer=signer)
    job = outcome.model_copy(update={"job_id": "mf-" + "9" * 32})
    request = ExtractRequest(job_id=job.job_id, action="ocr_pdf", artifact=outcome.artifact)
    assert store.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600,
                       parts={"pages:3-4": outcome.job_id}) is not None
    assert store.report_part(job.job_id, "pages:3-4", outcome) == 1
    kept = json.loads(fields(store, job.job_id)["part:pages:3-4"])
    assert "outcome" not in kept and kept["outcome_bytes"] == str(len(outcome.model_dump_json().encode()))
    assert store.get(job.job_id).part("pages:3-4") == outcome

    planted = outcome.model_copy(update={"started_at": datetime(2020, 1, 1, tzinfo=UTC)}).model_dump_json()
    store.client.hset(store.key(job.job_id), "part:pages:3-4", json.dumps({"job_id": outcome.job_id, "outcome": planted}))
    forged = store.get(job.job_id).part("pages:3-4")
    assert forged.status == "failed" and forged.error.retryable and forged.job_id == outcome.job_id

    store.client.hset(store.key(job.job_id), "part:pages:3-4", json.dumps(kept))
    blob_path(blobs, kept["outcome_ref"]).unlink()
    gone = store.get(job.job_id).part("pages:3-4")
    assert gone.status == "failed" and gone.error.code == ErrorCode.BLOB_NOT_FOUND and gone.error.retryable
