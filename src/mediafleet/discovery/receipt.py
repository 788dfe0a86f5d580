"""Encrypted preparation receipts: what the host prepared for a lease and request, sealed with AES-GCM.

A receipt records digests, never text: the query's digest, and for each unit prepared its id, the
digest of its text, the artifact's digest and the derivation ref (generation). It is sealed with
AES-256-GCM under the host's key (32 random bytes, stored as 64 hex characters in a file only the
host user can read), a fresh 96-bit nonce per receipt, and the request id and lease id as
associated data, so a receipt moved to another request does not open. Persisting it (see
:mod:`mediafleet.discovery.host`) happens before any evidence is returned; preparation alone does
not establish that the model received it.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RECEIPT_FORMAT", "ReceiptKey", "SealedReceipt", "create_key_file"]

RECEIPT_FORMAT = "mediafleet.discovery-receipt/v1"
_NONCE_BYTES = 12


def _aad(request_id: str, lease_id: str) -> bytes:
    return f"{RECEIPT_FORMAT}\0{request_id}\0{lease_id}".encode()


@dataclass(frozen=True)
class SealedReceipt:
    request_id: str
    lease_id: str
    key_id: str
    nonce: bytes
    ciphertext: bytes


def check_private_file(path: Path, what: str) -> None:
    """Refuse a file that is a symlink, not a regular file, not ours, or readable by others.

    Raises:
        PermissionError: with a message that names ``what``, never the path.
    """
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        raise PermissionError(f"the {what} must be a regular file, not a link")
    if info.st_uid != os.getuid():
        raise PermissionError(f"the {what} must belong to the host user")
    if info.st_mode & 0o077:
        raise PermissionError(f"the {what} must be readable by the host user only (mode 600)")


def write_private_file(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 600 (refusing to replace an existing file)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def create_key_file(path: Path) -> None:
    """A new receipt key: 32 random bytes as hex, mode 600."""
    write_private_file(path, os.urandom(32).hex().encode() + b"\n")


class ReceiptKey:
    """The host's receipt key, read from its file.

    Raises:
        PermissionError: the file is not private to the host user.
        ValueError: the file does not hold 64 hex characters.
    """

    def __init__(self, path: Path) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        check_private_file(path, "receipt key file")
        text = path.read_text(encoding="ascii").strip()
        try:
            key = bytes.fromhex(text)
        except ValueError:
            raise ValueError("the receipt key file must hold 64 hex characters") from None
        if len(key) != 32:
            raise ValueError("the receipt key file must hold 64 hex characters")
        self._aead = AESGCM(key)
        self.key_id = hashlib.sha256(b"mediafleet receipt key\0" + key).hexdigest()[:16]

    def seal(self, request_id: str, lease_id: str, body: dict[str, Any]) -> SealedReceipt:
        plaintext = json.dumps({"format": RECEIPT_FORMAT, **body}, sort_keys=True, separators=(",", ":")).encode()
        nonce = os.urandom(_NONCE_BYTES)
        ciphertext = self._aead.encrypt(nonce, plaintext, _aad(request_id, lease_id))
        return SealedReceipt(request_id, lease_id, self.key_id, nonce, ciphertext)

    def open(self, sealed: SealedReceipt) -> dict[str, Any]:
        """Decrypt and authenticate a receipt.

        Raises:
            cryptography.exceptions.InvalidTag: wrong key, tampered, or moved to another request.
        """
        plaintext = self._aead.decrypt(sealed.nonce, sealed.ciphertext, _aad(sealed.request_id, sealed.lease_id))
        data: dict[str, Any] = json.loads(plaintext)
        return data
