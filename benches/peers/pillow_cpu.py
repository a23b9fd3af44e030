#!/usr/bin/env python3
"""Peer for `stoke bench --backend cpu`: the same train pipeline with Pillow + numpy in a
multiprocessing Pool of 2 worker processes (what a PyTorch DataLoader with num_workers=2 does),
batches collated in the main process.

Pipeline per sample (torchvision's train preset, written with Pillow + numpy only):
  open + decode (Pillow, libjpeg-turbo) -> RGB -> RandomResizedCrop(224, scale=(0.08, 1),
  ratio=(3/4, 4/3)) with Pillow's antialiased bilinear resize -> horizontal flip p=0.5 ->
  float32 /255 -> normalize with ImageNet mean/std -> CHW; batches stacked to NCHW f32.

Usage: pillow_cpu.py DATASET_DIR [--batch-size 64] [--epochs 3] [--workers 2] [--size 224]
Prints one JSON object: images, seconds, images_per_sec, backend, workers, errors.
"""
import argparse
import json
import math
import os
import random
import sys
import time
from multiprocessing import Pool

import numpy as np
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)
SIZE = 224


def rrc_box(rng, w, h, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision RandomResizedCrop.get_params."""
    area = w * h
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        ar = math.exp(rng.uniform(*log_ratio))
        cw = int(round(math.sqrt(target * ar)))
        ch = int(round(math.sqrt(target / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    in_ratio = w / h
    if in_ratio < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        ch, cw = h, int(round(h * ratio[1]))
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def load(job):
    path, seed = job
    rng = random.Random(seed)
    try:
        im = Image.open(path).convert("RGB")
    except Exception:  # noqa: BLE001 - counted as an error, like stoke's skip policy
        return None
    x, y, cw, ch = rrc_box(rng, im.width, im.height)
    im = im.resize((SIZE, SIZE), Image.BILINEAR, box=(x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    a = np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return (a - MEAN) / STD


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dataset")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--size", type=int, default=224)
    a = p.parse_args()
    global SIZE
    SIZE = a.size
    files = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(a.dataset, followlinks=True) for f in fs
        if f.lower().endswith((".jpg", ".jpeg"))
    )
    if not files:
        sys.exit(f"no .jpg/.jpeg files under {a.dataset}")
    n = errors = 0
    t0 = time.perf_counter()
    with Pool(a.workers) as pool:
        for epoch in range(a.epochs):
            order = list(range(len(files)))
            random.Random(epoch).shuffle(order)
            jobs = [(files[i], epoch * 1_000_003 + i) for i in order]
            batch = []
            for out in pool.imap(load, jobs, chunksize=a.batch_size // a.workers or 1):
                if out is None:
                    errors += 1
                    continue
                batch.append(out)
                if len(batch) == a.batch_size:
                    np.stack(batch)  # collate, as DataLoader's default_collate does
                    n += len(batch)
                    batch = []
            if batch:
                np.stack(batch)
                n += len(batch)
    dt = time.perf_counter() - t0
    print(json.dumps({"images": n, "seconds": round(dt, 3), "images_per_sec": round(n / dt, 1),
                      "backend": f"pillow-{Image.__version__}+numpy, {a.workers} processes",
                      "workers": a.workers, "errors": errors}))


if __name__ == "__main__":
    main()
