"""``mediafleet``: extract evidence, run a worker, show the manifest and the JSON Schemas.

Exit codes: 0 every artifact gave an ``ok`` bundle; 1 at least one failed (or could not be read or
downloaded, or the wait for the fleet ran out); 2 bad usage or settings, nothing was run; 3 the fleet
could not be reached. Errors go to stderr, one line each; ``--json`` output to stdout only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from mediafleet.unreachable import unreachable_errors

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _samples() -> list[Path]:
    folder = resources.files("mediafleet").joinpath("samples")
    return sorted(Path(str(p)) for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".md"))


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


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mediafleet",
                     description="Turn PDFs, images, audio and video into located, provable evidence; run the "
                                 "fleet's workers; show the evidence. `mediafleet COMMAND --help` for each command.",
                     epilog="Exit codes: 0 ok; 1 an artifact failed or could not be read; 2 a mistake in the "
                            "command or settings (nothing was run); 3 the fleet cannot be reached; 130 interrupted.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ex = sub.add_parser("extract", help="extract evidence from files (in-process unless a broker is set)",
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
    ex.add_argument("--broker", metavar="URL", help="submit to the fleet at this redis:// or rediss:// URL and wait")
    ex.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                    help="stop waiting for the fleet after this long (the job goes on; default: wait)")

    wk = sub.add_parser("worker", help="run a Celery worker for the configured device's queues")
    wk.add_argument("--broker", metavar="URL", help="the fleet's redis:// or rediss:// URL (default: the settings')")
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

    st = sub.add_parser("status", help="queues, live workers by device class, and a job's state")
    st.add_argument("job", nargs="?", help="a job id (mf-...)")
    st.add_argument("--broker", metavar="URL", help="the fleet's redis:// or rediss:// URL (default: the settings')")

    cn = sub.add_parser("cancel", help="cancel a job: a queued one never starts, a running one stops")
    cn.add_argument("job", help="a job id (mf-...)")
    cn.add_argument("--broker", metavar="URL", help="the fleet's redis:// or rediss:// URL (default: the settings')")

    mc = sub.add_parser("serve-mcp", help="serve the callers' four sidecar tools over MCP (stdio, or --http)")
    mc.add_argument("--http", action="store_true", help="streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    mc.add_argument("--host", default="127.0.0.1", help="HTTP address (default loopback)")
    mc.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
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
    mc.add_argument("--tools", metavar="LIST",
                    help="comma-separated tools to serve (default all four: pdf_action, image_decode, transcribe_media, "
                         "video_keyframes); under a catalog server's name, the ones the callers send there")
    mc.add_argument("--upstream", metavar="SPEC",
                    help="the real server of that name, 'stdio:<command line>' or an http(s):// URL: every call "
                         "mediafleet does not serve (another tool, another action) is forwarded to it")

    gc = sub.add_parser("gc", help="delete blobs and results past the retention rule (README: Blob store)")
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


def _broker_problem(url: str, where: str) -> str | None:
    """Why ``url`` cannot be the fleet's broker (the fleet speaks Redis only), or None."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss") and parts.hostname:
        return None
    shown = f" {url!r}" if "@" not in url and len(url) < 80 else ""  # never echo a password
    if parts.scheme in ("redis", "rediss"):
        return f"{where}{shown} names no host (e.g. redis://localhost:6379/0)"
    return f"{where}{shown} is not a redis:// or rediss:// URL (e.g. redis://localhost:6379/0)"


def _settings_problem(exc: BaseException) -> str:
    """One line for bad settings: the variable and what is wrong, never pydantic's class names."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error.get("loc") else ""
        name = f"MEDIAFLEET_{field.upper()}: " if field and field != "__root__" else ""
        return f"{name}{error['msg'].removeprefix('Value error, ')}"
    return _first_line(exc)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    prog = f"mediafleet {args.command}"
    if getattr(args, "broker", None) and (problem := _broker_problem(args.broker, "--broker")):
        print(f"{prog}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from pydantic import ValidationError

    try:
        from mediafleet.settings import Settings

        overrides: dict[str, Any] = {}
        if getattr(args, "broker", None):
            overrides["broker_url"] = args.broker
        if getattr(args, "device", None) == "auto":
            from mediafleet.workers.gpu import visible_gpus

            gpus = visible_gpus()
            overrides["device"] = "gpu" if gpus else "cpu"
            print(f"mediafleet worker: {gpus} CUDA device(s) visible: serving {overrides['device']}", file=sys.stderr)
        elif getattr(args, "device", None):
            overrides["device"] = args.device
        settings = Settings.load(**overrides)
        manifest = settings.manifest()
    except (ValidationError, ValueError, OSError) as exc:
        print(f"mediafleet: bad settings or manifest: {_settings_problem(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if settings.broker_url and (problem := _broker_problem(settings.broker_url, "MEDIAFLEET_BROKER_URL")):
        print(f"{prog}: {problem}", file=sys.stderr)
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
    if args.command == "report":
        return _report(args, settings)
    from mediafleet.discovery import cli as discovery_cli

    if args.command in discovery_cli.COMMANDS:
        return discovery_cli.run(args, settings)
    return _extract(args, settings, manifest)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else "no detail"


def _broker_shown(settings: Any) -> str:
    """The broker as ``scheme://host:port``: no password, no database path."""
    from urllib.parse import urlsplit

    parts = urlsplit(settings.broker_url or "")
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}" if parts.hostname else "the broker"


def _schemas() -> dict[str, Any]:
    from pydantic import TypeAdapter

    from mediafleet.contract import EvidenceBundle, EvidenceLocus, ExtractRequest, Manifest, Outcome, PublicError
    from mediafleet.contract.addresses import EvidenceAddress

    return {
        "EvidenceAddress": TypeAdapter(EvidenceAddress).json_schema(),
        "EvidenceLocus": EvidenceLocus.model_json_schema(),
        "Manifest": Manifest.model_json_schema(),
        "ExtractRequest": ExtractRequest.model_json_schema(),
        "Outcome": Outcome.model_json_schema(),
        "PublicError": PublicError.model_json_schema(),
        "EvidenceBundle": EvidenceBundle.model_json_schema(),
    }


def _out_problem(out: Path | None) -> str | None:
    """Why ``--out`` cannot take the files (it is created when missing), or None."""
    if out is None:
        return None
    if out.exists() and not out.is_dir():
        return "--out names an existing file; give a directory (it is created when missing)"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--out: cannot create that directory ({(exc.strerror or 'error').lower()})"
    if not os.access(out, os.W_OK | os.X_OK):
        return "--out: that directory is not writable"
    return None


def _extract(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    import logging

    from mediafleet.dispatch import Dispatcher
    from mediafleet.inputs import Input, InputUnavailable, UsageError, check_input, open_input

    # The CLI reports every failure itself, on one line; the workers' log lines would only repeat it.
    logging.getLogger().addHandler(logging.NullHandler())
    specs = list(args.files) + [str(p) for p in (_samples() if args.samples else [])]
    if not specs:
        print("mediafleet extract: no files given (name some, - for standard input, or --samples)", file=sys.stderr)
        return EXIT_USAGE
    problem = None
    if args.action is not None and args.action not in manifest.capabilities:
        problem = (f"--action {args.action}: not declared by the manifest in force "
                   f"(actions: {', '.join(sorted(manifest.capabilities))})")
    elif specs.count("-") > 1:
        problem = "- (standard input) can be given once"
    problem = problem or _out_problem(args.out)
    if problem:
        print(f"mediafleet extract: {problem}", file=sys.stderr)
        return EXIT_USAGE
    options = dict(args.option)
    status = EXIT_OK
    # Every local file is opened and checked before anything runs: a mistake stops the command with
    # nothing done. Standard input and URLs are read when their turn comes, then checked alike.
    queue: list[Input | str] = []
    try:
        for spec in specs:
            if spec == "-" or "://" in spec:
                queue.append(spec)
                continue
            try:
                item = open_input(spec, manifest, stdin=sys.stdin.buffer)
            except InputUnavailable as exc:
                print(f"mediafleet extract: {exc}", file=sys.stderr)
                status = EXIT_FAILED
                continue
            capability = check_input(item, manifest, args.action, options)
            _check_opencv(capability)
            queue.append(item)
    except UsageError as exc:
        print(f"mediafleet extract: {exc}", file=sys.stderr)
        return EXIT_USAGE
    dispatcher = Dispatcher(settings, manifest=manifest)
    if dispatcher.in_process and _writes_as_made(args, dispatcher):
        dispatcher.orchestrator = _StreamedPdfs(dispatcher.orchestrator)  # type: ignore[assignment]
    try:
        return _extract_all(queue, args, settings, manifest, dispatcher, options, status)
    finally:
        if not dispatcher.in_process:
            _stop_waiting(dispatcher)


def _writes_as_made(args: argparse.Namespace, dispatcher: Any) -> bool:
    """Whether a PDF's ``--out`` files are written as its bundle is made (range by range
    in-process; from a split job's ranges' outcomes on the fleet) rather than from the bundle held
    whole: nothing else wants the whole bundle (no ``--json``, no ``--report``, no discovery index)."""
    return bool(args.out) and not (args.json or args.report) and dispatcher.settings.discovery_index is None


def _waits_on_fleet(job: Any) -> bool:
    from mediafleet.fleet_job import FleetJob

    return isinstance(job, FleetJob)


def _extract_all(queue: list[Any], args: argparse.Namespace, settings: Any, manifest: Any, dispatcher: Any,
                 options: dict[str, Any], status: int) -> int:
    from mediafleet.inputs import Input, InputUnavailable, UsageError, open_input

    saved = _Saved(args.out if args.out else (Path.cwd() if args.report else None))
    for entry in queue:
        try:
            item = entry if isinstance(entry, Input) else open_input(entry, manifest, stdin=sys.stdin.buffer)
        except InputUnavailable as exc:
            print(f"mediafleet extract: {exc}", file=sys.stderr)
            status = EXIT_FAILED
            continue
        except UsageError as exc:
            print(f"mediafleet extract: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            outcome = _extract_one(item, args, dispatcher, manifest, options, saved)
        except UsageError as exc:
            print(f"mediafleet extract: {exc}", file=sys.stderr)
            return EXIT_USAGE
        finally:
            item.close()
        if outcome in (EXIT_UNREACHABLE, EXIT_INTERRUPTED):
            return outcome
        status = max(status, outcome)
    if saved.shown:
        _closing_lines(args, settings, manifest, dispatcher, saved)
    return status


def _check_opencv(capability: Any) -> None:
    """Refuse at once, with the fix, when the capability's spec needs OpenCV and OpenCV is installed
    but cannot load for want of libGL.

    rapidocr and scenedetect require ``opencv-python``, whose build needs the system's libGL; it
    shares one ``cv2`` folder with ``opencv-python-headless``, and whichever pip installed last wins.

    Raises:
        UsageError: ``cv2`` is there but its library needs libGL, which this machine lacks.
    """
    from mediafleet.inputs import UsageError
    from mediafleet.workers.registry import spec_for

    if capability is None or not spec_for(capability.action).opencv:
        return
    try:
        import cv2  # noqa: F401
    except ImportError as exc:
        if "libGL" in str(exc):
            raise UsageError("OpenCV cannot load: the opencv-python build needs the system's libGL, which this "
                             "machine lacks; put the headless build over it: .venv/bin/pip install --no-deps "
                             "--force-reinstall opencv-python-headless (or install libgl1)") from None


def _stop_waiting(dispatcher: Any) -> None:
    """Let go of the results this process still waits on (a wait that timed out).

    Celery's Redis backend keeps them until they are deleted; deleted at interpreter exit, they
    would unsubscribe from Redis with the interpreter half gone and print a traceback.
    """
    if getattr(dispatcher, "_app", None) is None:  # nothing was sent
        return
    backend = dispatcher.app.backend
    for mapping in getattr(backend, "_pending_results", ()):
        for waiters in list(mapping.values()):
            for result in list(waiters.values()):
                try:
                    backend.remove_pending_result(result)
                except unreachable_errors():  # Redis went away: nothing left to unsubscribe from
                    return


EXIT_INTERRUPTED = 130


class _Saved:
    """Where ``--out``/``--report`` files go, and how many were written."""

    def __init__(self, folder: Path | None) -> None:
        self.folder, self.bundles, self.reports, self.shown = folder, 0, 0, 0


def _extract_one(item: Any, args: argparse.Namespace, dispatcher: Any, manifest: Any, options: dict[str, Any],
                 saved: _Saved) -> int:
    """Run one opened input and show what it gave; returns its exit status."""
    from mediafleet.adapters.prov import to_turtle
    from mediafleet.contract.bundle import EvidenceBundle
    from mediafleet.contract.errors import FleetUnreachable, MediafleetError, TimedOut
    from mediafleet.contract.jobs import JobState
    from mediafleet.inputs import check_input
    from mediafleet.report.text import summary_lines
    from mediafleet.workers.registry import progress_unit

    capability = check_input(item, manifest, args.action, options)
    _check_opencv(capability)
    unit = progress_unit(capability.action) if capability else "items"
    show = _Progress(item.name, unit, enabled=sys.stderr.isatty())
    job = None
    try:
        job = dispatcher.submit(item.source, action=args.action, media_type=args.media_type, options=options,
                                progress=show)
        state = job.state()
        if not dispatcher.in_process and state in (JobState.QUEUED, JobState.HELD, JobState.STARTED):
            print(f"{item.name}: job {job.id} {state.value}; follow it with: mediafleet status {job.id}",
                  file=sys.stderr)
            if state == JobState.HELD:
                record = job.record()  # type: ignore[attr-defined]  # a fleet job's
                reason = record.held_reason if record is not None and record.held_reason else "no live worker for it"
                print(f"{item.name}: held: {reason}; it starts when a worker comes up (mediafleet worker); "
                      "waiting (Ctrl-C stops the wait, not the job)", file=sys.stderr)
        pending = getattr(job, "inner", job)  # a ClaimedJob's own job
        form = "jsonl" if args.jsonl else "json"
        if isinstance(pending, _PendingPdf):
            stem = f"{item.name}.{pending.request.artifact.digest.removeprefix('sha256:')[:12]}"
            written = pending.write(Path(args.out, f"{stem}.bundle.{form}"), Path(args.out, f"{stem}.prov.ttl"),
                                    getattr(job, "claims", None), form)
            show.clear()
            return _written(item.name, written, saved)
        if not dispatcher.in_process and _writes_as_made(args, dispatcher) and _waits_on_fleet(pending):
            # A split PDF job's bundle written from its ranges' outcomes (else held whole, as below)
            stem = f"{item.name}.{pending.request.artifact.digest.removeprefix('sha256:')[:12]}"
            done = pending.write(Path(args.out, f"{stem}.bundle.{form}"), Path(args.out, f"{stem}.prov.ttl"),
                                 claims=getattr(job, "claims", None), form=form, timeout=args.timeout,
                                 on_progress=lambda p: show(p.done, p.total, p.unit))
            if not isinstance(done, EvidenceBundle):
                show.clear()
                return _written(item.name, done, saved)
            bundle = done
        else:
            bundle = job.bundle(timeout=args.timeout, on_progress=lambda p: show(p.done, p.total, p.unit))
    except TimedOut:
        show.clear()
        job_id = job.id if job is not None else "?"
        print(f"{item.name}: stopped waiting after {args.timeout:g} s; job {job_id} goes on: "
              f"mediafleet status {job_id}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        show.clear()
        if job is None or dispatcher.in_process:
            print(f"{item.name}: interrupted", file=sys.stderr)
        else:
            print(f"{item.name}: stopped waiting; job {job.id} goes on: mediafleet status {job.id}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except FleetUnreachable:
        show.clear()
        print(f"mediafleet extract: the fleet's broker cannot be reached at {_broker_shown(dispatcher.settings)}",
              file=sys.stderr)
        return EXIT_UNREACHABLE
    except MediafleetError as exc:
        show.clear()
        print(f"mediafleet extract: {item.name}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    show.clear()
    status = _said_failed(item.name, bundle)
    saved.shown += 1
    if args.json:
        sys.stdout.write(bundle.model_dump_json() + "\n")
    else:
        print("\n".join(summary_lines(item.name, bundle)))
    stem = f"{item.name}.{bundle.artifact.digest.removeprefix('sha256:')[:12]}"
    if args.out:
        if args.jsonl:
            from mediafleet.adapters.stream import write_bundle_lines

            with Path(args.out, f"{stem}.bundle.jsonl").open("w", encoding="utf-8") as stream:
                write_bundle_lines(bundle, stream)
        else:
            Path(args.out, f"{stem}.bundle.json").write_text(bundle.model_dump_json(indent=2), encoding="utf-8")
        Path(args.out, f"{stem}.prov.ttl").write_text(to_turtle(bundle.prov), encoding="utf-8")
        saved.bundles += 1
    if args.report and saved.folder is not None:
        from mediafleet.report import build_report, report_file_name, store_inputs

        with store_inputs(bundle, dispatcher.store) as inputs:
            page = build_report(bundle, item.name, inputs)
        (saved.folder / report_file_name(item.name, bundle)).write_text(page, encoding="utf-8")
        saved.reports += 1
    return status


class _StreamedPdfs:
    """The in-process orchestrator, with each PDF job it may run in ranges left pending, for
    ``extract --out DIR`` to write its bundle (either form) and Turtle as they are made
    (:mod:`mediafleet.workers.pdf.stream`) instead of holding the bundle whole; every other job runs
    as before."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def start(self, request: Any, capability: Any, submission: Any, facts: Any = None) -> Any:
        from mediafleet.workers.pdf.stream import streams

        if not streams(capability):
            return self.inner.start(request, capability, submission, facts)
        return _PendingPdf(self.inner, request, capability, submission)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _PendingPdf:
    """An admitted PDF job not run yet: :meth:`write` runs it, writing its bundle as it goes."""

    def __init__(self, orchestrator: Any, request: Any, capability: Any, submission: Any) -> None:
        self.id, self.action = request.job_id, request.action
        self.orchestrator, self.request, self.capability, self.submission = orchestrator, request, capability, submission

    def state(self) -> Any:
        from mediafleet.contract.jobs import JobState

        return JobState.QUEUED

    def bundle(self, timeout: float | None = None, on_progress: Any = None) -> Any:
        """The bundle held whole, as the in-process orchestrator makes it."""
        return self.orchestrator.start(self.request, self.capability, self.submission).bundle()

    def write(self, bundle_to: Path, turtle_to: Path, claims: Any, form: str) -> Any:
        from mediafleet.workers.pdf.stream import write_pdf_bundle

        return write_pdf_bundle(self.request, self.capability, self.orchestrator.manifest, self.orchestrator.store,
                                bundle_to, turtle_to=turtle_to, claims=claims, progress=self.submission.get("progress"),
                                form=form)


def _said_failed(name: str, bundle: Any) -> int:
    """The exit status of one artifact's bundle (held or written as made), a failure said on stderr."""
    if bundle.status == "ok":
        return EXIT_OK
    error = bundle.error
    why = f"{error.code.value}: {error.message}" if error is not None else "no reason given"
    print(f"mediafleet extract: {name}: failed: {why}", file=sys.stderr)
    return EXIT_FAILED


def _written(name: str, written: Any, saved: _Saved) -> int:
    """Show a bundle written as it was made (``--out DIR``); returns its exit status."""
    status = _said_failed(name, written)
    saved.shown += 1
    saved.bundles += 1
    print("\n".join(written.summary_lines(name)))
    return status


def _closing_lines(args: argparse.Namespace, settings: Any, manifest: Any, dispatcher: Any, saved: _Saved) -> None:
    """Where the results are, how to get the others, and what stays in the blob cache."""
    from mediafleet.blobstore import LocalBlobStore
    from mediafleet.retention import Retention

    notes = []
    if saved.bundles or saved.reports:
        what = " and ".join(filter(None, [f"{saved.bundles} bundle(s) with provenance" if saved.bundles else "",
                                           f"{saved.reports} report page(s)" if saved.reports else ""]))
        where = "the current directory" if saved.folder == Path.cwd() else str(saved.folder)
        notes.append(f"wrote {what} into {where}")
    elif not args.json:
        notes.append("nothing was written: --json prints each bundle, --out DIR saves bundles and provenance, "
                     "--report writes a page showing the evidence on each file")
    store = dispatcher.store
    if isinstance(store, LocalBlobStore):
        total = sum(b.size for b in store.blobs())
        days = Retention.from_settings(settings, manifest).blob_s / 86400
        notes.append(f"the artifacts stay in the blob cache ({_home(store.root)}, {total / 2**20:.1f} MiB in all) for "
                     f"`mediafleet report`; `mediafleet gc` deletes blobs unused for {days:.0f} days, "
                     "`mediafleet gc --max-age 0` every unused one")
    else:
        notes.append("the artifacts stay in the fleet's blob store until `mediafleet gc` removes them")
    for note in notes:
        print(f"mediafleet extract: {note}", file=sys.stderr)


def _home(path: Path) -> str:
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if home != "/" and (text == home or text.startswith(home + os.sep)) else text


def _fleet_command(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
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
        print(f"mediafleet {args.command}: the fleet's broker cannot be reached at {_broker_shown(settings)}",
              file=sys.stderr)
        return EXIT_UNREACHABLE
    print(json.dumps(report, indent=2))
    return EXIT_OK if not args.job or report["job"]["state"] != "unknown" else EXIT_FAILED


class _Progress:
    """Progress of one file on stderr, with its unit and a bar; only on a terminal, and only for jobs
    that take more than a moment."""

    _WIDTH = 24

    def __init__(self, name: str, unit: str, *, enabled: bool) -> None:
        import time

        self._name, self._unit, self._enabled = name, unit, enabled
        self._time, self._start, self._last, self._shown = time.monotonic, time.monotonic(), 0.0, 0

    def __call__(self, done: int, total: int | None, unit: str | None = None) -> None:
        now = self._time()
        if not self._enabled or now - self._start < 0.5 or now - self._last < 0.2:
            return
        self._last = now
        unit = unit or self._unit
        if total:
            filled = round(self._WIDTH * min(done / total, 1.0))
            line = f"{self._name} [{'#' * filled}{'.' * (self._WIDTH - filled)}] {done}/{total} {unit}"
        else:
            line = f"{self._name} {done} {unit}"
        print("\r" + line.ljust(self._shown), end="", file=sys.stderr, flush=True)
        self._shown = max(self._shown, len(line))

    def clear(self) -> None:
        if self._shown:
            print("\r" + " " * self._shown + "\r", end="", file=sys.stderr, flush=True)
            self._shown = 0


def _worker(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    from mediafleet.workers.boot import BootRefused, WorkerOptions, WorkerRetired, boot_worker

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
    from mediafleet.mcp_server import TOOLS

    served = [t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else list(TOOLS)
    if not served or any(t not in TOOLS for t in served):
        print(f"mediafleet serve-mcp: --tools takes some of {', '.join(TOOLS)}", file=sys.stderr)
        return EXIT_USAGE
    if args.upstream is not None:
        from mediafleet.mcp_upstream import Upstream

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
    from mediafleet.mcp_server import DEFAULT_MAX_INLINE_BYTES, SidecarTools, serve

    tools = SidecarTools(Dispatcher(settings, manifest=manifest),
                         max_inline_bytes=args.max_inline_bytes or DEFAULT_MAX_INLINE_BYTES, wait_s=args.wait,
                         detached=not args.http, served=served)
    serve(tools, http=args.http, host=args.host, port=args.port, errors_as_is_error=args.is_error,
          upstream=args.upstream)
    return EXIT_OK


def _bundle_title(path: Path | None) -> str | None:
    """``harbour-report.pdf`` from ``harbour-report.pdf.ca0686c79836.bundle.json`` (extract --out's names)."""
    import re

    if path is None:
        return None
    match = re.fullmatch(r"(.+)\.[0-9a-f]{12}\.bundle\.json", path.name)
    return match.group(1) if match else path.name.removesuffix(".json").removesuffix(".bundle")


def _report(args: argparse.Namespace, settings: Any) -> int:
    from pydantic import ValidationError

    from mediafleet.blobstore import open_store
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
            text = sys.stdin.read() if path is None else path.read_text(encoding="utf-8")
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
        if (problem := _out_problem(output)):
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


def _gc(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    from mediafleet.contract.errors import Unavailable
    from mediafleet.retention import gc

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


if __name__ == "__main__":
    sys.exit(main())
