"""Content-addressed blob store: the broker carries digests, the store carries bytes.

Keys are ``sha256:<hex>`` digests and nothing else, so no reference can name a path outside the
store's root. Writers stream into a temporary file inside the root and rename it into place
(atomic on one filesystem); readers recompute the digest of what they read and refuse a mismatch.
:func:`open_store` picks this local store or :class:`mediafleet.blobs.s3.S3BlobStore` from the
settings. Storing or reading a blob refreshes its last-use stamp (here: the file's mtime), which
:mod:`mediafleet.blobs.retention` uses to delete blobs nobody has used for the retention window.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from mediafleet.blobs.protocol import BlobInfo, BlobStore, blob_key, remove_files_older_than
from mediafleet.contract.digests import HEX, copy_hashing, hash_bytes, hash_file
from mediafleet.contract.errors import ErrorCode, IntegrityError

if TYPE_CHECKING:
    from mediafleet.settings import Settings

# BlobInfo, BlobStore (from mediafleet.blobs.protocol) and hash_file (from mediafleet.contract.digests) are
# named here too, where the dispatcher, the runner and the report have always imported them.
__all__ = ["BlobInfo", "BlobStore", "LocalBlobStore", "hash_file", "open_store"]


def open_store(settings: Settings) -> BlobStore:
    """The store the settings name: S3 when ``blob_url`` is set, else the local ``blob_root``."""
    if settings.blob_url is not None:
        from mediafleet.blobs.s3 import S3BlobStore

        return S3BlobStore.from_settings(settings)
    return LocalBlobStore(settings.blob_root)


_REHASH_MAX = 256 * 1024
"""Up to this size, a blob stored again is hashed in place and kept when intact (see ``put_stream``)."""


class LocalBlobStore:
    """Blobs in a local (or shared, e.g. NFS) directory: ``<root>/sha256/ab/cd/<hex>``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, digest: str) -> Path:
        return self.root / blob_key(digest)

    def exists(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def put_bytes(self, data: bytes) -> str:
        digest = hash_bytes(data)
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
        """Store a stream; returns its digest, its size and its first ``head_bytes`` bytes.

        A small blob (up to :data:`_REHASH_MAX` bytes) already stored intact (its bytes hash to its
        digest) is kept, its stamp refreshed, and the copy dropped; any other is replaced by the
        copy (an altered or cut-short one included). Renaming a copy over an old file frees the old
        file's blocks: measured here 0.25-0.5 ms of wall time for a 140 kB file, most of a short
        PDF's store when it is submitted again, against 0.04 ms to drop the copy and 0.1 ms to hash
        the old file; above a few hundred kB the hash costs more CPU than the rename saves.
        """
        tmp_dir = self.root / "tmp"
        if not tmp_dir.is_dir():
            tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=tmp_dir)
        try:
            with os.fdopen(fd, "wb") as out:
                digest, size, head = copy_hashing(stream, out, head_bytes)
            target = self._path(digest)
            if size <= _REHASH_MAX and self._intact(target, digest, size):
                os.unlink(tmp)
                self._touch(target)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest, size, head

    @staticmethod
    def _intact(path: Path, digest: str, size: int) -> bool:
        """True when ``path`` holds ``size`` bytes that hash to ``digest``."""
        try:
            if os.stat(path).st_size != size:
                return False
            return hash_file(path) == digest
        except FileNotFoundError:
            return False

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
                if not HEX.fullmatch(entry.name) or entry != self._path(f"sha256:{entry.name}"):
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
