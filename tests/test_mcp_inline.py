"""Big artifacts inline: ``artifact_b64`` decoded in bounded memory, and a request over the HTTP body
limit answered ``too_large`` as a tool result, never the transport's 413."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mediafleet.mcp.caller_digest import ANONYMOUS_LOCAL, check, chunk_hashes, engine_blob_digest
from mediafleet.mcp.http_cap import request_id
from mediafleet.mcp.inline import NotBase64, b64_size, decode_into, split_params
from tests.conftest import ROOT
from tests.media import text_pdf


def decoded_bytes(text: str, span: tuple[int, int], **kwargs: Any) -> tuple[bytes, Any]:
    decoded = decode_into(text, span, **kwargs)
    with decoded.file as fh:
        return fh.read(), decoded


@pytest.mark.parametrize(("size", "step"), [
    (size, step) for size in (0, 1, 2, 3, 4097, 3 * 1024 * 1024 + 7) for step in (4, 4096, 4 * 1024 * 1024)
    if not (step == 4 and size > 5000)  # one character group at a time: slow for megabytes
])
def test_decoding_in_steps_equals_decoding_whole(size: int, step: int) -> None:
    data = hashlib.sha256(str(size).encode()).digest() * (size // 32 + 1)
    data = data[:size]
    text = json.dumps({"digest": "x", "artifact_b64": base64.b64encode(data).decode()})
    rest, span = split_params(text)
    assert span is not None and json.loads(rest)["artifact_b64"] == ""
    assert b64_size(text, span) == size
    got, decoded = decoded_bytes(text, span, step=step, chunk_size=1024)
    assert got == data and decoded.size == size and decoded.head == data[:4096]
    assert decoded.sha256_hex == hashlib.sha256(data).hexdigest()
    # The 1 MiB-chunk hashes (here 1 KiB) are the ones the engine digest is made of.
    assert decoded.chunks == chunk_hashes(data, 1024)


def test_the_engine_digest_is_checked_from_the_chunk_hashes() -> None:
    data = os.urandom(3 * 1024 * 1024 + 11)
    engine = engine_blob_digest(data, ANONYMOUS_LOCAL)
    text = base64.b64encode(data).decode()
    _, decoded = decoded_bytes(text, (0, len(text)))
    claims = check(engine, decoded.chunks, decoded.sha256_hex, [ANONYMOUS_LOCAL])
    assert claims.digest_check == "engine_blob_manifest"
    assert claims == check(engine, data, decoded.sha256_hex, [ANONYMOUS_LOCAL])


@pytest.mark.parametrize("bad", ["QQ==QUJD", "QUJD!!!!", "QUJ", "QUJD\nQUJD"])
def test_what_is_not_standard_padded_base64_is_refused(bad: str) -> None:
    with pytest.raises(NotBase64):
        b64_size(bad, (0, len(bad)))
        decode_into(bad, (0, len(bad)), step=4)


def test_a_value_that_cannot_be_taken_in_place_is_parsed_whole() -> None:
    escaped = '{"artifact_b64": "QU\\/D", "digest": "x"}'  # a JSON escape inside the value
    assert split_params(escaped) == (escaped, None)
    assert split_params('{"digest": "x"}') == ('{"digest": "x"}', None)
    # A nested key first: the emptied text's top-level value is not "", so the caller parses whole.
    nested = '{"o": {"artifact_b64": "QUJD"}, "artifact_b64": "QUJD"}'
    rest, span = split_params(nested)
    assert span is not None and json.loads(rest)["artifact_b64"] == "QUJD"


def test_the_request_id_is_read_from_the_head_only_at_the_top_level() -> None:
    assert request_id(b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"p') == 7
    assert request_id(b'{"params":{"id":99,"x":"\\"id\\": 5"},"id":"a-1","method"') == "a-1"
    assert request_id(b'{"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"params_json":"{\\"id') is None
    assert request_id(b'not json') is None


def test_over_the_inline_limit_and_over_the_http_body_limit_the_callers_get_too_large(tmp_path: Path) -> None:
    """Over HTTP with the callers' transport (the mcp SDK's streamable HTTP client, which fastmcp
    uses): an artifact over the inline limit but within the body limit is refused by the tool; one
    over the body limit (the base64 of the inline limit plus 1 MiB) by the body limit itself; both
    arrive as an ordinary tool result, available: false, too_large, with the limit and what to do."""
    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from tests.test_mcp import http_server

    inline_limit = 100_000
    pdf = text_pdf(1)
    results: list[Any] = []

    async def session(url: str) -> None:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            for size in (300_000, 2_000_000):  # within the body limit (1.18 MB); over it
                payload = (pdf + b"\0" * size)[:size]
                params = {"digest": "sha256:" + hashlib.sha256(payload).hexdigest(), "media_type": "application/pdf",
                          "artifact_b64": base64.b64encode(payload).decode()}
                results.append(await client.call_tool("pdf_action", {"action": "ocr_pdf",
                                                                     "params_json": json.dumps(params)}))
            # The session goes on after a capped request: the same artifact within the limit runs.
            small = {"digest": "sha256:" + hashlib.sha256(pdf).hexdigest(), "media_type": "application/pdf",
                     "artifact_b64": base64.b64encode(pdf).decode()}
            results.append(await client.call_tool("pdf_action", {"action": "ocr_pdf", "params_json": json.dumps(small)}))

    with http_server(tmp_path, f"--max-inline-bytes={inline_limit}") as url:
        anyio.run(session, url)
    by_tool, by_body, ok = results
    for result, limit in ((by_tool, str(inline_limit)), (by_body, str((inline_limit + 2) // 3 * 4 + 1024 * 1024))):
        assert not result.is_error
        data = json.loads(result.content[0].text)
        assert data["available"] is False and data["error_code"] == "too_large", data
        assert data["error"].startswith("too_large: ") and limit in data["message"] and "blob_ref" in data["message"]
        assert "--max-inline-bytes" in data["message"] and data["bundle"] is None
    assert json.loads(ok.content[0].text)["pages"][0]["page"] == 1


_RSS_SCRIPT = r'''
import base64, json, os, sys, time
from pathlib import Path

def hwm_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

def reset_peak():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")

size = int(sys.argv[1])
data = os.urandom(size)
import hashlib
params_json = json.dumps({"digest": "sha256:" + hashlib.sha256(data).hexdigest(), "media_type": "application/pdf",
                          "artifact_b64": base64.b64encode(data).decode()})
del data
from mediafleet.dispatch import Dispatcher
from mediafleet.mcp.server import SidecarTools
from mediafleet.settings import Settings

tools = SidecarTools(Dispatcher(Settings(blob_root=Path(sys.argv[2]))), detached=False)
arguments = {"action": "ocr_pdf", "params_json": params_json}
out = {}
for name in ("old", "new"):
    reset_peak()
    base = hwm_kib()
    started = time.perf_counter()
    if name == "old":  # the whole text parsed, then decoded whole (as before issue 44)
        values = json.loads(arguments["params_json"])
        held = base64.b64decode(values["artifact_b64"], validate=True)
        hashlib.sha256(held).hexdigest()
        del values, held
    else:  # the call itself: decoded in steps into the blob store, then refused (random bytes)
        response, failed = tools.call("pdf_action", arguments)
        assert failed and response["error_code"] == "unsupported_media_type", response
    out[name] = {"peak_mib": (hwm_kib() - base) / 1024, "seconds": time.perf_counter() - started}
print(json.dumps(out))
'''


@pytest.mark.slow
def test_a_100_mb_inline_artifact_is_decoded_in_bounded_memory(tmp_path: Path) -> None:
    """Peak RSS above the request text while a 120 MB artifact (160 MB of base64) is decoded into
    the blob store by a call, against parsing and decoding it whole, measured in one process."""
    size = 120 * 1000 * 1000
    proc = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(size), str(tmp_path / "blobs")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.splitlines()[-1])
    print(figures)
    assert figures["new"]["peak_mib"] < 64, figures  # a few 4 MiB steps, whatever the size
    assert figures["old"]["peak_mib"] > size / 2**20, figures  # at least the artifact once more
