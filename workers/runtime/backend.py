"""The result backend: Celery's Redis backend, less the per-job result subscription, writing a
task's result only while its delivery is of the job's current submission."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

from celery import Task, states
from celery.backends.redis import RedisBackend, SentinelBackend
from celery.exceptions import BackendStoreError
from mediafleet.workers.runtime.names import IN_RECORD, PUBLISHED
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError as RedisFull

from mediafleet.fleet.deliveries import task_result_writer

__all__ = ["BACKENDS", "FleetRedisBackend", "FleetSentinelBackend", "publish_progress"]


class FleetRedisBackend(RedisBackend):  # type: ignore[misc]
    """Celery's Redis result backend, less the result subscription ``send_task`` opens for each
    task it sends (and drops again when the result object is collected): a subscribe and an
    unsubscribe per job on the dispatcher. Nobody here waits through ``AsyncResult.get``: a job's
    waiter wakes on its own subscription (:class:`mediafleet.fleet.store.Watch`), which follows the
    task's result channel too. ``AsyncResult.get`` still works (it subscribes when it waits)."""

    def on_task_call(self, producer: Any, task_id: str) -> None:
        return None

    def exception_safe_to_retry(self, exc: Exception) -> bool:
        """A result write Redis refused because it is full is retried like one to a lost
        connection (``result_backend_always_retry``): it wrote nothing."""
        return isinstance(exc, RedisFull) or bool(super().exception_safe_to_retry(exc))

    def _store_result(self, task_id: str, result: Any, state: str, traceback: Any = None, request: Any = None,
                      **kwargs: Any) -> Any:
        """Stores a fleet task's result only while its delivery is of the job's current submission.

        A task's id is its job's, so a stale delivery (a worker that ran an earlier submission,
        frozen or cut off from Redis meanwhile; a hard time limit Celery enforces late) would
        otherwise store its failure over the task of a later submission of the same job, whose
        waiters would read it as theirs and fail without the job having run (found with Redis away
        for 40 s under running jobs). The check and the write are one step in Redis
        (:func:`mediafleet.fleet.deliveries.task_result_writer`). Tasks without a token write as Celery does.
        """
        kwargs_of_task = getattr(request, "kwargs", None)
        token = kwargs_of_task.get("token") if isinstance(kwargs_of_task, dict) else None
        if not isinstance(token, str) or not token:
            return super()._store_result(task_id, result, state, traceback, request=request, **kwargs)
        meta = self._get_result_meta(result=result, state=state, traceback=traceback, request=request)
        meta["task_id"] = task_id
        value = self.encode(meta)
        if len(value) > self._MAX_STR_VALUE_SIZE:
            raise BackendStoreError("value too large for Redis backend")
        expires = self.failure_expires if state == states.FAILURE else self.expires
        self.ensure(self._write_task_result, (task_id, self.get_key_for_task(task_id), value, expires, token))
        return result

    @cached_property
    def _write_task_result(self) -> Callable[[str, str, str, int | None, str], bool]:
        return task_result_writer(self.client)

    def mark_as_done(self, task_id: str, result: Any, request: Any = None, store_result: bool = True,
                     state: str = states.SUCCESS) -> None:
        """Stores a task's summary, but for a plain job whose delivery wrote its outcome into the
        record and woke its waiters (``IN_RECORD``): every waiter reads the record, and a task
        result is only read for a job whose record has no outcome (a lost worker's), or for a job's
        parts (whether every task of the job ended). Storing it anyway cost a write and a publish
        per job, in the moment the caller reads its bundle. A progress state the task stored while
        it ran is removed (it would say ``PROGRESS`` of a finished task until it expired)."""
        if isinstance(result, dict) and result.get(IN_RECORD) is True:
            store_result = False
            if result.get(PUBLISHED):
                self.forget(task_id)
        super().mark_as_done(task_id, result, request=request, store_result=store_result, state=state)


def publish_progress(task: Task, meta: dict[str, Any]) -> None:
    """A progress point as the task's ``PROGRESS`` state. Celery raises ``BackendStoreError`` once
    its retries of the write are spent (Redis away ~10 s or more): that is Redis away, raised here as
    Redis's own error, which the middleware's progress reporting rides out as best effort (found
    with Redis away for 40 s under a running job, whose next progress point failed it as
    ``internal_error``: an answer that would have stuck, had Redis come back before its outcome
    was written)."""
    try:
        task.update_state(state="PROGRESS", meta=meta)
    except BackendStoreError as exc:
        raise RedisConnectionError("the task's progress state could not be stored") from exc


class FleetSentinelBackend(FleetRedisBackend, SentinelBackend):  # type: ignore[misc]
    """:class:`FleetRedisBackend` on the master the sentinels name (``sentinel://`` result backends,
    ``master_name`` in the result backend's transport options)."""


BACKENDS = {**{scheme: f"{__name__}:FleetRedisBackend" for scheme in ("redis", "rediss")},
            "sentinel": f"{__name__}:FleetSentinelBackend"}
