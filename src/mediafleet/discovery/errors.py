"""The discovery error tree: every failure a model-facing operation can answer, public-safe.

Each error has a stable ``code`` and a fixed public ``message``: no credentials, no source
excerpts, no internal paths (the seed's rule). Nothing a caller sent is echoed back.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DiscoveryError", "Refusal"]


class Refusal(StrEnum):
    """Why an operation failed closed."""

    INVALID_REQUEST = "invalid_request"
    UNKNOWN_TOOL = "unknown_tool"
    UNAUTHENTICATED = "unauthenticated"
    CREDENTIAL_REVOKED = "credential_revoked"
    LEASE_NOT_FOUND = "lease_not_found"
    LEASE_OF_ANOTHER_BINDING = "lease_of_another_binding"
    LEASE_REVOKED = "lease_revoked"
    LEASE_EXPIRED = "lease_expired"
    BINDING_DISABLED = "binding_disabled"
    BUDGET_EXHAUSTED = "budget_exhausted"
    NOT_AUTHORIZED = "not_authorized"
    UNIT_NOT_FOUND = "unit_not_found"
    GENERATION_CHANGED = "generation_changed"
    INDEX_UNAVAILABLE = "index_unavailable"
    HOST_UNAVAILABLE = "host_unavailable"
    INTERNAL_ERROR = "internal_error"


_MESSAGES: dict[Refusal, str] = {
    Refusal.INVALID_REQUEST: "the request is not valid for this tool",
    Refusal.UNKNOWN_TOOL: "there is no such tool here: the tools are discovery-search and discovery-inspect",
    Refusal.UNAUTHENTICATED: "the credential presented is not valid",
    Refusal.CREDENTIAL_REVOKED: "the credential presented is no longer valid",
    Refusal.LEASE_NOT_FOUND: "there is no such lease",
    Refusal.LEASE_OF_ANOTHER_BINDING: "the lease does not belong to this credential's binding",
    Refusal.LEASE_REVOKED: "the lease was revoked",
    Refusal.LEASE_EXPIRED: "the lease has expired",
    Refusal.BINDING_DISABLED: "the binding of this lease is disabled",
    Refusal.BUDGET_EXHAUSTED: "the lease's navigation budget is spent",
    Refusal.NOT_AUTHORIZED: "the host did not authorize this operation",
    Refusal.UNIT_NOT_FOUND: "there is no such evidence unit in this lease's scope",
    Refusal.GENERATION_CHANGED: "the evidence changed since the lease was opened; the host must open a new lease",
    Refusal.INDEX_UNAVAILABLE: "the evidence index cannot be reached",
    Refusal.HOST_UNAVAILABLE: "the discovery host cannot be reached",
    Refusal.INTERNAL_ERROR: "the operation failed",
}


class DiscoveryError(Exception):
    """A refusal with a public message.

    Args:
        code: why.
        detail: an optional fixed, public-safe precision (never caller input, never a path).
    """

    def __init__(self, code: Refusal, detail: str | None = None) -> None:
        self.code = code
        self.message = _MESSAGES[code] + (f": {detail}" if detail else "")
        super().__init__(self.message)

    def public(self) -> dict[str, str]:
        """The error as the model sees it."""
        return {"error_code": self.code.value, "error": self.message}
