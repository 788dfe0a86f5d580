"""Run one request: the body every task shell and the in-process path share.

Checks the request against the manifest again (fail closed on the worker too), reads the blob and
recomputes its digest, runs the extractor, checks that the result only holds declared locus kinds
that lie inside the artifact, and always returns an :class:`Outcome`: failures become a
public-safe error, never an exception out of here and never a crashed worker.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime

from billiard.exceptions import SoftTimeLimitExceeded

from mediafleet.contract.errors import (
    CapabilityRefused,
    ErrorCode,
    IntegrityError,
    PublicError,
    TimedOut,
    Unavailable,
    to_public,
)
from mediafleet.contract.jobs import ExtractRequest, Outcome
from mediafleet.contract.manifest import DeviceClass, Manifest
from mediafleet.blobs.local import BlobStore
from mediafleet.workers.engines import configure, engine_config, machine_fault, mark_broken
from mediafleet.workers.extractor import load_extractor
from mediafleet.workers.parts import join_inline, narrow, options_for, part_capabilities, verify_result
from mediafleet.modalities.registry import spec_for
from mediafleet.workers.sink import StoreSink
from mediafleet.modalities.spec import ProgressFn

__all__ = ["run_request"]

log = logging.getLogger("mediafleet.worker")


def _now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def _engines_for(request: ExtractRequest) -> Iterator[None]:
    """Run the job's engines on the request's thread count and Whisper batch (both in its job id
    where they change its numbers), then restore."""
    before = engine_config()
    threads = before.threads if request.threads is None else request.threads
    if threads == before.threads and request.speech_batch == before.speech_batch:
        yield
        return
    configure(replace(before, threads=threads, speech_batch=request.speech_batch))
    try:
        yield
    finally:
        configure(before)


def run_request(
    request: ExtractRequest,
    *,
    manifest: Manifest,
    store: BlobStore,
    device: DeviceClass = DeviceClass.CPU,
    progress: ProgressFn | None = None,
    clock: Callable[[], datetime] = _now,
    inline_parts: bool = True,
) -> Outcome:
    """Run ``request`` here and return its outcome (``ok`` or ``failed``, never raises).

    With ``inline_parts`` (in-process), a companion part a fleet job would fan out (a video's
    speech) is run here too; without it (a fleet worker whose job has its parts queued) it is left
    pending for :func:`mediafleet.workers.parts.join`. A request with a ``span`` (one range of a
    split job) reads only that range.
    """
    started = clock()
    checks: dict[str, bool] = {}
    error: PublicError | None = None
    result = None
    try:
        capability, admits = part_capabilities(request, manifest)
        if device not in capability.devices:
            raise CapabilityRefused(f"{request.action} may not run on the {device.value} device class")
        if request.artifact.modality != admits.modality:
            raise CapabilityRefused(f"{admits.action} does not handle {request.artifact.modality.value}")
        admits.check_media_type(request.artifact.media_type)
        admits.check_size(request.artifact.bytes)
        capability.check_options(request.options)
        options = narrow(options_for(request, capability, manifest), request, capability, admits)
        extractor = load_extractor(capability)
        read_check = spec_for(capability.action).read_check
        with store.verified_path(request.artifact.digest) as path, _engines_for(request):
            checks["digest_recomputed"] = True
            if not read_check.load()(path):
                checks["read_whole"] = False  # e.g. MuPDF rebuilt a lost xref: ok, the claim not verified
            result = extractor(path, options, capability.limits, progress, StoreSink(store))
            if inline_parts:
                result = join_inline(result, path, manifest, capability)
        verify_result(result, request.artifact.digest, capability, checks)
    except Exception as exc:  # the soft time limit (a SoftTimeLimitExceeded) among them
        error, result = _failure(exc, request, checks), None
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


def _failure(exc: Exception, request: ExtractRequest, checks: dict[str, bool]) -> PublicError:
    """The public error of a run that raised ``exc`` (marking the digest check where it failed)."""
    if _timed_out(exc):
        # The soft limit, also where it landed inside a library that wraps whatever it meets (kombu
        # encoding a progress point turns it into an EncodeError): a timeout, nothing about the input.
        return TimedOut(f"{request.action} ran past its time limit").public()
    if isinstance(exc, IntegrityError) and exc.code == ErrorCode.DIGEST_MISMATCH:
        checks["digest_recomputed"] = False
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        # A full disk (the blob store's or a scratch folder's) is the machine's fault, not the input's.
        log.warning("job %s failed: no space left on a device", request.job_id)
        return to_public(Unavailable("a disk the worker writes to is full; the job can be submitted again"))
    if not hasattr(exc, "code") and (fault := machine_fault(exc)) is not None:
        # A GPU or memory fault of this machine (the engine's own text goes to the log only).
        log.warning("job %s failed: %s: %s", request.job_id, type(exc).__name__, exc)
        mark_broken(fault)
        return to_public(Unavailable(f"{fault.phrase} while running {request.action}; the job can be submitted again"))
    log.warning("job %s failed: %s", request.job_id, type(exc).__name__, exc_info=not hasattr(exc, "code"))
    return to_public(exc)


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is the soft time limit under another name: raised from it, or while
    handling it (its cause or context chain holds a SoftTimeLimitExceeded)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, SoftTimeLimitExceeded):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False

