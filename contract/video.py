"""Video shots and keyframes: options and results (``extract_keyframes``).

Units and numbering, everywhere in this module:

* Times are integer milliseconds on the *media timeline*: 0 is the start of the file as the
  container presents it (the earliest stream start; pts 0 when a stream starts before that, as
  codec priming does), so a video stream that starts after its audio has its first shot at
  ``media.start_ms > 0`` and its times agree with the file's audio. Each time comes
  from the frame's presentation timestamp (``pts * time_base``, exact), never from a frame index
  times a nominal rate, and is rounded to the nearest millisecond (halves up).
* ``*_index`` fields are 0-based positions of decoded frames in presentation order (what
  PySceneDetect calls a frame number; cut lists are in this numbering). The loci the fleet emits
  use the callers' 1-based, inclusive ``frame_range`` (index + 1).

The models check the invariants, so an inconsistent result cannot be built: shots are contiguous
in frames and in time, cover every decoded frame, and are never empty; every keyframe lies inside
its shot; a near-duplicate points back to an earlier keyframe. A gradual transition found by the
combined detector is an entry of ``shots`` itself (``kind`` "transition", with its frames and
times): the shot before it ends where it starts, the next starts after it, and it has no keyframe.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated, Literal

from pydantic import Field, model_validator

from mediafleet.contract.audio import AudioResult
from mediafleet.contract.common import Digest, Producer, Strict
from mediafleet.contract.errors import PublicError

__all__ = ["Rational", "VideoKeyframe", "VideoMedia", "VideoOptions", "VideoResult", "VideoShot", "VideoSpeech"]

Ms = Annotated[int, Field(strict=True, ge=0)]
Index = Annotated[int, Field(strict=True, ge=0)]
Positive = Annotated[int, Field(strict=True, gt=0)]


class VideoOptions(Strict):
    """Options of ``extract_keyframes``; the manifest says which values a request may use.

    A threshold belongs to one detector: giving the other detector's threshold is refused.
    """

    detector: Literal["combined", "adaptive", "content"] = Field(
        "combined",
        description="combined: mediafleet's detector (frame-exact hard cuts, also between near-identical "
        "pictures, and gradual transitions reported as their own entries; content, histogram, perceptual hash "
        "and edge signals of the one decoding pass); adaptive: PySceneDetect's AdaptiveDetector (rolling-average "
        "ratio); content: PySceneDetect's ContentDetector (fixed threshold on the HSV change between frames)",
    )
    adaptive_threshold: float | None = Field(
        None, allow_inf_nan=False, description="AdaptiveDetector's ratio threshold; None is upstream's 3.0"
    )
    content_threshold: float | None = Field(
        None, allow_inf_nan=False, description="ContentDetector's score threshold (0-255 scale); None is upstream's 27.0"
    )
    keyframe_format: Literal["jpeg", "png"] = Field(
        "jpeg", description="how keyframe images are stored: JPEG quality 90, or lossless PNG (~10x slower to encode)"
    )
    duplicate_distance: Annotated[int, Field(strict=True, ge=0, le=64)] = Field(
        6, description="keyframes whose 64-bit pHashes differ in at most this many bits are marked near-duplicates"
    )
    speech: bool = Field(
        True,
        description="also transcribe the audio track, when there is one, with the transcribe_segments engine "
        "(its default options): on the fleet as a parallel job on the audio queue, joined into this job's result",
    )

    @model_validator(mode="after")
    def _threshold_matches_detector(self) -> VideoOptions:
        if self.detector == "combined" and (self.content_threshold is not None or self.adaptive_threshold is not None):
            raise ValueError("thresholds apply to the adaptive and content detectors only")
        if self.detector == "adaptive" and self.content_threshold is not None:
            raise ValueError("content_threshold applies to the content detector only")
        if self.detector == "content" and self.adaptive_threshold is not None:
            raise ValueError("adaptive_threshold applies to the adaptive detector only")
        return self


class Rational(Strict):
    """An exact rational number (frame rates, time bases): ``num / den``."""

    num: Positive
    den: Positive

    @classmethod
    def of(cls, value: Fraction) -> Rational:
        return cls(num=value.numerator, den=value.denominator)

    def fraction(self) -> Fraction:
        return Fraction(self.num, self.den)


class VideoMedia(Strict):
    """What the container declared and what decoding found, for the one video stream analysed."""

    container: str = Field(description="FFmpeg's demuxer name, e.g. 'mov,mp4,m4a,3gp,3g2,mj2'")
    codec: str = Field(description="FFmpeg's decoder name, e.g. 'h264'")
    decoder: str = Field(description="the decoding library and versions, e.g. 'av 18.1.0 (libavcodec 62.28.102)'")
    width: Positive = Field(description="coded frame width in pixels, before rotation")
    height: Positive = Field(description="coded frame height in pixels, before rotation")
    rotation: Literal[0, 90, 180, 270] = Field(
        description="degrees clockwise the frames are turned for display (the display matrix, as ffmpeg's "
        "autorotate applies it)"
    )
    display_width: Positive = Field(description="width once rotated for display (keyframe images are stored upright)")
    display_height: Positive
    time_base: Rational = Field(description="seconds per pts tick")
    frame_rate: Rational = Field(
        description="the container's average frame rate, exact (for VFR, an average); where it declares none, "
        "(frames - 1) / (last pts - first pts)"
    )
    base_frame_rate: Rational | None = Field(description="the lowest rate all timestamps fit (FFmpeg's r_frame_rate)")
    variable_frame_rate: bool = Field(description="the decoded frames' pts steps differ by more than one tick")
    frame_count: Positive = Field(description="frames decoded (every one was analysed)")
    declared_frame_count: Annotated[int, Field(strict=True, gt=0)] | None = Field(
        description="the count the container's index declares, when it does"
    )
    start_ms: Ms = Field(description="presentation time of the first frame on the media timeline (> 0: a late start)")
    duration_ms: Positive = Field(
        description="end of the last frame on the media timeline (its pts plus its duration); every shot ends by then"
    )
    repaired_timestamps: Ms = Field(
        description="frames with no pts, or a pts not after the previous frame's, timed from their neighbour instead"
    )
    has_audio: bool = Field(description="the file also holds an audio stream")


class VideoShot(Strict):
    """One entry of the video's timeline: a shot, or a gradual transition between two shots (the
    combined detector's); each is the callers' ``shots`` entry and one VideoTimeRange locus.

    Entries tile the video: a shot ends where the transition after it starts, and the next shot
    starts after the transition's last frame; a transition's frames are its own (no keyframe).
    """

    shot: Positive = Field(description="1-based entry number (transitions are numbered with the shots)")
    kind: Literal["shot", "transition"] = Field("shot", description="a shot, or a gradual transition")
    transition: Literal["dissolve", "fade", "wipe"] | None = Field(
        None, description="for a transition: dissolve (a blend of the two shots), fade (to or from a near-uniform "
        "frame, or through one) or wipe (each pixel switches from one shot to the other)"
    )
    label: Literal["start", "cut", "dissolve", "fade", "wipe"] = Field(
        description="how the entry begins: start (the first), cut (a hard cut), or the gradual transition into "
        "it (a transition entry: its own kind; the shot after one: that transition's kind)"
    )
    confidence: float = Field(
        ge=0.0, le=1.0, allow_inf_nan=False,
        description="the detector's margin over the thresholds that decided the boundary: 0.5 where a measurement "
        "just met its threshold, 1 - threshold / (2 x measured) above it, at most 0.99; the start is 1.0 (nothing "
        "was detected: the video begins there)",
    )
    start_ms: Ms = Field(description="presentation time of the shot's first frame (inclusive)")
    end_ms: Ms = Field(description="presentation time of the next shot's first frame, or the video's end (exclusive)")
    first_frame_index: Index = Field(description="0-based index of the shot's first frame")
    last_frame_index: Index = Field(description="0-based index of the shot's last frame (inclusive)")

    @model_validator(mode="after")
    def _not_empty(self) -> VideoShot:
        if not self.end_ms > self.start_ms:
            raise ValueError("a shot's end_ms must be > its start_ms")
        if self.last_frame_index < self.first_frame_index:
            raise ValueError("a shot's last frame precedes its first")
        if (self.kind == "transition") != (self.transition is not None):
            raise ValueError("a transition, and only a transition, says which kind it is")
        if self.transition is not None and self.label != self.transition:
            raise ValueError("a transition's label is its kind")
        if (self.shot == 1) != (self.label == "start"):
            raise ValueError("the first entry, and only the first, is labelled start")
        return self


class VideoKeyframe(Strict):
    """A representative frame of a shot: the callers' ``keyframes`` entry and one FrameRange locus."""

    shot: Positive = Field(description="the 1-based number of the shot it represents")
    frame_index: Index = Field(description="0-based index of the frame (its 1-based frame number is index + 1)")
    time_ms: Ms = Field(description="the frame's presentation time on the media timeline")
    image: Digest | None = Field(
        description="digest of the stored image in the blob store (never inlined); None when no sink was given"
    )
    image_media_type: Literal["image/jpeg", "image/png"] | None
    width: Positive = Field(description="width of the image, upright (display orientation)")
    height: Positive
    phash: str = Field(
        pattern=r"^[0-9a-f]{16}$",
        description="64-bit DCT perceptual hash of the upright frame, 16 hex digits (bit 63 first)",
    )
    sharpness: float = Field(ge=0.0, allow_inf_nan=False, description="variance of the Laplacian of the analysis frame")
    duplicate_of: Index | None = Field(
        None, description="0-based index, in ``keyframes``, of the first earlier keyframe within duplicate_distance"
    )
    phash_distance: Annotated[int, Field(strict=True, ge=0, le=64)] | None = Field(
        None, description="Hamming distance to that keyframe's pHash"
    )

    @model_validator(mode="after")
    def _duplicate_pair(self) -> VideoKeyframe:
        if (self.duplicate_of is None) != (self.phash_distance is None):
            raise ValueError("duplicate_of and phash_distance go together")
        if (self.image is None) != (self.image_media_type is None):
            raise ValueError("image and image_media_type go together")
        return self


class VideoSpeech(Strict):
    """The audio track's transcript, or why there is none.

    On the fleet the transcript is made by a separate job on the audio capability's queue
    (``job_id``), in parallel with the shots and keyframes, and joined into this result before the
    caller sees it; in-process it is made in the same run. ``pending`` is what the video part
    reports before that join and never reaches a caller.

    ``transcript`` times are on the audio stream's own timeline (from its first sample), exactly
    as ``transcribe_segments`` returns them; add ``offset_ms`` to place them on the media timeline
    (the fleet's AudioRange loci for a video are already shifted).
    """

    status: Literal["transcribed", "pending", "no_audio_track", "not_requested", "unavailable", "failed"] = Field(
        description="pending: a speech job is transcribing the track (inside the fleet only); unavailable: no "
        "audio engine could take it; failed: the track could not be transcribed (the shots and keyframes stand)"
    )
    offset_ms: Ms | None = Field(None, description="where the audio stream's first sample lies on the media timeline")
    transcript: AudioResult | None = None
    error: PublicError | None = Field(None, description="the public reason, when unavailable or failed")
    job_id: str | None = Field(None, description="the fleet job that transcribed the track (none in-process)")

    @model_validator(mode="after")
    def _status_fits(self) -> VideoSpeech:
        done = self.status == "transcribed"
        if done != (self.transcript is not None):
            raise ValueError("a transcript comes with status 'transcribed' only")
        if (done or self.status == "pending") != (self.offset_ms is not None):
            raise ValueError("an offset comes with status 'transcribed' or 'pending' only")
        if (self.status in ("unavailable", "failed")) != (self.error is not None):
            raise ValueError("an error comes with status 'unavailable' or 'failed' only")
        return self


class VideoResult(Strict):
    kind: Literal["video"] = "video"
    media: VideoMedia
    shots: list[VideoShot] = Field(min_length=1)
    keyframes: list[VideoKeyframe] = Field(
        min_length=1, description="at least one per shot (none for a transition), in frame order"
    )
    speech: VideoSpeech
    producer: Producer

    @model_validator(mode="after")
    def _consistent(self) -> VideoResult:
        media = self.media
        next_frame, next_ms = 0, media.start_ms
        for number, shot in enumerate(self.shots, start=1):
            if shot.shot != number:
                raise ValueError("shots are numbered 1, 2, ... in order")
            if shot.first_frame_index != next_frame or shot.start_ms != next_ms:
                raise ValueError("shots must be contiguous, from the first frame and the video's start")
            next_frame, next_ms = shot.last_frame_index + 1, shot.end_ms
        if next_frame != media.frame_count or next_ms != media.duration_ms:
            raise ValueError("shots must cover every frame, up to the video's end")
        covered: set[int] = set()
        previous = -1
        for index, key in enumerate(self.keyframes):
            if not 1 <= key.shot <= len(self.shots):
                raise ValueError("a keyframe names a shot that does not exist")
            shot = self.shots[key.shot - 1]
            if shot.kind != "shot":
                raise ValueError("a transition has no keyframe")
            if not shot.first_frame_index <= key.frame_index <= shot.last_frame_index:
                raise ValueError("a keyframe lies outside its shot")
            # <= end_ms: frames under 1 ms apart can round onto the next shot's start.
            if not shot.start_ms <= key.time_ms <= shot.end_ms:
                raise ValueError("a keyframe's time lies outside its shot")
            if key.frame_index <= previous:
                raise ValueError("keyframes must be in frame order")
            if key.duplicate_of is not None and key.duplicate_of >= index:
                raise ValueError("duplicate_of must name an earlier keyframe")
            previous = key.frame_index
            covered.add(key.shot)
        if len(covered) != sum(shot.kind == "shot" for shot in self.shots):
            raise ValueError("every shot needs a keyframe")
        return self
