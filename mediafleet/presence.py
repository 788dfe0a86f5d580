"""Which workers are alive, what device class they serve and which queues they consume.

Each worker's main process announces itself in Redis (``mediafleet:worker:<hostname>``) when it is
ready and every ``HEARTBEAT_S`` after; the key expires ``TTL_S`` after the last beat, so a worker
killed outright drops out within that time. Each beat also scores the hostname in one sorted set
(``mediafleet:workers``, score: the beat's time), so finding the live workers reads that index and
their keys, never the keyspace. The dispatcher routes on this, with no broadcast round trip per
submit. A worker's beat also lists the jobs it holds (``running``: reserved or executing),
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
_INDEX = "mediafleet:workers"
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
    """Every worker whose heartbeat has not expired: the hostnames that beat within ``TTL_S``
    (the index) whose presence key is still there (one ZRANGEBYSCORE and one MGET, whatever the
    number of keys in Redis). Hostnames not seen for longer are dropped from the index."""
    now = time.time()
    pipe = client.pipeline()
    pipe.zremrangebyscore(_INDEX, "-inf", now - 4 * TTL_S)
    pipe.zrangebyscore(_INDEX, now - TTL_S - HEARTBEAT_S, "+inf")
    _, names = pipe.execute()
    if not names:
        return []
    out = []
    for raw in client.mget([worker_key(n.decode() if isinstance(n, bytes) else n) for n in names]):
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
        pipe = self._client.pipeline()
        pipe.set(self._key, json.dumps(body), ex=TTL_S)
        pipe.zadd(_INDEX, {self._body["hostname"]: body["at"]})
        pipe.execute()
        if self._on_beat is not None:
            self._on_beat()

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - Redis briefly away: beat again next time
                continue
