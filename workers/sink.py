"""Where extractors put derived bytes (thumbnails, keyframe images): the blob store, by digest.

An extractor gets a :class:`BlobSink` from the runner and stores what it derives there; its result
carries only the returned ``sha256:<hex>`` digests, so the broker and the result backend never carry
bulk bytes. Tests may pass a :class:`MemorySink`.
"""

from __future__ import annotations

from typing import Protocol

from mediafleet.contract.digests import hash_bytes

__all__ = ["BlobSink", "MemorySink", "StoreSink"]


class BlobSink(Protocol):
    def put(self, data: bytes) -> str:
        """Store ``data``; return its digest ``sha256:<hex>``."""
        ...


class StoreSink:
    """A sink over a blob store (what workers and the in-process path use)."""

    def __init__(self, store: object) -> None:
        self._store = store
        self.digests: list[str] = []

    def put(self, data: bytes) -> str:
        digest: str = self._store.put_bytes(data)  # type: ignore[attr-defined]
        self.digests.append(digest)
        return digest


class MemorySink:
    """Keeps blobs in a dict; for tests and for callers with no store."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        digest = hash_bytes(data)
        self.blobs[digest] = data
        return digest
