"""The dispatcher's own record of each job, for idempotent resubmits.

A job id is a hash of the artifact digest, the capability, the extractor version and the options,
so the same work always has the same id. ``claim`` atomically records a job the first time it is
submitted (Redis ``SET NX``); a resubmit of a job that is queued, running or finished returns the
existing one instead of doing the work twice. Only a job that failed in a way worth retrying (a
worker lost, an engine unavailable) or was cancelled may be claimed again.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JobStore"]

_PREFIX = "mediafleet:job:"


class JobStore:
    def __init__(self, app: Any, ttl_s: int) -> None:
        self._app = app
        self._redis = app.backend.client
        self._ttl_s = ttl_s

    def claim(self, job_id: str) -> bool:
        """True when the caller must enqueue ``job_id`` (new, or its last run may be retried)."""
        key = _PREFIX + job_id
        record = json.dumps({"job_id": job_id, "state": "queued"})
        if self._redis.set(key, record, nx=True, ex=self._ttl_s):
            return True
        previous = self._app.AsyncResult(job_id)
        if not self._retryable(previous):
            return False
        previous.forget()
        self._redis.set(key, record, ex=self._ttl_s)
        return True

    @staticmethod
    def _retryable(result: Any) -> bool:
        state = result.state
        if state in ("FAILURE", "REVOKED"):
            return True
        if state == "SUCCESS":
            outcome = result.result
            error = outcome.get("error") if isinstance(outcome, dict) else None
            return bool(error and error.get("retryable"))
        return False
