#!/usr/bin/env python3
"""Peer for `stoke bench --backend cpu --preset dino`: DINO's own `DataAugmentationDINO`
(facebookresearch/dino, `main_dino.py`, imported from a checkout of that repository, not
copied) in a torch DataLoader with 2 worker processes, over the same ImageFolder: per image,
Pillow decodes it once and torchvision runs the two global views and the eight local views
(RandomResizedCrop bicubic, flip, ColorJitter at 0.8, grayscale, Pillow's GaussianBlur,
solarize on the second global view, ToTensor, Normalize): the work of stoke's `dino` preset
with `--dtype f32` (float32 NCHW views, batches of 64 images x 10 views).

`--plain` runs torchvision's RandomResizedCrop(224) + flip + ToTensor + Normalize instead (one
view): the issue's "6x" is DINO's 10 views against that.

The clock is `common.Timer`; the JSON line is the usual peer result (`images_per_sec` counts
images, each with its 10 views). Timed as a whole process against `stoke bench`, A and B in
turn (BENCHMARKS.md, "DINO's views").

Install: the venv of hf_datasets.py (torch, torchvision, Pillow from PyPI); DINO's code:
    git clone https://github.com/facebookresearch/dino /tmp/dino   (main_dino.py imports only
    torch, torchvision, PIL and the repository's own modules)

Usage: dino_torchvision.py DATASET --dino-repo DIR [--plain] [--batch-size 64] [--epochs 2]
       [--workers 2] [--warmup-batches 2]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import torch  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402
from torchvision import transforms as T  # noqa: E402


class Folder(Dataset):
    def __init__(self, samples, transform):
        self.samples, self.transform = samples, transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        with Image.open(path) as im:
            img = im.convert("RGB")
        return self.transform(img), label


def main():
    ap = common.base_parser(__doc__.splitlines()[0])
    ap.set_defaults(batch_size=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dino-repo", required=True, help="a checkout of facebookresearch/dino")
    ap.add_argument("--plain", action="store_true", help="torchvision's plain crop + flip, one view")
    args = ap.parse_args()

    if args.plain:
        transform = T.Compose(
            [
                T.RandomResizedCrop(args.size, scale=(0.08, 1.0)),
                T.RandomHorizontalFlip(),
                T.ToTensor(),
                T.Normalize(common.IMAGENET_MEAN, common.IMAGENET_STD),
            ]
        )
    else:
        sys.path.insert(0, os.path.abspath(args.dino_repo))
        from main_dino import DataAugmentationDINO  # noqa: E402

        # main_dino.py's defaults: --global_crops_scale 0.4 1, --local_crops_scale 0.05 0.4,
        # --local_crops_number 8.
        transform = DataAugmentationDINO((0.4, 1.0), (0.05, 0.4), 8)

    torch.manual_seed(args.seed)
    loader = DataLoader(
        Folder(common.list_samples(args.dataset), transform),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        drop_last=False,
    )
    timer = common.Timer(args.warmup_batches, args.batches)
    # A batch is (images, labels); DINO's images are a list of ten view tensors.
    timer.drain(loader, args.epochs, lambda b: b[0].shape[0] if torch.is_tensor(b[0]) else b[0][0].shape[0])
    config = {
        "recipe": "plain" if args.plain else "dino",
        "views": 1 if args.plain else 10,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "workers": args.workers,
        "versions": {"torch": torch.__version__, "torchvision": torchvision.__version__, "pillow": Image.__version__},
    }
    common.emit(timer.result("dino_torchvision", config))


if __name__ == "__main__":
    main()
