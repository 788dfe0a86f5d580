"""SHA-256 digests: the one pattern, the one way to hash bytes, files and streams, blob references.

A digest is ``sha256:`` and 64 lowercase hex characters; a blob reference (the callers' node id for
an artifact's bytes) is ``blob:`` and the same hex. Every module that checks, makes or hashes one
uses this module, so the fleet cannot disagree with itself about what a digest is.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "CHUNK",
    "DIGEST",
    "DIGEST_BYTES",
    "HEX",
    "blob_ref",
    "check_digest",
    "copy_hashing",
    "digest_of_ref",
    "hash_bytes",
    "hash_chunks",
    "hash_file",
    "hash_stream",
    "read_chunks",
    "sha256_digest",
]

CHUNK = 1 << 20
"""Bytes read at a time when hashing a file or stream (1 MiB)."""

HEX = re.compile(r"[0-9a-f]{64}")
"""A bare SHA-256 hex digest, lowercase."""

DIGEST = re.compile(rf"sha256:{HEX.pattern}")
"""``sha256:<hex>``; use ``fullmatch`` to check one, ``findall`` to find them in text."""

DIGEST_BYTES = re.compile(DIGEST.pattern.encode("ascii"))
""":data:`DIGEST` for bytes (stored records scanned without decoding them)."""

_REF = re.compile(rf"(?:blob:|sha256:)({HEX.pattern})")


def check_digest(value: str) -> str:
    """``value`` if it is ``sha256:<hex>``.

    Raises:
        ValueError: anything else (pydantic turns it into a validation error).
    """
    if not DIGEST.fullmatch(value):
        raise ValueError("a digest is 'sha256:' followed by 64 lowercase hex characters")
    return value


def sha256_digest(hex_digest: str) -> str:
    """``sha256:<hex>`` from a bare hex digest."""
    return check_digest(f"sha256:{hex_digest}")


def blob_ref(digest: str) -> str:
    """The callers' node id for the artifact with this digest: ``blob:<hex>``."""
    return "blob:" + check_digest(digest).removeprefix("sha256:")


def digest_of_ref(ref: str) -> str | None:
    """``sha256:<hex>`` from a ``blob:<hex>`` reference or a digest; None for anything else."""
    match = _REF.fullmatch(ref)
    return None if match is None else f"sha256:{match[1]}"


def hash_bytes(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return sha256_digest(hashlib.sha256(data).hexdigest())


def read_chunks(stream: BinaryIO) -> Iterator[bytes]:
    """The rest of ``stream`` in :data:`CHUNK`-sized reads."""
    while chunk := stream.read(CHUNK):
        yield chunk


def hash_chunks(chunks: Iterable[bytes], out: BinaryIO | None = None,
                head_bytes: int = 0) -> tuple[str, int, bytes]:
    """Hash ``chunks``, writing each to ``out`` when given; returns the digest, size and first bytes."""
    h = hashlib.sha256()
    size = 0
    head = b""
    for chunk in chunks:
        if len(head) < head_bytes:
            head += chunk[: head_bytes - len(head)]
        h.update(chunk)
        size += len(chunk)
        if out is not None:
            out.write(chunk)
    return sha256_digest(h.hexdigest()), size, head


def hash_stream(stream: BinaryIO) -> str:
    """``sha256:<hex>`` of the rest of ``stream``, read in 1 MiB chunks."""
    return hash_chunks(read_chunks(stream))[0]


def hash_file(path: Path) -> str:
    """``sha256:<hex>`` of a file, read in 1 MiB chunks."""
    with open(path, "rb") as fh:
        return hash_stream(fh)


def copy_hashing(stream: BinaryIO, out: BinaryIO, head_bytes: int) -> tuple[str, int, bytes]:
    """Copy ``stream`` into ``out`` in 1 MiB chunks; returns its digest, size and first bytes."""
    return hash_chunks(read_chunks(stream), out, head_bytes)
