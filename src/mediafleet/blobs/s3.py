"""Content-addressed blobs in an S3-compatible object store, for a fleet with no shared disk.

The same contract as :class:`mediafleet.blobs.local.LocalBlobStore`: keys are ``sha256:<hex>``
digests and nothing else, laid out as ``<prefix>/sha256/ab/cd/<hex>`` in one bucket, so no
reference can name an object outside the prefix. Writers send the SHA-256 with each upload
(``x-amz-checksum-sha256``: a store that implements checksums refuses a corrupted upload, and
keeps it, so a later store of the same blob replaces an object that lost or changed it); readers
download into a private temporary file, recompute the digest of exactly the bytes they will use,
and refuse a mismatch. The temporary file is removed when the ``verified_path`` block ends.

Credentials come from boto3's standard chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and the shared files, or an instance/pod role): mediafleet
never holds them, so they cannot reach its settings' repr, its logs, results or errors.

Retention: an object's ``LastModified`` is its last-use stamp. Storing a blob that already exists,
or reading one, refreshes a stamp older than ``refresh_s`` (default one hour) by an in-place copy
(server side; S3 allows it up to 5 GB, above the manifest's largest limit), so a bucket lifecycle
rule on ``LastModified`` and :mod:`mediafleet.blobs.retention` implement the same rule.
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from mediafleet.blobs.protocol import BlobInfo, blob_hex, blob_key, parse_blob_url, remove_files_older_than
from mediafleet.contract.digests import CHUNK, HEX, copy_hashing, hash_bytes, hash_chunks
from mediafleet.contract.errors import ErrorCode, IntegrityError, LimitExceeded, Phase, Unavailable

if TYPE_CHECKING:
    from mediafleet.settings import Settings

# parse_blob_url (from mediafleet.blobs.protocol) stays importable from here, where it has always been.
__all__ = ["REFRESH_S", "S3BlobStore", "make_client", "parse_blob_url"]

log = logging.getLogger("mediafleet.blobs.local")

REFRESH_S = 3600
"""A last-use stamp is refreshed when it is older than this (seconds); retention adds it as slack."""

_MAX_SINGLE_PUT = 5 * 1024**3
_MISSING = {"404", "NoSuchKey", "NotFound"}


def _b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def _is_missing(exc: Exception) -> bool:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code")) in _MISSING


def _unavailable(exc: Exception) -> Unavailable:
    """A public-safe error for a store failure: the library's text (endpoint, bucket) stays in the log."""
    from botocore.exceptions import ClientError, NoCredentialsError

    log.warning("blob store request failed: %s", exc)
    if isinstance(exc, NoCredentialsError):
        message = "the blob store's credentials are missing"
    elif isinstance(exc, ClientError):
        message = "the blob store refused the request"
    else:
        message = "the blob store cannot be reached"
    return Unavailable(message, phase=Phase.FETCH)


def make_client(endpoint_url: str | None = None, region: str | None = None) -> Any:
    """A boto3 S3 client with bounded timeouts and retries, credentials from the standard chain.

    Path-style addressing is used with an explicit endpoint (what MinIO, Ceph and moto expect).
    Checksums are sent only where given (we send SHA-256 on every upload and verify every read
    ourselves), so servers without the newer streaming checksums still work.
    """
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=10,
        read_timeout=120,
        retries={"mode": "standard", "max_attempts": 3},
        s3={"addressing_style": "path"} if endpoint_url else {},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)


class S3BlobStore:
    """Blobs in ``s3://<bucket>/<prefix>/sha256/ab/cd/<hex>``.

    Args:
        bucket: the bucket (it must exist; the store never creates or configures buckets).
        prefix: a folder inside the bucket, e.g. ``mediafleet/blobs``; ``""`` for the bucket root.
        client_factory: builds a boto3 S3 client. Called lazily, once per process, so a client
            is never shared across a prefork pool's fork.
        spool_dir: where downloads are verified before use (local disk; default: the system's).
        refresh_s: refresh a last-use stamp older than this many seconds on a store or read.
        clock: the current time (for the refresh decision).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client_factory: Callable[[], Any],
        spool_dir: Path | None = None,
        refresh_s: int = REFRESH_S,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._base = f"{self.prefix}/" if self.prefix else ""
        self._client_factory = client_factory
        self._spool_dir = spool_dir
        self._refresh_s = refresh_s
        self._clock = clock
        self._client_obj: Any = None
        self._client_pid = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> S3BlobStore:
        """The store named by ``settings.blob_url``; downloads spool under ``blob_root/spool``."""
        if settings.blob_url is None:
            raise ValueError("blob_url is not set")
        bucket, prefix = parse_blob_url(settings.blob_url)
        endpoint, region = settings.s3_endpoint_url, settings.s3_region
        return cls(bucket, prefix, client_factory=lambda: make_client(endpoint, region),
                   spool_dir=settings.blob_root / "spool")

    def __repr__(self) -> str:
        return f"S3BlobStore(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def _client(self) -> Any:
        if self._client_obj is None or self._client_pid != os.getpid():
            self._client_obj = self._client_factory()
            self._client_pid = os.getpid()
        return self._client_obj

    def key(self, digest: str) -> str:
        """The object key of ``digest``; a malformed reference is refused (``blob_not_found``)."""
        return self._base + blob_key(digest)

    def _call(self, operation: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client(), operation)(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            if _is_missing(exc):
                raise FileNotFoundError(kwargs.get("Key", "")) from exc
            raise _unavailable(exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(exc) from exc

    # -- reading -----------------------------------------------------------------------------

    def exists(self, digest: str) -> bool:
        try:
            self._call("head_object", Key=self.key(digest))
        except FileNotFoundError:
            return False
        return True

    @contextmanager
    def verified_path(self, digest: str) -> Iterator[Path]:
        """A local copy of the blob, after recomputing its digest while downloading it.

        Raises:
            IntegrityError: the reference is malformed or the blob is missing (``blob_not_found``),
                or its bytes do not hash to ``digest`` (``digest_mismatch``).
            Unavailable: the store cannot be reached or refused the request (retryable).
        """
        from botocore.exceptions import BotoCoreError

        key = self.key(digest)
        try:
            response = self._call("get_object", Key=key)
        except FileNotFoundError:
            raise IntegrityError("the artifact is not in the blob store", code=ErrorCode.BLOB_NOT_FOUND) from None
        spool = self._spool()
        fd, tmp = tempfile.mkstemp(dir=spool, prefix="blob-")
        path = Path(tmp)
        try:
            try:
                with os.fdopen(fd, "wb") as out, closing(response["Body"]) as body:
                    got = hash_chunks(body.iter_chunks(CHUNK), out)[0]
            except BotoCoreError as exc:
                raise _unavailable(exc) from exc
            if got != digest:
                raise IntegrityError("the stored artifact does not match its digest")
            self._refresh(key, response["LastModified"], response.get("Metadata") or {})
            yield path
        finally:
            path.unlink(missing_ok=True)

    def _spool(self) -> str | None:
        if self._spool_dir is None:
            return None
        self._spool_dir.mkdir(parents=True, exist_ok=True)
        return str(self._spool_dir)

    # -- writing -----------------------------------------------------------------------------

    def put_bytes(self, data: bytes) -> str:
        digest = hash_bytes(data)
        if not self._touch_existing(digest):
            self._upload(digest, data, len(data))
        return digest

    def put_stream(self, stream: BinaryIO, head_bytes: int = 4096) -> tuple[str, int, bytes]:
        """Store a stream; returns its digest, its size and its first ``head_bytes`` bytes.

        The stream is hashed into a local temporary file first (the key is its digest, known only
        at the end), then uploaded once with its checksum, or not at all if the blob exists.
        """
        with tempfile.TemporaryFile(dir=self._spool()) as spooled:
            digest, size, head = copy_hashing(stream, spooled, head_bytes)
            if not self._touch_existing(digest):
                spooled.seek(0)
                self._upload(digest, spooled, size)
        return digest, size, head

    def _upload(self, digest: str, body: bytes | BinaryIO, size: int) -> None:
        if size > _MAX_SINGLE_PUT:
            raise LimitExceeded("the artifact is too large for the blob store")
        hex_digest = blob_hex(digest)
        self._call("put_object", Key=self.key(digest), Body=body, ContentLength=size,
                   ContentType="application/octet-stream", ChecksumAlgorithm="SHA256",
                   ChecksumSHA256=_b64(hex_digest), Metadata={"sha256": hex_digest})

    def _touch_existing(self, digest: str) -> bool:
        """True when the blob is already stored intact (stamp refreshed if stale); False otherwise.

        "Intact" is the SHA-256 checksum the store keeps for the object: an object without it, or
        with another one (overwritten, corrupted), is replaced by a fresh upload. On a store that
        keeps no checksums this means every store uploads again, which is correct, only slower.
        """
        key = self.key(digest)
        try:
            head = self._call("head_object", Key=key, ChecksumMode="ENABLED")
        except FileNotFoundError:
            return False
        if head.get("ChecksumSHA256") != _b64(blob_hex(digest)):
            if head.get("ChecksumSHA256"):
                log.warning("a stored blob's checksum does not match its key; storing it again")
            return False
        try:
            self._refresh(key, head["LastModified"], head.get("Metadata") or {})
        except FileNotFoundError:  # deleted (by gc) between the head and the copy
            return False
        return True

    def _refresh(self, key: str, last_modified: datetime, metadata: dict[str, str]) -> None:
        """Refresh a stale last-use stamp by copying the object onto itself (server side)."""
        if (self._clock() - last_modified).total_seconds() < self._refresh_s:
            return
        try:
            self._call("copy_object", Key=key, CopySource={"Bucket": self.bucket, "Key": key},
                       MetadataDirective="REPLACE", ContentType="application/octet-stream", ChecksumAlgorithm="SHA256",
                       Metadata={**metadata, "last-used": self._clock().strftime("%Y%m%dT%H%M%SZ")})
        except Unavailable:
            # The bytes are fine; only the retention stamp is stale. Not a reason to fail a job.
            log.warning("could not refresh the last-use stamp of a blob")

    # -- retention ---------------------------------------------------------------------------

    def blobs(self) -> Iterator[BlobInfo]:
        """Every blob under the prefix with its size and last-use stamp (``LastModified``)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            pages = self._client().get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{self._base}sha256/")
            for page in pages:
                for obj in page.get("Contents", []):
                    hex_digest = obj["Key"].rsplit("/", 1)[-1]
                    if HEX.fullmatch(hex_digest) and obj["Key"] == self.key(f"sha256:{hex_digest}"):
                        yield BlobInfo(f"sha256:{hex_digest}", obj["Size"], obj["LastModified"])
        except (BotoCoreError, ClientError) as exc:
            raise _unavailable(exc) from exc

    def delete_idle(self, digest: str, cutoff: datetime) -> bool:
        """Delete the blob if its stamp is still older than ``cutoff`` (checked just before)."""
        key = self.key(digest)
        try:
            head = self._call("head_object", Key=key)
        except FileNotFoundError:
            return False
        if head["LastModified"] >= cutoff:
            return False
        self._call("delete_object", Key=key)
        return True

    def delete_stale_temp(self, cutoff: datetime) -> int:
        """Remove downloads left in the local spool by killed processes (mtime before ``cutoff``)."""
        if self._spool_dir is None or not self._spool_dir.is_dir():
            return 0
        return remove_files_older_than(self._spool_dir.iterdir(), cutoff)
