"""The in-process orchestrator: no broker; the job runs in the caller's process before ``start``
returns, with the same runner, job id and numerics a worker would use."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from mediafleet.adapters.bundle import build_bundle
from mediafleet.blobs.local import BlobStore
from mediafleet.contract.jobs import ExtractRequest, JobState
from mediafleet.contract.manifest import Capability, DeviceClass, Manifest
from mediafleet.discovery.hook import index_finished
from mediafleet.orchestrators.job import DoneJob, Job
from mediafleet.settings import Settings
from mediafleet.workers.engines import EngineConfig, cap_threads, configure
from mediafleet.workers.runner import run_request

if TYPE_CHECKING:
    from mediafleet.admission import Submission

__all__ = ["InProcessOrchestrator"]


class InProcessOrchestrator:
    """Runs each request here and now; keeps nothing once its bundle is returned.

    With ``defer_streamed`` set, a PDF job that can run in page ranges is returned unrun
    (:class:`~mediafleet.orchestrators.pdf_ranges.StreamedPdfJob`), for a caller that writes its
    bundle as it is made (:meth:`~mediafleet.orchestrators.job.Job.write`) instead of holding it whole.
    """

    defer_streamed = False

    def __init__(self, settings: Settings, manifest: Manifest, store: BlobStore,
                 clock: Callable[[], datetime]) -> None:
        cap_threads(settings.threads)  # as a worker does: same job id, same numerics
        configure(EngineConfig(device=DeviceClass.CPU, threads=settings.threads,
                               whisper_model_dir=settings.whisper_model_dir))
        self.manifest, self.store, self._clock = manifest, store, clock
        self._index_setting = settings.discovery_index  # where finished outcomes are indexed, if anywhere

    def facts(self, source: Path | BinaryIO, capability: Capability) -> dict[str, Any]:
        return {}  # nothing fans out here: a job makes its whole result in one run

    def start(self, request: ExtractRequest, capability: Capability, submission: Submission,
              facts: Mapping[str, Any] | None = None) -> Job:
        if self.defer_streamed:
            from mediafleet.orchestrators.pdf_ranges import StreamedPdfJob, streams

            if streams(capability):
                return StreamedPdfJob(self, request, capability, submission)
        return self.run(request, capability, submission)

    def run(self, request: ExtractRequest, capability: Capability, submission: Submission) -> Job:
        """Run ``request`` here, whole; its job is over when this returns."""
        outcome = run_request(request, manifest=self.manifest, store=self.store, device=request.device,
                              progress=submission.get("progress"), clock=self._clock)
        index_finished(self._index_setting, outcome, self.manifest)
        return DoneJob(build_bundle(outcome, capability))

    def job(self, job_id: str) -> Job | None:
        return None  # a job here is over when start returns; no record of it is kept

    def cancel(self, job_id: str) -> JobState | None:
        return None

    def status(self) -> dict[str, Any]:
        return {"queues": {}, "workers": {d.value: [] for d in DeviceClass}, "warnings": []}
