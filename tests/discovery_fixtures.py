"""Shared by the discovery tests: real bundles of the sample media, and a real PostgreSQL server.

The bundles come from real in-process extractions: the bundled sample PDF, PNG and Opus
recording, the test video with speech, and a scanned page made here (a born-digital page
rasterised and placed as an image, so its words come back through OCR).

The PostgreSQL server runs ``initdb`` and ``postgres`` from the Debian ``postgresql`` package (``tests/run.sh``
installs it) on a free loopback port, in a fresh data folder, with no Unix socket. PostgreSQL
refuses to run as root, so as root (CI) both run as the ``postgres`` user the package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mediafleet.contract import EvidenceBundle
from mediafleet.discovery.index import EvidenceIndex
from mediafleet.discovery.index_open import open_index
from mediafleet.discovery.units import Unit
from tests.conftest import ROOT, free_port

SCANNED_WORDS = ("Breakwater", "inspection", "found", "cracked", "armour", "units")

__all__ = ["SCANNED_WORDS", "PostgresServer", "index", "postgres_server", "sample_bundles", "scanned_page_pdf",
           "scanned_words", "unit"]


def _binary(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    if found:
        return found[-1]
    exe = shutil.which(name)
    if exe is None:
        pytest.fail(f"PostgreSQL's {name} is not installed; run the README's test command, which installs it")
    return exe


class PostgresServer:
    """``postgres`` on a free loopback port; ``url`` names its ``mediafleet`` database."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        # As root the server runs as postgres, which must reach the folder: under /tmp, not $TMPDIR.
        self.folder = Path(tempfile.mkdtemp(prefix="mf-pg-", dir="/tmp" if os.getuid() == 0 else None))
        self._as: dict[str, Any] = {}
        if os.getuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail("running as root needs the postgres user of Debian's postgresql package")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            self._as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    @property
    def url(self) -> str:
        return f"postgresql://mediafleet@127.0.0.1:{self.port}/mediafleet"

    def start(self) -> None:
        data, log = self.folder / "data", self.folder / "log"
        subprocess.run([_binary("initdb"), "-D", str(data), "-U", "mediafleet", "--auth=trust", "-E", "UTF8",
                        "--locale=C.UTF-8", "--no-sync"], check=True, capture_output=True, cwd=self.folder, **self._as)
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                [_binary("postgres"), "-D", str(data), "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
                 "-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "shared_buffers=256MB"],
                stdout=fh, stderr=subprocess.STDOUT, cwd=self.folder, **self._as)
        import psycopg

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"postgres exited at start:\n{log.read_text()[-2000:]}")
            try:
                with psycopg.connect(f"postgresql://mediafleet@127.0.0.1:{self.port}/postgres", autocommit=True,
                                     connect_timeout=2) as db:
                    db.execute("CREATE DATABASE mediafleet")
                return
            except psycopg.OperationalError:
                time.sleep(0.1)
        pytest.fail("postgres did not start")

    def database(self, name: str) -> str:
        """A fresh, empty database on this server; its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://mediafleet@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(2)  # SIGINT: fast shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.start()
    yield server
    server.stop()


def scanned_page_pdf() -> bytes:
    """One A4 page whose only content is a 200 dpi grayscale scan of two lines of text."""
    import pymupdf

    src = pymupdf.open()
    page = src.new_page(width=595, height=842)
    page.insert_text((72, 120), " ".join(SCANNED_WORDS[:3]), fontsize=20)
    page.insert_text((72, 170), " ".join(SCANNED_WORDS[3:]), fontsize=20)
    pix = page.get_pixmap(dpi=200, colorspace=pymupdf.csGRAY)
    out = pymupdf.open()
    out.new_page(width=595, height=842).insert_image(pymupdf.Rect(0, 0, 595, 842), pixmap=pix)
    data = out.tobytes(garbage=3, deflate=True)
    out.close()
    src.close()
    return data


@pytest.fixture
def scanned_words() -> tuple[str, ...]:
    """The words drawn on the scanned page (two lines: the first three, then the rest)."""
    return SCANNED_WORDS


@pytest.fixture(scope="session")
def sample_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EvidenceBundle]:
    """Real bundles: ``pdf``, ``png``, ``opus`` (the samples), ``mp4`` (speech), ``scan`` (OCR)."""
    from mediafleet import Dispatcher, Settings

    samples = ROOT / "src" / "mediafleet" / "samples"
    dispatcher = Dispatcher(Settings(blob_root=tmp_path_factory.mktemp("discovery-blobs")))
    media = {
        "pdf": (samples / "harbour-report.pdf").read_bytes(),
        "png": (samples / "notice.png").read_bytes(),
        "opus": (samples / "memo.opus").read_bytes(),
        "mp4": (ROOT / "tests" / "data" / "speech.mp4").read_bytes(),
        "scan": scanned_page_pdf(),
    }
    bundles = {name: dispatcher.submit(data).bundle() for name, data in media.items()}
    for name, bundle in bundles.items():
        assert bundle.status == "ok", (name, bundle.error)
    return bundles


def unit(text: str, n: int = 0, *, digest: str = "sha256:" + "ab" * 32, derivation: str = "eg:derivation:" + "1" * 32,
         action: str = "ocr_pdf") -> Unit:
    """A unit of a PDF page region with ``text``; ``n`` and the keywords make its (deterministic) id."""
    locus = "eg:locus:" + uuid.uuid5(uuid.NAMESPACE_OID, f"{derivation}{digest}{n}").hex
    return Unit(unit_id=locus, text=text, digest=digest, action=action, derivation_ref=derivation,
                source_range={"artifact": {"digest": digest, "media_type": "application/pdf", "modality": "pdf"},
                              "locus_kind": "image_region", "address": {"kind": "image_region", "x": 1.0, "y": 1.0,
                                                                        "width": 2.0, "height": 2.0},
                              "generation": {"derivation_ref": derivation}})


@pytest.fixture(params=["sqlite", "postgresql"])
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EvidenceIndex]:
    """A fresh, empty index: a SQLite file, then a new database on the PostgreSQL server."""
    if request.param == "sqlite":
        url = f"sqlite:{tmp_path / 'index.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        url = server.database("t" + uuid.uuid4().hex[:12])
    opened = open_index(url)
    yield opened
    opened.close()
