"""A worker that stops itself (its GPU failed for good): the warm shutdown it asks its main process
for, and why, told from the pool process that found it to the main process that reports it."""

from __future__ import annotations

import logging
import mmap
import os
from signal import SIGTERM

__all__ = ["arm", "retired_because", "stop_worker"]

log = logging.getLogger("mediafleet.worker")

_main_pid: int | None = None  # the booted worker's main process (its pool processes inherit this)
# Why the worker stopped itself, written by the pool process that called stop_worker and read by
# the main process once the worker has shut down: a page of memory both share (mapped before the
# pool forks), NUL-padded UTF-8; all NULs while nothing stopped it.
_RETIRED_BYTES = 256
_retired: mmap.mmap | None = None


def stop_worker(why: str) -> None:
    """Ask this worker's main process for a warm shutdown, as SIGTERM does: it takes no more
    messages, lets the running tasks finish, hands its prefetched messages back to the queue,
    retires its presence and exits, reporting ``why`` as a failure (:class:`WorkerRetired`).
    Nothing happens outside a booted worker."""
    log.error("stopping this worker: %s; its supervisor should start a fresh one", why)
    if _retired is not None:
        _retired[:] = why.encode()[:_RETIRED_BYTES].ljust(_RETIRED_BYTES, b"\0")
    if _main_pid is not None:
        os.kill(_main_pid, SIGTERM)


def retired_because() -> str | None:
    if _retired is None or not (said := _retired[:].rstrip(b"\0")):
        return None
    return said.decode(errors="replace")


def arm() -> None:
    """In a booted worker's main process, before its pool forks: :func:`stop_worker` may act from now on."""
    global _main_pid, _retired
    _main_pid = os.getpid()
    _retired = mmap.mmap(-1, _RETIRED_BYTES)  # anonymous and shared: the pool processes inherit it
