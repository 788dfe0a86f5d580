"""A video's speech as its own fleet job: fanned out, run on the audio queue, joined for the caller.

Real redis-server, real worker processes (one serving only the video queue, one only the audio
queue), the real dispatcher; the video is ``tests/data/speech.mp4`` (espeak-ng speech over moving
test patterns, see tests/data/README.md).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mediafleet.contract.errors import ErrorCode, PublicError
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest, JobState, Outcome, PartOf
from mediafleet.contract.manifest import Modality, default_manifest
from mediafleet.contract.video import VideoOptions, VideoResult
from mediafleet import Dispatcher, Settings
from mediafleet.fleet.store import JobStore
from tests.helpers import wait_for, without_run
from tests.clips import write_clip
from mediafleet.workers import parts
from mediafleet.workers.video.extract import extract_keyframes

VIDEO = Path(__file__).parent / "data" / "speech.mp4"
VIDEO_QUEUE = "--queues=mf.extract_keyframes.cpu"
AUDIO_QUEUE = "--queues=mf.transcribe_segments.cpu"


def fleet(fleet_env: dict[str, str]) -> Dispatcher:
    return Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"],
                               blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"])))


def join(video: Outcome, speech: Outcome | None, manifest) -> Outcome:  # type: ignore[no-untyped-def]
    """The video job's outcome from its own task's and its speech part's."""
    request = ExtractRequest(job_id=video.job_id, action=video.action, artifact=video.artifact)
    return parts.join(request, {"video": video, "speech": speech}, manifest.capability(video.action), manifest)


def speech_part(request: ExtractRequest, capability, manifest) -> ExtractRequest | None:  # type: ignore[no-untyped-def]
    """The speech part the manifest plans for a video job (None: none)."""
    return parts.plan(request, capability, manifest)[1].get("speech")


def spoken(bundle) -> str:  # type: ignore[no-untyped-def]
    return " ".join(n.properties["text"] for n in bundle.nodes
                    if n.node_type == "Evidence" and n.properties["locus_kind"] == "audio_range").lower()


# --- through the fleet -------------------------------------------------------------------------


@pytest.mark.integration
def test_speech_runs_as_its_own_job_on_the_audio_queue_and_joins_the_callers_job(
    fleet_env, start_worker, tmp_path: Path
) -> None:
    start_worker("--concurrency=1", VIDEO_QUEUE, "--hostname=video@%h")
    start_worker("--concurrency=1", AUDIO_QUEUE, "--hostname=audio@%h")
    dispatcher = fleet(fleet_env)
    job = dispatcher.submit(VIDEO)
    remote = job.bundle(timeout=300)
    assert remote.status == "ok", remote.error
    here = Dispatcher(Settings(blob_root=tmp_path / "local")).submit(VIDEO).bundle()
    assert without_run(remote) == without_run(here)  # one job for the caller, the same evidence
    assert "finance team before friday" in spoken(remote)

    jobs = dispatcher.jobs()
    record = jobs.get(job.id)
    assert record.state == JobState.DONE and record.completions == 1
    assert record.hostname.startswith("video@")
    assert record.part("video") is None and record.part("speech") is None  # joined, not kept twice
    speech = jobs.get(record.parts.get("speech"))
    assert speech.state == JobState.DONE and speech.completions == 1 and speech.hostname.startswith("audio@")
    assert speech.request.part_of == PartOf(job_id=job.id, action="extract_keyframes")
    assert speech.summary()["parent"] == job.id
    result = record.outcome.result
    assert isinstance(result, VideoResult) and result.speech.job_id == record.parts.get("speech")
    assert result.speech.transcript == speech.outcome.result

    again = dispatcher.submit(VIDEO)  # an idempotent resubmit: nothing runs again
    assert again.id == job.id and without_run(again.bundle(timeout=60)) == without_run(remote)
    assert jobs.get(job.id).completions == 1 and jobs.get(record.parts.get("speech")).completions == 1


@pytest.mark.integration
def test_a_held_speech_part_waits_for_an_audio_worker_and_cancelling_the_job_reaches_it(
    fleet_env, start_worker
) -> None:
    start_worker("--concurrency=1", VIDEO_QUEUE)
    dispatcher = fleet(fleet_env)
    jobs = dispatcher.jobs()

    job = dispatcher.submit(VIDEO)
    speech_id = jobs.get(job.id).parts.get("speech")
    held = jobs.get(speech_id)
    assert held.state == JobState.HELD and "transcribe_segments" in held.held_reason
    wait_for(lambda: jobs.get(job.id).part("video") is not None, what="the video part")
    record = jobs.get(job.id)
    assert record.state == JobState.STARTED and record.summary()["parts_pending"] == 1  # not done without speech

    other = dispatcher.submit(VIDEO, options={"detector": "content"})
    wait_for(lambda: jobs.get(other.id).part("video") is not None, what="the second video part")
    assert dispatcher.cancel(other.id) == JobState.CANCELLED
    cancelled = other.bundle(timeout=30)
    assert cancelled.status == "failed" and cancelled.error.code == ErrorCode.CANCELLED
    assert jobs.get(jobs.get(other.id).parts.get("speech")).state == JobState.CANCELLED

    start_worker("--concurrency=1", AUDIO_QUEUE)  # releases the first job's held speech part
    bundle = job.bundle(timeout=300)
    assert bundle.status == "ok", bundle.error
    assert "finance team before friday" in spoken(bundle)
    assert jobs.get(speech_id).state == JobState.DONE and jobs.get(job.id).completions == 1
    assert jobs.get(jobs.get(other.id).parts.get("speech")).completions == 0  # the cancelled part never ran


@pytest.mark.integration
def test_a_speech_part_killed_by_its_hard_time_limit_fails_only_the_speech(
    fleet_env, start_worker, tmp_path: Path
) -> None:
    """Its worker writes no outcome (the process is replaced): the waiting caller records the loss
    as the speech part's failure and joins; the shots and keyframes stand."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"capabilities": {"extract_keyframes": {}, '
                        '"transcribe_segments": {"time_limits": {"soft_s": 1, "hard_s": 3}}}}')
    env = {"MEDIAFLEET_MANIFEST_FILE": str(manifest), "MF_FAULTY_AUDIO": "hang"}
    start_worker("--concurrency=1", VIDEO_QUEUE, env={"MEDIAFLEET_MANIFEST_FILE": str(manifest)})
    start_worker("--concurrency=1", AUDIO_QUEUE, module="tests.faulty_worker", env=env)
    dispatcher = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"],
                                     blob_root=Path(fleet_env["MEDIAFLEET_BLOB_ROOT"]), manifest_file=manifest))
    job = dispatcher.submit(VIDEO)
    bundle = job.bundle(timeout=180)
    assert bundle.status == "ok", bundle.error
    kinds = [n.properties["locus_kind"] for n in bundle.nodes if n.node_type == "Evidence"]
    assert "audio_range" not in kinds and kinds.count("video_time_range") >= 1
    record = dispatcher.jobs().get(job.id)
    speech = record.outcome.result.speech
    assert speech.status == "failed" and speech.error.code == ErrorCode.TIMEOUT
    assert dispatcher.jobs().get(record.parts.get("speech")).state == JobState.FAILED
    assert record.completions == 1


@pytest.mark.integration
def test_options_that_do_not_fit_together_are_refused_before_anything_is_queued(fleet_env, tmp_path: Path) -> None:
    bad = {"detector": "adaptive", "content_threshold": 30}
    for dispatcher in (fleet(fleet_env), Dispatcher(Settings(blob_root=tmp_path / "local"))):
        bundle = dispatcher.submit(VIDEO, options=bad).bundle(timeout=30)
        assert bundle.status == "failed" and bundle.error.code == ErrorCode.INVALID_REQUEST
        assert "content_threshold applies to the content detector only" in bundle.error.message
        assert "30" not in bundle.error.message  # the rule, not the values sent
    assert fleet(fleet_env).status()["queues"]["mf.extract_keyframes.cpu"] == 0
    assert fleet(fleet_env).jobs().held() == []


@pytest.mark.integration
def test_only_a_video_whose_header_shows_an_audio_track_gets_a_speech_part(fleet_env, tmp_path: Path) -> None:
    dispatcher = fleet(fleet_env)  # no workers: every job is held, and its record shows its parts
    silent = write_clip(tmp_path / "silent.mp4", [(0, 20), (1, 20)]).path
    assert dispatcher.jobs().get(dispatcher.submit(silent).id).parts.get("speech") is None
    assert dispatcher.jobs().get(dispatcher.submit(silent.read_bytes(), options={"speech": True}).id).parts.get("speech") is None
    digest = dispatcher.store.put_bytes(VIDEO.read_bytes())
    for job in (dispatcher.submit(VIDEO), dispatcher.submit(VIDEO.read_bytes()), dispatcher.submit_stored(digest)):
        assert dispatcher.jobs().get(job.id).parts.get("speech") is not None
    assert dispatcher.submit(VIDEO, options={"speech": False}).record().parts.get("speech") is None


# --- the join, and who joins -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def video_part() -> Outcome:
    request = ExtractRequest(
        job_id="mf-" + "1" * 32, action="extract_keyframes",
        artifact=ArtifactRef(digest="sha256:" + "a" * 64, media_type="video/mp4", bytes=VIDEO.stat().st_size,
                             modality=Modality.VIDEO),
    )
    result = extract_keyframes(VIDEO, VideoOptions(), default_manifest().capability("extract_keyframes").limits)
    assert result.speech.status == "pending"
    now = datetime.now(UTC)
    return Outcome(job_id=request.job_id, action=request.action, artifact=request.artifact, status="ok",
                   result=result, started_at=now, ended_at=now + timedelta(seconds=1),
                   checks={"digest_recomputed": True, "locus_kinds_declared": True, "loci_valid": True})


def speech_outcome(video: Outcome, error: PublicError) -> Outcome:
    return Outcome(job_id="mf-" + "2" * 32, action="transcribe_segments", artifact=video.artifact, status="failed",
                   error=error, started_at=video.started_at, ended_at=video.ended_at + timedelta(seconds=5))


def test_a_failed_speech_part_marks_the_speech_and_the_shots_stand(video_part: Outcome) -> None:
    manifest = default_manifest()
    lost = speech_outcome(video_part, PublicError(code=ErrorCode.WORKER_LOST, message="the worker failed"))
    joined = join(video_part, lost, manifest)
    assert joined.status == "ok" and joined.job_id == video_part.job_id
    assert joined.result.speech.status == "failed" and joined.result.speech.error.code == ErrorCode.WORKER_LOST
    assert joined.result.speech.job_id == lost.job_id
    assert joined.result.shots == video_part.result.shots
    assert joined.ended_at == lost.ended_at  # the job ran until its last part ended

    missing = speech_outcome(video_part, PublicError(code=ErrorCode.ENGINE_UNAVAILABLE, message="no engine"))
    assert join(video_part, missing, manifest).result.speech.status == "unavailable"

    broken = video_part.model_copy(update={"status": "failed", "result": None,
                                           "error": PublicError(code=ErrorCode.CORRUPT_INPUT, message="corrupt")})
    assert join(broken, lost, manifest) == broken  # a failed video part is the job's failure


def test_the_speech_part_is_declared_by_the_manifest_in_force(video_part: Outcome) -> None:
    request = ExtractRequest(job_id=video_part.job_id, action="extract_keyframes", artifact=video_part.artifact)
    manifest = default_manifest()
    part = speech_part(request, manifest.capability("extract_keyframes"), manifest)
    assert part is not None and part.action == "transcribe_segments" and part.options == {}
    assert part.part_of == PartOf(job_id=request.job_id, action="extract_keyframes")
    assert part.job_id == speech_part(request, manifest.capability("extract_keyframes"), manifest).job_id
    off = request.model_copy(update={"options": {"speech": False}})
    assert speech_part(off, manifest.capability("extract_keyframes"), manifest) is None
    narrowed = manifest.narrow({"capabilities": {"extract_keyframes": {"produces": ["VideoShot", "VideoFrameRange"]}}})
    assert speech_part(request, narrowed.capability("extract_keyframes"), narrowed) is None


@pytest.mark.integration
def test_each_part_reports_once_and_exactly_one_reporter_joins(redis_server) -> None:
    import redis

    jobs = JobStore(redis.Redis.from_url(redis_server.url), ttl_s=60)
    artifact = ArtifactRef(digest="sha256:" + "b" * 64, media_type="video/mp4", bytes=10, modality=Modality.VIDEO)
    now = datetime.now(UTC)

    def job(n: int) -> str:
        request = ExtractRequest(job_id=f"mf-{n:032x}", action="extract_keyframes", artifact=artifact)
        assert jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=60,
                          parts={"speech": f"mf-{n + 100:032x}"}) is not None
        return request.job_id

    def outcome(job_id: str, ok: bool = True) -> Outcome:
        error = None if ok else PublicError(code=ErrorCode.CORRUPT_INPUT, message="corrupt")
        return Outcome(job_id=job_id, action="extract_keyframes", artifact=artifact, status="ok" if ok else "failed",
                       error=error, started_at=now, ended_at=now)

    first = job(1)
    assert jobs.report_part(first, "video", outcome(first)) == 1
    assert jobs.report_part(first, "video", outcome(first)) == -1  # a redelivered part counts once
    assert jobs.report_part(first, "speech", outcome(first)) == 0  # the last reporter joins
    assert jobs.report_part(first, "speech", outcome(first)) == -1
    jobs.finish(outcome(first))
    assert jobs.report_part(first, "video", outcome(first)) == -1  # finished: nothing to do

    second = job(2)
    assert jobs.report_part(second, "speech", outcome(second)) == 1
    assert jobs.report_part(second, "video", outcome(second, ok=False), decides=True) == 0

    third = job(3)
    assert jobs.report_part(third, "video", outcome(third, ok=False), decides=True) == 0  # no waiting for speech
    assert jobs.report_part(third, "speech", outcome(third)) == -1
