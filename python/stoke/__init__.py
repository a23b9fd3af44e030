"""stoke: keeps a training GPU fed.

The CPU only reads compressed JPEG bytes; nvJPEG decodes them on the GPU and one fused CUDA
kernel per batch does the random-resized crop, flip, normalize and cast, so augmented batches
appear in GPU memory. On a machine without a GPU the CPU backend does the same work with the
same meaning.

    import torch, stoke
    loader = stoke.Loader("/data/imagenet/train", batch_size=256, dtype="float16")
    for epoch in range(90):
        loader.set_epoch(epoch)
        for images, labels in loader:
            x = torch.from_dlpack(images)   # no copy; on CUDA your stream waits on the batch
            y = torch.from_dlpack(labels)   # int64
            ...

A batch stays valid while any tensor made from it is alive; it goes back to stoke when the
last one is gone. At most ``max_held_batches`` (default 8) may be held at once.
"""

import glob as _glob
import os as _os
import sys as _sys


def _pip_cuda_libraries():
    """libnvjpeg and libnvrtc from pip's NVIDIA wheels (``nvidia/cu13/lib`` for CUDA 13's
    ``nvidia-nvjpeg`` and ``nvidia-cuda-nvrtc``, ``nvidia/<name>/lib`` for older layouts), found
    on ``sys.path``. stoke opens both at run time; the driver's libcuda never comes from pip."""
    found = {}
    for base in _sys.path:
        for key, name in (("nvjpeg", "libnvjpeg.so.13"), ("nvrtc", "libnvrtc.so.13")):
            if key not in found:
                hits = sorted(_glob.glob(_os.path.join(base or ".", "nvidia", "*", "lib", name)))
                if hits:
                    found[key] = hits[0]
    return found


#: The CUDA libraries found in pip's ``nvidia`` wheels: ``{"nvjpeg": path, "nvrtc": path}``.
CUDA_LIBRARIES = _pip_cuda_libraries()
if "nvjpeg" in CUDA_LIBRARIES and not _os.environ.get("STOKE_NVJPEG"):
    # The backend opens $STOKE_NVJPEG first, then libnvjpeg.so.13 on the loader path.
    _os.environ["STOKE_NVJPEG"] = CUDA_LIBRARIES["nvjpeg"]
if "nvrtc" in CUDA_LIBRARIES:
    # NVRTC (kernels compiled at run time when the build had no nvcc) is opened by its soname:
    # loaded here first, the later open finds it.
    import ctypes as _ctypes

    try:
        _ctypes.CDLL(CUDA_LIBRARIES["nvrtc"], mode=_ctypes.RTLD_GLOBAL)
    except OSError:
        pass

from ._stoke import DLPACK_VERSION, JPEG_SIMD, NO_SIMD_ADVICE, Loader, SampleError, Tensor

__all__ = ["Loader", "Tensor", "SampleError", "DLPACK_VERSION", "JPEG_SIMD", "CUDA_LIBRARIES"]

if not JPEG_SIMD:
    # A build without nasm: the CPU decoder works, about 1.5x slower. Said once, at import.
    import warnings

    warnings.warn(f"stoke: {NO_SIMD_ADVICE}", RuntimeWarning, stacklevel=2)
