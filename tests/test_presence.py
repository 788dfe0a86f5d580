"""Which workers are alive, read from the presence index, never from a scan of the keyspace."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mediafleet.fleet.presence import Announcer, live_workers, worker_key


@pytest.mark.integration
def test_live_workers_are_read_from_the_index_not_the_keyspace(jobs: Any) -> None:
    client = jobs.client
    client.mset({f"mediafleet:job:mf-{n:032x}": "x" for n in range(2000)})  # a fleet's records
    one = Announcer(client, "one@test", "cpu", ["mf.ocr_pdf.cpu"], running=lambda: ["mf-" + "1" * 32])
    two = Announcer(client, "two@test", "gpu", ["mf.analyze_image.gpu"])
    one.start()
    two.start()

    def no_scan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("live_workers scanned the keyspace")

    client.scan_iter = no_scan  # type: ignore[method-assign]
    found = live_workers(client)
    assert [(w.hostname, w.device, w.queues) for w in found] == [
        ("one@test", "cpu", ("mf.ocr_pdf.cpu",)), ("two@test", "gpu", ("mf.analyze_image.gpu",))]
    two.stop()  # a warm shutdown deletes its key at once
    assert [w.hostname for w in live_workers(client)] == ["one@test"]
    client.delete(worker_key("one@test"))  # a lost worker: its key expired
    assert live_workers(client) == []
    one.stop()
    client.zadd("mediafleet:workers", {"long-gone@test": time.time() - 3600})
    live_workers(client)
    assert client.zscore("mediafleet:workers", "long-gone@test") is None  # dropped from the index
