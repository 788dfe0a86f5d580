"""The host contract and the two operations, on a real index (SQLite and PostgreSQL).

Every fail-closed rule: revoked, disabled and expired leases, an exhausted budget, a changed
generation, the authorization callback refusing before nomination or before delivery, forged,
replayed and foreign credentials; packing under the budget; the encrypted receipt persisted
before anything is returned; reservations that survive a crash and are never reset or retried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag

from mediafleet.contract import EvidenceBundle
from mediafleet.discovery import (
    ANSWER_FORMAT,
    AuthorizationRequest,
    DiscoveryError,
    DiscoveryService,
    LeaseHost,
    NavigationBudget,
    ReceiptKey,
    Scope,
    create_key_file,
)
from mediafleet.discovery.credential_file import read_credential_file, write_credential_file
from mediafleet.discovery.index import EvidenceIndex
from mediafleet.discovery.receipt import SealedReceipt
from mediafleet.discovery.units import Unit, text_digest
from tests.conftest import ROOT
from tests.discovery_fixtures import index, postgres_server, sample_bundles  # noqa: F401

HARBOUR = Scope("harbour")
ANSWER_KEYS = ["format", "request_id", "generation", "status", "sufficiency", "channels", "evidence",
               "omitted_count", "operations_used"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Host:
    """A lease store, a receipt key and a service over the given index, with a recording callback."""

    def __init__(self, folder: Path, index: EvidenceIndex) -> None:
        self.folder = folder
        self.clock = Clock()
        self.state = folder / "host.db"
        self.key_path = folder / "receipt.key"
        create_key_file(self.key_path)
        self.key = ReceiptKey(self.key_path)
        self.host = LeaseHost(self.state, clock=self.clock)
        self.index = index
        self.asked: list[AuthorizationRequest] = []
        self.policy: Callable[[AuthorizationRequest], Any] = lambda request: True
        self.service = DiscoveryService(self.host, index, self.key, self._authorize)

    def _authorize(self, request: AuthorizationRequest) -> Any:
        self.asked.append(request)
        return self.policy(request)

    def lease(self, scope: Scope = HARBOUR, agent: str = "agent", *, operations: int = 10, evidence: int = 50,
              characters: int = 100_000, ttl_s: float = 600) -> tuple[str, str]:
        binding = self.host.bind(scope, agent)
        lease, credential = self.host.open_lease(binding, ttl_s=ttl_s, generation=self.index.scope_generation(scope),
                                                 budget=NavigationBudget(operations, evidence, characters))
        return lease.lease_id, credential


@pytest.fixture
def host(tmp_path: Path, index: EvidenceIndex, sample_bundles: dict[str, EvidenceBundle]) -> Host:
    for bundle in sample_bundles.values():
        index.add_bundle(HARBOUR, bundle)
    return Host(tmp_path, index)


def refused(code: str, call: Callable[[], Any]) -> DiscoveryError:
    with pytest.raises(DiscoveryError) as info:
        call()
    assert info.value.code.value == code, info.value.message
    return info.value


def units(n: int, text: str, derivation: str = "eg:derivation:" + "7" * 32) -> list[Unit]:
    digest = "sha256:" + "ef" * 32
    return [Unit(unit_id="eg:locus:" + uuid.uuid5(uuid.NAMESPACE_OID, f"{derivation}{i}").hex, text=f"{text} {i}",
                 digest=digest, action="transcribe_segments", derivation_ref=derivation,
                 source_range={"artifact": {"digest": digest, "media_type": "audio/wav", "modality": "audio"},
                               "locus_kind": "audio_range", "timeline": "audio_stream_ms",
                               "address": {"kind": "audio_range", "start_ms": 1000 * i, "end_ms": 1000 * i + 900},
                               "generation": {"derivation_ref": derivation}}) for i in range(n)]


# -- the answer -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_search_answers_the_exact_discovery_object(host: Host) -> None:
    lease_id, credential = host.lease()
    answer = host.service.search(credential, lease_id, "finance team")
    assert list(answer) == ANSWER_KEYS
    assert answer["format"] == ANSWER_FORMAT == "atmem-evidence-discovery-v1"
    assert answer["request_id"].startswith("host-request:discovery:")
    assert answer["generation"] == host.index.scope_generation(HARBOUR)
    assert (answer["status"], answer["sufficiency"], answer["channels"]) == ("investigative_evidence", "not_assessed",
                                                                             ["lexical"])
    assert answer["omitted_count"] == 0 and answer["operations_used"] == 1
    spoken = [e for e in answer["evidence"] if "finance team" in e["text"]]
    assert {e["source_range"]["modality"] for e in spoken} == {"audio", "video"}
    for e in spoken:
        assert e["text_digest"] == text_digest(e["text"])
        assert e["time_frame"]["end_ms"] > e["time_frame"]["start_ms"] >= 0
        assert e["time_frame"] == {**e["time_frame"], "start_ms": e["source_range"]["address"]["start_ms"],
                                   "end_ms": e["source_range"]["address"]["end_ms"]}
        assert e["assurance"]["method"] == "speech_recognition"
        assert e["source_range"]["artifact_digest"].startswith("sha256:")
        assert e["source_range"]["derivation_ref"].startswith("eg:derivation:")
        assert e["source_range"]["generation"] == 1
    second = host.service.search(credential, lease_id, "bollard")
    assert second["operations_used"] == 2 and second["request_id"] != answer["request_id"]


def test_a_pdf_line_carries_its_page_box(host: Host) -> None:
    lease_id, credential = host.lease()
    answer = host.service.search(credential, lease_id, "fender panel")
    boxes = [e for e in answer["evidence"] if "page_box" in e]
    assert boxes
    for e in boxes:
        box = e["page_box"]
        assert box["page"] >= 1 and box["width"] > 0 and box["height"] > 0
        assert box["coordinate_space"] == "pdf_points_top_left"
        assert 0 <= box["x"] and box["x"] + box["width"] <= 595 and box["y"] + box["height"] <= 842


def test_an_empty_result_is_an_answer_not_a_wider_search(host: Host) -> None:
    lease_id, credential = host.lease()
    answer = host.service.search(credential, lease_id, "zeppelin")
    assert answer["evidence"] == [] and answer["omitted_count"] == 0 and answer["operations_used"] == 1
    assert [a.stage for a in host.asked] == ["nominate", "deliver"]
    assert host.asked[1].unit_ids == ()


# -- the budget -----------------------------------------------------------------------------------------


def test_packing_stops_at_the_evidence_budget_and_counts_the_rest(host: Host) -> None:
    host.index.add_units(HARBOUR, units(6, "mooring line"))
    lease_id, credential = host.lease(evidence=4)
    first = host.service.search(credential, lease_id, "mooring")
    assert len(first["evidence"]) == 4 and first["omitted_count"] == 2
    refused("budget_exhausted", lambda: host.service.search(credential, lease_id, "mooring"))
    lease = host.host.lease(lease_id)
    assert lease is not None and (lease.operations_used, lease.evidence_used) == (1, 4)


def test_packing_stops_at_the_character_budget(host: Host) -> None:
    host.index.add_units(HARBOUR, units(5, "mooring line"))  # 14 characters each
    lease_id, credential = host.lease(characters=30)
    answer = host.service.search(credential, lease_id, "mooring")
    assert len(answer["evidence"]) == 2 and answer["omitted_count"] == 3
    assert sum(len(e["text"]) for e in answer["evidence"]) <= 30


def test_the_operation_budget_fails_closed(host: Host) -> None:
    lease_id, credential = host.lease(operations=2)
    host.service.search(credential, lease_id, "quay")
    host.service.search(credential, lease_id, "quay")
    refused("budget_exhausted", lambda: host.service.search(credential, lease_id, "quay"))
    lease = host.host.lease(lease_id)
    assert lease is not None and lease.operations_used == 2


# -- authority --------------------------------------------------------------------------------------------


def test_the_callback_is_asked_before_nomination_and_before_delivery(host: Host) -> None:
    lease_id, credential = host.lease()
    answer = host.service.search(credential, lease_id, "quay")
    nominate, deliver = host.asked
    assert (nominate.stage, deliver.stage) == ("nominate", "deliver")
    assert nominate.lease_id == deliver.lease_id == lease_id
    assert nominate.request_id == deliver.request_id == answer["request_id"]
    assert nominate.binding.scope == HARBOUR
    assert deliver.unit_ids == tuple(e["unit_id"] for e in answer["evidence"])


@pytest.mark.parametrize("stage", ["nominate", "deliver"])
def test_a_refusing_callback_fails_closed_and_the_operation_stays_counted(host: Host, stage: str) -> None:
    lease_id, credential = host.lease()
    host.policy = lambda request: request.stage != stage
    refused("not_authorized", lambda: host.service.search(credential, lease_id, "quay"))
    lease = host.host.lease(lease_id)
    assert lease is not None and (lease.operations_used, lease.evidence_used) == (1, 0)
    (operation,) = host.host.operations(lease_id)
    assert (operation["state"], operation["error_code"]) == ("failed", "not_authorized")
    assert host.host.receipt(operation["request_id"]) is None


def test_only_true_authorizes(host: Host) -> None:
    lease_id, credential = host.lease()
    host.policy = lambda request: "yes"
    refused("not_authorized", lambda: host.service.search(credential, lease_id, "quay"))


def test_revoked_disabled_and_expired_leases_fail_closed(host: Host) -> None:
    lease_id, credential = host.lease()
    host.host.revoke_lease(lease_id)
    refused("lease_revoked", lambda: host.service.search(credential, lease_id, "quay"))
    lease_id, credential = host.lease(ttl_s=60)
    host.clock.now += 60
    refused("lease_expired", lambda: host.service.search(credential, lease_id, "quay"))
    lease_id, credential = host.lease(agent="other-agent")
    binding = host.host.bind(HARBOUR, "other-agent")
    host.host.disable_binding(binding.binding_id)
    refused("binding_disabled", lambda: host.service.search(credential, lease_id, "quay"))
    refused("binding_disabled", lambda: host.lease(agent="other-agent"))


def test_a_lease_revoked_during_an_operation_delivers_nothing(host: Host) -> None:
    lease_id, credential = host.lease()

    def revoke_then_allow(request: AuthorizationRequest) -> bool:
        if request.stage == "deliver":
            host.host.revoke_lease(lease_id)
        return True

    host.policy = revoke_then_allow
    refused("lease_revoked", lambda: host.service.search(credential, lease_id, "quay"))
    (operation,) = host.host.operations(lease_id)
    assert operation["state"] == "failed" and host.host.receipt(operation["request_id"]) is None


def test_a_changed_generation_fails_closed(host: Host) -> None:
    lease_id, credential = host.lease()
    host.index.add_units(HARBOUR, units(2, "new evidence"))
    refused("generation_changed", lambda: host.service.search(credential, lease_id, "quay"))
    refused("generation_changed", lambda: host.service.inspect(credential, lease_id, units(1, "x")[0].unit_id))


def test_a_re_extraction_between_nomination_and_delivery_fails_closed(host: Host) -> None:
    host.index.add_units(HARBOUR, units(3, "capstan"))
    lease_id, credential = host.lease()
    original = host.index.search

    def nominate_then_reextract(scope: Scope, terms: list[str], limit: int) -> Any:
        found = original(scope, terms, limit)
        host.index.add_units(HARBOUR, units(3, "capstan", derivation="eg:derivation:" + "8" * 32))
        return found

    host.index.search = nominate_then_reextract  # type: ignore[method-assign]
    refused("generation_changed", lambda: host.service.search(credential, lease_id, "capstan"))


# -- credentials ------------------------------------------------------------------------------------------


def test_forged_replayed_and_foreign_credentials_are_refused(host: Host) -> None:
    lease_id, credential = host.lease()
    forged = credential[:-8] + ("0" * 8 if not credential.endswith("0" * 8) else "1" * 8)
    refused("unauthenticated", lambda: host.service.search(forged, lease_id, "quay"))
    refused("unauthenticated", lambda: host.service.search("Bearer nonsense", lease_id, "quay"))
    refused("unauthenticated", lambda: host.service.search("mfdc1." + "0" * 32 + "." + "0" * 64, lease_id, "quay"))
    # A new lease for the binding retires its earlier credential: replaying it is refused.
    new_lease, new_credential = host.lease()
    refused("credential_revoked", lambda: host.service.search(credential, new_lease, "quay"))
    assert host.service.search(new_credential, lease_id, "quay")["operations_used"] == 1
    other_lease, other_credential = host.lease(Scope("elsewhere"), agent="agent")
    refused("lease_of_another_binding", lambda: host.service.search(new_credential, other_lease, "quay"))
    refused("lease_of_another_binding", lambda: host.service.search(other_credential, lease_id, "quay"))
    refused("lease_not_found", lambda: host.service.search(new_credential, "mfl-" + "0" * 32, "quay"))


def test_errors_are_public(host: Host) -> None:
    lease_id, credential = host.lease()
    messages = []
    for call in (lambda: host.service.search(credential[:-1] + "x", lease_id, "quay"),
                 lambda: host.service.search(credential, "mfl-" + "1" * 32, "quay"),
                 lambda: host.service.inspect(credential, lease_id, "eg:locus:" + "0" * 32),
                 lambda: host.service.search(credential, lease_id, "x" * 5000)):
        with pytest.raises(DiscoveryError) as info:
            call()
        messages.append(json.dumps(info.value.public()))
    text = " ".join(messages)
    assert credential.split(".")[2] not in text and str(host.folder) not in text and "xxxxx" not in text


# -- inspect ------------------------------------------------------------------------------------------------


def test_inspect_delivers_one_unit_of_the_scope_by_id(host: Host, sample_bundles: dict[str, EvidenceBundle]) -> None:
    lease_id, credential = host.lease()
    found = host.service.search(credential, lease_id, "QUAY closed")["evidence"][0]
    answer = host.service.inspect(credential, lease_id, found["unit_id"])
    assert list(answer) == ANSWER_KEYS
    # A search's items add what only a search knows: the words matched and the channels that nominated.
    assert found.pop("matched_terms") == ["quay", "closed"] and found.pop("nominated_by") == ["lexical"]
    assert answer["evidence"] == [found] and answer["operations_used"] == 2
    assert [a.unit_ids for a in host.asked[2:]] == [(found["unit_id"],), (found["unit_id"],)]


def test_inspect_refuses_units_that_are_not_ours(host: Host) -> None:
    elsewhere = Scope("elsewhere")
    host.index.add_units(elsewhere, units(1, "secret"))
    foreign = units(1, "secret")[0].unit_id
    lease_id, credential = host.lease()
    for unit_id in (foreign, "eg:locus:" + "0" * 32, "eg:derivation:" + "0" * 32, "../../etc/passwd", "x"):
        refused("unit_not_found", lambda unit_id=unit_id: host.service.inspect(credential, lease_id, unit_id))


def test_a_superseded_unit_is_not_delivered(host: Host) -> None:
    old = units(1, "winch")
    host.index.add_units(HARBOUR, old)
    host.index.add_units(HARBOUR, units(1, "winch", derivation="eg:derivation:" + "9" * 32))
    lease_id, credential = host.lease()
    refused("unit_not_found", lambda: host.service.inspect(credential, lease_id, old[0].unit_id))


# -- receipts -----------------------------------------------------------------------------------------------


def test_the_receipt_is_encrypted_and_names_digests_not_text(host: Host) -> None:
    lease_id, credential = host.lease()
    answer = host.service.search(credential, lease_id, "finance team")
    sealed = host.host.receipt(answer["request_id"])
    assert sealed is not None and sealed.lease_id == lease_id
    receipt = host.key.open(sealed)
    assert receipt["format"] == "mediafleet.discovery-receipt/v1"
    assert (receipt["request_id"], receipt["lease_id"], receipt["generation"]) == (answer["request_id"], lease_id,
                                                                                   answer["generation"])
    assert receipt["query_sha256"] == text_digest("finance team")
    assert [p["unit_id"] for p in receipt["prepared"]] == [e["unit_id"] for e in answer["evidence"]]
    assert [p["text_digest"] for p in receipt["prepared"]] == [e["text_digest"] for e in answer["evidence"]]
    assert "finance" not in json.dumps(receipt)
    host.host.close()
    assert not any(b"finance" in path.read_bytes() for path in host.folder.glob("host.db*"))
    other = host.folder / "other.key"
    create_key_file(other)
    with pytest.raises(InvalidTag):
        ReceiptKey(other).open(sealed)
    with pytest.raises(InvalidTag):  # moved to another request
        host.key.open(SealedReceipt("host-request:discovery:999", sealed.lease_id, sealed.key_id, sealed.nonce,
                                    sealed.ciphertext))


def test_the_host_state_is_readable_by_the_host_user_only(host: Host) -> None:
    lease_id, credential = host.lease()
    host.service.search(credential, lease_id, "quay")
    files = sorted(host.folder.glob("host.db*"))
    assert len(files) >= 2 and all(f.stat().st_mode & 0o077 == 0 for f in files)


def test_a_receipt_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "k"
    create_key_file(key)
    key.chmod(0o640)
    with pytest.raises(PermissionError, match="mode 600"):
        ReceiptKey(key)
    link = tmp_path / "link"
    link.symlink_to(key)
    with pytest.raises(PermissionError, match="not a link"):
        ReceiptKey(link)
    with pytest.raises(FileExistsError):
        create_key_file(key)


# -- crashes ------------------------------------------------------------------------------------------------

_CRASH = """
import os, sys
from pathlib import Path
from mediafleet.discovery import DiscoveryService, LeaseHost, ReceiptKey, open_index
folder = Path(sys.argv[1])
def die(request):
    if request.stage == "deliver":
        os._exit(17)  # the process dies after nominating, before anything is prepared
    return True
service = DiscoveryService(LeaseHost(folder / "host.db"), open_index(sys.argv[2]), ReceiptKey(folder / "receipt.key"), die)
service.search(sys.argv[3], sys.argv[4], "quay")
"""


def test_a_reservation_survives_a_crash_and_is_never_reset_or_retried(host: Host, index: EvidenceIndex,
                                                                      request: pytest.FixtureRequest) -> None:
    host.clock.now = time.time()  # the child process reads the real clock
    lease_id, credential = host.lease(operations=3, ttl_s=3600)
    url = (f"sqlite:{host.folder / 'index.db'}" if request.node.callspec.params["index"] == "sqlite"
           else _pg_url(index))
    crashed = subprocess.run([sys.executable, "-c", _CRASH, str(host.folder), url, credential, lease_id],
                             cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert crashed.returncode == 17, crashed.stderr[-2000:]
    restarted = LeaseHost(host.state)
    lease = restarted.lease(lease_id)
    assert lease is not None and lease.operations_used == 1 and lease.evidence_used == 0
    assert [o["state"] for o in restarted.operations(lease_id)] == ["reserved"]
    assert restarted.recover() == 1
    (operation,) = restarted.operations(lease_id)
    assert operation["state"] == "uncertain" and restarted.receipt(operation["request_id"]) is None
    service = DiscoveryService(restarted, index, host.key, lambda request: True)
    answer = service.search(credential, lease_id, "quay")
    assert answer["operations_used"] == 2  # counted on from the crash, never reset
    assert [o["state"] for o in restarted.operations(lease_id)] == ["uncertain", "prepared"]
    assert restarted.recover() == 0


def _pg_url(index: EvidenceIndex) -> str:
    info = index._db.info  # type: ignore[attr-defined]
    return f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}"


# -- the credential file -------------------------------------------------------------------------------------


def test_the_credential_file_is_private_and_never_inside_a_repository(tmp_path: Path) -> None:
    path = tmp_path / "cred.json"
    write_credential_file(path, "mfl-" + "a" * 32, "mfdc1.x", "http://127.0.0.1:9/mcp")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert read_credential_file(path).endpoint == "http://127.0.0.1:9/mcp"
    with pytest.raises(FileExistsError):
        write_credential_file(path, "mfl-" + "a" * 32, "mfdc1.y")
    path.chmod(0o644)
    with pytest.raises(PermissionError, match="mode 600"):
        read_credential_file(path)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    with pytest.raises(PermissionError, match="repository"):
        write_credential_file(repo / "sub" / "cred.json", "mfl-" + "a" * 32, "mfdc1.x")
    inside = repo / "cred.json"
    inside.write_text(path.read_text())
    inside.chmod(0o600)
    with pytest.raises(PermissionError, match="repository"):
        read_credential_file(inside)
    for endpoint in ("http://10.0.0.1:9/mcp", "https://127.0.0.1:9/mcp", "http://example.com:9/mcp",
                     "http://127.0.0.1/mcp", "http://user:pw@127.0.0.1:9/mcp"):
        with pytest.raises(ValueError, match="endpoint"):
            write_credential_file(tmp_path / f"c{abs(hash(endpoint))}.json", "mfl-" + "a" * 32, "c", endpoint)
    assert os.getuid() == path.stat().st_uid
