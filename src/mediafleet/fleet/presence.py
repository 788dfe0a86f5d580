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

__all__ = ["HEARTBEAT_S", "INDEX_KEY", "TTL_S", "Announcer", "LiveWorker", "live_window", "live_workers", "worker_key"]

_PREFIX = "mediafleet:worker:"
_INDEX = "mediafleet:workers"
INDEX_KEY = _INDEX
"""The sorted set of hostnames by their latest beat (read by the job store's routed claim too)."""
HEARTBEAT_S = 5.0
TTL_S = 15


def worker_key(hostname: str) -> str:
    """The presence key of the worker ``hostname`` (present while its heartbeat lasts)."""
    return _PREFIX + hostname


def live_window(now: float) -> tuple[float, float]:
    """(hostnames that beat before the first are dropped from the index; those that beat since the
    second are live while their key lasts), at ``now``."""
    return now - 4 * TTL_S, now - TTL_S - HEARTBEAT_S


@dataclass(frozen=True)
class LiveWorker:
    hostname: str
    device: str
    queues: tuple[str, ...]
    pid: int
    seen_at: float


# KEYS[1] the index; ARGV[1] drop hostnames that beat before this, ARGV[2] list those that beat since
# this, ARGV[3] the presence key prefix. The presence bodies of the listed hostnames whose key is
# still there (one round trip: what a dispatcher routes each submission on).
_LIVE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local names = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '+inf')
local out = {}
for _, name in ipairs(names) do
  local body = redis.call('GET', ARGV[3] .. name)
  if body then out[#out + 1] = body end
end
return out
"""


def live_workers(client: Any) -> list[LiveWorker]:
    """Every worker whose heartbeat has not expired: the hostnames that beat within ``TTL_S``
    (the index) whose presence key is still there (one script reading the index and those keys,
    whatever the number of keys in Redis: one round trip). Hostnames not seen for longer are
    dropped from the index."""
    out = []
    for raw in client.register_script(_LIVE)(keys=[_INDEX], args=[*live_window(time.time()), _PREFIX]):
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
