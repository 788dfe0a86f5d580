"""The RapidOCR engine: built once per process, lazily, on the process's threads and device.

Nothing loads at import: the first OCR job in a process builds the detector, the line-orientation
classifier and the recognisers (about a second), after the worker's fork, with onnxruntime's
intra-op threads capped to :func:`mediafleet.workers.engines.engine_config` ``threads`` (onnxruntime ignores
``OMP_NUM_THREADS``). On the GPU device class every session must run on onnxruntime's CUDA
provider; RapidOCR itself would fall back to CPU with a log line, so the engine checks the
sessions it got and refuses instead.

The engine makes its own onnxruntime sessions and hands them to RapidOCR's pre- and
post-processing: RapidOCR builds its sessions with the CPU memory arena off, which makes every
new input shape several times slower to run, and every text line has a shape of its own.

Models: RapidOCR's PP-OCRv4 detector and orientation classifier (in the ``rapidocr-onnxruntime``
wheel), and two PP-OCRv6 recognisers (PaddleOCR's weights, Apache-2.0). The tiny one, which the
MIT-licensed ``faster-paddle`` 1.0.4 wheel carries inside its extension library, reads every line
(about a fifth of the small one's time per input column); a line it reads with a mean character
probability under ``FALLBACK`` has its unsure words read again by the small one from RapidOCR's
own ``rapidocr`` 3.10 wheel, and that reading of them is kept (:mod:`mediafleet.workers.ocr.reread`).
The tiny one's dictionary holds Chinese as well as Latin characters, and its last layer is kept
whole: cut to its Latin classes it is faster but reads a line of Chinese as Latin letters with a
high probability, which no confidence test would send to the small one. The tiny model is found in
that library by its pinned size and sha256 and its 6,904-character dictionary (a JSON list there)
by its digest; nothing is imported from faster-paddle, written or downloaded. The small one is
decoded with the dictionary it carries in its metadata (18,708 characters; blank first and space
last, as PaddleOCR trains it). There is no fallback to other models: without the wheels the engine
is unavailable. Where the time goes, what was tried and what each choice measured: ``docs/ocr.md``.
"""

from __future__ import annotations

import math
import os
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from mediafleet.contract.common import ModelRef
from mediafleet.contract.digests import hash_file
from mediafleet.contract.errors import Unavailable
from mediafleet.contract.manifest import DeviceClass
from mediafleet.workers.engines import engine_config
from mediafleet.workers.ocr.ctc import Decoded, decode
from mediafleet.workers.ocr.reread import cuts, splice, unsure_parts, worth_reading
from mediafleet.workers.ocr.spacing import with_spaces

__all__ = ["ENGINE", "OcrEngine", "get_engine"]

ENGINE = "rapidocr-onnxruntime"
_CUDA = "CUDAExecutionProvider"
# The recogniser's distribution, its import package and its file (the dictionary is inside it).
_REC_DIST = "rapidocr"
_REC_MODEL = "models/PP-OCRv6_rec_small.onnx"
# The fast recogniser: PP-OCRv6 tiny (PaddleOCR's weights, Apache-2.0), which the MIT-licensed
# faster-paddle wheel carries inside its extension library (its file's bytes, not a download).
# It is found there by its pinned size and digest, its dictionary (a JSON list in the same
# library) by its digest, and run from memory: nothing is written or imported.
_FAST_DIST = "faster-paddle"
_FAST_LIB = "faster_paddle.abi3.so"
_FAST_MODEL = "PP-OCRv6_rec_tiny.onnx"
_FAST_SIZE = 4_462_498
_FAST_SHA256 = "63e9e23c26f77daf61ade813ad3b3b25283a4ddd229adfe227ff9ad48b68da75"
_FAST_HEAD = b"\x08\x08\x12\x00\x1a\x00"  # ir_version 8, no producer: how the library stores its models
_FAST_DICT_SHA256 = "34d139222b6e8d84830f57476e39f01e76be3baffde3e9df75a079e251140598"  # "\n".join(characters)
_FAST_DICT_HEAD = b'["!", "\\"", "#"'
# In a line the fast recogniser reads with a lower mean character probability, the unsure words
# are read again by the PP-OCRv6 small one, and that reading of them is kept.
FALLBACK = 0.975
# The probability of the space put at each edge of a re-read part: a word gap the spacing step
# found on the line image, not a recogniser's guess, so the spacing step's second pass keeps it
# unless the gap is under DROP_GAP (an unsure space's probability lost word gaps: "willmatch").
EDGE = 1.0
# A recogniser batch: lines of similar width (sorted), so little of each batch is padding. One
# line at a time is the fastest on CPU: the cost is per input column, and a batch costs what its
# lines cost one by one, plus the padding of the narrower ones.
_REC_BATCH = 1
# The detector scales an image up until its shorter side is 736 px; a strip of 5 x 3000 px would
# become 736 x 441,600. Images longer than this many times their width (or the reverse) are padded
# with their median colour first, so the detector's input stays bounded (about 3,000 x 736).
_MAX_ASPECT = 4
# The detector sees only the inked part of an image (a page's margins cost it as much as its
# text): pixels more than this far from the median colour, with this many pixels around them,
# and at least this many on the shorter side (RapidOCR scales anything smaller up to 736).
_INK_DIFF = 48
_DET_MARGIN = 32
_DET_LEAST = 736


class OcrEngine:
    """RapidOCR's three models in this process, and what provenance needs to know about them.

    Args:
        threads: onnxruntime intra-op threads per session (the process's share of the cores).
        device: the worker's device class; ``gpu`` requires every session on CUDA.

    Raises:
        Unavailable: rapidocr-onnxruntime or rapidocr (the recogniser's wheel) is not installed,
            the recogniser's dictionary is missing or does not fit it, or the GPU class got no CUDA session.
    """

    def __init__(self, threads: int = 1, device: DeviceClass = DeviceClass.CPU) -> None:
        try:
            from rapidocr_onnxruntime import RapidOCR
            from rapidocr_onnxruntime.main import DEFAULT_CFG_PATH
            from rapidocr_onnxruntime.utils import read_yaml, update_model_path
        except ImportError as exc:
            raise Unavailable("the OCR engine (rapidocr-onnxruntime) is not installed on this worker") from exc
        import onnxruntime

        cuda = device == DeviceClass.GPU
        threads = max(1, min(threads, os.cpu_count() or 1))
        self.threads = threads  # onnxruntime's intra-op threads: part of every OCR derivation
        self._ocr = RapidOCR(use_cls=False, print_verbose=False, intra_op_num_threads=1, inter_op_num_threads=1)
        config = update_model_path(read_yaml(DEFAULT_CFG_PATH))
        self._model_paths = {name: Path(config[section]["model_path"]) for name, section in (("det", "Det"), ("cls", "Cls"))}
        self._model_paths["rec"] = _recogniser_file()
        # (distribution, file name in provenance) of each model file
        self._sources = {name: (ENGINE, self._model_paths[name].name) for name in ("det", "cls")}
        self._sources["rec"] = (_REC_DIST, self._model_paths["rec"].name)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        providers = [_CUDA] if cuda else ["CPUExecutionProvider"]

        def session(name: str) -> Any:
            try:
                return onnxruntime.InferenceSession(str(self._model_paths[name]), sess_options=options,
                                                    providers=providers)
            except Exception as exc:  # onnxruntime raises its own types for a provider it cannot start
                where = "the GPU (CUDA); this worker will not run them on CPU" if cuda else "this worker"
                raise Unavailable(f"the OCR models cannot be started on {where}") from exc

        self.version = metadata.version(ENGINE)
        self.runtime_version = _version("onnxruntime") or _version("onnxruntime-gpu") or "unknown"
        self.device = device
        self._det = self._ocr.text_det
        self._cls = self._ocr.text_cls
        self._rec = self._ocr.text_rec
        self._det.infer.session = session("det")
        self._cls.infer.session = session("cls")
        self._rec.session.session = session("rec")
        self._charset = _charset(self._rec.session.session)
        _check_classes(self._rec.session.session, self._charset)
        fast_model, self._fast_charset, self._fast_lib = _fast_recogniser()
        try:
            self._fast = onnxruntime.InferenceSession(fast_model, sess_options=options, providers=providers)
        except Exception as exc:  # as in session()
            where = "the GPU (CUDA); this worker will not run them on CPU" if cuda else "this worker"
            raise Unavailable(f"the OCR models cannot be started on {where}") from exc
        _check_classes(self._fast, self._fast_charset)
        self._sources["fast"] = (_FAST_DIST, _FAST_MODEL)
        self.providers = {
            "det": self._det.infer.session.get_providers(),
            "cls": self._cls.infer.session.get_providers(),
            "fast": self._fast.get_providers(),
            "rec": self._rec.session.session.get_providers(),
        }
        if cuda and any(p[0] != _CUDA for p in self.providers.values()):
            raise Unavailable("the OCR models did not start on the GPU; this worker will not run them on CPU")
        self._digests: dict[str, str] = {"fast": f"sha256:{_FAST_SHA256}"}  # checked as it was read
        self._det_lut: np.ndarray | None = None  # uint8 -> the detector's input, per channel
        self._rec_lut: np.ndarray | None = None  # uint8 -> the recognisers' input

    def models(self, *, with_classifier: bool = False) -> list[ModelRef]:
        """The model files this engine runs, each pinned by the sha256 of its bytes (the small
        recogniser's dictionary is part of its file; the fast one's is pinned with it)."""
        names = ["det", "cls", "fast", "rec"] if with_classifier else ["det", "fast", "rec"]
        refs = []
        for name in names:
            if name not in self._digests:
                self._digests[name] = hash_file(self._model_paths[name])
            dist, file = self._sources[name]
            refs.append(ModelRef(name=f"{dist} {_version(dist) or 'unknown'}: {file}", digest=self._digests[name]))
        return refs

    def detect(self, image: np.ndarray, max_side: int) -> list[np.ndarray]:
        """Quadrilaterals (4x2, clockwise from top-left, image pixels) around each text line.

        The detector runs on a copy scaled down to ``max_side`` pixels on its longer side (small
        text on a page stays findable at ~110 dpi and detection is ~4x cheaper than at 200) and
        padded to an aspect ratio of at most ``_MAX_ASPECT``; the quads are mapped back, so crops
        for recognition come from the full image.
        """
        h, w = image.shape[:2]
        scale = min(1.0, max_side / max(h, w))
        small = image
        if scale < 1.0:
            import cv2

            small = cv2.resize(image, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
        box = _ink_box(small)
        if box is None:
            return []
        x0, y0, x1, y1 = box
        small = np.ascontiguousarray(small[y0:y1, x0:x1])
        sh, sw = small.shape[:2]
        pad_h, pad_w = max(0, -(-sw // _MAX_ASPECT) - sh), max(0, -(-sh // _MAX_ASPECT) - sw)
        top, left = pad_h // 2, pad_w // 2
        if pad_h or pad_w:
            import cv2

            fill = [float(v) for v in np.median(small.reshape(-1, small.shape[2]), axis=0)]
            small = cv2.copyMakeBorder(small, top, pad_h - top, left, pad_w - left, cv2.BORDER_CONSTANT, value=fill)
        quads = self._detect(small)
        if quads is None or len(quads) == 0:
            return []
        out = []
        for quad in quads:
            q = np.asarray(quad, dtype=np.float32).copy()
            q[:, 0] += x0 - left
            q[:, 1] += y0 - top
            q /= scale
            q[:, 0] = np.clip(q[:, 0], 0, w)
            q[:, 1] = np.clip(q[:, 1], 0, h)
            out.append(q)
        return out

    def _detect(self, image: np.ndarray) -> np.ndarray | None:
        """RapidOCR's detection of ``image`` (its resize, model, post-processing and filter), with
        its normalisation done by a lookup table of the same float32 values, channel by channel
        into the model's layout: RapidOCR computes it in float64 over the whole resized page and
        then transposes it."""
        import cv2

        det = self._det
        pre = det.get_preprocess(max(image.shape[0], image.shape[1]))
        resized = pre.resize(image)
        if resized is None:
            return None
        if self._det_lut is None:
            values = np.arange(256, dtype=np.uint8).reshape(256, 1, 1).repeat(3, axis=2)
            self._det_lut = pre.normalize(values).astype(np.float32).reshape(256, 3).T.copy()
        # Each channel's plane looked up straight into its place in the model's (1, 3, H, W) input.
        normalised = np.empty((1, resized.shape[2], *resized.shape[:2]), dtype=np.float32)
        for c, plane in enumerate(cv2.split(resized)):
            normalised[0, c] = cv2.LUT(plane, self._det_lut[c])
        preds = det.infer(normalised)[0]
        boxes, _ = det.postprocess_op(preds, image.shape[:2])
        return det.filter_tag_det_res(boxes, image.shape[:2])

    def crops(self, image: np.ndarray, quads: list[np.ndarray]) -> list[np.ndarray]:
        """Each line straightened into its own image (RapidOCR's perspective crop)."""
        return list(self._ocr.get_crop_img_list(image, [q.astype(np.float32) for q in quads]))

    def upright(self, crops: list[np.ndarray]) -> list[np.ndarray]:
        """Lines the orientation classifier finds upside down, turned (for rotated text only)."""
        turned, _, _ = self._cls(crops)
        return list(turned)

    def recognise(self, crops: list[np.ndarray]) -> list[Decoded]:
        """Each line's characters, confidences and positions (in the crop's pixels).

        The fast recogniser reads every line (:meth:`read_fast`); a line it reads with a mean
        character probability under ``FALLBACK`` has its unsure words read again by the small one
        (:meth:`read_again`).
        """
        out = self.read_fast(crops)
        for i, read in enumerate(out):
            if read.confidence < FALLBACK:
                out[i] = self.read_again(crops[i], read)
        return out

    def read_fast(self, crops: list[np.ndarray]) -> list[Decoded]:
        """The fast recogniser's reading of every crop."""
        return self._read(self._fast, self._fast_charset, crops, range(len(crops)))

    def read_again(self, crop: np.ndarray, fast: Decoded) -> Decoded:
        """``fast``, the fast recogniser's reading of ``crop``, with the words it is unsure of read
        again by the small one and that reading of them kept (:mod:`mediafleet.workers.ocr.reread`);
        a line it read nothing of is read again whole."""
        if not fast.chars:
            return self._read(self._rec.session.session, self._charset, [crop], [0])[0]
        height, width = crop.shape[:2]
        spaced = with_spaces(fast, crop)
        readings = []
        for x0, x1, within in cuts(unsure_parts(spaced, width), width, height):
            if any(worth_reading(spaced, part) for part in within):
                read = self._read_cut(crop[:, x0:x1], x0)
                readings.extend((part, read) for part in within)
        if not readings:  # sure of every word but its spaces, or unsure only of plain words: it stands
            return fast
        return splice(fast, readings, EDGE)

    def _read_cut(self, cut: np.ndarray, x0: int) -> Decoded:
        """The small recogniser's reading of ``cut``, part of a line from column ``x0``, with its
        characters placed in the line's pixels. A cut is read at its own width (a whole line is
        padded to at least 320 input columns; a word would mostly be padding)."""
        _, height, _ = self._rec.rec_image_shape
        h, w = cut.shape[:2]
        used = max(1, math.ceil(height * w / max(h, 1)))
        batch = self._input([cut], used / height)
        session = self._rec.session.session
        preds = session.run(None, {session.get_inputs()[0].name: batch})[0]
        padded = batch.shape[3]
        read = decode(preds[0], self._charset, crop_width=w, input_width=padded, used_width=min(padded, used))
        return Decoded(chars=read.chars, probs=read.probs, spans=[(a + x0, b + x0) for a, b in read.spans])

    def _input(self, crops: list[np.ndarray], max_ratio: float) -> np.ndarray:
        """The recognisers' input for ``crops``: RapidOCR's ``resize_norm_img`` of each (48 pixels
        high, its own width up to ``48 * max_ratio``, zero-padded there), with the same float32
        values, normalised by a lookup table and written in place (no float64 pass, no stacking
        and converting copies)."""
        import cv2

        channels, height, _ = self._rec.rec_image_shape
        if self._rec_lut is None:
            values = np.arange(256, dtype=np.uint8).astype(np.float32) / 255  # as resize_norm_img, value by value
            values -= 0.5
            values /= 0.5
            self._rec_lut = values.reshape(1, 256)
        width = int(height * max_ratio)
        batch = np.zeros((len(crops), channels, height, width), dtype=np.float32)
        for j, crop in enumerate(crops):
            h, w = crop.shape[:2]
            resized_w = min(math.ceil(height * (w / float(h))), width)
            resized = cv2.resize(crop, (resized_w, height))
            batch[j, :, :, :resized_w] = cv2.LUT(resized, self._rec_lut).transpose(2, 0, 1)
        return batch

    def _read(self, session: Any, charset: list[str], crops: list[np.ndarray], which: Any) -> list[Decoded]:
        """``session``'s readings of the crops numbered ``which``, in that order."""
        which = list(which)
        out: list[Decoded | None] = [None] * len(which)
        ratios = np.array([crops[i].shape[1] / max(crops[i].shape[0], 1) for i in which])
        order = np.argsort(ratios, kind="stable")
        _, height, width = self._rec.rec_image_shape
        name = session.get_inputs()[0].name
        for start in range(0, len(which), _REC_BATCH):
            idx = order[start:start + _REC_BATCH]
            max_ratio = max(width / height, *(ratios[k] for k in idx))
            batch = self._input([crops[which[k]] for k in idx], max_ratio)
            preds = session.run(None, {name: batch})[0]
            padded = batch.shape[3]
            for j, k in enumerate(idx):
                used = min(padded, int(np.ceil(height * ratios[k])))
                out[k] = decode(preds[j], charset, crop_width=crops[which[k]].shape[1],
                                input_width=padded, used_width=used)
        return [d for d in out if d is not None]


def _ink_box(image: np.ndarray) -> tuple[int, int, int, int] | None:
    """(x0, y0, x1, y1): the part of ``image`` the detector needs to see, or None when it holds no ink.

    The box around every pixel that differs from the image's median colour by more than
    ``_INK_DIFF``, widened by ``_DET_MARGIN`` on each side and, where the image allows, to
    ``_DET_LEAST`` pixels on its shorter side (below that the detector would scale it up).
    """
    import cv2

    flat = image.reshape(-1, image.shape[2]) if image.ndim == 3 else image.reshape(-1, 1)
    median = np.median(flat[:: max(1, len(flat) // 65536)], axis=0).astype(image.dtype)
    diff = cv2.absdiff(image, np.broadcast_to(median, image.shape).copy())
    if diff.ndim == 3:  # the largest difference of a pixel's channels (cv2's max: a tenth of numpy's time)
        channels = cv2.split(diff)
        diff = channels[0]
        for channel in channels[1:]:
            diff = cv2.max(diff, channel)
    ink = diff > _INK_DIFF
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    if rows.size == 0:
        return None
    h, w = ink.shape

    def span(first: int, last: int, n: int) -> tuple[int, int]:
        a, b = max(0, first - _DET_MARGIN), min(n, last + 1 + _DET_MARGIN)
        length = max(b - a, min(_DET_LEAST, n))
        a = int(max(0, min(n - length, (a + b - length) // 2)))
        return a, a + length

    (y0, y1), (x0, x1) = span(int(rows[0]), int(rows[-1]), h), span(int(cols[0]), int(cols[-1]), w)
    return x0, y0, x1, y1


def _recogniser_file() -> Path:
    """The PP-OCRv6 small recogniser, found without importing its package (nor its dependencies)."""
    import importlib.util

    spec = importlib.util.find_spec("rapidocr")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        model = Path(folder) / _REC_MODEL
        if model.is_file():
            return model
    raise Unavailable(f"the OCR recogniser ({_REC_DIST}) is not installed on this worker")


def _fast_recogniser() -> tuple[bytes, list[str], Path]:
    """The PP-OCRv6 tiny recogniser's bytes and class list, read from faster-paddle's library
    (found without importing it) and checked against their pinned digests.

    Raises:
        Unavailable: faster-paddle is not installed, or its library holds no such model or dictionary.
    """
    import hashlib
    import importlib.util
    import json

    spec = importlib.util.find_spec("faster_paddle")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    lib = next((Path(f) / _FAST_LIB for f in folders if (Path(f) / _FAST_LIB).is_file()), None)
    if lib is None:
        raise Unavailable(f"the fast OCR recogniser ({_FAST_DIST}) is not installed on this worker")
    data = lib.read_bytes()
    model = None
    at = data.find(_FAST_HEAD)
    while at != -1 and model is None:
        if hashlib.sha256(data[at:at + _FAST_SIZE]).hexdigest() == _FAST_SHA256:
            model = data[at:at + _FAST_SIZE]
        at = data.find(_FAST_HEAD, at + 1)
    characters = None
    at = data.find(_FAST_DICT_HEAD)
    while at != -1 and characters is None:
        end = data.find(b"]", at)
        while end != -1 and characters is None:
            try:
                found = json.loads(data[at:end + 1].decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                end = data.find(b"]", end + 1)
                continue
            if hashlib.sha256("\n".join(found).encode("utf-8")).hexdigest() == _FAST_DICT_SHA256:
                characters = found
            break
        at = data.find(_FAST_DICT_HEAD, at + 1)
    if model is None or characters is None:
        raise Unavailable(f"the fast OCR recogniser is not in this {_FAST_DIST} build")
    return model, ["blank", *characters, " "], lib


def _check_classes(session: Any, charset: list[str]) -> None:
    classes = session.get_outputs()[0].shape[-1]
    if isinstance(classes, int) and classes != len(charset):
        raise Unavailable("the OCR recogniser's dictionary does not match its model")


def _charset(session: Any) -> list[str]:
    """Class index -> character: CTC's blank, the lines of the model's own dictionary, then the space.

    Raises:
        Unavailable: the recogniser carries no dictionary.
    """
    text = session.get_modelmeta().custom_metadata_map.get("character")
    if not text:
        raise Unavailable("the OCR recogniser carries no dictionary")
    lines = text.split("\n")  # not splitlines(): U+2028 and kin are characters
    if lines and lines[-1] == "":
        lines.pop()
    return ["blank", *(line.removesuffix("\r") for line in lines), " "]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


_engines: dict[tuple[int, DeviceClass], OcrEngine] = {}
_lock = threading.Lock()


def get_engine() -> OcrEngine:
    """This process's engine for its engine configuration (threads, device), built on first use."""
    with _lock:
        config = engine_config()
        key = (config.threads, config.device)
        if key not in _engines:
            _engines[key] = OcrEngine(threads=config.threads, device=config.device)
        return _engines[key]
