"""A node lost with its worker: its started job is redelivered within a bound, and ``status`` is honest.

Failure 6: the job stalled for the visibility timeout plus kombu's restore sweep (185 s with a 40 s
hard limit; about 2.5 h with the default manifest), while ``status JOB`` said ``started`` on a
worker that ``status`` no longer listed. With ``MEDIAFLEET_RECOVER_LOST_WORKERS`` on, a live worker
queues such a job again once the lost worker's presence has expired (15 s) and the record has not
moved for as long, at its next heartbeat (5 s): about 20 s after the loss.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from mediafleet.contract import JobState
from tests.chaos.conftest import record_time, wait_started
from tests.media import marked_pdf

pytestmark = pytest.mark.integration

BOUND_S = 30  # presence TTL (15 s) + one heartbeat (5 s) + the job's own ~4 s, with margin


def test_a_lost_nodes_started_job_is_redelivered_within_the_bound(slow_fleet) -> None:  # type: ignore[no-untyped-def]
    setup = slow_fleet(soft_s=20, hard_s=25, workers=2, MEDIAFLEET_RECOVER_LOST_WORKERS="true")  # visibility: 91 s
    fleet, (lost, _) = setup.dispatcher, setup.workers
    jobs = [fleet.submit(marked_pdf("MF-SLOW", salt=f"lost{i}")) for i in range(2)]
    for job in jobs:
        wait_started(job)
    (job,) = [j for j in jobs if fleet.jobs().get(j.id).hostname == lost.hostname]
    os.killpg(lost.proc.pid, signal.SIGKILL)
    lost.proc.wait(timeout=10)
    killed_at = time.monotonic()
    stale_status_s = 0.0
    while True:
        # status first, then the record: a worker gone from status (its presence expired) stays
        # gone, so a record read after it must not still call that worker alive
        live = {h for hosts in fleet.status()["workers"].values() for h in hosts}
        record = fleet.jobs().get(job.id)
        if record is None or record.final:
            break
        assert time.monotonic() - killed_at < BOUND_S, record.summary()
        summary = record.summary()
        if summary["state"] == JobState.STARTED.value and record.hostname not in live \
                and summary.get("worker_alive") is not False:
            stale_status_s = time.monotonic() - killed_at  # status claims a worker it no longer lists
        time.sleep(0.25)
    recovered = time.monotonic() - killed_at
    record_time("a lost node's started job: done on another worker", recovered)
    bundle = job.bundle(timeout=5)
    assert bundle.status == "ok"
    record = fleet.jobs().get(job.id)
    assert record.completions == 1 and record.hostname != lost.hostname
    assert stale_status_s == 0.0  # once the worker drops out of `status`, the job's status says so too
