"""Transport security with real processes: Redis password, Redis over TLS, signed task messages.

Secrets never reach logs, results or errors; the CLI and the worker run as real subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.certs import cert, new_key, signing_env, write_pem
from tests.conftest import ROOT, WorkerProcess
from tests.media import text_pdf
from tests.servers import RedisServer

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-Pa55word-never-shown"


def _cli(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    return subprocess.run([sys.executable, "-m", "mediafleet.cli", *args], capture_output=True, text=True,
                          env={**full, **env}, timeout=timeout, cwd=ROOT)


def _worker(env: dict[str, str], log: Path) -> WorkerProcess:
    return WorkerProcess(env, ["--concurrency=1"], log).start()


def _extract_ok(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """A real worker on ``env``'s broker, and one PDF extracted through it by the CLI."""
    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(text_pdf(1))
    ok = _cli(["extract", str(pdf), "--json", "--timeout", "120"], env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == "ok"
    return ok


def test_redis_password_is_used_and_never_shown(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", args=["--requirepass", PASSWORD]) as server:
        env = {"MEDIAFLEET_BROKER_URL": server.url, "MEDIAFLEET_REDIS_PASSWORD": PASSWORD,
               "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}
        worker = _worker(env, tmp_path / "worker.log")
        try:
            ok = _extract_ok(env, tmp_path)
            status = _cli(["status"], env)
            assert status.returncode == 0 and json.loads(status.stdout)["workers"]["cpu"]
            wrong = _cli(["extract", str(tmp_path / "doc.pdf"), "--json", "--timeout", "20"],
                         {**env, "MEDIAFLEET_REDIS_PASSWORD": "nope"})
            assert wrong.returncode == 3
        finally:
            worker.stop()
    for text in (ok.stdout, ok.stderr, status.stdout, wrong.stdout, wrong.stderr, (tmp_path / "worker.log").read_text()):
        assert PASSWORD not in text


def test_redis_over_tls(tmp_path: Path) -> None:
    ca_key, server_key = new_key(), new_key()
    ca = cert("mediafleet test CA", ca_key, ca=True)
    server_cert = cert("127.0.0.1", server_key, ("mediafleet test CA", ca_key), ip="127.0.0.1")
    ca_file = write_pem(tmp_path / "ca.pem", certificate=ca)
    tls = ["--tls-cert-file", str(write_pem(tmp_path / "server.pem", certificate=server_cert)),
           "--tls-key-file", str(write_pem(tmp_path / "server.key", key=server_key)),
           "--tls-ca-cert-file", str(ca_file), "--tls-auth-clients", "no"]
    with RedisServer(tmp_path / "redis", args=tls, tls=True) as server:
        env = {"MEDIAFLEET_BROKER_URL": server.url, "MEDIAFLEET_REDIS_TLS_CA_FILE": str(ca_file),
               "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}
        worker = _worker(env, tmp_path / "worker.log")
        try:
            _extract_ok(env, tmp_path)
            # without the CA the client refuses the server's certificate
            untrusted = {k: v for k, v in env.items() if k != "MEDIAFLEET_REDIS_TLS_CA_FILE"}
            refused = _cli(["status"], untrusted, timeout=120)
            assert refused.returncode != 0
        finally:
            worker.stop()


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
