"""``delegate_extract``: the dispatcher ingestion jobs call.

Sniff the media type from the bytes (a claimed type that disagrees is refused), check the manifest
(fail closed), compute the digest, store the blob, and either run the job here (no broker) or
enqueue it on its capability's queue. The caller always gets a :class:`Job` whose bundle is the
evidence; a refusal is a job that is already ``failed``, never a half-done one.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypedDict, Unpack

from mediafleet.adapters.bundle import build_bundle, refused_bundle, with_claims
from mediafleet.adapters.ids import job_id as make_job_id
from mediafleet.adapters.ids import token
from mediafleet.contract.bundle import BundleArtifact, CallerClaims, EvidenceBundle
from mediafleet.contract.digests import DIGEST, hash_stream
from mediafleet.contract.errors import (
    CapabilityRefused,
    ErrorCode,
    InputRejected,
    MediafleetError,
    Phase,
    PublicError,
    TimedOut,
    Unavailable,
)
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, JobState, Outcome, Progress
from mediafleet.contract.manifest import Capability, DeviceClass, Manifest, Modality
from mediafleet.blobstore import BlobStore, open_store
from mediafleet.discovery.hook import index_finished
from mediafleet.jobstore import JobRecord, JobStore, queue_lists
from mediafleet.presence import live_workers
from mediafleet.settings import Settings
from mediafleet.sniff import sniff
from mediafleet.workers.engines import EngineConfig, cap_threads, configure, numerics
from mediafleet.workers.extractor import ProgressFn
from mediafleet.workers.parts import SPEECH_ACTION, speech_part
from mediafleet.workers.runner import run_request

__all__ = ["Dispatcher", "Job", "Submission", "delegate_extract"]

Artifact = bytes | str | Path | BinaryIO
_HEAD = 4096
_PROGRESS_SLICE_S = 0.5
_DEFAULT_PRIORITY = 4
_FINAL = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)
# A queued job whose message is not sent this long after its record was written was left by a
# dispatcher that died in between; a resubmission sends it (sending takes milliseconds).
_UNSENT_AFTER_S = 30.0


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


def _requested(request: Submission) -> tuple[str | None, str | None, dict[str, Any]]:
    """The action, claimed type and options of a submission, after refusing keywords it does not name."""
    unknown = set(request) - Submission.__optional_keys__
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    return request.get("action"), request.get("media_type"), dict(request.get("options") or {})


def _now() -> datetime:
    return datetime.now(UTC)


def _redis_away() -> tuple[type[BaseException], ...]:
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout

    return (RedisConnectionError, RedisTimeout, OperationalError)


_REDIS_AWAY = _redis_away()


def _untrusted(request: ExtractRequest) -> Outcome:
    """What a waiter returns for a record whose outcome failed its signature check."""
    error = PublicError(code=ErrorCode.INTERNAL_ERROR, retryable=True,
                        message="the job's stored outcome failed its signature check and was not returned; "
                                "submit the artifact again to run it")
    return Outcome.failed(request, error, _now())


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


class _ClaimedJob(Job):
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


class _FleetJob(Job):
    """A job on the fleet: its state from the fleet's job record, woken by Celery's result.

    A job with a speech part is waited on through its own task until that has reported, then
    through the speech job's; whichever reports last writes the joined outcome.
    """

    def __init__(self, app: Any, jobs: JobStore, capability: Capability, request: ExtractRequest,
                 manifest: Manifest, index_setting: str | None = None) -> None:
        super().__init__(request.job_id, request.action)
        self._app = app
        self._jobs = jobs
        self._capability = capability
        self._request = request
        self._manifest = manifest
        self._index_setting = index_setting  # settings.discovery_index, for a join done here

    def record(self) -> JobRecord | None:
        return self._jobs.get(self.id)

    def state(self) -> JobState:
        record = self.record()
        return record.state if record is not None else JobState.FAILED

    def progress(self) -> Progress | None:
        """The job's own progress; once only its speech part runs, that part's (in seconds)."""
        record = self.record()
        if record is None:
            return None
        if (part := self._running_part(record)) is not None and (speech := self._jobs.get(part)) is not None:
            return speech.progress
        return record.progress

    def cancel(self) -> JobState | None:
        """Stop the job (and its speech part): a queued job never starts; a running one stops at its
        next progress point.

        Cancellation lives in the job record, not in Celery's revoke list (which workers keep in
        memory by task id and would hold against a later resubmission of the same job).
        """
        return self._jobs.cancel(self.id)

    @staticmethod
    def _running_part(record: JobRecord) -> str | None:
        """The speech job still to report, once the job's own task has (else None)."""
        if record.speech_job is not None and record.part("video") is not None and not record.final:
            return record.speech_job
        return None

    def _finished(self) -> Outcome | None:
        record = self.record()
        if record is not None and record.forged:
            return _untrusted(self._request)
        if record is not None and record.final and (outcome := record.outcome) is not None:
            return outcome
        return None

    def bundle(
        self, timeout: float | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> EvidenceBundle:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _PROGRESS_SLICE_S if deadline is None else min(_PROGRESS_SLICE_S, deadline - time.monotonic())
            try:
                if (outcome := self._wait_slice(max(left, 0.0), on_progress)) is not None:
                    break
            except _REDIS_AWAY:
                # Redis restarting or failing over: the records and queues come back with it (the
                # client retried for a while already); keep waiting until the caller's deadline.
                time.sleep(max(0.0, min(left, 0.5)))
            if deadline is not None and time.monotonic() >= deadline:
                raise TimedOut("the job did not finish within the wait timeout")
        return build_bundle(outcome, self._capability)

    def _wait_slice(self, left: float, on_progress: Callable[[Progress], None] | None) -> Outcome | None:
        """Wait up to ``left`` seconds for the job; its outcome, or None to wait on."""
        from celery.exceptions import TimeoutError as CeleryTimeout

        if (outcome := self._finished()) is not None:
            return outcome
        record = self.record()
        waited = self._app.AsyncResult(self._running_part(record) or self.id) if record is not None else None
        if waited is None or waited.ready():
            if (outcome := self._settle()) is not None:
                return outcome
            # Ended without an outcome that counts (a stale delivery's, or one on its way): poll.
            time.sleep(min(left, 0.1))
            return None
        # The Redis backend wakes get() through pub/sub the moment the result lands; the short
        # slices are only there to report progress in between.
        try:
            waited.get(timeout=left, propagate=False, disable_sync_subtasks=False)
        except CeleryTimeout:
            if on_progress is not None and (p := self.progress()) is not None:
                on_progress(p)
        return None

    def _settle(self) -> Outcome | None:
        """A task this job waits on has ended but the job has no outcome yet: find out why.

        Its worker may have been killed or timed out before writing one (the job fails here with
        the reason); a speech part's worker likewise (its failure is reported into the job as the
        speech part's); or the last reporter died before joining (the join is done here). None when
        the outcome is simply on its way.
        """
        from mediafleet.workers.app import join_parts

        # Read after the task was seen ending: a task reports before it ends, so this record holds
        # whatever it reported (one read before that could wrongly count its job as lost).
        record = self.record()
        if record is not None and record.final and (outcome := record.outcome) is not None:
            return outcome
        part = self._running_part(record) if record is not None else None
        if part is None:
            if record is not None and record.part("video") is not None:
                return self._finished()  # its own task reported and the job finished meanwhile
            lost = self._lost(self._app.AsyncResult(self.id), self._request)
            if lost is not None and record is not None and record.speech_job is not None:
                self._jobs.cancel(record.speech_job)  # the job failed: its speech part is not wanted
            return lost
        speech = self._jobs.get(part)
        if speech is not None and speech.final and speech.outcome is not None:
            reported: Outcome | None = speech.outcome
        else:
            reported = self._lost(self._app.AsyncResult(part), speech.request if speech else self._part_request(part))
        if reported is None:
            return None
        if self._jobs.report_part(self.id, "speech", reported) == 0 or self._stuck():
            if (joined := join_parts(self._jobs, self.id, self._manifest)) is not None:
                index_finished(self._index_setting, joined, self._manifest)
        return self._finished()

    def _stuck(self) -> bool:
        """Every part reported, yet no outcome (the joiner died): the join is left to us."""
        time.sleep(0.2)
        record = self.record()
        return record is not None and not record.final and record.pending_parts <= 0

    def _part_request(self, part: str) -> ExtractRequest:
        return self._request.model_copy(update={"job_id": part, "action": SPEECH_ACTION})

    def _lost(self, result: Any, request: ExtractRequest) -> Outcome | None:
        """The outcome of a task whose worker could not write one (killed, timed out, revoked),
        recorded as that job's failure; None when nothing was lost (the task returned: its outcome
        is stored, or it was a stale delivery and the live one will write it).

        A lost worker or a timeout says nothing about the input: recorded as retryable, so a
        resubmission runs the job again. The failure is written only while the record still names
        the delivery that was lost (a newer delivery on another worker is not failed for it).
        """
        record = self._jobs.get(request.job_id)
        if record is not None and record.final and (outcome := record.outcome) is not None:
            return outcome
        status, info = result.state, result.info
        cancelled = status == "REVOKED" or (record is not None and record.state == JobState.CANCELLED)
        if status == "SUCCESS" and not cancelled:
            return None
        if cancelled:
            error = PublicError(code=ErrorCode.CANCELLED, message="the job was cancelled")
        elif type(info).__name__ == "TimeLimitExceeded":
            error = PublicError(code=ErrorCode.TIMEOUT, retryable=True,
                                message=f"{request.action} ran past its hard time limit; its worker process was replaced")
        else:
            error = PublicError(code=ErrorCode.WORKER_LOST, retryable=True,
                                message="the worker failed before finishing the job")
        outcome = Outcome.failed(request, error, _now())
        if record is None:
            return outcome
        worker = getattr(result, "worker", None) if not cancelled else None
        if self._jobs.finish(outcome, seen_attempts=record.attempts, hostname=worker or None):
            return outcome
        after = self._jobs.get(request.job_id)
        return after.outcome if after is not None and after.final else None


class Dispatcher:
    """Built once from settings; submits artifacts in-process or to the fleet.

    Args:
        settings: where the broker, backend and blob store are. No broker URL means in-process.
        manifest: the manifest in force (defaults to the settings' one).
        store: the blob store (defaults to the one the settings name: :func:`open_store`).
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
        self._clock = clock
        self._app: Any = None
        self._jobs: JobStore | None = None
        if self.in_process:
            cap_threads(settings.threads)  # as a worker does: same job id, same numerics
            configure(EngineConfig(device=DeviceClass.CPU, threads=settings.threads,
                                   whisper_model_dir=settings.whisper_model_dir))

    @property
    def in_process(self) -> bool:
        return self.settings.broker_url is None

    @property
    def app(self) -> Any:
        if self._app is None:
            from mediafleet.workers.app import create_app

            self._app = create_app(self.settings, self.manifest)
        return self._app

    def submit(self, artifact: Artifact, **request: Unpack[Submission]) -> Job:
        """Check, store and run (or enqueue) one artifact.

        Args:
            artifact: the bytes, a path to them, or a binary stream.
            **request: what to do with it (:class:`Submission`: action, media type, options,
                priority, pickup window, progress, claims); every key is optional.

        Raises:
            TypeError: a keyword :class:`Submission` does not name.
        """
        action, media_type, options = _requested(request)
        head, size, opened = _peek(artifact)
        try:
            sniffed = sniff(head)
            claims = self._claims(request.get("claims"), media_type, sniffed)
            try:
                capability = self._check(sniffed, size, action, media_type, options)
            except MediafleetError as exc:
                digest = _digest_of(opened)
                return _claimed(self._refused(digest, size, sniffed, action, exc.public()), claims)
            audio = self._audio_track(opened, capability)
            opened.seek(0)
            try:
                digest, stored_size, _ = self.store.put_stream(opened)
            except OSError as exc:
                raise _store_failed(exc) from exc
        finally:
            opened.close()
        if stored_size != size:
            return _claimed(self._refused(digest, stored_size, sniffed, action,
                                          InputRejected("the artifact changed while it was read").public()), claims)
        return _claimed(self._start(digest, size, sniffed, capability, options, request, audio), claims)  # type: ignore[arg-type]

    def submit_stored(self, digest: str, **request: Unpack[Submission]) -> Job:
        """Like :meth:`submit`, for an artifact the blob store already holds (too big to pass inline).

        The stored bytes are re-hashed first; a digest the store does not hold gives a failed job
        (``blob_not_found``). The type is sniffed from the stored bytes and checked as in ``submit``.

        Raises:
            CapabilityRefused: ``digest`` is not a ``sha256:<hex>`` digest (there is no artifact to name).
            TypeError: a keyword :class:`Submission` does not name.
        """
        action, media_type, options = _requested(request)
        if not DIGEST.fullmatch(digest):
            raise CapabilityRefused("the blob reference is not a sha256 digest", code=ErrorCode.INVALID_REQUEST)
        claims = request.get("claims")
        size, sniffed = 0, None
        try:
            with self.store.verified_path(digest) as path:
                size = path.stat().st_size
                with open(path, "rb") as fh:
                    sniffed = sniff(fh.read(_HEAD))
                claims = self._claims(claims, media_type, sniffed)
                capability = self._check(sniffed, size, action, media_type, options)
                audio = self._audio_track(path, capability)
        except MediafleetError as exc:
            return _claimed(self._refused(digest, size, sniffed, action, exc.public()),
                            self._claims(claims, media_type, sniffed))
        return _claimed(self._start(digest, size, sniffed, capability, options, request, audio), claims)  # type: ignore[arg-type]

    def _audio_track(self, source: Path | BinaryIO, capability: Capability) -> bool | None:
        """For a video bound for the fleet: whether its header shows an audio track (no speech
        part is queued for a silent video); None otherwise, or when the header cannot be read."""
        if self.in_process or capability.modality != Modality.VIDEO:
            return None
        from mediafleet.workers.video.probe import has_audio_track

        return has_audio_track(source)

    def _start(self, digest: str, size: int, media_type: str, capability: Capability, options: dict[str, Any],
               request: Submission, has_audio: bool | None = None) -> Job:
        extract = self._request(digest, size, media_type, capability, options)
        if self.in_process:
            outcome = run_request(extract, manifest=self.manifest, store=self.store, device=extract.device,
                                  progress=request.get("progress"), clock=self._clock)
            index_finished(self.settings.discovery_index, outcome, self.manifest)
            return _DoneJob(build_bundle(outcome, capability))
        return self._enqueue(extract, capability, request.get("priority"), request.get("keep_result_s"), has_audio)

    def _request(self, digest: str, size: int, media_type: str, capability: Capability,
                 options: dict[str, Any]) -> ExtractRequest:
        return ExtractRequest(
            job_id=self.job_id_for(digest, capability, options),
            action=capability.action,
            artifact=ArtifactRef(digest=digest, media_type=media_type, bytes=size, modality=capability.modality),
            options=options,
            device=self._device_for(capability),
            threads=self.settings.threads,
        )

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

    def precheck(self, head: bytes, size: int, digest: str, *, action: str | None, media_type: str | None,
                 options: Mapping[str, Any], claims: CallerClaims | None = None) -> EvidenceBundle | None:
        """The refused bundle :meth:`submit` would give for these bytes (their first 4 KiB) before
        any work, or None when they pass: for a caller that runs the job itself."""
        sniffed = sniff(head)
        try:
            self._check(sniffed, size, action, media_type, dict(options))
        except MediafleetError as exc:
            return _claimed(self._refused(digest, size, sniffed, action, exc.public()),
                            self._claims(claims, media_type, sniffed)).bundle()
        return None

    def job_id_for(self, digest: str, capability: Capability, options: Mapping[str, Any]) -> str:
        """The job id :meth:`submit` gives this artifact, capability and options."""
        return make_job_id(digest, capability.action, capability.extractor_version, dict(options),
                           numerics(capability.action, options, self.settings.threads))

    def claims_for(self, claims: CallerClaims | None, claimed: str | None, sniffed: str | None) -> CallerClaims | None:
        """This call's claims: the caller's digest facts, and its media type against the bytes'."""
        return self._claims(claims, claimed, sniffed)

    @staticmethod
    def _claims(claims: CallerClaims | None, claimed: str | None, sniffed: str | None) -> CallerClaims | None:
        """The caller's claims for this call: its digest facts, and its media type against the bytes'."""
        claimed_type = _base_type(claimed)
        if claimed_type is None:
            return claims
        facts = {"media_type": claimed_type, "media_type_agrees": claimed_type == sniffed}
        return (claims or CallerClaims()).model_copy(update=facts)

    def _refused(self, digest: str, size: int, media_type: str | None, action: str | None,
                 error: PublicError) -> Job:
        modality = None
        if media_type is not None:
            modality = next((c.modality for c in self.manifest.capabilities.values() if media_type in c.media_types), None)
        artifact = BundleArtifact(digest=digest, media_type=media_type, bytes=size, modality=modality)
        job = "mf-" + token("refused", digest, action or "", error.code.value)
        return _DoneJob(refused_bundle(job, action, artifact, error, self._clock()))

    def _enqueue(self, request: ExtractRequest, capability: Capability, priority: int | None,
                 keep_result_s: int | None, has_audio: bool | None = None) -> Job:
        level = _DEFAULT_PRIORITY if priority is None else priority
        if not 0 <= level <= 9:
            raise CapabilityRefused("priority must be 0 (lowest) to 9 (highest)", code=ErrorCode.INVALID_REQUEST)
        keep_s = keep_result_s or self.settings.result_ttl_s
        try:
            part = speech_part(request, capability, self.manifest, has_audio)
        except MediafleetError as exc:  # options that do not fit together, or speech not declared
            return self._refused(request.artifact.digest, request.artifact.bytes, request.artifact.media_type,
                                 request.action, exc.public())
        request, created = self._queue(request, capability, level, keep_s, speech_job=part.job_id if part else None)
        if created and part is not None:
            self._queue_part(part, level, keep_s)
        return _FleetJob(self.app, self.jobs(), capability, request, self.manifest, self.settings.discovery_index)

    def _queue(self, request: ExtractRequest, capability: Capability, level: int, keep_s: int,
               speech_job: str | None = None) -> tuple[ExtractRequest, bool]:
        """Claim the job's record and send it (or hold it); (the request in force, whether new)."""
        from mediafleet.workers.app import send_extract

        jobs = self.jobs()
        device, held = self._route(capability)
        request = request.model_copy(update={"device": device})
        state = JobState.HELD if held else JobState.QUEUED
        token = jobs.claim(request, state=state, held_reason=held, priority=level, keep_s=keep_s,
                           speech_job=speech_job)
        if token is None and (found := jobs.get(request.job_id)) is not None and found.forged \
                and jobs.discard_forged(request.job_id):
            # Its outcome failed the signature check (written by no worker holding the key): run it.
            token = jobs.claim(request, state=state, held_reason=held, priority=level, keep_s=keep_s,
                               speech_job=speech_job)
        if token is None:
            record = jobs.get(request.job_id)
            if record is None:
                return request, False
            if (lost := jobs.unsent(request.job_id, _UNSENT_AFTER_S)) is not None:
                # Recorded but never sent (its dispatcher died in between): this resubmission sends it.
                send_extract(self.app, record.request, capability, lost, record.priority)
            return record.request, False
        self._result_of(request.job_id).forget()
        if not held:
            send_extract(self.app, request, capability, token, level)
            jobs.mark_sent(request.job_id)
        return request, True

    def _queue_part(self, part: ExtractRequest, level: int, keep_s: int) -> None:
        """Queue a job's speech part; one that already finished (from an earlier submission of the
        same job) reports its outcome at once instead of running again."""
        from mediafleet.workers.app import join_parts

        assert part.part_of is not None
        _, created = self._queue(part, self.manifest.capability(part.action), level, keep_s)
        if created:
            return
        record = self.jobs().get(part.job_id)
        if record is not None and record.final and (outcome := record.outcome) is not None:
            if self.jobs().report_part(part.part_of.job_id, "speech", outcome) == 0:
                if (joined := join_parts(self.jobs(), part.part_of.job_id, self.manifest)) is not None:
                    index_finished(self.settings.discovery_index, joined, self.manifest)

    def _result_of(self, job_id: str) -> Any:
        return self.app.AsyncResult(job_id)

    def _route(self, capability: Capability) -> tuple[DeviceClass, str | None]:
        """The first allowed device class with a live worker on the capability's queue.

        With none alive the job is held: recorded, on no queue, with the reason (``status`` shows
        it), until the first worker of an allowed class comes up and queues it for its own class.
        It never runs on a class the manifest forbids.
        """
        alive = {q for w in live_workers(self.jobs().client) for q in w.queues}
        for device in capability.devices:
            if capability.queue(device) in alive:
                return device, None
        allowed = "/".join(d.value for d in capability.devices)
        return capability.devices[0], f"no live worker for {capability.action} on {allowed}"

    def jobs(self) -> JobStore:
        """The fleet's job store. Built on first use, after one plain connection attempt: a broker
        that is not there at all is reported at once; one that goes away later is waited for."""
        if self._jobs is None:
            from mediafleet.jobstore import redis_client

            probe = redis_client(self.settings, retry_s=0)
            try:
                probe.ping()
            finally:
                probe.close()
            self._jobs = JobStore.from_settings(self.settings)
        return self._jobs

    def job(self, job_id: str) -> _FleetJob | None:
        """A handle on a job submitted earlier (by any dispatcher of this fleet)."""
        record = self.jobs().get(job_id)
        if record is None:
            return None
        request = record.request
        return _FleetJob(self.app, self.jobs(), self.manifest.capability(request.action), request, self.manifest,
                         self.settings.discovery_index)

    def cancel(self, job_id: str) -> JobState | None:
        """Cancel a job; returns its state afterwards (None for an unknown job)."""
        job = self.job(job_id)
        return job.cancel() if job is not None else None

    def status(self) -> dict[str, Any]:
        """Queue lengths per capability queue, and live workers by device class."""
        client = self.jobs().client
        queues: dict[str, int] = {}
        for cap in self.manifest.capabilities.values():
            for device in cap.devices:
                name = cap.queue(device)
                queues[name] = sum(client.llen(n) for n in queue_lists(name))
        workers: dict[str, list[str]] = {d.value: [] for d in DeviceClass}
        for worker in live_workers(client):
            workers.setdefault(worker.device, []).append(worker.hostname)
        return {"queues": queues, "workers": workers}


def _base_type(media_type: str | None) -> str | None:
    """``type/subtype`` of a media type, lowercase, without parameters; None when absent."""
    if media_type is None:
        return None
    return media_type.split(";")[0].strip().lower() or None


_PLAIN_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^._+-]{0,63}/[a-z0-9][a-z0-9!#$&^._+-]{0,63}")


def _shown_type(media_type: str) -> str:
    return media_type if _PLAIN_TYPE.fullmatch(media_type) else "the type claimed"


def _claimed(job: Job, claims: CallerClaims | None) -> Job:
    return job if claims is None else _ClaimedJob(job, claims)


def _store_failed(exc: OSError) -> Unavailable:
    """The public error for a blob store that could not take the artifact (a full disk, a
    read-only or vanished volume): retryable, with no path and no library text."""
    import errno

    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "the blob store is full (no space left on its device); free some space and submit again"
    else:
        why = "the blob store could not store the artifact (its volume failed); try again later"
    return Unavailable(why, phase=Phase.DISPATCH)


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
    stream.seek(0)
    return hash_stream(stream)


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
