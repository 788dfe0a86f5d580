"""The worker's consumer: records each message it refuses in the job's record, and counts fleet
deliveries as it takes them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from celery.worker.consumer import Consumer
from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import JobState, Outcome
from mediafleet.fleet.store import JobStore
from mediafleet.workers.runtime import transport

__all__ = ["FleetConsumer", "refused"]


_REFUSED = PublicError(
    code=ErrorCode.INVALID_REQUEST, retryable=True,
    message="a worker refused the job's message (unsigned, or signed with a key it does not trust); "
            "submit it again from a dispatcher that has the fleet's signing key",
)


def refused(jobs: JobStore, job_id: str) -> bool:
    """Record that a worker refused the message of a job no delivery has started: failed, retryable,
    so the job is not left ``queued`` for its record's lifetime and a resubmission runs it."""
    record = jobs.get(job_id)
    if record is None or record.state != JobState.QUEUED:
        return False
    return jobs.finish(Outcome.failed(record.request, _REFUSED, datetime.now(UTC)), seen_attempts=record.attempts)


class FleetConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, which also records each message it refuses (bad content type, failed
    signature) in the job's record, through the app's ``mediafleet_on_refused``, and, where the
    app's ``mediafleet_counts_taken`` says so, counts each fleet delivery as it takes the message
    (:class:`_FleetQoS`), under this worker's name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        transport.count_taken_by(self.hostname if getattr(self.app, "mediafleet_counts_taken", False) else None)

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        super().on_decode_error(message, exc)
        self._record_refusal(message)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        super().on_invalid_task(body, message, exc)
        self._record_refusal(message)

    def _record_refusal(self, message: Any) -> None:
        hook = getattr(self.app, "mediafleet_on_refused", None)
        job_id = (message.headers or {}).get("id") if hasattr(message, "headers") else None
        if hook is None or not isinstance(job_id, str):
            return
        try:
            hook(job_id)
        except Exception:  # noqa: BLE001 - never let bookkeeping stop the consumer
            return
