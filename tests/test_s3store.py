"""The S3 blob store over real HTTP against moto's server mode, through the paths a worker uses.

moto runs as its own process on a free loopback port, like the Redis of the fleet tests; every
test gets a fresh bucket. Credentials are dummies given through boto3's standard chain (the
``AWS_*`` variables), exactly how a deployed worker gets real ones.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from mediafleet.contract import ArtifactRef, ErrorCode, ExtractRequest, default_manifest
from mediafleet.contract.errors import IntegrityError, Unavailable
from mediafleet import Dispatcher, LocalBlobStore, Settings
from mediafleet.blobs.local import open_store
from mediafleet.blobs.s3 import S3BlobStore, parse_blob_url
from tests.conftest import AWS_ENV, MotoServer, free_port
from tests.helpers import without_run
from tests.media import text_pdf
from mediafleet.workers.runner import run_request


@pytest.fixture
def store(s3_settings: Settings) -> S3BlobStore:
    opened = open_store(s3_settings)
    assert isinstance(opened, S3BlobStore)
    return opened


def _keys(s3: Any, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def _spooled(settings: Settings) -> list[Path]:
    spool = settings.blob_root / "spool"
    return sorted(spool.iterdir()) if spool.is_dir() else []


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- settings ------------------------------------------------------------------------------------


def test_settings_choose_the_store(tmp_path: Path, s3_settings: Settings) -> None:
    assert isinstance(open_store(Settings(blob_root=tmp_path)), LocalBlobStore)
    store = open_store(s3_settings)
    assert isinstance(store, S3BlobStore) and store.prefix == "fleet/blobs"


@pytest.mark.parametrize("url", ["s3://Upper/x", "https://bucket/x", "s3://bucket/../x", "s3://bucket/a//b",
                                 "s3://bucket/a/./b", "s3://ab", "s3://bucket/a b", "s3://bucket..x/a"])
def test_a_bad_blob_url_is_refused_at_load(url: str) -> None:
    with pytest.raises(ValueError):
        Settings(blob_url=url)


def test_blob_url_parts() -> None:
    assert parse_blob_url("s3://bucket") == ("bucket", "")
    assert parse_blob_url("s3://my.bucket-1/a/b=c/") == ("my.bucket-1", "a/b=c")
    with pytest.raises(ValueError):
        Settings(s3_endpoint_url="ftp://host")


# -- the store -----------------------------------------------------------------------------------


def test_bytes_round_trip_through_a_verified_download(
    store: S3BlobStore, s3: Any, bucket: str, s3_settings: Settings
) -> None:
    data = b"evidence " * 1000
    digest = store.put_bytes(data)
    assert digest == _digest(data) and store.exists(digest)
    hex_digest = digest.removeprefix("sha256:")
    assert _keys(s3, bucket) == [f"fleet/blobs/sha256/{hex_digest[:2]}/{hex_digest[2:4]}/{hex_digest}"]
    head = s3.head_object(Bucket=bucket, Key=store.key(digest))
    assert head["Metadata"]["sha256"] == hex_digest
    with store.verified_path(digest) as path:
        assert path.read_bytes() == data
        assert path.parent == s3_settings.blob_root / "spool"
    assert not path.exists() and _spooled(s3_settings) == []


def test_a_stream_stores_once_with_the_same_answer_as_the_local_store(
    store: S3BlobStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    import io

    data = bytes(range(256)) * (3 * 4096 + 17)  # over three 1 MiB chunks
    local = LocalBlobStore(tmp_path / "local-store").put_stream(io.BytesIO(data))
    assert store.put_stream(io.BytesIO(data)) == local
    assert store.put_stream(io.BytesIO(data), head_bytes=10) == (local[0], len(data), data[:10])
    assert store.put_bytes(data) == local[0]
    assert len(_keys(s3, bucket)) == 1


def test_a_missing_blob_is_blob_not_found(store: S3BlobStore) -> None:
    digest = _digest(b"never stored")
    assert not store.exists(digest)
    with pytest.raises(IntegrityError) as err, store.verified_path(digest):
        pass
    assert err.value.code == ErrorCode.BLOB_NOT_FOUND


def test_a_tampered_object_is_refused_and_leaves_nothing_on_disk(
    store: S3BlobStore, s3: Any, bucket: str, s3_settings: Settings
) -> None:
    digest = store.put_bytes(b"the original bytes")
    s3.put_object(Bucket=bucket, Key=store.key(digest), Body=b"the altered bytes!")
    with pytest.raises(IntegrityError) as err, store.verified_path(digest):
        pytest.fail("a tampered blob was handed out")
    assert err.value.code == ErrorCode.DIGEST_MISMATCH
    assert _spooled(s3_settings) == []


def test_storing_again_repairs_an_object_that_lost_its_checksum(store: S3BlobStore, s3: Any, bucket: str) -> None:
    data = b"the original bytes"
    digest = store.put_bytes(data)
    s3.put_object(Bucket=bucket, Key=store.key(digest), Body=b"overwritten")
    assert store.put_bytes(data) == digest
    with store.verified_path(digest) as path:
        assert path.read_bytes() == data


def test_the_download_is_removed_when_the_block_fails(store: S3BlobStore, s3_settings: Settings) -> None:
    digest = store.put_bytes(b"some bytes")
    with pytest.raises(RuntimeError), store.verified_path(digest) as path:
        assert path.exists()
        raise RuntimeError("extractor crashed")
    assert _spooled(s3_settings) == []


@pytest.mark.parametrize("ref", [
    "sha256:../../etc/passwd",
    "sha256:" + "A" * 64,
    "sha256:" + "0" * 63,
    "sha256:" + "0" * 64 + "/x",
    "sha256:" + "0" * 62 + "/x",
    "md5:" + "0" * 32,
    "0" * 64,
    "sha256:" + "0" * 64 + "\n",
])
def test_a_malformed_reference_names_no_object(store: S3BlobStore, tmp_path: Path, ref: str) -> None:
    for target in (store, LocalBlobStore(tmp_path / "local-store")):
        with pytest.raises(IntegrityError) as err:
            target.exists(ref)
        assert err.value.code == ErrorCode.BLOB_NOT_FOUND
        with pytest.raises(IntegrityError), target.verified_path(ref):
            pass


def test_objects_outside_the_prefix_are_out_of_reach(store: S3BlobStore, s3: Any, bucket: str) -> None:
    data = b"stored by someone else"
    digest = _digest(data)
    hex_digest = digest.removeprefix("sha256:")
    layout = f"sha256/{hex_digest[:2]}/{hex_digest[2:4]}/{hex_digest}"
    for key in (layout, f"fleet/{layout}", f"other/blobs/{layout}", f"fleet/blobs/{hex_digest}"):
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    assert not store.exists(digest)
    with pytest.raises(IntegrityError) as err, store.verified_path(digest):
        pass
    assert err.value.code == ErrorCode.BLOB_NOT_FOUND
    assert list(store.blobs()) == []


def test_an_unreachable_store_is_a_public_retryable_error(tmp_path: Path, moto_server: MotoServer) -> None:
    port = free_port()
    settings = Settings(blob_url="s3://bucket-x/p", s3_endpoint_url=f"http://127.0.0.1:{port}", blob_root=tmp_path)
    store = open_store(settings)
    with pytest.raises(Unavailable) as err, store.verified_path(_digest(b"x")):
        pass
    assert err.value.retryable and str(port) not in err.value.message and "bucket-x" not in err.value.message
    with pytest.raises(Unavailable):
        store.put_bytes(b"x")
    request = ExtractRequest(job_id="mf-" + "4" * 32, action="ocr_pdf",
                             artifact=ArtifactRef(digest=_digest(b"x"), media_type="application/pdf", bytes=1,
                                                  modality="pdf"))
    outcome = run_request(request, manifest=default_manifest(), store=store)
    assert outcome.error is not None and outcome.error.code == ErrorCode.ENGINE_UNAVAILABLE
    assert outcome.error.retryable and str(port) not in outcome.model_dump_json()


def test_each_process_builds_its_own_client(store: S3BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client made before a prefork pool forks is not reused by the children."""
    first = store._client()
    assert store._client() is first
    monkeypatch.setattr("mediafleet.blobs.s3.os.getpid", lambda: -1)
    assert store._client() is not first


# -- the paths a worker uses ---------------------------------------------------------------------


def test_the_dispatcher_stores_in_s3_and_the_runner_rechecks_the_digest(
    s3_settings: Settings, s3: Any, bucket: str, tmp_path: Path
) -> None:
    pdf = text_pdf(2)
    bundle = Dispatcher(s3_settings).submit(pdf).bundle()
    assert bundle.status == "ok", bundle.error
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] is True
    assert _keys(s3, bucket) == [open_store(s3_settings).key(_digest(pdf))]  # type: ignore[attr-defined]
    assert not (s3_settings.blob_root / "sha256").exists() and _spooled(s3_settings) == []
    local = Dispatcher(Settings(blob_root=tmp_path / "local-store")).submit(pdf).bundle()
    assert without_run(bundle) == without_run(local)


def test_the_runner_refuses_a_tampered_artifact(store: S3BlobStore, s3: Any, bucket: str) -> None:
    pdf = text_pdf(1)
    digest = store.put_bytes(pdf)
    s3.put_object(Bucket=bucket, Key=store.key(digest), Body=pdf.replace(b"Page", b"Pagf", 1))
    request = ExtractRequest(job_id="mf-" + "3" * 32, action="ocr_pdf",
                             artifact=ArtifactRef(digest=digest, media_type="application/pdf", bytes=len(pdf),
                                                  modality="pdf"))
    outcome = run_request(request, manifest=default_manifest(), store=store)
    assert outcome.status == "failed" and outcome.error is not None
    assert outcome.error.code == ErrorCode.DIGEST_MISMATCH and outcome.checks["digest_recomputed"] is False
    assert bucket not in outcome.model_dump_json()


@pytest.mark.integration
def test_a_fleet_with_no_shared_disk(
    fleet_env: dict[str, str], start_worker: Any, moto_server: MotoServer, bucket: str, s3: Any, tmp_path: Path
) -> None:
    """Dispatcher and worker share only Redis and the bucket: each has its own local directory."""
    s3_env = {"MEDIAFLEET_BLOB_URL": f"s3://{bucket}/fleet", "MEDIAFLEET_S3_ENDPOINT_URL": moto_server.url,
              "MEDIAFLEET_S3_REGION": "us-east-1", "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "worker-disk"), **AWS_ENV}
    start_worker("--concurrency=1", env=s3_env)
    dispatcher_disk = tmp_path / "dispatcher-disk"
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_url=f"s3://{bucket}/fleet",
                                s3_endpoint_url=moto_server.url, s3_region="us-east-1", blob_root=dispatcher_disk))
    pdf = text_pdf(2)
    remote = fleet.submit(pdf).bundle(timeout=120)
    assert remote.status == "ok", remote.error
    local = Dispatcher(Settings(blob_root=tmp_path / "local-store")).submit(pdf).bundle()
    assert without_run(remote) == without_run(local)
    assert [k.split("/")[0:2] for k in _keys(s3, bucket)] == [["fleet", "sha256"]]
    for disk in (dispatcher_disk, tmp_path / "worker-disk"):
        assert not (disk / "sha256").exists()
        assert [p for p in disk.rglob("*") if p.is_file()] == []
