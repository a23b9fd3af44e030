#!/usr/bin/env python3
"""Peer for `stoke bench --backend cpu --stream` over a Hugging Face Parquet data set: the
`datasets` library reads the same `.parquet` files and a torch DataLoader with 2 worker
processes runs torchvision's train transforms on each image, as HF's image-classification
guide does it.

Per process: `datasets.load_dataset("parquet", data_files=FILES, split="train")` (the first
run converts the files to its Arrow cache; later runs map the cache), the `image` column an
`Image` feature (decoded to a PIL image by `datasets` on access, with Pillow) and the `label` a
`ClassLabel`, from the files' `huggingface` metadata. `set_transform` then applies, per sample
in the workers: convert("RGB"), RandomResizedCrop(224, scale=(0.08, 1), ratio=(3/4, 4/3)),
RandomHorizontalFlip(0.5), ToTensor (float32 CHW in [0, 1]), Normalize(ImageNet mean/std): the
work of stoke's train preset with `--dtype f32`. The DataLoader shuffles, collates batches of
float32 NCHW and int64 labels, `num_workers=2`, `persistent_workers=True`.

The clock is `common.Timer` (the first --warmup-batches batches are not timed); the JSON line
is the usual peer result. Timed as a whole process against `stoke bench` (BENCHMARKS.md,
"stoke against HF datasets + torchvision over Parquet").

Install (a venv of its own, everything from PyPI; the `torch` wheel brings its CUDA libraries
too, unused here):

    python3 -m venv /tmp/hf-peer && /tmp/hf-peer/bin/python -m pip install torch torchvision datasets pillow pyarrow

Usage: hf_datasets.py PARQUET_DIR_OR_FILE [--batch-size 64] [--epochs 2] [--workers 2]
       [--warmup-batches 2] [--cache-dir DIR]
Tested with torch 2.15.0, torchvision 0.29.2, datasets 5.2.0, Pillow 13.0.0, pyarrow 26.0.1.
"""

import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import datasets  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision import transforms as T  # noqa: E402


def parquet_files(path):
    """A `.parquet` file, or the `.parquet` files of a folder (or of its `data/`), sorted: the
    files stoke reads for the same path."""
    if os.path.isfile(path):
        return [path]
    for d in (path, os.path.join(path, "data")):
        files = sorted(glob.glob(os.path.join(d, "*.parquet")))
        if files:
            return files
    raise SystemExit(f"{path}: no .parquet files (expected a file, a folder or a folder with data/)")


def main():
    ap = common.base_parser(__doc__.splitlines()[0])
    ap.set_defaults(batch_size=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache-dir", default=None, help="datasets' Arrow cache (default: its own)")
    args = ap.parse_args()

    files = parquet_files(args.dataset)
    ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=args.cache_dir)
    features = ds.features
    if not isinstance(features.get("image"), datasets.Image):
        raise SystemExit(f"{args.dataset}: no `image` column of type Image in the huggingface metadata: {features}")

    augment = T.Compose(
        [
            T.RandomResizedCrop(args.size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)),
            T.RandomHorizontalFlip(p=0.5),
            T.ToTensor(),
            T.Normalize(common.IMAGENET_MEAN, common.IMAGENET_STD),
        ]
    )

    def transform(batch):
        return {
            "pixel_values": [augment(im.convert("RGB")) for im in batch["image"]],
            "label": batch["label"],
        }

    ds.set_transform(transform)

    def collate(rows):
        return torch.stack([r["pixel_values"] for r in rows]), torch.tensor([r["label"] for r in rows])

    torch.manual_seed(args.seed)
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        collate_fn=collate,
    )
    timer = common.Timer(args.warmup_batches, args.batches)
    timer.drain(loader, args.epochs, lambda b: b[0].shape[0])
    config = {
        "files": len(files),
        "rows": len(ds),
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "workers": args.workers,
        "versions": {
            "datasets": datasets.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "pillow": Image.__version__,
        },
    }
    common.emit(timer.result("hf_datasets", config))


if __name__ == "__main__":
    main()
