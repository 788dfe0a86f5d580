"""The host-created credential (connection) file the stdio bridge is started with.

JSON ``{"format", "lease_id", "credential", "endpoint"?}``, mode 600, owned by the host user.
It is refused when it is a link, readable by anyone else, not the host user's, or inside a
repository (a ``.git`` or ``.hg`` folder in it or any folder above it); an ``endpoint`` must be an
``http://`` URL on a loopback address. Errors name the rule broken, never the path or content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mediafleet.discovery.host import LEASE_ID
from mediafleet.discovery.mcp import check_loopback_url
from mediafleet.discovery.receipt import check_private_file, write_private_file

__all__ = ["CREDENTIAL_FORMAT", "CredentialFile", "inside_repository", "read_credential_file", "write_credential_file"]

CREDENTIAL_FORMAT = "mediafleet.discovery-credential/v1"


@dataclass(frozen=True)
class CredentialFile:
    lease_id: str
    credential: str
    endpoint: str | None


def inside_repository(path: Path) -> bool:
    """True when ``path`` or a folder above it holds a ``.git`` or ``.hg`` entry."""
    for folder in path.resolve().parents:
        if (folder / ".git").exists() or (folder / ".hg").exists():
            return True
    return False


def write_credential_file(path: Path, lease_id: str, credential: str, endpoint: str | None = None) -> None:
    """Create the file (mode 600; an existing file is never overwritten).

    Raises:
        PermissionError: ``path`` is inside a repository.
        FileExistsError: the file exists.
    """
    if inside_repository(path):
        raise PermissionError("a credential file never goes inside a repository")
    if endpoint is not None:
        check_loopback_url(endpoint)
    data = {"format": CREDENTIAL_FORMAT, "lease_id": lease_id, "credential": credential}
    if endpoint is not None:
        data["endpoint"] = endpoint
    write_private_file(path, json.dumps(data).encode() + b"\n")


def read_credential_file(path: Path) -> CredentialFile:
    """Read and check a credential file.

    Raises:
        PermissionError: the file breaks a rule above.
        ValueError: the content is not a credential file.
    """
    if inside_repository(path):
        raise PermissionError("a credential file inside a repository is refused")
    check_private_file(path, "credential file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the credential file is not JSON") from None
    if not isinstance(data, dict) or data.get("format") != CREDENTIAL_FORMAT:
        raise ValueError("the credential file is not a mediafleet discovery credential file")
    if set(data) - {"format", "lease_id", "credential", "endpoint"}:
        raise ValueError("the credential file has unknown fields")
    lease_id, credential, endpoint = data.get("lease_id"), data.get("credential"), data.get("endpoint")
    if not isinstance(lease_id, str) or not LEASE_ID.fullmatch(lease_id) or not isinstance(credential, str):
        raise ValueError("the credential file lacks a lease id or a credential")
    if endpoint is not None:
        if not isinstance(endpoint, str):
            raise ValueError("the credential file's endpoint is not a URL")
        check_loopback_url(endpoint)
    return CredentialFile(lease_id, credential, endpoint)
