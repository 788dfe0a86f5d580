"""The video modality (``extract_keyframes``): what the fleet needs to know of it, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mediafleet.contract.manifest import Modality
from mediafleet.modalities.spec import SPEECH_NUMERICS, ModalitySpec, Ref

__all__ = ["SPEC"]


def _sniff(head: bytes) -> str | None:
    if head[4:8] == b"ftyp":  # M4A and M4B brands are audio's (its spec is asked first)
        return "video/quicktime" if head[8:12] == b"qt  " else "video/mp4"
    if head.startswith(b"\x1aE\xdf\xa3"):
        return "video/webm" if b"webm" in head[:64] else "video/x-matroska"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "video/x-msvideo"
    return None


def _numerics(options: Mapping[str, Any]) -> frozenset[str]:
    """Shots and keyframes are exact whatever the settings; a video's speech is Whisper's."""
    return frozenset() if options.get("speech") is False else SPEECH_NUMERICS


SPEC = ModalitySpec(
    modality=Modality.VIDEO,
    action="extract_keyframes",
    extractor_name="mediafleet.video.keyframes",
    media_types=("video/mp4", "video/quicktime", "video/webm", "video/x-matroska", "video/x-msvideo"),
    sniff=_sniff,
    extractor=Ref("mediafleet.workers.video.extract:extract_keyframes"),
    device_check=Ref("mediafleet.modalities.spec:no_device_check"),  # decoding and detection run on the CPU
    read_check=Ref("mediafleet.modalities.spec:reads_whole"),
    progress_unit="frames",
    loci=Ref("mediafleet.adapters.video:video_loci"),
    caller_shape=Ref("mediafleet.adapters.caller:video_shape"),
    summary=Ref("mediafleet.report.text:video_summary"),
    opencv=True,  # scenedetect
    numerics=_numerics,
    parts={"speech": Ref("mediafleet.workers.video.speech:SPEECH")},
)
