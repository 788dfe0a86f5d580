"""Video result -> loci: a VideoTimeRange per shot (and per gradual transition), then a FrameRange
per keyframe of that shot, then an AudioRange per transcribed speech segment.

Frame numbers turn 1-based here (``frame_index + 1``), as the callers require; times are already
integer milliseconds on the media timeline, except the transcript's, which are shifted by the
audio stream's ``offset_ms`` onto it. Shots and segments are never empty (the result models refuse
one), so nothing is dropped or clamped.
"""

from __future__ import annotations

from mediafleet.adapters.audio import segment_loci
from mediafleet.adapters.drafts import Bounds, LocusDraft
from mediafleet.contract.addresses import FrameRange, VideoTimeRange
from mediafleet.contract.digests import blob_ref
from mediafleet.contract.video import VideoResult

__all__ = ["MEDIA_TIMELINE", "video_loci"]

MEDIA_TIMELINE = "media_ms"


def video_loci(result: VideoResult, document_id: str) -> list[LocusDraft]:
    """Per shot: its VideoTimeRange, then each of its keyframes as a one-frame FrameRange.

    Shot nodes carry the shot number, its 1-based first/last frame numbers, its ``label`` (how it
    begins: ``start``, ``cut``, or the kind of the transition into it) and the detector's
    ``confidence`` for that boundary. A gradual transition (the combined detector's) is an entry of
    its own between the two shots it joins: a VideoTimeRange from its first frame to the next
    shot's start, its frames as ``start_frame`` and ``end_frame``, ``transition`` (dissolve, fade,
    wipe), ``label`` ``transition:<kind>`` (so it is never taken for a shot), its confidence, and
    no keyframe; the shot before it ends where it starts. Keyframe nodes carry
    the shot, the frame's time, the image's blob ref (``blob:<hex>``), media type, size, pHash,
    sharpness and, for a near-duplicate, the frame number of the keyframe it repeats. Speech
    segments carry their text and confidence, the segment number and the language.
    """
    media = result.media
    time_bounds = Bounds(duration_ms=media.duration_ms)
    frame_bounds = Bounds(frame_count=media.frame_count)
    by_shot: dict[int, list[int]] = {}
    for position, key in enumerate(result.keyframes):
        by_shot.setdefault(key.shot, []).append(position)
    drafts: list[LocusDraft] = []
    for shot in result.shots:
        properties: dict[str, object] = {
            "video_id": document_id,
            "shot": shot.shot,
            "start_frame": shot.first_frame_index + 1,
            "end_frame": shot.last_frame_index + 1,
            "time_unit": "ms",
            "label": shot.label,
            "confidence": shot.confidence,
        }
        if shot.transition is not None:
            properties["transition"] = shot.transition
            properties["label"] = f"transition:{shot.transition}"
        drafts.append(
            LocusDraft(
                address=VideoTimeRange(start_ms=shot.start_ms, end_ms=shot.end_ms),
                bounds=time_bounds,
                properties=properties,
            )
        )
        for position in by_shot.get(shot.shot, ()):
            key = result.keyframes[position]
            props: dict[str, object] = {
                "video_id": document_id,
                "shot": key.shot,
                "keyframe": True,
                "time_ms": key.time_ms,
                "width": key.width,
                "height": key.height,
                "phash": key.phash,
                "sharpness": key.sharpness,
                "frame_numbering": "1-based",
            }
            if key.image is not None:
                props["image_blob_ref"] = blob_ref(key.image)
                props["image_media_type"] = key.image_media_type
            if key.duplicate_of is not None:
                props["near_duplicate_of_frame"] = result.keyframes[key.duplicate_of].frame_index + 1
                props["phash_distance"] = key.phash_distance
            drafts.append(
                LocusDraft(
                    address=FrameRange(start_frame=key.frame_index + 1, end_frame=key.frame_index + 1),
                    bounds=frame_bounds,
                    properties=props,
                )
            )
    transcript, offset = result.speech.transcript, result.speech.offset_ms
    if transcript is not None and offset is not None:
        speech_bounds = Bounds(duration_ms=max(media.duration_ms, offset + transcript.duration_ms))
        drafts.extend(segment_loci(transcript, bounds=speech_bounds, offset_ms=offset,
                                   subject=("video_id", document_id), timeline=MEDIA_TIMELINE))
    return drafts
