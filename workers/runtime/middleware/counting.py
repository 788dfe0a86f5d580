"""Delivery counting: each delivery counted in its job's record, and the limit on redeliveries."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import JobState, Outcome
from mediafleet.fleet.deliveries import MAX_DELIVERIES
from mediafleet.workers.runtime.middleware.delivery import Delivery, Middleware, Skip, utc_now

__all__ = ["DeliveryCounting", "DeliveryLimit"]


class DeliveryCounting(Middleware):
    """Counts the delivery in the job's record (which this delivery owns from then on) and skips a
    message there is nothing to run for. A delivery the worker's consumer counted as it took the
    message (``delivery.taken``) is not counted again.

    Skipped: a message of a submission that was cancelled and claimed again (the current submission
    has its own message), and a second message for a job already finished (sent again for a job
    thought unsent, recovered from a lost node, or redelivered after the visibility timeout). A
    skipped delivery stores no result, so it cannot wake (or mislead) the current submission's
    waiters.
    """

    def before_run(self, delivery: Delivery) -> Outcome | None:
        attempt, before, parts = delivery.taken or delivery.jobs.start(delivery.request.job_id, delivery.hostname,
                                                                       delivery.token)
        delivery.attempt, delivery.before, delivery.parts = attempt, before, parts
        if attempt < 0 or before in (JobState.DONE, JobState.FAILED):
            raise Skip
        return None


class DeliveryLimit(Middleware):
    """A job whose deliveries stopped their worker process ``limit`` times (an OOM kill, a
    segfault, a lost node) is not run again: it fails with ``worker_lost`` and the queue flows."""

    def __init__(self, limit: int = MAX_DELIVERIES, clock: Callable[[], datetime] = utc_now) -> None:
        self._limit = limit
        self._clock = clock

    def before_run(self, delivery: Delivery) -> Outcome | None:
        if delivery.attempt <= self._limit:
            return None
        return Outcome.failed(delivery.request, PublicError(
            code=ErrorCode.WORKER_LOST,
            message=f"the job stopped its worker process {delivery.attempt - 1} times; it is not delivered again",
        ), self._clock())
