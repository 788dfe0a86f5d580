"""The read model of a job's record: :class:`JobRecord`, a read-only view of the hash
``mediafleet:job:<id>`` (state, request, progress, where it ran, its outcome read back and checked),
and the finished notice a finisher publishes with the fields it wrote (:func:`notice_bytes`,
:func:`notice_fields`).

An outcome kept by reference is read back from the blob store and re-hashed (:func:`load_outcome`),
so a blob that is missing, altered or another job's fails closed with a public error instead of
returning evidence; with signing on, one whose signature fails is never returned either.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mediafleet.contract.errors import ErrorCode, MediafleetError, PublicError
from mediafleet.contract.jobs import ExtractRequest, JobState, Outcome, Progress
from mediafleet.fleet.signing import signed_text

if TYPE_CHECKING:
    from mediafleet.blobs.protocol import BlobStore

__all__ = ["ENDED", "FINAL", "JobRecord", "load_outcome", "notice_bytes", "notice_fields", "text"]

# Celery's states of a task that has ended (celery.states.READY_STATES).
ENDED = frozenset({"SUCCESS", "FAILURE", "REVOKED"})
FINAL = frozenset({JobState.DONE.value, JobState.FAILED.value, JobState.CANCELLED.value})


def load_outcome(blobs: BlobStore | None, digest: str, size: str | None) -> Outcome:
    """The outcome a record references, read back from the blob store and re-hashed.

    Raises:
        MediafleetError: the blob is missing (``blob_not_found``), or its bytes do not hash to the
            digest or have another size (``digest_mismatch``); the store cannot be reached.
        ValueError: the bytes are not an outcome.
    """
    from mediafleet.contract.errors import IntegrityError

    if blobs is None:
        raise IntegrityError("no blob store to read the outcome from", code=ErrorCode.BLOB_NOT_FOUND)
    with blobs.verified_path(digest) as path:
        data = path.read_bytes()
    if str(len(data)) != size:
        raise IntegrityError("the stored outcome does not have the size its record names")
    return Outcome.model_validate_json(data)


class JobRecord:
    """A read-only view of one record.

    ``forged`` is True when signing is on and the record's outcome carries no valid signature:
    its outcome is then not returned (``outcome`` is None) and the record counts as unfinished.
    ``worker_alive`` is, for a started job, whether the worker it names still has a heartbeat
    (False: that worker is gone and the job waits to be delivered again); None otherwise.
    ``blobs`` is the store an outcome kept by reference is read back from.
    """

    def __init__(self, job_id: str, fields: dict[str, str], forged: bool = False,
                 worker_alive: bool | None = None, blobs: BlobStore | None = None, signer: Any = None,
                 outcome: Outcome | None = None, brief: bool = False, no_outcome: bool = False) -> None:
        self.job_id = job_id
        self._f = fields
        self._brief = brief  # a brief read (JobStore.look, JobStore.brief): the parts' reports left out
        self._no_outcome = no_outcome  # JobStore.brief: the outcome left out too
        self.forged = forged
        self.worker_alive = worker_alive
        self._blobs = blobs
        self._signer = signer  # with signing on, each part's reported outcome is checked like the record's
        # ``outcome``: already read back and checked from these fields (:meth:`JobStore.noticed`).
        self._outcome: tuple[Outcome | None] | None = None if outcome is None else (outcome,)

    @property
    def state(self) -> JobState:
        return JobState(self._f["state"])

    @property
    def request(self) -> ExtractRequest:
        return ExtractRequest.model_validate_json(self._f["request"])

    @property
    def token(self) -> str | None:
        """The submission's token (a new one per claim): its messages carry it, its finished notice names it."""
        return self._f.get("token") or None

    @property
    def attempts(self) -> int:
        return int(self._f.get("attempts", 0))

    @property
    def completions(self) -> int:
        return int(self._f.get("completions", 0))

    @property
    def priority(self) -> int:
        return int(self._f.get("priority", 4))

    @property
    def held_reason(self) -> str | None:
        return self._f.get("held_reason") or None

    @property
    def updated_at(self) -> float:
        """When the record last moved (seconds since the epoch)."""
        return float(self._f.get("updated_at") or 0)

    @property
    def pid(self) -> int | None:
        return int(self._f["pid"]) if self._f.get("pid") else None

    @property
    def hostname(self) -> str | None:
        return self._f.get("hostname") or None

    @property
    def progress(self) -> Progress | None:
        if "done" not in self._f:
            return None
        total = self._f.get("total")
        return Progress(done=int(self._f["done"]), total=int(total) if total else None, unit=self._f.get("unit", "pages"))

    @property
    def outcome(self) -> Outcome | None:
        """The stored outcome (None while there is none, or when ``forged``).

        One kept by reference is read back from the blob store once per view. One that cannot be
        read back as this job's (its blob missing, altered, or another job's outcome) is never
        returned: the job's outcome is then a retryable failure that says so.
        """
        if self.forged:
            return None
        if self._no_outcome:
            raise RuntimeError("a brief read of the record left its outcome out")
        if self._outcome is None:
            self._outcome = (self._read_outcome(),)
        return self._outcome[0]

    @property
    def outcome_ref(self) -> str | None:
        """The blob digest of an outcome kept by reference (too large to keep inline), else None."""
        return self._f.get("outcome_ref") or None

    @property
    def untrusted(self) -> bool:
        """Forged, or its outcome's blob is gone: a resubmission discards the record and runs the job."""
        ref = self.outcome_ref
        return self.forged or (ref is not None and (self._blobs is None or not self._blobs.exists(ref)))

    def _read_outcome(self) -> Outcome | None:
        try:
            if (ref := self.outcome_ref) is not None:
                outcome = load_outcome(self._blobs, ref, self._f.get("outcome_bytes"))
            elif raw := self._f.get("outcome"):
                outcome = Outcome.model_validate_json(raw)
            else:
                return None
        except MediafleetError as exc:
            return self._unreadable(exc.public().code)
        except ValueError:  # pydantic's ValidationError: the bytes are no outcome
            return self._unreadable(ErrorCode.DIGEST_MISMATCH)
        if outcome.job_id != self.job_id:
            return self._unreadable(ErrorCode.DIGEST_MISMATCH)
        return outcome

    def _unreadable(self, code: ErrorCode, job_id: str | None = None) -> Outcome:
        error = PublicError(code=code, retryable=True,
                            message="the job's stored outcome could not be read back as this job's (its blob is "
                                    "missing, does not match its record or fails its signature check) and was not "
                                    "returned; submit the artifact again to run it")
        request = self.request if not job_id else self.request.model_copy(update={"job_id": job_id})
        return Outcome.failed(request, error, datetime.now(UTC))

    @property
    def parts(self) -> dict[str, str]:
        """The parts this job fanned out: part name -> the part's job id (none: one task)."""
        raw = self._f.get("parts")
        return json.loads(raw) if raw else {}

    @property
    def pending_parts(self) -> int:
        return int(self._f.get("pending_parts") or 0)

    @property
    def own_reported(self) -> bool:
        """Whether the job's own task reported its outcome into the record (a job with parts)."""
        return self._f.get("own_reported") == "1"

    def reported(self, name: str) -> bool:
        return "part:" + name in self._f

    def part(self, name: str) -> Outcome | None:
        """The outcome a part reported (the job's own task under its modality's name, e.g.
        ``video``; a part under its name, e.g. ``speech`` or ``pages:33-64``); None while it has not.

        Kept like a record's outcome (inline, or past the inline limit by reference into the blob
        store; signed when signing is on) and read back the same way: one whose signature fails,
        or whose blob is missing, altered or another job's, comes back as a retryable failure of
        that part, never as evidence.
        """
        raw = self._f.get("part:" + name)
        if self._brief and raw == "":
            raise RuntimeError("a brief read of the record left this part's report out")
        if not raw:
            return None
        fields = json.loads(raw)
        job_id = str(fields.get("job_id", ""))
        signed = signed_text(job_id, fields)
        if self._signer is not None and (signed is None or not self._signer.verify(signed, fields.get("outcome_sig"))):
            return self._unreadable(ErrorCode.INTERNAL_ERROR, job_id)
        try:
            if (ref := fields.get("outcome_ref")) is not None:
                outcome = load_outcome(self._blobs, ref, fields.get("outcome_bytes"))
            else:
                outcome = Outcome.model_validate_json(fields["outcome"])
        except MediafleetError as exc:
            return self._unreadable(exc.public().code, job_id)
        except (ValueError, KeyError):
            return self._unreadable(ErrorCode.DIGEST_MISMATCH, job_id)
        return outcome if outcome.job_id == job_id else self._unreadable(ErrorCode.DIGEST_MISMATCH, job_id)

    def kept_part(self, name: str) -> JobRecord | None:
        """A view holding only what part ``name`` reported (and this record's request, token and
        state), for reading it back with :meth:`part`, checked the same way, after this record's
        own fields have moved on (a finished job's record drops its parts' reports); None while the
        part has not reported."""
        raw = self._f.get("part:" + name)
        if not raw:
            return None
        fields = {k: self._f[k] for k in ("request", "token", "state") if k in self._f}
        return JobRecord(self.job_id, {**fields, "part:" + name: raw}, blobs=self._blobs, signer=self._signer)

    @property
    def final(self) -> bool:
        return self.state in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)

    def summary(self) -> dict[str, Any]:
        """What ``mediafleet status JOB`` shows (no request options, no outcome body)."""
        keep = ("state", "action", "attempts", "completions", "held_reason", "hostname", "device", "priority",
                "error_code", "parent", "lost_worker", "submitted_at", "updated_at")
        out: dict[str, Any] = {"job_id": self.job_id, **{k: self._f[k] for k in keep if self._f.get(k)}}
        if (p := self.progress) is not None:
            out["progress"] = p.model_dump()
        if self.parts:
            out["parts"] = self.parts
        if self.parts and not self.final:
            out["parts_pending"] = self.pending_parts
        if self.state == JobState.STARTED and self.worker_alive is False:
            out["worker_alive"] = False  # its worker's heartbeat is gone: it will be delivered again
        return out


def notice_bytes(flat: Sequence[str]) -> bytes:
    """A finished notice: the fields written, names and values in turn, each as ``<bytes>:<bytes>``
    (nothing escaped, so neither side copies an outcome more than once)."""
    return b"".join(b"%d:%s" % (len(data), data) for data in (x.encode() for x in flat))


def notice_fields(notice: Any) -> tuple[str, dict[str, str]] | None:
    """The submission token and the fields a finished notice names (each ``<bytes>:<bytes>``, the
    token first, then the fields as :func:`notice_bytes` wrote them); None for anything else (a bare
    wake-up, a malformed notice)."""
    data = notice.encode() if isinstance(notice, str) else notice
    if not isinstance(data, bytes):
        return None
    items: list[str] = []
    at = 0
    try:
        while at < len(data):
            colon = data.index(b":", at)
            size, start = int(data[at:colon]), colon + 1
            if size < 0 or start + size > len(data):
                return None
            items.append(data[start:start + size].decode())
            at = start + size
    except ValueError:  # no length, not a number, not UTF-8
        return None
    if len(items) < 3 or len(items) % 2 == 0:
        return None
    return items[0], dict(zip(items[1::2], items[2::2], strict=True))


def text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
