"""The clip writer the video tests use (tests/clips.py) writes exactly the frames and times it says."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av

from tests.clips import write_clip


def test_a_written_clip_decodes_to_its_frames_and_timestamps(tmp_path: Path) -> None:
    clip = write_clip(tmp_path / "c.mp4", [(0, 20), (1, 20)], steps=[1, 3], time_base=Fraction(1, 50))
    with av.open(str(clip.path)) as container:
        decoded = [f.pts * f.time_base for f in container.decode(video=0)]
    assert decoded == clip.times
    assert clip.cuts == [20] and clip.frames == 40
