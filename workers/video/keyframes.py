"""Keyframes picked during the one decoding pass: no seeking back, bounded memory.

The rule: a shot of ``n`` frames is split into buckets of ``B`` consecutive frames (from its first
frame), where ``B`` is the smallest power of two that leaves at most :data:`MAX_BUCKETS` buckets,
i.e. roughly ``n/8`` to ``n/4`` frames each. The keyframe is the sharpest frame (variance of the
Laplacian of the analysis frame; the earliest on a tie) of the bucket that holds the shot's middle
frame ``first + (n - 1) // 2``. Since the shot's length is unknown until its cut is found, the
picker keeps the sharpest decoded frame of each bucket and, whenever a ninth bucket would open,
doubles ``B`` by merging neighbours pairwise; so it holds at most nine decoded frames per shot and
the choice is exactly the rule above.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import cv2
import numpy as np

__all__ = ["MAX_BUCKETS", "Candidate", "KeyframePicker", "encode_image", "upright"]

MAX_BUCKETS = 8
_JPEG_QUALITY = 90
_PNG_COMPRESSION = 3


class Candidate(NamedTuple):  # one a frame: a tuple costs a fifth of a frozen dataclass to make
    index: int
    pts: int
    sharpness: float
    frame: Any


class KeyframePicker:
    """Collects one shot's frames (in order) and picks its keyframe by the module's rule."""

    def __init__(self, first_index: int) -> None:
        self.first = first_index
        self.size = 1
        self.best: list[Candidate] = []

    def add(self, candidate: Candidate) -> None:
        bucket = (candidate.index - self.first) // self.size
        while bucket >= MAX_BUCKETS:
            self.best = [max(self.best[i : i + 2], key=_rank) for i in range(0, len(self.best), 2)]
            self.size *= 2
            bucket = (candidate.index - self.first) // self.size
        if bucket == len(self.best):
            self.best.append(candidate)
        elif candidate.sharpness > self.best[bucket].sharpness:
            self.best[bucket] = candidate

    def pick(self, last_index: int) -> Candidate:
        """The keyframe of the shot that ends at ``last_index``."""
        middle = self.first + (last_index - self.first) // 2
        return self.best[(middle - self.first) // self.size]


def _rank(candidate: Candidate) -> tuple[float, int]:
    # Sharpest first; on a tie the earlier frame (a larger negative index ranks lower).
    return candidate.sharpness, -candidate.index


_ROTATE = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}


def upright(image: np.ndarray, rotation: int) -> np.ndarray:
    """The frame as displayed: turned ``rotation`` degrees clockwise."""
    return cv2.rotate(image, _ROTATE[rotation]) if rotation else image


def encode_image(bgr: np.ndarray, image_format: str) -> tuple[bytes, str]:
    """Encode an upright BGR frame: JPEG quality 90 or PNG (lossless); returns bytes and media type."""
    if image_format == "png":
        ok, data = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, _PNG_COMPRESSION])
        media_type = "image/png"
    else:
        ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, _JPEG_QUALITY])
        media_type = "image/jpeg"
    if not ok:
        raise RuntimeError("image encoding failed")
    return data.tobytes(), media_type
