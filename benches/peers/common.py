"""Shared by the peer benchmarks: the dataset listing, the timing harness and the result line.

Every peer measures the same thing as `stoke bench`:
  - the same train pipeline: RandomResizedCrop(224, scale=(0.08, 1), ratio=(3/4, 4/3)),
    horizontal flip p=0.5, ImageNet normalize, float16 NCHW on the GPU (float32 on the CPU
    peer), batch 256;
  - the same dataset (an ImageFolder, e.g. written by `stoke gen`);
  - the same clock: the first `warmup` batches are not timed; the window runs from the hand-over
    of batch `warmup` to the hand-over of the last batch, and images are the batches delivered
    inside it. A batch counts as handed over once it is ready on the device (the CUDA peers
    synchronize before reading the clock).

Each peer prints its result as one JSON object on the last line of stdout, with at least
`peer`, `images`, `seconds`, `images_per_sec`, `config`.
"""

import argparse
import json
import math
import os
import random
import struct
import sys
import time

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
JPEG_EXT = (".jpg", ".jpeg")


def list_samples(root):
    """(path, label) pairs of an ImageFolder: one subfolder per class, classes sorted by name,
    .jpg/.jpeg in any case; the same convention as stoke's folder source."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not classes:
        raise SystemExit(f"{root}: no class folders (expected an ImageFolder, e.g. from `stoke gen`)")
    samples = []
    for label, c in enumerate(classes):
        d = os.path.join(root, c)
        for dirpath, _, files in sorted(os.walk(d)):
            for f in sorted(files):
                if f.lower().endswith(JPEG_EXT):
                    samples.append((os.path.join(dirpath, f), label))
    if not samples:
        raise SystemExit(f"{root}: no .jpg/.jpeg files")
    return samples


def jpeg_components(path):
    """Number of colour components from the file's SOF header (1 gray, 3 YCbCr, 4 CMYK/YCCK),
    or 0 when no SOF is found. Reads only the header. Used by the GPU peers to send what
    nvJPEG's GPU path cannot take (4-component images) to the CPU, as stoke's index does."""
    with open(path, "rb") as f:
        data = f.read(1 << 16)
    p = 2
    while p + 4 <= len(data):
        if data[p] != 0xFF:
            return 0
        m = data[p + 1]
        (length,) = struct.unpack(">H", data[p + 2 : p + 4])
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):
            return data[p + 9] if p + 9 < len(data) else 0
        if m == 0xDA:
            return 0
        p += 2 + length
    return 0


def base_parser(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("dataset", help="ImageFolder root (e.g. written by `stoke gen`)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--warmup-batches", type=int, default=2)
    ap.add_argument("--batches", type=int, default=None, help="stop after this many measured batches")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def epoch_order(n, seed, epoch):
    """A permutation of range(n) from (seed, epoch): every sample once per epoch."""
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


class Timer:
    """The clock shared by all peers (see the module docstring)."""

    def __init__(self, warmup, max_batches=None):
        self.warmup = warmup
        self.max_batches = max_batches
        self.step = 0
        self.t0 = None
        self.t_last = None
        self.images = 0
        self.waits = []
        self.asked = None

    def before(self):
        """Call right before asking for the next batch."""
        self.asked = time.perf_counter()

    def after(self, n_images):
        """Call once the batch is ready (on the device). Returns False when done."""
        now = time.perf_counter()
        self.step += 1
        if self.step <= self.warmup:
            if self.step == self.warmup:
                self.t0 = now
            return True
        if self.t0 is None:  # no warm-up: the window starts at the first request
            self.t0 = self.asked
        self.images += n_images
        self.waits.append(now - self.asked)
        self.t_last = now
        return self.max_batches is None or self.step - self.warmup < self.max_batches

    def drain(self, loader, epochs, count):
        """Take `loader`'s batches for `epochs` epochs (or until `max_batches`), timing each:
        `count(batch)` is its number of images. For peers that only consume (no device step)."""
        for _ in range(epochs):
            it = iter(loader)
            while True:
                self.before()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                if not self.after(count(batch)):
                    return

    def result(self, peer, config):
        if self.t_last is None or self.images == 0:
            raise SystemExit(
                f"{peer}: nothing measured ({self.step} batches, {self.warmup} warm-up): "
                "use more epochs or fewer warm-up batches"
            )
        secs = self.t_last - self.t0
        waits = sorted(self.waits)

        def pick(q):  # nearest rank, as `stoke bench`
            return waits[min(len(waits), max(1, math.ceil(q * len(waits)))) - 1]

        return {
            "peer": peer,
            "images": self.images,
            "seconds": secs,
            "images_per_sec": self.images / secs if secs > 0 else 0.0,
            "batches": len(self.waits),
            "wait_ms_p50": pick(0.5) * 1e3,
            "wait_ms_p99": pick(0.99) * 1e3,
            "config": config,
        }


def emit(result):
    """Print the one result line (last line of stdout)."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def gpu_peer_args(description):
    """The GPU peers' command line (base_parser + --read-threads, --device), parsed:
    (args, the torch device, the dataset's (path, label) pairs)."""
    import torch

    ap = base_parser(description)
    ap.add_argument("--read-threads", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    return args, torch.device(args.device), list_samples(args.dataset)


def run_gpu_peer(peer, args, samples, read_one, decode, device):
    """The measured loop the GPU peers share; returns the timer's result dict.

    A thread pool of `args.read_threads` reads the next batch's files with `read_one(path)`
    while the current batch is decoded by `decode(idx, datas)` (dataset indices and what
    `read_one` returned; it gives one uint8 CHW tensor per image on `device`). Then, per image
    (sizes differ), torchvision v2 RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3),
    antialias) and RandomHorizontalFlip(0.5); the images are stacked, normalized with the
    ImageNet mean/std and cast to float16 NCHW on the GPU; the labels go to the device; the
    clock reads after a device synchronize.
    """
    import concurrent.futures

    import torch
    from torchvision.transforms import v2

    labels_all = torch.tensor([l for _, l in samples])
    augment = v2.Compose(
        [
            v2.RandomResizedCrop(args.size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), antialias=True),
            v2.RandomHorizontalFlip(p=0.5),
        ]
    )
    torch.manual_seed(args.seed)
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
    pool = concurrent.futures.ThreadPoolExecutor(args.read_threads)
    # A separate one-thread executor drives the prefetch (it waits on `pool`, so it must not
    # take one of pool's threads).
    prefetcher = concurrent.futures.ThreadPoolExecutor(1)

    def batches():
        for epoch in range(args.epochs):
            order = epoch_order(len(samples), args.seed, epoch)
            for s in range(0, len(order), args.batch_size):
                yield order[s : s + args.batch_size]

    def read(idx):
        return idx, list(pool.map(lambda i: read_one(samples[i][0]), idx))

    timer = Timer(args.warmup_batches, args.batches)
    it = batches()
    first = next(it, None)
    pending = prefetcher.submit(read, first) if first is not None else None
    while pending is not None:
        timer.before()
        idx, datas = pending.result()
        nxt = next(it, None)
        pending = prefetcher.submit(read, nxt) if nxt is not None else None
        imgs = decode(idx, datas)
        x = torch.stack([augment(img) for img in imgs])
        x = ((x.float() / 255.0 - mean) / std).to(torch.float16)
        labels_all[idx].to(device, non_blocking=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        # (--device cpu runs the same loop on the CPU: a plumbing check where there is no GPU.)
        if not timer.after(x.shape[0]):
            break
    prefetcher.shutdown(wait=True, cancel_futures=True)
    pool.shutdown(wait=True, cancel_futures=True)
    return timer.result(
        peer,
        {"batch_size": args.batch_size, "read_threads": args.read_threads, "dtype": "float16", "device": str(device)},
    )
