"""The semantic channel's text vectors: static embeddings from the model inside the ``wordllama`` wheel.

The model is WordLlama's ``l2_supercat`` at 256 dimensions (MIT licence, shipped in the PyPI wheel
``wordllama`` as ``weights/l2_supercat_256.safetensors`` with its tokenizer file): a table of one
vector per token of the Llama 2 tokenizer (32,000 x 256), distilled from large models' input
embeddings. A text's vector is the mean of its tokens' vectors, centred on the table's mean
vector (all-but-the-top: the shared direction every mean carries says nothing about the text) and
scaled to unit length. There is no network in any of it: the two files are read from the
installed package, never through ``WordLlama.load`` (which looks for a cache and a download first).

Both sides embed the matched form of the text (folded and normalised,
:func:`mediafleet.discovery.text.matched_form`), so "Mr." and "mister" are one token sequence.
Vectors are stored as 256 signed bytes (each component x 127, rounded; the cosine of two stored
vectors is within ~0.01 of the exact one) and searched as their 256 sign bits first.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from importlib import metadata, resources
from typing import Any

__all__ = ["DIMENSIONS", "MODEL_ID", "StaticEmbedder", "default_embedder", "quantise", "sign_bits"]

DIMENSIONS = 256
MODEL_ID = "wordllama/l2_supercat_256"
_WEIGHTS = "weights/l2_supercat_256.safetensors"
_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
_MAX_TOKENS = 512  # a unit's vector is the mean of its first 512 tokens
_BATCH = 128  # texts embedded together (their tokens' vectors are gathered at once: kept small for the cache)


class StaticEmbedder:
    """Unit-length text vectors from the wheel's static token embeddings.

    Raises:
        ImportError: ``wordllama`` (or ``safetensors``, ``tokenizers``, ``numpy``) is not installed:
            ``pip install 'mediafleet[discovery]'``.
    """

    def __init__(self) -> None:
        try:
            import numpy as np
            from safetensors import safe_open
            from tokenizers import Tokenizer

            package = resources.files("wordllama")
        except ImportError as exc:  # a missing model is a refusal, never a silent fallback
            raise ImportError("the semantic channel needs wordllama: pip install 'mediafleet[discovery]'") from exc
        weights, tokenizer = package / _WEIGHTS, package / _TOKENIZER
        with resources.as_file(weights) as path:
            with safe_open(str(path), framework="np") as fh:
                table = fh.get_tensor("embedding.weight").astype(np.float32)
            self.digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        with resources.as_file(tokenizer) as path:
            self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._np = np
        self._table = table - table.mean(axis=0)
        self.version = metadata.version("wordllama")
        self.model_id = MODEL_ID

    def embed(self, texts: list[str]) -> Any:
        """``(len(texts), 256)`` float32, each row unit length (zero for a text with no token)."""
        np = self._np
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        for first in range(0, len(texts), _BATCH):
            encodings = self._tokenizer.encode_batch(texts[first:first + _BATCH], add_special_tokens=False)
            lengths = np.array([min(len(e.ids), _MAX_TOKENS) for e in encodings], dtype=np.int64)
            some = np.flatnonzero(lengths)
            if not len(some):
                continue
            ids = np.fromiter(itertools.chain.from_iterable(e.ids[:_MAX_TOKENS] for e in encodings), dtype=np.int64,
                              count=int(lengths.sum()))
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))[some]
            sums = np.add.reduceat(self._table[ids], starts, axis=0)  # the mean's direction: the sum's
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            out[first + some] = np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)
        return out


def quantise(vectors: Any) -> Any:
    """Unit vectors as signed bytes (x 127, rounded): what is stored."""
    import numpy as np

    return np.clip(np.rint(vectors * 127.0), -127, 127).astype(np.int8)


def sign_bits(vectors: Any) -> Any:
    """Each vector's 256 sign bits, packed into 32 bytes (bit 1: the component is positive)."""
    import numpy as np

    return np.packbits(vectors > 0, axis=-1, bitorder="little")


_default: list[StaticEmbedder] = []
_default_lock = threading.Lock()


def default_embedder() -> StaticEmbedder:
    """One embedder per process (the table is 32 MB), loaded on first use."""
    with _default_lock:
        if not _default:
            _default.append(StaticEmbedder())
        return _default[0]
