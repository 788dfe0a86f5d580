"""mediafleet as a drop-in for the real callers (Knuckles-Team's agent-utilities) and their engine.

The callers' adapters are mimicked here from their public code (``agent_utilities/media/``), not
imported: one MCP tool call per artifact with ``{"action", "params_json"}``, params ``digest`` (what
their engine's ``blob.store`` returned), ``media_type`` (their fixed per-adapter defaults) and
``artifact_b64``; the result decoded text-first as their transport does; ``available`` missing
means true, and ``available: false`` with ``error`` is their failure channel. The digests come from
a real ``epistemic-graph-server`` (PyPI 2.27.7).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mediafleet.contract.errors import IntegrityError

from mediafleet.mcp import caller_digest
from mediafleet.settings import Settings
from tests.conftest import ROOT
from tests.engine import engine_blob_store
from tests.mcp_client import Caller, mcp_server, server_env
from tests.media import text_pdf

SAMPLES = ROOT / "src" / "mediafleet" / "samples"
DATA = ROOT / "tests" / "data"

pytestmark = pytest.mark.integration


# -- the callers, as their code reads -------------------------------------------------------------

def decode(data: dict[str, Any]) -> dict[str, Any]:
    """The callers' delegate: a result whose ``available`` is false is a failure with ``error``."""
    assert isinstance(data, dict)
    return data


def params_of(data: bytes, digest: str, media_type: str) -> dict[str, Any]:
    """The callers' params: their engine digest, their media type, the bytes in base64."""
    return {"digest": digest, "media_type": media_type, "artifact_b64": base64.b64encode(data).decode("ascii")}


def pdf_pages(raw: dict[str, Any]) -> list[tuple[int, float, float, str, int]]:
    """The callers' PDF write-back: pages with page >= 1, width, height, text, boxes."""
    out = []
    for page in raw.get("pages") or []:
        page_no = int(page.get("page") or 0)
        assert page_no > 0
        out.append((page_no, float(page["width"]), float(page["height"]), str(page.get("text") or ""),
                    len(page.get("boxes") or [])))
    return out


def image_regions(raw: dict[str, Any]) -> list[tuple[float, float, float, float]]:
    return [(float(r["x"]), float(r["y"]), float(r["width"]), float(r["height"])) for r in raw.get("regions") or []]


def audio_segments(raw: dict[str, Any]) -> list[tuple[int, int, str]]:
    segments = []
    for seg in raw.get("segments") or []:
        start, end = int(seg["start_ms"]), int(seg["end_ms"])
        assert end > start >= 0
        segments.append((start, end, str(seg.get("text") or "")))
    return segments


def video_shots(raw: dict[str, Any]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    shots = [(int(s["start_ms"]), int(s["end_ms"])) for s in raw.get("shots") or []]
    keyframes = [(int(k["start_frame"]), int(k.get("end_frame") or k["start_frame"])) for k in raw.get("keyframes") or []]
    assert all(start >= 1 for start, _ in keyframes)  # the callers reject start_frame <= 0
    return shots, keyframes


def bundle_claims(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the artifact's recorded claims, the claim node's properties) of a response's bundle."""
    bundle = data["bundle"]
    claim = next(n for n in bundle["nodes"] if n["node_type"] == "Claim")
    return bundle["artifact"]["claimed"], claim["properties"]


# -- the engine's digest --------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 4096, 1 << 20, 3 * (1 << 20) + 5])
def test_the_engine_digest_is_recomputed_exactly(engine_socket: str, size: int) -> None:
    data = os.urandom(size)
    assert caller_digest.engine_blob_digest(data, caller_digest.ANONYMOUS_LOCAL) == engine_blob_store(engine_socket, data)


def test_digest_rules(engine_socket: str) -> None:
    data = (SAMPLES / "notice.png").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    engine = engine_blob_store(engine_socket, data)
    assert engine != sha
    check = caller_digest.check
    assert check("sha256:" + sha, data, sha).digest_check == "sha256_of_bytes"
    assert check(sha.upper(), data, sha).digest_check == "sha256_of_bytes"
    kept = check(engine, data, sha)
    assert (kept.digest_form, kept.digest_check, kept.digest) == ("engine_blob", "not_compared", engine)
    owners = [caller_digest.parse_owner("anonymous-local")]
    assert check(engine, data, sha, owners).digest_check == "engine_blob_manifest"
    with pytest.raises(IntegrityError):  # configured owners, and none of them uploaded these bytes
        check(engine, data, sha, [caller_digest.owner_scope("tenant-a", "service:ingest")])
    with pytest.raises(IntegrityError):  # sha256: must be the bytes' SHA-256
        check("sha256:" + engine, data, sha)
    for malformed in ("md5:abc", engine[:63], engine + "0", "blob:" + engine, 42, None):
        with pytest.raises(Exception) as refused:
            check(malformed, data, sha)
        assert getattr(refused.value, "code", None) == "invalid_request"


def test_owner_entries() -> None:
    assert caller_digest.parse_owner("anonymous-local") == caller_digest.owner_scope("local", "anonymous")
    scope = caller_digest.owner_scope("tenant:acme", "service:ingest")
    assert caller_digest.parse_owner("tenant:acme|service:ingest") == scope
    assert caller_digest.parse_owner(scope) == scope
    for bad in ("", "carrier-owner:xyz", "no-separator", "|principal", "tenant|"):
        with pytest.raises(ValueError):
            caller_digest.parse_owner(bad)


# -- the four adapters, called as the callers call them ------------------------------------------

@pytest.fixture(scope="module")
def callers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("callers")
    with mcp_server(server_env(root / "blobs"), log=root / "server.log") as caller:
        yield caller


@pytest.fixture(scope="module")
def verifying(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A server whose operator configured the anonymous local engine's owner scope."""
    root = tmp_path_factory.mktemp("callers-verifying")
    env = server_env(root / "blobs", MEDIAFLEET_ENGINE_OWNERS='["anonymous-local"]')
    with mcp_server(env, log=root / "server.log") as caller:
        yield caller


def test_pdf_adapter(callers: Caller, engine_socket: str) -> None:
    data = (SAMPLES / "harbour-report.pdf").read_bytes()
    raw = decode(callers.call("pdf_action", params_of(data, engine_blob_store(engine_socket, data),
                                                      "application/pdf"))[0])
    assert raw.get("available", True), raw
    pages = pdf_pages(raw)
    assert [p[0] for p in pages] == [1, 2] and all(p[1] > 0 and p[2] > 0 and p[3] and p[4] for p in pages)
    claimed, claim = bundle_claims(raw)
    assert claimed["digest_check"] == "not_compared" and claim["not_compared"] == ["caller_digest"]
    assert "caller_digest_matches" not in claim["checks"] and claim["is_verified"] is True


def test_image_adapter_sends_image_jpeg_for_a_png(callers: Caller, engine_socket: str) -> None:
    data = (SAMPLES / "notice.png").read_bytes()
    raw = decode(callers.call("image_decode", params_of(data, engine_blob_store(engine_socket, data), "image/jpeg"))[0])
    assert raw.get("available", True), raw
    assert isinstance(raw["phash"], str) and image_regions(raw)
    claimed, _ = bundle_claims(raw)
    assert (claimed["media_type"], claimed["media_type_agrees"]) == ("image/jpeg", False)
    assert raw["bundle"]["artifact"]["media_type"] == "image/png"  # ran as what the bytes are
    activity = next(n for n in raw["bundle"]["nodes"] if n["node_type"] == "ProvenanceActivity")
    assert activity["properties"]["claimedMediaType"] == "image/jpeg"
    assert activity["properties"]["mediaTypeAgrees"] is False
    entity = next(e for e in raw["bundle"]["prov"]["@graph"] if "mf:digest" in e)
    assert entity["mf:claimedMediaType"] == "image/jpeg" and entity["mf:mediaType"] == "image/png"


def test_audio_adapter_default_audio_wav_for_opus(callers: Caller, engine_socket: str) -> None:
    data = (SAMPLES / "memo.opus").read_bytes()
    raw = decode(callers.call("transcribe_media", params_of(data, engine_blob_store(engine_socket, data),
                                                            "audio/wav"))[0])
    assert raw.get("available", True), raw
    segments = audio_segments(raw)
    assert segments and any(text.strip() for _, _, text in segments)
    assert bundle_claims(raw)[0]["media_type_agrees"] is False


def test_video_adapter(callers: Caller, engine_socket: str) -> None:
    data = (SAMPLES / "scenes.mp4").read_bytes()
    raw = decode(callers.call("video_keyframes", params_of(data, engine_blob_store(engine_socket, data),
                                                           "video/mp4"))[0])
    assert raw.get("available", True), raw
    shots, keyframes = video_shots(raw)
    assert shots and keyframes and shots[0][0] == 0


def test_a_configured_owner_verifies_the_engine_digest(verifying: Caller, engine_socket: str) -> None:
    data = (SAMPLES / "notice.png").read_bytes()
    digest = engine_blob_store(engine_socket, data)
    raw = decode(verifying.call("image_decode", params_of(data, digest, "image/png"))[0])
    claimed, claim = bundle_claims(raw)
    assert (claimed["digest"], claimed["digest_check"]) == (digest, "engine_blob_manifest")
    assert claim["checks"]["caller_digest_matches"] is True and "not_compared" not in claim
    # The same bytes with a digest the configured owner did not produce: refused, in their channel.
    other = engine_blob_store(engine_socket, data + b"\0")
    refused = decode(verifying.call("image_decode", params_of(data, other, "image/png"))[0])
    assert refused["available"] is False and refused["error"].startswith("digest_mismatch: ")


@pytest.mark.parametrize(("claimed", "data_of"), [
    ("image/jpeg", lambda: (SAMPLES / "harbour-report.pdf").read_bytes()),  # across modalities
    ("application/x-unknown", lambda: (SAMPLES / "notice.png").read_bytes()),  # a type nobody knows
])
def test_a_claimed_type_of_another_modality_is_refused(callers: Caller, claimed: str, data_of: Any) -> None:
    data = data_of()
    tool = "image_decode"
    raw = decode(callers.call(tool, params_of(data, hashlib.sha256(data).hexdigest(), claimed))[0])
    assert raw["available"] is False and raw["error_code"] == "media_type_mismatch", raw
    assert raw["error"].startswith("media_type_mismatch: ")


def test_failures_reach_the_callers_with_code_and_message(callers: Caller) -> None:
    pdf = text_pdf(1)
    for params, code in (
        ({**params_of(pdf, "sha256:" + "0" * 64, "application/pdf")}, "digest_mismatch"),
        ({**params_of(b"%PDF-1.7 broken", hashlib.sha256(b"%PDF-1.7 broken").hexdigest(), "application/pdf")},
         "corrupt_input"),
    ):
        raw = decode(callers.call("pdf_action", params)[0])  # no exception: the callers would lose it
        assert raw["available"] is False and raw["error_code"] == code
        assert raw["error"] == f"{code}: {raw['message']}" and isinstance(raw["retryable"], bool)
        assert "pages" not in raw  # never an empty extraction


def test_the_response_is_sent_once_with_the_callers_fields_first(callers: Caller) -> None:
    pdf = text_pdf(3)
    result = callers.portal.call(callers.session.call_tool, "pdf_action", {
        "action": "ocr_pdf", "params_json": json.dumps(params_of(pdf, hashlib.sha256(pdf).hexdigest(),
                                                                 "application/pdf"))})
    assert result.structured_content is None and len(result.content) == 1
    text = result.content[0].text
    assert list(json.loads(text))[:2] == ["available", "pages"] and list(json.loads(text))[-1] == "bundle"
    assert text.count('"evidence_locus"') == sum(1 for n in json.loads(text)["bundle"]["nodes"]
                                                 if n["node_type"] == "Evidence")


# -- long work and the callers' 60 s timeout ------------------------------------------------------

def started_at(raw: dict[str, Any]) -> str:
    activity = next(n for n in raw["bundle"]["nodes"] if n["node_type"] == "ProvenanceActivity")
    return activity["properties"]["startedAtTime"]


def test_a_job_outlives_the_call_and_a_retry_gets_it(tmp_path: Path) -> None:
    """stdio, as the callers run it: a process per call, killed when the call ends. The first call
    gives up (``--wait 0.2``), the job goes on in its own process, and the next call's server (a new
    process) gets the same run's bundle; a third call gets it again, from the same run."""
    data = (SAMPLES / "memo.opus").read_bytes()
    params = params_of(data, hashlib.sha256(data).hexdigest(), "audio/ogg")
    env = server_env(tmp_path / "blobs")
    with mcp_server(env, "--wait", "0.2", log=tmp_path / "first.log") as caller:
        first = decode(caller.call("transcribe_media", params)[0])
    assert first["available"] is False and first["error_code"] == "timeout" and first["retryable"] is True
    assert "still running" in first["message"]
    answers = []
    for n in range(2):
        with mcp_server(env, "--wait", "120", log=tmp_path / f"retry{n}.log") as caller:
            answers.append(decode(caller.call("transcribe_media", params)[0]))
    assert all(a.get("available", True) for a in answers), answers
    assert started_at(answers[0]) == started_at(answers[1])  # one run, picked up twice
    assert audio_segments(answers[0]) == audio_segments(answers[1])
    (job,) = [p for p in (tmp_path / "jobs").iterdir() if p.is_dir()]
    assert sorted(p.name for p in job.iterdir()) == ["bundle.json", "lock", "request.json", "runner.log"]


def test_a_killed_runner_is_started_again_and_nothing_is_lost(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from mediafleet.blobs.local import open_store
    from mediafleet.mcp.localjobs import LocalJobs

    store = open_store(Settings(blob_root=tmp_path / "blobs"))
    digest, _, _ = store.put_stream(io.BytesIO(text_pdf(2)))
    # The detached runner reads the settings from the environment, as serve-mcp's children do.
    monkeypatch.setenv("MEDIAFLEET_BLOB_ROOT", str(tmp_path / "blobs"))
    jobs = LocalJobs(tmp_path / "jobs", detached=True, ttl_s=3600)
    folder = jobs.folder("mf-" + "a" * 32)
    folder.mkdir()
    # A runner that died holding nothing: its marker is stale, no bundle was written.
    (folder / "starting").touch()
    stale = time.time() - 60
    os.utime(folder / "starting", (stale, stale))
    bundle = jobs.run(folder.name, {"digest": digest, "action": "ocr_pdf", "options": {}}, timeout=120)
    assert bundle.status == "ok" and bundle.artifact.digest == digest


@pytest.mark.parametrize(("runner", "code", "retryable"), [
    ("import sys; sys.stderr.write('broken install'); sys.exit(3)", "internal_error", False),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "worker_lost", True),
])
def test_a_runner_that_dies_is_reported_once_and_the_next_call_runs_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        runner: str, code: str, retryable: bool) -> None:
    """A detached runner that crashes or is killed is the failure it is, at once: not "still
    running" until the call's wait runs out. It is told to one call and kept by none, so the next
    call starts a runner again (the real one here) and gets the bundle."""
    from mediafleet.mcp import localjobs
    from mediafleet.blobs.local import open_store
    from mediafleet.mcp.localjobs import LocalJobs, RunnerDied

    store = open_store(Settings(blob_root=tmp_path / "blobs"))
    digest, _, _ = store.put_stream(io.BytesIO(text_pdf(1)))
    monkeypatch.setenv("MEDIAFLEET_BLOB_ROOT", str(tmp_path / "blobs"))
    jobs = LocalJobs(tmp_path / "jobs", detached=True, ttl_s=3600)
    request = {"digest": digest, "action": "ocr_pdf", "options": {}}
    real = localjobs.python
    monkeypatch.setattr(localjobs, "python", lambda *_: real("-c", runner))
    began = time.monotonic()
    with pytest.raises(RunnerDied) as died:
        jobs.run("mf-" + "b" * 32, request, timeout=120)
    assert time.monotonic() - began < 60  # told as it happened, well before the wait ran out
    public = died.value.public()
    assert (public.code, public.retryable) == (code, retryable)
    assert "/" not in public.message and "Traceback" not in public.message  # no paths, no stack
    if code == "internal_error":
        assert "broken install" in caplog.text  # the runner's own words reach the server's log only
    monkeypatch.setattr(localjobs, "python", real)
    bundle = jobs.run("mf-" + "b" * 32, request, timeout=120)
    assert bundle.status == "ok" and bundle.artifact.digest == digest
    assert not (jobs.folder("mf-" + "b" * 32) / "died.json").exists()


def test_the_callers_tools_answer_from_a_folder_that_holds_a_partial_mediafleet(tmp_path: Path) -> None:
    """The callers start ``mediafleet serve-mcp`` wherever they are; a folder holding a ``mediafleet``
    directory (the clone's root used to) must not shadow the installed package in the job runner
    the server starts (``-P``)."""
    clone = tmp_path / "clone"
    (clone / "mediafleet").mkdir(parents=True)
    (clone / "mediafleet" / "__init__.py").write_text("raise ImportError('a partial mediafleet folder')\n")
    pdf = text_pdf(2)
    env = server_env(tmp_path / "blobs")
    with mcp_server(env, "--wait", "120", log=tmp_path / "server.log", cwd=clone,
                    executable=Path(sys.executable).with_name("mediafleet")) as caller:
        answer = decode(caller.call("pdf_action", params_of(pdf, hashlib.sha256(pdf).hexdigest(),
                                                            "application/pdf"))[0])
    assert answer.get("available", True), answer
    assert [p[0] for p in pdf_pages(answer)] == [1, 2]


# -- same ids, same evidence ----------------------------------------------------------------------

def _ids_under(threads: int, path: Path, tmp: Path) -> dict[str, Any]:
    """Extract ``path`` in a fresh process with ``MEDIAFLEET_THREADS``: its job id, locus ids, evidence."""
    code = (
        "import json, sys; from mediafleet.dispatch import Dispatcher; from mediafleet.settings import Settings\n"
        "b = Dispatcher(Settings.load()).submit(sys.argv[1]).bundle()\n"
        "ev = [n.properties for n in b.nodes if n.node_type == 'Evidence']\n"
        "print(json.dumps({'job': b.job_id, 'loci': [e['evidence_locus']['id'] for e in ev],"
        " 'evidence': [[e['evidence_locus']['address'], e.get('text')] for e in ev]}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEDIAFLEET_", "OMP_"))}
    env |= {"MEDIAFLEET_THREADS": str(threads), "MEDIAFLEET_BLOB_ROOT": str(tmp / f"blobs{threads}")}
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                         cwd=ROOT, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_thread_settings_change_ids_exactly_where_they_can_change_evidence(tmp_path: Path) -> None:
    pdf = tmp_path / "text.pdf"
    pdf.write_bytes(text_pdf(2))
    one, two = _ids_under(1, pdf, tmp_path), _ids_under(2, pdf, tmp_path)
    # A text layer does not depend on threads: same evidence, same locus ids (the request differs).
    assert one["evidence"] == two["evidence"] and one["loci"] == two["loci"]
    speech = DATA / "speech.flac"
    one, two = _ids_under(1, speech, tmp_path), _ids_under(2, speech, tmp_path)
    # Whisper's numbers depend on threads: the job and every locus id name them.
    assert one["job"] != two["job"] and not set(one["loci"]) & set(two["loci"])


# -- under a catalog server's name ----------------------------------------------------------------

def test_under_a_catalog_name_the_other_tools_are_forwarded(tmp_path: Path) -> None:
    """``data-science-mcp`` pointed at mediafleet: image_decode and video_keyframes are ours, its
    ``deep_train_predict`` (and any other action of a shared tool) still reaches the real server."""
    upstream = f"stdio:{sys.executable} {ROOT / 'tests' / 'upstream_server.py'}"
    env = server_env(tmp_path / "blobs")
    with mcp_server(env, "--tools", "image_decode,pdf_action", "--upstream", upstream,
                    log=tmp_path / "server.log") as caller:
        names = set(caller.tools())
        assert {"deep_train_predict", "pdf_action", "image_decode"} <= names
        assert "transcribe_media" not in names and "video_keyframes" not in names
        result = caller.portal.call(caller.session.call_tool, "deep_train_predict", {"values": [1, 2, 3.5]})
        assert json.loads(result.content[0].text)["prediction"] == 6.5
        merged = caller.portal.call(caller.session.call_tool, "pdf_action", {
            "action": "merge_pdfs", "params_json": json.dumps({"files": ["a.pdf", "b.pdf"]})})
        assert json.loads(merged.content[0].text) == {"count": 2, "merged": "a.pdf+b.pdf", "served_by": "upstream"}
        pdf = text_pdf(1)
        ours, failed = caller.call("pdf_action", params_of(pdf, hashlib.sha256(pdf).hexdigest(), "application/pdf"))
        assert not failed and pdf_pages(ours)[0][0] == 1 and "bundle" in ours  # ocr_pdf stays ours
        data = (SAMPLES / "notice.png").read_bytes()
        image, failed = caller.call("image_decode", params_of(data, hashlib.sha256(data).hexdigest(), "image/jpeg"))
        assert not failed and image_regions(image)


def test_an_unreachable_upstream_answers_in_the_callers_channel(tmp_path: Path) -> None:
    env = server_env(tmp_path / "blobs")
    with mcp_server(env, "--upstream", f"stdio:{sys.executable} -c 'raise SystemExit(3)'",
                    log=tmp_path / "server.log") as caller:
        assert set(TOOL_NAMES) <= set(caller.tools())  # ours are still listed
        result = caller.portal.call(caller.session.call_tool, "deep_train_predict", {"values": [1]})
        answer = json.loads(result.content[0].text)
        assert not result.is_error and answer["available"] is False
        assert answer["error_code"] == "upstream_unavailable" and answer["retryable"] is True


TOOL_NAMES = ("pdf_action", "image_decode", "transcribe_media", "video_keyframes")


def test_over_http_a_job_runs_in_a_thread_and_a_retry_attaches(tmp_path: Path) -> None:
    """The long-lived HTTP server's way: the job runs in a thread of the server, past the call."""
    from mediafleet.dispatch import Dispatcher
    from mediafleet.mcp.server import SidecarTools

    tools = SidecarTools(Dispatcher(Settings(blob_root=tmp_path / "blobs")), wait_s=0.05, detached=False)
    data = (SAMPLES / "memo.opus").read_bytes()
    arguments = {"action": "transcribe_segments", "params_json": json.dumps(
        params_of(data, hashlib.sha256(data).hexdigest(), "audio/ogg"))}
    first, failed = tools.call("transcribe_media", arguments)
    assert failed and first["error_code"] == "timeout" and first["retryable"] is True
    tools.wait_s = 120
    second, failed = tools.call("transcribe_media", arguments)
    third, failed_again = tools.call("transcribe_media", arguments)
    assert not failed and not failed_again and audio_segments(second)
    assert started_at(second) == started_at(third)
    assert len([p for p in (tmp_path / "jobs").iterdir() if p.is_dir()]) == 1
