"""Spaces between words, put back from the line image where the recogniser dropped them.

Recognisers trained mostly on Chinese text (RapidOCR's bundled one often, the PP-OCRv6 one used
now less so) read some English words with no space between them. The line image still shows the
gap: between two characters the recogniser read side by side (:mod:`mediafleet.workers.ocr.ctc`
gives where), the widest run of ink-free columns is measured against the line's x-height. A word
gap is about 0.25-0.35 em, a gap between letters well under 0.1 em, and the x-height about half an
em, so a clear run of at least ``WORD_GAP`` x-heights (0.3 em) is a space (a lower bound made spaces
of the gaps around narrow glyphs in the wide cells of monospaced code, "html. xml", which the
recogniser had rightly not read). Where the recogniser did emit spaces on the line, a new one must
also be at least ``KEEP_WITH_OWN`` of the narrowest gap it used, so the wide letter cells of
monospaced fonts are not split into words. No space is put before closing punctuation or after
opening punctuation (the gap after a "1" or an "r" before a colon is often wide, and English never
spaces there). The other way round, a space the recogniser read where the line image shows under
``DROP_GAP`` x-heights of clear columns between its neighbours is no word gap and is taken out:
the PP-OCRv5 recogniser read a space after the "fi" ligature ("fi le", "identifi er") in typeset
text. A space the recogniser read with a probability under ``UNSURE`` is also taken out when its
gap is under ``NARROW_OWN`` of the line's usual (median) recogniser-set gap: the PP-OCRv6 tiny
recogniser splits monospaced words at the wide cell around a narrow letter ("gl obs", "package s");
without the probability test, true narrow gaps such as "import json" in Courier were lost too. The
figures behind these bounds are in ``docs/ocr.md``. A full stop with a space on each
side, after a letter or digit and before a small letter or digit ("magic . mime", a monospaced
file name set in a line of proportional text, whose usual gap its wide cells match), is joined to
both.

The bands are measured on the line's own rows (:func:`_own_rows`): a crop cut from a tightly set
page holds the top of the next line, whose x-height band ran into the line's own and made every
gap look narrow against it ("Thisisso astoallow" on a page of the Valgrind manual).
"""

from __future__ import annotations

import cv2
import numpy as np

from mediafleet.workers.ocr.ctc import Decoded

__all__ = ["DROP_GAP", "KEEP_WITH_OWN", "NARROW_OWN", "UNSURE", "WORD_GAP", "XBAND", "band", "with_spaces"]

WORD_GAP = 0.6
KEEP_WITH_OWN = 0.75
DROP_GAP = 0.25
NARROW_OWN = 0.6
UNSURE = 0.9
# Own spaces a line needs before its usual (median) one is a measure.
_MIN_OWN = 3
# Rows with at least this share of the busiest row's ink form the x-height band.
XBAND = 0.3
# Rows with at least this share make the whole text band (ascenders and descenders included).
_TEXTBAND = 0.04
_NO_SPACE_BEFORE = set(",.:;!?)]}%\u2019\u201d")
_NO_SPACE_AFTER = set("([{\u2018\u201c")


def _ink(crop: np.ndarray) -> np.ndarray:
    gray = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY) if crop.ndim == 3 else crop
    _, mask = cv2.threshold(gray, 0, 1, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    if mask.mean() > 0.5:  # light text on a dark ground: ink is the minority
        mask = 1 - mask
    return mask


def band(rows: np.ndarray, share: float) -> tuple[int, int] | None:
    """[first, last + 1) of the rows holding at least ``share`` of the busiest row's ink."""
    busy = np.flatnonzero(rows >= share * rows.max())
    return (int(busy[0]), int(busy[-1]) + 1) if busy.size else None


def _own_rows(rows: np.ndarray) -> tuple[int, int]:
    """The rows of the line itself. A crop cut from a tightly set page can hold the top of the next
    line or the foot of the one before: a run of inked rows (``_TEXTBAND`` of the busiest row's ink
    or more) at the crop's edge, parted from the line by rows of (almost) no ink, and holding less
    ink than the line's own run. Such runs are left out; any other (an underscore, an accent)
    belongs to the line."""
    busy = rows >= _TEXTBAND * rows.max()
    edges = np.flatnonzero(np.diff(np.concatenate(([0], busy.astype(np.int8), [0]))))
    runs = list(zip(edges[::2].tolist(), edges[1::2].tolist()))
    main = max(runs, key=lambda r: int(rows[r[0]:r[1]].sum()))
    kept = [r for r in runs if r == main or (r[0] > 0 and r[1] < len(rows))]
    return kept[0][0], kept[-1][1]


def _runs(blank: np.ndarray) -> np.ndarray:
    """For each column, how many ink-free columns end there (0 where there is ink)."""
    idx = np.arange(1, len(blank) + 1)
    last_ink = np.maximum.accumulate(np.where(blank, 0, idx))
    return np.where(blank, idx - last_ink, 0)


def _widest_blank(runs: np.ndarray, start: int, stop: int) -> int:
    """The longest run of ink-free columns within ``[start, stop)``, given :func:`_runs`."""
    start, stop = max(start, 0), min(max(stop, 0), len(runs))
    if stop <= start:
        return 0
    return int(np.minimum(runs[start:stop], np.arange(1, stop - start + 1)).max())


def with_spaces(line: Decoded, crop: np.ndarray) -> Decoded:
    """``line`` with a space inserted at every clear word gap the recogniser did not mark."""
    if len(line.chars) < 2:
        return line
    mask = _ink(crop)
    rows = mask.sum(axis=1)
    if rows.max() == 0:
        return line
    top, bottom = _own_rows(rows)
    rows = rows.copy()
    rows[:top] = 0
    rows[bottom:] = 0
    xband, text = band(rows, XBAND), band(rows, _TEXTBAND)
    if xband is None or text is None:
        return line
    x_height = max(xband[1] - xband[0], 1)
    runs = _runs(mask[text[0]:text[1]].sum(axis=0) == 0)
    centres = [(a + b) / 2 for a, b in line.spans]

    def gap(i: int, j: int) -> int:
        return _widest_blank(runs, int(np.ceil(centres[i])), int(np.floor(centres[j])) + 1)

    inner = [i for i, c in enumerate(line.chars)
             if c == " " and 0 < i < len(line.chars) - 1 and line.chars[i - 1] != " " and line.chars[i + 1] != " "]
    own = [gap(i - 1, i + 1) for i in inner]
    # Whether to drop one: over the neighbours' whole spans, since a CTC span can sit a few pixels
    # off its glyph (a narrower window can miss most of a real word gap).
    dropped = {i for i in inner
               if _widest_blank(runs, int(np.floor(line.spans[i - 1][0])), int(np.ceil(line.spans[i + 1][1])))
               < DROP_GAP * x_height}
    # A space the recogniser was unsure of and far narrower than the line's usual one is a letter
    # gap taken for a word gap (the wide cells of monospaced text: "gl obs", "package s").
    kept = sorted(g for i, g in zip(inner, own, strict=True) if i not in dropped)
    if len(kept) >= _MIN_OWN:
        usual = kept[len(kept) // 2]
        dropped |= {i for i, g in zip(inner, own, strict=True) if g < NARROW_OWN * usual and line.probs[i] < UNSURE}
    own = [g for i, g in zip(inner, own, strict=True) if i not in dropped]
    need = WORD_GAP * x_height
    if own:
        need = max(need, KEEP_WITH_OWN * min(own))
    chars, probs, spans = [line.chars[0]], [line.probs[0]], [line.spans[0]]
    last = 0  # the character kept before this one
    for i in range(1, len(line.chars)):
        if i in dropped:
            continue
        prev, cur = line.chars[last], line.chars[i]
        if (prev != " " and cur != " " and cur not in _NO_SPACE_BEFORE and prev not in _NO_SPACE_AFTER
                and gap(last, i) >= need):
            x = (line.spans[last][1] + line.spans[i][0]) / 2
            chars.append(" ")
            probs.append(min(line.probs[last], line.probs[i]))
            spans.append((x, x))
        last = i
        chars.append(cur)
        probs.append(line.probs[i])
        spans.append(line.spans[i])
    return _lone_dots_joined(Decoded(chars=chars, probs=probs, spans=spans))


def _lone_dots_joined(line: Decoded) -> Decoded:
    """``magic . mime`` as ``magic.mime``: a full stop with a space on each side, after a letter or
    digit and before a small letter or a digit, is a dot in a monospaced name whose wide cell the
    recogniser spaced (English sets no space before a full stop, and a sentence after one starts
    with a capital: ``structure . At``, a monospaced word ending a sentence, stays)."""
    c = line.chars
    drop = set()
    for i in range(2, len(c) - 2):
        if (c[i] == "." and c[i - 1] == c[i + 1] == " " and c[i - 2].isalnum()
                and (c[i + 2].islower() or c[i + 2].isdigit())):
            drop |= {i - 1, i + 1}
    if not drop:
        return line
    keep = [i for i in range(len(c)) if i not in drop]
    return Decoded(chars=[c[i] for i in keep], probs=[line.probs[i] for i in keep], spans=[line.spans[i] for i in keep])
