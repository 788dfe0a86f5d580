"""``mediafleet extract``: open each input, submit it, wait, write or print its bundle, say what failed."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from mediafleet.cli.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from mediafleet.cli.inputs import bundled_samples
from mediafleet.cli.lines import broker_shown
from mediafleet.fleet.redis_client import unreachable_errors

__all__ = ["INPUT_FAILURE_FORMAT", "out_problem", "run"]


def out_problem(out: Path | None) -> str | None:
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


def run(args: argparse.Namespace, settings: Any, manifest: Any) -> int:
    import logging

    from mediafleet.cli.inputs import Input, InputUnavailable, UnsupportedType, UsageError, check_input, open_input
    from mediafleet.dispatch import Dispatcher

    # The CLI reports every failure itself, on one line; the workers' log lines would only repeat it.
    logging.getLogger().addHandler(logging.NullHandler())
    specs = list(args.files) + [str(p) for p in (bundled_samples() if args.samples else [])]
    if not specs:
        print("mediafleet extract: no files given (name some, - for standard input, or --samples)", file=sys.stderr)
        return EXIT_USAGE
    problem = None
    if args.action is not None and args.action not in manifest.capabilities:
        problem = (f"--action {args.action}: not declared by the manifest in force "
                   f"(actions: {', '.join(sorted(manifest.capabilities))})")
    elif specs.count("-") > 1:
        problem = "- (standard input) can be given once"
    problem = problem or out_problem(args.out)
    if problem:
        print(f"mediafleet extract: {problem}", file=sys.stderr)
        return EXIT_USAGE
    options = dict(args.option)
    status = EXIT_OK
    # Every local file is opened and checked before anything runs: a mistake stops the command with
    # nothing done. Standard input and URLs are read when their turn comes, then checked alike. With
    # --json every input keeps its place: one that cannot be read, or whose type nothing reads, is
    # a failed line in its turn, not a mistake.
    queue: list[Input | str | _Unread] = []
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
                if args.json:
                    queue.append(_Unread(str(exc)))
                continue
            try:
                capability = check_input(item, manifest, args.action, options)
            except UnsupportedType:
                if not args.json:
                    raise
                capability = None  # its line is the dispatcher's failed bundle
            _check_opencv(capability)
            queue.append(item)
    except UsageError as exc:
        print(f"mediafleet extract: {exc}", file=sys.stderr)
        return EXIT_USAGE
    dispatcher = Dispatcher(settings, manifest=manifest)
    if dispatcher.in_process and _writes_as_made(args, dispatcher):
        dispatcher.orchestrator.defer_streamed = True  # its PDFs written range by range (Job.write)
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


def _written_as_made(job: Any) -> bool:
    """Whether ``job`` writes its ``--out`` files as its bundle is made (:meth:`Job.write`): a PDF
    run here in ranges, or any job on the fleet (a split one from its ranges' outcomes)."""
    from mediafleet.orchestrators.fleet_job import FleetJob
    from mediafleet.orchestrators.pdf_ranges import StreamedPdfJob

    return isinstance(job, (FleetJob, StreamedPdfJob))


def _extract_all(queue: list[Any], args: argparse.Namespace, settings: Any, manifest: Any, dispatcher: Any,
                 options: dict[str, Any], status: int) -> int:
    from mediafleet.cli.inputs import Input, InputUnavailable, UsageError, open_input

    saved = _Saved(args.out if args.out else (Path.cwd() if args.report else None))
    for entry in queue:
        if isinstance(entry, _Unread):
            _unavailable_line(entry.message)
            continue
        try:
            item = entry if isinstance(entry, Input) else open_input(entry, manifest, stdin=sys.stdin.buffer)
        except InputUnavailable as exc:
            print(f"mediafleet extract: {exc}", file=sys.stderr)
            status = EXIT_FAILED
            if args.json:
                _unavailable_line(str(exc), retryable="://" in entry)
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
    from mediafleet.cli.inputs import UsageError
    from mediafleet.modalities.registry import spec_for

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


class _Unread:
    """A local file that could not be opened: under ``--json``, its failed line in its turn."""

    def __init__(self, message: str) -> None:
        self.message = message


INPUT_FAILURE_FORMAT = "mediafleet.input-failure/v1"


def _failure_line(name: str, code: str, message: str, *, retryable: bool = False, job_id: str | None = None) -> None:
    """``--json``'s line for an input that gave no bundle (it could not be read, or the wait ran
    out): its name, a code (an error code, or ``input_unavailable``) and the one-line reason."""
    import json

    line = {"format": INPUT_FAILURE_FORMAT, "input": name, "status": "failed", "job_id": job_id,
            "error": {"code": code, "message": message, "retryable": retryable}}
    sys.stdout.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _unavailable_line(said: str, *, retryable: bool = False) -> None:
    """The failed line of an input that could not be had, from its one-line message (``name: why``)."""
    name, _, why = said.partition(": ")
    _failure_line(name, "input_unavailable", why or said, retryable=retryable)


def _with_guidance(bundle: Any, refused: Any) -> Any:
    """The dispatcher's failed bundle of an input whose type nothing reads, its message saying what
    to do and which types are read (the code and everything else as the dispatcher made them)."""
    from mediafleet.contract.errors import ErrorCode

    error = bundle.error
    if bundle.status != "failed" or error is None or error.code != ErrorCode.UNSUPPORTED_MEDIA_TYPE:
        return bundle
    return bundle.model_copy(update={"error": error.model_copy(update={"message": refused.public()})})


class _Saved:
    """Where ``--out``/``--report`` files go, and how many were written."""

    def __init__(self, folder: Path | None) -> None:
        self.folder, self.bundles, self.reports, self.shown = folder, 0, 0, 0


def _extract_one(item: Any, args: argparse.Namespace, dispatcher: Any, manifest: Any, options: dict[str, Any],
                 saved: _Saved) -> int:
    """Run one opened input and show what it gave; returns its exit status."""
    from mediafleet.adapters.prov import to_turtle
    from mediafleet.cli.inputs import UnsupportedType, check_input
    from mediafleet.contract.errors import FleetUnreachable, MediafleetError, TimedOut
    from mediafleet.contract.jobs import JobState
    from mediafleet.report.text import summary_lines
    from mediafleet.modalities.registry import progress_unit

    refused: UnsupportedType | None = None
    try:
        capability = check_input(item, manifest, args.action, options)
    except UnsupportedType as exc:
        if not args.json:
            raise
        capability, refused = None, exc  # the dispatcher refuses it too, with a failed bundle
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
        if _writes_as_made(args, dispatcher) and _written_as_made(pending):
            stem = f"{item.name}.{pending.request.artifact.digest.removeprefix('sha256:')[:12]}"
            written = job.write(Path(args.out, f"{stem}.bundle.{form}"), Path(args.out, f"{stem}.prov.ttl"),
                                form=form, timeout=args.timeout, on_progress=lambda p: show(p.done, p.total, p.unit))
            show.clear()
            return _written(item.name, written, saved)
        bundle = job.bundle(timeout=args.timeout, on_progress=lambda p: show(p.done, p.total, p.unit))
    except TimedOut:
        show.clear()
        job_id = job.id if job is not None else "?"
        print(f"{item.name}: stopped waiting after {args.timeout:g} s; job {job_id} goes on: "
              f"mediafleet status {job_id}", file=sys.stderr)
        if args.json:
            _failure_line(item.name, "timeout", f"stopped waiting after {args.timeout:g} s; the job goes on",
                          retryable=True, job_id=None if job is None else job.id)
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
        print(f"mediafleet extract: the fleet's broker cannot be reached at {broker_shown(dispatcher.settings)}",
              file=sys.stderr)
        return EXIT_UNREACHABLE
    except MediafleetError as exc:
        show.clear()
        print(f"mediafleet extract: {item.name}: {exc.message}", file=sys.stderr)
        if args.json:
            public = exc.public()
            _failure_line(item.name, public.code.value, public.message, retryable=public.retryable,
                          job_id=None if job is None else job.id)
        return EXIT_FAILED
    show.clear()
    if refused is not None:
        bundle = _with_guidance(bundle, refused)
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
    from mediafleet.blobs.local import LocalBlobStore
    from mediafleet.blobs.retention import Retention

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

