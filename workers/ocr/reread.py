"""Which part of a line to read again with the small recogniser, and how its reading goes back in.

The fast recogniser's reading of a line it is unsure of (:data:`mediafleet.workers.ocr.engine.FALLBACK`)
is mostly right, so only its unsure words are read again: those holding a character read with a
probability under ``UNSURE_CHAR``. A word is a run of characters between spaces once the spacing
step (:mod:`mediafleet.workers.ocr.spacing`) has put back the ones the fast recogniser dropped.

An unsure word (or a run of them) owns the line from the middle of the gap before it to the middle
of the gap after it (the line's ends for the first and the last), and the small recogniser reads
that part with ``CONTEXT`` line heights of the line on each side (it reads a word cut at its ink
worse). Parts whose widened cuts come closer than ``MERGE`` line heights are read in one cut (a
line unsure throughout is one cut: the whole line). Of each reading only the characters whose
middle falls inside the part they were read for are kept; they replace the fast reading's
characters there, with a space on each side that borders the rest of the line.

A cut is not read at all when every unsure word in it is a plain word of small Latin letters (a
closing ``,.;:`` allowed) whose unsure characters are all letters without a look-alike (none of
``LOOK_ALIKE``: ``i`` and ``l``, which pass for each other and for ``1`` and ``I``, and the letters
whose capital differs only in size): the small recogniser read every such word the same on the
pages the rule was set on, so reading it costs time and cannot change the answer. A digit, a
capital, a symbol, an unsure punctuation mark or a look-alike letter sends the cut to be read
(``O;`` for ``0;``, ``familyiang`` for ``familylang``, ``encoding:`` for ``encoding::``). The cuts are
made from all the unsure words as before, so a word that is read has the context it had.

What each setting was measured to cost and give is in ``docs/ocr.md``.
"""

from __future__ import annotations

import math

from mediafleet.workers.ocr.ctc import Decoded

__all__ = ["CONTEXT", "LOOK_ALIKE", "MERGE", "UNSURE_CHAR", "Part", "cuts", "splice", "unsure_parts", "worth_reading"]

UNSURE_CHAR = 0.9
CONTEXT = 0.5
MERGE = 1.0
# Small letters an unsure reading may have confused with another character: i and l (with each
# other, 1 and I), and those whose capital has the same shape (the case is the doubt).
LOOK_ALIKE = frozenset("ilcosuvwxz")
_PLAIN_END = frozenset(",.;:")

Part = tuple[float, float]  # (x0, x1) in the crop's pixels


def _words(line: Decoded) -> list[tuple[int, int]]:
    """(first, last) character index of each run of characters between spaces."""
    out: list[tuple[int, int]] = []
    start = None
    for i, c in enumerate(line.chars):
        if c == " ":
            if start is not None:
                out.append((start, i - 1))
                start = None
        elif start is None:
            start = i
    if start is not None:
        out.append((start, len(line.chars) - 1))
    return out


def _needs_reading(spaced: Decoded, first: int, last: int) -> bool:
    """Whether the unsure word ``chars[first..last]`` can read differently: not a plain word of
    small letters whose unsure characters are all letters without a look-alike."""
    chars = spaced.chars[first:last + 1]
    if chars[-1] in _PLAIN_END:
        chars = chars[:-1]
    if not chars or not all("a" <= c <= "z" for c in chars):
        return True
    doubts = [spaced.chars[i] for i in range(first, last + 1) if spaced.probs[i] < UNSURE_CHAR]
    return any(c in LOOK_ALIKE or not "a" <= c <= "z" for c in doubts)


def worth_reading(spaced: Decoded, part: Part) -> bool:
    """Whether ``part`` of the line holds an unsure word whose reading can change (see the
    module's docstring); a cut whose parts hold none is not read."""
    a, b = part
    for first, last in _words(spaced):
        middle = (spaced.spans[first][0] + spaced.spans[last][1]) / 2
        if a <= middle <= b and min(spaced.probs[first:last + 1]) < UNSURE_CHAR and _needs_reading(spaced, first, last):
            return True
    return False


def unsure_parts(spaced: Decoded, width: int) -> list[Part]:
    """The parts of a line (``width`` pixels wide) that hold its unsure words, left to right.

    Args:
        spaced: the fast reading with its word spaces put back.
        width: the line image's width.
    """
    words = _words(spaced)
    extent = [(spaced.spans[a][0], spaced.spans[b][1]) for a, b in words]
    unsure = [min(spaced.probs[a:b + 1]) < UNSURE_CHAR for a, b in words]
    parts: list[Part] = []
    k = 0
    while k < len(words):
        if not unsure[k]:
            k += 1
            continue
        j = k
        while j + 1 < len(words) and unsure[j + 1]:
            j += 1
        left = 0.0 if k == 0 else (extent[k - 1][1] + extent[k][0]) / 2
        right = float(width) if j == len(words) - 1 else (extent[j][1] + extent[j + 1][0]) / 2
        parts.append((left, right))
        k = j + 1
    return parts


def cuts(parts: list[Part], width: int, height: int) -> list[tuple[int, int, list[Part]]]:
    """The column ranges ``(x0, x1, parts)`` of the line (``width`` x ``height`` pixels) to read
    again, each with the parts it is read for."""
    margin = CONTEXT * height
    out: list[tuple[int, int, list[Part]]] = []
    for a, b in parts:
        x0, x1 = max(0, int(a - margin)), min(width, math.ceil(b + margin))
        if out and x0 <= out[-1][1] + MERGE * height:
            out[-1] = (out[-1][0], x1, [*out[-1][2], (a, b)])
        else:
            out.append((x0, x1, [(a, b)]))
    return out


def splice(line: Decoded, readings: list[tuple[Part, Decoded]], edge: float) -> Decoded:
    """``line`` (the fast reading, without added spaces) with each part's characters replaced by the
    characters of its new reading (positions in the line's pixels) whose middle lies in the part.

    ``readings`` are left to right and do not overlap. A part runs from one word gap to the next,
    so where it borders the rest of the line there is a space, given probability ``edge`` (the
    spacing step takes out any the line image does not show).
    """
    chars: list[str] = []
    probs: list[float] = []
    spans: list[tuple[float, float]] = []

    def keep(i: int) -> None:
        chars.append(line.chars[i])
        probs.append(line.probs[i])
        spans.append(line.spans[i])

    middles = [(a + b) / 2 for a, b in line.spans]
    n = len(line.chars)
    pos = 0
    for (a, b), read in readings:
        while pos < n and middles[pos] < a:
            keep(pos)
            pos += 1
        start = pos
        while pos < n and middles[pos] <= b:
            pos += 1
        got = [(c, p, s) for c, p, s in zip(read.chars, read.probs, read.spans, strict=True) if a <= (s[0] + s[1]) / 2 <= b]
        while got and got[0][0] == " ":
            got.pop(0)
        while got and got[-1][0] == " ":
            got.pop()
        if not got:  # nothing read there: the fast reading stands
            for i in range(start, pos):
                keep(i)
            continue
        while pos < n and line.chars[pos] == " ":
            pos += 1
        while chars and chars[-1] == " ":
            chars.pop()
            probs.pop()
            spans.pop()
        if chars:
            chars.append(" ")
            probs.append(edge)
            spans.append((a, a))
        for c, p, s in got:
            chars.append(c)
            probs.append(p)
            spans.append(s)
        if pos < n:
            chars.append(" ")
            probs.append(edge)
            spans.append((b, b))
    for i in range(pos, n):
        keep(i)
    return Decoded(chars=chars, probs=probs, spans=spans)
