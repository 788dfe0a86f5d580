"""The one interface both ways of running an admitted job implement, and the choice between them.

:class:`~mediafleet.orchestrators.inprocess.InProcessOrchestrator` runs the job in this process
(no broker); :class:`~mediafleet.orchestrators.celery_fleet.CeleryOrchestrator` puts it on the fleet. The
dispatcher calls only what :class:`Orchestrator` declares and never asks which one it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, runtime_checkable

from mediafleet.contract.jobs import ExtractRequest, JobState
from mediafleet.contract.manifest import Capability, Manifest
from mediafleet.orchestrators.job import Job
from mediafleet.settings import Settings

if TYPE_CHECKING:
    from mediafleet.admission import Submission
    from mediafleet.blobs.local import BlobStore

__all__ = ["Orchestrator", "orchestrator_for"]


@runtime_checkable
class Orchestrator(Protocol):
    """Runs admitted requests somewhere and answers for the jobs it ran."""

    def facts(self, source: Path | BinaryIO, capability: Capability) -> dict[str, Any]:
        """What this orchestrator must know from the bytes before they are stored, by part name
        (a fleet plans a job's parts from them: a video's audio track, a PDF's page count)."""
        ...

    def start(self, request: ExtractRequest, capability: Capability, submission: Submission,
              facts: Mapping[str, Any] | None = None) -> Job:
        """Run or queue one admitted request; the handle on its job.

        Raises:
            CapabilityRefused: a submission keyword this orchestrator cannot honour (a priority out of range).
        """
        ...

    def job(self, job_id: str) -> Job | None:
        """A handle on a job started earlier, or None for one it does not know."""
        ...

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a job; its state afterwards (None for an unknown job)."""
        ...

    def status(self) -> dict[str, Any]:
        """Queue lengths per capability queue, live workers by device class, and warnings about the
        fleet's Redis (one that may evict its keys)."""
        ...


def orchestrator_for(settings: Settings, manifest: Manifest, store: BlobStore,
                     clock: Callable[[], datetime]) -> Orchestrator:
    """In-process without a broker URL, the Celery fleet with one; nothing else, no fallback."""
    if settings.broker_url is None:
        from mediafleet.orchestrators.inprocess import InProcessOrchestrator

        return InProcessOrchestrator(settings, manifest, store, clock)
    from mediafleet.orchestrators.celery_fleet import CeleryOrchestrator

    return CeleryOrchestrator(settings, manifest, clock, store)
