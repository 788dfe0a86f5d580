"""Small real videos with known cuts, written with PyAV (libx264), for the video tests.

Each scene is a distinct synthetic picture (its own hue, brightness and checker size) with a small
square moving across it, so hard cuts fall exactly on scene boundaries and nothing inside a scene
looks like a cut. The helpers return what the clip is known to hold.
"""

from __future__ import annotations

import colorsys
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

__all__ = ["Clip", "scene_frame", "write_clip"]


@dataclass(frozen=True)
class Clip:
    path: Path
    cuts: list[int]  # 0-based first frame of every scene after the first
    frames: int
    times: list[Fraction]  # presentation time of each frame, seconds (containers may rescale pts)

    def ms(self, index: int) -> int:
        """Frame ``index``'s time in milliseconds, nearest (halves up), as the fleet reports it."""
        return int(self.times[index] * 1000 + Fraction(1, 2))


def scene_frame(scene: int, t: int, width: int, height: int) -> np.ndarray:
    """Frame ``t`` of synthetic scene ``scene`` as RGB."""
    r, g, b = colorsys.hsv_to_rgb((scene * 0.137) % 1.0, 0.55 + 0.4 * ((scene * 7) % 3) / 2, 0.35 + 0.2 * (scene % 4))
    base = np.array([r, g, b]) * 255
    cell = 6 + 5 * (scene % 5)
    yy, xx = np.mgrid[0:height, 0:width]
    checker = ((yy // cell + xx // cell) % 2).astype(np.float64)[..., None]
    # A brightness ramp in a direction of the scene's own: strong, stable low frequencies (pHash).
    angle = scene * 1.1
    ramp = np.cos(angle) * xx / width + np.sin(angle) * yy / height
    ramp = ((ramp - ramp.min()) / max(np.ptp(ramp), 1e-9))[..., None]
    image = base * (0.45 + 0.45 * ramp + 0.15 * checker)
    # A darker band whose place and direction differ between scenes, so their greys differ too.
    third = scene % 3
    if scene % 2:
        image[third * height // 3 : (third + 1) * height // 3] *= 0.45
    else:
        image[:, third * width // 3 : (third + 1) * width // 3] *= 0.45
    side = max(4, height // 12)
    x = (4 + 3 * t) % max(1, width - side)
    y = height // 2 - side // 2
    image[y : y + side, x : x + side] = 255 - base
    return image.clip(0, 255).astype(np.uint8)


def write_clip(
    path: Path,
    scenes: Sequence[tuple[int, int]],
    *,
    size: tuple[int, int] = (320, 180),
    rate: Fraction = Fraction(25),
    time_base: Fraction | None = None,
    steps: Sequence[int] | None = None,
    start_pts: int = 0,
    rotation: int | None = None,
    audio_s: float | None = None,
    audio_file: Path | None = None,
    audio_start_s: Fraction = Fraction(0),
    codec: str = "libx264",
    faststart: bool = True,
) -> Clip:
    """Write ``scenes`` (``(scene id, frame count)`` each) as one video.

    Args:
        size: coded width and height.
        rate: nominal frame rate; with ``time_base`` None the time base is ``1/rate``.
        steps: per-frame pts steps (cycled) for a variable frame rate, in ``time_base`` ticks.
        start_pts: pts of the first frame (a late start when an audio track starts at 0).
        rotation: display-matrix rotation as PyAV sets it (degrees counter-clockwise).
        audio_s: add a 440 Hz AAC track of this length starting at 0.
        audio_file: add this recording's sound as an AAC track (16 kHz mono) instead...
        audio_start_s: ...starting at this time (a track that starts after the video).
    """
    width, height = size
    tb = time_base or Fraction(1) / rate
    options = {"movflags": "faststart"} if faststart and path.suffix in (".mp4", ".mov") else {}
    out = av.open(str(path), "w", options=options)
    video = out.add_stream(codec, rate=rate)
    video.width, video.height, video.pix_fmt = width, height, "yuv420p"
    video.time_base = tb
    video.codec_context.time_base = tb
    if codec == "libx264":
        video.options = {"crf": "18", "preset": "ultrafast"}
    if rotation is not None:
        video.set_display_rotation(rotation)
    if audio_s is not None or audio_file is not None:
        audio = out.add_stream("aac", rate=16000)
        audio.layout = "mono"
        if audio_file is not None:
            resampler = av.AudioResampler(format="fltp", layout="mono", rate=16000)
            with av.open(str(audio_file)) as source:
                pieces = [f.to_ndarray() for frame in source.decode(audio=0) for f in resampler.resample(frame)]
            samples = np.concatenate(pieces, axis=1)[0]
        else:
            samples = (0.2 * np.sin(2 * np.pi * 440 * np.arange(int(16000 * audio_s)) / 16000)).astype(np.float32)
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="fltp", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = 16000, int(audio_start_s * 16000), Fraction(1, 16000)
        for packet in [*audio.encode(frame), *audio.encode(None)]:
            out.mux(packet)
    cuts: list[int] = []
    pts_list: list[int] = []
    index, pts = 0, start_pts
    default_step = max(1, round(1 / (rate * tb)))
    for number, (scene, count) in enumerate(scenes):
        if number:
            cuts.append(index)
        for t in range(count):
            frame = av.VideoFrame.from_ndarray(scene_frame(scene, t, width, height), format="rgb24")
            frame.pts, frame.time_base = pts, tb
            pts_list.append(pts)
            for packet in video.encode(frame):
                out.mux(packet)
            pts += steps[index % len(steps)] if steps else default_step
            index += 1
    for packet in video.encode(None):
        out.mux(packet)
    out.close()
    return Clip(path=path, cuts=cuts, frames=index, times=[p * tb for p in pts_list])
