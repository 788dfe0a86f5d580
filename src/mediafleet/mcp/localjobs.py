"""In-process jobs that outlive the call that started them (``serve-mcp`` without a broker).

The callers give up on a tool call after 60 s unless their ``mcp_config.json`` says otherwise,
and over stdio they start one server process per call and kill it when the call ends. So a
long extraction must not live inside the call: each job runs in its own detached process
(``python -m mediafleet.mcp.localjobs``), or in a thread of a long-lived HTTP server, and leaves its
bundle in a job folder named by the job id. A call waits a while for it; a retried call for the
same artifact and options finds the same folder and gets the finished bundle, or waits on the
job still running. Nothing is run twice and nothing finished is lost:

* ``lock``: held (``flock``) by whoever runs the job, for as long as it runs. A call that finds it
  free and no bundle starts the job (again, if its runner died: a killed runner loses nothing
  but its own time);
* ``request.json``: what to run (the stored blob's digest, the action, the options);
* ``bundle.json``: the finished bundle, written atomically; an ``ok`` bundle or a permanent
  failure. A retryable failure is written to ``retry.json`` instead, handed to the next call
  once and then removed, so the call after it runs the job again;
* ``runner.log``: what a detached runner wrote on stderr (private to the server's user);
* ``died.json``: a detached runner ended without leaving a bundle (it crashed, or was killed): the
  server that started it writes its exit status here, and the waiting call answers it as the
  failure it is (:class:`RunnerDied`) instead of "still running". Like ``retry.json`` it is handed
  to one call and removed, so a later call runs the job again.

Job folders older than the result TTL are swept when the store opens.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.contract.errors import ErrorCode, MediafleetError, TimedOut
from mediafleet.interpreter import python

__all__ = ["LocalJobs", "RunnerDied", "run_folder"]

log = logging.getLogger(__name__)

_POLL_S = 0.1
_JOB_ID = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


@contextmanager
def _try_lock(path: Path) -> Iterator[bool]:
    """Hold ``path``'s exclusive lock while inside, if nobody else holds it (yields whether we do)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class RunnerDied(MediafleetError):
    """A job's detached runner ended before it left a bundle.

    Killed by a signal (the kernel's OOM killer, an operator): ``worker_lost``, retryable, since the
    same job may well finish on the next call. Exited with a status of its own (it crashed, say on
    a broken install): ``internal_error``, not retryable, since calling again meets the same fault;
    either way nothing is kept, so the call after the one that was told runs the job again.
    """

    def __init__(self, returncode: int) -> None:
        if returncode < 0:
            super().__init__("the job's runner process was killed before it finished (the server's log has "
                             "its signal); calling again runs the job again", code=ErrorCode.WORKER_LOST)
            self.retryable = True
        else:
            super().__init__(f"the job's runner process exited with status {returncode} before it finished "
                             "(the server's log has its output)", code=ErrorCode.INTERNAL_ERROR)
            self.retryable = False
        self.returncode = returncode


def _take(path: Path) -> bytes | None:
    """``path``'s bytes, removing it: told to one caller only (None when absent, or another caller
    took it first: that one reports it)."""
    try:
        text = path.read_bytes()
        path.unlink()
    except FileNotFoundError:
        return None
    return text


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class LocalJobs:
    """Job folders under ``root``; ``detached`` runs each job in its own process, else in a thread.

    Args:
        root: where the job folders live (private to the user running the server).
        detached: a process per job (stdio servers, which the caller kills after each call);
            False: a thread of this process (a long-lived HTTP server keeps its engines loaded).
        ttl_s: job folders untouched this long are removed when the store opens.
        runner: how a thread runs one job folder (default :func:`run_folder` with this process's
            dispatcher, given by the server).
    """

    def __init__(self, root: Path, *, detached: bool, ttl_s: float,
                 runner: Callable[[Path], None] | None = None) -> None:
        self.root = root
        self.detached = detached
        self._runner = runner
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._sweep(ttl_s)

    def _sweep(self, ttl_s: float) -> None:
        cutoff = time.time() - ttl_s
        for folder in self.root.iterdir():
            try:
                if folder.is_dir() and folder.stat().st_mtime < cutoff:
                    with _try_lock(folder / "lock") as mine:
                        if mine:
                            shutil.rmtree(folder, ignore_errors=True)
            except OSError:
                continue

    def folder(self, job_id: str) -> Path:
        if not job_id or not set(job_id) <= _JOB_ID:
            raise ValueError("not a job id")
        return self.root / job_id

    def run(self, job_id: str, request: Mapping[str, Any], timeout: float) -> EvidenceBundle:
        """The job's bundle: the finished one, or the job's (started now, or already running) if it
        ends within ``timeout`` seconds.

        Raises:
            TimedOut: still running after ``timeout``; it goes on, and a later call attaches to it.
            RunnerDied: its detached runner ended without a bundle (told to this call only).
        """
        folder = self.folder(job_id)
        folder.mkdir(exist_ok=True, mode=0o700)
        deadline = time.monotonic() + timeout
        while True:
            if (bundle := self._finished(folder)) is not None:
                return bundle
            self._start_if_idle(folder, request)
            if time.monotonic() >= deadline:
                raise TimedOut("the job is still running")
            time.sleep(_POLL_S)

    @staticmethod
    def _finished(folder: Path) -> EvidenceBundle | None:
        done = folder / "bundle.json"
        if done.exists():
            os.utime(folder)  # kept for the TTL from its last pickup
            return EvidenceBundle.model_validate_json(done.read_bytes())
        if (text := _take(folder / "retry.json")) is not None:
            return EvidenceBundle.model_validate_json(text)
        if (text := _take(folder / _DIED)) is not None:
            raise RunnerDied(int(json.loads(text)["returncode"]))
        return None

    def _start_if_idle(self, folder: Path, request: Mapping[str, Any]) -> None:
        with _try_lock(folder / "lock") as idle:
            if not idle or (folder / "bundle.json").exists() or (folder / "retry.json").exists():
                return
            if _starting(folder):
                return  # a runner was started moments ago and is on its way to the lock
            _write_atomic(folder / "request.json", json.dumps(dict(request)))
            (folder / _STARTING).touch()
            if self.detached:
                (folder / _DIED).unlink(missing_ok=True)  # an earlier runner's death, already told
                # Its own session: the caller killing this server (stdio, after each call) spares it.
                # -P: started from the clone's root, it still imports the installed package.
                err = os.open(folder / _LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    child = subprocess.Popen(python("-m", "mediafleet.mcp.localjobs", str(folder)),
                                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                             start_new_session=True, close_fds=True)
                finally:
                    os.close(err)
                # Reaped if it ends while this server lives; if the server goes first, init reaps it.
                threading.Thread(target=_reap, args=(child, folder), daemon=True, name=f"reap-{folder.name}").start()
            else:
                assert self._runner is not None, "a threaded LocalJobs needs a runner"
                threading.Thread(target=_guarded, args=(self._runner, folder), daemon=True,
                                 name=f"job-{folder.name}").start()


_STARTING = "starting"
_STARTING_FRESH_S = 15.0  # a runner that has not taken the lock this long after its start died
_DIED = "died.json"
_LOG = "runner.log"


def _reap(child: subprocess.Popen[bytes], folder: Path) -> None:
    """Wait for a detached runner; if it ended without leaving a bundle, say so in ``died.json``.

    A runner that exits 0 left its bundle (or found another runner holding the job); any other
    ending without ``bundle.json`` or ``retry.json`` is a death the waiting call must hear of.
    """
    returncode = child.wait()
    if returncode == 0 or (folder / "bundle.json").exists() or (folder / "retry.json").exists():
        return
    (folder / _STARTING).unlink(missing_ok=True)  # it is not on its way: the next call may start another
    try:
        said = (folder / _LOG).read_text(encoding="utf-8", errors="replace")[-2000:]
    except OSError:
        said = ""
    log.error("job %s: its runner ended with status %s before it finished; its stderr ended with:\n%s",
              folder.name, returncode, said)
    _write_atomic(folder / _DIED, json.dumps({"returncode": returncode}))


def _starting(folder: Path) -> bool:
    """A runner was started (or touched the marker while waiting for the lock) very recently."""
    try:
        return time.time() - (folder / _STARTING).stat().st_mtime < _STARTING_FRESH_S
    except FileNotFoundError:
        return False


def _guarded(runner: Callable[[Path], None], folder: Path) -> None:
    try:
        runner(folder)
    except Exception:  # noqa: BLE001 - the runner records failures itself; never kill the server's thread
        import logging

        logging.getLogger("mediafleet.mcp.localjobs").exception("a local job's runner failed")


def run_folder(folder: Path, submit: Callable[[Mapping[str, Any]], EvidenceBundle]) -> None:
    """Run the job in ``folder`` once, holding its lock: ``submit(request)`` gives the bundle.

    A runner that finds the job done, or cannot get the lock within a minute (another runner
    has it), does nothing.
    """
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return
                (folder / _STARTING).touch()  # still on our way: nobody starts another meanwhile
                time.sleep(0.05)
        try:
            (folder / _STARTING).unlink(missing_ok=True)
            if (folder / "bundle.json").exists() or (folder / "retry.json").exists():
                return
            request = json.loads((folder / "request.json").read_text(encoding="utf-8"))
            bundle = submit(request)
            retryable = bundle.status != "ok" and bundle.error is not None and bundle.error.retryable
            _write_atomic(folder / ("retry.json" if retryable else "bundle.json"), bundle.model_dump_json())
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _main(argv: list[str]) -> int:
    """``python -m mediafleet.mcp.localjobs FOLDER``: run one job folder in-process, then exit."""
    folder = Path(argv[0])
    from mediafleet.dispatch import Dispatcher
    from mediafleet.settings import Settings

    settings = Settings.load(broker_url=None)
    dispatcher = Dispatcher(settings)
    run_folder(folder, lambda request: submit_request(dispatcher, request))
    return 0


def submit_request(dispatcher: Any, request: Mapping[str, Any]) -> EvidenceBundle:
    """Run one job folder's request on an in-process dispatcher."""
    job = dispatcher.submit_stored(request["digest"], action=request["action"], options=request["options"])
    return job.bundle()


if __name__ == "__main__":  # pragma: no cover - exercised as a subprocess by the tests
    sys.exit(_main(sys.argv[1:]))
