"""A worker's pool process SIGKILLed mid-job (an OOM kill, a segfault): the job runs again, once.

Not one of issue 11's failures (the fleet held here), kept in the suite as the baseline the other
scenarios are measured against: late acks and reject-on-worker-lost put the message back at once.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from mediafleet.contract import JobState
from tests.chaos.conftest import record_time

pytestmark = pytest.mark.integration


def test_a_pool_process_killed_mid_job_is_redelivered_and_finishes_once(slow_fleet) -> None:  # type: ignore[no-untyped-def]
    setup = slow_fleet(soft_s=20, hard_s=25)
    fleet, (worker,) = setup.dispatcher, setup.workers
    _, job = setup.submit_slow("sigkill")
    (child,) = worker.child_pids()
    os.kill(child, signal.SIGKILL)
    killed_at = time.monotonic()
    bundle = job.bundle(timeout=40)
    record_time("a pool process SIGKILLed mid-job: done by its replacement", time.monotonic() - killed_at)
    assert bundle.status == "ok"
    record = fleet.jobs().get(job.id)
    assert record.state == JobState.DONE and record.attempts == 2 and record.completions == 1
