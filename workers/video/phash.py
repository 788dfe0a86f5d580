"""Keyframe pHashes, the same as the image capability's, and near-duplicate marking.

The hash is :func:`mediafleet.workers.image.phash.phash` (the ``imagehash`` recipe: grey, 32x32 Lanczos, DCT,
8x8 low frequencies against their median), so a keyframe's pHash compares directly with an
image's from ``analyze_image``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

from mediafleet.workers.image.phash import phash as image_phash

__all__ = ["hamming", "near_duplicates", "phash", "phash_hex"]


def phash(bgr: np.ndarray) -> int:
    """The 64-bit pHash of an upright BGR frame.

    Pillow reads the BGR bytes as RGB itself (its raw ``BGR`` mode): the same RGB image as
    converting first, without a full-size conversion and copy.
    """
    bgr = np.ascontiguousarray(bgr)
    height, width = bgr.shape[:2]
    return int(image_phash(Image.frombuffer("RGB", (width, height), bgr, "raw", "BGR", 0, 1)), 16)


def phash_hex(value: int) -> str:
    return f"{value:016x}"


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def near_duplicates(hashes: Sequence[int], distance: int) -> list[tuple[int, int] | None]:
    """For each hash, ``(index, bits)`` of the first earlier hash within ``distance`` bits, else None.

    Marks, never drops: the caller keeps every keyframe and says which repeat an earlier one.
    """
    out: list[tuple[int, int] | None] = []
    for index, value in enumerate(hashes):
        match = None
        for earlier in range(index):
            bits = hamming(value, hashes[earlier])
            if bits <= distance:
                match = (earlier, bits)
                break
        out.append(match)
    return out
