"""Video through the fleet: a real redis-server, a real worker process, the real dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediafleet.contract.errors import ErrorCode
from mediafleet import Dispatcher, Settings
from mediafleet.blobs.local import LocalBlobStore
from tests.helpers import assert_engine_valid, without_run
from tests.clips import write_clip

pytestmark = pytest.mark.integration


def test_video_through_the_fleet_equals_in_process_and_the_worker_survives_bad_input(
    fleet_env, start_worker, tmp_path: Path
) -> None:
    start_worker("--concurrency=1")
    clip = write_clip(tmp_path / "clip.mp4", [(0, 30), (1, 25), (2, 30)], audio_s=3.4)
    good = clip.path.read_bytes()
    fleet = Dispatcher(Settings(broker_url=fleet_env["MEDIAFLEET_BROKER_URL"], blob_root=tmp_path / "blobs"))
    local = Dispatcher(Settings(blob_root=tmp_path / "local-blobs"))

    broken = fleet.submit(good[: len(good) // 2], action="extract_keyframes").bundle(timeout=120)
    assert broken.status == "failed" and broken.error is not None
    assert broken.error.code == ErrorCode.CORRUPT_INPUT

    remote = fleet.submit(good, action="extract_keyframes", options={"detector": "content"}).bundle(timeout=120)
    here = local.submit(good, action="extract_keyframes", options={"detector": "content"}).bundle()
    assert remote.status == "ok", remote.error
    assert without_run(remote) == without_run(here)
    assert assert_engine_valid(remote) == 3 + 3  # three shots, one keyframe each

    store = LocalBlobStore(tmp_path / "blobs")
    refs = [n.properties["image_blob_ref"] for n in remote.nodes if n.properties.get("keyframe")]
    assert refs and all(store.exists("sha256:" + r.removeprefix("blob:")) for r in refs)
