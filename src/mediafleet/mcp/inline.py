"""An inline artifact, ``artifact_b64`` inside ``params_json``, decoded into a file in bounded memory.

``params_json`` arrives as one string. Parsing it whole would copy the base64 text once more and
decoding it whole would hold every byte of the artifact besides: three copies of a large artifact
at once. Instead the base64 value is found in place (:func:`split_params`), the rest of the
object is parsed as usual, and the value is decoded a few MiB at a time into a temporary file
(:func:`decode_into`), hashing as it goes (the SHA-256 of the bytes and of each 1 MiB chunk, for
the callers' engine digest), so the extra memory is one step's worth whatever the artifact's size.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mediafleet.mcp.caller_digest import ENGINE_CHUNK_SIZE, ChunkHashes

__all__ = ["DECODE_STEP", "Decoded", "NotBase64", "b64_size", "decode_into", "split_params"]

# Base64 characters decoded per step (a multiple of 4): 3 MiB of bytes.
DECODE_STEP = 4 * 1024 * 1024
_KEY = re.compile(r'"artifact_b64"\s*:\s*"')
_ALPHABET = re.compile(r"[A-Za-z0-9+/]*={0,2}", re.ASCII)


class NotBase64(ValueError):
    """The text is not standard, padded base64."""


@dataclass
class Decoded:
    """An artifact decoded into ``file`` (positioned at its start): its size, SHA-256, 1 MiB-chunk
    hashes and first bytes."""

    file: IO[bytes]
    size: int
    sha256_hex: str
    chunks: ChunkHashes
    head: bytes = field(repr=False)


def split_params(params_json: str) -> tuple[str, tuple[int, int] | None]:
    """``params_json`` with the value of ``artifact_b64`` emptied, and that value's ``(start, end)``
    in ``params_json``; ``(params_json, None)`` when the value cannot be taken in place (no such
    key, or a JSON escape inside it), and the caller parses the whole text.

    The emptied text must still be checked: parsed, its top-level ``artifact_b64`` must be ``""``.
    """
    match = _KEY.search(params_json)
    if match is None:
        return params_json, None
    start = match.end()
    end = params_json.find('"', start)
    if end < 0 or params_json.find("\\", start, end) >= 0:
        return params_json, None
    return params_json[:start] + params_json[end:], (start, end)


def b64_size(text: str, span: tuple[int, int]) -> int:
    """The decoded size of the standard, padded base64 ``text[start:end]``, from its length alone.

    Raises:
        NotBase64: its length is not a multiple of 4.
    """
    start, end = span
    length = end - start
    if length % 4:
        raise NotBase64("not padded base64")
    padding = (text[end - 2:end].count("=") if length else 0)
    return length // 4 * 3 - padding


class _Chunks:
    """SHA-256 of each ``chunk_size`` chunk of a stream fed in pieces of any size."""

    def __init__(self, chunk_size: int) -> None:
        self.chunk_size, self.hashes, self.lengths = chunk_size, [], []  # type: ignore[var-annotated]
        self._current, self._fill = hashlib.sha256(), 0

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            take = min(self.chunk_size - self._fill, len(view))
            self._current.update(view[:take])
            self._fill += take
            view = view[take:]
            if self._fill == self.chunk_size:
                self._close()

    def _close(self) -> None:
        self.hashes.append(self._current.hexdigest())
        self.lengths.append(self._fill)
        self._current, self._fill = hashlib.sha256(), 0

    def done(self) -> ChunkHashes:
        if self._fill:
            self._close()
        return ChunkHashes(hashes=tuple(self.hashes), lengths=tuple(self.lengths), total=sum(self.lengths),
                           chunk_size=self.chunk_size)


def decode_into(text: str, span: tuple[int, int], *, step: int = DECODE_STEP, directory: Path | None = None,
                chunk_size: int = ENGINE_CHUNK_SIZE, head_bytes: int = 4096) -> Decoded:
    """Decode the base64 ``text[start:end]`` into a temporary file (in ``directory``: beside the blob
    store, so a large artifact is not written to a small ``/tmp``), ``step`` characters at a time.

    Raises:
        NotBase64: a character outside the standard alphabet, padding anywhere but at the end, or
            a length that is not a multiple of 4.
    """
    if step <= 0 or step % 4:
        raise ValueError("step must be a positive multiple of 4")
    start, end = span
    if (end - start) % 4:
        raise NotBase64("not padded base64")
    out: IO[bytes] = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 - Decoded hands it on; its reader closes it
    whole, chunks, head, size = hashlib.sha256(), _Chunks(chunk_size), b"", 0
    try:
        for first in range(start, end, step):
            piece = text[first:min(first + step, end)]
            last = first + step >= end
            # Padding only at the very end: a piece ending in "=" before the last would decode short.
            if not _ALPHABET.fullmatch(piece) or (not last and piece.endswith("=")):
                raise NotBase64("not standard base64")
            try:
                data = base64.b64decode(piece, validate=True)
            except (binascii.Error, ValueError):
                raise NotBase64("not standard base64") from None
            whole.update(data)
            chunks.feed(data)
            if len(head) < head_bytes:
                head += data[:head_bytes - len(head)]
            size += len(data)
            out.write(data)
        out.seek(0)
    except BaseException:
        out.close()
        raise
    return Decoded(file=out, size=size, sha256_hex=whole.hexdigest(), chunks=chunks.done(), head=head)
