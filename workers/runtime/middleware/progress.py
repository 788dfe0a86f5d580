"""Progress: throttled, and reported into the job's record and to the broker's clients."""

from __future__ import annotations

import time
from collections.abc import Callable

from mediafleet.fleet.redis_client import redis_away_errors
from mediafleet.modalities.registry import progress_unit
from mediafleet.workers.runtime.middleware.delivery import Delivery, Middleware

__all__ = ["PROGRESS_EVERY_S", "TRANSIENT", "ProgressReporting", "ProgressThrottle"]

# What Redis being briefly away (or full) looks like to a progress call: the fleet's one list of
# Redis-away errors, and any socket or disk error.
TRANSIENT = (*redis_away_errors(), OSError)
PROGRESS_EVERY_S = 1.0


class ProgressThrottle(Middleware):
    """Lets a progress call through at most every ``every_s`` seconds, and always the last one."""

    def __init__(self, every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._every_s = every_s
        self._clock = clock

    def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
        now = self._clock()
        if delivery.progress_at is not None and now - delivery.progress_at < self._every_s and done != total:
            return False
        delivery.progress_at = now
        return True


class ProgressReporting(Middleware):
    """Publishes progress (``done``, ``total``, the action's unit) and records it in the job's
    record, keeping the record's state for :class:`Cancellation`. Best effort: with Redis briefly
    away the job goes on, and the call stops here.

    The last call (``done == total``) is not published: the task's own result replaces it a moment
    later, and publishing it would only wake every waiter once more for nothing (two round trips
    and a wake-up per job; all a one-page job reports). With ``hold_last`` a plain job's last call
    is not written either but kept in ``delivery.last_progress`` for :class:`OutcomeReporting` to
    write with the outcome, which then also does what this point's cancellation check would have
    done (:meth:`JobStore.finish`'s ``progress``)."""

    def __init__(self, hold_last: bool = False) -> None:
        self._hold_last = hold_last

    def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
        unit = progress_unit(delivery.request.action)
        last = total is not None and done >= total
        if last and self._hold_last and delivery.plain:
            delivery.last_progress = (done, total, unit)
            return True
        try:
            if not last:
                delivery.publish({"done": done, "total": total, "unit": unit})
                delivery.published = True
            delivery.state = delivery.jobs.progress(delivery.request.job_id, done, total, unit)
        except TRANSIENT:
            return False
        return True
