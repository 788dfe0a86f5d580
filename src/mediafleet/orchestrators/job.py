"""The handle a submission returns: :class:`Job`, whose ``bundle()`` is the evidence.

Two handles live here because both orchestrators (and admission) give them: a job that is already
over (run in-process, or refused before any work) and one caller's view of a job with its claims
recorded. The fleet's handle, which waits on the job record, is :mod:`mediafleet.orchestrators.fleet_job`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mediafleet.adapters.bundle import refused_bundle, with_claims
from mediafleet.adapters.ids import token
from mediafleet.contract.bundle import BundleArtifact, CallerClaims, EvidenceBundle
from mediafleet.contract.errors import PublicError
from mediafleet.contract.jobs import JobState, Progress
from mediafleet.contract.manifest import Manifest

if TYPE_CHECKING:
    from mediafleet.adapters.pdf_stream import Written

__all__ = ["ClaimedJob", "DoneJob", "Job", "claimed", "refused_job"]


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

    def write(self, lines_to: Path, turtle_to: Path | None, *, claims: CallerClaims | None = None,
              form: str = "jsonl", timeout: float | None = None,
              on_progress: Callable[[Progress], None] | None = None) -> Written:
        """Wait as :meth:`bundle` does and write the bundle (with ``claims``) to ``lines_to`` in
        ``form`` (``jsonl`` or indented ``json``) and its PROV as Turtle to ``turtle_to``, each under a
        temporary name renamed when complete; what was written (status, error, summary) comes back.

        A job that can do better writes as the bundle is made, never holding it whole: a PDF run
        here in ranges (:class:`mediafleet.orchestrators.pdf_ranges.StreamedPdfJob`), a split job on
        the fleet from its ranges' outcomes (:meth:`mediafleet.orchestrators.fleet_job.FleetJob.write`).

        Raises:
            TimedOut: the job did not finish within ``timeout``.
            OSError: a file could not be written (nothing is left under either name).
        """
        from mediafleet.adapters.pdf_stream import written_whole

        bundle = with_claims(self.bundle(timeout=timeout, on_progress=on_progress), claims)
        return written_whole(bundle, lines_to, turtle_to, form)


class DoneJob(Job):
    """A job that is over before its handle is given: run in-process, or refused."""

    def __init__(self, bundle: EvidenceBundle) -> None:
        super().__init__(bundle.job_id, bundle.action)
        self._bundle = bundle

    def state(self) -> JobState:
        return JobState.DONE if self._bundle.status == "ok" else JobState.FAILED

    def bundle(
        self, timeout: float | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> EvidenceBundle:
        return self._bundle


class ClaimedJob(Job):
    """One caller's view of a job: the same evidence, with that caller's claims recorded on it."""

    def __init__(self, job: Job, claims: CallerClaims) -> None:
        super().__init__(job.id, job.action)
        self.inner = job
        self.claims = claims

    def state(self) -> JobState:
        return self.inner.state()

    def progress(self) -> Progress | None:
        return self.inner.progress()

    def bundle(
        self, timeout: float | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> EvidenceBundle:
        return with_claims(self.inner.bundle(timeout=timeout, on_progress=on_progress), self.claims)

    def write(self, lines_to: Path, turtle_to: Path | None, *, claims: CallerClaims | None = None,
              form: str = "jsonl", timeout: float | None = None,
              on_progress: Callable[[Progress], None] | None = None) -> Written:
        return self.inner.write(lines_to, turtle_to, claims=self.claims if claims is None else claims, form=form,
                                timeout=timeout, on_progress=on_progress)

    def __getattr__(self, name: str) -> Any:  # cancel(), record() of a fleet job
        return getattr(self.inner, name)


def claimed(job: Job, claims: CallerClaims | None) -> Job:
    """``job`` as seen by a caller with ``claims`` (the job itself when there are none)."""
    return job if claims is None else ClaimedJob(job, claims)


def refused_job(manifest: Manifest, digest: str, size: int, media_type: str | None, action: str | None,
                error: PublicError, at: datetime) -> Job:
    """A job refused before any work: failed at once, its id derived from what was refused."""
    modality = None
    if media_type is not None:
        modality = next((c.modality for c in manifest.capabilities.values() if media_type in c.media_types), None)
    artifact = BundleArtifact(digest=digest, media_type=media_type, bytes=size, modality=modality)
    job = "mf-" + token("refused", digest, action or "", error.code.value)
    return DoneJob(refused_bundle(job, action, artifact, error, at))
