"""Speech in a video: the audio track transcribed by the ``transcribe_segments`` extractor, in-job.

The video job calls the audio capability's extractor on the same verified file (its default
options, the video capability's limits), so a caller gets shots, keyframes and transcript from one
request. The audio engine is optional on a video worker: when it is not installed (or its model
cannot be loaded) the speech part says ``unavailable`` and the shots and keyframes still stand;
a track that cannot be transcribed says ``failed`` with its public reason. Only the job's time
limit stops the whole job.

The transcript keeps the audio stream's own timeline; ``offset_ms`` (the stream's start on the
media timeline) is what the loci add to it.
"""

from __future__ import annotations

import logging
from fractions import Fraction
from pathlib import Path

from billiard.exceptions import SoftTimeLimitExceeded

from contract.audio import AudioOptions, AudioResult
from contract.errors import MediafleetError, Unavailable, to_public
from contract.manifest import Limits, default_manifest
from contract.video import VideoSpeech

__all__ = ["AUDIO_ACTION", "transcribe_track"]

AUDIO_ACTION = "transcribe_segments"

log = logging.getLogger("mediafleet.video")


def _offset_ms(audio_start_s: Fraction | None, origin_s: Fraction) -> int:
    start = max(Fraction(0), (audio_start_s or Fraction(0)) - origin_s)
    return int(start * 1000 + Fraction(1, 2))


def transcribe_track(
    path: Path, *, wanted: bool, has_audio: bool, audio_start_s: Fraction | None, origin_s: Fraction, limits: Limits
) -> VideoSpeech:
    """Transcribe the file's audio track, or say why not; never raises for the track itself."""
    if not has_audio:
        return VideoSpeech(status="no_audio_track")
    if not wanted:
        return VideoSpeech(status="not_requested")
    from workers.extractor import load_extractor

    try:
        capability = default_manifest().capabilities.get(AUDIO_ACTION)
        if capability is None:
            raise Unavailable("this fleet version has no audio transcription engine")
        extract = load_extractor(capability)
        transcript = extract(path, AudioOptions(), limits, None, None)
    except SoftTimeLimitExceeded:
        raise
    except Unavailable as exc:
        return VideoSpeech(status="unavailable", error=exc.public())
    except MediafleetError as exc:
        return VideoSpeech(status="failed", error=exc.public())
    except Exception as exc:
        log.warning("transcribing a video's audio track failed: %s", type(exc).__name__, exc_info=True)
        return VideoSpeech(status="failed", error=to_public(exc))
    if not isinstance(transcript, AudioResult):
        return VideoSpeech(status="failed", error=to_public(TypeError("unexpected transcript")))
    return VideoSpeech(status="transcribed", offset_ms=_offset_ms(audio_start_s, origin_s), transcript=transcript)

