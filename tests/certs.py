"""Test certificates: RSA keys, self-signed and CA-issued certificates, and signing settings.

Used by the transport-security tests (Redis over TLS) and the chaos suite's signed messages.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

__all__ = ["cert", "new_key", "signing_env", "write_pem"]


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def cert(subject: str, key: rsa.RSAPrivateKey, issuer: tuple[str, rsa.RSAPrivateKey] | None = None,
         *, ca: bool = False, ip: str | None = None) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]) if issuer else name
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ip:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
                                        critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def write_pem(path: Path, key: rsa.RSAPrivateKey | None = None, certificate: x509.Certificate | None = None) -> Path:
    if key is not None:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    else:
        assert certificate is not None
        path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


def signing_env(folder: Path, name: str = "fleet", store: str = "trusted",
                subject: str = "mediafleet signer") -> dict[str, str]:
    """A new signing key and its certificate, alone in a trust store, as the MEDIAFLEET_SIGNING_* settings."""
    key = new_key()
    trusted = folder / store
    trusted.mkdir()
    cert_file = write_pem(trusted / f"{name}.pem", certificate=cert(subject, key))
    return {"MEDIAFLEET_SIGNING_KEY_FILE": str(write_pem(folder / f"{name}.key", key=key)),
            "MEDIAFLEET_SIGNING_CERT_FILE": str(cert_file), "MEDIAFLEET_SIGNING_CERT_STORE": str(trusted)}
