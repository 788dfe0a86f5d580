"""The video extractor on real generated videos: timing, keyframes, media facts, bad input, loci."""

from __future__ import annotations

import itertools
import random
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from pydantic import ValidationError

from mediafleet.adapters.loci import to_loci
from mediafleet.adapters.verify import loci_valid
from mediafleet.contract.errors import (
    CapabilityRefused,
    ErrorCode,
    InputRejected,
    LimitExceeded,
    MediafleetError,
)
from mediafleet.contract.manifest import Limits, default_manifest
from mediafleet.contract.video import VideoOptions, VideoResult
from mediafleet import Dispatcher, Settings
from tests.helpers import assert_engine_valid
from tests.clips import Clip, write_clip
from mediafleet.workers.sink import MemorySink
from mediafleet.workers.parts import join_inline
from mediafleet.workers.video.decode import FrameReader
from mediafleet.workers.video.extract import extract_keyframes
from mediafleet.workers.video.keyframes import MAX_BUCKETS, Candidate, KeyframePicker
from mediafleet.workers.video.phash import hamming, near_duplicates, phash
from mediafleet.workers.video.probe import open_video

LIMITS = Limits(max_bytes=2**32, max_pixels=8847360, max_duration_s=10800)
KEYFRAMES = default_manifest().capability("extract_keyframes")


def run(clip: Clip | Path, sink: MemorySink | None = None, **options) -> VideoResult:  # type: ignore[no-untyped-def]
    path = clip.path if isinstance(clip, Clip) else clip
    return extract_keyframes(path, VideoOptions(**options), LIMITS, None, sink)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Clip]:
    d = tmp_path_factory.mktemp("video")
    return {
        "scenes": write_clip(d / "scenes.mp4", [(0, 30), (1, 25), (2, 40), (3, 30)], audio_s=5.0),
        "repeat": write_clip(d / "repeat.mp4", [(4, 30), (5, 30), (4, 30)]),
        "vfr": write_clip(d / "vfr.mp4", [(0, 24), (1, 30), (2, 26)], time_base=Fraction(1, 100), steps=[2, 6, 3]),
        "late": write_clip(d / "late.mp4", [(0, 30), (1, 30)], start_pts=12, audio_s=3.0),
        "late_alone": write_clip(d / "late.mkv", [(0, 30), (1, 30)], start_pts=12),
        "rotated": write_clip(d / "rotated.mp4", [(0, 20), (1, 20)], size=(160, 96), rotation=90),
    }


@pytest.fixture(scope="module")
def scenes(clips: dict[str, Clip]) -> tuple[VideoResult, MemorySink]:
    sink = MemorySink()
    return run(clips["scenes"], sink), sink


# --- shots and keyframes ---------------------------------------------------------------------


def test_shots_are_contiguous_cover_the_video_and_rise(scenes, clips) -> None:
    result, _ = scenes
    clip = clips["scenes"]
    shots = result.shots
    assert [s.first_frame_index for s in shots] == [0, *clip.cuts]
    assert shots[0].start_ms == 0 and shots[-1].end_ms == result.media.duration_ms
    assert shots[-1].last_frame_index == result.media.frame_count - 1 == clip.frames - 1
    for before, after in itertools.pairwise(shots):
        assert before.end_ms == after.start_ms and before.last_frame_index + 1 == after.first_frame_index
        assert after.start_ms > before.start_ms
    assert all(s.start_ms == clip.ms(s.first_frame_index) for s in shots)


def test_one_keyframe_per_shot_inside_it_with_a_stored_image(scenes) -> None:
    result, sink = scenes
    assert [k.shot for k in result.keyframes] == [1, 2, 3, 4]
    for key in result.keyframes:
        shot = result.shots[key.shot - 1]
        assert shot.first_frame_index <= key.frame_index <= shot.last_frame_index
        assert shot.start_ms <= key.time_ms < shot.end_ms
        data = sink.blobs[key.image]
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert image.shape == (key.height, key.width, 3) == (180, 320, 3)
        assert key.image_media_type == "image/jpeg" and data[:3] == b"\xff\xd8\xff"
        assert len(key.phash) == 16 and key.sharpness > 0
    assert len(sink.blobs) == 4


def test_keyframe_is_the_sharpest_of_the_middle_bucket(scenes, clips) -> None:
    """Recompute the rule by brute force from the grey frames the default (combined) detector reads."""
    from mediafleet.workers.video.shots import SignalFrames

    result, _ = scenes
    with av.open(str(clips["scenes"].path)) as container:
        analysis = SignalFrames(320, 180)
        scores = [analysis.signals(f)[0] for f in container.decode(video=0)]
    assert [k.sharpness for k in result.keyframes] == [scores[k.frame_index] for k in result.keyframes]
    for shot, key in zip(result.shots, result.keyframes, strict=True):
        n = shot.last_frame_index - shot.first_frame_index + 1
        size = 1
        while -(-n // size) > MAX_BUCKETS:
            size *= 2
        middle = (n - 1) // 2
        start = shot.first_frame_index + (middle // size) * size
        bucket = range(start, min(start + size, shot.last_frame_index + 1))
        best = max(bucket, key=lambda i: (scores[i], -i))
        assert key.frame_index == best


def test_picker_matches_the_rule_and_holds_few_frames() -> None:
    rng = random.Random(5)
    for n in [1, 2, 7, 8, 9, 16, 17, 100, 1000, 4097]:
        scores = [rng.choice([1.0, 2.0, 3.0, rng.random()]) for _ in range(n)]
        picker = KeyframePicker(10)
        for i, s in enumerate(scores):
            picker.add(Candidate(10 + i, i, s, None))
            assert len(picker.best) <= MAX_BUCKETS
        size = 1
        while -(-n // size) > MAX_BUCKETS:
            size *= 2
        start = ((n - 1) // 2 // size) * size
        expected = max(range(start, min(start + size, n)), key=lambda i: (scores[i], -i))
        assert picker.pick(10 + n - 1).index == 10 + expected


def test_near_duplicate_keyframes_are_marked_not_dropped(clips) -> None:
    result = run(clips["repeat"])
    assert len(result.shots) == len(result.keyframes) == 3
    first, second, third = result.keyframes
    assert first.duplicate_of is None and second.duplicate_of is None
    assert third.duplicate_of == 0 and third.phash_distance is not None and third.phash_distance <= 6
    assert hamming(int(first.phash, 16), int(second.phash, 16)) > 6


def test_phash_is_the_image_capability_s_and_separates_pictures() -> None:
    from PIL import Image

    from mediafleet.workers.image.phash import phash as image_phash

    yy, xx = np.mgrid[0:120, 0:160]
    a = cv2.merge([((xx * 2 + yy) % 256).astype(np.uint8)] * 3)
    b = cv2.merge([((xx // 20 + yy // 20) % 2 * 255).astype(np.uint8)] * 3)
    a[:40, :40] = (0, 0, 255)  # red, in BGR
    assert f"{phash(a):016x}" == image_phash(Image.fromarray(a[:, :, ::-1].copy()))
    assert hamming(phash(a), phash(cv2.GaussianBlur(a, (3, 3), 0))) <= 4
    assert hamming(phash(a), phash(b)) > 16
    assert near_duplicates([0b1111, 0b0111, 0xFFFF0000, 0b1111], 1) == [None, (0, 1), None, (0, 0)]


def test_png_keyframes_are_lossless(clips) -> None:
    sink = MemorySink()
    result = run(clips["rotated"], sink, keyframe_format="png")
    assert {k.image_media_type for k in result.keyframes} == {"image/png"}
    assert all(sink.blobs[k.image].startswith(b"\x89PNG") for k in result.keyframes)


def test_without_a_sink_no_image_is_encoded(clips) -> None:
    result = run(clips["rotated"])
    assert all(k.image is None and k.image_media_type is None for k in result.keyframes)
    assert all("image_blob_ref" not in d.properties for d in to_loci(result, "doc"))


# --- time and media facts --------------------------------------------------------------------


def test_a_one_frame_video_is_one_shot_of_one_frame(tmp_path: Path) -> None:
    result = run(write_clip(tmp_path / "one.mkv", [(0, 1)]))
    assert [(s.start_ms, s.end_ms, s.first_frame_index, s.last_frame_index) for s in result.shots] == [(0, 40, 0, 0)]
    assert result.keyframes[0].frame_index == 0 and result.media.frame_count == 1
    assert loci_valid(to_loci(result, "v"))


def test_variable_frame_rate_times_come_from_timestamps(clips) -> None:
    clip = clips["vfr"]
    result = run(clip)
    media = result.media
    assert media.variable_frame_rate and media.repaired_timestamps == 0
    assert [s.first_frame_index for s in result.shots[1:]] == clip.cuts
    assert [s.start_ms for s in result.shots] == [clip.ms(0), *(clip.ms(c) for c in clip.cuts)]
    assert [k.time_ms for k in result.keyframes] == [clip.ms(k.frame_index) for k in result.keyframes]
    # A nominal-rate timeline would put the last cut elsewhere: 54 frames at the average rate.
    nominal = int(Fraction(54) / media.frame_rate.fraction() * 1000)
    assert result.shots[2].start_ms != nominal
    assert media.duration_ms > clip.ms(clip.frames - 1)


def test_frames_without_timestamps_are_timed_from_their_neighbours_and_counted(tmp_path: Path) -> None:
    """A raw H.264 stream carries no pts: each frame is one nominal step (1/25 s) after the last."""
    result = run(write_clip(tmp_path / "raw.h264", [(0, 30), (1, 30)]))
    assert result.media.repaired_timestamps == result.media.frame_count == 60
    assert [s.start_ms for s in result.shots] == [0, 1200] and result.media.duration_ms == 2400


def test_a_video_stream_that_starts_after_its_audio_keeps_its_offset(clips) -> None:
    clip = clips["late"]
    result = run(clip)
    assert result.media.has_audio
    assert result.media.start_ms == result.shots[0].start_ms == 480  # 12 frames at 25 fps
    assert result.shots[1].start_ms == 480 + 30 * 40
    assert result.media.duration_ms == 480 + 60 * 40


def test_a_lone_late_stream_starts_the_timeline(clips) -> None:
    result = run(clips["late_alone"])
    assert not result.media.has_audio
    assert result.media.start_ms == 0 and result.shots[1].start_ms == 1200


def test_rotated_video_facts_and_upright_keyframes_match_ffmpeg(clips, tmp_path: Path) -> None:
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed; tests/run.sh installs it")
    clip = clips["rotated"]
    sink = MemorySink()
    result = run(clip, sink, keyframe_format="png")
    media = result.media
    assert media.rotation == 270  # PyAV's +90 is counter-clockwise: ffmpeg turns it 270 clockwise
    assert (media.width, media.height, media.display_width, media.display_height) == (160, 96, 96, 160)
    key = result.keyframes[0]
    ours = cv2.imdecode(np.frombuffer(sink.blobs[key.image], np.uint8), cv2.IMREAD_COLOR)
    out = tmp_path / "ffmpeg.png"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(clip.path), "-vf", f"select=eq(n\\,{key.frame_index})",
         "-frames:v", "1", str(out)],
        check=True,
    )
    theirs = cv2.imread(str(out), cv2.IMREAD_COLOR)
    assert ours.shape == theirs.shape == (160, 96, 3)
    same = np.abs(ours.astype(int) - theirs.astype(int)).mean()
    flipped = np.abs(cv2.rotate(ours, cv2.ROTATE_180).astype(int) - theirs.astype(int)).mean()
    assert same < 3 < flipped


# --- bad input -------------------------------------------------------------------------------


def _fails(path: Path, code: ErrorCode, limits: Limits = LIMITS) -> MediafleetError:
    with pytest.raises(MediafleetError) as info:
        extract_keyframes(path, VideoOptions(), limits, None, MemorySink())
    assert info.value.code == code, info.value.message
    assert str(path.parent) not in info.value.message and "Errno" not in info.value.message
    return info.value


def test_empty_and_garbage_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    _fails(empty, ErrorCode.EMPTY_INPUT)
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40)
    _fails(garbage, ErrorCode.CORRUPT_INPUT)


def test_truncated_videos(clips, tmp_path: Path) -> None:
    data = clips["scenes"].path.read_bytes()
    half = tmp_path / "half.mp4"  # faststart: the index survives, the frames do not
    half.write_bytes(data[: len(data) // 2])
    assert "truncated" in _fails(half, ErrorCode.CORRUPT_INPUT).message
    plain = write_clip(tmp_path / "plain.mp4", [(0, 20), (1, 20)], faststart=False)
    cut = tmp_path / "cut.mp4"  # index at the end: nothing to read
    cut.write_bytes(plain.path.read_bytes()[:-200])
    _fails(cut, ErrorCode.CORRUPT_INPUT)


def test_corrupt_bitstream(clips, tmp_path: Path) -> None:
    data = bytearray(clips["scenes"].path.read_bytes())
    for k in range(len(data) // 3, len(data) // 3 + 4000, 5):
        data[k] ^= 0xFF
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(bytes(data))
    assert "corrupt" in _fails(bad, ErrorCode.CORRUPT_INPUT).message


def test_no_video_stream(tmp_path: Path) -> None:
    path = tmp_path / "audio.mp4"
    with av.open(str(path), "w") as out:
        audio = out.add_stream("aac", rate=16000)
        audio.layout = "mono"
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 16000), np.float32), format="fltp", layout="mono")
        frame.sample_rate, frame.pts = 16000, 0
        for packet in [*audio.encode(frame), *audio.encode(None)]:
            out.mux(packet)
    _fails(path, ErrorCode.NO_MEDIA_STREAM)


def test_zero_length_video(tmp_path: Path) -> None:
    """A video track with no frames (Matroska keeps the empty track; MP4 would drop it)."""
    path = tmp_path / "zero.mkv"
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = out.add_stream("aac", rate=16000)
        audio.layout = "mono"
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1600), np.float32), format="fltp", layout="mono")
        frame.sample_rate, frame.pts = 16000, 0
        for packet in [*audio.encode(frame), *audio.encode(None)]:
            out.mux(packet)
    with av.open(str(path)) as container:
        assert len(container.streams.video) == 1
    _fails(path, ErrorCode.EMPTY_INPUT)


def test_limits_are_checked_from_the_container_before_decoding(clips) -> None:
    path = clips["scenes"].path  # 320x180, 5 s
    with pytest.raises(LimitExceeded) as info:
        open_video(path, Limits(max_bytes=2**32, max_pixels=320 * 180 - 1))
    assert info.value.code == ErrorCode.TOO_MANY_PIXELS
    with pytest.raises(LimitExceeded) as info:
        open_video(path, Limits(max_bytes=2**32, max_duration_s=4.5))
    assert info.value.code == ErrorCode.TOO_LONG
    _fails(path, ErrorCode.TOO_LONG, Limits(max_bytes=2**32, max_duration_s=4.5))


def test_the_duration_limit_holds_on_timestamps_too(clips) -> None:
    """A container that understates its length is stopped while decoding."""
    with open_video(clips["scenes"].path, LIMITS) as probe:
        reader = FrameReader(probe, 1, Limits(max_bytes=2**32, max_duration_s=2.0))
        with pytest.raises(LimitExceeded) as info:
            for _ in reader:
                pass
    assert info.value.code == ErrorCode.TOO_LONG and reader.count == 51  # frames 0-50 are within 2.0 s


# --- contract and loci -----------------------------------------------------------------------


def test_options_are_checked_by_the_model_and_the_manifest() -> None:
    with pytest.raises(ValidationError):
        VideoOptions(detector="adaptive", content_threshold=30.0)
    with pytest.raises(ValidationError):
        VideoOptions(detector="content", adaptive_threshold=2.0)
    with pytest.raises(ValidationError):
        VideoOptions(frames=3)  # type: ignore[call-arg]
    capability = default_manifest().capability("extract_keyframes")
    capability.check_options({"detector": "content", "content_threshold": 30.0})
    for bad in ({"content_threshold": 500.0}, {"detector": "hash"}, {"threshold": 3}):
        with pytest.raises(CapabilityRefused):
            capability.check_options(bad)


def test_the_result_model_refuses_inconsistent_shots(scenes) -> None:
    result, _ = scenes
    data = result.model_dump(mode="json")
    gap = {**data, "shots": [dict(data["shots"][0], end_ms=data["shots"][0]["end_ms"] - 1), *data["shots"][1:]]}
    with pytest.raises(ValidationError):
        VideoResult.model_validate(gap)
    outside = {**data, "keyframes": [dict(data["keyframes"][0], frame_index=60), *data["keyframes"][1:]]}
    with pytest.raises(ValidationError):
        VideoResult.model_validate(outside)
    short = {**data, "media": dict(data["media"], frame_count=data["media"]["frame_count"] + 1)}
    with pytest.raises(ValidationError):
        VideoResult.model_validate(short)
    assert VideoResult.model_validate(data) == result


def test_loci_are_valid_one_based_and_inside(scenes) -> None:
    result, _ = scenes
    drafts = to_loci(result, "sha256:" + "0" * 64)
    assert [d.address.kind for d in drafts] == ["video_time_range", "frame_range"] * 4
    assert loci_valid(drafts)
    frames = [d for d in drafts if d.address.kind == "frame_range"]
    assert [d.address.start_frame for d in frames] == [k.frame_index + 1 for k in result.keyframes]
    assert all(d.address.start_frame == d.address.end_frame >= 1 for d in frames)
    assert all(d.properties["image_blob_ref"].startswith("blob:") for d in frames)
    shot = drafts[0]
    assert (shot.properties["start_frame"], shot.properties["end_frame"]) == (1, 30)


def test_in_process_bundle_is_verified_and_keyframes_are_in_the_store(clips, tmp_path: Path) -> None:
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    bundle = dispatcher.submit(clips["scenes"].path).bundle()
    assert bundle.status == "ok", bundle.error
    assert bundle.action == "extract_keyframes" and bundle.artifact.modality == "video"
    assert assert_engine_valid(bundle) == 8
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] is True
    refs = [n.properties["image_blob_ref"] for n in bundle.nodes if n.properties.get("keyframe")]
    assert len(refs) == 4
    assert all(dispatcher.store.exists("sha256:" + r.removeprefix("blob:")) for r in refs)


def test_a_refused_video_is_a_failed_bundle_with_a_code(clips, tmp_path: Path) -> None:
    data = clips["scenes"].path.read_bytes()
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    bundle = dispatcher.submit(data[: len(data) // 2]).bundle()
    assert bundle.status == "failed" and bundle.error is not None
    assert bundle.error.code == ErrorCode.CORRUPT_INPUT
    assert isinstance(InputRejected("x"), MediafleetError)


# --- speech in video -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def speaking(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Clip:
    """Three scenes with JFK's 11 s of speech as an AAC track that starts 1 s into the video."""
    return write_clip(tmp_path_factory.mktemp("speech") / "jfk.mp4", [(0, 100), (1, 100), (2, 100)],
                      audio_file=corpus / "audio" / "jfk.flac", audio_start_s=Fraction(1))


@pytest.mark.slow
@pytest.mark.corpus
def test_speech_in_a_video_becomes_audio_ranges_on_the_media_timeline(speaking: Clip, tmp_path: Path) -> None:
    dispatcher = Dispatcher(Settings(blob_root=tmp_path / "blobs"))
    bundle = dispatcher.submit(speaking.path).bundle()
    assert bundle.status == "ok", bundle.error
    evidence = [n.properties for n in bundle.nodes if n.node_type == "Evidence"]
    kinds = [p["locus_kind"] for p in evidence]
    assert kinds[:6] == ["video_time_range", "frame_range"] * 3 and set(kinds[6:]) == {"audio_range"}
    text = " ".join(p["text"] for p in evidence if p["locus_kind"] == "audio_range").lower()
    assert "ask not what your country can do for you" in text
    claim = next(n for n in bundle.nodes if n.node_type == "Claim")
    assert claim.properties["is_verified"] is True

    video = run(speaking)  # the extractor alone leaves the transcript to its speech part
    with av.open(str(speaking.path)) as container:
        stream = container.streams.audio[0]
        start_ms = round(stream.start_time * stream.time_base * 1000)
    assert video.speech.status == "pending" and video.speech.transcript is None
    assert video.speech.offset_ms == start_ms and 900 <= start_ms <= 1000  # 1 s, less the AAC encoder's priming
    assert video.producer.models == [] and video.producer.options["speech_engine"] is None

    result = join_inline(video, speaking.path, default_manifest(), KEYFRAMES)
    speech = result.speech
    assert speech.status == "transcribed" and speech.transcript is not None and speech.offset_ms == start_ms
    drafts = [d for d in to_loci(result, "v") if d.address.kind == "audio_range"]
    assert [(d.address.start_ms, d.address.end_ms) for d in drafts] == [
        (s.start_ms + start_ms, s.end_ms + start_ms) for s in speech.transcript.segments
    ]
    assert drafts[0].address.start_ms >= start_ms and loci_valid(drafts)
    assert result.producer.models == speech.transcript.producer.models
    assert result.producer.options["speech_engine"].startswith("faster-whisper")
    assert (result.shots, result.keyframes) == (video.shots, video.keyframes)


def test_speech_states_without_a_transcript(clips, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(clips["rotated"]).speech.status == "no_audio_track"
    off = run(clips["late"], speech=False)
    assert off.speech.status == "not_requested" and off.speech.transcript is None
    assert {d.address.kind for d in to_loci(off, "v")} == {"video_time_range", "frame_range"}
    assert join_inline(off, clips["late"].path, default_manifest(), KEYFRAMES) == off  # nothing waits for a transcript

    import mediafleet.workers.extractor

    def missing(capability):  # type: ignore[no-untyped-def]
        raise mediafleet.workers.extractor.Unavailable("the faster-whisper engine is not installed on this worker")

    pending = run(clips["late"])
    assert pending.speech.status == "pending"
    monkeypatch.setattr(mediafleet.workers.extractor, "load_extractor", missing)
    result = join_inline(pending, clips["late"].path, default_manifest(), KEYFRAMES)
    assert result.speech.status == "unavailable" and result.speech.error is not None
    assert result.speech.error.code == ErrorCode.ENGINE_UNAVAILABLE
    assert result.shots == pending.shots and len(result.shots) == 2  # the shots and keyframes stand

    def damaged(capability):  # type: ignore[no-untyped-def]
        def extract(*args):  # type: ignore[no-untyped-def]
            raise InputRejected("the audio stream is damaged")
        return extract

    monkeypatch.setattr(mediafleet.workers.extractor, "load_extractor", damaged)
    result = join_inline(pending, clips["late"].path, default_manifest(), KEYFRAMES)
    assert result.speech.status == "failed" and result.speech.error.code == ErrorCode.CORRUPT_INPUT
