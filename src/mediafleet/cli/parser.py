"""The command line's grammar: every command, its options and their checks."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from mediafleet.cli.exits import EXIT_USAGE

__all__ = ["build_parser"]


def _option(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (e.g. -o dpi=300; `mediafleet manifest` lists them)")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return int(text)


def _age(text: str) -> int:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d`` -> seconds (0 allowed: every unused blob)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an age like 3600, 90m, 12h or 7d")
    return int(number) * units[unit]


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistake reported on one line (and exit code 2) instead of usage + error."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mediafleet",
                     description="Turn PDFs, images, audio and video into located, provable evidence; run the "
                                 "fleet's workers; show the evidence. `mediafleet COMMAND --help` for each command.",
                     epilog="Exit codes: 0 ok; 1 an artifact failed or could not be read; 2 a mistake in the "
                            "command or settings (nothing was run); 3 the fleet cannot be reached; 130 interrupted.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # What every command that reaches the fleet takes, declared once.
    fleet = argparse.ArgumentParser(add_help=False)
    fleet.add_argument("--broker", metavar="URL",
                       help="the fleet's redis://, rediss:// or sentinel:// URL (default: MEDIAFLEET_BROKER_URL; "
                            "extract and serve-mcp run in-process without one)")

    ex = sub.add_parser("extract", parents=[fleet], help="extract evidence from files (in-process unless a broker is set)",
                        description="Extract evidence from each input and print what was found. In-process "
                                    "unless a broker is set (--broker or MEDIAFLEET_BROKER_URL).")
    ex.add_argument("files", nargs="*", metavar="FILE",
                    help="a file; - reads standard input; an http(s):// URL is downloaded (at most the largest "
                         "size the manifest accepts)")
    ex.add_argument("--samples", action="store_true", help="also extract the bundled sample media")
    ex.add_argument("--json", action="store_true", help="print each bundle as one JSON object (one per line)")
    ex.add_argument("--out", type=Path, metavar="DIR",
                    help="write <name>.<digest>.bundle.json and <name>.<digest>.prov.ttl into DIR (created if "
                         "missing; <digest> is the first 12 hex digits of the artifact's sha256)")
    ex.add_argument("--jsonl", action="store_true",
                    help="with --out, write <name>.<digest>.bundle.jsonl instead of .bundle.json: the same bundle as "
                         "JSON Lines (mediafleet.evidence-bundle/v1+jsonl: a head, nodes, edges, PROV entries, an "
                         "end record with the counts), written one line at a time rather than held as one text")
    ex.add_argument("--report", action="store_true",
                    help="also write <name>.<digest>.report.html, a page showing every locus on the artifact "
                         "(into --out DIR, else the current directory)")
    ex.add_argument("--action", help="the callers' action (default: from the media type; `mediafleet manifest` lists them)")
    ex.add_argument("--media-type", help="the type you claim: a hint within a modality (the bytes run as what they "
                    "are, the claim is recorded); refused when it names another modality")
    ex.add_argument("--option", "-o", action="append", type=_option, default=[], metavar="NAME=VALUE",
                    help="a capability option, VALUE as JSON or text (e.g. -o dpi=300 -o ocr=always); "
                         "repeatable; `mediafleet manifest` lists each action's options and their ranges")
    ex.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                    help="stop waiting for the fleet after this long (the job goes on; default: wait)")

    wk = sub.add_parser("worker", parents=[fleet], help="run a Celery worker for the configured device's queues")
    wk.add_argument("--queues", help="comma-separated queues (default: every capability for --device)")
    wk.add_argument("--concurrency", type=_positive, default=1,
                    help="pool processes, each running one job at a time (default 1)")
    wk.add_argument("--device", choices=["cpu", "gpu", "auto"],
                    help="the device class to serve; auto: gpu when a CUDA device is visible, else cpu")
    wk.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"],
                    help="Celery's execution pool (default prefork, the only one of these with time limits; solo "
                         "runs jobs in the main process)")
    wk.add_argument("--loglevel", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                    type=str.upper, help="log level (default INFO)")
    wk.add_argument("--hostname", help="worker node name (default: Celery's)")
    wk.add_argument("--max-tasks-per-child", type=_positive, help="replace a pool process after this many jobs")
    wk.add_argument("--max-memory-per-child", type=_positive,
                    help="KiB; a pool process above it is replaced after its current job")
    wk.add_argument("--events", action="store_true",
                    help="send Celery task events for Flower (MEDIAFLEET_TASK_EVENTS; default off: each costs "
                         "Redis publishes per job, and a running Flower turns them on itself)")

    st = sub.add_parser("status", parents=[fleet], help="queues, live workers by device class, and a job's state")
    st.add_argument("job", nargs="?", help="a job id (mf-...)")

    cn = sub.add_parser("cancel", parents=[fleet], help="cancel a job: a queued one never starts, a running one stops")
    cn.add_argument("job", help="a job id (mf-...)")

    mc = sub.add_parser("serve-mcp", parents=[fleet], help="serve the callers' four sidecar tools over MCP (stdio, or --http)")
    mc.add_argument("--http", action="store_true", help="streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    mc.add_argument("--host", default="127.0.0.1", help="HTTP address (default loopback)")
    mc.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    mc.add_argument("--allow-remote", action="store_true",
                    help="allow a non-loopback --host (the server has no authentication of its own)")
    mc.add_argument("--max-inline-bytes", type=int,
                    help="the most bytes of artifact one call carries in artifact_b64 (default 1 GiB); over it, and "
                         "over the HTTP body limit (its base64 plus 1 MiB), the answer is too_large")
    mc.add_argument("--max-image-bytes", type=int,
                    help="the most bytes of base64 images one response carries: thumbnail, region crops, keyframes "
                         "(default the smaller of --max-inline-bytes and 64 MiB)")
    mc.add_argument("--client-timeout", type=int, metavar="MS",
                    help="the \"timeout\" the callers' mcp_config.json gives this server, in milliseconds (the same "
                         "number; 0: none): each call waits for its job until 10 s before the client gives up")
    mc.add_argument("--wait", type=float,
                    help="seconds a call waits for its job before answering 'still running, call again' (default: "
                         "from --client-timeout, else 50, under the callers' default 60 s; the job goes on and a "
                         "retried call gets its result)")
    mc.add_argument("--region-crops", type=int, default=None, metavar="N",
                    help="give at most N regions of an image a PNG crop, crop_png_b64 (longer side at most 512 px; "
                         "default 64; 0: none)")
    mc.add_argument("--no-embeddings", action="store_true",
                    help="leave out each PDF page's text embedding (given when the wordllama wheel is installed)")
    mc.add_argument("--check-config", type=Path, metavar="FILE",
                    help="check the callers' mcp_config.json against this command line (timeouts, tools, "
                         "MEDIAFLEET_ENGINE_OWNERS), print each problem, and exit (0: none, 1: some)")
    mc.add_argument("--is-error", action="store_true",
                    help="also set isError on failures (the callers' client raises on it and loses the error: "
                         "leave off for them)")
    mc.add_argument("--tools", metavar="LIST",
                    help="comma-separated tools to serve (default all four: pdf_action, image_decode, transcribe_media, "
                         "video_keyframes); under a catalog server's name, the ones the callers send there")
    mc.add_argument("--upstream", metavar="SPEC",
                    help="the real server of that name, 'stdio:<command line>' or an http(s):// URL: every call "
                         "mediafleet does not serve (another tool, another action) is forwarded to it")

    gc = sub.add_parser("gc", parents=[fleet], help="delete blobs and results past the retention rule (README: Blob store)")
    gc.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    gc.add_argument("--json", action="store_true", help="print the report as one JSON object")
    gc.add_argument("--max-age", type=_age, metavar="AGE",
                    help="delete blobs unused for AGE (3600, 90m, 12h, 7d; 0: every unused one) instead of the "
                         "retention window; blobs a live job or result names are still kept")

    rp = sub.add_parser("report", help="write an HTML page showing a bundle's evidence on its artifact",
                        description="Write one self-contained HTML page per bundle: the artifact (pages, image, "
                                    "waveform, shots) with every locus drawn on it, and the provenance. The "
                                    "artifact is read from the blob store, or from --artifact.")
    rp.add_argument("bundles", nargs="+", metavar="BUNDLE",
                    help="a bundle file (extract --out's .bundle.json, or extract --json's lines); - reads stdin")
    rp.add_argument("-o", "--output", type=Path, metavar="PATH",
                    help="the page to write (one bundle), or a directory for several (default: beside each "
                         "bundle file, or the current directory for stdin)")
    rp.add_argument("--artifact", type=Path, metavar="FILE",
                    help="the artifact itself, when the blob store no longer has it (checked against the digest)")
    rp.add_argument("--max-embed-mb", type=_positive, default=32, metavar="MIB",
                    help="embed a recording or video as a player up to this size (default 32)")

    sub.add_parser("manifest", help="print the manifest in force")
    sub.add_parser("schema", help="print the contract's JSON Schemas")
    from mediafleet.discovery.cli import add_commands as add_discovery_commands

    add_discovery_commands(sub)
    return parser

