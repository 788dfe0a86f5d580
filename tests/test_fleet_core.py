"""The fleet core's own rules, without processes: one app and one dispatcher per settings."""

from __future__ import annotations

from pathlib import Path

from celery.signals import worker_process_init, worker_ready, worker_shutdown

from mediafleet import Settings
from mediafleet import dispatch as dispatch_module
from mediafleet.workers.app import create_app


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


def test_delegate_extract_keeps_one_dispatcher_per_settings(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []
    monkeypatch.setattr(dispatch_module.Dispatcher, "submit", lambda self, artifact, **kw: seen.append(id(self)))
    monkeypatch.setattr(dispatch_module, "_DISPATCHERS", {})
    for _ in range(5):
        dispatch_module.delegate_extract(b"%PDF-", settings=Settings(blob_root=tmp_path))
    assert len(set(seen)) == 1
