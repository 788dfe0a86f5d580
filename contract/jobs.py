"""What travels between dispatcher and worker: the request, the outcome, the job's state.

The broker carries references, never bulk bytes: a request names its artifact by digest, and the
worker reads it from the blob store and recomputes the digest before using it.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from mediafleet.contract.common import Digest, Strict, matching
from mediafleet.contract.errors import PublicError
from mediafleet.contract.manifest import DeviceClass, Modality
from mediafleet.contract.results import ExtractionResult

__all__ = ["ArtifactRef", "ExtractRequest", "JobId", "JobState", "Outcome", "PartOf", "Progress", "Span"]

JobId = Annotated[str, AfterValidator(matching(r"mf-[0-9a-f]{32}",
                                               "a job id is 'mf-' followed by 32 lowercase hex characters"))]


class ArtifactRef(Strict):
    digest: Digest
    media_type: str
    bytes: Annotated[int, Field(strict=True, gt=0)]
    modality: Modality


class PartOf(Strict):
    """The caller's job that this job is one part of (a video job's speech on the audio queue, one
    page range of a long PDF's).

    The part is authorised by the parent's capability (its media types, size limit, declared parts
    and locus kinds), runs with its own capability's engine, limits and device classes, and reports
    its outcome into the parent's record, where the parts are joined into the one outcome the caller
    sees. ``part`` is its name in that record: the manifest's part name, and for a split part its
    range (``pages:33-64``).
    """

    job_id: JobId
    action: str
    part: Annotated[str, Field(pattern=r"^[a-z_]+(:[0-9]+-[0-9]+)?$")] = "speech"


class Span(Strict):
    """The range of a split job one delivery reads: units ``first`` to ``last`` (1-based, inclusive)."""

    first: Annotated[int, Field(strict=True, ge=1)]
    last: Annotated[int, Field(strict=True, ge=1)]

    @property
    def count(self) -> int:
        """How many units the range holds."""
        return self.last - self.first + 1


class ExtractRequest(Strict):
    """One job for one worker: run ``action`` on the artifact with these options."""

    job_id: JobId
    action: str
    artifact: ArtifactRef
    options: dict[str, Any] = Field(default_factory=dict)
    device: DeviceClass = DeviceClass.CPU
    part_of: PartOf | None = None
    span: Span | None = Field(
        None, description="one part of a split job: the range it reads (not in the job id: the joined result is "
        "the one run's); None: the whole artifact")
    threads: Annotated[int, Field(ge=1)] | None = Field(
        None, description="engine threads the job runs with (they change Whisper's and OCR's numbers, so the job "
        "id names them); None: the worker's own setting")
    speech_batch: Annotated[int, Field(ge=1, le=64)] | None = Field(
        None, description="speech windows Whisper decodes together (a word time can move by a frame with it, so "
        "the job id names it where set); None: the device class's default (4 on a CPU, 16 on a GPU)")


class Progress(Strict):
    done: Annotated[int, Field(ge=0)]
    total: Annotated[int, Field(ge=0)] | None = None
    unit: str = "pages"


class JobState(StrEnum):
    QUEUED = "queued"
    HELD = "held"
    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Outcome(Strict):
    """What a worker (or the in-process runner) returns for one job."""

    job_id: JobId
    action: str
    artifact: ArtifactRef
    status: Literal["ok", "failed"]
    error: PublicError | None = None
    result: ExtractionResult | None = None  # type: ignore[valid-type]
    checks: dict[str, bool] = Field(default_factory=dict, description="name -> passed")
    started_at: datetime
    ended_at: datetime
    device: DeviceClass = DeviceClass.CPU

    @classmethod
    def failed(cls, request: ExtractRequest, error: PublicError, at: datetime) -> Outcome:
        """The failed outcome of ``request`` decided at ``at`` (no work done: it starts and ends then)."""
        return cls(job_id=request.job_id, action=request.action, artifact=request.artifact, status="failed",
                   error=error, started_at=at, ended_at=at, device=request.device)
