"""Peer 1: the tuned PyTorch loader: DataLoader workers + Pillow + torchvision transforms.

Per sample, in the workers: PIL open + convert("RGB"), v2.RandomResizedCrop(224, antialias),
v2.RandomHorizontalFlip, v2.PILToTensor (uint8 CHW). Collated uint8 batches go through
pinned memory (pin_memory=True) to the GPU with non_blocking copies; there they are normalized
and cast to float16 NCHW (doing that on the GPU is the faster, tuned variant: the usual
ToTensor+Normalize in the workers moves 4x the bytes). persistent_workers=True so epochs do
not re-fork. The timed window starts after max(--warmup-batches, workers x prefetch_factor)
batches: the ones the workers made before it are not counted in it.

`--recipe deit` is DeiT's training recipe as timm builds it, the same work as `stoke bench
--preset deit`: in the workers timm's `create_transform(size, is_training=True,
interpolation="bicubic", auto_augment="rand-m9-mstd0.5-inc1", re_prob=0.25, re_mode="pixel",
re_count=1)` (RandomResizedCrop bicubic, flip, RandAugment on the PIL image, ToTensor,
Normalize, RandomErasing: float32 batches, as timm's own loader without its GPU prefetcher);
then on the device timm's `Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1)` on
the batch and the float16 cast.

The worker count is swept (default 1, 2, 4, 8, 12, 16); the best is the result, every
configuration is in `sweep`. This is the seed's advice: "measure images/s for 1, 2, 4, 8, 12,
16 workers; pick the smallest within 5% of the best".

Usage: python3 benches/peers/torch_dataloader.py DATASET [--workers 1,2,4,8,12,16] [--epochs 2]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.transforms import v2  # noqa: E402


def posterize_zero_bits_as_black():
    """timm's `rand-m9-mstd0.5-inc1` reaches posterize to 0 bits (magnitude 10 of N(9, 0.5));
    Pillow >= 12 raises there, older Pillow (and stoke) give black. The peer keeps running with
    the older result (the same work as stoke), instead of dying in a worker."""
    from PIL import Image, ImageOps

    original = ImageOps.posterize

    def posterize(image, bits):
        if bits <= 0:
            return Image.new(image.mode, image.size, 0)
        return original(image, bits)

    ImageOps.posterize = posterize


def deit_transform(size):
    from timm.data import create_transform


    return create_transform(
        size, is_training=True, interpolation="bicubic", auto_augment="rand-m9-mstd0.5-inc1",
        re_prob=0.25, re_mode="pixel", re_count=1,
    )


class FolderDataset(torch.utils.data.Dataset):
    def __init__(self, samples, size, recipe="train"):
        self.samples = samples
        if recipe == "deit":
            self.transform = deit_transform(size)
            return
        self.transform = v2.Compose(
            [
                v2.RandomResizedCrop(size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), antialias=True),
                v2.RandomHorizontalFlip(p=0.5),
                v2.PILToTensor(),
            ]
        )

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        with Image.open(path) as im:
            img = im.convert("RGB")
        return self.transform(img), label


def run_one(samples, args, workers, device):
    ds = FolderDataset(samples, args.size, args.recipe)
    g = torch.Generator()
    g.manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        generator=g,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        prefetch_factor=args.prefetch_factor if workers > 0 else None,
        drop_last=False,
    )
    mean = torch.tensor(common.IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(common.IMAGENET_STD, device=device).view(1, 3, 1, 1)
    out_dtype = torch.float16 if device.type == "cuda" else torch.float32
    mixup = None
    if args.recipe == "deit":
        from timm.data import Mixup

        classes = max(l for _, l in samples) + 1
        mixup = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=classes)
    # The workers start together and each prefetches `prefetch_factor` batches: the first
    # workers x prefetch_factor batches were made before (or while) the warm-up was consumed, so
    # a window that began earlier would count work done outside it (16 workers on an epoch of 12
    # batches once read as 7.6x their rate at 8). The window starts once they are consumed.
    warmup = max(args.warmup_batches, workers * args.prefetch_factor if workers > 0 else 0)
    timer = common.Timer(warmup, args.batches)
    done = False
    for _epoch in range(args.epochs):
        it = iter(loader)
        while True:
            timer.before()
            try:
                x, y = next(it)
            except StopIteration:
                break
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            if mixup is not None:
                # timm's transform already normalized (and erased) in the workers.
                if x.shape[0] % 2 == 0:  # timm's Mixup wants an even batch (the last may be odd)
                    x, y = mixup(x, y)
                x = x.to(out_dtype)
            else:
                x = ((x.float() / 255.0 - mean) / std).to(out_dtype)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if not timer.after(x.shape[0]):
                done = True
                break
        if done:
            break
    del loader
    return timer.result(
        "torch-dataloader",
        {"recipe": args.recipe, "workers": workers, "pin_memory": device.type == "cuda", "prefetch_factor": args.prefetch_factor,
         "warmup_batches": warmup,
         "batch_size": args.batch_size, "dtype": str(out_dtype).replace("torch.", ""), "device": str(device)},
    )


def main():
    ap = common.base_parser(__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4,8,12,16", help="comma-separated worker counts to sweep")
    ap.add_argument("--prefetch-factor", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--recipe", default="train", choices=["train", "deit"],
                    help="train: RandomResizedCrop + flip; deit: timm's DeiT transform + Mixup/CutMix")
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.recipe == "deit":
        posterize_zero_bits_as_black()  # once, before any worker forks
    samples = common.list_samples(args.dataset)
    sweep = []
    for w in [int(v) for v in args.workers.split(",")]:
        r = run_one(samples, args, w, device)
        print(f"torch-dataloader workers={w:2d}: {r['images_per_sec']:8.1f} images/s", file=sys.stderr)
        sweep.append(r)
    best = max(sweep, key=lambda r: r["images_per_sec"])
    smallest = min((r for r in sweep if r["images_per_sec"] >= 0.95 * best["images_per_sec"]),
                   key=lambda r: r["config"]["workers"])
    result = dict(best)
    result["sweep"] = [{"workers": r["config"]["workers"], "images_per_sec": r["images_per_sec"]} for r in sweep]
    result["smallest_within_5pct"] = smallest["config"]["workers"]
    result["torch"] = torch.__version__
    if args.recipe == "deit":
        import timm

        result["timm"] = timm.__version__
        result["peer"] = "torch-dataloader (timm DeiT transform + Mixup)"
    common.emit(result)


if __name__ == "__main__":
    main()
