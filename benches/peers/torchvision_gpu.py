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

import concurrent.futures
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision.io import ImageReadMode, decode_jpeg, read_file  # noqa: E402
from torchvision.transforms import v2  # noqa: E402


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
    ap = common.base_parser(__doc__.splitlines()[0])
    ap.add_argument("--read-threads", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    device = torch.device(args.device)
    samples = common.list_samples(args.dataset)
    on_cpu = [common.jpeg_components(p) == 4 for p, _ in samples]
    labels_all = torch.tensor([l for _, l in samples])
    augment = v2.Compose(
        [
            v2.RandomResizedCrop(args.size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), antialias=True),
            v2.RandomHorizontalFlip(p=0.5),
        ]
    )
    torch.manual_seed(args.seed)
    mean = torch.tensor(common.IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(common.IMAGENET_STD, device=device).view(1, 3, 1, 1)
    pool = concurrent.futures.ThreadPoolExecutor(args.read_threads)
    # A separate one-thread executor drives the prefetch (it waits on `pool`, so it must not
    # take one of pool's threads).
    prefetcher = concurrent.futures.ThreadPoolExecutor(1)
    stats = {"fallback_batches": 0, "cpu_decoded": 0}

    def batches():
        for epoch in range(args.epochs):
            order = common.epoch_order(len(samples), args.seed, epoch)
            for s in range(0, len(order), args.batch_size):
                yield order[s : s + args.batch_size]

    def read(idx):
        return idx, list(pool.map(lambda i: read_file(samples[i][0]), idx))

    timer = common.Timer(args.warmup_batches, args.batches)
    it = batches()
    first = next(it, None)
    pending = prefetcher.submit(read, first) if first is not None else None
    while pending is not None:
        timer.before()
        idx, datas = pending.result()
        nxt = next(it, None)
        pending = prefetcher.submit(read, nxt) if nxt is not None else None
        imgs = decode_batch(datas, [on_cpu[i] for i in idx], device, stats)
        x = torch.stack([augment(img) for img in imgs])
        x = ((x.float() / 255.0 - mean) / std).to(torch.float16)
        labels_all[idx].to(device, non_blocking=True)
        torch.cuda.synchronize()
        if not timer.after(x.shape[0]):
            break
    prefetcher.shutdown(wait=True, cancel_futures=True)
    pool.shutdown(wait=True, cancel_futures=True)
    r = timer.result(
        "torchvision-gpu",
        {"batch_size": args.batch_size, "read_threads": args.read_threads, "dtype": "float16", "device": str(device)},
    )
    r.update(stats)
    r["cpu_routed_images"] = sum(on_cpu)
    r["torch"] = torch.__version__
    r["torchvision"] = torchvision.__version__
    common.emit(r)


if __name__ == "__main__":
    main()
