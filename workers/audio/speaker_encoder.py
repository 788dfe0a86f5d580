"""Voice embeddings of speech, in numpy: resemblyzer's front end and encoder without torch or librosa.

The front end is resemblyzer's (``resemblyzer/audio.py``, ``hparams.py``): 16 kHz samples, a power
mel spectrogram (not log) with a 25 ms Hann window (400-point FFT), a 10 ms step, 40 mel bands on
the Slaney scale with Slaney area normalisation and frames centred on zero padding, as librosa's
``melspectrogram`` computes it. The signal is brought up to -30 dBFS first (never down), as
``normalize_volume(increase_only=True)``; here that gain is taken over each partial, so a quiet
speaker is heard at the level the model was trained on whatever else the recording holds. The mel
power scales with the gain squared, so a window's spectrogram is computed once and each partial's
slice scaled.

A partial is 160 frames (1.6 s); its embedding is the encoder's (a 3-layer LSTM, hidden 256, the
last layer's final hidden state through a linear layer and a ReLU, L2-normalised). Partials are
taken every :data:`STEP_FRAMES` frames, and all partials of a window run through the LSTM together
(one matrix product a step for the whole batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from mediafleet.workers.audio.speaker_weights import EncoderWeights

__all__ = ["FRAME_SAMPLES", "PARTIAL_FRAMES", "STEP_FRAMES", "Partials", "embed", "mel_spectrogram", "partials"]

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms
FRAME_SAMPLES = 160  # 10 ms
N_MELS = 40
PARTIAL_FRAMES = 160  # 1.6 s, the length the encoder was trained on
STEP_FRAMES = 80  # a partial every 0.8 s: the resolution of a turn change
_TARGET_DBFS = -30.0
_INT16_MAX = 2**15 - 1
_HIDDEN = 256


@cache
def _mel_filters() -> np.ndarray:
    """librosa.filters.mel(sr=16000, n_fft=400, n_mels=40): Slaney scale and area normalisation."""

    def hz_to_mel(hz: np.ndarray) -> np.ndarray:
        hz = np.asanyarray(hz, dtype=np.float64)
        mel = hz / (200.0 / 3)
        log_part = hz >= 1000.0
        return np.where(log_part, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0), mel)

    def mel_to_hz(mel: np.ndarray) -> np.ndarray:
        hz = (200.0 / 3) * mel
        return np.where(mel >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0)), hz)

    fft_freqs = np.linspace(0, SAMPLE_RATE / 2, 1 + N_FFT // 2)
    mel_freqs = mel_to_hz(np.linspace(hz_to_mel(np.array(0.0)), hz_to_mel(np.array(SAMPLE_RATE / 2)), N_MELS + 2))
    spacing = np.diff(mel_freqs)
    ramps = np.subtract.outer(mel_freqs, fft_freqs)
    lower = -ramps[:-2] / spacing[:-1, None]
    upper = ramps[2:] / spacing[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_freqs[2:] - mel_freqs[:-2]))[:, None]
    return weights.astype(np.float32)


@cache
def _window() -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)  # periodic Hann


def mel_spectrogram(samples: np.ndarray) -> np.ndarray:
    """Power mel frames of 16 kHz ``samples``: ``(1 + len // 160, 40)`` float32, as resemblyzer's
    ``wav_to_mel_spectrogram`` (librosa, centred frames on zero padding)."""
    padded = np.pad(samples.astype(np.float32, copy=False), N_FFT // 2)
    count = 1 + (padded.size - N_FFT) // FRAME_SAMPLES
    frames = np.lib.stride_tricks.as_strided(
        padded, shape=(count, N_FFT), strides=(padded.strides[0] * FRAME_SAMPLES, padded.strides[0]), writeable=False,
    )
    spectrum = np.fft.rfft(frames * _window(), axis=1)
    power = (spectrum.real**2 + spectrum.imag**2).astype(np.float32)
    return power @ _mel_filters().T


def _gain(samples: np.ndarray) -> float:
    """The factor that brings ``samples`` up to -30 dBFS (1.0 when louder already, or silent)."""
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if samples.size else 0.0
    if rms <= 0.0:
        return 1.0
    change = _TARGET_DBFS - 20 * np.log10(rms)
    return float(10 ** (change / 20)) if change > 0 else 1.0


def embed(weights: EncoderWeights, mels: np.ndarray) -> np.ndarray:
    """The encoder on a batch of mel partials ``(batch, frames, 40)``: ``(batch, 256)`` L2-normalised
    embeddings (a row of zeros where the ReLU left nothing)."""
    batch, frames, _ = mels.shape
    sequence = mels.astype(np.float32, copy=False)
    hidden = np.zeros((batch, _HIDDEN), dtype=np.float32)
    h3 = 3 * _HIDDEN
    for w_ih, w_hh, bias in weights.lstm:
        # Each step's gates in one product, the input's share for all steps computed beforehand.
        inputs = (sequence.reshape(batch * frames, -1) @ w_ih + bias).reshape(batch, frames, 4 * _HIDDEN)
        hidden = np.zeros((batch, _HIDDEN), dtype=np.float32)
        cell = np.zeros((batch, _HIDDEN), dtype=np.float32)
        outputs = np.empty((batch, frames, _HIDDEN), dtype=np.float32)
        gates = np.empty((batch, 4 * _HIDDEN), dtype=np.float32)
        for t in range(frames):
            np.matmul(hidden, w_hh, out=gates)
            gates += inputs[:, t]
            # sigmoid(x) = (1 + tanh(x / 2)) / 2 for the input, forget and output gates; tanh for the cell's
            sig = gates[:, :h3]
            sig *= 0.5
            np.tanh(sig, out=sig)
            sig += 1.0
            sig *= 0.5
            np.tanh(gates[:, h3:], out=gates[:, h3:])
            cell *= gates[:, _HIDDEN:2 * _HIDDEN]
            cell += gates[:, :_HIDDEN] * gates[:, h3:]
            np.tanh(cell, out=hidden)
            hidden *= gates[:, 2 * _HIDDEN:h3]
            outputs[:, t] = hidden
        sequence = outputs
    raw = np.maximum(hidden @ weights.linear_weight.T + weights.linear_bias, 0.0)
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    return np.divide(raw, norms, out=np.zeros_like(raw), where=norms > 0)


@dataclass(frozen=True)
class Partials:
    """Embeddings of the partials of one stretch of speech and where each lies in its samples."""

    embeddings: np.ndarray  # (n, 256) float32, L2-normalised (zero rows: no voice found)
    starts: np.ndarray  # (n,) first sample of each partial in the stretch
    ends: np.ndarray  # (n,) its end (exclusive), at most the stretch's length


def partials(weights: EncoderWeights, samples: np.ndarray, stretches: list[tuple[int, int]] | None = None) -> Partials:
    """Embed every partial of each stretch ``[start, end)`` of ``samples`` (16 kHz; default: all of
    it): one each :data:`STEP_FRAMES` frames, the last ending at the stretch's end; a stretch shorter
    than a partial is embedded whole. No partial spans two stretches (a pause cut out between them
    is where a speaker most often changes). Partials of one length run through the LSTM together."""
    groups: dict[int, list[tuple[np.ndarray, int, int]]] = {}
    for start, end in stretches if stretches is not None else [(0, samples.size)]:
        piece = samples[start:end]
        if piece.size < FRAME_SAMPLES:
            continue
        mel = mel_spectrogram(piece)
        count = mel.shape[0]
        length = min(PARTIAL_FRAMES, count)
        starts = list(range(0, count - length + 1, STEP_FRAMES))
        if starts[-1] != count - length:
            starts.append(count - length)  # the tail, so every frame is in a partial
        for frame in starts:
            a = frame * FRAME_SAMPLES
            b = min(a + length * FRAME_SAMPLES, piece.size)
            gain = _gain(piece[a:b])
            groups.setdefault(length, []).append((mel[frame:frame + length] * gain**2, start + a, start + b))
    embeddings, firsts, lasts = [], [], []
    for length in sorted(groups, reverse=True):
        batch = groups[length]
        embeddings.append(embed(weights, np.stack([m for m, _, _ in batch])))
        firsts += [a for _, a, _ in batch]
        lasts += [b for _, _, b in batch]
    if not embeddings:
        return Partials(np.zeros((0, 256), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))
    order = np.argsort(np.array(firsts), kind="stable")
    return Partials(embeddings=np.concatenate(embeddings)[order], starts=np.array(firsts, np.int64)[order],
                    ends=np.array(lasts, np.int64)[order])
