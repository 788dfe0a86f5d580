"""The command line guides: each ordinary mistake is one line on stderr and exit code 2, with no
traceback, no path and no internal class name; what works says what it found and where it went."""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediafleet.contract import EvidenceBundle
from mediafleet.cli.inputs import bundled_samples
from mediafleet.cli.parser import build_parser
from tests.conftest import free_port
from tests.media import scanned, text_pdf
from tests.servers import http_server

SAMPLE = {p.name: p for p in bundled_samples()}
# Exception class names users must never see (ours, pydantic's, the transports').
CLASS_NAMES = re.compile(r"\b(?:\w+Error|\w+Exception|InputRejected|CapabilityRefused|LimitExceeded|TimedOut|"
                         r"ValidationError|Settings|OperationalError)\b")


def run(*args: str, tmp_path: Path, env: dict[str, str] | None = None, stdin: bytes | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    full_env.update({"MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs"), **(env or {})})
    proc = subprocess.run([sys.executable, "-m", "mediafleet.cli", *args], input=stdin, capture_output=True,
                          env=full_env, timeout=300, cwd=cwd)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def assert_mistake(proc: subprocess.CompletedProcess[str], tmp_path: Path, *fragments: str, code: int = 2) -> str:
    """Exactly ``code``, one line on stderr holding every fragment, nothing on stdout; no traceback,
    no path, no class name, no ``(None)``."""
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    for fragment in fragments:
        assert fragment in line, line
    assert proc.stdout == ""
    assert "Traceback" not in line and str(tmp_path) not in line and "/tmp" not in line, line
    assert not CLASS_NAMES.search(line) and "(None)" not in line, line
    return line


@pytest.fixture
def pdf(tmp_path: Path) -> Path:
    path = tmp_path / "report.pdf"
    path.write_bytes(text_pdf(1))
    return path


@pytest.mark.parametrize("broker", ["localhost:6379", "http://localhost:6379", "redis://"])
def test_a_broker_that_is_not_a_redis_url(broker: str, pdf: Path, tmp_path: Path) -> None:
    line = assert_mistake(run("extract", str(pdf), "--broker", broker, tmp_path=tmp_path), tmp_path,
                          "--broker", "redis://localhost:6379/0")
    assert line.startswith("mediafleet extract: ")


def test_worker_takes_broker_like_the_other_subcommands(tmp_path: Path) -> None:
    assert_mistake(run("worker", "--broker", "localhost:6379", tmp_path=tmp_path), tmp_path,
                   "mediafleet worker: --broker 'localhost:6379' is not a redis://, rediss:// or sentinel:// URL")
    assert_mistake(run("status", tmp_path=tmp_path, env={"MEDIAFLEET_BROKER_URL": "amqp://host"}), tmp_path,
                   "MEDIAFLEET_BROKER_URL 'amqp://host' is not a redis://")


def test_a_broker_url_with_a_password_is_never_echoed(tmp_path: Path) -> None:
    line = assert_mistake(run("status", "--broker", "http://:hunter2secret@host/0", tmp_path=tmp_path), tmp_path)
    assert "hunter2secret" not in line


def test_out_naming_an_existing_file(pdf: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken.txt"
    taken.write_text("x")
    assert_mistake(run("extract", str(pdf), "--out", str(taken), tmp_path=tmp_path), tmp_path,
                   "--out names an existing file; give a directory")


@pytest.mark.slow
def test_out_in_a_place_that_cannot_be_written(pdf: Path, tmp_path: Path) -> None:
    taken = tmp_path / "taken.txt"
    taken.write_text("x")
    assert_mistake(run("extract", str(pdf), "--out", str(taken / "sub"), tmp_path=tmp_path), tmp_path,
                   "--out: cannot create that directory (not a directory)")
    if Path("/sys").is_dir():  # refused even to root
        assert_mistake(run("extract", str(pdf), "--out", "/sys/mediafleet-out", tmp_path=tmp_path), tmp_path,
                       "--out: cannot create that directory (operation not permitted)")


def test_a_directory_as_input(tmp_path: Path) -> None:
    folder = tmp_path / "scans"
    folder.mkdir()
    assert_mistake(run("extract", str(folder), tmp_path=tmp_path), tmp_path,
                   "scans is a directory: name the files in it")


@pytest.mark.slow
def test_dash_reads_standard_input(tmp_path: Path) -> None:
    proc = run("extract", "-", "--json", tmp_path=tmp_path, stdin=SAMPLE["harbour-report.pdf"].read_bytes())
    assert proc.returncode == 0, proc.stderr
    bundle = EvidenceBundle.model_validate_json(proc.stdout)
    assert bundle.status == "ok" and bundle.artifact.media_type == "application/pdf"
    assert_mistake(run("extract", "-", "-", tmp_path=tmp_path, stdin=b""), tmp_path, "- (standard input) can be given once")


def test_an_empty_standard_input_fails_with_its_code(tmp_path: Path) -> None:
    proc = run("extract", "-", tmp_path=tmp_path, stdin=b"")
    assert proc.returncode == 1 and "stdin: failed: empty_input" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def web(tmp_path: Path) -> Iterator[str]:
    """A real HTTP server on loopback serving ``tmp_path/www``."""
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args) -> None:  # type: ignore[no-untyped-def]
            pass

    with http_server(Quiet) as url:
        yield url


def test_an_http_url_is_downloaded(web: str, tmp_path: Path) -> None:
    (tmp_path / "www" / "harbour.pdf").write_bytes(SAMPLE["harbour-report.pdf"].read_bytes())
    proc = run("extract", f"{web}/harbour.pdf", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("harbour.pdf: ok (application/pdf), 2 pages (text layer)")


@pytest.mark.slow
def test_a_url_that_fails(web: str, tmp_path: Path) -> None:
    assert_mistake(run("extract", f"{web}/missing.pdf", tmp_path=tmp_path), tmp_path,
                   "missing.pdf: 127.0.0.1 answered HTTP 404", code=1)
    port = free_port()
    assert_mistake(run("extract", f"http://127.0.0.1:{port}/a.pdf", tmp_path=tmp_path), tmp_path,
                   "a.pdf: cannot download from 127.0.0.1", code=1)
    assert_mistake(run("extract", "ftp://example.org/a.pdf", tmp_path=tmp_path), tmp_path,
                   "ftp:// inputs are not supported")


def test_a_download_is_never_larger_than_the_manifest_accepts(web: str, tmp_path: Path) -> None:
    (tmp_path / "www" / "big.pdf").write_bytes(text_pdf(30))
    narrow = tmp_path / "manifest.json"
    narrow.write_text(json.dumps({"capabilities": {"ocr_pdf": {"limits": {"max_bytes": 2000}}}}))
    assert_mistake(run("extract", f"{web}/big.pdf", tmp_path=tmp_path, env={"MEDIAFLEET_MANIFEST_FILE": str(narrow)}),
                   tmp_path, "big.pdf: larger than the 2,000 bytes the manifest in force accepts", code=1)


def test_gif_is_named_and_refused(tmp_path: Path) -> None:
    from PIL import Image

    gif = tmp_path / "notice.gif"
    Image.new("RGB", (40, 20), "white").save(gif, format="GIF")
    assert_mistake(run("extract", str(gif), tmp_path=tmp_path), tmp_path,
                   "notice.gif: GIF (image/gif) is not supported; convert it to PNG")


def test_raw_pcm_is_named_and_refused(tmp_path: Path) -> None:
    pcm = tmp_path / "speech.pcm"
    pcm.write_bytes(bytes(range(7, 250)) * 40)
    assert_mistake(run("extract", str(pcm), tmp_path=tmp_path), tmp_path,
                   "speech.pcm: raw PCM (no header, so no rate or channels) is not supported; wrap it in WAV")


def test_bytes_of_no_known_type(tmp_path: Path) -> None:
    odd = tmp_path / "notes.bin"
    odd.write_bytes(b"just some words, not media\n" * 10)
    assert_mistake(run("extract", str(odd), tmp_path=tmp_path), tmp_path,
                   "notes.bin: the type is not recognised from its bytes; supported: application/pdf")


def test_a_mistake_stops_the_command_before_anything_runs(pdf: Path, tmp_path: Path) -> None:
    folder = tmp_path / "scans"
    folder.mkdir()
    proc = run("extract", str(pdf), str(folder), "--out", str(tmp_path / "out"), tmp_path=tmp_path)
    assert_mistake(proc, tmp_path, "scans is a directory")
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(("option", "says"), [
    ("dpi=1000", "-o dpi: ocr_pdf's dpi takes a number from 72 to 600, not the number 1000"),
    ("dpi=high", "-o dpi: ocr_pdf's dpi takes a number from 72 to 600, not the text 'high'"),
    ("ocr=sometimes", "-o ocr: ocr_pdf's ocr takes one of auto, never, always, not the text 'sometimes'"),
    ("rotated_lines=1", "-o rotated_lines: ocr_pdf's rotated_lines takes true or false, not the number 1"),
    ("language=en", "-o language: ocr_pdf has no option 'language' (its options: dpi, ocr, rotated_lines)"),
    ("dpi", "argument --option/-o: 'dpi' is not NAME=VALUE"),
])
def test_an_option_outside_the_manifest(option: str, says: str, pdf: Path, tmp_path: Path) -> None:
    assert_mistake(run("extract", str(pdf), "-o", option, tmp_path=tmp_path), tmp_path, says)


def test_an_undeclared_action(pdf: Path, tmp_path: Path) -> None:
    assert_mistake(run("extract", str(pdf), "--action", "ocr_anything", tmp_path=tmp_path), tmp_path,
                   "--action ocr_anything: not declared by the manifest in force (actions: analyze_image")


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf", "-inf", "soon"])
def test_a_timeout_that_is_not_a_positive_finite_number(timeout: str, pdf: Path, tmp_path: Path) -> None:
    assert_mistake(run("extract", str(pdf), f"--timeout={timeout}", tmp_path=tmp_path), tmp_path,
                   f"argument --timeout: '{timeout}' is not a number of seconds above 0",
                   "(see mediafleet extract --help)")


def test_bad_settings_name_the_variable(tmp_path: Path) -> None:
    assert_mistake(run("manifest", tmp_path=tmp_path, env={"MEDIAFLEET_RESULT_TTL_S": "-1"}), tmp_path,
                   "mediafleet: bad settings or manifest: MEDIAFLEET_RESULT_TTL_S: Input should be greater than 0")


def test_an_unreachable_broker_says_where_it_looked(pdf: Path, tmp_path: Path) -> None:
    port = free_port()
    proc = run("extract", str(pdf), "--broker", f"redis://:pw-not-shown@127.0.0.1:{port}/0", tmp_path=tmp_path)
    line = assert_mistake(proc, tmp_path, f"the fleet's broker cannot be reached at redis://127.0.0.1:{port}", code=3)
    assert "pw-not-shown" not in line


@pytest.mark.integration
def test_with_a_broker_and_no_worker_the_job_id_comes_first(fleet_env: dict[str, str], pdf: Path,
                                                            tmp_path: Path) -> None:
    proc = run("extract", str(pdf), "--timeout", "3", "--broker", fleet_env["MEDIAFLEET_BROKER_URL"],
               tmp_path=tmp_path, env={"MEDIAFLEET_BLOB_ROOT": fleet_env["MEDIAFLEET_BLOB_ROOT"]})
    assert proc.returncode == 1, proc.stderr
    first, held, stopped, *_ = proc.stderr.splitlines()
    job_id = re.fullmatch(r"report\.pdf: job (mf-[0-9a-f]{32}) held; follow it with: mediafleet status \1", first)
    assert job_id, first
    assert held.startswith("report.pdf: held: no live worker for ocr_pdf on cpu; it starts when a worker comes up")
    assert stopped == f"report.pdf: stopped waiting after 3 s; job {job_id.group(1)} goes on: mediafleet status {job_id.group(1)}"
    assert "Traceback" not in proc.stderr and "(None)" not in proc.stderr and not CLASS_NAMES.search(proc.stderr)
    status = run("status", job_id.group(1), "--broker", fleet_env["MEDIAFLEET_BROKER_URL"], tmp_path=tmp_path)
    assert status.returncode == 0 and json.loads(status.stdout)["job"]["state"] == "held"


def test_a_failed_file_names_its_code_not_a_class(tmp_path: Path) -> None:
    bad = tmp_path / "broken.pdf"
    bad.write_bytes(text_pdf(2)[:300])
    proc = run("extract", str(bad), tmp_path=tmp_path)
    assert proc.returncode == 1
    assert "broken.pdf: failed (application/pdf): corrupt_input:" in proc.stdout
    assert "mediafleet extract: broken.pdf: failed: corrupt_input:" in proc.stderr
    both = proc.stdout + proc.stderr
    assert "Traceback" not in both and "(None)" not in both and not CLASS_NAMES.search(both)


@pytest.mark.slow
def test_the_first_command_says_what_it_found_and_where_results_are(tmp_path: Path) -> None:
    proc = run("extract", "--samples", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "harbour-report.pdf: ok (application/pdf), 2 pages (text layer), 19 text lines" in out
    assert '  "Harbour Inspection Report The north quay' in out
    assert "memo.opus: ok (audio/ogg), 2 speech segments" in out and '"Please send the report' in out
    assert 'notice.png: ok (image/png), 1000 x 445 px, 3 text lines' in out and '"QUAY 4 CLOSED"' in out
    assert "scenes.mp4: ok (video/mp4), 6.0 s, 3 shots (0.0-2.0, 2.0-4.0, 4.0-6.0 s), 3 keyframes" in out
    assert out.count("claim verified: digest recomputed, locus kinds declared, loci valid") == 4
    notes = proc.stderr.splitlines()
    assert notes[0].startswith("mediafleet extract: nothing was written: --json prints each bundle, --out DIR")
    assert "--report writes a page" in notes[0]
    assert notes[1].startswith("mediafleet extract: the artifacts stay in the blob cache (")
    assert "`mediafleet gc --max-age 0` every unused one" in notes[1]
    assert "\r" not in proc.stderr  # no progress when stderr is not a terminal


@pytest.mark.slow
def test_out_and_report_say_where_they_wrote(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = run("extract", str(SAMPLE["notice.png"]), "--out", str(out), "--report", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["notice.png.4416d514c7c7.bundle.json", "notice.png.4416d514c7c7.prov.ttl",
                     "notice.png.4416d514c7c7.report.html"]
    assert f"wrote 1 bundle(s) with provenance and 1 report page(s) into {out}" in proc.stderr
    # Without --out, --report writes into the current directory.
    here = tmp_path / "here"
    here.mkdir()
    assert run("extract", str(SAMPLE["notice.png"]), "--report", tmp_path=tmp_path, cwd=here).returncode == 0
    assert [p.name for p in here.iterdir()] == ["notice.png.4416d514c7c7.report.html"]


@pytest.mark.slow
def test_progress_has_units_and_a_bar_on_a_terminal(tmp_path: Path) -> None:
    import pty

    main, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    env["MEDIAFLEET_BLOB_ROOT"] = str(tmp_path / "blobs")
    # Scanned pages, each OCR'd for a second or more: the bar shows only for a job that takes more
    # than a moment (half a second), which a 1,500-page text layer did not always (CI, 2026-12-04).
    long_pdf = tmp_path / "long.pdf"
    long_pdf.write_bytes(scanned(text_pdf(4)))
    with subprocess.Popen([sys.executable, "-m", "mediafleet.cli", "extract", str(long_pdf)], stdout=subprocess.PIPE,
                          stderr=secondary, env=env) as proc:
        os.close(secondary)
        seen = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=300) == 0
    os.close(main)
    text = seen.decode()
    bars = re.findall(r"\rlong\.pdf \[([#.]{24})\] (\d+)/4 pages", text)
    assert bars, text[:500]
    assert all(int(done) <= 4 for _, done in bars)


@pytest.mark.slow
def test_report_writes_a_page_from_a_bundle_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run("extract", str(SAMPLE["memo.opus"]), "--out", str(out), tmp_path=tmp_path).returncode == 0
    (bundle_file,) = out.glob("*.bundle.json")
    page = tmp_path / "memo.html"
    proc = run("report", str(bundle_file), "-o", str(page), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"memo.opus: report written to {page}")
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<title>memo.opus: evidence</title>" in text
    # Default: beside the bundle file, named like it.
    assert run("report", str(bundle_file), tmp_path=tmp_path).returncode == 0
    assert (out / "memo.opus.82d9f46f34ff.report.html").is_file()
    # The JSON lines of extract --json, from standard input.
    lines = run("extract", str(SAMPLE["notice.png"]), "--json", tmp_path=tmp_path).stdout.encode()
    here = tmp_path / "here"
    here.mkdir()
    piped = subprocess.run([sys.executable, "-m", "mediafleet.cli", "report", "-"], input=lines, capture_output=True,
                           env={**os.environ, "MEDIAFLEET_BLOB_ROOT": str(tmp_path / "blobs")}, cwd=here, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert [p.name for p in here.iterdir()] == ["artifact.4416d514c7c7.report.html"]


@pytest.mark.slow
def test_report_mistakes(tmp_path: Path) -> None:
    not_bundle = tmp_path / "other.json"
    not_bundle.write_text('{"hello": 1}')
    assert_mistake(run("report", str(not_bundle), tmp_path=tmp_path), tmp_path,
                   "other.json: not an evidence bundle (give extract --out's .bundle.json")
    out = tmp_path / "out"
    assert run("extract", str(SAMPLE["memo.opus"]), "--out", str(out), tmp_path=tmp_path).returncode == 0
    (bundle_file,) = out.glob("*.bundle.json")
    assert_mistake(run("report", str(bundle_file), "--artifact", str(SAMPLE["notice.png"]), tmp_path=tmp_path),
                   tmp_path, "the file given with --artifact is not this bundle's artifact (its digest differs)")
    assert_mistake(run("report", str(tmp_path / "none.json"), tmp_path=tmp_path), tmp_path,
                   "none.json: no such file", code=1)


@pytest.mark.slow
def test_report_without_the_artifact_in_the_store(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run("extract", str(SAMPLE["memo.opus"]), "--out", str(out), tmp_path=tmp_path).returncode == 0
    (bundle_file,) = out.glob("*.bundle.json")
    gc = run("gc", "--max-age", "0", tmp_path=tmp_path)
    assert gc.returncode == 0 and gc.stdout.startswith("gc: deleted 1 of 1 blobs"), gc.stdout
    proc = run("report", str(bundle_file), tmp_path=tmp_path)
    assert proc.returncode == 0
    assert "memo.opus: the artifact is not in the blob store" in proc.stderr and "--artifact FILE" in proc.stderr
    again = run("report", str(bundle_file), "--artifact", str(SAMPLE["memo.opus"]), tmp_path=tmp_path)
    assert again.returncode == 0 and again.stderr == ""
    assert "data:audio/ogg;base64," in (out / "memo.opus.82d9f46f34ff.report.html").read_text()


def test_gc_max_age_takes_an_age(tmp_path: Path) -> None:
    assert_mistake(run("gc", "--max-age", "soon", tmp_path=tmp_path), tmp_path,
                   "argument --max-age: 'soon' is not an age like 3600, 90m, 12h or 7d")


MINE = ("extract", "worker", "status", "cancel", "gc", "report", "manifest", "schema")


@pytest.mark.parametrize("command", MINE)
def test_every_option_has_help(command: str) -> None:
    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = subcommands.choices[command]
    for action in parser._actions:
        assert action.help, f"{command} {action.option_strings or action.dest} has no help"
    assert subcommands.choices[command].format_help()


def _gui_opencv_active() -> bool:
    """True when the cv2 in use is opencv-python's build (the one that needs libGL)."""
    import importlib.util

    spec = importlib.util.find_spec("cv2")
    if spec is None or not spec.submodule_search_locations:
        return False
    libs = list(Path(next(iter(spec.submodule_search_locations))).glob("cv2*.so"))
    if not libs:
        return False
    ldd = subprocess.run(["ldd", str(libs[0])], capture_output=True, text=True)
    return "libGL.so" in ldd.stdout


def _libgl() -> Path | None:
    for folder in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if (Path(folder) / "libGL.so.1").exists():
            return Path(folder) / "libGL.so.1"
    return None


@pytest.mark.skipif(not _gui_opencv_active(), reason="the active cv2 is the headless build: nothing to refuse")
def test_without_libgl_the_first_command_names_the_fix(tmp_path: Path) -> None:
    """What a machine without libGL sees when opencv-python's cv2 won (libGL hidden by a bind mount
    of /dev/null in a private mount namespace)."""
    libgl = _libgl()
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if libgl is None or probe.returncode != 0:
        pytest.skip("cannot hide libGL here (needs root and unshare)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAFLEET_")}
    env["MEDIAFLEET_BLOB_ROOT"] = str(tmp_path / "blobs")
    script = (f"mount --bind /dev/null {libgl} && exec {sys.executable} -m mediafleet.cli extract "
              f"{SAMPLE['harbour-report.pdf']} {SAMPLE['notice.png']}")
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, env=env,
                          timeout=300)
    assert_mistake(proc, tmp_path, "OpenCV cannot load: the opencv-python build needs the system's libGL",
                   "pip install --no-deps --force-reinstall opencv-python-headless")
