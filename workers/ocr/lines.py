"""Find and read the text lines of one image: detect, crop, (turn), recognise, space, quote, order.

The image is an ``(height, width, 3)`` uint8 array in BGR order (what the models were trained
on); boxes come back in its pixels, each the axis-aligned box around the detected line cut to the
image, so every one lies inside it and has an area (a line whose box would not is dropped).
Lines the recogniser reads with a mean character probability under ``min_confidence`` (RapidOCR's
own default, 0.5) are dropped as noise.

The detector sometimes cuts one line in two at a wide word gap. Pieces of about the same height
(the shorter at least ``SAME_ROW`` of the taller) that share most of it (``SAME_ROW`` of the
shorter) and stand less than ``JOIN_GAP`` line heights apart are one line again: their texts joined by a space, their boxes by union, their confidences averaged by
character count. A wider gap is a column gutter or a table cell, and stays a separate line.

Lines are put in reading order by :mod:`mediafleet.workers.ocr.order` (columns of text, tables
read by rows); each line's box in the result is the whole detected box.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from mediafleet.workers.ocr.engine import OcrEngine, get_engine
from mediafleet.workers.ocr.order import ocr_reading_order
from mediafleet.workers.ocr.quotes import with_quotes
from mediafleet.workers.ocr.spacing import with_spaces

__all__ = ["JOIN_GAP", "MIN_CONFIDENCE", "SAME_ROW", "OcrLine", "capitals", "join_pieces", "normalise", "read_lines"]

MIN_CONFIDENCE = 0.5
SAME_ROW = 0.6
JOIN_GAP = 1.2
_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_SPACES = re.compile(r"\s+")
# Latin letters whose small and capital forms differ only in size: in a word of capitals the
# recogniser (which reads one line with no dictionary) often takes these for small ones.
_SAME_SHAPE = set("cosuvwxz")


@dataclass(frozen=True)
class OcrLine:
    """One recognised line: text, mean character probability and box (x0, y0, x1, y1) in pixels."""

    text: str
    confidence: float
    box: tuple[float, float, float, float]


def normalise(text: str) -> str:
    """Whitespace collapsed; outside CJK text, full-width punctuation and letters made ASCII, and
    words of capitals made whole (:func:`capitals`).

    The Chinese recogniser often reads an English comma or colon as its full-width form.
    """
    text = _SPACES.sub(" ", text.replace("\u3000", " ")).strip()
    if _CJK.search(text):
        return text
    text = "".join(unicodedata.normalize("NFKC", c) if "\uff01" <= c <= "\uff5e" else c for c in text)
    return " ".join(capitals(word) for word in text.split(" "))


def capitals(word: str) -> str:
    """A word of capitals with same-shape letters read small ("NoT", "AsN1_succEss") in capitals.

    Only when every other letter of the word is a capital, there are at least two of them, and a
    lone final "s" ("PDFs", "URLs") is the only small letter left alone, unless the word is an
    identifier joined by underscores ("ASN1_SUCCESs"), which takes no plural.
    """
    letters = [c for c in word if c.isascii() and c.isalpha()]
    small = [c for c in letters if c.islower()]
    if not small or any(c not in _SAME_SHAPE for c in small):
        return word
    if len(letters) - len(small) < 2:
        return word
    if len(small) == 1 and word.rstrip(".,:;!?)]}'\"").endswith("s") and "_" not in word:
        return word
    return "".join(c.upper() if c.isascii() and c in _SAME_SHAPE else c for c in word)


def _box(quad: np.ndarray, width: int, height: int) -> tuple[float, float, float, float] | None:
    x0, y0 = max(float(quad[:, 0].min()), 0.0), max(float(quad[:, 1].min()), 0.0)
    x1, y1 = min(float(quad[:, 0].max()), float(width)), min(float(quad[:, 1].max()), float(height))
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


def _joinable(left: OcrLine, right: OcrLine) -> bool:
    _, ly0, lx1, ly1 = left.box
    rx0, ry0, _, ry1 = right.box
    shorter, taller = sorted((ly1 - ly0, ry1 - ry0))
    overlap = min(ly1, ry1) - max(ly0, ry0)
    gap = rx0 - lx1
    return (shorter >= SAME_ROW * taller and overlap >= SAME_ROW * shorter
            and -0.5 * shorter <= gap <= JOIN_GAP * taller)


def join_pieces(lines: list[OcrLine]) -> list[OcrLine]:
    """Pieces of one line, cut apart by the detector, joined again (left to right)."""
    out: list[OcrLine] = []
    for line in sorted(lines, key=lambda ln: ln.box[0]):
        for k, prev in enumerate(out):
            if _joinable(prev, line):
                n, m = len(prev.text), len(line.text)
                out[k] = OcrLine(
                    text=f"{prev.text} {line.text}",
                    confidence=(prev.confidence * n + line.confidence * m) / (n + m),
                    box=(min(prev.box[0], line.box[0]), min(prev.box[1], line.box[1]),
                         max(prev.box[2], line.box[2]), max(prev.box[3], line.box[3])),
                )
                break
        else:
            out.append(line)
    return out


def read_lines(
    image: np.ndarray,
    *,
    det_max_side: int,
    rotated_lines: bool = False,
    min_confidence: float = MIN_CONFIDENCE,
    engine: OcrEngine | None = None,
) -> list[OcrLine]:
    """The text lines of ``image`` in reading order.

    Args:
        image: BGR uint8 pixels.
        det_max_side: the detector sees the image scaled to at most this many pixels on its longer side.
        rotated_lines: run the orientation classifier (for lines that may be upside down).
        min_confidence: lines read with a lower mean character probability are dropped.
        engine: the OCR engine (default: this process's).
    """
    engine = engine or get_engine()
    height, width = image.shape[:2]
    quads = engine.detect(image, det_max_side)
    if not quads:
        return []
    crops = engine.crops(image, quads)
    if rotated_lines:
        crops = engine.upright(crops)
    lines: list[OcrLine] = []
    for quad, crop, read in zip(quads, crops, engine.recognise(crops)):
        confidence = read.confidence
        if confidence < min_confidence:
            continue
        text = normalise(with_quotes(with_spaces(read, crop), crop).text)
        box = _box(quad, width, height)
        if not text or box is None:
            continue
        lines.append(OcrLine(text=text, confidence=min(max(confidence, 0.0), 1.0), box=box))
    return ocr_reading_order(join_pieces(lines))
