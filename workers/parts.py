"""A job's parts: the speech job a video job fans out on the fleet, and joining the parts again.

A video request with speech on is one job for its caller. On the fleet it runs as two: the video
part (shots and keyframes) on the video queue under the caller's job id, and a speech part
(``transcribe_segments`` on the same artifact) on the audio queue, so the transcript is made in
parallel by whichever audio worker (GPU first, as the manifest orders) is free, and video workers
need no Whisper model. Each part reports its outcome into the caller's job record; whoever reports
last joins them (:func:`join`) into the one outcome the caller reads. In-process, the same
transcript is made in the same run (:func:`join_inline`).

The speech part is authorised by the video capability (fail closed: the manifest in force must
declare AudioRange for the video action and list the audio action), and runs with the audio
capability's engine, limits, time limits and device classes.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ValidationError

from mediafleet.adapters.ids import job_id as make_job_id
from mediafleet.adapters.loci import to_loci
from mediafleet.adapters.verify import loci_valid
from mediafleet.contract.addresses import AddressKind
from mediafleet.contract.audio import AudioResult
from mediafleet.contract.errors import CapabilityRefused, ErrorCode, IntegrityError, PublicError
from mediafleet.contract.jobs import ExtractRequest, Outcome, PartOf
from mediafleet.contract.manifest import Capability, Manifest
from mediafleet.contract.results import OPTIONS_BY_MODALITY
from mediafleet.contract.video import VideoResult
from mediafleet.workers.video.speech import SPEECH_ACTION, attach, transcribe_here

__all__ = ["SPEECH_ACTION", "join", "join_inline", "options_for", "part_capabilities", "speech_part",
           "verify_result", "within_manifest"]


def within_manifest(options: BaseModel, request: ExtractRequest, capability: Capability,
                    manifest: Manifest) -> BaseModel:
    """Turn off what an option would add that the manifest in force does not declare.

    A video's speech transcript is AudioRange evidence made by the ``transcribe_segments`` engine:
    when the operator's manifest drops either, speech is off by default and refused when asked for.
    """
    if getattr(options, "speech", False):
        allowed = AddressKind.AUDIO_RANGE in capability.produces and SPEECH_ACTION in manifest.capabilities
        if not allowed:
            if request.options.get("speech") is True:
                raise CapabilityRefused("speech is not declared for this action by the manifest in force")
            options = options.model_copy(update={"speech": False})
    return options


def options_for(request: ExtractRequest, capability: Capability, manifest: Manifest) -> BaseModel:
    """The request's options as the capability's model, narrowed to what the manifest declares.

    Raises:
        CapabilityRefused: ``invalid_request`` for options that do not fit together (the message
            is the model's rule, never the values sent).
    """
    try:
        options = OPTIONS_BY_MODALITY[capability.modality.value].model_validate(request.options)
    except ValidationError as exc:
        rules = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors(include_input=False))
        raise CapabilityRefused(f"the options do not fit together: {rules}", code=ErrorCode.INVALID_REQUEST) from None
    return within_manifest(options, request, capability, manifest)


def speech_part(request: ExtractRequest, capability: Capability, manifest: Manifest,
                has_audio: bool | None = None) -> ExtractRequest | None:
    """The speech job a fleet job fans out, or None (not a video, speech off or not declared, or
    ``has_audio`` False: the container's header shows no audio track).

    Its id is derived from the caller's job id, so a resubmission finds the same part.
    """
    if not getattr(options_for(request, capability, manifest), "speech", False) or has_audio is False:
        return None
    audio = manifest.capability(SPEECH_ACTION)
    return ExtractRequest(
        job_id=make_job_id(request.artifact.digest, SPEECH_ACTION, audio.extractor_version,
                           {"part_of": request.job_id}),
        action=SPEECH_ACTION,
        artifact=request.artifact,
        device=audio.devices[0],
        part_of=PartOf(job_id=request.job_id, action=request.action),
        threads=request.threads,
    )


def part_capabilities(request: ExtractRequest, manifest: Manifest) -> tuple[Capability, Capability]:
    """(the capability that runs the request, the one that admits its artifact).

    For a plain job both are the request's own. For a part, the parent's capability must declare
    what the part produces and admit the artifact (checked by the caller with it); the part's own
    capability sets the engine, limits and device classes.

    Raises:
        CapabilityRefused: the manifest in force does not authorise this part.
    """
    capability = manifest.capability(request.action)
    if request.part_of is None:
        return capability, capability
    parent = manifest.capability(request.part_of.action)
    if request.action != SPEECH_ACTION or AddressKind.AUDIO_RANGE not in parent.produces:
        raise CapabilityRefused(f"{request.part_of.action} does not declare a {request.action} part")
    return capability, parent


def verify_result(result: BaseModel, digest: str, capability: Capability, checks: dict[str, bool]) -> None:
    """Map ``result`` to loci and check them: declared kinds only, every locus inside the artifact.

    Raises:
        CapabilityRefused: a locus kind the capability does not declare.
        IntegrityError: a locus outside the artifact.
    """
    drafts = to_loci(result, digest)
    capability.check_produces({d.address.kind for d in drafts})
    checks["locus_kinds_declared"] = True
    if not loci_valid(drafts):
        raise IntegrityError("the extractor produced a locus outside the artifact", code=ErrorCode.INVALID_LOCUS)
    checks["loci_valid"] = True


def join_inline(result: BaseModel, path: Path, manifest: Manifest) -> BaseModel:
    """In-process: make a pending transcript here, with the manifest's audio capability."""
    if isinstance(result, VideoResult) and result.speech.status == "pending":
        return attach(result, transcribe_here(path, manifest.capability(SPEECH_ACTION)))
    return result


def _public(outcome: Outcome) -> AudioResult | PublicError:
    if outcome.status == "ok" and isinstance(outcome.result, AudioResult):
        return outcome.result
    return outcome.error or PublicError(code=ErrorCode.INTERNAL_ERROR, message="the speech part gave no transcript")


def join(video: Outcome, speech: Outcome | None, manifest: Manifest) -> Outcome:
    """The caller's outcome from its parts: the video part's, with the speech part's transcript.

    A failed video part is the job's failure; a failed speech part only marks the speech
    (``failed``/``unavailable`` with its public reason). The joined result is checked again like
    any extractor's (declared kinds, every locus inside the artifact).
    """
    if video.status != "ok" or not isinstance(video.result, VideoResult):
        return video
    if speech is None:
        speech_or_error: AudioResult | PublicError = PublicError(
            code=ErrorCode.WORKER_LOST, message="the speech part did not report")
    else:
        speech_or_error = _public(speech)
    checks = dict(video.checks)
    if speech is not None and speech.status == "ok":
        checks["digest_recomputed"] = checks.get("digest_recomputed", False) and speech.checks.get(
            "digest_recomputed", False)
    result = attach(video.result, speech_or_error, speech.job_id if speech is not None else None)
    update: dict[str, object] = {"result": result, "checks": checks}
    if speech is not None:
        update["started_at"] = min(video.started_at, speech.started_at)
        update["ended_at"] = max(video.ended_at, speech.ended_at)
    try:
        verify_result(result, video.artifact.digest, manifest.capability(video.action), checks)
    except (CapabilityRefused, IntegrityError) as exc:
        update.update(status="failed", result=None, error=exc.public())
    return video.model_copy(update=update)
