"""A plain Celery app for benchmarks/bench_fleet.py: the same 10 MB artifact inline or by reference,
and a task that does nothing (the floor of a Celery round trip on this machine).

``inline`` gets the bytes base64-encoded in the message (what today's callers send to sidecars);
``by_reference`` gets a digest and reads the bytes from mediafleet's blob store, re-hashing them as
a worker does. Both return the sha256, so both do the same useful work on arrival. ``noop`` returns
its argument: what is left is Celery's own path (the message sent, taken by the worker, handed to
its pool process, the result stored and published), with the fleet's settings that bear on it
(JSON, a prefork pool, prefetch 1, late acknowledgement).
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from celery import Celery

from mediafleet.blobs.local import LocalBlobStore

app = Celery("bench-transport", broker=os.environ["MEDIAFLEET_BROKER_URL"], backend=os.environ["MEDIAFLEET_BROKER_URL"])
app.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json", worker_prefetch_multiplier=1,
                task_acks_late=True)
store = LocalBlobStore(Path(os.environ["MEDIAFLEET_BLOB_ROOT"]))


@app.task(name="bench.inline")
def inline(data_b64: str) -> str:
    return hashlib.sha256(base64.b64decode(data_b64)).hexdigest()


@app.task(name="bench.by_reference")
def by_reference(digest: str) -> str:
    with store.verified_path(digest) as path:
        return hashlib.sha256(path.read_bytes()).hexdigest()


@app.task(name="bench.noop")
def noop(value: int) -> int:
    return value
