"""``mediafleet extract https://...``: the download, against a real HTTP server on loopback.

Every refusal is one public-safe line (the file's name and the host, never the URL's path or
query); nothing larger than the manifest in force is kept, whether the server declares a length
or streams chunks without one; redirects are followed to http(s) URLs only.
"""

from __future__ import annotations

import http.server
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediafleet.contract.manifest import load_manifest
from mediafleet.cli.inputs import InputUnavailable, open_input
from tests.media import text_pdf
from tests.servers import free_port, http_server

_PDF = text_pdf(1)
_LIMIT = 6000  # the narrowed manifest's PDF limit: the one-page PDF (~2 KB) fits, 8 KiB more does not
_UNDER = _PDF + b"%" * (5000 - len(_PDF))  # under the limit, and past the 4 KiB that show its type


class _Site(http.server.BaseHTTPRequestHandler):
    """Fixed answers by path; ``/chunked-*`` sends no length (HTTP/1.1 chunked transfer)."""

    protocol_version = "HTTP/1.1"
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {
        "/good.pdf": (200, {}, _PDF),
        "/big.pdf": (200, {}, _PDF + b"%" * 8192),
        # Declares far more than it sends: refused on the length alone, or the short body would
        # read as a broken response instead.
        "/declared-big.pdf": (200, {"Content-Length": str(50 * 2**20)}, _UNDER),
        "/hop.pdf": (302, {"Location": "/good.pdf"}, b""),
        "/to-file.pdf": (302, {"Location": "file:///etc/passwd"}, b""),
        "/to-ftp.pdf": (301, {"Location": "ftp://127.0.0.1/good.pdf"}, b""),
        "/loop.pdf": (302, {"Location": "/loop.pdf"}, b""),
    }

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        path = self.path.split("?")[0]
        if path.startswith("/chunked-"):
            self._chunked(self.routes.get("/" + path.removeprefix("/chunked-"), (404, {}, b""))[2])
            return
        status, headers, body = self.routes.get(path, (404, {}, b"not here"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunked(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, len(body), 512):
            piece = body[start:start + 512]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with http_server(_Site) as url:
        yield url


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    narrow = tmp_path_factory.mktemp("manifest") / "manifest.json"
    # The video capability keeps its 4 GiB: the PDF limit must hold although another type takes more.
    narrow.write_text(json.dumps({"capabilities": {"ocr_pdf": {"limits": {"max_bytes": _LIMIT}},
                                                   "extract_keyframes": {}}}))
    return load_manifest(narrow)


def _fetch(url: str, manifest) -> bytes:  # type: ignore[no-untyped-def]
    item = open_input(url, manifest, stdin=io.BytesIO(), download_timeout=5)
    try:
        assert not isinstance(item.source, Path)
        return item.source.read()
    finally:
        item.close()


def _refused(url: str, manifest) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(InputUnavailable) as caught:
        _fetch(url, manifest)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize("path", ["/good.pdf", "/chunked-good.pdf", "/hop.pdf"])
def test_a_download_is_the_servers_bytes(site: str, manifest, path: str) -> None:  # type: ignore[no-untyped-def]
    item = open_input(site + path + "?token=s3cret", manifest, stdin=io.BytesIO(), download_timeout=5)
    try:
        assert item.name == Path(path).name and item.suffix == ".pdf"
        assert item.head == _PDF[:4096]
        assert item.source.read() == _PDF  # type: ignore[union-attr]
    finally:
        item.close()


@pytest.mark.parametrize("path", ["/big.pdf", "/declared-big.pdf", "/chunked-big.pdf"])
def test_a_body_over_the_limit_is_refused(site: str, manifest, path: str) -> None:  # type: ignore[no-untyped-def]
    """Declared (Content-Length) or not (chunked): the PDF limit of the manifest in force holds,
    although the video capability accepts far more (a declared length over it is refused on the
    length alone: that server sends less than it declares)."""
    message = _refused(site + path, manifest)
    assert message == f"{Path(path).name}: larger than the {_LIMIT:,} bytes the manifest in force accepts"


@pytest.mark.parametrize(("path", "scheme"), [("/to-file.pdf", "file"), ("/to-ftp.pdf", "ftp")])
def test_a_redirect_off_http_is_refused(site: str, manifest, path: str, scheme: str) -> None:  # type: ignore[no-untyped-def]
    assert _refused(site + path, manifest) == (
        f"{Path(path).name}: 127.0.0.1 redirected to a {scheme}:// URL; only http:// and https:// redirects are followed")


def test_endless_redirects_stop(site: str, manifest) -> None:  # type: ignore[no-untyped-def]
    assert _refused(site + "/loop.pdf", manifest) == "loop.pdf: 127.0.0.1 redirected more than 5 times"


def test_a_missing_file_names_the_status_not_the_url(site: str, manifest) -> None:  # type: ignore[no-untyped-def]
    message = _refused(site + "/private/missing.pdf?key=s3cret", manifest)
    assert message == "missing.pdf: 127.0.0.1 answered HTTP 404"


def test_a_server_that_is_not_there(manifest) -> None:  # type: ignore[no-untyped-def]
    message = _refused(f"http://user:pw@127.0.0.1:{free_port()}/a.pdf", manifest)
    assert message == "a.pdf: cannot download from 127.0.0.1 (no connection, or a broken response)"
