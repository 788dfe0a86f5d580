"""The fleet core's own rules, without processes: one app and one dispatcher per settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery.signals import worker_process_init, worker_ready, worker_shutdown
from mediafleet.contract.jobs import JobState
from mediafleet.contract.manifest import DeviceClass
from mediafleet.workers.runtime.config import create_app

from mediafleet import LocalBlobStore, Settings
from mediafleet import dispatch as dispatch_module
from mediafleet.fleet.presence import Announcer
from mediafleet.fleet.keys import finished_channel
from mediafleet.fleet.store import JobStore
from tests.test_middleware import pdf_request


def test_one_celery_app_per_settings_however_many_calls(tmp_path: Path) -> None:
    """Failure 10: every fleet ``delegate_extract`` built a new Celery app with three strong signal
    receivers that were never disconnected, so a long-lived process kept every app, store and pool."""
    signals = (worker_process_init, worker_ready, worker_shutdown)
    before = [len(s.receivers) for s in signals]
    settings = Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path)
    apps = {id(create_app(Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path))) for _ in range(20)}
    assert len(apps) == 1
    assert [len(s.receivers) for s in signals] <= [n + 1 for n in before]
    other = create_app(Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path, redis_password="other"))
    assert other is not create_app(settings)  # another password reaches the fleet another way


def test_each_app_has_its_own_task(tmp_path: Path) -> None:
    """A process with two fleet apps (two settings) finalizes both: each has its own task, not the
    first app's closure under the same name (as a shared task would be, with a warning)."""
    from mediafleet.workers.runtime.names import EXTRACT_TASK

    first = create_app(Settings(broker_url="redis://127.0.0.1:1/1", blob_root=tmp_path / "a"))
    second = create_app(Settings(broker_url="redis://127.0.0.1:1/2", blob_root=tmp_path / "b"))
    assert first.tasks[EXTRACT_TASK].run is not second.tasks[EXTRACT_TASK].run
    assert first.tasks[EXTRACT_TASK].app is first and second.tasks[EXTRACT_TASK].app is second


def test_delegate_extract_keeps_one_dispatcher_per_settings(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []
    monkeypatch.setattr(dispatch_module.Dispatcher, "submit", lambda self, artifact, **kw: seen.append(id(self)))
    monkeypatch.setattr(dispatch_module, "_DISPATCHERS", {})
    for _ in range(5):
        dispatch_module.delegate_extract(b"%PDF-", settings=Settings(blob_root=tmp_path))
    assert len(set(seen)) == 1


def test_task_events_are_sent_only_when_asked_for(tmp_path: Path) -> None:
    """Task events cost publishes per job: off by default, on with ``task_events`` (what
    ``mediafleet worker --events`` sets) for Flower."""
    quiet = create_app(Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path))
    assert not quiet.conf.task_send_sent_event and not quiet.conf.worker_send_task_events
    loud = create_app(Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path, task_events=True))
    assert loud.conf.task_send_sent_event and loud.conf.worker_send_task_events


def test_a_message_is_made_ahead_only_where_making_it_sends_nothing_else(tmp_path: Path) -> None:
    """The claim pushes a message made ahead only where making it sends nothing else: with task-sent
    events on (one event per message made) or a publish signal with receivers (one call per
    message made) the message is sent after the claim instead, as before."""
    from celery.signals import before_task_publish
    from mediafleet.workers.runtime.message import extract_message

    from tests.test_middleware import pdf_request

    request = pdf_request(LocalBlobStore(tmp_path / "blobs"))
    loud = create_app(Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path, task_events=True))
    capability = Settings().manifest().capability("ocr_pdf")
    assert extract_message(loud, request, capability, "token", 4) is None
    quiet = create_app(Settings(broker_url="redis://127.0.0.1:1/0", blob_root=tmp_path))

    def receiver(**_: object) -> None:
        raise AssertionError("no message is made")

    before_task_publish.connect(receiver)
    try:
        assert extract_message(quiet, request, capability, "token", 4) is None
    finally:
        before_task_publish.disconnect(receiver)


def test_the_cli_worker_flag_turns_task_events_on(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mediafleet.workers.runtime import boot

    from mediafleet import cli

    seen: list[bool] = []
    monkeypatch.setattr(boot, "boot_worker", lambda settings, options, manifest: seen.append(settings.task_events))
    monkeypatch.setenv("MEDIAFLEET_BLOB_ROOT", str(tmp_path))
    for flags in ([], ["--events"]):
        assert cli.main(["worker", "--broker", "redis://127.0.0.1:1/0", *flags]) == 0
    assert seen == [False, True]


@pytest.mark.integration
def test_sending_a_task_opens_no_result_subscription(redis_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Waiters here have their own subscription (:class:`Watch`): sending a job's message does not
    also subscribe this process to its task's result channel."""
    from mediafleet.workers.runtime.backend import FleetRedisBackend
    from mediafleet.workers.runtime.message import send_extract

    settings = Settings(broker_url=f"redis://127.0.0.1:{redis_server.port}/15", blob_root=tmp_path)
    app = create_app(settings)
    assert isinstance(app.backend, FleetRedisBackend)
    manifest = settings.manifest()
    capability = manifest.capability("ocr_pdf")
    request = pdf_request(LocalBlobStore(tmp_path / "blobs"))
    send_extract(app, request, capability, "token", 4)
    client = app.backend.client
    try:
        assert client.pubsub_numsub(f"celery-task-meta-{request.job_id}") == [(f"celery-task-meta-{request.job_id}".encode(), 0)]
        assert client.llen(capability.queue(request.device) + "\x06\x165") == 1  # the message was sent
    finally:
        client.flushdb()


@pytest.mark.integration
def test_a_task_result_is_stored_only_where_a_waiter_may_need_it(redis_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A plain job whose delivery wrote its outcome into the record and woke its waiters
    (``in_record``) leaves no Celery result: every waiter reads the record. Any other task's summary
    (a part's, a stale delivery's that wrote nothing) is stored, as the waiter's lost-worker and
    dead-joiner checks read it."""
    from mediafleet.workers.runtime.names import IN_RECORD, PUBLISHED

    app = create_app(Settings(broker_url=f"redis://127.0.0.1:{redis_server.port}/15", blob_root=tmp_path))
    client = app.backend.client
    try:
        app.backend.mark_as_done("mf-recorded", {"job_id": "mf-recorded", "status": "ok", IN_RECORD: True})
        app.backend.mark_as_done("mf-part", {"job_id": "mf-part", "status": "ok", IN_RECORD: False})
        assert client.get("celery-task-meta-mf-recorded") is None
        assert app.AsyncResult("mf-part").state == "SUCCESS"
        # A task that published progress had it stored as its result: removed, not left saying PROGRESS.
        app.backend.store_result("mf-long", {"done": 1, "total": 3}, "PROGRESS")
        app.backend.mark_as_done("mf-long", {"job_id": "mf-long", "status": "ok", IN_RECORD: True, PUBLISHED: True})
        assert client.get("celery-task-meta-mf-long") is None
    finally:
        client.flushdb()


@pytest.mark.integration
def test_a_stale_delivery_stores_no_task_result_over_a_later_submission(redis_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A task's id is its job's. A delivery of an earlier submission (cut off from Redis, frozen, or
    failed by a time limit Celery enforced late) must not store its task result over a later
    submission's: that submission's waiters would read it as theirs. Found with Redis away for 40 s
    under running jobs: the parent process stored the old delivery's hard-limit failure after the
    job was submitted again, and the resubmission failed ``worker_lost`` without having run. Only
    a delivery whose token is the record's stores; a SUCCESS is never replaced; a task without a
    token stores as Celery does."""
    from celery.app.task import Context

    app = create_app(Settings(broker_url=f"redis://127.0.0.1:{redis_server.port}/15", blob_root=tmp_path))
    client = app.backend.client
    jobs = JobStore(client, ttl_s=600)
    request = pdf_request(LocalBlobStore(tmp_path / "blobs"))
    key = f"celery-task-meta-{request.job_id}"
    try:
        first = jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=60)
        assert jobs.cancel(request.job_id) == JobState.CANCELLED
        second = jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=60)
        assert first and second and first != second

        app.backend.mark_as_failure(request.job_id, TimeoutError("hard time limit"),
                                    request=Context(id=request.job_id, kwargs={"token": first}))
        assert client.get(key) is None and app.AsyncResult(request.job_id).state == "PENDING"

        app.backend.store_result(request.job_id, {"done": 1, "total": 2}, "PROGRESS",
                                 request=Context(id=request.job_id, kwargs={"token": second}))
        assert app.AsyncResult(request.job_id).state == "PROGRESS"
        app.backend.mark_as_done(request.job_id, {"job_id": request.job_id, "status": "ok"},
                                 request=Context(id=request.job_id, kwargs={"token": second}))
        app.backend.mark_as_failure(request.job_id, TimeoutError("late"),
                                    request=Context(id=request.job_id, kwargs={"token": second}))
        assert app.AsyncResult(request.job_id).state == "SUCCESS"

        app.backend.mark_as_failure("mf-no-token", TimeoutError("x"), request=Context(id="mf-no-token", kwargs={}))
        assert app.AsyncResult("mf-no-token").state == "FAILURE"
    finally:
        client.flushdb()


def test_a_progress_point_celery_cannot_store_is_dropped_and_the_job_goes_on(tmp_path: Path) -> None:
    """Celery's ``update_state`` raises ``BackendStoreError`` once its retries of the write are spent
    (Redis away for ~10 s or more). Found with Redis away for 40 s under a running job: that
    progress point failed the job as ``internal_error``, which would have stuck had Redis come back
    before the outcome was written. The task shell raises it as Redis's own error, and progress
    reporting drops the point as it drops any with Redis away."""
    import redis
    from mediafleet.workers.runtime.backend import publish_progress
    from mediafleet.workers.runtime.middleware.delivery import Delivery
    from mediafleet.workers.runtime.middleware.progress import ProgressReporting
    from mediafleet.workers.runtime.names import EXTRACT_TASK

    from tests.servers import free_port

    port = free_port()
    app = create_app(Settings(broker_url=f"redis://127.0.0.1:{port}/3", blob_root=tmp_path))
    task = app.tasks[EXTRACT_TASK]
    # This test's own app (nothing listens on its port): Celery gives up at once, not after ~20 s.
    app.backend.max_retries = 1
    app.backend.retry_policy = {**app.backend.retry_policy, "max_retries": 0}
    away = JobStore(redis.Redis(port=port, socket_connect_timeout=0.2), ttl_s=60)
    delivery = Delivery(pdf_request(LocalBlobStore(tmp_path / "blobs")), away,
                        publish=lambda meta: publish_progress(task, meta))
    task.push_request(id="mf-away", kwargs={"token": "t"})
    try:
        assert ProgressReporting().on_progress(delivery, 1, 3) is False
    finally:
        task.pop_request()


def test_a_delivery_taken_while_redis_is_full_is_kept_or_the_log_says_it_cannot_be(  # type: ignore[no-untyped-def]
        redis_server, caplog) -> None:
    """Before a worker waits for room to record a delivery it has taken, it keeps it in kombu's
    unacknowledged record by a script Redis runs even when full (a worker killed while it waits then
    loses nothing: tests/chaos/test_redis.py). A Redis that refuses the script (before 7 it knows no
    script flags) is only waited out, and the log says what that risks."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    import redis
    from kombu.transport import redis as kombu_redis
    from mediafleet.workers.runtime.transport import _FleetQoS

    def qos_on(client):  # type: ignore[no-untyped-def]
        @contextmanager
        def conn_or_acquire(client_: object = None):  # type: ignore[no-untyped-def]
            yield client

        qos = _FleetQoS.__new__(_FleetQoS)
        qos.channel = SimpleNamespace(global_keyprefix="", unacked_key="mf-test-unacked",
                                      unacked_index_key="mf-test-unacked-index", conn_or_acquire=conn_or_acquire)
        return qos

    message = SimpleNamespace(delivery_info={"exchange": "mf.ocr_pdf.cpu", "routing_key": "mf.ocr_pdf.cpu"},
                              _raw={"headers": {"id": "mf-kept"}, "body": "e30="})
    client = redis.Redis(port=redis_server.port, db=15)
    client.delete("mf-test-unacked", "mf-test-unacked-index")
    try:
        qos_on(client)._keep(message, "tag-1")
        kept = kombu_redis.loads(client.hget("mf-test-unacked", "tag-1"))
        assert kept == [message._raw, "mf.ocr_pdf.cpu", "mf.ocr_pdf.cpu"]  # as kombu's own append keeps it
        assert client.zscore("mf-test-unacked-index", "tag-1") is not None

        class RedisSix:
            def eval(self, *args: object) -> None:
                raise redis.exceptions.ResponseError("Error compiling script (new function)")

        qos_on(RedisSix())._keep(message, "tag-2")
        assert "would not keep a delivery" in caplog.text
    finally:
        client.delete("mf-test-unacked", "mf-test-unacked-index")
        client.close()


def test_the_consumer_counts_a_fleet_delivery_in_the_step_that_records_it(  # type: ignore[no-untyped-def]
        redis_server, tmp_path: Path, monkeypatch) -> None:
    """A worker's consumer counts a fleet delivery as it takes the message, in the script that
    records it unacknowledged as kombu's QoS does (one round trip, not two, and none left for the
    pool process before the job runs), and hands the count on in the message's header, through
    kombu's own consumer code and a real Redis. The delivery kombu keeps has no such header, so a
    message that comes back is counted again; a header nobody set here is removed; a count is
    read by the pool process only where messages are not signed; a request this worker cannot
    read is left uncounted."""
    import base64
    import json

    import redis
    from celery.app.task import Context
    from mediafleet.workers.runtime import message as message_module
    from mediafleet.workers.runtime import transport as app_module
    from mediafleet.workers.runtime.names import TAKEN_HEADER

    url = f"redis://127.0.0.1:{redis_server.port}/15"
    client = redis.Redis.from_url(url)
    client.flushdb()
    settings = Settings(broker_url=url, blob_root=tmp_path)
    app = create_app(settings)
    capability = settings.manifest().capability("ocr_pdf")
    request = pdf_request(LocalBlobStore(tmp_path / "blobs"))
    jobs = JobStore(client, ttl_s=60)
    queue = capability.queue(DeviceClass.CPU)
    Announcer(client, "w@test", "cpu", [queue]).start()

    def message(candidate, token):  # type: ignore[no-untyped-def]
        return message_module.extract_message(app, candidate, capability, token, 4)

    monkeypatch.setattr(app_module, "_TAKING", app_module._Taking("w@test"))
    try:
        claim = jobs.claim_routed([(queue, request)], held_reason="x", priority=4, keep_s=60, message=message)
        assert claim.sent
        with app.connection_for_read() as conn:
            inbox = conn.SimpleQueue(queue, no_ack=False)
            got = inbox.get(timeout=10)
            record = jobs.get(request.job_id)
            assert record is not None and record.state == JobState.STARTED and record.attempts == 1
            assert record.hostname == "w@test"
            assert got.headers[TAKEN_HEADER] == [1, "queued", {}]
            kept, _, _ = json.loads(client.hget("unacked", got.delivery_tag))
            assert TAKEN_HEADER not in kept["headers"] and kept["headers"]["id"] == request.job_id
            assert client.zscore("unacked_index", got.delivery_tag) is not None

            got.requeue()  # back from kombu's record: counted again, as any new delivery
            again = inbox.get(timeout=10)
            assert again.headers[TAKEN_HEADER] == [2, "started", {}]
            again.ack()
            assert client.hlen("unacked") == 0

            # A consumer that does not count (signed messages) removes a header it did not set.
            monkeypatch.setattr(app_module, "_TAKING", None)
            forged = jobs.claim_routed([(queue, pdf_request(LocalBlobStore(tmp_path / "blobs"), pages=2))],
                                       held_reason="x", priority=4, keep_s=60, message=message)
            assert forged.sent
            key = queue + "\x06\x165"
            raw = json.loads(client.rpop(key))
            raw["headers"][TAKEN_HEADER] = [1, "queued", {}]
            client.lpush(key, json.dumps(raw))
            plain = inbox.get(timeout=10)
            assert TAKEN_HEADER not in plain.headers
            plain.ack()

            # A request this worker cannot read (a field of a later release's) is not counted: the
            # pool process fails it before it starts, and its waiter sees that no delivery did.
            monkeypatch.setattr(app_module, "_TAKING", app_module._Taking("w@test"))
            later = pdf_request(LocalBlobStore(tmp_path / "blobs"), pages=4)
            assert jobs.claim_routed([(queue, later)], held_reason="x", priority=4, keep_s=60, message=message).sent
            raw = json.loads(client.rpop(key))
            args, kwargs, embed = json.loads(base64.b64decode(raw["body"]))
            args[0]["a_field_of_a_later_release"] = 1
            raw["body"] = base64.b64encode(json.dumps([args, kwargs, embed]).encode()).decode()
            client.lpush(key, json.dumps(raw))
            unread = inbox.get(timeout=10)
            assert TAKEN_HEADER not in unread.headers
            record = jobs.get(later.job_id)
            assert record is not None and record.state == JobState.QUEUED and record.attempts == 0
            unread.ack()
            inbox.close()

        signed = Settings(broker_url=url, blob_root=tmp_path, signing_key_file=tmp_path / "key.pem",
                          signing_cert_file=tmp_path / "cert.pem", signing_cert_store=tmp_path)
        ctx = Context(**{TAKEN_HEADER: [1, "queued", {"speech": "mf-x"}]})
        assert app_module.taken(ctx, settings) == (1, JobState.QUEUED, {"speech": "mf-x"})
        assert app_module.taken(ctx, signed) is None
        for bad in ([1, "queued"], ["1", "queued", {}], [1, "no such state", {}], [1, "", {"a": 1}], "1"):
            assert app_module.taken(Context(**{TAKEN_HEADER: bad}), settings) is None
        assert app_module.taken(Context(), settings) is None
    finally:
        client.flushdb()
        client.close()


@pytest.mark.integration
def test_a_closed_watch_serves_the_next_waiter_and_a_discarded_one_does_not(jobs: JobStore) -> None:
    """A waiter's pub/sub connection goes back to the store when it is done (one connection for a
    dispatcher's sequential jobs, not a connect and handshake per job); only the channels the
    current waiter follows wake it."""
    first = jobs.watch()
    first.follow("mf-a", "mf-a")
    first.close()
    second = jobs.watch()
    assert second is first
    second.follow("mf-b", "mf-b")
    jobs.client.publish(finished_channel("mf-a"), "1")  # the earlier waiter's job: not a wake-up
    assert second.wait(0.3) is False
    jobs.announce_finished("mf-b")
    assert second.wait(5) is True
    second.discard()
    assert jobs.watch() is not second


@pytest.mark.integration
def test_a_claim_is_routed_to_the_first_device_class_with_a_live_worker(jobs: JobStore, tmp_path: Path) -> None:
    """The routed claim reads presence in the same step: held with the reason when no worker of an
    allowed class is live, else queued for the first allowed class that has one."""
    request = pdf_request(LocalBlobStore(tmp_path / "blobs"))
    gpu = request.model_copy(update={"device": DeviceClass.GPU})
    cpu = request.model_copy(update={"device": DeviceClass.CPU})
    candidates = [("mf.ocr_pdf.gpu", gpu), ("mf.ocr_pdf.cpu", cpu)]
    token, chosen, held, sent = jobs.claim_routed(candidates, held_reason="no live worker", priority=4, keep_s=60)
    record = jobs.get(request.job_id)
    assert token is not None and held and not sent and chosen.device == DeviceClass.GPU
    assert record.state == JobState.HELD and record.held_reason == "no live worker" and record.request.device == DeviceClass.GPU
    assert request.job_id in {r.job_id for r in jobs.held()}
    assert jobs.claim_routed(candidates, held_reason="x", priority=4, keep_s=60)[0] is None  # a live record: joined
    jobs.client.delete(jobs.key(request.job_id))
    Announcer(jobs.client, "cpu@test", "cpu", ["mf.ocr_pdf.cpu"]).start()
    token, chosen, held, sent = jobs.claim_routed(candidates, held_reason="no live worker", priority=4, keep_s=60)
    record = jobs.get(request.job_id)
    assert token is not None and not held and not sent and chosen.device == DeviceClass.CPU
    assert record.state == JobState.QUEUED and record.held_reason is None and record.request.device == DeviceClass.CPU
    assert record.summary()["device"] == "cpu"


@pytest.mark.integration
def test_the_claim_pushes_the_message_of_the_class_it_routes_to_in_the_same_step(redis_server, tmp_path: Path) -> None:
    """Claim, send and mark-sent are one round trip: each candidate's message is made ahead by
    Celery's own send_task (not sent), and the claim pushes the taken one onto the list kombu would
    have pushed it on and marks the record sent. A held job pushes nothing, nor does a joined one."""
    import json

    import redis
    from mediafleet.workers.runtime.message import extract_message, send_extract

    from mediafleet.fleet.keys import queue_lists

    url = f"redis://127.0.0.1:{redis_server.port}/15"
    client = redis.Redis.from_url(url)
    client.flushdb()
    settings = Settings(broker_url=url, blob_root=tmp_path)
    app = create_app(settings)
    manifest = settings.manifest()
    capability = manifest.capability("analyze_image")  # cpu first, then gpu
    request = pdf_request(LocalBlobStore(tmp_path / "blobs"))
    request = request.model_copy(update={"action": "analyze_image"})
    candidates = [(capability.queue(d), request.model_copy(update={"device": d})) for d in capability.devices]
    jobs = JobStore(client, ttl_s=60)
    made: list[tuple[str, str]] = []

    def message(candidate, token):  # type: ignore[no-untyped-def]
        made.append(extract_message(app, candidate, capability, token, 4))
        return made[-1]

    def pushed() -> dict[str, list[bytes]]:
        lists = [n for d in capability.devices for n in queue_lists(capability.queue(d))]
        return {n: client.lrange(n, 0, -1) for n in lists if client.llen(n)}

    try:
        held = jobs.claim_routed(candidates, held_reason="no live worker", priority=4, keep_s=60, message=message)
        assert held.token is not None and held.held and not held.sent and pushed() == {}
        assert client.hget(jobs.key(request.job_id), "sent") == b"0"
        client.delete(jobs.key(request.job_id))
        Announcer(client, "gpu@test", "gpu", [capability.queue(DeviceClass.GPU)]).start()
        made.clear()
        claim = jobs.claim_routed(candidates, held_reason="no live worker", priority=4, keep_s=60, message=message)
        assert claim.token is not None and claim.sent and not claim.held and claim.request.device == DeviceClass.GPU
        assert client.hget(jobs.key(request.job_id), "sent") == b"1"
        gpu_list = capability.queue(DeviceClass.GPU) + "\x06\x165"  # kombu's list for priority 4 (5 there)
        assert [key for key, _ in made] == [capability.queue(DeviceClass.CPU) + "\x06\x165", gpu_list]
        assert pushed() == {gpu_list: [made[1][1].encode()]}
        # What send_extract sends for the same job, but for the delivery tag kombu draws per message.
        send_extract(app, claim.request, capability, claim.token, 4)
        ours, sent = (json.loads(raw) for raw in client.lrange(gpu_list, 0, -1)[::-1])
        for message_ in (ours, sent):
            message_["properties"].pop("delivery_tag")
        assert ours == sent and ours["headers"]["id"] == request.job_id
        assert jobs.claim_routed(candidates, held_reason="x", priority=4, keep_s=60, message=message).token is None
        assert len(client.lrange(gpu_list, 0, -1)) == 2  # joined: nothing more pushed
    finally:
        client.flushdb()


@pytest.mark.integration
def test_later_messages_are_made_from_a_checked_form_as_send_task_makes_them(
    redis_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After two messages to one queue (same limits, priority, thread) that ``send_task`` made, and
    the first one's form remade the second byte for byte, later ones are made from the form: each
    is what ``send_task`` makes for the same job but for the delivery tag, a new tag each time.
    Inside a task (Celery names the running task as the parent) ``send_task`` always makes it."""
    import json
    from types import SimpleNamespace

    from celery import Celery
    from mediafleet.workers.runtime import message as message_module

    url = f"redis://127.0.0.1:{redis_server.port}/15"
    app = create_app(Settings(broker_url=url, blob_root=tmp_path))
    capability = Settings().manifest().capability("ocr_pdf")
    store = LocalBlobStore(tmp_path / "blobs")
    requests = [pdf_request(store, job_id=f"mf-{i:032x}") for i in range(5)]
    by_celery: list[tuple[str, str]] = []
    real = message_module._made_by_celery

    def counted(*args: object) -> tuple[str, str] | None:
        by_celery.append(made := real(*args))  # type: ignore[arg-type]
        return made

    def without_tag(made: tuple[str, str]) -> tuple[str, dict[str, object]]:
        message = json.loads(made[1])
        message["properties"].pop("delivery_tag")
        return made[0], message

    message_module._made_by_celery, saved = counted, real  # type: ignore[assignment]
    try:
        made = [message_module.extract_message(app, r, capability, f"token-{i}", 4) for i, r in enumerate(requests)]
    finally:
        message_module._made_by_celery = saved
    assert len(by_celery) == 2 and by_celery == made[:2]  # the first two by send_task, the rest from the form
    forms = [f for f in app.__dict__["mediafleet_message_forms"].values() if f is not None]
    assert len(forms) == 1 and forms[0].checked
    for i, (request, ours) in enumerate(zip(requests, made, strict=True)):
        assert ours is not None
        assert without_tag(ours) == without_tag(real(app, request, capability, f"token-{i}", 4))
        assert json.loads(ours[1])["headers"]["id"] == request.job_id
    assert len({json.loads(m[1])["properties"]["delivery_tag"] for m in made if m}) == len(made)
    other_priority = message_module.extract_message(app, requests[0], capability, "token-0", 7)
    assert other_priority is not None and other_priority[0] != made[0][0]  # its own list, its own form

    class Running:  # a task running in this worker: the message names it as the parent
        request = SimpleNamespace(id="mf-parent", root_id="mf-root", delivery_info={})

        def add_trail(self, result: object) -> object:
            return result

    monkeypatch.setattr(Celery, "current_worker_task", property(lambda self: Running()))
    inside = message_module.extract_message(app, requests[1], capability, "token-1", 4)
    assert inside is not None
    headers = json.loads(inside[1])["headers"]
    assert (headers["id"], headers["parent_id"], headers["root_id"]) == (requests[1].job_id, "mf-parent", "mf-root")


@pytest.mark.integration
def test_a_waiter_whose_watch_followed_before_the_claim_does_not_read_the_record_first(
    jobs: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submission's watch follows its job before the claim (no outcome of it can land unseen), so
    its waiter does not read the record the claim just wrote before it first waits: it takes its
    own submission's finished notice. Another submission's notice is not taken: the record is read."""
    import threading
    from datetime import UTC, datetime

    from mediafleet.contract.errors import ErrorCode, PublicError
    from mediafleet.contract.jobs import Outcome

    from mediafleet.orchestrators.fleet_job import FleetJob

    manifest = Settings(blob_root=tmp_path).manifest()
    capability = manifest.capability("ocr_pdf")
    request = pdf_request(LocalBlobStore(tmp_path / "blobs"))
    outcome = Outcome.failed(request, PublicError(code=ErrorCode.TIMEOUT, retryable=True, message="slow"),
                             datetime.now(UTC))
    reads: list[str] = []
    look = jobs.look
    monkeypatch.setattr(jobs, "look", lambda job_id, task_id=None: (reads.append(job_id), look(job_id, task_id))[1])

    def submitted(claimed_as: str | None) -> FleetJob:
        jobs.client.delete(jobs.key(request.job_id))
        watch = jobs.watch()
        watch.follow(request.job_id, request.job_id)
        token = jobs.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600)
        assert token is not None
        threading.Timer(0.2, lambda: jobs.finish(outcome, announce=True)).start()
        return FleetJob(None, jobs, capability, request, manifest, watch=watch, claimed=claimed_as or token)

    bundle = submitted(None).bundle(timeout=10)
    assert bundle.status == "failed" and bundle.error.code == ErrorCode.TIMEOUT and reads == []
    again = submitted("an-earlier-submission").bundle(timeout=10)
    assert again.model_dump() == bundle.model_dump() and reads == [request.job_id]


@pytest.mark.integration
def test_a_finished_notice_carries_the_outcome_checked_as_the_record_would_be(jobs: JobStore, tmp_path: Path) -> None:
    """A plain job's outcome write publishes what it wrote, so its woken waiter takes the outcome
    from the notice instead of reading the record again. What it takes is checked as the record's
    outcome is: a bare wake-up, a notice of another job's outcome, or, with signing on, one without
    a valid signature is not taken (the waiter reads the record instead)."""
    from datetime import UTC, datetime

    from mediafleet.contract.errors import ErrorCode, PublicError
    from mediafleet.contract.jobs import Outcome

    from mediafleet.fleet.signing import OutcomeSigner
    from tests.certs import signing_env

    env = signing_env(tmp_path)
    signer = OutcomeSigner(Path(env["MEDIAFLEET_SIGNING_KEY_FILE"]), Path(env["MEDIAFLEET_SIGNING_CERT_FILE"]),
                           Path(env["MEDIAFLEET_SIGNING_CERT_STORE"]))
    signed = JobStore(jobs.client, ttl_s=3600, signer=signer)
    request = pdf_request(LocalBlobStore(tmp_path / "blobs"))
    other = pdf_request(LocalBlobStore(tmp_path / "blobs"), pages=2)
    assert signed.claim(request, state=JobState.QUEUED, held_reason=None, priority=4, keep_s=3600) is not None
    outcome = Outcome.failed(request, PublicError(code=ErrorCode.TIMEOUT, retryable=True, message="slow"),
                             datetime.now(UTC))
    watch = signed.watch()
    watch.follow(request.job_id, request.job_id)
    assert signed.finish(outcome, announce=True)
    assert watch.wait(5) is True and watch.woken_by is not None
    channel, notice = watch.woken_by
    assert channel == finished_channel(request.job_id)
    token = signed.get(request.job_id).token
    record = signed.noticed(request.job_id, notice, request, token)
    assert record is not None and record.final and record.outcome == outcome
    assert record.state == JobState.FAILED and not record.forged
    assert signed.get(request.job_id).outcome == record.outcome  # what the record holds

    def as_notice(fields: dict[str, str], of: str | None = token) -> bytes:
        return b"".join(b"%d:%s" % (len(x.encode()), x.encode()) for x in (of, *(x for kv in fields.items() for x in kv)))

    fields = {k: v for k, v in record._f.items() if k != "request"}  # the notice's, with the request added
    assert as_notice(fields) == notice and fields["state"] == "failed" and "outcome_sig" in fields
    assert signed.noticed(request.job_id, b"1", request, token) is None  # a bare wake-up
    assert signed.noticed(request.job_id, notice[:-1], request, token) is None  # cut short
    assert signed.noticed(other.job_id, notice, other, token) is None  # another job's outcome
    # An earlier submission's notice (left unread on a reused connection) is not this one's outcome.
    assert signed.noticed(request.job_id, notice, request, "another-submission") is None
    assert signed.noticed(request.job_id, as_notice(fields, of="another-submission"), request, token) is None
    assert signed.noticed(request.job_id, as_notice({**fields, "outcome_sig": ""}), request, token) is None
    unsigned = {k: v for k, v in fields.items() if k != "outcome_sig"}
    assert signed.noticed(request.job_id, as_notice(unsigned), request, token) is None
    assert jobs.noticed(request.job_id, as_notice(unsigned), request, token) is not None  # signing off: taken
    assert signed.noticed(request.job_id, as_notice({**fields, "state": "started"}), request, token) is None
    assert signed.noticed(request.job_id, as_notice({**fields, "outcome": "{}"}), request, token) is None
    watch.discard()
