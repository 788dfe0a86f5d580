"""Shot boundaries by kind, with the truth known: mediafleet against every PySceneDetect detector at
its defaults and FFmpeg's scene filter, in one run, with frames/s against bare decoding.

The clip is made here, frame by frame, from FFmpeg's own sources (``testsrc2``, ``mandelbrot``,
``smptehdbars``, ``gradients``, ``testsrc``, ``rgbtestsrc``, ``cellauto``), generated slides (white
pages with bars of "text", one slide to the next differing in one line: the similar-looking cut a
slide deck makes) and, where the conformance corpus is present (``../shared/corpus``), real camera
pictures: stretches from inside the shots of PySceneDetect's ``testvideo.mp4`` (photographs of a
leaf on a rock, a deer, a stone, planks), scaled to the clip's size. Between shots: hard cuts (two
between near-identical slides, one from the leaf to the same picture 10 % closer), a fade, a dissolve, wipes (left
to right; top to bottom on real footage), a fade through black and a real dissolve; inside shots,
which must not be cut: a two-frame flash, a one-frame flash on the real deer, a fast pan (24 px a
frame), a fast pan over a real picture (8 px a frame) and a fade to black and back. 640x360,
25 fps, H.264 (CRF 18), written to the system temp directory. ``gradients`` draws random colours
and line ends unless given, ``cellauto`` a random first row unless seeded; both are fixed
(:data:`GRADIENTS`, :data:`CELLAUTO_SEED`), so every run scores the same clip (before, each run
drew new ones, and the wipe out of the gradients shot is where results moved).

Scoring (each true boundary found at most once):

* cuts: a reported cut within 1 frame of a true cut finds it; any other reported cut that is not
  inside a transition is a false cut. Cut F1 counts both.
* gradual transitions: a reported transition (mediafleet's combined detector reports them as spans)
  overlapping a true one finds it. The other tools report only cuts, so for them a cut inside a true
  transition (1 frame of slack either side) finds it, the most they could do; more cuts in the same
  transition are false transitions. A reported transition overlapping none is false. Transition F1
  counts both.
* events inside shots: any reported boundary on one of their frames (1 frame of slack) is listed
  against it.

Speed: every path decodes the same clip; ``ffmpeg -f null`` (FFmpeg's default threads) is the floor,
and ``frames/s`` and ``vs bare`` are from the median of ``rounds`` interleaved runs (``best``: the
best run of each against the best bare decode), with the median CPU seconds (this process and its
children, every thread: PySceneDetect's detectors run in this process, FFmpeg's in a child).

Families (issue 43): slide decks and screen recordings, each its own clip at 1280x720, 25 fps,
H.264 (libx264 veryfast, CRF 23; the real pages CRF 30), made here and cached in the temp directory
by :data:`FAMILY_VERSION`, each with its truth (cuts, and events inside shots that must not be cut):

* deck: real pages: the top of a page of each of Debian's PDFs under /usr/share/doc in turn, under
  one title bar; a mouse pointer crossing one slide, a caret blinking on another;
* deck: new text: the same template, bullet lines of real text (lines of those PDFs) changing on
  every slide; one slide filmed with sensor noise, and a video playing in an inset across the last
  four (a lecture's webcam);
* deck: one line / one word: one line, or the longest word of one line, replaced slide to slide;
* deck: bullet builds: lines appearing one at a time, then going one at a time;
* screen: terminal typing: prose typed a character at a time with a blinking caret, the terminal
  scrolling a line at its foot; cuts where the recording switches to another window;
* screen: window scrolling: a viewer over real pages, scrolled smoothly and by wheel steps of three
  lines, a pointer moving; cuts where the recording switches to another document.

On each family bare decoding and the combined detector are timed ``rounds`` times interleaved, the
other detectors once (their cuts, and one timing).

Run: ``.venv/bin/python benchmarks/bench_shots.py [rounds] [--families all|none|NAME,...] [--no-peers]``
(``benchmarks/bench_video.py`` runs it too); figures go to ``benchmarks/results/shots.json``.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import ROOT, table, write_results

W, H, RATE, SHOT = 640, 360, 25, 75
TRANSITION = 20
# FFmpeg's gradients source draws random colours and line ends unless they are given (its seed
# option does not fix them in FFmpeg 5.1): given, so every run scores the same clip.
GRADIENTS = "gradients=speed=0.02:c0=0x3050d0:c1=0xe0a040:x0=40:y0=30:x1=600:y1=330"
CELLAUTO_SEED = 1  # cellauto's random first row, fixed
OUT = Path(tempfile.gettempdir()) / "mediafleet-bench-shots"
REAL = ROOT.parent / "shared" / "corpus" / "video" / "testvideo.mp4"


def source(spec: str, frames: int) -> np.ndarray:
    """``frames`` RGB frames of an FFmpeg lavfi source at the clip's size and rate."""
    spec += f"{':' if '=' in spec else '='}size={W}x{H}:rate={RATE}"
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", spec, "-frames:v", str(frames),
         "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(frames, H, W, 3).copy()


def real(first: int, frames: int, size: tuple[int, int] = (W, H)) -> np.ndarray:
    """Frames ``first`` .. ``first + frames - 1`` of the real footage, scaled to ``size``."""
    width, height = size
    chain = f"select='between(n,{first},{first + frames - 1})',scale={width}:{height}"
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(REAL), "-vf", chain, "-vsync", "0", "-f", "rawvideo", "-pix_fmt", "rgb24",
         "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(frames, height, width, 3).copy()


def slide(lines: list[int], frames: int, seed: int) -> np.ndarray:
    """A white slide: a title bar and "text" lines of the given lengths (in tenths of the width)."""
    image = np.full((H, W, 3), 250, np.uint8)
    image[30:58, 40:400] = (30, 60, 140)
    rng = np.random.default_rng(seed)
    for k, tenths in enumerate(lines):
        y = 90 + 34 * k
        x = 60
        while x < 60 + tenths * 52:  # words of dark ink with gaps
            width = int(rng.integers(20, 70))
            image[y:y + 14, x:min(x + width, 60 + tenths * 52)] = 40
            x += width + 10
    return np.repeat(image[None], frames, axis=0)


@dataclass
class Truth:
    cuts: list[int] = field(default_factory=list)  # first frame of the new shot
    cut_kinds: list[str] = field(default_factory=list)
    transitions: list[tuple[int, int, str]] = field(default_factory=list)  # first, last frame, kind
    inside: list[tuple[int, int, str]] = field(default_factory=list)  # events that are not boundaries


def _shots() -> tuple[list[np.ndarray], list[tuple[str, str]], list[tuple[int, int, int, str]]]:
    """The shots, what joins each to the next (kind, cut class), and the events inside shots."""
    shots = [
        source("testsrc2", SHOT), source("mandelbrot", SHOT), source("smptehdbars", SHOT),
        slide([9, 8, 9, 6, 7], SHOT, 1),
        slide([9, 8, 9, 6, 7, 8], SHOT, 1),  # slide A with one more line
        slide([9, 8, 9, 6, 7, 8, 5], SHOT, 1),  # and another
        source(GRADIENTS, SHOT), source("testsrc", SHOT), source("rgbtestsrc", SHOT),
        source(f"cellauto=rule=110:seed={CELLAUTO_SEED}", SHOT), source("testsrc2", SHOT), source("mandelbrot", SHOT),
    ]
    joins = [("cut", "distinct"), ("fade", ""), ("cut", "distinct"), ("cut", "near-identical"),
             ("cut", "near-identical"), ("dissolve", ""), ("wipe", ""), ("cut", "distinct"), ("fadeblack", ""),
             ("cut", "into fast motion"), ("cut", "out of fast motion")]
    events = [(6, 28, 47, "fade to black inside a shot"), (8, 30, 31, "flash"), (10, 0, SHOT - 1, "fast pan")]
    rgb = shots[8]
    rgb[30:32] = np.clip(rgb[30:32].astype(np.int16) + 180, 0, 255).astype(np.uint8)
    pan = shots[10]
    for i in range(SHOT):
        pan[i] = np.roll(pan[i], 24 * i, axis=1)
    grad = shots[6]
    ramp = np.concatenate([np.linspace(1, 0, 9), np.zeros(2), np.linspace(0, 1, 9)])
    grad[28:48] = (grad[28:48] * ramp[:, None, None, None]).astype(np.uint8)
    if REAL.exists():
        base = len(shots)
        leaf = real(32, 50)
        # The same picture a little closer (5 % cropped off each side): a cut to a near-identical shot.
        closer = np.stack([cv2.resize(f[H // 20: H - H // 20, W // 20: W - W // 20], (W, H),
                                      interpolation=cv2.INTER_AREA) for f in real(130, 50)])
        deer, stone, planks = real(245, SHOT), real(430, SHOT), real(570, SHOT)
        deer[37] = np.clip(deer[37].astype(np.int16) + 150, 0, 255).astype(np.uint8)  # a camera flash
        big = real(600, 1, (W * 2, H * 2))[0]  # a fast pan across a real picture: 8 px a frame
        sweep = np.stack([big[H // 2: H // 2 + H, 8 * i: 8 * i + W] for i in range(SHOT)])
        shots += [leaf, closer, deer, stone, planks, sweep]
        joins += [("cut", "distinct"), ("cut", "near-identical"), ("dissolve", ""), ("cut", "distinct"),
                  ("wipe-down", ""), ("cut", "into fast motion")]
        events += [(base + 3, 36, 38, "flash (real)"), (base + 6, 0, SHOT - 1, "fast pan (real)")]
    return shots, joins, events


def make_clip() -> tuple[Path, Truth, int]:
    OUT.mkdir(exist_ok=True)
    path = OUT / ("shots-real.mp4" if REAL.exists() else "shots.mp4")
    shots, joins, events = _shots()
    truth = Truth()
    frames: list[np.ndarray] = []
    for k, clip in enumerate(shots):
        join, cut_class = joins[k - 1] if k else (None, "")
        start = len(frames) - (TRANSITION if join not in (None, "cut") else 0)  # where this shot's frame 0 goes
        truth.inside.extend((start + a, start + b, kind) for shot, a, b, kind in events if shot == k)
        if join in (None, "cut"):
            if join == "cut":
                truth.cuts.append(len(frames))
                truth.cut_kinds.append(cut_class)
            frames.extend(clip)
            continue
        # A gradual transition: the previous shot's last TRANSITION frames blend into this one's first.
        prev = np.stack(frames[-TRANSITION:]).astype(np.float32)
        nxt = clip[:TRANSITION].astype(np.float32)
        a = (np.arange(1, TRANSITION + 1, dtype=np.float32) / (TRANSITION + 1))[:, None, None, None]
        if join in ("fade", "dissolve"):
            if join == "dissolve":  # a dissolve with grain: each pixel switches at its own moment
                rng = np.random.default_rng(7)
                a = (a + rng.uniform(-0.15, 0.15, (1, H, W, 1)).astype(np.float32)).clip(0, 1)
            mixed = prev * (1 - a) + nxt * a
        elif join in ("wipe", "wipe-down"):
            if join == "wipe":
                edge = (np.arange(W)[None, None, :, None] < a * W).astype(np.float32)
            else:
                edge = (np.arange(H)[None, :, None, None] < a * H).astype(np.float32)
            mixed = prev * (1 - edge) + nxt * edge
        else:  # fadeblack
            out = np.clip(1 - 2 * a, 0, 1)
            inn = np.clip(2 * a - 1, 0, 1)
            mixed = prev * out + nxt * inn
        start = len(frames) - TRANSITION
        frames[-TRANSITION:] = list(mixed.round().clip(0, 255).astype(np.uint8))
        truth.transitions.append((start, start + TRANSITION - 1, join.replace("-down", "")))
        frames.extend(clip[TRANSITION:])
    proc = subprocess.Popen(
        ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{W}x{H}", "-r", str(RATE),
         "-i", "-", "-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-pix_fmt", "yuv420p", str(path)],
        stdin=subprocess.PIPE)
    assert proc.stdin is not None
    for frame in frames:
        proc.stdin.write(frame.tobytes())
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError("ffmpeg could not write the clip")
    return path, truth, len(frames)


# --- slide decks and screen recordings (issue 43) --------------------------------------------------

DECK_W, DECK_H = 1280, 720
DECK_SHOT = 40  # frames a slide holds
DOCS = Path("/usr/share/doc")
FONTS = Path("/usr/share/fonts/truetype/dejavu")
FAMILY_VERSION = 3  # bump when a family's frames change (the clips are cached by it)
PAPER, INK, BAR = (248, 248, 244), (35, 35, 40), (30, 60, 140)


def debian_pdfs() -> list[Path]:
    """The PDFs Debian's packages installed under /usr/share/doc (plain or gzipped), by path."""
    return [p for p in sorted(DOCS.glob("**/*.pdf*")) if p.name.endswith((".pdf", ".pdf.gz"))]


def _pdf(path: Path) -> Any:
    import gzip

    import pymupdf

    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return pymupdf.open(stream=data, filetype="pdf")


def document_lines(count: int) -> list[str]:
    """``count`` distinct lines of prose (24-56 characters, mostly letters) from the real PDFs, taken
    in turn from each document's pages after its first two."""
    per_doc: list[list[str]] = []
    for path in debian_pdfs():
        lines = []
        doc = _pdf(path)
        for page in list(doc)[2:12]:
            for raw in page.get_text().splitlines():
                line = " ".join(raw.split())
                if 24 <= len(line) <= 56 and sum(c.isalpha() or c == " " for c in line) >= 0.9 * len(line):
                    lines.append(line)
        per_doc.append(lines)
    out: list[str] = []
    for row in range(max(map(len, per_doc), default=0)):
        for lines in per_doc:
            if row < len(lines) and lines[row] not in out:
                out.append(lines[row])
                if len(out) == count:
                    return out
    raise RuntimeError("not enough prose in the PDFs under /usr/share/doc")


def page_bodies(count: int, size: tuple[int, int]) -> list[tuple[str, np.ndarray]]:
    """``count`` (title, RGB image of ``size``): the top of a real page each (pages 3, 4, ... of each PDF
    in turn), rendered at the width of ``size``."""
    import pymupdf

    docs = [(path.name.split(".")[0], _pdf(path)) for path in debian_pdfs()]
    out: list[tuple[str, np.ndarray]] = []
    for number in range(2, 40):
        for name, doc in docs:
            if number >= doc.page_count:
                continue
            page = doc[number]
            zoom = size[0] / (page.rect.width - 100)
            clip = pymupdf.Rect(50, 60, page.rect.width - 50, 60 + size[1] / zoom)
            pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), clip=clip, alpha=False)
            image = np.frombuffer(pix.samples, np.uint8).reshape(pix.height, pix.width, 3)
            out.append((f"{name}, page {number + 1}", cv2.resize(image, size, interpolation=cv2.INTER_AREA)))
            if len(out) == count:
                return out
    raise RuntimeError("not enough pages in the PDFs under /usr/share/doc")


def _font(size: int, name: str = "DejaVuSans.ttf") -> Any:
    from PIL import ImageFont

    return ImageFont.truetype(str(FONTS / name), size)


def deck_slide(title: str, lines: list[str], body: np.ndarray | None = None) -> np.ndarray:
    """One slide of the deck template: a title bar, then bullet lines of text (or a picture)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (DECK_W, DECK_H), PAPER)
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, DECK_W, 96), fill=BAR)
    draw.text((60, 24), title, font=_font(40, "DejaVuSans-Bold.ttf"), fill=(255, 255, 255))
    draw.line((60, 676, DECK_W - 60, 676), fill=(180, 180, 190), width=2)
    draw.text((60, 684), "Debian documentation, read aloud", font=_font(18), fill=(120, 120, 130))
    font = _font(30)
    for k, line in enumerate(lines):
        y = 140 + 58 * k
        draw.ellipse((64, y + 12, 76, y + 24), fill=BAR)
        draw.text((92, y), line, font=font, fill=INK)
    out = np.asarray(image).copy()
    if body is not None:
        out[120:120 + body.shape[0], 60:60 + body.shape[1]] = body
    return out


def draw_cursor(image: np.ndarray, x: int, y: int) -> np.ndarray:
    """A mouse pointer (a black arrow with a white rim) at (x, y), on a copy."""
    out = image.copy()
    arrow = np.array([[0, 0], [0, 26], [7, 20], [12, 31], [16, 29], [11, 18], [19, 18]], np.int32) + [x, y]
    cv2.fillPoly(out, [arrow], (255, 255, 255))
    cv2.polylines(out, [arrow], True, (0, 0, 0), 2)
    return out


class ClipWriter:
    """Frames piped to FFmpeg (H.264, 25 fps) as they are made, with the truth noted alongside."""

    def __init__(self, path: Path, size: tuple[int, int], crf: int = 23) -> None:
        self.path, self.size, self.count, self.truth = path, size, 0, Truth()
        self.proc = subprocess.Popen(
            ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{size[0]}x{size[1]}",
             "-r", str(RATE), "-i", "-", "-c:v", "libx264", "-preset", "veryfast", "-crf", str(crf),
             "-pix_fmt", "yuv420p", str(path)], stdin=subprocess.PIPE)

    def write(self, frame: np.ndarray, times: int = 1) -> None:
        assert self.proc.stdin is not None and frame.shape == (self.size[1], self.size[0], 3)
        data = np.ascontiguousarray(frame).tobytes()
        for _ in range(times):
            self.proc.stdin.write(data)
        self.count += times

    def cut(self, kind: str) -> None:
        """The next frame written starts a new shot."""
        if self.count:
            self.truth.cuts.append(self.count)
            self.truth.cut_kinds.append(kind)

    def event(self, first: int, kind: str) -> None:
        """Frames ``first`` .. the last written are an event inside a shot (no boundary)."""
        self.truth.inside.append((first, self.count - 1, kind))

    def close(self) -> tuple[Path, Truth, int]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        if self.proc.wait() != 0:
            raise RuntimeError("ffmpeg could not write the clip")
        return self.path, self.truth, self.count


def deck_pages(out: ClipWriter) -> None:
    """Real pages as slides (the top of a page of each Debian PDF in turn) under one title bar,
    compressed harder (CRF 30); a mouse pointer crosses one slide and stops, another blinks a caret."""
    bodies = page_bodies(8, (DECK_W - 120, 540))
    for k, (title, body) in enumerate(bodies):
        out.cut("real page")
        image = deck_slide(title, [], body)
        if k == 2:  # the pointer crosses the slide in 20 frames, then rests on it
            out.write(image, 10)
            first = out.count
            for i in range(20):
                out.write(draw_cursor(image, 200 + 35 * i, 200 + 15 * i))
            out.event(first, "moving cursor")
            out.write(draw_cursor(image, 900, 500), DECK_SHOT - 30)
        elif k == 5:  # a text caret blinking (12 frames on, 12 off) on the page
            first = out.count
            for i in range(DECK_SHOT + 20):
                on = image.copy()
                if (i // 12) % 2 == 0:
                    on[300:330, 700:703] = 0
                out.write(on)
            out.event(first, "blinking caret")
        else:
            out.write(image, DECK_SHOT)


def deck_text(out: ClipWriter) -> None:
    """The same template with different text on every slide; one slide filmed with sensor noise,
    and a video playing inside the last four slides (a picture-in-picture inset that keeps playing
    across their cuts, as a lecture's webcam does)."""
    lines = document_lines(48)
    inset = source("testsrc2", 4 * DECK_SHOT)
    inset = np.stack([cv2.resize(f, (320, 180), interpolation=cv2.INTER_AREA) for f in inset])
    rng = np.random.default_rng(11)
    played = 0
    for k in range(8):
        out.cut("new text")
        image = deck_slide(lines[6 * k], lines[6 * k + 1: 6 * k + 6])
        first = out.count
        if k == 1:
            for _ in range(DECK_SHOT):
                noisy = image.astype(np.int16) + rng.normal(0, 4, image.shape).astype(np.int16)
                out.write(noisy.clip(0, 255).astype(np.uint8))
            out.event(first, "sensor noise")
        elif k >= 4:
            for _ in range(DECK_SHOT):
                framed = image.copy()
                framed[470:650, 920:1240] = inset[played]
                played += 1
                out.write(framed)
            out.event(first + 1, "video inside the slide")
        else:
            out.write(image, DECK_SHOT)


def deck_line(out: ClipWriter) -> None:
    """One line changed from each slide to the next (the rest of the slide as it was)."""
    lines = document_lines(20)
    shown = lines[:6]
    for k in range(9):
        out.cut("one line")
        if k:
            shown = [*shown]
            shown[(2 * k) % 6] = lines[5 + k]
        out.write(deck_slide("What the manuals say", shown), DECK_SHOT)


def _swap_word(line: str, replacement: str) -> str:
    """``line`` with its longest word (4+ letters) replaced by ``replacement``."""
    words = line.split(" ")
    k = max(range(len(words)), key=lambda i: (len(words[i]) * words[i].isalpha(), -i))
    words[k] = replacement
    return " ".join(words)


def deck_word(out: ClipWriter) -> None:
    """One word changed from each slide to the next: the longest word of one line replaced by
    another real word of four or more letters."""
    lines = document_lines(30)
    shown = lines[:6]
    vocabulary = sorted({w for line in lines[6:] for w in line.split() if w.isalpha() and 5 <= len(w) <= 9})
    for k in range(9):
        out.cut("one word")
        if k:
            shown = [*shown]
            row = (k * 5) % 6
            shown[row] = _swap_word(shown[row], vocabulary[(k * 7) % len(vocabulary)])
        out.write(deck_slide("One word at a time", shown), DECK_SHOT)


def deck_build(out: ClipWriter) -> None:
    """Bullet builds: a title, then its lines appearing one at a time; a second slide builds the same
    way and then its lines go, one at a time, from the last."""
    lines = document_lines(12)
    for title, block in (("Building the list", lines[:5]), ("And taking it down", lines[5:10])):
        out.cut("new slide")
        out.write(deck_slide(title, []), 30)
        for n in range(1, 6):
            out.cut("line appears")
            out.write(deck_slide(title, block[:n]), 30)
    for n in range(4, 1, -1):
        out.cut("line goes")
        out.write(deck_slide("And taking it down", lines[5:5 + n]), 30)


TERM_BG, TERM_FG, TERM_ROWS, TERM_ROW_H = (24, 26, 30), (205, 210, 200), 24, 26


def terminal(rows: list[str], caret: tuple[int, int] | None, scheme: int = 0) -> np.ndarray:
    """A terminal window: a title bar and ``rows`` of monospaced text; the caret (row, column) drawn
    as a block when given."""
    from PIL import Image, ImageDraw

    bg = TERM_BG if scheme % 2 == 0 else (250, 250, 245)
    fg = TERM_FG if scheme % 2 == 0 else (30, 30, 30)
    image = Image.new("RGB", (DECK_W, DECK_H), bg)
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, DECK_W, 34), fill=(62, 64, 70))
    draw.text((20, 7), f"user@debian: ~/notes-{scheme}", font=_font(18), fill=(230, 230, 230))
    font = _font(20, "DejaVuSansMono.ttf")
    for r, text in enumerate(rows[-TERM_ROWS:]):
        draw.text((16, 44 + TERM_ROW_H * r), text, font=font, fill=fg)
    if caret is not None:
        row, column = caret
        x, y = 16 + 12 * column, 44 + TERM_ROW_H * row
        draw.rectangle((x, y + 2, x + 11, y + 23), fill=fg)
    return np.asarray(image)


def screen_terminal(out: ClipWriter) -> None:
    """A terminal recording: prose typed a character at a time (1 to 4 frames each, a pause after each
    line with the caret blinking), the window scrolling a line up when the text reaches its foot;
    cuts where the recording switches to another terminal window holding other text."""
    lines = document_lines(120)
    rng = np.random.default_rng(5)
    cursor = 0
    for window in range(4):
        out.cut("another window")
        rows = list(lines[cursor: cursor + TERM_ROWS - 1])
        cursor += TERM_ROWS - 1
        for _ in range(2):
            line = lines[cursor % len(lines)][:36]
            cursor += 1
            rows.append("")
            if len(rows) > TERM_ROWS:  # the text reaches the foot: everything moves up a line
                first = out.count
                out.write(terminal(rows, (TERM_ROWS - 1, 0), window), 4)
                out.event(first, "scrolling line")
            shown = rows[-TERM_ROWS:]
            row = len(shown) - 1
            first = out.count
            for c in range(1, len(line) + 1):
                rows[-1] = line[:c]
                out.write(terminal(rows, (row, c), window), int(rng.integers(1, 5)))
            out.event(first, "typing")
            first = out.count
            for i in range(24):  # a pause: the caret blinks
                caret = (row, len(line)) if (i // 12) % 2 == 0 else None
                out.write(terminal(rows, caret, window))
            out.event(first, "blinking caret")


def viewer(page: np.ndarray, offset: int, title: str) -> np.ndarray:
    """A document viewer: grey chrome, and the tall page image seen from ``offset`` pixels down."""
    image = np.full((DECK_H, DECK_W, 3), 86, np.uint8)
    image[:40] = (52, 54, 60)
    cv2.putText(image, title, (20, 27), cv2.FONT_HERSHEY_SIMPLEX, 0.7, (230, 230, 230), 1, cv2.LINE_AA)
    view = page[offset: offset + DECK_H - 60]
    image[50:50 + view.shape[0], 190:190 + view.shape[1]] = view
    return image


def screen_scroll(out: ClipWriter) -> None:
    """A window scrolling through real documents: a smooth scroll (6 px a frame), wheel steps (three
    lines, 66 px, at once, then still), the pointer moving over the page; cuts where the recording
    switches to another document."""
    bodies = page_bodies(8, (900, 1200))
    for k in range(4):
        out.cut("another document")
        title, top = bodies[2 * k]
        _, below = bodies[2 * k + 1]
        page = np.concatenate([top, below])
        offset = 0
        out.write(viewer(page, offset, title), 20)
        first = out.count
        for _ in range(25):
            offset += 6
            out.write(viewer(page, offset, title))
        out.event(first, "smooth scroll")
        out.write(viewer(page, offset, title), 15)
        for _ in range(2):
            first = out.count
            offset += 66
            out.write(viewer(page, offset, title), 12)
            out.event(first, "wheel scroll")
        still = viewer(page, offset, title)
        first = out.count
        for i in range(15):
            out.write(draw_cursor(still, 400 + 30 * i, 600 - 20 * i))
        out.event(first, "moving cursor")
        out.write(draw_cursor(still, 820, 320), 15)


FAMILIES: dict[str, tuple[Callable[[ClipWriter], None], int]] = {
    "deck: real pages": (deck_pages, 30),
    "deck: new text": (deck_text, 23),
    "deck: one line": (deck_line, 23),
    "deck: one word": (deck_word, 23),
    "deck: bullet builds": (deck_build, 23),
    "screen: terminal typing": (screen_terminal, 23),
    "screen: window scrolling": (screen_scroll, 23),
}


def make_family(name: str) -> tuple[Path, Truth, int]:
    """The family's clip (1280x720, 25 fps, H.264) and its truth; cached in the temp directory."""
    import json

    OUT.mkdir(exist_ok=True)
    slug = re.sub(r"[^a-z]+", "-", name).strip("-")
    path, truth_path = OUT / f"{slug}-v{FAMILY_VERSION}.mp4", OUT / f"{slug}-v{FAMILY_VERSION}.json"
    if path.exists() and truth_path.exists():
        saved = json.loads(truth_path.read_text())
        truth = Truth(saved["cuts"], saved["cut_kinds"], [], [tuple(e) for e in saved["inside"]])  # type: ignore[misc]
        return path, truth, saved["frames"]
    maker, crf = FAMILIES[name]
    writer = ClipWriter(path.with_suffix(".part.mp4"), (DECK_W, DECK_H), crf)
    maker(writer)
    made, truth, frames = writer.close()
    made.replace(path)
    truth_path.write_text(json.dumps({"cuts": truth.cuts, "cut_kinds": truth.cut_kinds, "inside": truth.inside,
                                      "frames": frames}))
    return path, truth, frames


@dataclass
class Found:
    cuts: list[int]  # first frame of each shot that starts with a cut
    transitions: list[tuple[int, int]] = field(default_factory=list)  # first, last frame


def score(found: Found, truth: Truth) -> dict[str, Any]:
    cut_hit: dict[int, int] = {}  # true cut position -> reported cut
    span_hit: dict[int, Any] = {}  # true transition position -> what found it
    false_cuts: list[int] = []
    false_spans: list[Any] = []
    for f in found.cuts:
        cut = next((k for k, c in enumerate(truth.cuts) if abs(f - c) <= 1 and k not in cut_hit), None)
        if cut is not None:
            cut_hit[cut] = f
            continue
        span = next((k for k, (a, b, _) in enumerate(truth.transitions) if a - 1 <= f <= b + 1), None)
        if span is None:
            false_cuts.append(f)
        elif span in span_hit:
            false_spans.append(f)  # a second cut inside one transition
        else:
            span_hit[span] = f
    for first, last in found.transitions:
        span = next((k for k, (a, b, _) in enumerate(truth.transitions) if first <= b and a <= last), None)
        if span is None or span in span_hit:
            false_spans.append([first, last])
        else:
            span_hit[span] = [first, last]

    def f1(tp: int, fp: int, fn: int) -> float:
        return round(2 * tp / (2 * tp + fp + fn), 3) if tp or fp or fn else 1.0

    boundaries = [*found.cuts, *(a for a, _ in found.transitions), *(b + 1 for _, b in found.transitions)]
    by_class: dict[str, list[int]] = {}
    for k, kind in enumerate(truth.cut_kinds):
        counts = by_class.setdefault(f"cut: {kind}", [0, 0])
        counts[0] += k in cut_hit
        counts[1] += 1
    for k, (_, _, kind) in enumerate(truth.transitions):
        counts = by_class.setdefault(f"transition: {kind}", [0, 0])
        counts[0] += k in span_hit
        counts[1] += 1
    false_on: dict[str, list[int]] = {}
    for a, b, kind in truth.inside:
        at = false_on.setdefault(kind, [])
        at += [f for f in boundaries if a - 1 <= f <= b + 1 and f not in truth.cuts and f not in at]
    return {
        "cuts_found": len(cut_hit), "cuts": len(truth.cuts),
        "cut_f1": f1(len(cut_hit), len(false_cuts), len(truth.cuts) - len(cut_hit)),
        "transitions_found": len(span_hit), "transitions": len(truth.transitions),
        "transition_f1": f1(len(span_hit), len(false_spans), len(truth.transitions) - len(span_hit)),
        "false_cuts": false_cuts, "false_transitions": false_spans,
        "missed_cuts": [c for k, c in enumerate(truth.cuts) if k not in cut_hit],
        "missed_transitions": [list(t) for k, t in enumerate(truth.transitions) if k not in span_hit],
        "by_class": {name: f"{hit}/{total}" for name, (hit, total) in by_class.items()},
        "false_on": {kind: at for kind, at in false_on.items() if at},
    }


def mediafleet(path: Path, detector: str) -> Found:
    from mediafleet.contract.manifest import Limits
    from mediafleet.contract.video import VideoOptions
    from mediafleet.workers.video.extract import extract_keyframes

    limits = Limits(max_bytes=2**32, max_pixels=8847360, max_duration_s=10800)
    result = extract_keyframes(path, VideoOptions(detector=detector, speech=False), limits)  # type: ignore[arg-type]
    found = Found([])
    for before, shot in zip(result.shots, result.shots[1:], strict=False):
        if shot.kind == "transition":
            found.transitions.append((shot.first_frame_index, shot.last_frame_index))
        elif before.kind == "shot":
            found.cuts.append(shot.first_frame_index)
    return found


def pyscenedetect(path: Path, name: str) -> Found:
    import scenedetect

    detector = getattr(scenedetect, name)()
    scenes = scenedetect.detect(str(path), detector, show_progress=False)
    return Found([start.frame_num for start, _ in scenes[1:]])


def ffmpeg_scene(path: Path, threshold: float = 0.3) -> Found:
    err = subprocess.run(["ffmpeg", "-hide_banner", "-i", str(path), "-vf", f"select='gt(scene,{threshold})',showinfo",
                          "-f", "null", "-"], check=False, capture_output=True, text=True).stderr
    return Found([round(float(t) * RATE) for t in re.findall(r"pts_time:([0-9.]+)", err)])


def _cpu() -> float:
    """CPU seconds of this process and its finished children, every thread."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bare_decode(path: Path) -> Found:
    subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "null", "-"], check=True)
    return Found([])


BARE = "ffmpeg -f null (bare decode, floor)"


def _timed(runs: dict[str, Callable[[], Found]], rounds: int, once: set[str]) -> tuple[dict[str, Found], dict[str, list[float]], dict[str, list[float]]]:
    """Every run ``rounds`` times interleaved (those in ``once``: the first round only)."""
    walls: dict[str, list[float]] = {name: [] for name in runs}
    cpus: dict[str, list[float]] = {name: [] for name in runs}
    found: dict[str, Found] = {}
    for round_ in range(rounds):
        for name, fn in runs.items():
            if round_ and name in once:
                continue
            cpu, start = _cpu(), time.perf_counter()
            found[name] = fn()
            walls[name].append(time.perf_counter() - start)
            cpus[name].append(_cpu() - cpu)
    return found, walls, cpus


def _results(runs: dict[str, Callable[[], Found]], found: dict[str, Found], walls: dict[str, list[float]],
             cpus: dict[str, list[float]], truth: Truth, frames: int) -> dict[str, Any]:
    floor, floor_cpu = statistics.median(walls[BARE]), statistics.median(cpus[BARE])
    results: dict[str, Any] = {}
    for name in runs:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        speed = {"wall_s": round(wall, 4), "frames_per_s": round(frames / wall, 1),
                 "ratio_to_bare_decode": round(floor / wall, 3), "cpu_s": round(cpu, 4),
                 "ratio_to_bare_decode_cpu": round(floor_cpu / cpu, 3),
                 "best_wall_s": round(min(walls[name]), 4),
                 "ratio_to_bare_decode_best_wall": round(min(walls[BARE]) / min(walls[name]), 3),
                 "timed_runs": len(walls[name])}
        if name == BARE:
            results[name] = speed
            continue
        results[name] = {"cuts_reported": found[name].cuts, "transitions_reported": found[name].transitions,
                         **score(found[name], truth), **speed}
    return results


def _speed_cells(r: dict[str, Any]) -> tuple[str, ...]:
    return (f"{r['frames_per_s']:,.0f}", f"{r['ratio_to_bare_decode']:.2f}x",
            f"{r['ratio_to_bare_decode_best_wall']:.2f}x", f"{r['cpu_s']:.3f}", f"{r['ratio_to_bare_decode_cpu']:.2f}x")


def _peers(path: Path, fast: bool) -> dict[str, Callable[[], Found]]:
    peers: dict[str, Callable[[], Found]] = {
        "mediafleet adaptive": lambda: mediafleet(path, "adaptive"),
        "mediafleet content": lambda: mediafleet(path, "content"),
    }
    names = ("AdaptiveDetector", "ContentDetector", "HashDetector") if fast else (
        "AdaptiveDetector", "ContentDetector", "HistogramDetector", "HashDetector", "ThresholdDetector")
    peers.update({f"PySceneDetect {n}": (lambda n=n: pyscenedetect(path, n)) for n in names})
    peers["ffmpeg scene > 0.3"] = lambda: ffmpeg_scene(path)
    return peers


def run_families(rounds: int, names: list[str], peers: bool = True) -> dict[str, Any]:
    """Each slide-deck and screen-recording family: bare decoding and the combined detector timed
    ``rounds`` times interleaved, the other detectors once (their cuts and one timing)."""
    out: dict[str, Any] = {}
    for name in names:
        path, truth, frames = make_family(name)
        combined = "mediafleet combined (default)"
        runs: dict[str, Callable[[], Found]] = {BARE: lambda: bare_decode(path),
                                                 combined: lambda: mediafleet(path, "combined")}
        others = _peers(path, fast=True) if peers else {}
        runs.update(others)
        found, walls, cpus = _timed(runs, rounds, set(others))
        results = _results(runs, found, walls, cpus, truth, frames)
        out[name] = {"clip": {"frames": frames, "size": f"{DECK_W}x{DECK_H}", "rate": RATE, "cuts": truth.cuts,
                              "cut_kinds": truth.cut_kinds, "inside_shots": truth.inside},
                     "detectors": results}
        print(f"\n{name}: {frames} frames {DECK_W}x{DECK_H}, {len(truth.cuts)} cuts, events inside shots: "
              f"{', '.join(sorted({k for _, _, k in truth.inside})) or 'none'}")
        rows = [("detector", "cuts", "cut F1", "false on events inside shots", "frames/s", "vs bare", "best", "CPU s",
                 "vs bare (CPU)")]
        for detector, r in results.items():
            if detector == BARE:
                rows.append((detector, "-", "-", "-", *_speed_cells(r)))
                continue
            rows.append((detector, f"{r['cuts_found']}/{r['cuts']}", f"{r['cut_f1']:.2f}",
                         ", ".join(f"{kind} ({len(at)})" for kind, at in r["false_on"].items()) or "-",
                         *_speed_cells(r)))
        print(table(rows))
    return out


def run(rounds: int = 3, families: list[str] | None = None, peers: bool = True) -> dict[str, Any]:
    """Build the clips, run every detector (``rounds`` times interleaved on the mixed clip; on each
    family bare decoding and the combined detector ``rounds`` times, the others once), score,
    print, write shots.json."""
    from mediafleet.workers.engines import EngineConfig, configure

    configure(EngineConfig(threads=os.cpu_count() or 1))
    path, truth, frames = make_clip()
    runs: dict[str, Callable[[], Found]] = {
        BARE: lambda: bare_decode(path),
        "mediafleet combined (default)": lambda: mediafleet(path, "combined"),
        **(_peers(path, fast=False) if peers else {}),
    }
    mediafleet(path, "combined")  # warm imports and OpenCV before timing
    found, walls, cpus = _timed(runs, rounds, set())
    results = _results(runs, found, walls, cpus, truth, frames)
    print(f"\nShots: {frames} frames {W}x{H} at {RATE} fps, {len(truth.cuts)} cuts, {len(truth.transitions)} "
          f"transitions, {len(truth.inside)} events inside shots (real footage: {'yes' if REAL.exists() else 'no'}); "
          f"medians of {rounds} interleaved rounds")
    rows = [("detector", "cuts", "cut F1", "transitions", "transition F1", "false on events inside shots",
             "frames/s", "vs bare", "best", "CPU s", "vs bare (CPU)")]
    for name, r in results.items():
        if name == BARE:
            rows.append((name, "-", "-", "-", "-", "-", *_speed_cells(r)))
            continue
        rows.append((name, f"{r['cuts_found']}/{r['cuts']}", f"{r['cut_f1']:.2f}",
                     f"{r['transitions_found']}/{r['transitions']}", f"{r['transition_f1']:.2f}",
                     ", ".join(f"{kind} ({len(at)})" for kind, at in r["false_on"].items()) or "-", *_speed_cells(r)))
    print(table(rows))
    classes = list(next(r for n, r in results.items() if n != BARE)["by_class"])
    names = [n for n in results if n != BARE]
    print("\nFound, by class:")
    print(table([("class", *names)] + [(c, *(results[n]["by_class"][c] for n in names)) for c in classes]))
    family_results = run_families(rounds, list(FAMILIES) if families is None else families, peers)
    if family_results:
        print("\nCut F1 by family (combined, then the best other detector):")
        print(table([("family", "combined", "vs bare", "best other")] + [
            (name, f"{f['detectors']['mediafleet combined (default)']['cut_f1']:.2f}",
             f"{f['detectors']['mediafleet combined (default)']['ratio_to_bare_decode']:.2f}x",
             max((f"{r['cut_f1']:.2f} ({d})" for d, r in f["detectors"].items()
                  if d not in (BARE, "mediafleet combined (default)")), default="-"))
            for name, f in family_results.items()]))
    write_results("shots", {
        "clip": {"frames": frames, "size": f"{W}x{H}", "rate": RATE, "real_footage": REAL.exists(),
                 "cuts": truth.cuts, "cut_kinds": truth.cut_kinds, "transitions": truth.transitions,
                 "inside_shots": truth.inside},
        "rounds": rounds, "load_average_after": round(os.getloadavg()[0], 2), "detectors": results,
        "families": family_results,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
    return results


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rounds", nargs="?", type=int, default=3)
    parser.add_argument("--families", default="all",
                        help="comma-separated family names (see FAMILIES), 'all' or 'none'")
    parser.add_argument("--no-peers", action="store_true", help="time bare decoding and the combined detector only")
    args = parser.parse_args(argv)
    families = list(FAMILIES) if args.families == "all" else [] if args.families == "none" else [
        n.strip() for n in args.families.split(",")]
    run(args.rounds, families, peers=not args.no_peers)


if __name__ == "__main__":
    main(sys.argv[1:])
