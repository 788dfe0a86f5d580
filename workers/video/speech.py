"""Speech in a video: whether the audio track is to be transcribed, and joining its transcript in.

The video extractor only says what the container shows (:func:`track_speech`): no track, not
requested, or ``pending`` with the track's offset on the media timeline. The transcript itself is
made by the ``transcribe_segments`` extractor: on the fleet as a separate job on the audio queue,
running beside the video job (:mod:`mediafleet.workers.parts`); in-process by :func:`transcribe_here`. Either
way :func:`attach` joins it into the video result, so a caller gets shots, keyframes and transcript
from one request. A track that cannot be transcribed leaves the shots and keyframes standing: the
speech part says ``unavailable`` or ``failed`` with its public reason.

The transcript keeps the audio stream's own timeline; ``offset_ms`` (the stream's start on the
media timeline) is what the loci add to it.
"""

from __future__ import annotations

import logging
from fractions import Fraction
from pathlib import Path

from billiard.exceptions import SoftTimeLimitExceeded

from mediafleet.contract.audio import AudioOptions, AudioResult
from mediafleet.contract.errors import ErrorCode, MediafleetError, PublicError, to_public
from mediafleet.contract.manifest import Capability
from mediafleet.contract.video import VideoResult, VideoSpeech

__all__ = ["SPEECH_ACTION", "attach", "track_speech", "transcribe_here"]

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
