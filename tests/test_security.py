"""Transport security with real processes: Redis password, Redis over TLS, signed task messages.

Secrets never reach logs, results or errors; the CLI and the worker run as real subprocesses.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.conftest import ROOT, WorkerProcess, free_port
from tests.media import text_pdf

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-Pa55word-never-shown"


def _cli(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    return subprocess.run([sys.executable, "-m", "mediafleet.cli", *args], capture_output=True, text=True,
                          env={**full, **env}, timeout=timeout, cwd=ROOT)


def _redis(tmp: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp), *args, *_port_args(args, port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc, port


def _port_args(args: tuple[str, ...], port: int) -> list[str]:
    if "--tls-port" in args:
        return []
    return ["--port", str(port)]


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _cert(subject: str, key: rsa.RSAPrivateKey, issuer: tuple[str, rsa.RSAPrivateKey] | None = None,
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


def _write(path: Path, key: rsa.RSAPrivateKey | None = None, cert: x509.Certificate | None = None) -> Path:
    if key is not None:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    else:
        assert cert is not None
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def signing_env(folder: Path, name: str = "fleet", store: str = "trusted",
                subject: str = "mediafleet signer") -> dict[str, str]:
    """A new signing key and its certificate, alone in a trust store, as the MEDIAFLEET_SIGNING_* settings."""
    key = _key()
    trusted = folder / store
    trusted.mkdir()
    cert_file = _write(trusted / f"{name}.pem", cert=_cert(subject, key))
    return {"MEDIAFLEET_SIGNING_KEY_FILE": str(_write(folder / f"{name}.key", key=key)),
            "MEDIAFLEET_SIGNING_CERT_FILE": str(cert_file), "MEDIAFLEET_SIGNING_CERT_STORE": str(trusted)}


def _worker(env: dict[str, str], log: Path) -> WorkerProcess:
    return WorkerProcess(env, ["--concurrency=1"], log).start()


def test_redis_password_is_used_and_never_shown(tmp_path: Path) -> None:
    proc, port = _redis(tmp_path / "redis", "--requirepass", PASSWORD)
    worker = None
    try:
        env = {"MEDIAFLEET_BROKER_URL": f"redis://127.0.0.1:{port}/0", "MEDIAFLEET_REDIS_PASSWORD": PASSWORD,
               "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}
        worker = _worker(env, tmp_path / "worker.log")
        pdf = tmp_path / "doc.pdf"
        pdf.write_bytes(text_pdf(1))
        ok = _cli(["extract", str(pdf), "--json", "--timeout", "120"], env)
        assert ok.returncode == 0, ok.stderr
        status = _cli(["status"], env)
        assert status.returncode == 0 and json.loads(status.stdout)["workers"]["cpu"]
        wrong = _cli(["extract", str(pdf), "--json", "--timeout", "20"], {**env, "MEDIAFLEET_REDIS_PASSWORD": "nope"})
        assert wrong.returncode == 3
        worker.stop()
        for text in (ok.stdout, ok.stderr, status.stdout, wrong.stdout, wrong.stderr,
                     (tmp_path / "worker.log").read_text()):
            assert PASSWORD not in text
    finally:
        if worker is not None:
            worker.stop()
        proc.terminate()
        proc.wait(timeout=10)


def test_redis_over_tls(tmp_path: Path) -> None:
    ca_key, server_key = _key(), _key()
    ca = _cert("mediafleet test CA", ca_key, ca=True)
    server = _cert("127.0.0.1", server_key, ("mediafleet test CA", ca_key), ip="127.0.0.1")
    ca_file = _write(tmp_path / "ca.pem", cert=ca)
    port = free_port()
    proc, _ = _redis(tmp_path / "redis", "--port", "0", "--tls-port", str(port),
                     "--tls-cert-file", str(_write(tmp_path / "server.pem", cert=server)),
                     "--tls-key-file", str(_write(tmp_path / "server.key", key=server_key)),
                     "--tls-ca-cert-file", str(ca_file), "--tls-auth-clients", "no")
    worker = None
    try:
        env = {"MEDIAFLEET_BROKER_URL": f"rediss://127.0.0.1:{port}/0", "MEDIAFLEET_REDIS_TLS_CA_FILE": str(ca_file),
               "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}
        worker = _worker(env, tmp_path / "worker.log")
        pdf = tmp_path / "doc.pdf"
        pdf.write_bytes(text_pdf(1))
        ok = _cli(["extract", str(pdf), "--json", "--timeout", "120"], env)
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["status"] == "ok"
        # without the CA the client refuses the server's certificate
        untrusted = {k: v for k, v in env.items() if k != "MEDIAFLEET_REDIS_TLS_CA_FILE"}
        refused = _cli(["status"], untrusted, timeout=120)
        assert refused.returncode != 0
    finally:
        if worker is not None:
            worker.stop()
        proc.terminate()
        proc.wait(timeout=10)


def test_signed_messages_run_and_unsigned_ones_are_refused(redis_server, tmp_path: Path) -> None:
    signing = signing_env(tmp_path)
    base = {"MEDIAFLEET_BROKER_URL": f"redis://127.0.0.1:{redis_server.port}/15",
            "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}
    import redis

    redis.Redis(port=redis_server.port, db=15).flushdb()
    worker = _worker({**base, **signing}, tmp_path / "worker.log")
    try:
        pdf = tmp_path / "signed.pdf"
        pdf.write_bytes(text_pdf(1))
        signed = _cli(["extract", str(pdf), "--json", "--timeout", "120"], {**base, **signing})
        assert signed.returncode == 0, signed.stderr
        unsigned_pdf = tmp_path / "unsigned.pdf"
        unsigned_pdf.write_bytes(text_pdf(2))
        unsigned = _cli(["extract", str(unsigned_pdf), "--json", "--timeout", "8"], base)
        assert unsigned.returncode != 0  # never run: the worker refused the unsigned message
        log = (tmp_path / "worker.log").read_text()
        assert "untrusted content" in log.lower() or "refusing" in log.lower()
        assert worker.proc.poll() is None
    finally:
        worker.stop()


def test_settings_never_print_secrets() -> None:
    from mediafleet.settings import Settings

    settings = Settings(broker_url="redis://127.0.0.1:6379/0", redis_password=PASSWORD)
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings)
    assert PASSWORD in (settings.broker() or "")  # only the URL handed to the client carries it


def test_a_password_with_url_characters_survives_the_url() -> None:
    import redis as redis_py
    from kombu.utils.url import url_to_parts

    from mediafleet.settings import Settings

    tricky = "p:a@s/s w%rd?#"
    url = Settings(broker_url="redis://127.0.0.1:6379/0", redis_password=tricky).broker()
    assert redis_py.Redis.from_url(url).connection_pool.connection_kwargs["password"] == tricky
    assert url_to_parts(url).password == tricky
