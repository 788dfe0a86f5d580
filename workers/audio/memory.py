"""Big buffers reused while Whisper runs on the CPU, instead of handed back to the kernel and faulted in again.

CTranslate2's encoder allocates each layer's attention scores afresh (6 heads x 1,500 x 1,500
float32: 54 MB for one 30-second window, in each of tiny.en's four layers) and frees them at
once. glibc serves a block that big with ``mmap`` and unmaps it when it is freed, so every layer
of every window faults 54 MB of fresh zeroed pages in again: 10 minutes of speech cost ~1.9
million page faults and ~3.9 CPU seconds in the kernel, 15% of the whole path (plain
faster-whisper pays the same). So, while a transcription runs, glibc takes big blocks from the
heap and keeps what is freed for the next one (``M_MMAP_MAX`` 0, ``M_TRIM_THRESHOLD`` raised);
when it ends, the free memory goes back to the kernel (``malloc_trim``) and big blocks are
mmapped again (at the 32 MB threshold glibc's own dynamic rule reaches for big buffers).

CTranslate2 computes on a thread of its own, and glibc gives such a thread an arena of 64 MB
heaps, each unmapped as soon as it empties, whatever the settings above: so the CPU engine is
built while glibc creates no arena beyond its main one (:func:`one_arena`), and a process that
loads it allocates from that one arena from then on.

Linux with glibc only; elsewhere (musl, macOS) nothing is changed. Nothing here changes a number
the model computes, only where its memory comes from.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

__all__ = ["held_allocations", "one_arena"]

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8

_HELD_TRIM = 1 << 30  # free memory kept at the heap's top while held
_MMAP_MAX = 65536  # glibc's default count of mmapped blocks
_MMAP_THRESHOLD = 32 << 20  # where glibc's dynamic threshold ends up for big buffers (DEFAULT_MMAP_THRESHOLD_MAX)
_TRIM_THRESHOLD = 2 * _MMAP_THRESHOLD  # and the trim threshold with it

_lock = threading.Lock()
_holders = 0


@cache
def _glibc() -> Any | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


def one_arena() -> None:
    """Create no glibc arena beyond the main one from now on: call before the engine's threads start."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_ARENA_MAX, 1)


@contextmanager
def held_allocations() -> Iterator[None]:
    """Keep freed memory for reuse inside the block; give it back when the last holder leaves."""
    global _holders
    libc = _glibc()
    if libc is None:
        yield
        return
    with _lock:
        _holders += 1
        if _holders == 1:
            libc.mallopt(_M_MMAP_MAX, 0)
            libc.mallopt(_M_TRIM_THRESHOLD, _HELD_TRIM)
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                libc.mallopt(_M_MMAP_MAX, _MMAP_MAX)
                libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
                libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
                libc.malloc_trim(0)
