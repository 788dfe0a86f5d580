"""The dispatcher's two orchestrators behind one interface, and admission ahead of both.

No broker is needed: the fleet's broker URL points at a port nothing listens on, so anything that
tried to reach it would fail; these tests show nothing does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mediafleet import Settings
from mediafleet import dispatch as dispatch_module
from mediafleet.contract import ErrorCode
from mediafleet.dispatch import Dispatcher
from mediafleet.orchestrators.protocol import Orchestrator
from mediafleet.orchestrators.celery_fleet import CeleryOrchestrator
from mediafleet.orchestrators.inprocess import InProcessOrchestrator
from mediafleet.workers.runtime.config import create_app
from tests.media import text_pdf

NOWHERE = "redis://127.0.0.1:1/0"
AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_no_broker_runs_in_process_and_a_broker_url_on_the_fleet(tmp_path: Path) -> None:
    here = Dispatcher(Settings(blob_root=tmp_path / "a"))
    fleet = Dispatcher(Settings(broker_url=NOWHERE, blob_root=tmp_path / "b"))
    assert isinstance(here.orchestrator, InProcessOrchestrator) and here.in_process
    assert isinstance(fleet.orchestrator, CeleryOrchestrator) and not fleet.in_process
    assert isinstance(here.orchestrator, Orchestrator) and isinstance(fleet.orchestrator, Orchestrator)
    assert fleet._app is None  # building a fleet dispatcher reaches nothing and builds no app yet
    with pytest.raises(ValueError, match="redis"):
        here.jobs()  # the fleet's own parts are not there in-process


def test_delegate_extract_keeps_one_dispatcher_and_one_app_per_settings(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(dispatch_module, "_DISPATCHERS", {})
    for _ in range(5):  # equal settings, built anew for each call
        job = dispatch_module.delegate_extract(b"", settings=Settings(broker_url=NOWHERE, blob_root=tmp_path))
        assert job.bundle().error.code == ErrorCode.EMPTY_INPUT
    (dispatcher,) = dispatch_module._DISPATCHERS.values()
    assert dispatcher._app is None  # refused at admission: no app was needed
    settings = Settings(broker_url=NOWHERE, blob_root=tmp_path)
    assert dispatcher.app is dispatcher.app is create_app(settings, dispatcher.manifest)
    dispatch_module.delegate_extract(b"", settings=Settings(broker_url=NOWHERE, blob_root=tmp_path / "other"))
    assert len(dispatch_module._DISPATCHERS) == 2  # other settings, another dispatcher


def _never_started(dispatcher: Dispatcher) -> list[Any]:
    started: list[Any] = []
    dispatcher.orchestrator.start = lambda *args, **kwargs: started.append(args)  # type: ignore[method-assign]
    return started


@pytest.mark.parametrize(
    ("data", "kwargs", "code"),
    [
        (b"", {}, ErrorCode.EMPTY_INPUT),
        (b"just some text, renamed to .pdf", {}, ErrorCode.UNSUPPORTED_MEDIA_TYPE),
        (text_pdf(1), {"media_type": "image/png"}, ErrorCode.MEDIA_TYPE_MISMATCH),
        (text_pdf(1), {"action": "transcode_everything"}, ErrorCode.CAPABILITY_NOT_DECLARED),
        (text_pdf(1), {"options": {"password": "hunter2"}}, ErrorCode.INVALID_REQUEST),
    ],
    ids=["empty", "not-recognised", "claimed-type-disagrees", "undeclared-action", "undeclared-option"],
)
def test_admission_refuses_alike_for_both_before_any_orchestration(tmp_path: Path, data: bytes, kwargs: dict,
                                                                   code: ErrorCode) -> None:
    here = Dispatcher(Settings(blob_root=tmp_path / "a"), clock=lambda: AT)
    fleet = Dispatcher(Settings(broker_url=NOWHERE, blob_root=tmp_path / "b"), clock=lambda: AT)
    started = [_never_started(here), _never_started(fleet)]
    bundles = [d.submit(data, **kwargs).bundle() for d in (here, fleet)]
    assert bundles[0].error.code == code
    assert bundles[0].model_dump() == bundles[1].model_dump()
    assert started == [[], []] and fleet._app is None and fleet.orchestrator._jobs is None  # nothing reached


def test_a_stored_blob_that_is_not_there_is_refused_alike(tmp_path: Path) -> None:
    missing = "sha256:" + "0" * 64
    here = Dispatcher(Settings(blob_root=tmp_path / "a"), clock=lambda: AT)
    fleet = Dispatcher(Settings(broker_url=NOWHERE, blob_root=tmp_path / "b"), clock=lambda: AT)
    bundles = [d.submit_stored(missing).bundle() for d in (here, fleet)]
    assert bundles[0].error.code == ErrorCode.BLOB_NOT_FOUND
    assert bundles[0].model_dump() == bundles[1].model_dump()
    assert fleet._app is None and fleet.orchestrator._jobs is None


def test_a_broker_that_cannot_be_reached_is_one_public_error_at_the_dispatcher(tmp_path: Path) -> None:
    """Errors are translated once, at the dispatcher: whatever Redis or kombu raise for a broker
    that is not there comes out of every public call as FleetUnreachable (retryable
    engine_unavailable, a message with no address in it), never as a library's exception."""
    from mediafleet.contract import FleetUnreachable

    fleet = Dispatcher(Settings(broker_url=NOWHERE, blob_root=tmp_path / "b"))
    calls = [lambda: fleet.submit(text_pdf(1)), lambda: fleet.submit_stored(fleet.store.put_bytes(text_pdf(2))),
             lambda: fleet.job("mf-" + "0" * 32), lambda: fleet.cancel("mf-" + "0" * 32), fleet.status]
    for call in calls:
        with pytest.raises(FleetUnreachable) as raised:
            call()
        public = raised.value.public()
        assert public.code == ErrorCode.ENGINE_UNAVAILABLE and public.retryable
        assert "127.0.0.1" not in public.message and ":1" not in public.message


def test_a_broker_too_full_to_write_is_the_same_public_error_saying_so() -> None:
    """Redis at its memory limit (``noeviction``) refuses writes: a pause of the fleet, retryable,
    not a library's exception and not an answer about the job."""
    from redis.exceptions import OutOfMemoryError

    from mediafleet.contract import FleetUnreachable
    from mediafleet.fleet.redis_client import translated

    with pytest.raises(FleetUnreachable) as raised, translated():
        raise OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
    public = raised.value.public()
    assert public.code == ErrorCode.ENGINE_UNAVAILABLE and public.retryable and "full" in public.message
