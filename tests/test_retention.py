"""The retention rule and ``mediafleet gc``: both blob stores, the result backend, the CLI."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mediafleet.contract import default_manifest
from mediafleet.contract.errors import Unavailable
from mediafleet import LocalBlobStore, Settings
from mediafleet.blobs.local import open_store
from mediafleet.blobs.retention import (
    Retention,
    collect_garbage,
    expire_results,
    gc,
    live_references,
)
from mediafleet.blobs.s3 import REFRESH_S, S3BlobStore
from tests.conftest import free_port

WINDOW = Retention(blob_s=1000, temp_s=100, result_ttl_s=500)


def _age(path: Path, seconds: float) -> None:
    """Set a file's last-use stamp ``seconds`` in the past."""
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.fixture
def local(tmp_path: Path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path / "blobs")


def _blob_file(store: LocalBlobStore, digest: str) -> Path:
    return store._path(digest)


def test_the_windows_follow_the_settings_and_the_manifest() -> None:
    manifest = default_manifest()
    longest = manifest.max_hard_time_limit_s()
    retention = Retention.from_settings(Settings(result_ttl_s=86400), manifest)
    assert retention.blob_s == 86400 + longest + REFRESH_S
    assert retention.temp_s == longest + 600 and retention.result_ttl_s == 86400


def test_local_blobs_past_the_window_are_deleted_the_rest_kept(local: LocalBlobStore) -> None:
    old, fresh = local.put_bytes(b"old" * 100), local.put_bytes(b"fresh")
    _age(_blob_file(local, old), WINDOW.blob_s + 60)
    _age(_blob_file(local, fresh), WINDOW.blob_s - 60)

    dry = collect_garbage(local, WINDOW, now=datetime.now(UTC), dry_run=True)
    assert (dry.blobs_seen, dry.blobs_deleted, dry.bytes_deleted, dry.temp_deleted) == (2, 1, 300, None)
    assert local.exists(old)

    report = collect_garbage(local, WINDOW, now=datetime.now(UTC))
    assert (report.blobs_seen, report.blobs_deleted, report.bytes_deleted, report.results_expired) == (2, 1, 300, None)
    assert not local.exists(old) and local.exists(fresh)


def test_storing_or_reading_a_local_blob_refreshes_it(local: LocalBlobStore) -> None:
    stored, read = local.put_bytes(b"stored again"), local.put_bytes(b"read again")
    for digest in (stored, read):
        _age(_blob_file(local, digest), WINDOW.blob_s + 60)
    local.put_bytes(b"stored again")
    with local.verified_path(read):
        pass
    report = collect_garbage(local, WINDOW, now=datetime.now(UTC))
    assert report.blobs_deleted == 0 and local.exists(stored) and local.exists(read)


def test_a_blob_used_after_the_listing_is_not_deleted(local: LocalBlobStore) -> None:
    digest = local.put_bytes(b"resubmitted during the sweep")
    _age(_blob_file(local, digest), WINDOW.blob_s + 60)
    cutoff = datetime.now(UTC) - timedelta(seconds=WINDOW.blob_s)
    (listed,) = list(local.blobs())
    assert listed.last_used < cutoff
    local.put_bytes(b"resubmitted during the sweep")
    assert local.delete_idle(digest, cutoff) is False and local.exists(digest)


def test_only_the_stores_own_files_are_swept(local: LocalBlobStore) -> None:
    digest = local.put_bytes(b"a blob")
    shard = _blob_file(local, digest).parent
    foreign = [shard / "notes.txt", shard / ("0" * 64), local.root / "sha256" / "README"]
    stale_tmp = [local.root / "tmp" / "tmpabc", shard / "tmpxyz"]
    live_tmp = local.root / "tmp" / "tmplive"
    for path in [*foreign, *stale_tmp, live_tmp]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    for path in [*foreign, *stale_tmp, _blob_file(local, digest)]:
        _age(path, WINDOW.blob_s + 60)

    assert [b.digest for b in local.blobs()] == [digest]
    report = collect_garbage(local, WINDOW, now=datetime.now(UTC))
    assert (report.blobs_deleted, report.temp_deleted) == (1, 2)
    assert all(p.exists() for p in foreign) and live_tmp.exists()
    assert not any(p.exists() for p in stale_tmp)


# -- the result backend --------------------------------------------------------------------------


@pytest.fixture
def backend(fleet_env: dict[str, str]) -> Iterator[Any]:
    import redis

    client = redis.Redis.from_url(fleet_env["MEDIAFLEET_BROKER_URL"])
    yield client
    client.close()


def test_blobs_named_by_live_records_are_kept(local: LocalBlobStore, backend: Any) -> None:
    queued, result, derived, orphan = (local.put_bytes(x) for x in (b"queued", b"result", b"thumb", b"orphan"))
    for digest in (queued, result, derived, orphan):
        _age(_blob_file(local, digest), WINDOW.blob_s + 60)
    request = json.dumps({"artifact": {"digest": queued}})
    backend.hset("mediafleet:job:mf-1", mapping={"state": "queued", "request": request})
    backend.expire("mediafleet:job:mf-1", 3600)
    backend.set("celery-task-meta-mf-2", json.dumps({"result": {"artifact": {"digest": result},
                                                                "result": {"thumbnail": derived}}}), ex=3600)
    backend.set("unrelated", json.dumps({"digest": orphan}))
    assert live_references(backend) == {queued, result, derived}

    report = collect_garbage(local, WINDOW, now=datetime.now(UTC), redis=backend)
    assert (report.blobs_deleted, report.blobs_referenced, report.results_expired) == (1, 3, 0)
    assert [local.exists(d) for d in (queued, result, derived, orphan)] == [True, True, True, False]


def test_result_keys_without_an_expiry_get_one(backend: Any) -> None:
    backend.set("celery-task-meta-forever", "{}")
    backend.hset("mediafleet:job:forever", "state", "done")
    backend.set("celery-task-meta-kept", "{}", ex=100_000)
    backend.set("someone-elses-key", "{}")
    assert expire_results(backend, 500, dry_run=True) == 2 and backend.ttl("celery-task-meta-forever") == -1
    assert expire_results(backend, 500) == 2
    assert 0 < backend.ttl("celery-task-meta-forever") <= 500 and 0 < backend.ttl("mediafleet:job:forever") <= 500
    assert backend.ttl("celery-task-meta-kept") > 500 and backend.ttl("someone-elses-key") == -1


def test_an_unreachable_backend_deletes_nothing(local: LocalBlobStore, tmp_path: Path) -> None:
    digest = local.put_bytes(b"old")
    _age(_blob_file(local, digest), 10**9)
    settings = Settings(broker_url=f"redis://127.0.0.1:{free_port()}/0", blob_root=local.root)
    with pytest.raises(Unavailable) as err:
        gc(settings)
    assert "127.0.0.1" not in err.value.message
    assert local.exists(digest)


# -- S3 ------------------------------------------------------------------------------------------


def test_s3_blobs_past_the_window_are_deleted_the_rest_kept(
    s3_settings: Settings, s3: Any, bucket: str  # noqa: F811
) -> None:
    store = open_store(s3_settings)
    assert isinstance(store, S3BlobStore)
    digests = [store.put_bytes(x) for x in (b"one", b"two")]
    foreign = ["fleet/blobs/notes.txt", "fleet/blobs/sha256/ab/cd/short", "outside/sha256/00/00/" + "0" * 64]
    for key in foreign:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    assert sorted(b.digest for b in store.blobs()) == sorted(digests)

    report = collect_garbage(store, WINDOW, now=datetime.now(UTC))
    assert report.blobs_deleted == 0
    later = datetime.now(UTC) + timedelta(seconds=WINDOW.blob_s + 60)
    report = collect_garbage(store, WINDOW, now=later)
    assert (report.blobs_seen, report.blobs_deleted, report.bytes_deleted) == (2, 2, 6)
    remaining = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert remaining == sorted(foreign)


def test_s3_refreshes_a_stale_stamp_on_read_and_on_store(
    s3_settings: Settings, s3: Any, bucket: str  # noqa: F811
) -> None:
    eager = S3BlobStore.from_settings(s3_settings)
    eager._refresh_s = 0  # every use counts as stale: the refresh (an in-place copy) must happen
    lazy = S3BlobStore.from_settings(s3_settings)

    read, stored = lazy.put_bytes(b"read me"), lazy.put_bytes(b"store me")
    with lazy.verified_path(read):
        pass
    lazy.put_bytes(b"store me")
    for digest in (read, stored):  # fresh stamps: no copy
        assert "last-used" not in s3.head_object(Bucket=bucket, Key=lazy.key(digest))["Metadata"]

    with eager.verified_path(read) as path:
        assert path.read_bytes() == b"read me"
    eager.put_bytes(b"store me")
    for digest in (read, stored):
        head = s3.head_object(Bucket=bucket, Key=lazy.key(digest), ChecksumMode="ENABLED")
        assert "last-used" in head["Metadata"] and head["Metadata"]["sha256"] == digest.removeprefix("sha256:")
        assert head["ChecksumSHA256"]  # the copy keeps the checksum, so the next store does not re-upload
    with lazy.verified_path(stored) as path:
        assert path.read_bytes() == b"store me"


def test_stale_spooled_downloads_are_removed(s3_settings: Settings) -> None:  # noqa: F811
    store = open_store(s3_settings)
    spool = s3_settings.blob_root / "spool"
    spool.mkdir(parents=True)
    stale, live = spool / "blob-dead", spool / "blob-live"
    for path in (stale, live):
        path.write_bytes(b"x")
    _age(stale, WINDOW.temp_s + 60)
    report = collect_garbage(store, WINDOW, now=datetime.now(UTC))
    assert report.temp_deleted == 1 and not stale.exists() and live.exists()


# -- the command ---------------------------------------------------------------------------------


def test_the_gc_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from mediafleet.cli import main

    for name in [n for n in os.environ if n.startswith("MEDIAFLEET_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MEDIAFLEET_BLOB_ROOT", str(tmp_path / "blobs"))
    monkeypatch.setenv("MEDIAFLEET_RESULT_TTL_S", "60")
    store = LocalBlobStore(tmp_path / "blobs")
    old = store.put_bytes(b"old enough")
    _age(_blob_file(store, old), 10**8)

    assert main(["gc", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gc: would delete 1 of 1 blobs (10 bytes)") and store.exists(old)
    assert main(["gc", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["blobs_deleted"] == 1 and report["results_expired"] is None and not store.exists(old)


def test_gc_reaches_a_tls_redis_with_the_settings_tls_options(tmp_path: Path) -> None:
    """``mediafleet gc`` builds its client with the fleet's one factory: a rediss:// server with a
    private CA is verified against the CA file the settings name, with the client certificate."""
    import ssl

    from mediafleet.blobs.retention import _redis_for

    ca, cert, key = (tmp_path / n for n in ("ca.pem", "client.pem", "client.key"))
    settings = Settings(broker_url="rediss://127.0.0.1:1/0", blob_root=tmp_path, redis_tls_ca_file=ca,
                        redis_tls_cert_file=cert, redis_tls_key_file=key)
    client = _redis_for(settings)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == str(ca) and kwargs["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert kwargs["ssl_certfile"] == str(cert) and kwargs["ssl_keyfile"] == str(key)
    client.close()
