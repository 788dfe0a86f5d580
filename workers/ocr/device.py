"""Start-up check for a worker that serves OCR on a device class (the ``device_check`` of the PDF and image specs).

Runs in the worker's parent before any fork: it creates no session and initialises no CUDA
context. The GPU class needs onnxruntime's CUDA provider (the ``ocr-gpu`` extra) and a GPU the
NVIDIA driver lists; without both the worker refuses to start rather than quietly running on CPU.
"""

from __future__ import annotations

from mediafleet.contract.errors import Unavailable
from mediafleet.contract.manifest import DeviceClass
from mediafleet.workers.gpu import visible_gpus

__all__ = ["check_device"]

CUDA_PROVIDER = "CUDAExecutionProvider"


def check_device(device: DeviceClass) -> None:
    """Refuse a device class this machine cannot really serve.

    Raises:
        Unavailable: the GPU class without onnxruntime's CUDA provider or without a visible GPU.
    """
    if device != DeviceClass.GPU:
        return
    try:
        import onnxruntime
    except ImportError as exc:
        raise Unavailable("onnxruntime is not installed, so OCR cannot run on the GPU") from exc
    if CUDA_PROVIDER not in onnxruntime.get_available_providers():
        raise Unavailable(
            "onnxruntime's CUDA provider is not installed (install the ocr-gpu extra); OCR will not fall back to CPU"
        )
    if visible_gpus() < 1:
        raise Unavailable("no GPU is visible to this worker; OCR will not fall back to CPU")
