"""``mediafleet serve-mcp`` as the callers call it: response size and time per call, stdio against HTTP.

For each bundled sample (``mediafleet/samples``: PDF, PNG, Opus, MP4), through the tool and action
the callers use, with the arguments they send (``{"action", "params_json"}``, params ``digest``
(the bytes' SHA-256 hex), ``media_type``, ``artifact_b64``), in one run:

1. **stdio, a process per call** (the callers' ``call_tool_once``): spawn ``mediafleet serve-mcp``,
   ``initialize``, one ``call_tool``, close (stdin closed, the process exits);
2. **streamable HTTP, one long-lived server** (``mediafleet serve-mcp --http`` on loopback): a new
   client session per call (``initialize``, one ``call_tool``, session closed), as the callers'
   per-call client does, against a server that stays up (its engines loaded once).

Every timed call sends bytes no call sent before (the same media, one harmless byte-level change:
PDF metadata, a PNG text chunk, a new Ogg stream serial, an MP4 ``free`` box), so no path is
answered from an earlier job's result; a warm-up call per sample and path comes first (the HTTP
server loads its engines then). Reported per sample and path: the median of 3 calls of the time
to the result (spawn or connect to ``call_tool`` returning) and, for stdio, to the process's exit;
the result's text size in bytes and, beside it, the size of its structured content (a response
that carries the bundle twice shows both); stdio/HTTP time ratios.

Run: ``.venv/bin/python benchmarks/bench_mcp.py [repeat]`` (default 3). It runs whatever
``serve-mcp`` this checkout has. Results: ``benchmarks/results/mcp.json``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client, types  # noqa: E402

from benchmarks.harness import ROOT, table, write_results  # noqa: E402
from mediafleet.sniff import sniff  # noqa: E402
from tests.servers import free_port  # noqa: E402

SAMPLES = ROOT / "src" / "mediafleet" / "samples"
# sample file -> (the callers' tool, its action)
CALLS = {
    "harbour-report.pdf": ("pdf_action", "ocr_pdf"),
    "notice.png": ("image_decode", "analyze_image"),
    "memo.opus": ("transcribe_media", "transcribe_segments"),
    "scenes.mp4": ("video_keyframes", "extract_keyframes"),
}
CALL_TIMEOUT_S = 300


# -- fresh bytes for the same media ------------------------------------------------------------------


def _pdf_variant(data: bytes, salt: str) -> bytes:
    import pymupdf

    doc = pymupdf.open(stream=data, filetype="pdf")
    doc.set_metadata({**(doc.metadata or {}), "subject": f"bench {salt}"})
    out = doc.tobytes(garbage=0, deflate=True)
    doc.close()
    return out


def _png_variant(data: bytes, salt: str) -> bytes:
    """A ``tEXt`` chunk just before ``IEND``: the same pixels."""
    iend = data.rindex(b"IEND") - 4
    body = b"tEXt" + b"bench\x00" + salt.encode()
    chunk = struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    return data[:iend] + chunk + data[iend:]


def _ogg_crc_table() -> list[int]:
    table_ = []
    for i in range(256):
        crc = i << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
        table_.append(crc & 0xFFFFFFFF)
    return table_


_OGG_CRC = _ogg_crc_table()


def _ogg_crc(page: bytes) -> int:
    crc = 0
    for byte in page:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _OGG_CRC[((crc >> 24) ^ byte) & 0xFF]
    return crc


def _ogg_variant(data: bytes, salt: str) -> bytes:
    """Every page of the (single) logical stream given a new serial number, its CRC recomputed: the same packets."""
    serial = int.from_bytes(hashlib.sha256(salt.encode()).digest()[:4], "little")
    out, pos = bytearray(), 0
    while pos < len(data):
        if data[pos:pos + 4] != b"OggS":
            raise ValueError("not an Ogg page")
        nsegs = data[pos + 26]
        size = 27 + nsegs + sum(data[pos + 27:pos + 27 + nsegs])
        page = bytearray(data[pos:pos + size])
        page[14:18] = struct.pack("<I", serial)
        page[22:26] = b"\0\0\0\0"
        page[22:26] = struct.pack("<I", _ogg_crc(bytes(page)))
        out += page
        pos += size
    return bytes(out)


def _mp4_variant(data: bytes, salt: str) -> bytes:
    """A top-level ``free`` box at the end (ISO BMFF: skipped by readers)."""
    payload = f"bench {salt}".encode()
    return data + struct.pack(">I", 8 + len(payload)) + b"free" + payload


VARIANTS: dict[str, Callable[[bytes, str], bytes]] = {
    "application/pdf": _pdf_variant, "image/png": _png_variant, "audio/ogg": _ogg_variant, "video/mp4": _mp4_variant,
}


def variant(data: bytes, media_type: str, salt: str) -> bytes:
    out = VARIANTS[media_type](data, salt)
    if sniff(out[:4096]) != media_type:
        raise RuntimeError(f"the {media_type} variant does not sniff as {media_type}")
    return out


# -- one call, the callers' way ------------------------------------------------------------------------


def arguments(action: str, data: bytes, media_type: str) -> dict[str, Any]:
    params = {"digest": hashlib.sha256(data).hexdigest(), "media_type": media_type,
              "artifact_b64": base64.b64encode(data).decode()}
    return {"action": action, "params_json": json.dumps(params)}


def measure(result: types.CallToolResult) -> dict[str, Any]:
    texts = [c.text for c in result.content if c.type == "text"]
    text_bytes = sum(len(t.encode()) for t in texts)
    structured = result.structured_content
    structured_bytes = (len(json.dumps(structured, ensure_ascii=False, separators=(",", ":")).encode())
                        if structured is not None else 0)
    error: str | None = None
    try:
        data = json.loads(texts[0]) if texts else None
    except ValueError:
        data = None
    if result.is_error:
        error = "isError"
    if isinstance(data, dict) and (data.get("available") is False or data.get("error")):
        error = str(data.get("error_code") or data.get("error"))
    return {"text_bytes": text_bytes, "structured_bytes": structured_bytes, "content_items": len(result.content),
            "error": error}


def mediafleet_command() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "mediafleet"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "mediafleet.cli"]


def server_env(blob_root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    return {**env, "MEDIAFLEET_BLOB_ROOT": str(blob_root)}


async def stdio_call(tool: str, args: dict[str, Any], env: dict[str, str], errlog: IO[str]) -> dict[str, Any]:
    command = mediafleet_command()
    params = StdioServerParameters(command=command[0], args=[*command[1:], "serve-mcp"], env=env, cwd=str(ROOT))
    start = time.perf_counter()
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(tool, args)
            call_s = time.perf_counter() - start
    return {"call_s": call_s, "process_s": time.perf_counter() - start, **measure(result)}


async def http_call(url: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    from mcp.client.streamable_http import streamable_http_client

    start = time.perf_counter()
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(tool, args)
            call_s = time.perf_counter() - start
    return {"call_s": call_s, "process_s": None, **measure(result)}


def start_http(env: dict[str, str], log: IO[bytes]) -> tuple[subprocess.Popen[bytes], str, float]:
    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen([*mediafleet_command(), "serve-mcp", "--http", "--port", str(port)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"mediafleet serve-mcp --http exited at start; its log: {log.name}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}/mcp", time.perf_counter() - start
        except OSError:
            time.sleep(0.05)
    proc.terminate()
    sys.exit(f"mediafleet serve-mcp --http did not start; its log: {log.name}")


def summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        values = [c[key] for c in calls if c[key] is not None]
        return round(statistics.median(values), 4) if values else None

    return {"call_s": med("call_s"), "process_s": med("process_s"), "call_s_each": [round(c["call_s"], 4) for c in calls],
            "text_bytes": int(statistics.median(c["text_bytes"] for c in calls)),
            "structured_bytes": int(statistics.median(c["structured_bytes"] for c in calls)),
            "content_items": calls[0]["content_items"], "errors": sorted({c["error"] for c in calls if c["error"]})}


def main(repeat: int = 3) -> None:
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="mf-bench-mcp-"))
    samples = []
    for name, (tool, action) in CALLS.items():
        data = (SAMPLES / name).read_bytes()
        media_type = sniff(data[:4096])
        if media_type not in VARIANTS:
            sys.exit(f"{name}: sniffs as {media_type}, which this benchmark cannot vary")
        # One fresh variant per call: warm-up and timed, each path its own.
        salts = {path: [f"{path}-{i}" for i in range(repeat + 1)] for path in ("stdio", "http")}
        samples.append({"file": name, "tool": tool, "action": action, "media_type": media_type, "bytes": len(data),
                        "variants": {path: [variant(data, media_type, s) for s in ss] for path, ss in salts.items()}})
    results: dict[str, Any] = {}
    http_log = open(tmp / "http.log", "wb")  # noqa: SIM115 - closed in finally
    stdio_log = open(tmp / "stdio.log", "w")  # noqa: SIM115
    proc, url, http_start_s = start_http(server_env(tmp / "http-blobs"), http_log)
    try:
        stdio_env = server_env(tmp / "stdio-blobs")
        for sample in samples:
            tool, action, media_type = sample["tool"], sample["action"], sample["media_type"]
            runs: dict[str, list[dict[str, Any]]] = {"stdio": [], "http": []}
            for i in range(repeat + 1):  # call 0 is the warm-up; the paths alternate, so load hits both alike
                for path in ("stdio", "http"):
                    args = arguments(action, sample["variants"][path][i], media_type)
                    if path == "stdio":
                        run = anyio.run(stdio_call, tool, args, stdio_env, stdio_log)
                    else:
                        run = anyio.run(http_call, url, tool, args)
                    if i:
                        runs[path].append(run)
                    elif run["error"]:
                        print(f"warning: {sample['file']} over {path}: {run['error']}", file=sys.stderr)
            stdio, http = summary(runs["stdio"]), summary(runs["http"])
            results[sample["file"]] = {
                "tool": tool, "action": action, "media_type": media_type, "artifact_bytes": sample["bytes"],
                "stdio_process_per_call": stdio, "http_long_lived": http,
                "ratio_stdio_to_http_call_s": round(stdio["call_s"] / http["call_s"], 2),
                "ratio_stdio_process_to_http_call_s": round(stdio["process_s"] / http["call_s"], 2),
            }
    except BaseException:
        for log in (http_log, stdio_log):
            log.flush()
            print(f"-- {Path(log.name).name}, last lines:\n{Path(log.name).read_text(errors='replace')[-3000:]}",
                  file=sys.stderr)
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        http_log.close()
        stdio_log.close()
        shutil.rmtree(tmp, ignore_errors=True)

    rows = [("sample", "tool/action", "stdio call s", "stdio exit s", "http call s", "stdio/http", "text B",
             "structured B", "errors")]
    for name, r in results.items():
        s, h = r["stdio_process_per_call"], r["http_long_lived"]
        sizes = {s["text_bytes"], h["text_bytes"]}
        rows.append((name, f"{r['tool']}/{r['action']}", f"{s['call_s']:.3f}", f"{s['process_s']:.3f}",
                     f"{h['call_s']:.3f}", f"{r['ratio_stdio_to_http_call_s']:.2f}x",
                     "/".join(f"{b:,}" for b in sorted(sizes)), f"{h['structured_bytes']:,}",
                     ",".join(s["errors"] + h["errors"]) or "-"))
    total_s = time.perf_counter() - started
    print(f"serve-mcp per call: stdio (a process per call) vs streamable HTTP (one server; a session per call); "
          f"medians of {repeat}, fresh bytes each call")
    print(table(rows))
    print(f"HTTP server start to listening: {http_start_s:.2f} s; whole run {total_s:.0f} s")
    out = write_results("mcp", {"repeat": repeat, "http_server_start_s": round(http_start_s, 3),
                                "run_s": round(total_s, 1), "samples": results})
    print(f"wrote {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
