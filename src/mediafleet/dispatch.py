"""``delegate_extract`` and :class:`Dispatcher`: the one door ingestion jobs submit through.

Each submission is admitted first (:mod:`mediafleet.admission`: peek, sniff, manifest check, store,
job id), then handed to the dispatcher's orchestrator (:mod:`mediafleet.orchestrators.protocol`: in-process
without a broker, the Celery fleet with one). The caller always gets a :class:`Job` whose bundle is
the evidence; a refusal is a job that is already ``failed``, never a half-done one. What fails
below this door for a reason of ours (a blob store that cannot take the artifact) is translated
once, by admission, into the public error tree (:mod:`mediafleet.contract.errors`); the fleet
being unreachable is translated here (:func:`mediafleet.fleet.redis_client.translating`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Unpack

from mediafleet.admission import Admission, Admitted, Artifact, Submission, claims_for
from mediafleet.blobs.local import BlobStore, open_store
from mediafleet.contract.bundle import CallerClaims, EvidenceBundle
from mediafleet.contract.errors import MediafleetError
from mediafleet.contract.jobs import JobState
from mediafleet.contract.manifest import Capability, Manifest
from mediafleet.fleet.keys import queue_lists  # noqa: F401 - queue_lists: importable from here, as before
from mediafleet.fleet.redis_client import translating
from mediafleet.fleet.store import JobStore
from mediafleet.orchestrators.job import Job, claimed
from mediafleet.orchestrators.protocol import Orchestrator, orchestrator_for
from mediafleet.settings import Settings
from mediafleet.sniff import sniff

if TYPE_CHECKING:
    from mediafleet.orchestrators.celery_fleet import CeleryOrchestrator

__all__ = ["Dispatcher", "Job", "Submission", "delegate_extract"]


def _now() -> datetime:
    return datetime.now(UTC)


class Dispatcher:
    """Built once from settings; admits artifacts and hands them to its orchestrator.

    Args:
        settings: where the broker, backend and blob store are. No broker URL means in-process.
        manifest: the manifest in force (defaults to the settings' one).
        store: the blob store (defaults to the one the settings name: :func:`open_store`).
        clock: the time refusals and in-process outcomes are stamped with.
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
        self.store = store or open_store(settings)
        self.admission = Admission(settings, self.manifest, self.store, clock)
        self.orchestrator: Orchestrator = orchestrator_for(settings, self.manifest, self.store, clock)

    @property
    def in_process(self) -> bool:
        return self.settings.broker_url is None

    @translating
    def submit(self, artifact: Artifact, **request: Unpack[Submission]) -> Job:
        """Admit, store and run (or enqueue) one artifact.

        Args:
            artifact: the bytes, a path to them, or a binary stream.
            **request: what to do with it (:class:`Submission`: action, media type, options,
                priority, pickup window, progress, claims); every key is optional.

        Raises:
            TypeError: a keyword :class:`Submission` does not name.
            Unavailable: the blob store could not take the artifact (full, or its volume failed).
        """
        return self._start(self.admission.admit(artifact, request, self.orchestrator.facts), request)

    @translating
    def submit_stored(self, digest: str, **request: Unpack[Submission]) -> Job:
        """Like :meth:`submit`, for an artifact the blob store already holds (too big to pass inline).

        The stored bytes are re-hashed first; a digest the store does not hold gives a failed job
        (``blob_not_found``). The type is sniffed from the stored bytes and checked as in ``submit``.

        Raises:
            CapabilityRefused: ``digest`` is not a ``sha256:<hex>`` digest (there is no artifact to name).
            TypeError: a keyword :class:`Submission` does not name.
        """
        return self._start(self.admission.admit_stored(digest, request, self.orchestrator.facts), request)

    def _start(self, admitted: Admitted | Job, request: Submission) -> Job:
        """Hand an admitted request to the orchestrator; a refused job is already the answer."""
        if not isinstance(admitted, Admitted):
            return admitted
        job = self.orchestrator.start(admitted.request, admitted.capability, request, admitted.facts)
        return claimed(job, admitted.claims)

    def precheck(self, head: bytes, size: int, digest: str, *, action: str | None, media_type: str | None,
                 options: Mapping[str, Any], claims: CallerClaims | None = None) -> EvidenceBundle | None:
        """The refused bundle :meth:`submit` would give for these bytes (their first 4 KiB) before
        any work, or None when they pass: for a caller that runs the job itself."""
        sniffed = sniff(head)
        try:
            self.admission.check(sniffed, size, action, media_type, dict(options))
        except MediafleetError as exc:
            return claimed(self.admission.refused(digest, size, sniffed, action, exc.public()),
                           claims_for(claims, media_type, sniffed)).bundle()
        return None

    def job_id_for(self, digest: str, capability: Capability, options: Mapping[str, Any]) -> str:
        """The job id :meth:`submit` gives this artifact, capability and options."""
        return self.admission.job_id_for(digest, capability, options)

    def claims_for(self, claims: CallerClaims | None, claimed: str | None, sniffed: str | None) -> CallerClaims | None:
        """This call's claims: the caller's digest facts, and its media type against the bytes'."""
        return claims_for(claims, claimed, sniffed)

    @translating
    def job(self, job_id: str) -> Job | None:
        """A handle on a job submitted earlier (by any dispatcher of this fleet)."""
        return self.orchestrator.job(job_id)

    @translating
    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a job; returns its state afterwards (None for an unknown job)."""
        return self.orchestrator.cancel(job_id)

    @translating
    def status(self) -> dict[str, Any]:
        """Queue lengths per capability queue, live workers by device class, and warnings about the
        fleet's Redis (one that may evict its keys)."""
        return self.orchestrator.status()

    # -- the fleet's own parts, for fleet tools (status, gc, chaos tests) --------------------------

    @property
    def app(self) -> Any:
        """The fleet's Celery app (a fleet dispatcher only)."""
        return self._fleet().app

    @property
    def _app(self) -> Any:
        """The Celery app if one was built, else None (nothing was sent or waited on)."""
        return getattr(self.orchestrator, "built_app", None)

    def jobs(self) -> JobStore:
        """The fleet's job store (a fleet dispatcher only)."""
        return self._fleet().jobs()

    def _fleet(self) -> CeleryOrchestrator:
        from mediafleet.orchestrators.celery_fleet import CeleryOrchestrator

        if not isinstance(self.orchestrator, CeleryOrchestrator):
            raise ValueError("the fleet needs a redis:// or rediss:// result backend")
        return self.orchestrator


_DISPATCHERS: dict[str, Dispatcher] = {}


def delegate_extract(artifact: Artifact, *, settings: Settings | None = None, **kwargs: Any) -> Job:
    """Submit one artifact with settings from the environment; see :meth:`Dispatcher.submit`.

    One dispatcher per settings in a process (cached): a long-lived ingestion process that calls
    this for every file keeps one Celery app, one blob store and one Redis pool.
    """
    settings = settings or Settings.load()
    key = settings.cache_key()
    if (dispatcher := _DISPATCHERS.get(key)) is None:
        dispatcher = _DISPATCHERS.setdefault(key, Dispatcher(settings))
    return dispatcher.submit(artifact, **kwargs)
