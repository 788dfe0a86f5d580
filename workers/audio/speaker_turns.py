"""Who spoke when: voice embeddings gathered while a recording streams, clustered into speakers,
and the transcript's segments labelled (and split where the speaker changes).

While transcription runs, :class:`SpeakerTrack` embeds each decoded window's speech
(:func:`mediafleet.workers.audio.speaker_encoder.partials`: 1.6 s partials every 0.8 s) and keeps
only the embeddings and their times on the recording (1 KiB a partial, ~9 MB an hour of speech),
never the audio. At the end, :func:`label_segments`:

1. keeps the partials that overlap a segment's words (so silence and noise cast no vote), and
   groups consecutive ones inside one segment into pieces of a few seconds (on long recordings the
   most alike neighbouring pieces are merged until there are at most :data:`MAX_PIECES`: the
   clustering's memory and time are bounded);
2. clusters the pieces by average linkage on cosine similarity, weighted by their partials, until
   the next merge would join clusters less similar than :data:`THRESHOLD` (or, given
   ``speakers=N``, until N clusters are left); a cluster with less than
   :data:`MIN_SPEECH_PARTIALS` partials is folded into the nearest larger one;
3. gives each word the speaker whose centroid its nearby partials (those covering its midpoint,
   nearer ones weighing more) are most like; a run of words shorter than :data:`MIN_TURN_MS`
   inside a segment takes its longer neighbour's speaker, unless it is whole sentences (Whisper
   punctuates: a short reply such as "Excellent." stays a turn of its own);
4. splits a segment where its words change speaker, at the word boundary, and names speakers
   ``S1``, ``S2``, ... in the order they first speak.

Everything is deterministic (no random start, ties broken by order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mediafleet.contract.audio import AudioSegment, AudioWord
from mediafleet.workers.audio.sentences import ends_sentence
from mediafleet.workers.audio.speaker_encoder import partials
from mediafleet.workers.audio.speaker_weights import EncoderWeights
from mediafleet.workers.audio.vad import Window

__all__ = ["MAX_PIECES", "MIN_SPEECH_PARTIALS", "MIN_TURN_MS", "THRESHOLD", "SpeakerTrack", "label_segments"]

SAMPLE_RATE = 16000
THRESHOLD = 0.80  # average cosine similarity below which two clusters are different speakers
MAX_PIECES = 1500  # pieces clustered at most (their similarity matrix: 9 MB)
PIECE_PARTIALS = 4  # partials a piece holds on recordings short enough (4 s of speech)
MIN_SPEECH_PARTIALS = 4  # a speaker the estimate keeps has at least this many partials (~4 s of speech)
MIN_TURN_MS = 700  # a shorter run of words inside a segment is not a turn of its own
_REACH_MS = 800  # a partial votes for the words within this distance of its centre


@dataclass
class SpeakerTrack:
    """The voice embeddings of a recording's speech, gathered window by window."""

    weights: EncoderWeights
    _embeddings: list[np.ndarray] = field(default_factory=list)
    _starts: list[np.ndarray] = field(default_factory=list)
    _ends: list[np.ndarray] = field(default_factory=list)

    def add(self, window: Window) -> None:
        """Embed ``window``'s speech and keep each partial's span on the recording (ms)."""
        stretches, at = [], 0
        for region in window.regions:
            stretches.append((at, at + region.end - region.start))
            at += region.end - region.start
        found = partials(self.weights, window.audio, stretches)
        keep = np.linalg.norm(found.embeddings, axis=1) > 0
        starts = [window.original(s / SAMPLE_RATE, SAMPLE_RATE) for s in found.starts[keep]]
        # The end: the partial's last sample's place, so a partial never spans silence cut out after it.
        ends = [window.original((e - 1) / SAMPLE_RATE, SAMPLE_RATE) + 1 / SAMPLE_RATE for e in found.ends[keep]]
        self._embeddings.append(found.embeddings[keep].astype(np.float32))
        self._starts.append(np.round(np.array(starts, dtype=np.float64) * 1000).astype(np.int64))
        self._ends.append(np.round(np.array(ends, dtype=np.float64) * 1000).astype(np.int64))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All partials so far, in time order: embeddings ``(n, 256)``, starts and ends in ms."""
        if not self._embeddings:
            return np.zeros((0, 256), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64)
        embeddings = np.concatenate(self._embeddings)
        starts, ends = np.concatenate(self._starts), np.concatenate(self._ends)
        order = np.argsort(starts, kind="stable")
        return embeddings[order], starts[order], ends[order]


def _spans(segment: AudioSegment) -> list[tuple[int, int]]:
    if segment.words:
        return [(w.start_ms, max(w.end_ms, w.start_ms + 1)) for w in segment.words]
    return [(segment.start_ms, segment.end_ms)]


def _owners(segments: list[AudioSegment], starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each partial, the index of a segment whose words it overlaps most, or -1 (none)."""
    owner = np.full(starts.size, -1, dtype=np.int64)
    best = np.zeros(starts.size, dtype=np.int64)
    for index, segment in enumerate(segments):
        covered = np.zeros(starts.size, dtype=np.int64)
        near = (starts < segment.end_ms) & (ends > segment.start_ms)
        if not near.any():
            continue
        for a, b in _spans(segment):
            covered += np.where(near, np.maximum(0, np.minimum(ends, b) - np.maximum(starts, a)), 0)
        better = covered > best
        owner[better], best[better] = index, covered[better]
    return owner


def _pieces(owner: np.ndarray, embeddings: np.ndarray) -> list[np.ndarray]:
    """Runs of consecutive kept partials of one segment, cut into pieces of PIECE_PARTIALS; when that
    makes more than MAX_PIECES (long recordings), neighbouring pieces are merged, the most alike
    first, until there are MAX_PIECES."""
    pieces: list[np.ndarray] = []
    run: list[int] = []
    for index in np.flatnonzero(owner >= 0):
        if run and (owner[index] != owner[run[-1]] or len(run) >= PIECE_PARTIALS):
            pieces.append(np.array(run))
            run = []
        run.append(int(index))
    if run:
        pieces.append(np.array(run))
    while len(pieces) > MAX_PIECES:
        vectors = _normalised(np.stack([embeddings[p].sum(axis=0) for p in pieces]))
        alike = np.einsum("ij,ij->i", vectors[:-1], vectors[1:])
        excess, taken = len(pieces) - MAX_PIECES, np.zeros(len(pieces), dtype=bool)
        for i in np.argsort(-alike, kind="stable"):
            if excess == 0:
                break
            if not (taken[i] or taken[i + 1]):
                taken[i] = taken[i + 1] = True
                pieces[i] = np.concatenate([pieces[i], pieces[i + 1]])
                pieces[i + 1] = np.zeros(0, dtype=np.int64)
                excess -= 1
        pieces = [p for p in pieces if p.size]
    return pieces


def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def _cluster(centroids: np.ndarray, counts: np.ndarray, target: int, threshold: float | None) -> np.ndarray:
    """Average-linkage agglomeration (weighted by ``counts``) of unit vectors down to ``target``
    clusters, or until the most similar two are less alike than ``threshold``; the cluster of each."""
    n = centroids.shape[0]
    similarity = (centroids @ centroids.T).astype(np.float64)
    np.fill_diagonal(similarity, -np.inf)
    sizes = counts.astype(np.float64).copy()
    members = np.arange(n)
    clusters = n
    while clusters > target:
        a, b = divmod(int(np.argmax(similarity)), n)
        if threshold is not None and similarity[a, b] < threshold:
            break
        a, b = min(a, b), max(a, b)
        merged = (sizes[a] * similarity[a] + sizes[b] * similarity[b]) / (sizes[a] + sizes[b])
        similarity[a], similarity[:, a] = merged, merged
        similarity[a, a] = -np.inf
        similarity[b], similarity[:, b] = -np.inf, -np.inf
        sizes[a] += sizes[b]
        members[members == b] = a
        clusters -= 1
    return np.unique(members, return_inverse=True)[1]


def _centroids(embeddings: np.ndarray, labels: np.ndarray, count: int) -> np.ndarray:
    sums = np.zeros((count, embeddings.shape[1]), dtype=np.float64)
    np.add.at(sums, labels, embeddings)
    return _normalised(sums).astype(np.float32)


def _fold_small(embeddings: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Clusters with fewer than MIN_SPEECH_PARTIALS partials joined to their nearest larger cluster
    (all at once); when none is that large, the largest one stands for them all."""
    count = int(labels.max()) + 1
    sizes = np.bincount(labels, minlength=count)
    big = np.flatnonzero(sizes >= MIN_SPEECH_PARTIALS)
    if big.size == count:
        return labels
    if big.size == 0:
        big = np.array([int(np.argmax(sizes))])
    centroids = _centroids(embeddings, labels, count)
    nearest = big[np.argmax(centroids @ centroids[big].T, axis=1)]
    nearest[big] = big
    return np.unique(nearest[labels], return_inverse=True)[1]


def _speaker_centroids(embeddings: np.ndarray, owner: np.ndarray, speakers: int | None) -> np.ndarray:
    """The speakers' centroids ``(k, 256)`` found among the partials that have an owner.

    The estimate (agglomeration to THRESHOLD, small clusters folded in) comes first; given
    ``speakers``, more clusters than that are merged on (their centroids, weighted by size), and
    fewer are taken as the agglomeration's N clusters without a threshold.
    """
    pieces = _pieces(owner, embeddings)
    piece_vectors = _normalised(np.stack([embeddings[p].sum(axis=0) for p in pieces]))
    counts = np.array([p.size for p in pieces])
    kept = np.concatenate(pieces)
    voices = embeddings[kept]

    def spread(piece_labels: np.ndarray) -> np.ndarray:
        return np.concatenate([np.full(p.size, piece_labels[i]) for i, p in enumerate(pieces)])

    labels = _fold_small(voices, spread(_cluster(piece_vectors, counts, 1, THRESHOLD)))
    count = int(labels.max()) + 1
    if speakers is not None and count > speakers:
        merged = _cluster(_centroids(voices, labels, count), np.bincount(labels), speakers, None)
        labels = merged[labels]
    elif speakers is not None and count < speakers:
        labels = spread(_cluster(piece_vectors, counts, min(speakers, len(pieces)), None))
    count = int(labels.max()) + 1
    # One pass of reassignment: each partial to its nearest centroid, then the centroids again.
    labels = np.argmax(voices @ _centroids(voices, labels, count).T, axis=1)
    present = np.unique(labels)
    return _centroids(voices, np.searchsorted(present, labels), present.size)


def _word_speakers(spans: list[tuple[int, int]], scores: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """The speaker of each span: the centroid its nearby partials (by distance to its midpoint) favour."""
    centres = (starts + ends) / 2
    out = []
    for a, b in spans:
        middle = (a + b) / 2
        covering = np.flatnonzero((starts <= middle) & (ends >= middle))
        if covering.size == 0:
            covering = np.array([int(np.argmin(np.abs(centres - middle)))])
        weight = np.maximum(1e-3, 1.0 - np.abs(centres[covering] - middle) / _REACH_MS)
        out.append(int(np.argmax(weight @ scores[covering])))
    return out


def _whole_sentences(words: list[AudioWord], first: int, last: int) -> bool:
    """Whether words ``first``..``last`` are whole sentences: a sentence ends before them (or they
    start the segment) and at their last word (or they end it)."""
    before = first == 0 or ends_sentence(words[first - 1].word, words[first].word)
    after = last == len(words) - 1 or ends_sentence(words[last].word, words[last + 1].word)
    return before and after


def _smooth(words: list[AudioWord], speakers: list[int]) -> list[int]:
    """Runs shorter than MIN_TURN_MS take the speaker of their longer neighbouring run, unless they
    are whole sentences (a short reply, "Excellent.", is a turn of its own)."""
    speakers = list(speakers)
    while True:
        runs: list[tuple[int, int]] = []  # [first, last] word indexes
        for i, s in enumerate(speakers):
            if runs and speakers[runs[-1][0]] == s:
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((i, i))
        if len(runs) < 2:
            return speakers
        length = [words[last].end_ms - words[first].start_ms for first, last in runs]
        short = [r for r in range(len(runs)) if length[r] < MIN_TURN_MS and not _whole_sentences(words, *runs[r])]
        if not short:
            return speakers
        shortest = min(short, key=lambda r: (length[r], r))
        neighbours = [r for r in (shortest - 1, shortest + 1) if 0 <= r < len(runs)]
        into = max(neighbours, key=lambda r: (length[r], -r))
        first, last = runs[shortest]
        speakers[first:last + 1] = [speakers[runs[into][0]]] * (last - first + 1)


def _split(segment: AudioSegment, speakers: list[int]) -> list[tuple[AudioSegment, int]]:
    """``segment`` cut where its words change speaker; each part with its speaker index."""
    words = segment.words or []
    groups: list[tuple[int, int]] = []
    for i, s in enumerate(speakers):
        if groups and speakers[groups[-1][0]] == s:
            groups[-1] = (groups[-1][0], i)
        else:
            groups.append((i, i))
    # Boundaries: the segment's start, then each later group's first word start, then its end.
    bounds = [segment.start_ms] + [words[first].start_ms for first, _ in groups[1:]] + [segment.end_ms]
    parts: list[tuple[int, int, list[AudioWord]]] = []
    for (first, last), start, end in zip(groups, bounds[:-1], bounds[1:], strict=True):
        chosen = words[first:last + 1]
        text = "".join(w.word for w in chosen).strip()
        if parts and (end <= max(start, parts[-1][1]) or not any(ch.isalnum() for ch in text)):
            prev_first, _, prev_words = parts[-1]
            parts[-1] = (prev_first, end, prev_words + chosen)  # no room of its own: stays with the one before
            continue
        parts.append((start, end, chosen))
    out = []
    at = 0
    for start, end, chosen in parts:
        text = "".join(w.word for w in chosen).strip()
        kept = [{"start_ms": min(max(w.start_ms, start), end), "end_ms": min(max(w.end_ms, w.start_ms, start), end),
                 "word": w.word, "probability": w.probability} for w in chosen]
        out.append((_segment(segment, start_ms=start, end_ms=end, text=text or segment.text, words=kept), speakers[at]))
        at += len(chosen)
    return out


def _segment(segment: AudioSegment, **changes: object) -> AudioSegment:
    """A copy of ``segment`` with ``changes``, validated again (so a split can never be invalid)."""
    return AudioSegment.model_validate({**segment.model_dump(), **changes})


def label_segments(
    segments: list[AudioSegment], embeddings: np.ndarray, starts: np.ndarray, ends: np.ndarray, speakers: int | None,
) -> tuple[list[AudioSegment], int]:
    """``segments`` with their speakers (split at turn changes) and the number of speakers.

    Args:
        embeddings, starts, ends: the recording's partials (:meth:`SpeakerTrack.arrays`).
        speakers: the number of speakers when known; None estimates it.
    """
    if not segments:
        return [], 0
    owner = _owners(segments, starts, ends)
    if not (owner >= 0).any():
        return [_segment(s, speaker="S1") for s in segments], 1
    centroids = _speaker_centroids(embeddings, owner, speakers)
    scores = embeddings @ centroids.T
    labelled: list[tuple[AudioSegment, int]] = []
    for segment in segments:
        spans = _spans(segment)
        who = _word_speakers(spans, scores, starts, ends)
        if segment.words:
            labelled.extend(_split(segment, _smooth(segment.words, who)))
        else:
            labelled.append((segment, max(set(who), key=lambda k: (who.count(k), -k))))
    names: dict[int, str] = {}
    out = []
    for segment, index in labelled:
        names.setdefault(index, f"S{len(names) + 1}")
        out.append(_segment(segment, speaker=names[index]))
    return out, len(names)
