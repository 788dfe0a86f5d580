"""A two-task Celery app for benchmarks/bench_fleet.py: the same 10 MB artifact inline or by reference.

``inline`` gets the bytes base64-encoded in the message (what today's callers send to sidecars);
``by_reference`` gets a digest and reads the bytes from mediafleet's blob store, re-hashing them as
a worker does. Both return the sha256, so both do the same useful work on arrival.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from celery import Celery

from mediafleet.blobstore import LocalBlobStore

app = Celery("bench-transport", broker=os.environ["MEDIAFLEET_BROKER_URL"], backend=os.environ["MEDIAFLEET_BROKER_URL"])
app.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json", worker_prefetch_multiplier=1)
store = LocalBlobStore(Path(os.environ["MEDIAFLEET_BLOB_ROOT"]))


@app.task(name="bench.inline")
def inline(data_b64: str) -> str:
    return hashlib.sha256(base64.b64decode(data_b64)).hexdigest()


@app.task(name="bench.by_reference")
def by_reference(digest: str) -> str:
    with store.verified_path(digest) as path:
        return hashlib.sha256(path.read_bytes()).hexdigest()
