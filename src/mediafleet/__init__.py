"""mediafleet: the media sidecar fleet. ``delegate_extract`` is the entry point ingestion jobs call.

Names are imported on first use, so a worker importing ``mediafleet.blobs.local`` does not pull in
the dispatcher (and the dispatcher can import the workers' runner without a cycle).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = [
    "BlobStore",
    "Dispatcher",
    "Job",
    "LocalBlobStore",
    "S3BlobStore",
    "Settings",
    "delegate_extract",
    "open_store",
    "release",
]

_WHERE = {
    "BlobStore": "mediafleet.blobs.local",
    "LocalBlobStore": "mediafleet.blobs.local",
    "S3BlobStore": "mediafleet.blobs.s3",
    "open_store": "mediafleet.blobs.local",
    "Dispatcher": "mediafleet.dispatch",
    "Job": "mediafleet.dispatch",
    "delegate_extract": "mediafleet.dispatch",
    "Settings": "mediafleet.settings",
}


def release() -> str:
    """This install's release, as its MCP servers announce it ("0" in a bare checkout)."""
    from importlib import metadata

    try:
        return metadata.version("mediafleet")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'mediafleet' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
