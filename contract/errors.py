"""One error tree, translated to a public-safe failure at every boundary.

Every error the fleet raises on purpose is a :class:`MediafleetError` whose message is written
for the caller: no paths, no credentials, no excerpts of the source, no exception text from a
library. Anything else is turned into ``internal_error`` with a fixed message by
:func:`to_public`; the detail goes to the worker's log, never into a result.
"""

from __future__ import annotations

from enum import StrEnum

from mediafleet.contract.common import Strict

__all__ = [
    "Cancelled",
    "CapabilityRefused",
    "ErrorCode",
    "FleetUnreachable",
    "InputRejected",
    "IntegrityError",
    "InternalError",
    "LimitExceeded",
    "MediafleetError",
    "Phase",
    "PublicError",
    "TimedOut",
    "Unavailable",
    "to_public",
]


class ErrorCode(StrEnum):
    # refused before any work (request, manifest, limits)
    INVALID_REQUEST = "invalid_request"
    CAPABILITY_NOT_DECLARED = "capability_not_declared"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    MEDIA_TYPE_MISMATCH = "media_type_mismatch"
    TOO_LARGE = "too_large"
    TOO_MANY_PAGES = "too_many_pages"
    TOO_MANY_PIXELS = "too_many_pixels"
    TOO_LONG = "too_long"
    # the input itself
    EMPTY_INPUT = "empty_input"
    CORRUPT_INPUT = "corrupt_input"
    ENCRYPTED_INPUT = "encrypted_input"
    NO_MEDIA_STREAM = "no_media_stream"
    # integrity of what travelled
    DIGEST_MISMATCH = "digest_mismatch"
    BLOB_NOT_FOUND = "blob_not_found"
    UNDECLARED_LOCUS_KIND = "undeclared_locus_kind"
    INVALID_LOCUS = "invalid_locus"
    # running it
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    WORKER_LOST = "worker_lost"
    ENGINE_UNAVAILABLE = "engine_unavailable"
    INTERNAL_ERROR = "internal_error"


class Phase(StrEnum):
    REQUEST = "request"
    DISPATCH = "dispatch"
    FETCH = "fetch"
    EXTRACT = "extract"
    MAP = "map"


class PublicError(Strict):
    """The failure a caller sees: a stable code, a public-safe message, whether to retry."""

    code: ErrorCode
    message: str
    retryable: bool = False


class MediafleetError(Exception):
    """Root of every deliberate fleet error. ``message`` must be safe to show a caller."""

    code: ErrorCode = ErrorCode.INTERNAL_ERROR
    retryable: bool = False
    phase: Phase = Phase.EXTRACT

    def __init__(self, message: str, *, code: ErrorCode | None = None, phase: Phase | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if phase is not None:
            self.phase = phase

    def public(self) -> PublicError:
        return PublicError(code=self.code, message=self.message, retryable=self.retryable)


class CapabilityRefused(MediafleetError):
    """Not declared by the manifest in force (fail closed), or not acceptable to it."""

    code = ErrorCode.CAPABILITY_NOT_DECLARED
    phase = Phase.REQUEST


class LimitExceeded(MediafleetError):
    """Over a manifest limit (bytes, pages, pixels, duration)."""

    code = ErrorCode.TOO_LARGE
    phase = Phase.REQUEST


class InputRejected(MediafleetError):
    """The artifact cannot be processed as what it claims to be."""

    code = ErrorCode.CORRUPT_INPUT


class IntegrityError(MediafleetError):
    """What arrived is not what was sent, or a result breaks the contract."""

    code = ErrorCode.DIGEST_MISMATCH
    phase = Phase.FETCH


class TimedOut(MediafleetError):
    """Past a time limit: says nothing definite about the input (its worker may have been frozen
    or overloaded), so a resubmission runs the job again."""

    code = ErrorCode.TIMEOUT
    retryable = True


class Cancelled(MediafleetError):
    """The caller cancelled the job; the worker stopped at its next progress point."""

    code = ErrorCode.CANCELLED


class Unavailable(MediafleetError):
    """A needed engine, model or service is not available here; another worker may do better."""

    code = ErrorCode.ENGINE_UNAVAILABLE
    retryable = True


class FleetUnreachable(Unavailable):
    """The fleet's broker or result backend cannot be reached (nothing is wrong with the artifact):
    what the dispatcher raises for every Redis or kombu connection failure, translated once at its
    boundary (the CLI exits 3; the MCP server answers a retryable ``engine_unavailable``)."""


class InternalError(MediafleetError):
    code = ErrorCode.INTERNAL_ERROR


_FALLBACK = PublicError(
    code=ErrorCode.INTERNAL_ERROR,
    message="The extraction failed for an internal reason; the worker log has the details.",
)


def to_public(exc: BaseException) -> PublicError:
    """Turn any exception into a public failure.

    Only :class:`MediafleetError` messages are passed through (they are written to be public);
    everything else becomes a fixed message, so no library text, path or secret can leak.
    """
    if isinstance(exc, MediafleetError):
        return exc.public()
    return _FALLBACK
