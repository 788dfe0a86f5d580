"""Shot detection: upstream's golden cuts on the conformance corpus, known cuts on generated clips,
and the one-pass frame score against PySceneDetect's own method."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from scenedetect import AdaptiveDetector, ContentDetector, open_video
from scenedetect.common import FrameTimecode
from scenedetect.scene_manager import SceneManager

from mediafleet.contract.manifest import Limits
from mediafleet.contract.video import VideoOptions, VideoResult
from tests.clips import write_clip
from mediafleet.workers.video.extract import extract_keyframes
from mediafleet.workers.video.shots import AnalysisFrames, build_detector

LIMITS = Limits(max_bytes=2**32, max_pixels=8847360, max_duration_s=10800)
DETECTORS = {"adaptive": "AdaptiveDetector", "content": "ContentDetector"}


def cuts(result: VideoResult) -> list[int]:
    return [shot.first_frame_index for shot in result.shots[1:]]


@pytest.fixture(scope="module")
def corpus_results(corpus: Path) -> dict[tuple[str, str], VideoResult]:
    videos = corpus / "video"
    return {
        (name, detector): extract_keyframes(videos / name, VideoOptions(detector=detector), LIMITS)  # type: ignore[arg-type]
        for name in ("testvideo.mp4", "counter.mp4", "fades.mp4")
        for detector in DETECTORS
    }


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("name", ["testvideo.mp4", "counter.mp4", "fades.mp4"])
@pytest.mark.parametrize("detector", list(DETECTORS))
def test_corpus_cuts_equal_upstream_goldens(corpus: Path, corpus_results, name: str, detector: str) -> None:
    golden = json.loads((corpus / "video" / "goldens" / f"{name}.{DETECTORS[detector]}.default.json").read_text())
    assert cuts(corpus_results[(name, detector)]) == golden["cuts"]


@pytest.mark.corpus
def test_testvideo_goldens_are_the_issue_s_numbers(corpus_results) -> None:
    assert cuts(corpus_results[("testvideo.mp4", "content")]) == [30, 180, 394]
    assert cuts(corpus_results[("testvideo.mp4", "adaptive")]) == [30, 180, 394, 691]


@pytest.mark.corpus
def test_corpus_media_facts(corpus_results) -> None:
    media = corpus_results[("testvideo.mp4", "adaptive")].media
    assert (media.width, media.height, media.rotation) == (1280, 720, 0)
    assert media.frame_rate.fraction() == Fraction(30000, 1001)
    assert media.frame_count == media.declared_frame_count == 720
    assert not media.variable_frame_rate and media.repaired_timestamps == 0
    assert media.start_ms == 0
    assert media.duration_ms == 24024  # 720 frames of 1001/30000 s
    counter = corpus_results[("counter.mp4", "adaptive")].media
    assert (counter.width, counter.height, counter.frame_count) == (1920, 1080, 30)


@pytest.mark.slow
@pytest.mark.corpus
def test_the_scene_manager_itself_agrees_on_the_corpus(corpus: Path, corpus_results) -> None:
    """Upstream end to end (its own decoding thread and downscaling) gives the same cuts."""
    video = open_video(str(corpus / "video" / "testvideo.mp4"), backend="pyav")
    manager = SceneManager()
    manager.add_detector(AdaptiveDetector())
    manager.detect_scenes(video)
    upstream = [start.frame_num for start, _ in manager.get_scene_list()[1:]]
    assert upstream == cuts(corpus_results[("testvideo.mp4", "adaptive")])


@pytest.fixture(scope="module")
def four_scenes(tmp_path_factory: pytest.TempPathFactory):
    return write_clip(tmp_path_factory.mktemp("clips") / "four.mp4", [(0, 30), (1, 25), (2, 40), (3, 30)])


@pytest.mark.parametrize("detector", list(DETECTORS))
def test_generated_clip_cuts_exactly_at_scene_changes(four_scenes, detector: str) -> None:
    result = extract_keyframes(four_scenes.path, VideoOptions(detector=detector), LIMITS)  # type: ignore[arg-type]
    assert cuts(result) == four_scenes.cuts == [30, 55, 95]
    assert [s.start_ms for s in result.shots] == [0, 1200, 2200, 3800]  # 25 fps: 40 ms a frame
    assert result.shots[-1].end_ms == result.media.duration_ms == 5000


def test_a_high_content_threshold_removes_cuts(four_scenes) -> None:
    result = extract_keyframes(four_scenes.path, VideoOptions(detector="content", content_threshold=100.0), LIMITS)
    assert cuts(result) == []
    assert result.producer.options["threshold"] == 100.0


def _frames(path: Path, limit: int) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        analysis = AnalysisFrames(stream.codec_context.width, stream.codec_context.height)
        out = []
        for frame in container.decode(stream):
            out.append(analysis.small(frame))
            if len(out) == limit:
                break
    return out


@pytest.mark.parametrize("cls", [ContentDetector, AdaptiveDetector])
def test_one_pass_score_is_bit_identical_to_upstream(four_scenes, cls) -> None:
    detector, _ = build_detector(VideoOptions(detector="content" if cls is ContentDetector else "adaptive"))
    upstream = cls()
    rng = np.random.default_rng(7)
    frames = _frames(four_scenes.path, 60) + [rng.integers(0, 256, (144, 256, 3), dtype=np.uint8) for _ in range(4)]
    for index, image in enumerate(frames):
        timecode = FrameTimecode(index, fps=Fraction(25))
        ours = detector._calculate_frame_score(timecode, image)
        theirs = upstream._calculate_frame_score(timecode, image)
        assert ours == theirs  # exactly: same integers, same float operations


def test_analysis_frames_are_what_the_scene_manager_feeds_its_detectors(four_scenes) -> None:
    """Full-size BGR from swscale, then upstream's automatic size with linear interpolation."""
    ours = _frames(four_scenes.path, 3)
    with av.open(str(four_scenes.path)) as container:
        frames = [f.to_ndarray(format="bgr24") for _, f in zip(range(3), container.decode(video=0), strict=False)]
    factor = 320 / 256
    size = (round(320 / factor), round(180 / factor))
    for mine, full in zip(ours, frames, strict=True):
        assert np.array_equal(mine, cv2.resize(full, size, interpolation=cv2.INTER_LINEAR))


def test_build_detector_resolves_defaults_and_says_so() -> None:
    detector, spec = build_detector(VideoOptions(detector="adaptive"))
    assert isinstance(detector, AdaptiveDetector)
    assert spec.provenance() == {
        "detector_class": "AdaptiveDetector", "threshold": 3.0, "min_scene_len_frames": 15,
        "window_width": 2, "min_content_val": 15.0,
    }
    detector, spec = build_detector(VideoOptions(detector="content", content_threshold=30.0))
    assert isinstance(detector, ContentDetector) and spec.threshold == 30.0


@pytest.mark.slow
@pytest.mark.corpus
def test_decoder_threads_change_nothing(corpus: Path, corpus_results) -> None:
    """FFmpeg's frame threading is bit-exact: two threads give the same shots and keyframes."""
    from dataclasses import replace

    from mediafleet.workers.engines import configure, engine_config

    before = engine_config()
    configure(replace(before, threads=2))
    try:
        threaded = extract_keyframes(corpus / "video" / "testvideo.mp4", VideoOptions(detector="adaptive"), LIMITS)
    finally:
        configure(before)
    single = corpus_results[("testvideo.mp4", "adaptive")]
    assert threaded.shots == single.shots and threaded.keyframes == single.keyframes
    assert threaded.producer.options["threads"] == 2
