"""Run one request: the body every task shell and the in-process path share.

Checks the request against the manifest again (fail closed on the worker too), reads the blob and
recomputes its digest, runs the extractor, checks that the result only holds declared locus kinds
that lie inside the artifact, and always returns an :class:`Outcome`: failures become a
public-safe error, never an exception out of here and never a crashed worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from billiard.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel

from adapters.loci import to_loci
from adapters.verify import loci_valid
from contract.addresses import AddressKind
from contract.errors import (
    CapabilityRefused,
    ErrorCode,
    IntegrityError,
    PublicError,
    TimedOut,
    to_public,
)
from contract.jobs import ExtractRequest, Outcome
from contract.manifest import Capability, DeviceClass, Manifest
from contract.results import OPTIONS_BY_MODALITY
from mediafleet.blobstore import BlobStore
from workers.extractor import ProgressFn, load_extractor
from workers.sink import StoreSink

__all__ = ["run_request"]

log = logging.getLogger("mediafleet.worker")


def _now() -> datetime:
    return datetime.now(UTC)


def _within_manifest(options: BaseModel, request: ExtractRequest, capability: Capability,
                     manifest: Manifest) -> BaseModel:
    """Turn off what an option would add that the manifest in force does not declare.

    A video's speech transcript is AudioRange evidence made by the ``transcribe_segments`` engine:
    when the operator's manifest drops either, speech is off by default and refused when asked for.
    """
    if getattr(options, "speech", False):
        allowed = AddressKind.AUDIO_RANGE in capability.produces and "transcribe_segments" in manifest.capabilities
        if not allowed:
            if request.options.get("speech") is True:
                raise CapabilityRefused("speech is not declared for this action by the manifest in force")
            options = options.model_copy(update={"speech": False})
    return options


def run_request(
    request: ExtractRequest,
    *,
    manifest: Manifest,
    store: BlobStore,
    device: DeviceClass = DeviceClass.CPU,
    progress: ProgressFn | None = None,
    clock: Callable[[], datetime] = _now,
) -> Outcome:
    """Run ``request`` here and return its outcome (``ok`` or ``failed``, never raises)."""
    started = clock()
    checks: dict[str, bool] = {}
    error: PublicError | None = None
    result = None
    try:
        capability = manifest.capability(request.action)
        if device not in capability.devices:
            raise CapabilityRefused(f"{request.action} may not run on the {device.value} device class")
        if request.artifact.modality != capability.modality:
            raise CapabilityRefused(f"{request.action} does not handle {request.artifact.modality.value}")
        capability.check_media_type(request.artifact.media_type)
        capability.check_size(request.artifact.bytes)
        capability.check_options(request.options)
        options = _within_manifest(
            OPTIONS_BY_MODALITY[capability.modality.value].model_validate(request.options), request, capability, manifest
        )
        extractor = load_extractor(capability)
        with store.verified_path(request.artifact.digest) as path:
            checks["digest_recomputed"] = True
            result = extractor(path, options, capability.limits, progress, StoreSink(store))
        drafts = to_loci(result, request.artifact.digest)
        capability.check_produces({d.address.kind for d in drafts})
        checks["locus_kinds_declared"] = True
        if not loci_valid(drafts):
            raise IntegrityError("the extractor produced a locus outside the artifact", code=ErrorCode.INVALID_LOCUS)
        checks["loci_valid"] = True
    except SoftTimeLimitExceeded:
        error, result = TimedOut(f"{request.action} ran past its time limit").public(), None
    except Exception as exc:  # noqa: BLE001 - the boundary: every failure becomes a public error
        if isinstance(exc, IntegrityError) and exc.code == ErrorCode.DIGEST_MISMATCH:
            checks["digest_recomputed"] = False
        log.warning("job %s failed: %s", request.job_id, type(exc).__name__, exc_info=not hasattr(exc, "code"))
        error, result = to_public(exc), None
    return Outcome(
        job_id=request.job_id,
        action=request.action,
        artifact=request.artifact,
        status="failed" if error else "ok",
        error=error,
        result=result,
        checks=checks,
        started_at=started,
        ended_at=clock(),
        device=device,
    )
