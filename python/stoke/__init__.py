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

from ._stoke import DLPACK_VERSION, Loader, SampleError, Tensor

__all__ = ["Loader", "Tensor", "SampleError", "DLPACK_VERSION"]
