"""A 64-bit DCT perceptual hash and near-duplicate marking.

The hash follows the usual pHash recipe (as in the ``imagehash`` package): the grey image shrunk
to 32x32, its 2-D DCT, the 8x8 lowest frequencies compared with their median, one bit each, the
top-left coefficient as the most significant bit. The shrink uses OpenCV's area interpolation, so
values may differ from ``imagehash`` by a bit or two on the same image; within the fleet they are
stable.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

__all__ = ["hamming", "near_duplicates", "phash", "phash_hex"]


def phash(grey: np.ndarray) -> int:
    """The 64-bit pHash of a 2-D uint8 image."""
    small = cv2.resize(grey, (32, 32), interpolation=cv2.INTER_AREA).astype(np.float32)
    low = cv2.dct(small)[:8, :8]
    bits = (low > np.median(low)).ravel()
    value = 0
    for bit in bits:
        value = (value << 1) | int(bit)
    return value


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
