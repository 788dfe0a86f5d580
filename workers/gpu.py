"""How many GPUs this machine really offers, asked without touching CUDA in this process.

A worker decides its device class before its pool forks, and a CUDA context created in the parent
breaks every forked child, so the question goes to a separate interpreter (CTranslate2's device
count) and, failing that, to the NVIDIA driver's own tool (``nvidia-smi -L``).
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache

from mediafleet.interpreter import python

__all__ = ["visible_gpus"]

_ASK_CTRANSLATE2 = "import ctranslate2, sys; sys.stdout.write(str(ctranslate2.get_cuda_device_count()))"


def _ctranslate2_count() -> int:
    try:
        done = subprocess.run(python("-c", _ASK_CTRANSLATE2), capture_output=True, text=True,
                              timeout=120, check=False)
        return int(done.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def _nvidia_smi_count() -> int:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


@cache
def visible_gpus() -> int:
    """The number of CUDA devices visible here (0 on a machine without GPU, driver or CUDA build)."""
    return _ctranslate2_count() or _nvidia_smi_count()
