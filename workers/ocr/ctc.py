"""Greedy CTC decoding that keeps where each character was read.

The recogniser scores every 8-pixel column (a timestep) of a line resized to 48 pixels high;
a character is a run of equal non-blank argmax labels. Keeping each run's columns lets the
spacing step (:mod:`mediafleet.workers.ocr.spacing`) place characters back on the line image.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Decoded", "decode"]

_BLANK = 0


@dataclass(frozen=True)
class Decoded:
    """One line as read: its characters, each one's probability and x span in crop pixels."""

    chars: list[str]
    probs: list[float]
    spans: list[tuple[float, float]]  # (x0, x1) in the crop's pixels, left to right

    @property
    def text(self) -> str:
        return "".join(self.chars)

    @property
    def confidence(self) -> float:
        """Mean probability of the characters read (0 for a line with none)."""
        return float(np.mean(self.probs)) if self.probs else 0.0


def decode(probs: np.ndarray, charset: list[str], *, crop_width: int, input_width: int, used_width: int) -> Decoded:
    """Decode one line's ``(timesteps, classes)`` scores.

    Args:
        probs: softmax scores of one line.
        charset: class index -> character (index 0 is the CTC blank).
        crop_width: width of the line image before it was resized for the recogniser.
        input_width: width of the (padded) recogniser input.
        used_width: width the line itself took in that input (the rest is padding).
    """
    labels = probs.argmax(axis=1)
    steps = len(labels)
    best = probs[np.arange(steps), labels]  # one pass over the ~18,700 classes, not two
    to_crop = (input_width / steps) * (crop_width / max(used_width, 1))
    chars: list[str] = []
    scores: list[float] = []
    spans: list[tuple[float, float]] = []
    t = 0
    while t < steps:
        label = int(labels[t])
        end = t + 1
        while end < steps and labels[end] == label:
            end += 1
        if label != _BLANK and label < len(charset):
            chars.append(charset[label])
            scores.append(float(best[t]))
            spans.append((min(t * to_crop, crop_width), min(end * to_crop, crop_width)))
        t = end
    return Decoded(chars=chars, probs=scores, spans=spans)
