"""What every blob store shares: the protocol, a listed blob, the key layout, temp-file cleanup.

Both stores (:class:`mediafleet.blobs.local.LocalBlobStore` and
:class:`mediafleet.blobs.s3.S3BlobStore`) and the settings that choose between them import this
module; none of them imports another, so there is no import cycle between the stores and the
settings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, NamedTuple, Protocol

from mediafleet.contract.digests import DIGEST
from mediafleet.contract.errors import ErrorCode, IntegrityError

__all__ = ["BlobInfo", "BlobStore", "blob_hex", "blob_key", "parse_blob_url", "remove_files_older_than"]

_BLOB_URL = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>[^?#]*))?")
_SEGMENT = re.compile(r"[A-Za-z0-9_.=-]+")


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


def blob_hex(digest: str) -> str:
    """The hex of a store key, checked before a store turns the key into a path or object key.

    Raises:
        IntegrityError: ``blob_not_found`` for anything but ``sha256:<hex>``, so no reference can
            name a file or object outside a store.
    """
    if not DIGEST.fullmatch(digest):
        raise IntegrityError("malformed blob reference", code=ErrorCode.BLOB_NOT_FOUND)
    return digest.removeprefix("sha256:")


def blob_key(digest: str) -> str:
    """A blob's place below a store's root: ``sha256/ab/cd/<hex>`` (checked by :func:`blob_hex`)."""
    hex_digest = blob_hex(digest)
    return f"sha256/{hex_digest[:2]}/{hex_digest[2:4]}/{hex_digest}"


def parse_blob_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")`` (prefix may be empty).

    Raises:
        ValueError: not an ``s3://`` URL, a bucket name S3 would refuse, or a prefix with empty,
            ``.``/``..`` or unusual segments (so a prefix is always a plain folder of the bucket).
    """
    match = _BLOB_URL.fullmatch(url)
    if match is None or ".." in match["bucket"]:
        raise ValueError("blob_url must be s3://<bucket>[/<prefix>] with a valid bucket name")
    prefix = (match["prefix"] or "").strip("/")
    segments = prefix.split("/") if prefix else []
    if any(s in (".", "..") or not _SEGMENT.fullmatch(s) for s in segments):
        raise ValueError("blob_url's prefix must be plain folder names (letters, digits, '_', '.', '=', '-')")
    return match["bucket"], prefix


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
