"""Cancellation: a job cancelled while it runs stops at its next progress point."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from mediafleet.contract.errors import Cancelled, ErrorCode, PublicError
from mediafleet.contract.jobs import JobState, Outcome
from mediafleet.workers.runtime.middleware.delivery import Delivery, Middleware, utc_now

__all__ = ["Cancellation"]


class Cancellation(Middleware):
    """A job cancelled before this delivery started is not run (it ends ``cancelled``); one
    cancelled while it runs stops at its next reported progress point."""

    def __init__(self, clock: Callable[[], datetime] = utc_now) -> None:
        self._clock = clock

    def before_run(self, delivery: Delivery) -> Outcome | None:
        if delivery.before != JobState.CANCELLED:
            return None
        return Outcome.failed(delivery.request, PublicError(code=ErrorCode.CANCELLED, message="the job was cancelled"),
                              self._clock())

    def on_progress(self, delivery: Delivery, done: int, total: int | None) -> bool:
        if delivery.state == JobState.CANCELLED:
            raise Cancelled("the job was cancelled")
        return True
