"""The video modality (``extract_keyframes``): what the fleet needs to know of it, in one place."""

from __future__ import annotations

from mediafleet.contract.manifest import Modality
from mediafleet.workers.spec import ModalitySpec, Ref

__all__ = ["SPEC"]


def _sniff(head: bytes) -> str | None:
    if head[4:8] == b"ftyp":  # M4A and M4B brands are audio's (its spec is asked first)
        return "video/quicktime" if head[8:12] == b"qt  " else "video/mp4"
    if head.startswith(b"\x1aE\xdf\xa3"):
        return "video/webm" if b"webm" in head[:64] else "video/x-matroska"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "video/x-msvideo"
    return None


SPEC = ModalitySpec(
    modality=Modality.VIDEO,
    action="extract_keyframes",
    extractor_name="mediafleet.video.keyframes",
    media_types=("video/mp4", "video/quicktime", "video/webm", "video/x-matroska", "video/x-msvideo"),
    sniff=_sniff,
    extractor=Ref("mediafleet.workers.video.extract:extract_keyframes"),
    device_check=Ref("mediafleet.workers.spec:no_device_check"),  # decoding and detection run on the CPU
    read_check=Ref("mediafleet.workers.spec:reads_whole"),
    progress_unit="frames",
    loci=Ref("mediafleet.adapters.video:video_loci"),
    caller_shape=Ref("mediafleet.adapters.caller:video_shape"),
    summary=Ref("mediafleet.report.text:video_summary"),
    opencv=True,  # scenedetect
    parts={"speech": Ref("mediafleet.workers.video.speech:SPEECH")},
)
