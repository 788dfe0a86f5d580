"""mediafleet: the media sidecar fleet. ``delegate_extract`` is the entry point ingestion jobs call."""

from mediafleet.blobstore import BlobStore, LocalBlobStore
from mediafleet.dispatch import Dispatcher, Job, delegate_extract
from mediafleet.settings import Settings

__all__ = ["BlobStore", "Dispatcher", "Job", "LocalBlobStore", "Settings", "delegate_extract"]
