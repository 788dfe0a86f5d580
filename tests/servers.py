"""Servers the tests and benchmarks start on loopback: a free port, redis-server, moto's S3 server.

One launcher for each (started, waited for until it answers, stopped), used by tests/conftest.py,
the chaos suite, tests/test_security.py and benchmarks/harness.py. Nothing here imports pytest, so
a benchmark can use it; a server that does not come up raises :class:`ServerFailed`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

__all__ = ["LoopbackServer", "MotoServer", "RedisServer", "ServerFailed", "free_port", "http_server"]


class ServerFailed(RuntimeError):
    """A server process that is not installed, exited at start or never answered."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (at the moment of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server (``http.server``, a thread per request) on a free loopback port, serving
    with ``handler``; yields its base URL, ``http://127.0.0.1:<port>``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class LoopbackServer:
    """A server process on a free loopback port: :meth:`start` returns once it answers."""

    name = "server"

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def answers(self) -> bool:
        """True once the server accepts a connection (subclasses ask it something)."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def start(self, timeout: float = 30.0) -> Self:
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise ServerFailed(f"{self.name} exited at start")
            if self.answers():
                return self
            time.sleep(0.05)
        self.stop()
        raise ServerFailed(f"{self.name} did not start in {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisServer(LoopbackServer):
    """A real ``redis-server`` on a free loopback port, in its own directory, saving nothing.

    Args:
        workdir: its directory (the append-only file, when on).
        appendonly: persist every write (a restarted server has the data back).
        args: more ``redis-server`` arguments (``--requirepass``, the ``--tls-*`` files).
        tls: ``self.port`` is a TLS port (``--tls-port``) and the plain port is off.
    """

    name = "redis-server"

    def __init__(self, workdir: Path, *, appendonly: bool = False, args: Sequence[str] = (), tls: bool = False) -> None:
        super().__init__()
        self.workdir = workdir
        self.appendonly = appendonly
        self.args = list(args)
        self.tls = tls

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServerFailed("redis-server is not installed; run the README's test command, which installs it")
        self.workdir.mkdir(parents=True, exist_ok=True)
        ports = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        return [exe, *ports, "--bind", "127.0.0.1", "--dir", str(self.workdir), "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--protected-mode", "yes", *self.args]

    def answers(self) -> bool:
        """A PING answered (``+PONG``, or ``-NOAUTH`` behind a password); over TLS, a connection."""
        if self.tls:
            return super().answers()
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False


class MotoServer(LoopbackServer):
    """``moto_server`` (moto's S3 over HTTP) in its own process on a free loopback port."""

    name = "moto_server"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
