"""The Celery orchestrator: admitted requests go on the fleet, each on its capability's queue.

It owns this dispatcher's Celery app (one per settings and manifest in a process:
:func:`mediafleet.workers.runtime.config.create_app`) and its handle on the fleet's job store. A job's record
is claimed as its message is sent (one step), so a resubmission of the same artifact joins the job
already there; with no live worker of an allowed device class the job is held, not sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from mediafleet.contract.errors import CapabilityRefused, ErrorCode, MediafleetError
from mediafleet.contract.jobs import ExtractRequest, JobState
from mediafleet.contract.manifest import Capability, DeviceClass, Manifest
from mediafleet.discovery.hook import index_finished
from mediafleet.fleet.keys import queue_lists
from mediafleet.fleet.presence import live_workers
from mediafleet.fleet.redis_client import eviction_warning
from mediafleet.fleet.reports import report_part
from mediafleet.fleet.store import JobStore
from mediafleet.fleet.watches import Watch
from mediafleet.orchestrators.fleet_job import FleetJob
from mediafleet.orchestrators.job import Job, refused_job
from mediafleet.settings import Settings
from mediafleet.workers.parts import plan, probe

if TYPE_CHECKING:
    from mediafleet.admission import Submission
    from mediafleet.blobs.protocol import BlobStore

__all__ = ["CeleryOrchestrator"]

_DEFAULT_PRIORITY = 4
# A queued job whose message is not sent this long after its record was written was left by a
# dispatcher that died in between; a resubmission sends it (sending takes milliseconds).
_UNSENT_AFTER_S = 30.0


class CeleryOrchestrator:
    """Queues requests on the fleet and answers for its jobs from their records.

    Nothing is reached at construction: the app is built when the first message is sent, and the
    job store after one plain connection attempt on first use.
    """

    def __init__(self, settings: Settings, manifest: Manifest, clock: Callable[[], datetime],
                 store: BlobStore | None = None) -> None:
        self.settings = settings
        self.manifest = manifest
        self._clock = clock
        self._store = store  # the dispatcher's blob store: outcomes too large to keep inline are read from it
        self.built_app: Any = None
        """The Celery app once built (None while nothing was sent or waited on)."""
        self._jobs: JobStore | None = None

    @property
    def app(self) -> Any:
        if self.built_app is None:
            from mediafleet.workers.runtime.config import create_app

            self.built_app = create_app(self.settings, self.manifest)
        return self.built_app

    def jobs(self) -> JobStore:
        """The fleet's job store. Built on first use, after one plain connection attempt: a broker
        that is not there at all is reported at once; one that goes away later is waited for. Behind
        Sentinel the first attempt waits as long as any call does: a master failing over (seconds)
        is not a fleet that is not there."""
        if self._jobs is None:
            from mediafleet.fleet.redis_client import RETRY_S, is_sentinel, redis_client

            probe = redis_client(self.settings, retry_s=RETRY_S if is_sentinel(self.settings.backend()) else 0)
            try:
                probe.ping()
            finally:
                probe.close()
            self._jobs = JobStore.from_settings(self.settings, self._store)
        return self._jobs

    def facts(self, source: Path | BinaryIO, capability: Capability) -> dict[str, Any]:
        """What planning the job's declared parts needs from the bytes (a video's audio track: no
        speech part for a silent one; a PDF's page count: split past the part's size)."""
        return probe(source, capability)

    def start(self, request: ExtractRequest, capability: Capability, submission: Submission,
              facts: Mapping[str, Any] | None = None) -> Job:
        priority, keep_result_s = submission.get("priority"), submission.get("keep_result_s")
        level = _DEFAULT_PRIORITY if priority is None else priority
        if not 0 <= level <= 9:
            raise CapabilityRefused("priority must be 0 (lowest) to 9 (highest)", code=ErrorCode.INVALID_REQUEST)
        keep_s = keep_result_s or self.settings.result_ttl_s
        try:
            request, parts = plan(request, capability, self.manifest, facts)
        except MediafleetError as exc:  # options that do not fit together, or a part not declared
            artifact = request.artifact
            return refused_job(self.manifest, artifact.digest, artifact.bytes, artifact.media_type, request.action,
                               exc.public(), self._clock())
        watch = None if parts else self._follow(request.job_id)
        try:
            request, token = self._queue(request, capability, level, keep_s,
                                         parts={name: part.job_id for name, part in parts.items()})
        except BaseException:
            if watch is not None:
                watch.discard()
            raise
        if token is not None:
            for part in parts.values():
                self._queue_part(part, level, keep_s)
        return self._handle(request, capability, watch, token)

    def _follow(self, job_id: str) -> Watch | None:
        """An idle watch following ``job_id``, subscribed before the job is claimed: no outcome of
        this submission can be written unseen, so its waiter need not read the record the claim
        just wrote before it first waits (:class:`FleetJob`). None when no watch is idle (a waiter
        opens its own)."""
        watch = self.jobs().idle_watch()
        if watch is None:
            return None
        try:
            watch.follow(job_id, job_id)
        except BaseException:
            watch.discard()
            raise
        return watch

    def _handle(self, request: ExtractRequest, capability: Capability, watch: Watch | None = None,
                claimed: str | None = None) -> FleetJob:
        return FleetJob(self.app, self.jobs(), capability, request, self.manifest, self.settings.discovery_index,
                        watch=watch, claimed=claimed if watch is not None else None)

    def _queue(self, request: ExtractRequest, capability: Capability, level: int, keep_s: int,
               parts: Mapping[str, str] | None = None) -> tuple[ExtractRequest, str | None]:
        """Claim the job's record and send it (or hold it); (the request in force, the new claim's
        token: None when an existing job was joined).

        The record is routed as it is claimed, and its message pushed by the same step (one round
        trip: each candidate's message is made first, :func:`mediafleet.workers.runtime.message.extract_message`):
        to the first allowed device class with a live worker on the capability's queue. With none
        alive the job is held: recorded, on no queue, with the reason (``status`` shows it), until
        the first worker of an allowed class comes up and queues it for its own class. It never
        runs on a class the manifest forbids. Where a message cannot be made ahead (task-sent
        events on, a publish signal with receivers), it is sent after the claim, as before.
        """
        from mediafleet.workers.runtime.message import extract_message, send_extract

        jobs = self.jobs()
        candidates = [(capability.queue(d), request.model_copy(update={"device": d})) for d in capability.devices]
        allowed = "/".join(d.value for d in capability.devices)
        reason = f"no live worker for {capability.action} on {allowed}"

        def made(candidate: ExtractRequest, token: str) -> tuple[str, str] | None:
            return extract_message(self.app, candidate, capability, token, level)

        # The claim pushes the message itself only where the queues are in the records' database.
        message = made if self.settings.one_redis() else None

        claim = jobs.claim_routed(candidates, held_reason=reason, priority=level, keep_s=keep_s, parts=parts,
                                  message=message)
        if claim.token is None and (found := jobs.get(request.job_id)) is not None and found.untrusted \
                and jobs.discard_forged(request.job_id):
            # Its outcome failed the signature check (written by no worker holding the key), or its
            # outcome's blob is gone: run it.
            claim = jobs.claim_routed(candidates, held_reason=reason, priority=level, keep_s=keep_s, parts=parts,
                                      message=message)
        request = claim.request
        if claim.token is None:
            record = jobs.get(request.job_id)
            if record is None:
                return request, None
            if (lost := jobs.unsent(request.job_id, _UNSENT_AFTER_S)) is not None:
                # Recorded but never sent (its dispatcher died in between): this resubmission sends it.
                send_extract(self.app, record.request, capability, lost, record.priority)
            return record.request, None
        if not claim.held and not claim.sent:
            send_extract(self.app, request, capability, claim.token, level)
            jobs.mark_sent(request.job_id)
        return request, claim.token

    def _queue_part(self, part: ExtractRequest, level: int, keep_s: int) -> None:
        """Queue one part of a job; one that already finished (from an earlier submission of the
        same job) reports its outcome at once instead of running again, so only what is missing
        (a range whose worker was lost, say) runs again."""
        of = part.part_of
        assert of is not None
        _, token = self._queue(part, self.manifest.capability(part.action), level, keep_s)
        if token is not None:
            return
        record = self.jobs().get(part.job_id)
        if record is None or not record.final or (outcome := record.outcome) is None:
            return
        if (joined := report_part(self.jobs(), self.manifest, of, outcome)) is not None:
            index_finished(self.settings.discovery_index, joined, self.manifest)

    def job(self, job_id: str) -> FleetJob | None:
        """A handle on a job submitted earlier (by any dispatcher of this fleet)."""
        record = self.jobs().get(job_id)
        if record is None:
            return None
        request = record.request
        return self._handle(request, self.manifest.capability(request.action))

    def cancel(self, job_id: str) -> JobState | None:
        job = self.job(job_id)
        return job.cancel() if job is not None else None

    @contextmanager
    def _broker_client(self) -> Iterator[Any]:
        """A Redis client on the broker's database, through the app's own broker connection."""
        with self.app.connection_for_read() as connection:
            yield connection.default_channel.client

    def status(self) -> dict[str, Any]:
        client = self.jobs().client
        names = [cap.queue(device) for cap in self.manifest.capabilities.values() for device in cap.devices]
        # The queues are in the broker's database; the records (and presence) in the result backend's.
        with nullcontext(client) if self.settings.one_redis() else self._broker_client() as broker:
            queues = {name: sum(broker.llen(n) for n in queue_lists(name)) for name in names}
        workers: dict[str, list[str]] = {d.value: [] for d in DeviceClass}
        for worker in live_workers(client):
            workers.setdefault(worker.device, []).append(worker.hostname)
        warning = eviction_warning(client)
        return {"queues": queues, "workers": workers, "warnings": [warning] if warning else []}
