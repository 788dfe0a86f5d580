"""The pool of pub/sub connections waiters sleep on between reads of a job's record: a
:class:`Watch` per waiter at a time, handed back to its job store's :class:`IdleWatches` when done
(a connection per job would be a connect and a handshake per job).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from mediafleet.fleet.keys import CELERY_RESULT, finished_channel
from mediafleet.fleet.records import text

__all__ = ["IdleWatches", "Watch"]


class Watch:
    """One pub/sub connection a waiter sleeps on between reads of a job's record.

    A wake-up: whoever wakes re-reads the record (a message may be missed while Redis is away, so a
    waiter also re-reads when its slice of time runs out), except that a plain job's outcome write
    publishes what it wrote, which the woken waiter takes instead, checked as the record's would be
    (:meth:`JobStore.noticed`; ``woken_by`` keeps the message). Closed, it goes back to its job
    store for the next waiter (unsubscribed, its connection kept: a connection per job would be a
    connect and a handshake per job); discarded, or broken, its connection is dropped.
    """

    def __init__(self, client: Any, idle: IdleWatches | None = None) -> None:
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._channels: set[str] = set()
        self._idle = idle
        self._broken = False
        self.woken_by: tuple[str, Any] | None = None
        """The channel and data of the message that ended the last :meth:`wait` (None: it timed out)."""

    def follow(self, job_id: str, task_id: str) -> None:
        """Wake on ``job_id``'s record being finished and on ``task_id``'s Celery result (subscribed
        before the caller reads the record, so no outcome can land unseen in between)."""
        wanted = {finished_channel(job_id), CELERY_RESULT + task_id} - self._channels
        if wanted:
            try:
                self._pubsub.subscribe(*sorted(wanted))
            except BaseException:
                self._broken = True
                raise
            self._channels |= wanted

    def wait(self, timeout: float) -> bool:
        """Sleep until a followed channel says something or ``timeout`` passes; whether it said.
        (A message on a channel an earlier waiter followed on this connection is not a wake-up.)"""
        deadline = time.monotonic() + timeout
        self.woken_by = None
        try:
            while (left := deadline - time.monotonic()) > 0:
                message = self._pubsub.get_message(timeout=left)
                if message is not None and (channel := text(message.get("channel"))) in self._channels:
                    self.woken_by = (channel, message.get("data"))
                    return True
        except BaseException:
            self._broken = True
            raise
        return False

    def close(self) -> None:
        """Done waiting: unsubscribe and hand the connection to the next waiter (or drop it)."""
        if self._idle is not None and not self._broken and self._channels:
            try:
                self._pubsub.unsubscribe()
            except Exception:  # noqa: BLE001 - Redis dropped it: drop it too
                self._broken = True
            else:
                self._channels = set()
                if self._idle.put(self):
                    return
        self.discard()

    def discard(self) -> None:
        """Drop the connection (Redis went away under it, or no waiter needs it)."""
        try:
            self._pubsub.close()
        except Exception:  # noqa: BLE001 - closing a connection Redis already dropped
            pass


class IdleWatches:
    """A job store's watches waiting for their next waiter (a few: one per waiter at a time), in
    the process that opened them (a forked child never reads its parent's connection)."""

    def __init__(self, keep: int = 8) -> None:
        self._keep = keep
        self._watches: list[Watch] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def take(self) -> Watch | None:
        with self._lock:
            if self._pid != os.getpid():
                self._watches, self._pid = [], os.getpid()  # the parent's: not ours to read or close
            return self._watches.pop() if self._watches else None

    def put(self, watch: Watch) -> bool:
        with self._lock:
            if len(self._watches) >= self._keep or self._pid != os.getpid():
                return False
            self._watches.append(watch)
            return True
