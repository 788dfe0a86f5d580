"""Audio result -> loci: one AudioRange per transcribed segment (its speaker, when labelled, a property)."""

from __future__ import annotations

from mediafleet.adapters.drafts import Bounds, LocusDraft
from mediafleet.contract.addresses import AudioRange
from mediafleet.contract.audio import AudioResult

__all__ = ["AUDIO_TIMELINE", "audio_loci", "segment_loci"]

AUDIO_TIMELINE = "audio_stream_ms"


def segment_loci(
    transcript: AudioResult, *, bounds: Bounds, offset_ms: int, subject: tuple[str, str], timeline: str
) -> list[LocusDraft]:
    """One AudioRange per segment of ``transcript``, shifted by ``offset_ms`` onto ``timeline``.

    ``subject`` is the node property naming what was heard (``("audio_id", <id>)`` for a
    recording, ``("video_id", <id>)`` for a video's soundtrack). The result model already
    guarantees ``end_ms > start_ms``, order and no overlap, so every segment maps to a valid locus;
    nothing is dropped or repaired here.
    """
    key, value = subject
    return [
        LocusDraft(
            address=AudioRange(start_ms=offset_ms + segment.start_ms, end_ms=offset_ms + segment.end_ms),
            bounds=bounds,
            text=segment.text,
            confidence=segment.confidence,
            properties={
                key: value,
                "segment": index,
                "time_unit": "ms",
                "timeline": timeline,
                "language": transcript.language,
                **({"speaker": segment.speaker, "speaker_count": transcript.speaker_count}
                   if segment.speaker is not None else {}),
            },
        )
        for index, segment in enumerate(transcript.segments, start=1)
    ]


def audio_loci(result: AudioResult, document_id: str) -> list[LocusDraft]:
    """One AudioRange per segment, in order, bounded by the decoded recording's duration."""
    return segment_loci(result, bounds=Bounds(duration_ms=result.duration_ms), offset_ms=0,
                        subject=("audio_id", document_id), timeline=AUDIO_TIMELINE)
