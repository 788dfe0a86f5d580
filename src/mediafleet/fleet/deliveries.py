"""What a worker does to a job's record as it takes and ends a delivery, outside the job store: the
consumer's count of the delivery it takes (:func:`delivery_taker`, through kombu's own client) and
the task's Celery result written only for the record's own submission (:func:`task_result_writer`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from mediafleet.contract.jobs import JobState
from mediafleet.fleet import scripts as jobscripts
from mediafleet.fleet.keys import STARTED, job_key
from mediafleet.fleet.replication import NotReplicated, hold

__all__ = ["MAX_DELIVERIES", "Started", "delivery_taker", "started_reply", "task_result_writer"]

# A job whose worker process died this many times (OOM kill, segfault, SIGKILL) is not delivered
# again: it fails with ``worker_lost`` and the queue keeps flowing.
MAX_DELIVERIES = 3


def task_result_writer(client: Any) -> Callable[[str, str, str, int | None, str], bool]:
    """How a delivery writes its task's Celery result through ``client`` (Celery's backend's own):
    ``write(task_id, key, value, expires_s, token)``, True when written. A delivery of an earlier
    submission of the job writes nothing (:data:`mediafleet.fleet.scripts.TASK_RESULT`)."""
    script = client.register_script(jobscripts.TASK_RESULT)

    def write(task_id: str, key: str, value: str, expires_s: int | None, token: str) -> bool:
        lifetime = str(int(expires_s)) if expires_s else ""
        return bool(script(keys=[key, job_key(task_id)], args=[value, lifetime, token]))

    return write


Started = tuple[int, JobState | None, dict[str, str]]
"""What counting a delivery gives (:meth:`mediafleet.fleet.store.JobStore.start`): its number (-1 for a stale message, 0 for
an unknown job), the record's state before it, and the parts the job fanned out (name -> job id)."""


def started_reply(reply: Sequence[Any]) -> Started:
    """A START or TAKE script's reply as :data:`Started`."""
    attempts, before, parts = (v.decode() if isinstance(v, bytes) else v for v in reply)
    return int(attempts), (JobState(before) if before else None), json.loads(parts) if parts else {}


def delivery_taker(client: Any, replica_acks: int = 0,
                   replica_wait_ms: int = 1000) -> Callable[[str, str, str, tuple[str, str], str, str], Started]:
    """How a worker's consumer counts a delivery as it takes the message, through ``client`` (kombu's
    own: no retries, which would stall the consumer's loop): ``take(job_id, hostname, token,
    (unacked index, unacked hash), delivery tag, the delivery as kombu keeps it)`` records the
    delivery as kombu's QoS would and starts it as :meth:`mediafleet.fleet.store.JobStore.start` does, in one step
    (:data:`mediafleet.fleet.scripts.TAKE`); returns what ``start`` returns.

    With ``replica_acks``, one ``WAIT`` of ``replica_wait_ms`` follows, so the delivery's number is
    held by a replica before its job runs (fencing through a failover); not held by then, the job
    runs anyway: waiting longer would stall the consumer's loop."""
    script = client.register_script(jobscripts.TAKE)

    def take(job_id: str, hostname: str, token: str, unacked: tuple[str, str], tag: str, kept: str) -> Started:
        now = time.time()
        started = started_reply(script(keys=[job_key(job_id), STARTED, *unacked],
                                       args=[hostname, os.getpid(), now, token, job_id, now, tag, kept]))
        if replica_acks and started[0] > 0:
            try:
                hold(client, replica_acks, replica_wait_ms, 0)
            except NotReplicated:
                pass  # the job runs; only a failover in this moment could reuse its number
        return started

    return take
