"""The standard DCT perceptual hash (pHash), 64 bits as 16 hex characters.

As in the ``imagehash`` library's ``phash``: the image in grayscale, resized to 32x32 with a
Lanczos filter; the 2-D DCT-II (unnormalised); its top-left 8x8 low frequencies compared with
their median, row by row, most significant bit first. (OpenCV's ``img_hash`` is not in the
wheels this fleet installs, and its DCT is normalised differently.)
"""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["hamming", "phash"]

_SIZE = 32
_LOW = 8
_n = np.arange(_SIZE)
# DCT-II as SciPy computes it by default: y_k = 2 * sum_n x_n cos(pi k (2n + 1) / 2N)
_DCT = 2.0 * np.cos(np.pi * _n[:, None] * (2 * _n[None, :] + 1) / (2 * _SIZE))


def phash(image: Image.Image) -> str:
    """The 64-bit pHash of ``image`` as 16 lowercase hex characters."""
    small = image.convert("L").resize((_SIZE, _SIZE), Image.Resampling.LANCZOS)
    pixels = np.asarray(small, dtype=np.float64)
    low = (_DCT @ pixels @ _DCT.T)[:_LOW, :_LOW]
    bits = (low > np.median(low)).flatten()
    value = 0
    for bit in bits:
        value = (value << 1) | int(bit)
    return f"{value:016x}"


def hamming(a: str, b: str) -> int:
    """Bits that differ between two hashes."""
    return (int(a, 16) ^ int(b, 16)).bit_count()
