"""Speech in a video: whether the audio track is to be transcribed, and joining its transcript in.

The video extractor only says what the container shows (:func:`track_speech`): no track, not
requested, or ``pending`` with the track's offset on the media timeline. The transcript itself is
made by the ``transcribe_segments`` extractor: on the fleet as a separate job on the audio queue,
running beside the video job (the ``speech`` part, :class:`SpeechPart`, planned and joined through
:mod:`mediafleet.workers.parts`); in-process by :func:`transcribe_here`. Either
way :func:`attach` joins it into the video result, so a caller gets shots, keyframes and transcript
from one request. A track that cannot be transcribed leaves the shots and keyframes standing: the
speech part says ``unavailable`` or ``failed`` with its public reason.

The transcript keeps the audio stream's own timeline; ``offset_ms`` (the stream's start on the
media timeline) is what the loci add to it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

from billiard.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel

from mediafleet.contract.audio import AudioOptions, AudioResult
from mediafleet.contract.errors import CapabilityRefused, ErrorCode, MediafleetError, PublicError, to_public
from mediafleet.contract.jobs import ExtractRequest, Outcome, PartOf, Span
from mediafleet.contract.manifest import Capability, Manifest, Part
from mediafleet.contract.video import VideoResult, VideoSpeech

__all__ = ["SPEECH", "SPEECH_ACTION", "SpeechPart", "attach", "track_speech", "transcribe_here"]

SPEECH_ACTION = "transcribe_segments"

log = logging.getLogger("mediafleet.video")


def _offset_ms(audio_start_s: Fraction | None, origin_s: Fraction) -> int:
    start = max(Fraction(0), (audio_start_s or Fraction(0)) - origin_s)
    return int(start * 1000 + Fraction(1, 2))


def track_speech(*, wanted: bool, has_audio: bool, audio_start_s: Fraction | None, origin_s: Fraction) -> VideoSpeech:
    """What the container says about speech: no track, not requested, or pending at its offset."""
    if not has_audio:
        return VideoSpeech(status="no_audio_track")
    if not wanted:
        return VideoSpeech(status="not_requested")
    return VideoSpeech(status="pending", offset_ms=_offset_ms(audio_start_s, origin_s))


def transcribe_here(path: Path, capability: Capability) -> AudioResult | PublicError:
    """The track transcribed in this process with ``capability``'s extractor, default options and
    limits; a failure comes back as its public error (only a time limit propagates)."""
    from mediafleet.workers.extractor import load_extractor

    try:
        extract = load_extractor(capability)
        transcript = extract(path, AudioOptions(), capability.limits, None, None)
    except SoftTimeLimitExceeded:
        raise
    except MediafleetError as exc:
        return exc.public()
    except Exception as exc:
        log.warning("transcribing a video's audio track failed: %s", type(exc).__name__, exc_info=True)
        return to_public(exc)
    if not isinstance(transcript, AudioResult):
        return to_public(TypeError("unexpected transcript"))
    return transcript


def attach(result: VideoResult, speech: AudioResult | PublicError, job_id: str | None = None) -> VideoResult:
    """``result`` with its pending speech replaced by the transcript, or by why there is none.

    Pure: the producer gains the speech model's name and digest, and the speech engine.
    """
    pending = result.speech
    if pending.status != "pending":
        return result  # no track, or not requested: nothing was waiting for a transcript
    if isinstance(speech, PublicError):
        status = "unavailable" if speech.code == ErrorCode.ENGINE_UNAVAILABLE else "failed"
        done = VideoSpeech(status=status, error=speech, job_id=job_id)
        return result.model_copy(update={"speech": done})
    done = VideoSpeech(status="transcribed", offset_ms=pending.offset_ms, transcript=speech, job_id=job_id)
    made_by = speech.producer
    producer = result.producer.model_copy(update={
        "models": list(made_by.models),
        "options": {**result.producer.options, "speech_engine": f"{made_by.engine} {made_by.engine_version}",
                    "speech_numerics": {k: made_by.options.get(k) for k in ("device", "compute_type", "threads")}},
    })
    return result.model_copy(update={"speech": done, "producer": producer})


class SpeechPart:
    """The ``speech`` companion of a video job (:mod:`mediafleet.workers.parts`): the video's audio
    track transcribed by the ``transcribe_segments`` capability, on the audio queue."""

    option = "speech"
    reverify = True  # the transcript's loci were never checked as part of the video's

    def probe(self, source: Path | BinaryIO) -> bool | None:
        """Whether the container shows an audio track (a silent video gets no speech part)."""
        from mediafleet.workers.video.probe import has_audio_track

        return has_audio_track(source)

    def plan(self, request: ExtractRequest, name: str, part: Part, capability: Capability, manifest: Manifest,
             fact: bool | None) -> tuple[ExtractRequest, dict[str, ExtractRequest]]:
        """The speech job beside the video job, when speech is on and declared and the header does
        not show the video silent. Its id is derived from the video job's, so a resubmission finds
        the same part."""
        from mediafleet.adapters.ids import part_job_id
        from mediafleet.workers.parts import options_for

        if not getattr(options_for(request, capability, manifest), self.option, False) or fact is False:
            return request, {}
        assert part.action is not None
        audio = manifest.capability(part.action)
        speech = ExtractRequest(
            job_id=part_job_id(request.artifact.digest, audio.action, audio.extractor_version, request.job_id),
            action=audio.action,
            artifact=request.artifact,
            device=audio.devices[0],
            part_of=PartOf(job_id=request.job_id, action=request.action, part=name),
            threads=request.threads,
            speech_batch=request.speech_batch,
        )
        return request, {name: speech}

    def narrow(self, options: BaseModel, span: Span) -> BaseModel:
        raise CapabilityRefused("a video's speech is not read in ranges")

    def inline(self, result: BaseModel, path: Path, part: Part | None, manifest: Manifest) -> BaseModel:
        """In-process: a pending transcript made here, with the part's capability."""
        if isinstance(result, VideoResult) and result.speech.status == "pending" and part is not None \
                and part.action is not None:
            return attach(result, transcribe_here(path, manifest.capability(part.action)))
        return result

    def join(self, outcome: Outcome, reported: Mapping[str, Outcome | None], manifest: Manifest) -> Outcome:
        """The video part's outcome with the speech part's transcript, or why there is none
        (``failed``/``unavailable`` with its public reason; ``worker_lost`` when it never reported)."""
        if not isinstance(outcome.result, VideoResult):
            return outcome
        speech = next(iter(reported.values()), None)
        if speech is None:
            speech_or_error: AudioResult | PublicError = PublicError(
                code=ErrorCode.WORKER_LOST, message="the speech part did not report")
        elif speech.status == "ok" and isinstance(speech.result, AudioResult):
            speech_or_error = speech.result
        else:
            speech_or_error = speech.error or PublicError(code=ErrorCode.INTERNAL_ERROR,
                                                          message="the speech part gave no transcript")
        checks = dict(outcome.checks)
        update: dict[str, object] = {"checks": checks,
                                     "result": attach(outcome.result, speech_or_error,
                                                      speech.job_id if speech is not None else None)}
        if speech is not None:
            if speech.status == "ok":
                checks["digest_recomputed"] = checks.get("digest_recomputed", False) and speech.checks.get(
                    "digest_recomputed", False)
            update["started_at"] = min(outcome.started_at, speech.started_at)
            update["ended_at"] = max(outcome.ended_at, speech.ended_at)
        return outcome.model_copy(update=update)

    def decides(self, outcome: Outcome) -> bool:
        return False  # a failed transcript marks the speech; the shots and keyframes stand


SPEECH = SpeechPart()
