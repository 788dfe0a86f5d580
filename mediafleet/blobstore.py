"""Content-addressed blob store: the broker carries digests, the store carries bytes.

Keys are ``sha256:<hex>`` digests and nothing else, so no reference can name a path outside the
store's root. Writers stream into a temporary file inside the root and rename it into place
(atomic on one filesystem); readers recompute the digest of what they read and refuse a mismatch.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import BinaryIO, Protocol

from contract.common import sha256_digest
from contract.errors import ErrorCode, IntegrityError

__all__ = ["BlobStore", "LocalBlobStore", "hash_file"]

_CHUNK = 1 << 20


def hash_file(path: Path) -> str:
    """``sha256:<hex>`` of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return sha256_digest(h.hexdigest())


class BlobStore(Protocol):
    def put_bytes(self, data: bytes) -> str: ...
    def put_stream(self, stream: BinaryIO, head_bytes: int = 4096) -> tuple[str, int, bytes]: ...
    def exists(self, digest: str) -> bool: ...
    def verified_path(self, digest: str) -> AbstractContextManager[Path]: ...


class LocalBlobStore:
    """Blobs in a local (or shared, e.g. NFS) directory: ``<root>/sha256/ab/cd/<hex>``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, digest: str) -> Path:
        hex_digest = sha256_digest(digest.removeprefix("sha256:")).removeprefix("sha256:")
        if digest != f"sha256:{hex_digest}":
            raise IntegrityError("malformed blob reference", code=ErrorCode.BLOB_NOT_FOUND)
        return self.root / "sha256" / hex_digest[:2] / hex_digest[2:4] / hex_digest

    def exists(self, digest: str) -> bool:
        return self._path(digest).is_file()

    def put_bytes(self, data: bytes) -> str:
        digest = sha256_digest(hashlib.sha256(data).hexdigest())
        if not self.exists(digest):
            self._commit(digest, lambda fh: fh.write(data))
        return digest

    def put_stream(self, stream: BinaryIO, head_bytes: int = 4096) -> tuple[str, int, bytes]:
        """Store a stream; returns its digest, its size and its first ``head_bytes`` bytes."""
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        size = 0
        head = b""
        fd, tmp = tempfile.mkstemp(dir=tmp_dir)
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := stream.read(_CHUNK):
                    if len(head) < head_bytes:
                        head += chunk[: head_bytes - len(head)]
                    h.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            digest = sha256_digest(h.hexdigest())
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
        yield path
