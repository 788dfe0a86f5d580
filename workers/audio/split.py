"""A long recording split across workers: the ``seconds`` part of ``transcribe_segments``
(:mod:`mediafleet.workers.parts`), as a long PDF's ``pages`` (:mod:`mediafleet.workers.pdf.split`).

A recording longer than the part's ``size`` seconds is cut into windows of ``size`` seconds: the
job's own task transcribes seconds 1 to ``size``, each further window is a part of the job
(``seconds:301-600``, ...) on the same queue, run by as many workers as are free. A window is
transcribed on its own (the extractor's ``time_span``), its times counted from the recording's
start, so its segments lie inside it; the join puts the windows' segments in time order.

Speakers: a window's labels name the voices of that window only (``S1`` in one window need not be
``S1`` in the next), and nothing in a window's result says which voice of another window is the
same person; joined, they would name one person twice or two people once. So a job that labels
speakers is never split (it runs as one task, whose labels are consistent); only a job with
``speakers=0`` is, and the join refuses a window that carries labels rather than join them.
Unlike a PDF's pages, a window's text near its edges can differ from one run's (Whisper decodes
30-second windows from where it starts): a split job's id names its window size, so its evidence is
never taken for one run's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ValidationError

from mediafleet.contract.audio import AudioResult
from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import ExtractRequest, Outcome, Span
from mediafleet.contract.manifest import Capability, Manifest, Part
from mediafleet.workers.parts import split_by_span

__all__ = ["SECONDS", "SecondsPart", "recording_seconds", "windows"]


def recording_seconds(source: Path | BinaryIO) -> int | None:
    """The recording's length in whole seconds (rounded up) as its container declares it; None when
    it declares none or cannot be read (the job then runs as one task and says what is wrong)."""
    import math

    from mediafleet.contract.manifest import Limits
    from mediafleet.workers.audio.decode import open_audio

    path = source if isinstance(source, Path) else Path(getattr(source, "name", "") or "")
    if not path.is_file():
        return None
    try:
        with open_audio(path, Limits(max_bytes=2**62)) as audio:
            seconds = audio.declared_seconds
    except Exception:  # noqa: BLE001 - any unreadable recording: the job itself says what is wrong
        return None
    return None if seconds is None or seconds <= 0 else math.ceil(seconds)


def windows(seconds: int, size: int) -> list[Span]:
    """Seconds 1..``seconds`` in windows of ``size`` (the last one shorter)."""
    return [Span(first=first, last=min(first + size - 1, seconds)) for first in range(1, seconds + 1, size)]


def _labels_speakers(request: ExtractRequest) -> bool:
    return request.options.get("speakers") != 0


def _window_first(name: str) -> int:
    """The first second of a window part's name (``seconds:301-600`` -> 301)."""
    return int(name.partition(":")[2].partition("-")[0])


class SecondsPart:
    """The ``seconds`` split of a transcription job."""

    option = None
    reverify = False  # each window's loci were checked by its worker

    def probe(self, source: Path | BinaryIO) -> int | None:
        return recording_seconds(source)

    def plan(self, request: ExtractRequest, name: str, part: Part, capability: Capability, manifest: Manifest,
             fact: int | None) -> tuple[ExtractRequest, dict[str, ExtractRequest]]:
        """Nothing for a recording of at most ``size`` seconds, of unknown length, over the
        duration limit, or whose speakers are labelled (above); else the first window on the job's
        own request and one part per further window."""
        assert part.size is not None
        limit = capability.limits.max_duration_s
        if fact is None or fact <= part.size or (limit is not None and fact > limit) or _labels_speakers(request):
            return request, {}
        first, *rest = windows(fact, part.size)
        return split_by_span(request, name, capability, first, rest)

    def narrow(self, options: BaseModel, span: Span) -> BaseModel:
        """The window in milliseconds of the recording, ``[first - 1, last)`` seconds."""
        return options.model_copy(update={"time_span_ms": ((span.first - 1) * 1000, span.last * 1000)})

    def inline(self, result: BaseModel, path: Path, part: Part | None, manifest: Manifest) -> BaseModel:
        return result  # in-process the job transcribes the whole recording itself

    def join(self, outcome: Outcome, reported: Mapping[str, Outcome | None], manifest: Manifest) -> Outcome:
        """The own task's window, then every part's, in time order, as one result: segments in
        order; the length the last window reached; speech summed; the first window's language,
        source and producer; each check passed only when every window passed it."""
        if not reported:
            return outcome
        names = sorted(reported, key=_window_first)
        results, outcomes = [], [outcome]
        for name in names:
            report = reported[name]
            if report is None:
                return _failed(outcome, ErrorCode.WORKER_LOST, "a window of the recording did not report", True)
            outcomes.append(report)
        for each in outcomes:
            if not isinstance(each.result, AudioResult):
                return outcome
            if each.result.speaker_count is not None:
                return _failed(outcome, ErrorCode.INTERNAL_ERROR, "a window of a split job labelled speakers; "
                               "labels of separate windows cannot be joined", False)
            results.append(each.result)
        first = results[0]
        joined = first.model_copy(update={
            "segments": [segment for result in results for segment in result.segments],
            "duration_ms": max(result.duration_ms for result in results),
            "speech_ms": sum(result.speech_ms for result in results),
        })
        try:
            AudioResult.model_validate(joined.model_dump())  # in order, inside the recording
        except ValidationError:
            return _failed(outcome, ErrorCode.INVALID_LOCUS, "the windows' segments overlap or leave the recording",
                           False)
        checks = {name: all(o.checks.get(name, False) for o in outcomes) for name in outcome.checks}
        return outcome.model_copy(update={
            "result": joined, "checks": checks,
            "started_at": min(o.started_at for o in outcomes), "ended_at": max(o.ended_at for o in outcomes),
        })

    def decides(self, outcome: Outcome) -> bool:
        return outcome.status != "ok"  # a window that failed is the job's failure, as in one run


def _failed(outcome: Outcome, code: ErrorCode, message: str, retryable: bool) -> Outcome:
    error = PublicError(code=code, message=message, retryable=retryable)
    return outcome.model_copy(update={"status": "failed", "result": None, "error": error})


SECONDS = SecondsPart()
