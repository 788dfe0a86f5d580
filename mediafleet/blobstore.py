"""Content-addressed blob store: the broker carries digests, the store carries bytes.

Keys are ``sha256:<hex>`` digests and nothing else, so no reference can name a path outside the
store's root. Writers stream into a temporary file inside the root and rename it into place
(atomic on one filesystem); readers recompute the digest of what they read and refuse a mismatch.
:func:`open_store` picks this local store or :class:`mediafleet.s3store.S3BlobStore` from the
settings. Storing or reading a blob refreshes its last-use stamp (here: the file's mtime), which
:mod:`mediafleet.retention` uses to delete blobs nobody has used for the retention window.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, Protocol

from mediafleet.contract.common import sha256_digest
from mediafleet.contract.errors import ErrorCode, IntegrityError

if TYPE_CHECKING:
    from mediafleet.settings import Settings

__all__ = ["BlobInfo", "BlobStore", "LocalBlobStore", "hash_file", "open_store"]

_CHUNK = 1 << 20
_HEX = re.compile(r"[0-9a-f]{64}")


def hash_file(path: Path) -> str:
    """``sha256:<hex>`` of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return sha256_digest(h.hexdigest())


class BlobInfo(NamedTuple):
    """One stored blob, as retention sees it."""

    digest: str
    size: int
    last_used: datetime


class BlobStore(Protocol):
    """What the dispatcher, the runner, the blob sink and retention need from a store."""

    def put_bytes(self, data: bytes) -> str:
        """Store ``data`` (or refresh the stamp of an identical blob); return ``sha256:<hex>``."""
        ...

    def put_stream(self, stream: BinaryIO, head_bytes: int = 4096) -> tuple[str, int, bytes]:
        """Store a stream; return its digest, its size and its first ``head_bytes`` bytes."""
        ...

    def exists(self, digest: str) -> bool: ...

    def verified_path(self, digest: str) -> AbstractContextManager[Path]:
        """A local path to the blob's bytes, re-hashed; ``IntegrityError`` when missing or altered."""
        ...

    def blobs(self) -> Iterator[BlobInfo]:
        """Every blob in the store, with its size and last-use stamp."""
        ...

    def delete_idle(self, digest: str, cutoff: datetime) -> bool:
        """Delete the blob if it has not been used since ``cutoff``; True when deleted."""
        ...

    def delete_stale_temp(self, cutoff: datetime) -> int:
        """Remove temporary files abandoned before ``cutoff``; return how many."""
        ...


def open_store(settings: Settings) -> BlobStore:
    """The store the settings name: S3 when ``blob_url`` is set, else the local ``blob_root``."""
    if settings.blob_url is not None:
        from mediafleet.s3store import S3BlobStore

        return S3BlobStore.from_settings(settings)
    return LocalBlobStore(settings.blob_root)


class LocalBlobStore:
    """Blobs in a local (or shared, e.g. NFS) directory: ``<root>/sha256/ab/cd/<hex>``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, digest: str) -> Path:
        hex_digest = digest.removeprefix("sha256:")
        if digest != f"sha256:{hex_digest}" or not _HEX.fullmatch(hex_digest):
            raise IntegrityError("malformed blob reference", code=ErrorCode.BLOB_NOT_FOUND)
        return self.root / "sha256" / hex_digest[:2] / hex_digest[2:4] / hex_digest

    def exists(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def put_bytes(self, data: bytes) -> str:
        digest = sha256_digest(hashlib.sha256(data).hexdigest())
        if not self._touch(self._path(digest)):
            self._commit(digest, lambda fh: fh.write(data))
        return digest

    @staticmethod
    def _touch(path: Path) -> bool:
        """Refresh the last-use stamp; False when the file is not there."""
        try:
            os.utime(path)
        except FileNotFoundError:
            return False
        return True

    def put_stream(self, stream: BinaryIO, head_bytes: int = 4096) -> tuple[str, int, bytes]:
        """Store a stream; returns its digest, its size and its first ``head_bytes`` bytes."""
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=tmp_dir)
        try:
            with os.fdopen(fd, "wb") as out:
                digest, size, head = copy_hashing(stream, out, head_bytes)
            target = self._path(digest)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest, size, head

    def _commit(self, digest: str, write) -> None:  # type: ignore[no-untyped-def]
        target = self._path(digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @contextmanager
    def verified_path(self, digest: str) -> Iterator[Path]:
        """A local path to the blob, after recomputing its digest.

        Raises:
            IntegrityError: the blob is missing (``blob_not_found``) or its bytes do not hash to
                ``digest`` (``digest_mismatch``).
        """
        path = self._path(digest)
        if not path.is_file():
            raise IntegrityError("the artifact is not in the blob store", code=ErrorCode.BLOB_NOT_FOUND)
        if hash_file(path) != digest:
            raise IntegrityError("the stored artifact does not match its digest")
        self._touch(path)
        yield path

    def blobs(self) -> Iterator[BlobInfo]:
        """Every blob file in its place, with its size and mtime; anything else is not a blob."""
        top = self.root / "sha256"
        if not top.is_dir():
            return
        for shard in sorted(top.glob("[0-9a-f][0-9a-f]/[0-9a-f][0-9a-f]")):
            for entry in shard.iterdir():
                if not _HEX.fullmatch(entry.name) or entry != self._path(f"sha256:{entry.name}"):
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                yield BlobInfo(f"sha256:{entry.name}", st.st_size, datetime.fromtimestamp(st.st_mtime, UTC))

    def delete_idle(self, digest: str, cutoff: datetime) -> bool:
        """Delete the blob if its mtime is still before ``cutoff`` (checked just before)."""
        path = self._path(digest)
        try:
            if datetime.fromtimestamp(path.stat().st_mtime, UTC) >= cutoff:
                return False
            path.unlink()
        except FileNotFoundError:
            return False
        return True

    def delete_stale_temp(self, cutoff: datetime) -> int:
        """Remove partial writes (``tmp/*``, ``tmp*`` beside blobs) last written before ``cutoff``."""
        candidates = list((self.root / "tmp").glob("*")) + list((self.root / "sha256").glob("*/*/tmp*"))
        return remove_files_older_than(candidates, cutoff)


def remove_files_older_than(entries: Iterable[Path], cutoff: datetime) -> int:
    """Delete the plain files among ``entries`` last written before ``cutoff``; returns how many."""
    removed = 0
    for entry in entries:
        try:
            if entry.is_file() and datetime.fromtimestamp(entry.stat().st_mtime, UTC) < cutoff:
                entry.unlink()
                removed += 1
        except FileNotFoundError:  # another cleaner got there first
            continue
    return removed


def copy_hashing(stream: BinaryIO, out: BinaryIO, head_bytes: int) -> tuple[str, int, bytes]:
    """Copy ``stream`` into ``out`` in 1 MiB chunks; returns its digest, size and first bytes."""
    h = hashlib.sha256()
    size = 0
    head = b""
    while chunk := stream.read(_CHUNK):
        if len(head) < head_bytes:
            head += chunk[: head_bytes - len(head)]
        h.update(chunk)
        size += len(chunk)
        out.write(chunk)
    return sha256_digest(h.hexdigest()), size, head
