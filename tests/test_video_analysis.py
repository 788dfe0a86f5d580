"""The analysis frames' shortcuts against the full path they replace, byte for byte, and the
decoding helper threads against decoding in the caller's thread.

The row path (``mediafleet.workers.video.shots``) converts only the rows linear resizing reads; these tests
check the row sets against OpenCV itself and the resulting frames against the full-size conversion
then resize that PySceneDetect's ``SceneManager`` does, on real decoded frames, random pixels and
every colour matrix and range swscale knows.

The combined detector's reduction (:class:`SignalFrames`) is not byte-exact by design: its grey
frame and thumbnail are checked against the picture they come from (its luma under the frame's own
colour matrix, its colours), against the exact frame on real decoded video, and its swscale
fallback for other pixel formats against the planar path.
"""

from __future__ import annotations

import threading
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from av.video.reformatter import VideoReformatter
from scenedetect.scene_manager import compute_downscale_factor

from mediafleet.contract.errors import InputRejected
from mediafleet.contract.manifest import Limits
from tests.clips import write_clip
from mediafleet.workers.video import decode
from mediafleet.workers.video.decode import FrameReader
from mediafleet.workers.video.probe import open_video
from mediafleet.workers.video.frame_signals import frame_signals
from mediafleet.workers.video import shots
from mediafleet.workers.video.shots import AnalysisFrames, SignalFrames, grey_sharpness, resize_rows, signal_size
from tests.clips import scene_frame
from tests.helpers import can_compile

LIMITS = Limits(max_bytes=2**32, max_pixels=8847360, max_duration_s=10800)
# Coded sizes seen in the wild, portrait and odd ones included.
GEOMETRIES = [(1920, 1080), (1280, 720), (3840, 2160), (4096, 2160), (1080, 1920), (854, 480), (1440, 1080),
              (2560, 1440), (720, 576), (640, 360), (1918, 1078), (1366, 768), (2048, 858), (300, 4000), (512, 288)]


def _reference(frame: av.VideoFrame, size: tuple[int, int]) -> np.ndarray:
    """What the SceneManager feeds its detectors: full-size BGR from swscale, then linear resize."""
    full = VideoReformatter().reformat(frame, format="bgr24", threads=1).to_ndarray()
    return cv2.resize(full, size, interpolation=cv2.INTER_LINEAR)


def _size(width: int, height: int) -> tuple[int, int]:
    factor = compute_downscale_factor(max(width, height))
    return max(1, round(width / factor)), max(1, round(height / factor))


@pytest.mark.parametrize(("width", "height"), GEOMETRIES)
def test_resize_reads_only_the_rows_resize_rows_names(width: int, height: int) -> None:
    """Whatever the other rows hold, OpenCV's linear resize gives the same bytes."""
    size = _size(width, height)
    rows = resize_rows(height, size[1])
    others = np.setdiff1d(np.arange(height), rows)
    rng = np.random.default_rng(width * height)
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    expected = cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
    for fill in (0, 255, None):
        changed = image.copy()
        changed[others] = rng.integers(0, 256, (len(others), width, 3), dtype=np.uint8) if fill is None else fill
        assert np.array_equal(cv2.resize(changed, size, interpolation=cv2.INTER_LINEAR), expected)
    # Two rows an output row, at most (fewer where neighbours share one).
    assert len(rows) <= 2 * size[1]


def _random_yuv420p(width: int, height: int, seed: int) -> av.VideoFrame:
    rng = np.random.default_rng(seed)
    return av.VideoFrame.from_ndarray(rng.integers(0, 256, (height * 3 // 2, width), dtype=np.uint8), format="yuv420p")


# AVColorSpace: unspecified, BT.709, FCC, BT.470BG, SMPTE 170M, SMPTE 240M, BT.2020; AVColorRange: tv, pc.
@pytest.mark.parametrize("colorspace", [2, 1, 4, 5, 6, 7, 9])
@pytest.mark.parametrize("color_range", [1, 2])
def test_row_path_is_the_full_path_on_random_pixels(colorspace: int, color_range: int) -> None:
    """Noise over the whole 0-255 range (clipping included), in every matrix and range."""
    analysis = AnalysisFrames(1920, 1080)
    for seed in range(3):
        frame = _random_yuv420p(1920, 1080, seed)
        frame.colorspace = colorspace
        frame.color_range = color_range
        assert analysis._rows is not None and analysis._rows.fits(frame)  # the row path is the one tested
        assert np.array_equal(analysis.small(frame), _reference(frame, analysis.size))


def test_row_path_with_padded_source_lines() -> None:
    """Decoders pad lines differently from the gathered frame's; the rows still land in place."""
    width, height, pad = 1920, 1080, 64
    rng = np.random.default_rng(3)
    buffer = rng.integers(0, 256, (height * 3 // 2, width + pad), dtype=np.uint8)
    frame = av.VideoFrame.from_numpy_buffer(buffer, format="yuv420p", width=width)
    assert frame.planes[0].line_size == width + pad
    analysis = AnalysisFrames(width, height)
    assert analysis._rows is not None and analysis._rows.fits(frame)
    assert np.array_equal(analysis.small(frame), _reference(frame, analysis.size))


@pytest.mark.parametrize(("width", "height"), [(1921, 1080), (1920, 1081), (1919, 1079)])
def test_odd_sizes_stay_exact(width: int, height: int) -> None:
    """Odd heights take swscale's general scaler (chroma rows blended): the full path, then."""
    frame = av.VideoFrame(width, height, "yuv420p")
    rng = np.random.default_rng(width + height)
    for plane in frame.planes:
        pixels = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)
        pixels[:] = rng.integers(0, 256, pixels.shape, dtype=np.uint8)
    analysis = AnalysisFrames(width, height)
    assert (analysis._rows is not None) == (height % 2 == 0)
    assert np.array_equal(analysis.small(frame), _reference(frame, analysis.size))


def _decoded_frames_agree(path: Path, limit: int | None = None) -> int:
    checked = 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        analysis = AnalysisFrames(stream.codec_context.width, stream.codec_context.height)
        for frame in container.decode(stream):
            assert np.array_equal(analysis.small(frame), _reference(frame, analysis.size)), f"frame {checked}"
            checked += 1
            if checked == limit:
                break
    return checked


@pytest.mark.slow
def test_row_path_is_the_full_path_on_decoded_1080p_frames(tmp_path: Path) -> None:
    clip = write_clip(tmp_path / "hd.mp4", [(0, 12), (1, 12), (2, 12)], size=(1920, 1080))
    assert AnalysisFrames(1920, 1080)._rows is not None
    assert _decoded_frames_agree(clip.path) == 36


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("name", ["counter.mp4", "testvideo.mp4", "fades.mp4"])
def test_analysis_frames_are_the_full_path_on_the_corpus(corpus: Path, name: str) -> None:
    """Every frame of the golden videos (counter.mp4 is 1080p and takes the row path)."""
    path = corpus / "video" / name
    assert _decoded_frames_agree(path) > 0


# --- the combined detector's reduction of the planes ---------------------------------------

# (AVColorSpace, Kr, Kb): unspecified (swscale's BT.601), BT.709, BT.470BG, SMPTE 240M, BT.2020.
MATRICES = [(2, 0.299, 0.114), (1, 0.2126, 0.0722), (5, 0.299, 0.114), (7, 0.212, 0.087), (9, 0.2627, 0.0593)]


def _picture(width: int, height: int) -> np.ndarray:
    """An RGB picture with smooth ramps, saturated colours, hard edges and a checker."""
    return np.concatenate([scene_frame(k, 3, width, height // 4) for k in range(4)], axis=0)


def _encoded(rgb: np.ndarray, colorspace: int, full: bool, fmt: str = "yuv420p") -> av.VideoFrame:
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(
        format=fmt, dst_colorspace=colorspace if colorspace != 2 else 5, dst_color_range=2 if full else 1,
        interpolation="BICUBIC")
    frame.colorspace, frame.color_range = colorspace, 2 if full else 1
    return frame


@pytest.mark.parametrize(("colorspace", "kr", "kb"), MATRICES)
@pytest.mark.parametrize("full", [False, True])
def test_signal_frames_are_the_picture_s_luma_and_colours(colorspace: int, kr: float, kb: float, full: bool) -> None:
    """The grey frame is the picture's luma under the frame's matrix (range stretched to 0-255) and
    the thumbnail its colours, whatever the matrix and range."""
    rgb = _picture(640, 360)
    reduce = SignalFrames(640, 360)
    sharp, signals = reduce.signals(_encoded(rgb, colorspace, full))
    luma = rgb.astype(np.float64) @ np.array([kr, 1 - kr - kb, kb])
    expected = cv2.resize(luma.astype(np.float32), reduce.size, interpolation=cv2.INTER_LINEAR)
    assert signals.grey.shape == (reduce.size[1], reduce.size[0]) and signals.grey.dtype == np.uint8
    assert np.abs(signals.grey - expected).mean() < 1.0
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    small = cv2.resize(bgr, reduce.size, interpolation=cv2.INTER_LINEAR)
    thumb = frame_signals(small, cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)).thumb
    assert signals.thumb.shape == thumb.shape == (reduce.thumb[1], reduce.thumb[0], 3)
    assert np.abs(signals.thumb - thumb).mean() < 3.0
    assert sharp == grey_sharpness(signals.grey) > 0


@pytest.mark.parametrize(("size", "expected"), [
    ((640, 360), (320, 180)), ((360, 640), (180, 320)), ((854, 480), (427, 240)), ((720, 576), (360, 288)),
    ((895, 503), (447, 251)), ((512, 288), (256, 144)), ((896, 504), (448, 252)), ((1280, 720), (320, 180)),
    ((1920, 1080), (480, 270)), ((3840, 2160), (480, 270)),  # halved until under 512 pixels long
    ((511, 287), (256, 144)), ((320, 180), (256, 144)), ((200, 112), (200, 112)),  # else PySceneDetect's ~256
])
def test_signal_size_halves_frames_512_pixels_long_and_more(size: tuple[int, int], expected: tuple[int, int]) -> None:
    reduce = SignalFrames(*size)
    assert signal_size(*size) == reduce.size == expected
    assert reduce.halved is (max(size) >= 512)
    assert reduce.factor == size[0] / expected[0]
    if not reduce.halved:
        assert reduce.size == AnalysisFrames(*size).size


@pytest.mark.parametrize("fmt", ["nv12", "yuv420p10le", "rgb24", "gray", "yuv422p", "yuvj420p"])
def test_other_pixel_formats_give_the_planar_path_s_signals(fmt: str) -> None:
    """Up to their resampling filters (swscale's and OpenCV's), so on a picture without fine detail."""
    rgb = cv2.GaussianBlur(_picture(854, 480), (0, 0), 3)
    reduce = SignalFrames(854, 480)
    # RGB and grey frames carry no matrix: the grey frame is their BT.601 luma (swscale's default).
    _, planar = reduce.signals(_encoded(rgb, 2 if fmt in ("rgb24", "gray") else 1, False))
    if fmt == "rgb24":
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
    else:
        frame = _encoded(rgb, 1, fmt == "yuvj420p", fmt)
    _, other = reduce.signals(frame)
    assert other.grey.shape == planar.grey.shape and other.thumb.shape == planar.thumb.shape
    assert np.abs(other.grey.astype(np.float32) - planar.grey).mean() < 2.0
    if fmt != "gray":  # grey has no colours to compare
        assert np.abs(other.thumb - planar.thumb).mean() < 4.0


def _exact_sharpness(grey: np.ndarray) -> float:
    """The rule itself: OpenCV's Laplacian, its sum and sum of squares as Python integers."""
    values = [int(v) for v in cv2.Laplacian(grey, cv2.CV_16S).ravel()]
    n = len(values)
    mean = sum(values) / n
    return sum(v * v for v in values) / n - mean * mean


def test_sharpness_is_the_exact_variance_of_the_laplacian_in_c_and_numpy() -> None:
    """Both forms (the C pass where it was built, 64-bit sums of OpenCV's Laplacian otherwise) give
    the exact value on every small size (the reflected borders of 1- and 2-pixel sides), on large
    random frames, on views with padded rows, and at the extremes of the Laplacian."""
    rng = np.random.default_rng(11)
    frames = [rng.integers(0, 256, (h, w), dtype=np.uint8) for h in range(1, 7) for w in range(1, 7) for _ in range(3)]
    frames += [rng.integers(0, 256, (int(h), int(w)), dtype=np.uint8) for h, w in rng.integers(1, 400, (30, 2))]
    frames += [rng.integers(0, 256, (37, 300), dtype=np.uint8)[:, 7:260] for _ in range(5)]  # strided rows
    checker = np.indices((9, 2100)).sum(axis=0) % 2 * 255  # every inner pixel at +-1020: the widest chunk sums
    frames += [checker.astype(np.uint8), np.zeros((4, 4), np.uint8), np.full((3, 5), 255, np.uint8)]
    for grey in frames:
        exact = _exact_sharpness(grey)
        assert shots._numpy_sharpness(grey) == exact, grey.shape
        if shots._sharp is not None:
            assert shots._sharp.variance(grey) == exact, grey.shape
        assert grey_sharpness(grey) == exact


def test_the_c_sharpness_reads_only_2d_byte_frames() -> None:
    if shots._sharp is None:
        pytest.skip("built without a C compiler: the numpy form is used")
    for other in (np.zeros((4, 4), np.float32), np.zeros((4, 4, 3), np.uint8), np.zeros(5, np.uint8),
                  np.zeros((4, 4), np.uint8)[:, ::2], b"not a frame", np.zeros((0, 4), np.uint8)):
        assert shots._sharp.variance(other) is None


def test_the_c_sharpness_was_built_where_a_compiler_was() -> None:
    if not can_compile():
        pytest.skip("no C compiler or Python headers here: the package installs without the C pass")
    assert shots._sharp is not None, "installed with a C compiler, but workers/video/_sharp.c was not built"


@pytest.mark.parametrize(("size", "halved"), [((640, 360), True), ((1280, 720), True), ((400, 224), False)])
def test_signal_frames_on_decoded_video_are_the_exact_frame_s_grey(tmp_path: Path, size: tuple[int, int],
                                                                   halved: bool) -> None:
    """On real decoded frames the grey frame is what the exact frame gives in grey at the analysis
    size (PySceneDetect's analysis frame, or the full-size frame halved where the planes are), up
    to rounding and the 1-2 levels swscale's fast converter loses (it rounds down), and the
    thumbnails agree."""
    clip = write_clip(tmp_path / "c.mp4", [(0, 10), (3, 10)], size=size)
    exact, reduce = AnalysisFrames(*size), SignalFrames(*size)
    assert reduce.halved is halved and reduce.size == signal_size(*size)
    assert reduce.size == ((320, 180) if halved else exact.size)
    with av.open(str(clip.path)) as container:
        for frame in container.decode(video=0):
            if halved:
                small = cv2.resize(exact.bgr(frame), reduce.size, interpolation=cv2.INTER_AREA)
            else:
                small = exact.small(frame)
            grey = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY)
            _, signals = reduce.signals(frame)
            difference = signals.grey.astype(np.int16) - grey
            assert 0 <= difference.mean() < 2.0 and np.abs(difference - difference.mean()).mean() < 0.7  # 720p: halved twice, rounded twice
            assert np.abs(signals.thumb - frame_signals(small, grey).thumb).mean() < 2.0


# --- the decoding helper thread --------------------------------------------------------------


def _read(path: Path, threads: int) -> list[tuple[int, int, bytes]]:
    with open_video(path, LIMITS) as probe, FrameReader(probe, threads, LIMITS) as reader:
        return [(index, pts, bytes(frame.planes[0])) for index, pts, frame, _ in reader]


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mediafleet-video-")]


@pytest.fixture(params=["prepare thread", "prepare in caller"])
def prepare_thread(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both ways the reader runs ``prepare`` with helpers (the thread is used from 720p up)."""
    threaded = request.param == "prepare thread"
    monkeypatch.setattr(decode, "_PREPARE_THREAD_PIXELS", 0 if threaded else 10**9)
    return threaded


def test_the_helper_threads_hand_over_the_same_frames_in_order(tmp_path: Path, prepare_thread: bool) -> None:
    clip = write_clip(tmp_path / "c.mp4", [(0, 30), (1, 30)])
    assert _read(clip.path, 2) == _read(clip.path, 1)
    with open_video(clip.path, LIMITS) as probe, FrameReader(probe, 2, LIMITS) as reader:
        prepared = [(index, value) for index, _, _, value in
                    reader.frames(prepare=lambda f: (f.pts, threading.current_thread().name))]
    where = "mediafleet-video-prepare" if prepare_thread else threading.current_thread().name
    assert prepared == [(index, (pts, where)) for index, pts, _ in _read(clip.path, 1)]
    assert not _helpers()


def test_a_failing_prepare_step_reaches_the_caller(tmp_path: Path, prepare_thread: bool) -> None:
    clip = write_clip(tmp_path / "c.mp4", [(0, 30)])

    def prepare(frame: av.VideoFrame) -> None:
        if frame.pts >= 5:
            raise ValueError("prepare failed")

    for threads in (1, 2):
        with (
            open_video(clip.path, LIMITS) as probe,
            FrameReader(probe, threads, LIMITS) as reader,
            pytest.raises(ValueError, match="prepare failed"),
        ):
            for _ in reader.frames(prepare=prepare):
                pass
        assert not _helpers()


def test_leaving_the_reader_early_stops_its_threads(tmp_path: Path, prepare_thread: bool) -> None:
    clip = write_clip(tmp_path / "c.mp4", [(0, 60)])
    with open_video(clip.path, LIMITS) as probe, FrameReader(probe, 2, LIMITS) as reader:
        for index, _, _, _ in reader.frames(prepare=lambda f: f.pts):
            if index == 3:
                break
        # The generator is suspended, not finished: leaving the with block must still stop the threads.
    assert not _helpers()


def test_decoding_errors_reach_the_caller_with_the_same_message(tmp_path: Path) -> None:
    clip = write_clip(tmp_path / "c.mp4", [(0, 40), (1, 40)])
    data = bytearray(clip.path.read_bytes())
    for k in range(len(data) // 3, len(data) // 3 + 4000, 5):
        data[k] ^= 0xFF
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(bytes(data))
    messages = []
    for threads in (1, 2):
        with pytest.raises(InputRejected) as info:
            _read(bad, threads)
        messages.append(info.value.message)
    assert messages[0] == messages[1] and "corrupt" in messages[0]
