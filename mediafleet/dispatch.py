"""``delegate_extract``: the dispatcher ingestion jobs call.

Sniff the media type from the bytes (a claimed type that disagrees is refused), check the manifest
(fail closed), compute the digest, store the blob, and either run the job here (no broker) or
enqueue it on its capability's queue. The caller always gets a :class:`Job` whose bundle is the
evidence; a refusal is a job that is already ``failed``, never a half-done one.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from adapters.bundle import build_bundle, refused_bundle
from adapters.ids import job_id as make_job_id
from adapters.ids import token
from contract.bundle import BundleArtifact, EvidenceBundle
from contract.common import sha256_digest
from contract.errors import CapabilityRefused, ErrorCode, InputRejected, MediafleetError, PublicError, TimedOut
from contract.jobs import ArtifactRef, ExtractRequest, JobState, Outcome, Progress
from contract.manifest import Capability, DeviceClass, Manifest
from mediafleet.blobstore import BlobStore, LocalBlobStore
from mediafleet.settings import Settings
from mediafleet.sniff import sniff
from workers.engines import EngineConfig, configure
from workers.extractor import ProgressFn
from workers.runner import run_request

__all__ = ["Dispatcher", "Job", "delegate_extract"]

Artifact = bytes | str | Path | BinaryIO
_HEAD = 4096
_PROGRESS_SLICE_S = 0.5


def _now() -> datetime:
    return datetime.now(UTC)


class Job:
    """A handle on one extraction; ``bundle()`` waits for it and returns the evidence bundle."""

    def __init__(self, job_id: str, action: str | None) -> None:
        self.id = job_id
        self.action = action

    def state(self) -> JobState:
        raise NotImplementedError

    def progress(self) -> Progress | None:
        return None

    def bundle(
        self, timeout: float | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> EvidenceBundle:
        """Wait (up to ``timeout`` seconds) and return the bundle; ``on_progress`` sees progress."""
        raise NotImplementedError


class _DoneJob(Job):
    def __init__(self, bundle: EvidenceBundle) -> None:
        super().__init__(bundle.job_id, bundle.action)
        self._bundle = bundle

    def state(self) -> JobState:
        return JobState.DONE if self._bundle.status == "ok" else JobState.FAILED

    def bundle(
        self, timeout: float | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> EvidenceBundle:
        return self._bundle


class _FleetJob(Job):
    """A job on the fleet, read through Celery's result backend."""

    def __init__(self, async_result: Any, capability: Capability, request: ExtractRequest, submitted: datetime) -> None:
        super().__init__(request.job_id, request.action)
        self._result = async_result
        self._capability = capability
        self._request = request
        self._submitted = submitted

    def state(self) -> JobState:
        status = self._result.state
        if status == "SUCCESS":
            outcome = self._result.result
            return JobState.DONE if outcome.get("status") == "ok" else JobState.FAILED
        if status in ("STARTED", "PROGRESS", "RETRY"):
            return JobState.STARTED
        if status == "REVOKED":
            return JobState.CANCELLED
        if status == "FAILURE":
            return JobState.FAILED
        return JobState.QUEUED

    def progress(self) -> Progress | None:
        info = self._result.info
        if self._result.state == "PROGRESS" and isinstance(info, dict):
            return Progress(done=info.get("done", 0), total=info.get("total"))
        return None

    def bundle(
        self, timeout: float | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> EvidenceBundle:
        from celery.exceptions import TimeoutError as CeleryTimeout

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # The Redis backend wakes get() through pub/sub the moment the result lands; the
            # short slices are only there to report progress in between.
            left = _PROGRESS_SLICE_S if deadline is None else min(_PROGRESS_SLICE_S, deadline - time.monotonic())
            if left <= 0:
                raise TimedOut("the job did not finish within the wait timeout")
            try:
                self._result.get(timeout=left, propagate=False, disable_sync_subtasks=False)
                break
            except CeleryTimeout:
                if on_progress is not None and (p := self.progress()) is not None:
                    on_progress(p)
        if self._result.state == "SUCCESS":
            return build_bundle(Outcome.model_validate(self._result.result), self._capability)
        code = ErrorCode.CANCELLED if self._result.state == "REVOKED" else ErrorCode.WORKER_LOST
        message = "the job was cancelled" if code == ErrorCode.CANCELLED else "the worker failed before finishing the job"
        now = _now()
        outcome = Outcome(job_id=self.id, action=self._request.action, artifact=self._request.artifact, status="failed",
                          error=PublicError(code=code, message=message), started_at=self._submitted, ended_at=now)
        return build_bundle(outcome, self._capability)


class Dispatcher:
    """Built once from settings; submits artifacts in-process or to the fleet.

    Args:
        settings: where the broker, backend and blob store are. No broker URL means in-process.
        manifest: the manifest in force (defaults to the settings' one).
        store: the blob store (defaults to a local store at ``settings.blob_root``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        manifest: Manifest | None = None,
        store: BlobStore | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.settings = settings
        self.manifest = manifest or settings.manifest()
        self.store = store or LocalBlobStore(settings.blob_root)
        self._clock = clock
        self._app: Any = None
        if self.in_process:
            configure(EngineConfig(device=DeviceClass.CPU, threads=settings.threads,
                                   whisper_model_dir=settings.whisper_model_dir))

    @property
    def in_process(self) -> bool:
        return self.settings.broker_url is None

    @property
    def app(self) -> Any:
        if self._app is None:
            from workers.app import create_app

            self._app = create_app(self.settings, self.manifest)
        return self._app

    def submit(
        self,
        artifact: Artifact,
        *,
        action: str | None = None,
        media_type: str | None = None,
        options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        progress: ProgressFn | None = None,
    ) -> Job:
        """Check, store and run (or enqueue) one artifact.

        Args:
            artifact: the bytes, a path to them, or a binary stream.
            action: the callers' action (``ocr_pdf``...); inferred from the media type when None.
            media_type: the type the caller claims; refused when the bytes say otherwise.
            options: capability options; anything the manifest does not declare is refused.
            priority: 0 (lowest) to 9 (highest) on the fleet.
            progress: in-process only: called with (done, total) as the job advances.
        """
        options = dict(options or {})
        head, size, opened = _peek(artifact)
        try:
            sniffed = sniff(head)
            try:
                capability = self._check(sniffed, size, action, media_type, options)
            except MediafleetError as exc:
                digest = _digest_of(opened)
                return self._refused(digest, size, sniffed, action, exc.public())
            digest, stored_size, _ = self.store.put_stream(opened)
        finally:
            opened.close()
        if stored_size != size:
            return self._refused(digest, stored_size, sniffed, action,
                                 InputRejected("the artifact changed while it was read").public())
        request = ExtractRequest(
            job_id=make_job_id(digest, capability.action, capability.extractor_version, options),
            action=capability.action,
            artifact=ArtifactRef(digest=digest, media_type=sniffed, bytes=size, modality=capability.modality),  # type: ignore[arg-type]
            options=options,
            device=self._device_for(capability),
        )
        if self.in_process:
            outcome = run_request(request, manifest=self.manifest, store=self.store, device=request.device,
                                  progress=progress, clock=self._clock)
            return _DoneJob(build_bundle(outcome, capability))
        return self._enqueue(request, capability, priority)

    def _device_for(self, capability: Capability) -> DeviceClass:
        """This process's device class when the capability allows it, else its preferred one."""
        if self.settings.device in capability.devices:
            return self.settings.device
        return capability.devices[0]

    def _check(self, sniffed: str | None, size: int, action: str | None, claimed: str | None,
               options: Mapping[str, Any]) -> Capability:
        if size == 0:
            raise InputRejected("the artifact is empty", code=ErrorCode.EMPTY_INPUT, phase=None)
        if sniffed is None:
            raise CapabilityRefused("the artifact's type is not recognised", code=ErrorCode.UNSUPPORTED_MEDIA_TYPE)
        if claimed is not None and claimed.split(";")[0].strip().lower() != sniffed:
            raise CapabilityRefused(f"the artifact is {sniffed}, not {claimed}", code=ErrorCode.MEDIA_TYPE_MISMATCH)
        capability = self.manifest.for_media_type(sniffed, action)
        capability.check_size(size)
        capability.check_options(options)
        return capability

    def _refused(self, digest: str, size: int, media_type: str | None, action: str | None,
                 error: PublicError) -> Job:
        modality = None
        if media_type is not None:
            modality = next((c.modality for c in self.manifest.capabilities.values() if media_type in c.media_types), None)
        artifact = BundleArtifact(digest=digest, media_type=media_type, bytes=size, modality=modality)
        job = "mf-" + token("refused", digest, action or "", error.code.value)
        return _DoneJob(refused_bundle(job, action, artifact, error, self._clock()))

    def _enqueue(self, request: ExtractRequest, capability: Capability, priority: int | None) -> Job:
        from mediafleet.jobstore import JobStore
        from workers.app import EXTRACT_TASK

        jobs = JobStore(self.app, ttl_s=self.settings.result_ttl_s)
        submitted = self._clock()
        async_result = self.app.AsyncResult(request.job_id)
        if jobs.claim(request.job_id):
            self.app.send_task(
                EXTRACT_TASK,
                args=[request.model_dump(mode="json")],
                task_id=request.job_id,
                queue=capability.queue(request.device),
                soft_time_limit=capability.time_limits.soft_s,
                time_limit=capability.time_limits.hard_s,
                priority=priority,
            )
        return _FleetJob(async_result, capability, request, submitted)


def _peek(artifact: Artifact) -> tuple[bytes, int, BinaryIO]:
    """The first bytes, the size and a stream positioned at the start."""
    if isinstance(artifact, (bytes, bytearray, memoryview)):
        data = bytes(artifact)
        return data[:_HEAD], len(data), io.BytesIO(data)
    if isinstance(artifact, (str, Path)):
        stream: BinaryIO = open(artifact, "rb")  # noqa: SIM115 - closed by submit
        size = Path(artifact).stat().st_size
    else:
        stream = artifact
        stream.seek(0, io.SEEK_END)
        size = stream.tell()
        stream.seek(0)
    head = stream.read(_HEAD)
    stream.seek(0)
    return head, size, stream


def _digest_of(stream: BinaryIO) -> str:
    import hashlib

    stream.seek(0)
    h = hashlib.sha256()
    while chunk := stream.read(1 << 20):
        h.update(chunk)
    return sha256_digest(h.hexdigest())


def delegate_extract(artifact: Artifact, *, settings: Settings | None = None, **kwargs: Any) -> Job:
    """Submit one artifact with settings from the environment; see :meth:`Dispatcher.submit`."""
    return Dispatcher(settings or Settings.load()).submit(artifact, **kwargs)
