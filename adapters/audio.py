"""Audio result -> loci: one AudioRange per transcribed segment."""

from __future__ import annotations

from adapters.drafts import Bounds, LocusDraft
from contract.addresses import AudioRange
from contract.audio import AudioResult

__all__ = ["AUDIO_TIMELINE", "audio_loci"]

AUDIO_TIMELINE = "audio_stream_ms"


def audio_loci(result: AudioResult, document_id: str) -> list[LocusDraft]:
    """One AudioRange per segment, in order, bounded by the decoded recording's duration.

    The result model already guarantees ``end_ms > start_ms``, order and no overlap, so every
    segment maps to a valid locus; nothing is dropped or repaired here. ``document_id`` names the
    recording on each node.
    """
    bounds = Bounds(duration_ms=result.duration_ms)
    return [
        LocusDraft(
            address=AudioRange(start_ms=segment.start_ms, end_ms=segment.end_ms),
            bounds=bounds,
            text=segment.text,
            confidence=segment.confidence,
            properties={
                "audio_id": document_id,
                "segment": index,
                "time_unit": "ms",
                "timeline": AUDIO_TIMELINE,
                "language": result.language,
            },
        )
        for index, segment in enumerate(result.segments, start=1)
    ]
