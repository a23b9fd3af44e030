"""Peer 2: torchvision.io.decode_jpeg(device='cuda') batched + transforms.v2 on GPU tensors.

Reading: a thread pool reads the next batch's files (torchvision.io.read_file, uint8 CPU
tensors) while the current batch decodes, so the GPU peer is not held back by Python I/O.
Decoding: one batched `decode_jpeg(list, mode=RGB, device='cuda')` call per batch (nvJPEG).
Files with 4 components (Adobe CMYK/YCCK), which nvJPEG's GPU path does not take, are found
once from their headers (as stoke's index does) and decoded on the CPU by the same function,
then copied over. If the batched call still fails, the batch is decoded one by one with the
CPU as fallback, and `fallback_batches` counts it.
Augment: per image (sizes differ) v2.RandomResizedCrop(224, antialias=True) and
v2.RandomHorizontalFlip on the uint8 CUDA tensor, stacked, then normalize and cast to float16
NCHW on the GPU.

Usage: python3 benches/peers/torchvision_gpu.py DATASET [--epochs 2] [--read-threads 8]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision.io import ImageReadMode, decode_jpeg, read_file  # noqa: E402


def decode_batch(datas, on_cpu, device, stats):
    """uint8 CHW CUDA tensors for the encoded `datas`; `on_cpu[i]` routes image i to the CPU."""
    out = [None] * len(datas)
    gpu_idx = [i for i in range(len(datas)) if not on_cpu[i]]
    try:
        if gpu_idx:
            decoded = decode_jpeg([datas[i] for i in gpu_idx], mode=ImageReadMode.RGB, device=device)
            for i, img in zip(gpu_idx, decoded):
                out[i] = img
    except RuntimeError:
        stats["fallback_batches"] += 1
        for i in gpu_idx:
            try:
                out[i] = decode_jpeg(datas[i], mode=ImageReadMode.RGB, device=device)
            except RuntimeError:
                out[i] = decode_jpeg(datas[i], mode=ImageReadMode.RGB).to(device, non_blocking=True)
                stats["cpu_decoded"] += 1
    for i in range(len(datas)):
        if on_cpu[i]:
            out[i] = decode_jpeg(datas[i], mode=ImageReadMode.RGB).to(device, non_blocking=True)
            stats["cpu_decoded"] += 1
    return out


def main():
    args, device, samples = common.gpu_peer_args(__doc__.splitlines()[0])
    on_cpu = [common.jpeg_components(p) == 4 for p, _ in samples]
    stats = {"fallback_batches": 0, "cpu_decoded": 0}

    def decode(idx, datas):
        return decode_batch(datas, [on_cpu[i] for i in idx], device, stats)

    r = common.run_gpu_peer("torchvision-gpu", args, samples, read_file, decode, device)
    r.update(stats)
    r["cpu_routed_images"] = sum(on_cpu)
    r["torch"] = torch.__version__
    r["torchvision"] = torchvision.__version__
    common.emit(r)


if __name__ == "__main__":
    main()
