"""The audio modality (``transcribe_segments``): what the fleet needs to know of it, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediafleet.contract.manifest import Modality
from mediafleet.modalities.spec import SPEECH_NUMERICS, ModalitySpec, Ref

__all__ = ["SPEC"]


def _sniff(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06):
        return "audio/mpeg"
    if len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:  # ADTS: MPEG sync, layer 0
        return "audio/aac"
    if head[4:8] == b"ftyp" and head[8:12] in (b"M4A ", b"M4B "):  # any other ISO brand is a video
        return "audio/mp4"
    return None


def _numerics(options: Mapping[str, Any]) -> frozenset[str]:
    return SPEECH_NUMERICS  # Whisper's


SPEC = ModalitySpec(
    modality=Modality.AUDIO,
    action="transcribe_segments",
    extractor_name="mediafleet.audio.transcribe",
    media_types=("audio/wav", "audio/flac", "audio/ogg", "audio/mpeg", "audio/aac", "audio/mp4"),
    sniff=_sniff,
    extractor=Ref("mediafleet.workers.audio.transcribe:extract_audio"),
    device_check=Ref("mediafleet.workers.audio.model:check_device"),
    read_check=Ref("mediafleet.modalities.spec:reads_whole"),
    progress_unit="seconds",
    loci=Ref("mediafleet.adapters.audio:audio_loci"),
    caller_shape=Ref("mediafleet.adapters.caller:audio_shape"),
    summary=Ref("mediafleet.report.text:audio_summary"),
    opencv=False,
    numerics=_numerics,
)
