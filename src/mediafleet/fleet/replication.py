"""Waiting until replicas hold what the fleet wrote, so a failover loses nothing it acknowledged.

Redis replicates asynchronously: a master that took a write and died before a replica had it
takes the write with it. ``WAIT n ms`` answers how many replicas hold every write its own
connection made so far; the replication stream is in order, so a marker written on any connection
after a write another connection made (a worker's outcome, read by a waiter) and then waited for
proves that write held too. :func:`hold` does that in one round trip.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError as RedisConnectionError

if TYPE_CHECKING:
    from mediafleet.settings import Settings

__all__ = ["MARKER", "NotReplicated", "hold", "replica_acks"]

# The key :func:`hold` writes before it waits (one short-lived key per process, never read).
MARKER = "mediafleet:replicated:"


class NotReplicated(RedisConnectionError):
    """Fewer replicas than asked held the fleet's writes within the bound: counted as Redis being
    away (the write is retried, the job's outcome not reported), never as an answer about a job."""


def replica_acks(settings: Settings) -> int:
    """The replicas that must hold a claim, a delivery's start and an outcome: the settings'
    ``replica_acks``, else 1 behind Sentinel (a replica is there to hold them) and 0 otherwise."""
    if settings.replica_acks is not None:
        return settings.replica_acks
    url = settings.backend()
    return int(url is not None and url.startswith("sentinel://"))


def hold(client: Any, acks: int, wait_ms: int, bound_s: float) -> int:
    """Return once ``acks`` replicas hold everything written before this call (the number that
    do); with ``acks`` 0 at once, with 0.

    Each try writes a marker and ``WAIT``s ``wait_ms`` for it on the same connection; tries go on
    for ``bound_s`` seconds.

    Raises:
        NotReplicated: still too few replicas after ``bound_s``.
    """
    if acks <= 0:
        return 0
    deadline = time.monotonic() + bound_s
    while True:
        pipe = client.pipeline(transaction=False)
        pipe.set(MARKER + str(os.getpid()), "1", px=60_000)
        pipe.execute_command("WAIT", acks, wait_ms)
        held = int(pipe.execute()[1])
        if held >= acks:
            return held
        if time.monotonic() >= deadline:
            raise NotReplicated(f"{held} of the {acks} replicas asked hold the fleet's writes")
