"""With signing on, evidence is trusted only when a worker holding the key signed it.

Failure 5: a ``done`` record written straight into Redis for a computable job id came back ``ok``
with verified claims; no worker ran it. Anyone with write access to Redis could plant evidence.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from mediafleet.contract.common import sha256_digest
from mediafleet.contract.jobs import ArtifactRef, ExtractRequest
from mediafleet import Dispatcher, Settings
from mediafleet.blobs.local import LocalBlobStore
from tests.chaos.test_faults import _cli
from tests.media import text_pdf
from mediafleet.workers.runner import run_request

pytestmark = pytest.mark.integration


def test_a_record_planted_in_redis_is_never_returned_as_evidence(redis_server, start_worker, tmp_path: Path) -> None:
    from tests.certs import signing_env

    signing = signing_env(tmp_path)
    url = f"redis://127.0.0.1:{redis_server.port}/13"
    client = redis.Redis.from_url(url)
    client.flushdb()
    blobs = tmp_path / "blobs"
    base = {"MEDIAFLEET_BROKER_URL": url, "MEDIAFLEET_BLOB_ROOT": str(blobs)}
    start_worker("--concurrency=1", env={**base, **signing})

    pdf = tmp_path / "doc.pdf"
    pdf.write_bytes(text_pdf(2))
    import hashlib

    digest = sha256_digest(hashlib.sha256(pdf.read_bytes()).hexdigest())
    unsigned = Dispatcher(Settings(broker_url=url, blob_root=blobs))  # only computes the id: no app, no signing
    capability = unsigned.manifest.for_media_type("application/pdf", None)
    job_id = unsigned.job_id_for(digest, capability, {})
    request = ExtractRequest(job_id=job_id, action=capability.action, threads=1,
                             artifact=ArtifactRef(digest=digest, media_type="application/pdf",
                                                  bytes=pdf.stat().st_size, modality=capability.modality))
    local = LocalBlobStore(tmp_path / "forger")
    local.put_bytes(pdf.read_bytes())
    planted = run_request(request, manifest=unsigned.manifest, store=local)  # made by no fleet worker
    assert planted.status == "ok"
    now = str(time.time())
    client.hset(f"mediafleet:job:{job_id}", mapping={
        "token": "f" * 32, "state": "done", "action": request.action, "request": request.model_dump_json(),
        "attempts": "1", "completions": "1", "device": "cpu", "priority": "4", "held_reason": "", "keep_s": "600",
        "submitted_at": now, "updated_at": now, "sent": "1", "outcome": planted.model_dump_json(), "error_code": "",
        "retryable": "0"})

    signed = _cli(["extract", str(pdf), "--json", "--timeout", "60"], {**base, **signing})
    assert signed.returncode == 0, signed.stderr
    bundle = json.loads(signed.stdout)
    activity = next(n for n in bundle["nodes"] if n["node_type"] == "ProvenanceActivity")
    assert activity["properties"]["startedAtTime"] != planted.started_at.isoformat().replace("+00:00", "Z")
    fields = {k.decode(): v.decode() for k, v in client.hgetall(f"mediafleet:job:{job_id}").items()}
    assert fields["token"] != "f" * 32 and fields["state"] == "done"  # a worker ran it under a new claim
