"""The speaker encoder's weights, read from resemblyzer's ``pretrained.pt`` without torch.

The encoder is the one bundled in the ``resemblyzer`` wheel (Apache-2.0): a 3-layer LSTM over
40-channel mel frames whose last hidden state, through a linear layer and a ReLU, is L2-normalised
into a 256-d voice embedding. Only the wheel's data file is used: the package itself imports torch,
so it is installed without its dependencies (``pip install --no-deps``) and never imported; the
file is found through the distribution's metadata.

``pretrained.pt`` is torch's legacy serialisation (before torch 1.6): five pickles back to back
(a magic number, the protocol version, the writer's type sizes, the checkpoint, the storage keys)
followed by each storage's element count and raw little-endian bytes. The checkpoint pickle is read
by an Unpickler that resolves only the few globals a tensor checkpoint names (``OrderedDict``,
``torch._utils._rebuild_tensor_v2``, the float storage types) to numpy builders and refuses any
other, so reading the file runs no code from it.
"""

from __future__ import annotations

import collections
import pickle
import struct
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mediafleet.contract.common import ModelRef
from mediafleet.contract.digests import hash_file
from mediafleet.contract.errors import Unavailable

__all__ = ["PACKAGE", "EncoderWeights", "encoder_weights", "read_checkpoint", "weights_file"]

PACKAGE = "resemblyzer"
_FILE = "resemblyzer/pretrained.pt"
_MAGIC = 0x1950A86A20F9469CFC6C
_PROTOCOL = 1001
_LAYERS = 3
_GATE_ORDER = np.concatenate([np.arange(0, 512), np.arange(768, 1024), np.arange(512, 768)])  # i, f, o, g
_STORAGE_DTYPES = {"FloatStorage": np.dtype("<f4"), "DoubleStorage": np.dtype("<f8"), "HalfStorage": np.dtype("<f2")}


@dataclass(frozen=True)
class EncoderWeights:
    """The encoder's parameters as float32 arrays, named as the checkpoint names them, and its ref."""

    # Per layer: W_ih transposed (in, 1024), W_hh transposed (256, 1024), the two biases summed (1024,),
    # the gates reordered from torch's (input, forget, cell, output) to (input, forget, output, cell),
    # so the three sigmoid gates are adjacent.
    lstm: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]
    linear_weight: np.ndarray  # (256, 256)
    linear_bias: np.ndarray  # (256,)
    ref: ModelRef


@dataclass(frozen=True)
class _Storage:
    key: str
    dtype: np.dtype
    numel: int


@dataclass(frozen=True)
class _TensorView:
    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                    *_rest: Any) -> _TensorView:
    return _TensorView(storage, int(offset), tuple(size), tuple(stride))


class _CheckpointUnpickler(pickle.Unpickler):
    """Builds tensor placeholders; any global other than a tensor checkpoint's own is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        raise pickle.UnpicklingError(f"the checkpoint names {module}.{name}, which a weights file must not")

    def __init__(self, stream: BinaryIO, storages: dict[str, _Storage]) -> None:
        super().__init__(stream)
        self._storages = storages

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[1], np.dtype)):
            raise pickle.UnpicklingError("the checkpoint holds an object other than a tensor storage")
        storage = _Storage(key=str(pid[2]), dtype=pid[1], numel=int(pid[4]))
        return self._storages.setdefault(storage.key, storage)


def read_checkpoint(stream: BinaryIO) -> dict[str, np.ndarray]:
    """The ``model_state`` tensors of a legacy torch checkpoint, as numpy arrays (copies).

    Raises:
        ValueError: not a legacy little-endian torch checkpoint, or one whose tensors do not fit
            their storages.
    """
    try:
        if pickle.load(stream) != _MAGIC or pickle.load(stream) != _PROTOCOL:  # noqa: S301 - ints only
            raise ValueError("not a legacy torch checkpoint")
        storages: dict[str, _Storage] = {}
        info = _CheckpointUnpickler(stream, storages).load()
        if not (isinstance(info, dict) and info.get("little_endian")):
            raise ValueError("a big-endian torch checkpoint")
        checkpoint = _CheckpointUnpickler(stream, storages).load()
        keys = _CheckpointUnpickler(stream, storages).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError) as exc:
        raise ValueError(f"an unreadable torch checkpoint: {exc}") from exc
    state = checkpoint.get("model_state") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, _TensorView) for v in state.values()):
        raise ValueError("the checkpoint has no model_state of tensors")
    wanted = {view.storage.key for view in state.values()}
    raw: dict[str, np.ndarray] = {}
    for key in keys:
        storage = storages.get(str(key))
        header = stream.read(8)
        if storage is None or len(header) != 8:
            raise ValueError("the storages do not match the checkpoint's keys")
        (count,) = struct.unpack("<q", header)
        size = count * storage.dtype.itemsize
        if count != storage.numel or size < 0:
            raise ValueError("a storage's size differs from its tensor's")
        if storage.key not in wanted:
            stream.seek(size, 1)  # the optimiser's state
            continue
        data = stream.read(size)
        if len(data) != size:
            raise ValueError("a storage is shorter than its header says")
        raw[storage.key] = np.frombuffer(data, dtype=storage.dtype)
    tensors = {}
    for name, view in state.items():
        flat = raw.get(view.storage.key)
        if flat is None:
            raise ValueError(f"no storage for {name}")
        extent = view.offset + sum((n - 1) * s for n, s in zip(view.size, view.stride, strict=True)) + 1
        if view.offset < 0 or extent > flat.size:
            raise ValueError(f"{name} lies outside its storage")
        item = flat.itemsize
        tensors[name] = np.lib.stride_tricks.as_strided(
            flat[view.offset:], shape=view.size, strides=tuple(s * item for s in view.stride), writeable=False,
        ).astype(np.float32, copy=True)
    return tensors


def weights_file() -> Path:
    """Where the installed ``resemblyzer`` distribution keeps ``pretrained.pt`` (it is not imported).

    Raises:
        Unavailable: the distribution is not installed, or lacks the file.
    """
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise Unavailable(
            f"no speaker encoder: install {PACKAGE} without its dependencies (pip install --no-deps {PACKAGE}), "
            "or ask for speakers=0"
        ) from exc
    path = Path(str(dist.locate_file(_FILE)))
    if not path.is_file():
        raise Unavailable(f"the installed {PACKAGE} has no {_FILE}; reinstall it")
    return path


@cache
def encoder_weights(path: Path | None = None) -> EncoderWeights:
    """The encoder's weights (default: the installed package's), read once per process.

    Raises:
        Unavailable: no weights file, or one that is not the expected encoder.
    """
    path = path or weights_file()
    try:
        with open(path, "rb") as stream:
            state = read_checkpoint(stream)
        layers = []
        for layer in range(_LAYERS):
            w_ih, w_hh = state[f"lstm.weight_ih_l{layer}"], state[f"lstm.weight_hh_l{layer}"]
            bias = state[f"lstm.bias_ih_l{layer}"] + state[f"lstm.bias_hh_l{layer}"]
            if w_hh.shape != (1024, 256) or w_ih.shape[0] != 1024 or bias.shape != (1024,):
                raise ValueError(f"layer {layer} has unexpected shapes")
            layers.append((np.ascontiguousarray(w_ih[_GATE_ORDER].T), np.ascontiguousarray(w_hh[_GATE_ORDER].T),
                           bias[_GATE_ORDER]))
        weight, bias = state["linear.weight"], state["linear.bias"]
        if layers[0][0].shape != (40, 1024) or weight.shape != (256, 256) or bias.shape != (256,):
            raise ValueError("unexpected input or output shapes")
    except (OSError, ValueError, KeyError) as exc:
        raise Unavailable("the speaker encoder's weights cannot be read") from exc
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = "unknown"
    ref = ModelRef(name=f"resemblyzer voice encoder ({PACKAGE} {version})", digest=hash_file(path))
    return EncoderWeights(lstm=tuple(layers), linear_weight=weight, linear_bias=bias, ref=ref)
