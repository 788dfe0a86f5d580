"""Engine thread caps: set on every path, and said when they come too late to count."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path

import pytest

from mediafleet.workers import engines
from mediafleet.workers.engines import THREAD_VARIABLES, cap_threads


def test_capping_sets_every_pool_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in THREAD_VARIABLES:
        monkeypatch.setenv(var, "7")
    cap_threads(3)
    assert all(__import__("os").environ[var] == "3" for var in THREAD_VARIABLES)


def test_a_cap_after_an_engine_library_loaded_with_other_settings_is_warned_of(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "ctranslate2", types.ModuleType("ctranslate2"))
    for var in THREAD_VARIABLES:
        monkeypatch.setenv(var, "2")
    with caplog.at_level(logging.WARNING, logger=engines.__name__):
        cap_threads(1)
    assert "ctranslate2" in caplog.text and "capped to 1" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=engines.__name__):
        cap_threads(1)  # loaded with the same setting: nothing to say
    assert caplog.text == ""


def test_onnxruntime_reads_no_thread_variable_so_loading_it_first_is_not_warned_of(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """onnxruntime's CPU build sizes its pools from each session's options, never from the
    environment: its libraries name none of the variables (an OpenMP build would, and would then
    belong in the warning again). PyMuPDF 2 imports it, so a host that read a PDF first is common."""
    import onnxruntime

    libraries = list((Path(onnxruntime.__file__).parent / "capi").glob("*.so*"))
    assert libraries
    for library in libraries:
        data = library.read_bytes()
        assert not [var for var in THREAD_VARIABLES if var.encode() in data], library.name
    for var in THREAD_VARIABLES:
        monkeypatch.setenv(var, "2")
    with caplog.at_level(logging.WARNING, logger=engines.__name__):
        cap_threads(1)
    assert "ctranslate2" in caplog.text or "ctranslate2" not in sys.modules
    assert "onnxruntime" not in caplog.text
