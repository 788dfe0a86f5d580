"""Signing of stored outcomes: with message signing on, an outcome nobody holding the fleet's key
wrote (planted straight into Redis) is never returned as evidence.

What is signed for a record's outcome is :func:`signed_text`: the inline outcome's JSON, or for an
outcome kept by reference in the blob store, its job id, digest and size (:func:`ref_text`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mediafleet.settings import Settings

__all__ = ["OutcomeSigner", "ref_text", "signed_text"]


class OutcomeSigner:
    """Signs each stored outcome with the fleet's message-signing key, and checks a stored one
    against the trusted certificates: with signing on, an outcome nobody holding the key wrote
    (planted straight into Redis) is never returned as evidence."""

    def __init__(self, key_file: Path, cert_file: Path, cert_store: Path) -> None:
        from celery.security.certificate import Certificate, FSCertStore
        from celery.security.key import PrivateKey
        from celery.security.utils import get_digest_algorithm

        self._key = PrivateKey(key_file.read_text())
        self._cert = Certificate(cert_file.read_text())
        self._store = FSCertStore(str(cert_store))
        self._digest = get_digest_algorithm("sha256")

    @classmethod
    def from_settings(cls, settings: Settings) -> OutcomeSigner | None:
        if settings.signing_key_file is None or settings.signing_cert_file is None or settings.signing_cert_store is None:
            return None
        return cls(settings.signing_key_file, settings.signing_cert_file, settings.signing_cert_store)

    def sign(self, text: str) -> str:
        signature = self._key.sign(text.encode(), self._digest)
        return json.dumps({"signer": self._cert.get_id(), "signature": base64.b64encode(signature).decode()})

    def verify(self, text: str, stamp: str | None) -> bool:
        if not stamp:
            return False
        try:
            fields = json.loads(stamp)
            self._store[fields["signer"]].verify(text.encode(), base64.b64decode(fields["signature"]), self._digest)
        except Exception:  # noqa: BLE001 - any malformed or wrong signature is simply untrusted
            return False
        return True


def ref_text(job_id: str, digest: str, size: str) -> str:
    """What is signed for an outcome kept by reference: the blob's digest binds its bytes (they are
    re-hashed when read), the job id binds it to this job."""
    return json.dumps({"job_id": job_id, "outcome_bytes": size, "outcome_ref": digest}, sort_keys=True)


def signed_text(job_id: str, fields: dict[str, str]) -> str | None:
    """What a record's ``outcome_sig`` signs: the reference of an outcome kept in the blob store,
    else the inline outcome; None for a record with no outcome."""
    if "outcome_ref" in fields:
        return ref_text(job_id, fields["outcome_ref"], fields.get("outcome_bytes", ""))
    return fields.get("outcome")
