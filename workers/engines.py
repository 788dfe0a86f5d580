"""How engines in this process should run: device class and threads, set once at start-up.

The worker sets it in each pool process (``worker_process_init``, i.e. after the fork, so no
engine state crosses a fork); the in-process dispatcher sets it for itself. Extractors read it
with :func:`engine_config` when they first build their engine; they never read the environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contract.manifest import DeviceClass

__all__ = ["EngineConfig", "configure", "engine_config"]


@dataclass(frozen=True)
class EngineConfig:
    device: DeviceClass = DeviceClass.CPU
    threads: int = 1
    whisper_model_dir: Path | None = None  # a CTranslate2 Whisper folder; None: the packaged tiny.en


_config = EngineConfig()


def configure(config: EngineConfig) -> None:
    global _config
    _config = config


def engine_config() -> EngineConfig:
    return _config
