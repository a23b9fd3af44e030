"""A PyTorch training loop fed by stoke: torchvision ResNet-50 (or timm), AMP, channels_last,
batches through DLPack without a copy, and the share of each step spent waiting for data.

    python examples/train_torch.py /data/imagenet/train --steps 200            # a GPU
    python examples/train_torch.py --smoke                                      # CPU smoke test

Without a dataset path, a small ImageNet-like set is generated with `stoke gen` (the CLI must
be built: `cargo build --release`) or with Pillow. `--smoke` trains a tiny CNN for a few steps
on the CPU backend: it checks the plumbing (shapes, dtypes, labels, loss going down), not speed.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

import stoke


def make_dataset(root, count=96, classes=4):
    """A tiny ImageFolder: the stoke CLI's generator when it is built, else Pillow."""
    cli = os.environ.get("STOKE_BIN", "target/release/stoke")
    if os.path.exists(cli):
        subprocess.run([cli, "gen", root, "--count", str(count)], check=True, capture_output=True)
        return root
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
        for i in range(count // classes):
            px = rng.integers(0, 255, (64, 80, 3), dtype=np.uint8)
            px[..., c % 3] = np.linspace(0, 255, 80, dtype=np.uint8)  # a learnable cue per class
            Image.fromarray(px).save(os.path.join(root, f"class{c}", f"{i}.jpg"))
    return root


def tiny_model(classes):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, classes),
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?")
    ap.add_argument("--smoke", action="store_true", help="tiny model, CPU, a few steps")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--model", default="resnet50", help="torchvision name, or timm:NAME")
    ap.add_argument("--classes", type=int, default=1000)
    args = ap.parse_args(argv)

    on_gpu = torch.cuda.is_available() and not args.smoke
    tmp = None
    if args.data is None:
        tmp = tempfile.TemporaryDirectory()
        args.data = make_dataset(os.path.join(tmp.name, "data"))
    if args.smoke:
        args.batch_size, args.steps = min(args.batch_size, 16), min(args.steps, 12)

    device = torch.device("cuda" if on_gpu else "cpu")
    loader = stoke.Loader(
        args.data,
        args.batch_size,
        device="cuda" if on_gpu else "cpu",
        dtype="float16" if on_gpu else "float32",
        size=224 if not args.smoke else 64,
        drop_last=True,
    )
    classes = args.classes
    if args.smoke:
        classes = 4
        model = tiny_model(classes)
    elif args.model.startswith("timm:"):
        import timm

        model = timm.create_model(args.model[5:], num_classes=classes)
    else:
        import torchvision

        model = getattr(torchvision.models, args.model)(num_classes=classes)
    model = model.to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 if args.smoke else 0.2, momentum=0.9)
    scaler = torch.amp.GradScaler(enabled=on_gpu)
    loss_fn = nn.CrossEntropyLoss()
    stream = torch.cuda.current_stream() if on_gpu else None

    step, waits, steps_t, losses = 0, [], [], []
    epoch = 0
    t_step = time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)
        t_wait = time.perf_counter()
        for images, labels in loader:
            # DLPack: on CUDA the current stream waits on the batch's ready event (no host sync).
            x = torch.from_dlpack(images.__dlpack__(stream=stream.cuda_stream) if on_gpu else images)
            y = torch.from_dlpack(labels.__dlpack__(stream=stream.cuda_stream) if on_gpu else labels)
            waits.append(time.perf_counter() - t_wait)
            x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=torch.float16 if on_gpu else torch.bfloat16, enabled=on_gpu):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if on_gpu and step % 10 == 0:
                torch.cuda.synchronize()
            losses.append(float(loss.detach()) if not on_gpu or step % 10 == 0 else losses[-1])
            now = time.perf_counter()
            steps_t.append(now - t_step)
            t_step = now
            step += 1
            t_wait = time.perf_counter()
            if step >= args.steps:
                break
        epoch += 1
    if on_gpu:
        torch.cuda.synchronize()
    total = sum(steps_t[1:]) or 1e-9
    wait = sum(waits[1:])
    ips = args.batch_size * (len(steps_t) - 1) / total
    print(
        f"{step} steps of {args.batch_size} on {loader.backend}: {ips:.0f} images/s, "
        f"data wait {100 * wait / total:.1f}% of step time, loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
        f"replaced samples {len(loader.errors)}"
    )
    assert all(np.isfinite(losses)), f"non-finite loss: {losses}"
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
