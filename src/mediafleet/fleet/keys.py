"""The names of the fleet's keys and channels in Redis, and the lists kombu keeps a queue in.

Every key the job store, presence, gc and the KEDA scaler read is named here, so a deployment (the
Redis exporter's list, a Redis Cluster's hash tags) can be checked against one module.
"""

from __future__ import annotations

__all__ = ["CELERY_RESULT", "FINISHED", "HELD", "KOMBU_PRIORITY_SEP", "PREFIX", "STARTED", "SWEEP", "finished_channel",
           "job_key", "queue_lists"]

# A job's record: this prefix and the job id.
PREFIX = "mediafleet:job:"
# Jobs waiting for a live worker of an allowed device class (on no queue yet).
HELD = "mediafleet:held"
# Jobs some delivery has started and not yet finished (what lost-node recovery looks through).
STARTED = "mediafleet:started"
# Celery's Redis result backend keeps a task's result under this prefix and the task id (the job id),
# and publishes it on a channel of the same name.
CELERY_RESULT = "celery-task-meta-"
# A job's record publishes here when its outcome is written.
FINISHED = "mediafleet:finished:"
# Which live worker looks through them this heartbeat (one at a time, not every worker at every beat).
SWEEP = "mediafleet:sweep"
# kombu's Redis transport keeps priority levels 1..9 of a queue in lists of their own, named
# "<queue><sep><level>"; level 0 is the queue's own list.
KOMBU_PRIORITY_SEP = "\x06\x16"


def job_key(job_id: str) -> str:
    """The key of a job's record (a hash)."""
    return PREFIX + job_id


def finished_channel(job_id: str) -> str:
    """The pub/sub channel a job's finisher announces its outcome on
    (:meth:`mediafleet.fleet.store.JobStore.announce_finished`)."""
    return FINISHED + job_id


def queue_lists(queue: str) -> list[str]:
    """Every Redis list that holds ``queue``'s messages, one per priority level (what a queue's
    length is summed over: ``mediafleet status``, the KEDA triggers, the Redis exporter)."""
    return [queue, *(f"{queue}{KOMBU_PRIORITY_SEP}{level}" for level in range(1, 10))]
