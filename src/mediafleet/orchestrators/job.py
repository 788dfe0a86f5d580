"""The handle a submission returns: :class:`Job`, whose ``bundle()`` is the evidence.

Two handles live here because both orchestrators (and admission) give them: a job that is already
over (run in-process, or refused before any work) and one caller's view of a job with its claims
recorded. The fleet's handle, which waits on the job record, is :mod:`mediafleet.orchestrators.fleet_job`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from mediafleet.adapters.bundle import refused_bundle, with_claims
from mediafleet.adapters.ids import token
from mediafleet.contract.bundle import BundleArtifact, CallerClaims, EvidenceBundle
from mediafleet.contract.errors import PublicError
from mediafleet.contract.jobs import JobState, Progress
from mediafleet.contract.manifest import Manifest

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
