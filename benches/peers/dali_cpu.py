#!/usr/bin/env python3
"""Peer for `stoke bench --backend cpu`: NVIDIA DALI's CPU pipeline (no GPU: device_id=None).

The same work as `stoke bench --backend cpu --preset train --dtype f32 --layout nchw --size 224
--batch-size 256` (and as pillow_cpu.py), built from DALI operators on the CPU:
  fn.readers.file (the ImageFolder listed by common.list_samples: same files, same labels,
  random_shuffle=True) -> fn.decoders.image(device="cpu", output_type=RGB) (libjpeg-turbo: its
  smooth chroma upsampling, the accurate integer IDCT, EXIF orientation applied, as stoke's CPU
  backend) -> fn.random_resized_crop(224, random_area=(0.08, 1), random_aspect_ratio=(3/4, 4/3),
  num_attempts=10, interp_type=INTERP_LINEAR, antialias=True) -> fn.crop_mirror_normalize(
  mean/std = ImageNet's x 255, mirror = coin_flip(0.5), dtype=FLOAT, output_layout="CHW"):
  float32 NCHW batches and int32 labels, in host memory.

Resampling: DALI's INTERP_LINEAR with `antialias` widens the linear (triangle) filter by the
scale factor when it shrinks and is plain bilinear when it enlarges, with pixel centres at
half-integers: the filter of Pillow's BILINEAR resize, which torchvision's
RandomResizedCrop(antialias=True) (bilinear) uses on PIL images and reproduces on tensors, and
which stoke's train preset computes. Both are set explicitly (they are also DALI's defaults).
Known differences of output, not of work: DALI resamples the crop window as a region of the
whole image, so the filter's outermost taps may read pixels just outside the window (Pillow's
resize(box=...)), where torchvision and stoke crop first and clamp to the window (measured on
three windows: only the outermost output rows/columns differ by more than 1 level); DALI's
window draw (log-uniform ratio, 10 tries) keeps only windows whose rounded ratio is in range
and falls back to a ratio-clamped window at a random, not central, place; random_shuffle mixes
within DALI's 1024-sample buffer (initial_fill), not a full per-epoch permutation; the resize
output is uint8 before normalize (as torchvision's), where stoke stays in f32.

Clock: common.Timer, as stoke's. With --warmup-batches 0 (the default, as pillow_cpu.py, which
times from its pool's start) the window opens before the pipeline is built, as `stoke bench
--warmup-batches 0` opens it before Pipeline::new; with N > 0 it opens at the hand-over of
batch N. Only full batches are run and counted: (epochs x images) // batch_size of them (the
reader runs on into the next epoch rather than emitting a short batch). A batch is handed over
when `pipe.run()` returns it, computed, as host arrays (a zero-copy numpy view of each output).
A file DALI cannot decode stops the run (no skip policy here, unlike stoke's): `errors` is 0.

Usage: dali_cpu.py DATASET_DIR [--batch-size 256] [--epochs 2] [--warmup-batches 0]
           [--threads CORES] [--size 224] [--seed 0] [--batches N] [--check]
Needs DALI (`pip install nvidia-dali-cuda120`; its CPU pipeline runs without a GPU or driver):
run it with that environment's python (run_all.py: --dali-python or $STOKE_DALI_PYTHON).
Prints one JSON object (last stdout line): peer, images, seconds, images_per_sec, batches,
wait_ms_p50/p99, config, backend, workers, errors.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse_args():
    ap = common.base_parser(__doc__.splitlines()[0])
    ap.set_defaults(warmup_batches=0)
    ap.add_argument("--threads", "--workers", dest="threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="DALI num_threads (default: the cores this process may run on)")
    ap.add_argument("--check", action="store_true",
                    help="after the timed loop, check the last batch (float32 (B,3,S,S), finite, normalized range, "
                         "labels) and print its min/max/mean to stderr; exit 1 when it is wrong")
    return ap.parse_args()


def import_dali():
    try:
        import nvidia.dali as dali
        import numpy as np
        from nvidia.dali import fn, pipeline_def, types
    except ImportError as e:
        sys.exit(
            f"dali_cpu.py: NVIDIA DALI is not importable by {sys.executable} ({e}). Install it with "
            "`python -m pip install nvidia-dali-cuda120 numpy` into a virtual environment and run this "
            "script with that environment's python (run_all.py: --dali-python PATH or STOKE_DALI_PYTHON=PATH)."
        )
    return np, dali, fn, pipeline_def, types


def check_batch(np, x, y, args, classes):
    """The --check mode: the last batch is what the train preset produces. Returns the stats."""
    lo = (0.0 - max(common.IMAGENET_MEAN)) / min(common.IMAGENET_STD)
    hi = (1.0 - min(common.IMAGENET_MEAN)) / min(common.IMAGENET_STD)
    stats = {"shape": list(x.shape), "dtype": str(x.dtype), "min": float(x.min()), "max": float(x.max()),
             "mean": float(x.mean()), "std": float(x.std()), "labels_shape": list(y.shape),
             "labels_dtype": str(y.dtype), "labels_min": int(y.min()), "labels_max": int(y.max())}
    print(f"dali_cpu.py --check: {stats}", file=sys.stderr)
    problems = []
    if x.dtype != np.float32 or tuple(x.shape) != (args.batch_size, 3, args.size, args.size):
        problems.append(f"images are {x.dtype} {tuple(x.shape)}, want float32 {(args.batch_size, 3, args.size, args.size)}")
    if not np.isfinite(x).all() or stats["min"] < lo - 1e-3 or stats["max"] > hi + 1e-3:
        problems.append(f"values outside the normalized range [{lo:.3f}, {hi:.3f}]")
    if y.reshape(-1).shape[0] != args.batch_size or stats["labels_min"] < 0 or stats["labels_max"] >= classes:
        problems.append(f"labels {y.shape} in [{stats['labels_min']}, {stats['labels_max']}], want {args.batch_size} in [0, {classes})")
    if problems:
        sys.exit("dali_cpu.py --check failed: " + "; ".join(problems))
    return stats


def main():
    args = parse_args()
    np, dali, fn, pipeline_def, types = import_dali()
    samples = common.list_samples(args.dataset)
    files = [p for p, _ in samples]
    labels = [l for _, l in samples]
    steps = args.epochs * len(samples) // args.batch_size
    if steps <= args.warmup_batches:
        raise SystemExit(
            f"dali_cpu.py: {args.epochs} epoch(s) of {len(samples)} images give {steps} full batches of "
            f"{args.batch_size}, nothing to measure after {args.warmup_batches} warm-up batches"
        )
    mean = [m * 255.0 for m in common.IMAGENET_MEAN]
    std = [s * 255.0 for s in common.IMAGENET_STD]

    @pipeline_def(batch_size=args.batch_size, num_threads=args.threads, device_id=None, seed=args.seed)
    def train():
        jpegs, label = fn.readers.file(files=files, labels=labels, random_shuffle=True, name="Reader")
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB, use_fast_idct=False,
                                   adjust_orientation=True)
        images = fn.random_resized_crop(
            images, size=[args.size, args.size], random_area=[0.08, 1.0],
            random_aspect_ratio=[3.0 / 4.0, 4.0 / 3.0], num_attempts=10,
            interp_type=types.INTERP_LINEAR, antialias=True,
        )
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mean=mean, std=std,
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return images, label

    timer = common.Timer(args.warmup_batches, args.batches)
    if args.warmup_batches == 0:
        timer.t0 = time.perf_counter()  # the pipeline's start-up is inside the window, as stoke's
    pipe = train()
    pipe.build()
    x = y = None
    for _ in range(steps):
        timer.before()
        out_images, out_labels = pipe.run()
        # Host arrays of the finished batch: views, no copy (the batch is one dense buffer).
        x = np.asarray(out_images.as_tensor())
        y = np.asarray(out_labels.as_tensor())
        if not timer.after(x.shape[0]):
            break
    config = {"batch_size": args.batch_size, "threads": args.threads, "dtype": "float32", "layout": "NCHW",
              "device": "cpu", "size": args.size, "interp_type": "INTERP_LINEAR", "antialias": True,
              "random_shuffle": True, "seed": args.seed, "warmup_batches": args.warmup_batches}
    r = timer.result(f"dali_cpu.py (DALI {dali.__version__} CPU, {args.threads} threads)", config)
    if args.check:
        r["check"] = check_batch(np, x, y, args, max(labels) + 1)
    r.update({"backend": f"dali-{dali.__version__} cpu, {args.threads} threads", "workers": args.threads,
              "errors": 0, "dali": dali.__version__})
    common.emit(r)


if __name__ == "__main__":
    main()
