"""Which workers are alive, what device class they serve and which queues they consume.

Each worker's main process announces itself in Redis (``mediafleet:worker:<hostname>``) when it is
ready and every ``HEARTBEAT_S`` after; the key expires ``TTL_S`` after the last beat, so a worker
killed outright drops out within that time. The dispatcher routes on this, with no broadcast round
trip per submit. A worker's beat also lists the jobs it holds (``running``: reserved or executing),
so a record that names a live worker which no longer holds the job (its outcome lost with a Redis
crash, or the worker restarted under the same name) can be told from a job that is still running.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["HEARTBEAT_S", "TTL_S", "Announcer", "LiveWorker", "live_workers", "worker_key"]

_PREFIX = "mediafleet:worker:"
HEARTBEAT_S = 5.0
TTL_S = 15


def worker_key(hostname: str) -> str:
    """The presence key of the worker ``hostname`` (present while its heartbeat lasts)."""
    return _PREFIX + hostname


@dataclass(frozen=True)
class LiveWorker:
    hostname: str
    device: str
    queues: tuple[str, ...]
    pid: int
    seen_at: float


def live_workers(client: Any) -> list[LiveWorker]:
    """Every worker whose heartbeat has not expired."""
    out = []
    for key in client.scan_iter(match=_PREFIX + "*", count=100):
        raw = client.get(key)
        if raw is None:
            continue
        data = json.loads(raw)
        out.append(LiveWorker(data["hostname"], data["device"], tuple(data["queues"]), data["pid"], data["at"]))
    return sorted(out, key=lambda w: w.hostname)


class Announcer:
    """A daemon thread in the worker's main process that keeps its presence key alive.

    ``on_beat`` runs after each beat (the worker releases jobs held for want of a worker);
    ``running`` gives the ids of the jobs the worker holds now, or None when it cannot tell (the
    beat then lists none, and nobody takes the worker's started jobs for lost while it beats).
    """

    def __init__(self, client: Any, hostname: str, device: str, queues: list[str],
                 on_beat: Callable[[], None] | None = None,
                 running: Callable[[], Iterable[str] | None] | None = None) -> None:
        self._client = client
        self._on_beat = on_beat
        self._running = running
        self._key = worker_key(hostname)
        self._body = {"hostname": hostname, "device": device, "queues": sorted(queues), "pid": os.getpid()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mediafleet-presence", daemon=True)

    def start(self) -> None:
        self._beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self._client.delete(self._key)
        except Exception:  # noqa: BLE001 - shutting down; the key expires anyway
            pass

    def _beat(self) -> None:
        body: dict[str, Any] = {**self._body, "at": time.time()}
        held = self._running() if self._running is not None else None
        if held is not None:
            body["running"] = sorted(held)
        self._client.set(self._key, json.dumps(body), ex=TTL_S)
        if self._on_beat is not None:
            self._on_beat()

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - Redis briefly away: beat again next time
                continue
