"""Failure 11 of issue 11: a claim is verified only when the artifact was read whole.

A WebM cut short still declares its full length in the segment header (Matroska has no per-stream
duration); its frames stopping early must give ``corrupt_input``, as a truncated MP4 does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.errors import ErrorCode, InputRejected
from contract.manifest import default_manifest
from contract.video import VideoOptions
from tests.test_video_clips import write_clip
from workers.video.extract import extract_keyframes

LIMITS = default_manifest().capability("extract_keyframes").limits


@pytest.fixture(scope="module")
def webm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("webm") / "clip.webm"
    write_clip(path, [(0, 25), (1, 25), (2, 25)], codec="libvpx")  # 3.0 s, video only
    return path


def test_a_whole_webm_reads(webm: Path) -> None:
    result = extract_keyframes(webm, VideoOptions(speech=False), LIMITS)
    assert len(result.shots) == 3


def test_a_webm_cut_short_is_corrupt_input(webm: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.webm"
    cut.write_bytes(webm.read_bytes()[: int(webm.stat().st_size * 0.45)])
    with pytest.raises(InputRejected) as err:
        extract_keyframes(cut, VideoOptions(speech=False), LIMITS)
    assert err.value.code == ErrorCode.CORRUPT_INPUT and "truncated" in err.value.message
