"""The commands besides ``extract``: ``status``/``cancel``, ``worker``, ``serve-mcp``, ``report``, ``gc``."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from mediafleet.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from mediafleet.cli.extract import out_problem
from mediafleet.cli.lines import broker_shown

__all__ = ["fleet_command", "gc_command", "report_command", "serve_mcp_command", "worker_command"]


def fleet_command(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    from mediafleet.contract.errors import FleetUnreachable
    from mediafleet.dispatch import Dispatcher

    if settings.broker_url is None:
        print(f"mediafleet {args.command}: set MEDIAFLEET_BROKER_URL or --broker", file=sys.stderr)
        return EXIT_USAGE
    dispatcher = Dispatcher(settings, manifest=manifest)
    try:
        if args.command == "cancel":
            state = dispatcher.cancel(args.job)
            if state is None:
                print(f"mediafleet cancel: no job {args.job}", file=sys.stderr)
                return EXIT_FAILED
            print(json.dumps({"job_id": args.job, "state": state.value}))
            return EXIT_OK
        report: dict[str, Any] = dispatcher.status()
        if args.job:
            job = dispatcher.job(args.job)
            record = job.record() if job is not None else None  # type: ignore[attr-defined]  # a fleet job's
            report["job"] = record.summary() if record else {"job_id": args.job, "state": "unknown"}
    except FleetUnreachable:
        print(f"mediafleet {args.command}: the fleet's broker cannot be reached at {broker_shown(settings)}",
              file=sys.stderr)
        return EXIT_UNREACHABLE
    print(json.dumps(report, indent=2))
    return EXIT_OK if not args.job or report["job"]["state"] != "unknown" else EXIT_FAILED


def worker_command(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    from mediafleet.workers.runtime.boot import BootRefused, WorkerOptions, WorkerRetired, boot_worker

    if args.events:
        settings = settings.model_copy(update={"task_events": True})
    options = WorkerOptions(queues=args.queues, concurrency=args.concurrency, pool=args.pool, loglevel=args.loglevel,
                            hostname=args.hostname, max_tasks_per_child=args.max_tasks_per_child,
                            max_memory_per_child=args.max_memory_per_child)
    try:
        boot_worker(settings, options, manifest)
    except BootRefused as exc:
        print(f"mediafleet worker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WorkerRetired as exc:
        print(f"mediafleet worker: stopped: {exc}; start a fresh worker", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def serve_mcp_command(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    import ipaddress
    import logging

    loopback = args.host == "localhost"
    try:
        loopback = loopback or ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        pass
    if args.http and not loopback and not args.allow_remote:
        print("mediafleet serve-mcp: --host is not a loopback address; add --allow-remote if you mean it",
              file=sys.stderr)
        return EXIT_USAGE
    if args.max_inline_bytes is not None and args.max_inline_bytes <= 0:
        print("mediafleet serve-mcp: --max-inline-bytes must be > 0", file=sys.stderr)
        return EXIT_USAGE
    for name, value in (("--max-image-bytes", args.max_image_bytes), ("--client-timeout", args.client_timeout),
                        ("--region-crops", args.region_crops)):
        if value is not None and value < 0:
            print(f"mediafleet serve-mcp: {name} must be >= 0", file=sys.stderr)
            return EXIT_USAGE
    if args.check_config is not None:
        return _check_config(args, manifest)
    from mediafleet.mcp.server import TOOLS

    served = [t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else list(TOOLS)
    if not served or any(t not in TOOLS for t in served):
        print(f"mediafleet serve-mcp: --tools takes some of {', '.join(TOOLS)}", file=sys.stderr)
        return EXIT_USAGE
    if args.upstream is not None:
        from mediafleet.mcp.upstream import Upstream

        try:
            Upstream.from_spec(args.upstream)
        except ValueError as exc:
            print(f"mediafleet serve-mcp: --upstream: {exc}", file=sys.stderr)
            return EXIT_USAGE
    # In-process jobs run in this process (HTTP) or its children (stdio): cap threads before any engine loads.
    from mediafleet.workers.engines import cap_threads

    cap_threads(settings.threads)
    # stdout is the MCP wire under stdio: every log line goes to stderr.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from mediafleet.dispatch import Dispatcher
    from mediafleet.mcp.server import DEFAULT_MAX_INLINE_BYTES, DEFAULT_REGION_CROPS, SidecarTools
    from mediafleet.mcp.serving import serve

    wait = _wait(args, manifest)
    if not settings.engine_owner_scopes():
        print("mediafleet serve-mcp: MEDIAFLEET_ENGINE_OWNERS is not set: the callers' engine digests are kept, "
              "not compared (not_compared); set it to their engine's owners (docs/callers.md)", file=sys.stderr)
    tools = SidecarTools(Dispatcher(settings, manifest=manifest),
                         max_inline_bytes=args.max_inline_bytes or DEFAULT_MAX_INLINE_BYTES,
                         max_image_bytes=args.max_image_bytes,
                         region_crops=DEFAULT_REGION_CROPS if args.region_crops is None else args.region_crops,
                         embeddings=not args.no_embeddings, wait_s=wait, detached=not args.http, served=served)
    serve(tools, http=args.http, host=args.host, port=args.port, errors_as_is_error=args.is_error,
          upstream=args.upstream)
    return EXIT_OK


def _wait(args: argparse.Namespace, manifest: Any) -> float | None:
    """The wait of each call: ``--wait``, else derived from ``--client-timeout``; a warning on stderr
    when the two disagree (the client would give up first, and the callers see "sidecar
    unreachable"), or when a wait past the callers' default 60 s is not backed by a client timeout."""
    from mediafleet.mcp.callers_config import CLIENT_DEFAULT_TIMEOUT_MS, wait_for

    longest = manifest.max_hard_time_limit_s()
    derived = wait_for(args.client_timeout, longest) if args.client_timeout is not None else None
    if args.wait is None:
        return derived
    limit_ms = args.client_timeout if args.client_timeout is not None else CLIENT_DEFAULT_TIMEOUT_MS
    if limit_ms and args.wait * 1000 >= limit_ms:
        told = f"--client-timeout {limit_ms}" if args.client_timeout is not None else "the callers' default 60000 ms"
        print(f"mediafleet serve-mcp: warning: --wait {args.wait:g} s is not under {told}: their client gives up "
              "first and they see 'sidecar unreachable'; pass --client-timeout with the \"timeout\" of their "
              "mcp_config.json instead of --wait", file=sys.stderr)
    return args.wait


def _check_config(args: argparse.Namespace, manifest: Any) -> int:
    """``serve-mcp --check-config FILE``: each problem of the callers' config on one line."""
    from mediafleet.mcp.callers_config import config_problems

    try:
        config = json.loads(args.check_config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = (exc.strerror or "cannot be read").lower() if isinstance(exc, OSError) else "not JSON"
        print(f"mediafleet serve-mcp: --check-config {args.check_config.name}: {why}", file=sys.stderr)
        return EXIT_USAGE
    callers: dict[str, list[str]] = {}
    for capability in manifest.capabilities.values():
        callers.setdefault(capability.provider, []).append(capability.tool)
    url = f"http://{args.host}:{args.port}/mcp" if args.http else None
    problems = config_problems(config if isinstance(config, dict) else {}, callers,
                               http_client_timeout_ms=args.client_timeout, http_url=url)
    for problem in problems:
        print(f"{args.check_config.name}: {problem}")
    if not problems:
        print(f"{args.check_config.name}: every entry that reaches mediafleet returns in one call")
    return EXIT_FAILED if problems else EXIT_OK


def _bundle_title(path: Path | None) -> str | None:
    """``harbour-report.pdf`` from ``harbour-report.pdf.ca0686c79836.bundle.json`` (extract --out's names)."""
    import re

    if path is None:
        return None
    match = re.fullmatch(r"(.+)\.[0-9a-f]{12}\.bundle\.json", path.name)
    return match.group(1) if match else path.name.removesuffix(".json").removesuffix(".bundle")


def _without_input_failures(text: str) -> str:
    """``extract --json`` output less its lines for inputs that gave no bundle (nothing to draw)."""
    from mediafleet.cli.extract import INPUT_FAILURE_FORMAT

    marker = f'{{"format":"{INPUT_FAILURE_FORMAT}"'
    return "\n".join(line for line in text.splitlines() if not line.startswith(marker)) if marker in text else text


def report_command(args: argparse.Namespace, settings: Any) -> int:
    from pydantic import ValidationError

    from mediafleet.blobs.local import open_store
    from mediafleet.report import build_report, load_bundles, report_file_name, store_inputs

    found: list[tuple[Any, str | None, Path]] = []  # (bundle, title, default folder)
    for spec in args.bundles:
        path = None if spec == "-" else Path(spec)
        shown = "stdin" if path is None else path.name
        if path is not None and path.is_dir():
            print(f"mediafleet report: {shown} is a directory: name the bundle files in it", file=sys.stderr)
            return EXIT_USAGE
        if path is not None and not path.is_file():
            print(f"mediafleet report: {shown}: no such file", file=sys.stderr)
            return EXIT_FAILED
        try:
            text = _without_input_failures(sys.stdin.read() if path is None else path.read_text(encoding="utf-8"))
            bundles = load_bundles(text)
        except (ValueError, ValidationError, UnicodeDecodeError) as exc:
            detail = str(exc).splitlines()[0] if isinstance(exc, ValueError) and not isinstance(exc, ValidationError) else ""
            why = detail if detail and "validation error" not in detail else "not an evidence bundle"
            print(f"mediafleet report: {shown}: {why} (give extract --out's .bundle.json or extract --json's output)",
                  file=sys.stderr)
            return EXIT_USAGE
        title = _bundle_title(path) if len(bundles) == 1 else None
        found.extend((b, title, path.parent if path is not None else Path.cwd()) for b in bundles)
    if args.artifact is not None and (len(found) != 1 or not args.artifact.is_file()):
        problem = "--artifact goes with exactly one bundle" if len(found) != 1 else "--artifact: no such file"
        print(f"mediafleet report: {problem}", file=sys.stderr)
        return EXIT_USAGE
    output: Path | None = args.output
    if output is not None and (len(found) > 1 or output.is_dir()):
        if (problem := out_problem(output)):
            print(f"mediafleet report: {problem.replace('--out', '-o')}", file=sys.stderr)
            return EXIT_USAGE
    elif output is not None and not output.parent.is_dir():
        print("mediafleet report: -o: the folder it would go in does not exist", file=sys.stderr)
        return EXIT_USAGE
    store = open_store(settings)
    for bundle, title, folder in found:
        name = title or "artifact"  # extract --json's lines do not name their file
        if output is None or output.is_dir():
            target = (output or folder) / report_file_name(name, bundle)
        else:
            target = output
        try:
            with store_inputs(bundle, store, args.artifact, max_embed_bytes=args.max_embed_mb * 2**20) as inputs:
                if inputs.artifact is None and bundle.status == "ok":
                    print(f"mediafleet report: {name}: the artifact is not in the blob store (`mediafleet gc` may have "
                          "deleted it): the loci are drawn without it; pass it with --artifact FILE", file=sys.stderr)
                page = build_report(bundle, title or f"artifact {bundle.artifact.digest[:19]}…", inputs)
        except ValueError as exc:
            print(f"mediafleet report: {name}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            target.write_text(page, encoding="utf-8")
        except OSError as exc:
            print(f"mediafleet report: cannot write {target.name} ({(exc.strerror or 'error').lower()})", file=sys.stderr)
            return EXIT_USAGE
        print(f"{name}: report written to {target} ({len(page) / 2**20:.1f} MiB)")
    return EXIT_OK


def gc_command(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    from mediafleet.contract.errors import Unavailable
    from mediafleet.blobs.retention import gc

    longest = math.ceil(manifest.max_hard_time_limit_s())
    if args.max_age is not None and settings.broker_url is not None and args.max_age < longest:
        print(f"mediafleet gc: with a fleet, --max-age must be at least the longest hard time limit ({longest} s), "
              "so running jobs keep their blobs", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = gc(settings, manifest=manifest, dry_run=args.dry_run, max_age_s=args.max_age)
    except Unavailable as exc:
        print(f"mediafleet gc: {exc.message}; nothing was deleted after that", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.json:
        print(json.dumps(report.to_json()))
        return EXIT_OK
    verb = "would delete" if report.dry_run else "deleted"
    results = "" if report.results_expired is None else f"; {report.results_expired} result keys given an expiry"
    temp = "" if report.temp_deleted is None else f"; {report.temp_deleted} stale temporary files removed"
    print(f"gc: {verb} {report.blobs_deleted} of {report.blobs_seen} blobs ({report.bytes_deleted} bytes) "
          f"unused since {report.blob_cutoff:%Y-%m-%d %H:%M} UTC; {report.blobs_referenced} kept for live jobs"
          f"{temp}{results}")
    return EXIT_OK

