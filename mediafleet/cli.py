"""``mediafleet``: extract evidence, run a worker, show the manifest and the JSON Schemas.

Exit codes: 0 every artifact gave an ``ok`` bundle; 1 at least one failed; 2 bad usage or
settings; 3 the fleet could not be reached. Errors go to stderr; ``--json`` output to stdout only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _samples() -> list[Path]:
    folder = resources.files("mediafleet").joinpath("samples")
    return sorted(Path(str(p)) for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".md"))


def _option(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("options are NAME=VALUE")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mediafleet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("extract", help="extract evidence from files (in-process unless a broker is set)")
    ex.add_argument("files", nargs="*", type=Path)
    ex.add_argument("--samples", action="store_true", help="also extract the bundled sample media")
    ex.add_argument("--json", action="store_true", help="print each bundle as one JSON object (one per line)")
    ex.add_argument("--out", type=Path, help="write <name>.bundle.json and <name>.prov.ttl here")
    ex.add_argument("--action", help="the callers' action (default: from the media type)")
    ex.add_argument("--media-type", help="the type you claim; refused when the bytes disagree")
    ex.add_argument("--option", "-o", action="append", type=_option, default=[], metavar="NAME=VALUE")
    ex.add_argument("--broker", help="submit to the fleet at this broker URL and wait")
    ex.add_argument("--timeout", type=float, default=None, help="seconds to wait for the fleet")

    wk = sub.add_parser("worker", help="run a Celery worker for the configured device's queues")
    wk.add_argument("--queues", help="comma-separated queues (default: every capability for --device)")
    wk.add_argument("--concurrency", type=int, default=1)
    wk.add_argument("--device", choices=["cpu", "gpu", "auto"],
                    help="the device class to serve; auto: gpu when a CUDA device is visible, else cpu")
    wk.add_argument("--pool", default="prefork")
    wk.add_argument("--loglevel", default="INFO")
    wk.add_argument("--hostname", help="worker node name (default: Celery's)")
    wk.add_argument("--max-tasks-per-child", type=int)
    wk.add_argument("--max-memory-per-child", type=int, help="KiB; the process is recycled after its task")

    st = sub.add_parser("status", help="queues, live workers by device class, and a job's state")
    st.add_argument("job", nargs="?", help="a job id (mf-...)")
    st.add_argument("--broker", help="the fleet's broker URL (default: the settings')")

    cn = sub.add_parser("cancel", help="cancel a job: a queued one never starts, a running one stops")
    cn.add_argument("job", help="a job id (mf-...)")
    cn.add_argument("--broker", help="the fleet's broker URL (default: the settings')")

    mc = sub.add_parser("serve-mcp", help="serve the callers' four sidecar tools over MCP (stdio, or --http)")
    mc.add_argument("--http", action="store_true", help="streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    mc.add_argument("--host", default="127.0.0.1", help="HTTP address (default loopback)")
    mc.add_argument("--port", type=int, default=8765)
    mc.add_argument("--allow-remote", action="store_true",
                    help="allow a non-loopback --host (the server has no authentication of its own)")
    mc.add_argument("--max-inline-bytes", type=int,
                    help="the most bytes one call carries inline, artifact in and images out (default 64 MiB)")
    mc.add_argument("--wait", type=float,
                    help="seconds a call waits for its job before answering 'still running, call again' (default 50, "
                         "under the callers' 60 s; the job goes on and a retried call gets its result)")
    mc.add_argument("--is-error", action="store_true",
                    help="also set isError on failures (the callers' client raises on it and loses the error: "
                         "leave off for them)")
    mc.add_argument("--broker", help="serve from the fleet at this broker URL (default: the settings')")

    gc = sub.add_parser("gc", help="delete blobs and results past the retention rule (README: Blob store)")
    gc.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    gc.add_argument("--json", action="store_true", help="print the report as one JSON object")

    sub.add_parser("manifest", help="print the manifest in force")
    sub.add_parser("schema", help="print the contract's JSON Schemas")
    from mediafleet.discovery.cli import add_commands as add_discovery_commands

    add_discovery_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from pydantic import ValidationError

    try:
        from mediafleet.settings import Settings

        overrides: dict[str, Any] = {}
        if getattr(args, "broker", None):
            overrides["broker_url"] = args.broker
        if getattr(args, "device", None) == "auto":
            from workers.gpu import visible_gpus

            gpus = visible_gpus()
            overrides["device"] = "gpu" if gpus else "cpu"
            print(f"mediafleet worker: {gpus} CUDA device(s) visible: serving {overrides['device']}", file=sys.stderr)
        elif getattr(args, "device", None):
            overrides["device"] = args.device
        settings = Settings.load(**overrides)
        manifest = settings.manifest()
    except (ValidationError, ValueError, OSError) as exc:
        print(f"mediafleet: bad settings or manifest: {_first_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "manifest":
        print(manifest.model_dump_json(indent=2))
        return EXIT_OK
    if args.command == "schema":
        print(json.dumps(_schemas(), indent=2))
        return EXIT_OK
    if args.command == "worker":
        return _worker(args, settings, manifest)
    if args.command in ("status", "cancel"):
        return _fleet_command(args, settings, manifest)
    if args.command == "serve-mcp":
        return _serve_mcp(args, settings, manifest)
    if args.command == "gc":
        return _gc(args, settings, manifest)
    from mediafleet.discovery import cli as discovery_cli

    if args.command in discovery_cli.COMMANDS:
        return discovery_cli.run(args, settings)
    return _extract(args, settings, manifest)


def _unreachable() -> tuple[type[BaseException], ...]:
    """Errors that mean the broker or backend is not there (not a bad artifact)."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout

    return (ConnectionError, OperationalError, RedisConnectionError, RedisTimeout)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _schemas() -> dict[str, Any]:
    from pydantic import TypeAdapter

    from contract import EvidenceBundle, EvidenceLocus, ExtractRequest, Manifest, Outcome, PublicError
    from contract.addresses import EvidenceAddress

    return {
        "EvidenceAddress": TypeAdapter(EvidenceAddress).json_schema(),
        "EvidenceLocus": EvidenceLocus.model_json_schema(),
        "Manifest": Manifest.model_json_schema(),
        "ExtractRequest": ExtractRequest.model_json_schema(),
        "Outcome": Outcome.model_json_schema(),
        "PublicError": PublicError.model_json_schema(),
        "EvidenceBundle": EvidenceBundle.model_json_schema(),
    }


def _extract(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    from adapters.prov import to_turtle
    from contract.errors import MediafleetError
    from contract.jobs import JobState
    from mediafleet.dispatch import Dispatcher

    files = list(args.files) + (_samples() if args.samples else [])
    if not files:
        print("mediafleet extract: no files given (or use --samples)", file=sys.stderr)
        return EXIT_USAGE
    dispatcher = Dispatcher(settings, manifest=manifest)
    options = dict(args.option)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    status = EXIT_OK
    for path in files:
        if not path.is_file():
            print(f"mediafleet extract: {path.name}: no such file", file=sys.stderr)
            status = EXIT_FAILED
            continue
        show = _progress_printer(path.name)
        try:
            job = dispatcher.submit(path, action=args.action, media_type=args.media_type, options=options,
                                    progress=show)
            if job.state() == JobState.HELD:
                record = dispatcher.jobs().get(job.id)
                reason = record.held_reason if record else None
                print(f"mediafleet extract: {path.name}: held ({reason}); waiting for a worker", file=sys.stderr)
            bundle = job.bundle(timeout=args.timeout, on_progress=lambda p, show=show: show(p.done, p.total))
        except MediafleetError as exc:
            print(f"mediafleet extract: {path.name}: {exc.message}", file=sys.stderr)
            status = EXIT_FAILED
            continue
        except _unreachable() as exc:
            print(f"mediafleet extract: the fleet cannot be reached: {type(exc).__name__}", file=sys.stderr)
            return EXIT_UNREACHABLE
        show.done()
        if bundle.status != "ok":
            status = EXIT_FAILED
            assert bundle.error is not None
            print(f"mediafleet extract: {path.name}: failed: {bundle.error.code}: {bundle.error.message}",
                  file=sys.stderr)
        if args.json:
            sys.stdout.write(bundle.model_dump_json() + "\n")
        else:
            _summary(path.name, bundle)
        if args.out:
            stem = args.out / f"{path.name}.{bundle.artifact.digest.removeprefix('sha256:')[:12]}"
            Path(f"{stem}.bundle.json").write_text(bundle.model_dump_json(indent=2), encoding="utf-8")
            Path(f"{stem}.prov.ttl").write_text(to_turtle(bundle.prov), encoding="utf-8")
    return status


def _fleet_command(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
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
            record = dispatcher.jobs().get(args.job)
            report["job"] = record.summary() if record else {"job_id": args.job, "state": "unknown"}
    except _unreachable() as exc:
        print(f"mediafleet {args.command}: the fleet cannot be reached: {type(exc).__name__}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(json.dumps(report, indent=2))
    return EXIT_OK if not args.job or report["job"]["state"] != "unknown" else EXIT_FAILED


class _progress_printer:
    """Progress on stderr for long jobs, throttled; silent for short ones."""

    def __init__(self, name: str) -> None:
        import time

        self._name, self._time, self._start, self._shown = name, time.monotonic, time.monotonic(), False
        self._last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        now = self._time()
        if now - self._start < 1.0 or now - self._last < 0.5:
            return
        self._last, self._shown = now, True
        of = f"/{total}" if total else ""
        print(f"\r{self._name}: {done}{of}", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self._shown:
            print(file=sys.stderr)


def _summary(name: str, bundle: Any) -> None:
    evidence = [n for n in bundle.nodes if n.node_type == "Evidence"]
    claim = next((n for n in bundle.nodes if n.node_type == "Claim"), None)
    kinds: dict[str, int] = {}
    for node in evidence:
        kinds[node.properties["locus_kind"]] = kinds.get(node.properties["locus_kind"], 0) + 1
    verified = "verified" if claim and claim.properties["is_verified"] else "not verified"
    detail = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no loci"
    print(f"{name}: {bundle.status} ({bundle.artifact.media_type}); {detail}; claim {verified}")


def _worker(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    if settings.broker_url is None:
        print("mediafleet worker: set MEDIAFLEET_BROKER_URL (a worker needs a broker)", file=sys.stderr)
        return EXIT_USAGE
    # Engines read these at import; cap them to this process's share before anything loads them.
    from workers.engines import cap_threads

    cap_threads(settings.threads)
    from contract.errors import Unavailable
    from workers.app import create_app
    from workers.extractor import check_devices

    served = [cap for cap in manifest.capabilities.values() if settings.device in cap.devices]
    if not served:
        print(f"mediafleet worker: no capability may run on {settings.device.value}", file=sys.stderr)
        return EXIT_USAGE
    from workers.engines import EngineConfig, configure

    # The start-up checks read the engine configuration (e.g. the Whisper model folder); setting it
    # in the parent loads nothing, and each pool process sets it again after the fork.
    configure(EngineConfig(device=settings.device, threads=settings.threads,
                           whisper_model_dir=settings.whisper_model_dir))
    try:
        check_devices([cap.action for cap in served], settings.device)
    except Unavailable as exc:
        print(f"mediafleet worker: cannot serve {settings.device.value}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    app = create_app(settings, manifest)
    queues = args.queues or ",".join(cap.queue(settings.device) for cap in served)
    argv = ["worker", f"--queues={queues}", f"--concurrency={args.concurrency}", f"--pool={args.pool}",
            f"--loglevel={args.loglevel}", "--events"]
    if args.hostname:
        argv.append(f"--hostname={args.hostname}")
    if args.max_tasks_per_child:
        argv.append(f"--max-tasks-per-child={args.max_tasks_per_child}")
    if args.max_memory_per_child:
        argv.append(f"--max-memory-per-child={args.max_memory_per_child}")
    app.worker_main(argv)
    return EXIT_OK


def _serve_mcp(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
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
    # In-process jobs run in this process (HTTP) or its children (stdio): cap threads before any engine loads.
    from workers.engines import cap_threads

    cap_threads(settings.threads)
    # stdout is the MCP wire under stdio: every log line goes to stderr.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from mediafleet.dispatch import Dispatcher
    from mediafleet.mcp_server import DEFAULT_MAX_INLINE_BYTES, SidecarTools, serve

    tools = SidecarTools(Dispatcher(settings, manifest=manifest),
                         max_inline_bytes=args.max_inline_bytes or DEFAULT_MAX_INLINE_BYTES, wait_s=args.wait,
                         detached=not args.http)
    serve(tools, http=args.http, host=args.host, port=args.port, errors_as_is_error=args.is_error)
    return EXIT_OK


def _gc(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    from contract.errors import Unavailable
    from mediafleet.retention import gc

    try:
        report = gc(settings, manifest=manifest, dry_run=args.dry_run)
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


if __name__ == "__main__":
    sys.exit(main())
