"""The fleet's records behind Redis Sentinel: one client factory that follows the master the
sentinels name, through a master killed or frozen, with claims and outcomes held by a replica
before they count (``WAIT``).

Real processes on loopback (:class:`tests.chaos.sentinel_cluster.SentinelCluster`: a master, two
replicas, three sentinels, ``redis-server --sentinel``); nothing is mocked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, JobState, Outcome
from mediafleet.contract.manifest import Modality
from mediafleet.fleet.redis_client import redis_client, sentinel_address
from mediafleet.fleet.replication import NotReplicated, hold
from mediafleet.fleet.store import JobStore
from mediafleet.settings import Settings
from tests.chaos.sentinel_cluster import MASTER_NAME, SentinelCluster

pytestmark = pytest.mark.integration


def request(i: int) -> ExtractRequest:
    return ExtractRequest(job_id=f"mf-{i:032x}", action="ocr_pdf", options={},
                          artifact=ArtifactRef(digest="sha256:" + f"{i:064x}", media_type="application/pdf",
                                               bytes=10, modality=Modality.PDF))


def outcome(req: ExtractRequest, by: str) -> Outcome:
    return Outcome.failed(req, PublicError(code=ErrorCode.INTERNAL_ERROR, message=f"written by {by}"),
                          datetime.now(UTC))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    with SentinelCluster(tmp_path / "ha", down_after_ms=800, failover_ms=2000) as deployment:
        yield deployment


def settings(cluster: SentinelCluster, tmp_path: Path, **over: object) -> Settings:
    return Settings(broker_url=cluster.broker_url, sentinel_master=MASTER_NAME, blob_root=tmp_path / "blobs",
                    **over)  # type: ignore[arg-type]


def test_a_sentinel_url_names_every_sentinel_and_the_masters_password_and_database() -> None:
    address = sentinel_address("sentinel://:p%40ss@10.0.0.1:26379/2;sentinel://10.0.0.2;sentinel://10.0.0.3:26380")
    assert address.sentinels == [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 26380)]
    assert (address.password, address.db) == ("p@ss", 2)
    with pytest.raises(ValueError, match="not a sentinel address"):
        sentinel_address("sentinel://10.0.0.1:26379;redis://10.0.0.2:6379")


def test_a_sentinel_broker_without_the_masters_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="MEDIAFLEET_SENTINEL_MASTER"):
        redis_client(Settings(broker_url="sentinel://127.0.0.1:26379", blob_root=tmp_path))


def test_behind_sentinel_a_claim_and_an_outcome_are_held_by_a_replica_before_they_count(
        cluster: SentinelCluster, tmp_path: Path) -> None:
    jobs = JobStore.from_settings(settings(cluster, tmp_path))
    req = request(1)
    token = jobs.claim(req, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
    assert token is not None
    attempt, _, _ = jobs.start(req.job_id, "w1", token)
    assert jobs.finish(outcome(req, "w1"), delivery=attempt)
    # Every replica holds the outcome already (the finish returned only after one did; the other
    # follows within its link's lag).
    for replica in cluster.nodes[1:]:
        client = redis.Redis(port=replica.port)
        deadline = time.monotonic() + 5
        while client.hget(jobs.key(req.job_id), "state") != b"failed" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.hget(jobs.key(req.job_id), "state") == b"failed"


def test_wait_for_more_replicas_than_there_are_fails_as_redis_away(cluster: SentinelCluster, tmp_path: Path) -> None:
    client = redis_client(settings(cluster, tmp_path))
    with pytest.raises(NotReplicated) as raised:
        hold(client, acks=3, wait_ms=50, bound_s=0.2)
    assert isinstance(raised.value, redis.ConnectionError)  # every retry loop treats it as Redis away
    assert hold(client, acks=2, wait_ms=1000, bound_s=5) == 2


def _run_jobs_through(cluster: SentinelCluster, tmp_path: Path, fault: str) -> None:
    """Claim, start and finish jobs in a loop while the master is killed or frozen; every job
    claimed ends with exactly its one outcome on the new master."""
    jobs = JobStore.from_settings(settings(cluster, tmp_path))
    old = cluster.master()
    finished: dict[str, str] = {}
    gap = 0.0
    faulted_at: float | None = None
    for i in range(60):
        if i == 20:
            faulted_at = time.monotonic()
            if fault == "kill":
                cluster.kill(old)
            else:
                cluster.freeze(old)
        req = request(i)
        began = time.monotonic()
        token = jobs.claim(req, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
        assert token is not None
        attempt, _, _ = jobs.start(req.job_id, "w1", token)
        assert attempt == 1
        assert jobs.finish(outcome(req, f"w1/{i}"), delivery=attempt)
        finished[req.job_id] = f"written by w1/{i}"
        gap = max(gap, time.monotonic() - began)
        if fault == "freeze" and faulted_at is not None and i == 40:
            cluster.thaw(old)
    assert faulted_at is not None
    assert cluster.master().port != old.port
    # Everything reported is on the new master, once.
    for job_id, by in finished.items():
        record = jobs.get(job_id)
        assert record is not None and record.state == JobState.FAILED and record.attempts == 1
        assert record.outcome is not None and record.outcome.error is not None
        assert record.outcome.error.message == by
    if fault == "freeze":
        # The thawed master steps down: it is made a replica of the new one and takes no write.
        deadline = time.monotonic() + 20
        while cluster.role(old) != "slave" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cluster.role(old) == "slave"
        with pytest.raises(redis.exceptions.ReadOnlyError):
            redis.Redis(port=old.port).set("mediafleet:probe", "1")
    print(f"\nsentinel ({fault}): the longest stall of one claim-start-finish {gap:.1f} s")


def test_records_ride_through_a_master_killed_under_them(cluster: SentinelCluster, tmp_path: Path) -> None:
    _run_jobs_through(cluster, tmp_path, "kill")


def test_records_ride_through_a_master_frozen_past_down_after_and_it_steps_down(
        cluster: SentinelCluster, tmp_path: Path) -> None:
    _run_jobs_through(cluster, tmp_path, "freeze")


def test_scripts_are_loaded_again_on_a_master_that_lost_them(cluster: SentinelCluster, tmp_path: Path) -> None:
    """A promoted replica holds none of the scripts the old master cached (-NOSCRIPT): they are
    loaded again, the call is not failed."""
    jobs = JobStore.from_settings(settings(cluster, tmp_path))
    assert jobs.get(request(7).job_id) is None
    redis.Redis(port=cluster.master().port).script_flush()
    token = jobs.claim(request(7), state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
    assert token is not None and jobs.start(request(7).job_id, "w1", token)[0] == 1


def test_a_deliverys_number_is_held_by_a_replica_before_its_job_runs(cluster: SentinelCluster, tmp_path: Path) -> None:
    """The start (the store's, and the consumer's take through kombu's client) returns only once a
    replica holds the delivery's number: a failover right after cannot give the number to another."""
    from mediafleet.fleet.deliveries import delivery_taker

    jobs = JobStore.from_settings(settings(cluster, tmp_path))
    replicas = [redis.Redis(port=node.port) for node in cluster.nodes[1:]]
    first, second = request(21), request(22)
    token = jobs.claim(first, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
    assert token is not None and jobs.start(first.job_id, "w1", token)[0] == 1
    assert any(r.hget(jobs.key(first.job_id), "owner") == b"1" for r in replicas)
    token = jobs.claim(second, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
    take = delivery_taker(jobs.client, replica_acks=1, replica_wait_ms=1000)
    assert token is not None and take(second.job_id, "w1", token, ("unacked_index", "unacked"), "t1", "{}")[0] == 1
    assert any(r.hget(jobs.key(second.job_id), "owner") == b"1" for r in replicas)
