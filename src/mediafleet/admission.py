"""Admission: what every submission passes before any orchestration.

Peek at the artifact (its first bytes and its size), sniff its type from the bytes (a claimed type
of another modality is refused), check it against the manifest (fail closed), store it in the blob
store (which hashes it), and name its job. :meth:`Admission.admit` does it all in one call and
returns either an :class:`Admitted` request or the refused job, so the dispatcher only hands the
first to its orchestrator. Nothing here knows where the job will run: the in-process and the fleet
orchestrator get the same admitted request, and a refusal is the same already-failed job for both.
What fails here for a reason of ours (a blob store that cannot take the artifact) is translated,
once, into the public error tree.
"""

from __future__ import annotations

import errno
import io
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, TypedDict

from mediafleet.adapters.ids import job_id as make_job_id
from mediafleet.blobs.local import BlobStore
from mediafleet.contract.bundle import CallerClaims
from mediafleet.contract.digests import DIGEST, hash_stream
from mediafleet.contract.errors import (
    CapabilityRefused,
    ErrorCode,
    InputRejected,
    MediafleetError,
    Phase,
    PublicError,
    Unavailable,
)
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest
from mediafleet.contract.manifest import Capability, DeviceClass, Manifest
from mediafleet.orchestrators.job import Job, claimed, refused_job
from mediafleet.settings import Settings
from mediafleet.sniff import sniff
from mediafleet.workers.engines import numerics
from mediafleet.workers.extractor import ProgressFn

__all__ = ["HEAD", "Admission", "Admitted", "Artifact", "Facts", "Submission", "claims_for", "digest_of", "peek",
           "requested"]

Artifact = bytes | str | Path | BinaryIO
HEAD = 4096
"""How many leading bytes the type is sniffed from."""


class Submission(TypedDict, total=False):
    """What :meth:`Dispatcher.submit` and :meth:`Dispatcher.submit_stored` take besides the artifact."""

    action: str | None
    """The callers' action (``ocr_pdf``...); inferred from the media type when None."""
    media_type: str | None
    """The type the caller claims: a hint. Bytes of another type of the same modality run as what
    they are, and the bundle records the claim and the disagreement; a claim of another modality,
    or of a type no capability knows, is refused (``media_type_mismatch``)."""
    options: Mapping[str, Any] | None
    """Capability options; anything the manifest does not declare is refused."""
    priority: int | None
    """0 (lowest) to 9 (highest) on the fleet; default 4."""
    keep_result_s: int | None
    """The caller's pickup window; the outcome is kept at least this long (and at least the
    settings' ``result_ttl_s``)."""
    progress: ProgressFn | None
    """In-process only: called with (done, total) as the job advances."""
    claims: CallerClaims | None
    """What the caller's boundary already checked (its digest); recorded on this call's bundle
    with the media-type claim."""


def requested(request: Submission) -> tuple[str | None, str | None, dict[str, Any]]:
    """The action, claimed type and options of a submission, after refusing keywords it does not name."""
    unknown = set(request) - Submission.__optional_keys__
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    return request.get("action"), request.get("media_type"), dict(request.get("options") or {})


def peek(artifact: Artifact) -> tuple[bytes, int, BinaryIO]:
    """The first bytes, the size and a stream positioned at the start (the caller closes it)."""
    if isinstance(artifact, (bytes, bytearray, memoryview)):
        data = bytes(artifact)
        return data[:HEAD], len(data), io.BytesIO(data)
    if isinstance(artifact, (str, Path)):
        stream: BinaryIO = open(artifact, "rb")  # noqa: SIM115 - closed by the caller
        size = Path(artifact).stat().st_size
    else:
        stream = artifact
        stream.seek(0, io.SEEK_END)
        size = stream.tell()
        stream.seek(0)
    head = stream.read(HEAD)
    stream.seek(0)
    return head, size, stream


def digest_of(stream: BinaryIO) -> str:
    """The digest of a whole stream (of an artifact refused before it was stored)."""
    stream.seek(0)
    return hash_stream(stream)


def claims_for(claims: CallerClaims | None, claimed: str | None, sniffed: str | None) -> CallerClaims | None:
    """The caller's claims for this call: its digest facts, and its media type against the bytes'."""
    claimed_type = _base_type(claimed)
    if claimed_type is None:
        return claims
    facts = {"media_type": claimed_type, "media_type_agrees": claimed_type == sniffed}
    return (claims or CallerClaims()).model_copy(update=facts)


Facts = Callable[[BinaryIO | Path, Capability], dict[str, Any]]
"""What the orchestrator learns of the bytes while admission holds them (a split job's page count)."""


@dataclass(frozen=True)
class Admitted:
    """An artifact that passed admission: stored, named, ready for an orchestrator to start."""

    request: ExtractRequest
    capability: Capability
    facts: dict[str, Any] = field(default_factory=dict)
    claims: CallerClaims | None = None


class Admission:
    """The checks, the store and the job naming of one dispatcher: the same for every orchestrator.

    Args:
        settings: the process's settings (threads and device class name the job).
        manifest: the manifest in force; what it does not declare is refused.
        store: where admitted artifacts are kept.
        clock: the time refusals are stamped with.
    """

    def __init__(self, settings: Settings, manifest: Manifest, store: BlobStore,
                 clock: Callable[[], datetime]) -> None:
        self.settings = settings
        self.manifest = manifest
        self.store = store
        self._clock = clock

    def admit(self, artifact: Artifact, submission: Submission, facts: Facts) -> Admitted | Job:
        """Admit one artifact: the request it runs as (stored, named), or its refused job.

        Raises:
            TypeError: a keyword :class:`Submission` does not name.
            Unavailable: the blob store could not take the artifact (full, or its volume failed).
        """
        action, media_type, options = requested(submission)
        head, size, opened = peek(artifact)
        try:
            sniffed = sniff(head)
            claims = claims_for(submission.get("claims"), media_type, sniffed)
            try:
                capability = self.check(sniffed, size, action, media_type, options)
            except MediafleetError as exc:
                return claimed(self.refused(digest_of(opened), size, sniffed, action, exc.public()), claims)
            learned = facts(opened, capability)
            try:
                digest, stored_size = self.store_stream(opened)
            except OSError as exc:
                raise _store_failed(exc) from exc
        finally:
            opened.close()
        if stored_size != size:
            changed = InputRejected("the artifact changed while it was read").public()
            return claimed(self.refused(digest, stored_size, sniffed, action, changed), claims)
        return Admitted(self.request(digest, size, sniffed, capability, options), capability, learned, claims)  # type: ignore[arg-type]

    def admit_stored(self, digest: str, submission: Submission, facts: Facts) -> Admitted | Job:
        """:meth:`admit` for an artifact the blob store already holds (re-hashed first); a digest it
        does not hold gives a refused job (``blob_not_found``).

        Raises:
            CapabilityRefused: ``digest`` is not a ``sha256:<hex>`` digest (there is no artifact to name).
            TypeError: a keyword :class:`Submission` does not name.
        """
        action, media_type, options = requested(submission)
        if not DIGEST.fullmatch(digest):
            raise CapabilityRefused("the blob reference is not a sha256 digest", code=ErrorCode.INVALID_REQUEST)
        claims = submission.get("claims")
        size, sniffed = 0, None
        try:
            with self.store.verified_path(digest) as path:
                size = path.stat().st_size
                with open(path, "rb") as fh:
                    sniffed = sniff(fh.read(HEAD))
                capability = self.check(sniffed, size, action, media_type, options)
                learned = facts(path, capability)
        except MediafleetError as exc:
            return claimed(self.refused(digest, size, sniffed, action, exc.public()),
                           claims_for(claims, media_type, sniffed))
        request = self.request(digest, size, sniffed, capability, options)  # type: ignore[arg-type]
        return Admitted(request, capability, learned, claims_for(claims, media_type, sniffed))

    def check(self, sniffed: str | None, size: int, action: str | None, claimed: str | None,
              options: Mapping[str, Any]) -> Capability:
        """The capability that takes these bytes.

        Raises:
            InputRejected: the artifact is empty.
            CapabilityRefused: its type is unknown, disagrees with the claim across modalities, or
                no capability declares the action, the size or the options.
        """
        if size == 0:
            raise InputRejected("the artifact is empty", code=ErrorCode.EMPTY_INPUT, phase=None)
        if sniffed is None:
            raise CapabilityRefused("the artifact's type is not recognised from its bytes; supported: "
                                    + ", ".join(self.manifest.media_types()), code=ErrorCode.UNSUPPORTED_MEDIA_TYPE)
        claimed_type = _base_type(claimed)
        if claimed_type is not None and claimed_type != sniffed:
            # A hint within one modality (the callers send image/jpeg for every image); never across.
            known = self.manifest.modality_of(claimed_type)
            if known is None or known != self.manifest.modality_of(sniffed):
                raise CapabilityRefused(f"the artifact is {sniffed}, not {_shown_type(claimed_type)}",
                                        code=ErrorCode.MEDIA_TYPE_MISMATCH)
        capability = self.manifest.for_media_type(sniffed, action)
        capability.check_size(size)
        capability.check_options(options)
        return capability

    def store_stream(self, stream: BinaryIO) -> tuple[str, int]:
        """Store a stream from its start: its digest and the bytes stored (``OSError`` as raised)."""
        stream.seek(0)
        digest, size, _ = self.store.put_stream(stream)
        return digest, size

    def refused(self, digest: str, size: int, media_type: str | None, action: str | None,
                error: PublicError) -> Job:
        """The already-failed job of an artifact refused before any work."""
        return refused_job(self.manifest, digest, size, media_type, action, error, self._clock())

    def request(self, digest: str, size: int, media_type: str, capability: Capability,
                options: dict[str, Any]) -> ExtractRequest:
        """The request an admitted artifact runs as, wherever it runs."""
        numbers = self._numerics(capability, options)
        return ExtractRequest(
            job_id=self._job_id(digest, capability, options, numbers),
            action=capability.action,
            artifact=ArtifactRef(digest=digest, media_type=media_type, bytes=size, modality=capability.modality),
            options=options,
            device=self._device_for(capability),
            threads=self.settings.threads,
            speech_batch=numbers.get("speech_batch"),
        )

    def job_id_for(self, digest: str, capability: Capability, options: Mapping[str, Any]) -> str:
        """The job id this artifact, capability and options run as."""
        return self._job_id(digest, capability, options, self._numerics(capability, options))

    def _numerics(self, capability: Capability, options: Mapping[str, Any]) -> dict[str, Any]:
        """What of these settings changes this job's numbers (:func:`numerics`): named in its id."""
        return numerics(capability.action, options, self.settings.threads, self.settings.speech_batch)

    @staticmethod
    def _job_id(digest: str, capability: Capability, options: Mapping[str, Any], numbers: dict[str, Any]) -> str:
        return make_job_id(digest, capability.action, capability.extractor_version, dict(options), numbers)

    def _device_for(self, capability: Capability) -> DeviceClass:
        """This process's device class when the capability allows it, else its preferred one."""
        if self.settings.device in capability.devices:
            return self.settings.device
        return capability.devices[0]


def _store_failed(exc: OSError) -> Unavailable:
    """The public error for a blob store that could not take the artifact (a full disk, a
    read-only or vanished volume): retryable, with no path and no library text."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "the blob store is full (no space left on its device); free some space and submit again"
    else:
        why = "the blob store could not store the artifact (its volume failed); try again later"
    return Unavailable(why, phase=Phase.DISPATCH)


def _base_type(media_type: str | None) -> str | None:
    """``type/subtype`` of a media type, lowercase, without parameters; None when absent."""
    if media_type is None:
        return None
    return media_type.split(";")[0].strip().lower() or None


_PLAIN_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^._+-]{0,63}/[a-z0-9][a-z0-9!#$&^._+-]{0,63}")


def _shown_type(media_type: str) -> str:
    return media_type if _PLAIN_TYPE.fullmatch(media_type) else "the type claimed"
