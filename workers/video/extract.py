"""``extract_keyframes``: a video's shots and keyframes in one decoding pass.

Each decoded frame is reduced once to what the shot detector reads (mediafleet's combined detector
by default: signals of the small luma and chroma planes; PySceneDetect's: its exact analysis
frame), measured for sharpness on that small grey frame, and held
back only as long as the detector may still place a boundary before it (its ``settled`` mark: for
PySceneDetect its ``event_buffer_length``; for the combined detector a few frames, or an open
transition candidate's); then it joins its shot's keyframe picker (a transition has none). When a shot
closes, its keyframe is converted at full size, turned upright, hashed and stored; nothing is
decoded twice and nothing seeks.

Threads: the worker's engine configuration (``mediafleet.workers.engines``, set once per process) gives the
thread budget: FFmpeg's decoder threads (OpenCV's pool stays at one thread). With a budget over
one, decoding and the frame's reduction with its sharpness run in the reader's two helper threads (see
:class:`FrameReader`), detection and keyframes in the calling thread; with one, all of it runs in
the calling thread. The extractor never reads the environment.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from importlib import metadata
from pathlib import Path
from typing import Any

import av
import cv2

from mediafleet.contract.common import Producer
from mediafleet.contract.digests import hash_bytes
from mediafleet.contract.errors import InternalError
from mediafleet.contract.manifest import Limits
from mediafleet.contract.video import (
    Rational,
    VideoKeyframe,
    VideoMedia,
    VideoOptions,
    VideoResult,
    VideoShot,
)
from mediafleet.workers.engines import engine_config
from mediafleet.workers.sink import BlobSink
from mediafleet.modalities.spec import ProgressFn
from mediafleet.workers.video.decode import FrameReader
from mediafleet.workers.video.keyframes import Candidate, KeyframePicker, encode_image, upright
from mediafleet.workers.video.phash import near_duplicates, phash, phash_hex
from mediafleet.workers.video.probe import Probe, open_video
from mediafleet.workers.video.shot_detector import Boundary
from mediafleet.workers.video.shots import AnalysisFrames, Segmenter, build_segmenter
from mediafleet.workers.video.speech import track_speech
from mediafleet.modalities.video import SPEC

__all__ = ["extract_keyframes"]

_PROGRESS_EVERY = 64  # frames

# OpenCV's pool (process-wide) is kept at one thread: its work here is on small analysis frames and
# one full-size keyframe a shot, where handing stripes to pool threads costs more than it saves
# (measured in docs/shots.md), and the budget's other threads are the decoder's.
_CV2_THREADS = 1
_cv2_threads: int | None = None


def _use_threads() -> None:
    """Set OpenCV's pool once per process."""
    global _cv2_threads
    if _cv2_threads != _CV2_THREADS:
        cv2.setNumThreads(_CV2_THREADS)
        _cv2_threads = _CV2_THREADS


def _ms(seconds: Fraction) -> int:
    """Nearest millisecond, halves up (exact: no float rounding)."""
    return math.floor(seconds * 1000 + Fraction(1, 2))


@dataclass
class _Shot:
    first: int
    first_pts: int
    picker: KeyframePicker | None  # released when the shot closes; None for a transition (no keyframe)
    last: int = -1
    transition: str | None = None  # the kind, for a gradual transition
    label: str = "start"  # how it begins: start, cut, or the transition's kind
    confidence: float = 1.0  # the detector's, for the boundary that begins it


@dataclass(frozen=True)
class _Key:
    index: int
    pts: int
    sharpness: float
    image: str | None
    media_type: str | None
    width: int
    height: int
    phash: int


class _Shots:
    """Frames arrive here in order once no cut can still land before them."""

    def __init__(self, reader: FrameReader, analysis: AnalysisFrames, options: VideoOptions, sink: BlobSink | None):
        self.reader = reader
        self.analysis = analysis
        self.options = options
        self.sink = sink
        self.cuts: deque[Boundary] = deque()
        self.closed: list[_Shot] = []
        self.keys: list[_Key | None] = []  # per closed segment: its keyframe (None: a transition)
        self.current: _Shot | None = None
        self.assigned = 0  # highest frame index handed to a shot (frame 0 never starts a cut)

    def cut(self, boundary: Boundary) -> None:
        """A segment (shot or transition) starts at ``boundary.first``."""
        if self.cuts and boundary.first == self.cuts[-1].first:
            return  # upstream keeps each cut once
        if boundary.first <= self.assigned or (self.cuts and boundary.first < self.cuts[-1].first):
            # Frames are assigned only once the detector has settled them; this would be a detector bug.
            raise InternalError("the shot detector reported a cut out of order")
        self.cuts.append(boundary)

    def add(self, index: int, pts: int, score: float, frame: Any) -> None:
        if self.current is None or (self.cuts and self.cuts[0].first == index):
            boundary = self.cuts.popleft() if self.cuts and self.cuts[0].first == index else None
            after = self.current.transition if self.current is not None else None
            self._close()
            if boundary is None:
                self.current = _Shot(index, pts, KeyframePicker(index))
            elif boundary.kind == "transition":
                self.current = _Shot(index, pts, None, transition=boundary.transition, label=str(boundary.transition),
                                     confidence=boundary.confidence)
            else:
                self.current = _Shot(index, pts, KeyframePicker(index), label=after or "cut",
                                     confidence=boundary.confidence)
        self.current.last = self.assigned = index
        if self.current.picker is not None:
            self.current.picker.add(Candidate(index, pts, score, frame))

    def finish(self) -> None:
        self._close()

    def _close(self) -> None:
        shot = self.current
        if shot is None:
            return
        self.current = None
        self.closed.append(shot)
        if shot.picker is None:
            self.keys.append(None)  # a transition: no keyframe
            return
        key = shot.picker.pick(shot.last)
        shot.picker = None
        self.keys.append(self._keyframe(key))

    def _keyframe(self, key: Candidate) -> _Key:
        image = upright(self.analysis.bgr(key.frame), self.reader.rotation)
        digest = media_type = None
        if self.sink is not None:
            data, media_type = encode_image(image, self.options.keyframe_format)
            digest = self.sink.put(data)
            if digest != hash_bytes(data):
                raise InternalError("the blob sink returned a digest that does not match the image")
        return _Key(key.index, key.pts, key.sharpness, digest, media_type,
                    image.shape[1], image.shape[0], phash(image))


def _frame_rate(probe: Probe, reader: FrameReader) -> Fraction:
    if probe.average_rate is not None:
        return probe.average_rate
    assert reader.first_pts is not None and reader.last_pts is not None
    if reader.count > 1 and reader.last_pts > reader.first_pts:
        return (reader.count - 1) / ((reader.last_pts - reader.first_pts) * probe.time_base)
    if probe.base_rate is not None:
        return probe.base_rate
    return 1 / ((reader.end_pts() - reader.last_pts) * probe.time_base)


def _decoder() -> str:
    codec = ".".join(str(v) for v in av.library_versions["libavcodec"])
    return f"av {av.__version__} (libavcodec {codec})"


def _media(probe: Probe, reader: FrameReader, frame_rate: Fraction) -> VideoMedia:
    assert reader.first_pts is not None
    turned = reader.rotation in (90, 270)
    return VideoMedia(
        container=probe.container_name,
        codec=probe.codec,
        decoder=_decoder(),
        width=probe.width,
        height=probe.height,
        rotation=reader.rotation,  # type: ignore[arg-type]
        display_width=probe.height if turned else probe.width,
        display_height=probe.width if turned else probe.height,
        time_base=Rational.of(probe.time_base),
        frame_rate=Rational.of(frame_rate),
        base_frame_rate=Rational.of(probe.base_rate) if probe.base_rate is not None else None,
        variable_frame_rate=reader.variable_rate,
        frame_count=reader.count,
        declared_frame_count=probe.declared_frames,
        start_ms=_ms(reader.time_s(reader.first_pts)),
        duration_ms=_ms(reader.time_s(reader.end_pts())),
        repaired_timestamps=reader.repaired,
        has_audio=probe.has_audio,
    )


def _assemble(
    shots: _Shots, reader: FrameReader, media: VideoMedia, distance: int
) -> tuple[list[VideoShot], list[VideoKeyframe]]:
    """Shots and keyframes in the contract's units, never a shot of 0 ms.

    Merge rule (frames under 1 ms apart only): shots whose starts round to the same millisecond
    become one shot, and a last shot that starts at the video's rounded end joins the one before
    (a transition merged with a shot becomes part of the shot). Every keyframe is kept, under the
    shot it was merged into.
    """
    spans: list[list[Any]] = []  # [first_index, last_index, start_ms, transition kind or None, label, confidence]
    span_of_shot: list[int] = []  # closed segment position -> span position
    for shot in shots.closed:
        start_ms = _ms(reader.time_s(shot.first_pts))
        if spans and spans[-1][2] == start_ms:
            spans[-1][1] = shot.last
            spans[-1][3] = spans[-1][3] if shot.transition is not None else None  # a shot absorbs a transition
        else:
            spans.append([shot.first, shot.last, start_ms, shot.transition, shot.label, shot.confidence])
        span_of_shot.append(len(spans) - 1)
    if len(spans) > 1 and spans[-1][2] >= media.duration_ms:
        spans[-2][1] = spans[-1][1]
        if spans[-1][3] is None:
            spans[-2][3] = None
        spans.pop()
        span_of_shot = [min(p, len(spans) - 1) for p in span_of_shot]
    out_shots = [
        VideoShot(
            shot=number,
            kind="shot" if transition is None else "transition",
            transition=transition,
            label="start" if number == 1 else label,
            confidence=1.0 if number == 1 else confidence,
            start_ms=start_ms,
            end_ms=spans[number][2] if number < len(spans) else media.duration_ms,
            first_frame_index=first,
            last_frame_index=last,
        )
        for number, (first, last, start_ms, transition, label, confidence) in enumerate(spans, start=1)
    ]
    keyed = [(position, k) for position, k in enumerate(shots.keys) if k is not None]
    duplicates = near_duplicates([k.phash for _, k in keyed], distance)
    keyframes = [
        VideoKeyframe(
            shot=span_of_shot[position] + 1,
            frame_index=k.index,
            time_ms=_ms(reader.time_s(k.pts)),
            image=k.image,
            image_media_type=k.media_type,  # type: ignore[arg-type]
            width=k.width,
            height=k.height,
            phash=phash_hex(k.phash),
            sharpness=k.sharpness,
            duplicate_of=dup[0] if dup else None,
            phash_distance=dup[1] if dup else None,
        )
        for (position, k), dup in zip(keyed, duplicates, strict=True)
    ]
    return out_shots, keyframes


def producer(options: VideoOptions, spec_facts: dict[str, Any], detector: Segmenter, threads: int) -> Producer:
    """What made the shots and keyframes; a transcript joined in later adds its model and engine."""
    return Producer(
        engine="scenedetect",
        engine_version=metadata.version("scenedetect"),
        extractor=SPEC.extractor_name,
        extractor_version=SPEC.extractor_version,
        models=[],
        options={
            **options.model_dump(mode="json"),
            **spec_facts,
            "analysis_width": detector.size[0],
            "analysis_height": detector.size[1],
            "downscale_factor": detector.factor,
            "keyframe_rule": "sharpest of the n/8-n/4 frame bucket holding the shot's middle frame",
            "decoder": _decoder(),
            "threads": threads,
            "speech_engine": None,
        },
    )


def extract_keyframes(
    path: Path,
    options: VideoOptions,
    limits: Limits,
    progress: ProgressFn | None = None,
    sink: BlobSink | None = None,
) -> VideoResult:
    """Find a video's shots and pick, hash and store a keyframe for each, in one decoding pass.

    Args:
        path: a local, digest-verified video file.
        options: detector and threshold, keyframe image format, near-duplicate distance.
        limits: the manifest's limits (``max_pixels`` per frame, ``max_duration_s``).
        progress: called with (frames decoded, frames the container declares or None).
        sink: where keyframe images go (the blob store); without one, images are not encoded and
            keyframes carry no image digest.

    Returns:
        The media facts, the contiguous shots covering every frame, one keyframe per shot, and
        whether the audio track awaits a transcript (``pending``; :mod:`mediafleet.workers.video.speech`
        joins it in) or why it does not.

    Raises:
        InputRejected: empty, corrupt or truncated video, no video stream, unsupported codec.
        LimitExceeded: frames over ``max_pixels`` or a video over ``max_duration_s``.
    """
    threads = max(1, engine_config().threads)
    _use_threads()
    with open_video(path, limits) as probe, FrameReader(probe, threads, limits) as reader:
        analysis = AnalysisFrames(probe.width, probe.height)
        rate = probe.average_rate or probe.base_rate or Fraction(25)
        detector, spec = build_segmenter(options, probe.width, probe.height, rate)
        shots = _Shots(reader, analysis, options, sink)
        pending: deque[tuple[int, int, float, Any]] = deque()
        total = probe.declared_frames

        push, take, cut, add = detector.push, detector.take, shots.cut, shots.add  # bound once: per frame
        for index, pts, frame, (sharp, prepared) in reader.frames(prepare=detector.prepare):
            push(index, prepared)
            for boundary in take():
                cut(boundary)
            pending.append((index, pts, sharp, frame))
            while pending and pending[0][0] < detector.settled:
                add(*pending.popleft())
            if progress is not None and index % _PROGRESS_EVERY == 0:
                progress(index, total)
        detector.finish()
        for boundary in detector.take():
            shots.cut(boundary)
        while pending:
            shots.add(*pending.popleft())
        shots.finish()
        if progress is not None:
            progress(reader.count, reader.count)
        media = _media(probe, reader, _frame_rate(probe, reader))
        out_shots, keyframes = _assemble(shots, reader, media, options.duplicate_distance)
    speech = track_speech(wanted=options.speech, has_audio=probe.has_audio,
                          audio_start_s=probe.audio_start_s, origin_s=probe.origin_s)
    return VideoResult(
        media=media,
        shots=out_shots,
        keyframes=keyframes,
        speech=speech,
        producer=producer(options, spec.provenance(), detector, threads),
    )
