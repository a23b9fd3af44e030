"""Peer 3: nvImageCodec batched decode + the same torchvision GPU ops as peer 2.

Decoding: one `nvimgcodec.Decoder().decode(list_of_bytes)` call per batch. nvImageCodec picks
its own backend per image (hardware JPEG engine, CUDA, or its CPU fallback, which is how it
takes CMYK), so nothing is routed by hand. Images come back as device HWC uint8 RGB and are
taken into torch with `torch.from_dlpack` (which makes torch's stream wait for the decode),
then permuted to CHW. An image it fails on (None in the result) is decoded by
torchvision on the CPU and counted in `cpu_decoded`.
Augment and normalize: exactly as torchvision_gpu.py.

Needs the `nvidia-nvimgcodec-cu13` wheel (scripts/bench-peers.sh installs it from a folder
of carried wheels); prints a `skipped` result when it is absent.

Usage: python3 benches/peers/nvimgcodec_gpu.py DATASET [--epochs 2] [--read-threads 8]
"""

import concurrent.futures
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    from nvidia import nvimgcodec
except ImportError as e:  # the wheel is optional
    common.emit({"peer": "nvimgcodec-gpu", "skipped": f"nvImageCodec not installed ({e})"})
    sys.exit(0)

import torch  # noqa: E402
from torchvision.io import ImageReadMode, decode_jpeg  # noqa: E402
from torchvision.transforms import v2  # noqa: E402


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    ap = common.base_parser(__doc__.splitlines()[0])
    ap.add_argument("--read-threads", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    device = torch.device(args.device)
    samples = common.list_samples(args.dataset)
    labels_all = torch.tensor([l for _, l in samples])
    decoder = nvimgcodec.Decoder()  # the current CUDA device
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
    prefetcher = concurrent.futures.ThreadPoolExecutor(1)
    stats = {"cpu_decoded": 0}

    def batches():
        for epoch in range(args.epochs):
            order = common.epoch_order(len(samples), args.seed, epoch)
            for s in range(0, len(order), args.batch_size):
                yield order[s : s + args.batch_size]

    def read(idx):
        return idx, list(pool.map(lambda i: read_bytes(samples[i][0]), idx))

    timer = common.Timer(args.warmup_batches, args.batches)
    it = batches()
    first = next(it, None)
    pending = prefetcher.submit(read, first) if first is not None else None
    while pending is not None:
        timer.before()
        idx, datas = pending.result()
        nxt = next(it, None)
        pending = prefetcher.submit(read, nxt) if nxt is not None else None
        decoded = decoder.decode(datas)
        imgs = []
        for data, img in zip(datas, decoded):
            if img is None:
                t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
                imgs.append(decode_jpeg(t, mode=ImageReadMode.RGB).to(device, non_blocking=True))
                stats["cpu_decoded"] += 1
            else:
                # `.to` is a no-op for device images; a CPU-fallback decode may come back in host memory.
                imgs.append(torch.from_dlpack(img).to(device, non_blocking=True).permute(2, 0, 1))
        x = torch.stack([augment(img) for img in imgs])
        x = ((x.float() / 255.0 - mean) / std).to(torch.float16)
        labels_all[idx].to(device, non_blocking=True)
        torch.cuda.synchronize()
        if not timer.after(x.shape[0]):
            break
    prefetcher.shutdown(wait=True, cancel_futures=True)
    pool.shutdown(wait=True, cancel_futures=True)
    r = timer.result(
        "nvimgcodec-gpu",
        {"batch_size": args.batch_size, "read_threads": args.read_threads, "dtype": "float16", "device": str(device)},
    )
    r.update(stats)
    r["nvimgcodec"] = getattr(nvimgcodec, "__version__", "unknown")
    r["torch"] = torch.__version__
    common.emit(r)


if __name__ == "__main__":
    main()
