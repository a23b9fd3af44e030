"""A PyTorch training loop fed by stoke: torchvision ResNet-50 (or timm), AMP, channels_last,
batches through DLPack without a copy, and the share of each step spent waiting for data.

    python examples/train_torch.py /data/imagenet/train --steps 200            # a GPU
    python examples/train_torch.py --smoke                                      # CPU smoke test

Without a dataset path, a small ImageNet-like set is generated with `stoke gen` (the CLI must
be built: `cargo build --release`) or with Pillow. `--smoke` trains a tiny CNN for a few steps
on the CPU backend: it checks the plumbing (shapes, dtypes, labels, loss going down), not speed.

On a GPU it reports images/s over the timed steps (after --warmup-steps), the share of step
time the host spent waiting for stoke's next batch, GPU utilization (NVML, sampled every 50 ms
over the timed steps, when nvidia-ml-py is installed) and, for reference, the same model's
rate on one fixed device batch (no loader at all): fed/alone near 1 means the loader keeps up.
`--preset deit` trains on stoke's DeiT recipe (mixup/cutmix soft targets, timm's
SoftTargetCrossEntropy); `--json` adds the figures as one JSON line.
"""

import argparse
import json
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
        subprocess.run([cli, "gen", root, "--count", str(count), "--classes", str(classes)], check=True, capture_output=True)
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


class UtilSampler:
    """GPU utilization (NVML's percent of time a kernel ran) sampled every 50 ms on a thread,
    between start() and stop(); None where nvidia-ml-py is not installed."""

    def __init__(self, index=0):
        self.samples, self.handle, self.thread = [], None, None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001 - no NVML: utilization is simply not reported
            self.handle = None

    def start(self):
        if self.handle is None:
            return
        import threading

        self.stop_flag = threading.Event()

        def loop():
            while not self.stop_flag.wait(0.05):
                self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def stop(self):
        if self.thread is not None:
            self.stop_flag.set()
            self.thread.join()
        return sum(self.samples) / len(self.samples) if self.samples else None


def soft_cross_entropy(logits, target):
    """timm's SoftTargetCrossEntropy: the loss for mixup/cutmix soft targets."""
    return torch.sum(-target * torch.log_softmax(logits.float(), dim=-1), dim=-1).mean()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?")
    ap.add_argument("--smoke", action="store_true", help="tiny model, CPU, a few steps")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup-steps", type=int, default=10, help="steps not timed (cuDNN autotuning, allocator)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--model", default="resnet50", help="torchvision name, or timm:NAME")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--preset", default="train", choices=["train", "deit"], help="stoke's recipe (deit: mixup soft targets)")
    ap.add_argument("--synthetic-steps", type=int, default=None,
                    help="then time the model alone on one fixed device batch (default 50 on a GPU, 0 otherwise)")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    ap.add_argument("--side-stream", action="store_true",
                    help="train on a CUDA stream of its own instead of the legacy default stream (which "
                         "synchronizes with every blocking stream): tells whether the model waits on "
                         "stoke's work through it")
    ap.add_argument("--gpu-upsampling", choices=["smooth", "nearest"], default="nearest",
                    help="nvJPEG's chroma upsampling (nearest: about twice the hardware engine's rate)")
    ap.add_argument("--gpu-wait", choices=["auto", "block"], default="auto",
                    help="how host threads wait for the GPU (block: CU_CTX_SCHED_BLOCKING_SYNC on the device's "
                         "context, stoke's waits and this trainer's sleep instead of spinning)")
    ap.add_argument("--amp-dtype", choices=["bf16", "fp16"], default=None,
                    help="autocast dtype on a GPU (default bf16 where the GPU has it: fp16 activations "
                         "overflowed from scratch at this rate, NaN losses in a third of the steps on an H200)")
    ap.add_argument("--no-gpu-util", action="store_true",
                    help="do not sample GPU utilization with NVML during the timed steps (to check the sampling costs nothing)")
    args = ap.parse_args(argv)

    on_gpu = torch.cuda.is_available() and not args.smoke
    tmp = None
    if args.data is None:
        tmp = tempfile.TemporaryDirectory()
        args.data = make_dataset(os.path.join(tmp.name, "data"))
    if args.smoke:
        args.batch_size, args.steps, args.warmup_steps = min(args.batch_size, 16), min(args.steps, 12), 1
    if args.synthetic_steps is None:
        args.synthetic_steps = 50 if on_gpu else 0

    device = torch.device("cuda" if on_gpu else "cpu")
    if on_gpu and args.side_stream:
        # Everything after this (the model, torch.from_dlpack's stream, synchronize) uses it.
        torch.cuda.set_stream(torch.cuda.Stream())
    if on_gpu:
        torch.backends.cudnn.benchmark = True
    classes = 4 if args.smoke else args.classes
    loader = stoke.Loader(
        args.data,
        args.batch_size,
        device="cuda" if on_gpu else "cpu",
        dtype="float16" if on_gpu else "float32",
        size=224 if not args.smoke else 64,
        drop_last=True,
        preset=args.preset,
        **({"num_classes": classes} if args.preset == "deit" else {}),
        **({"gpu_upsampling": args.gpu_upsampling, "gpu_wait": args.gpu_wait} if on_gpu else {}),
    )
    if args.smoke:
        model = tiny_model(classes)
    elif args.model.startswith("timm:"):
        import timm

        model = timm.create_model(args.model[5:], num_classes=classes)
    else:
        import torchvision

        model = getattr(torchvision.models, args.model)(num_classes=classes)
    model = model.to(device, memory_format=torch.channels_last)
    # Goyal et al.'s rule, 0.1 per 256 images, reached by a linear warm-up over the untimed
    # steps: from scratch at a higher rate, fp16 activations overflowed (NaN losses) in the
    # first hundred steps on an H200.
    base_lr = 0.1 if args.smoke else 0.1 * args.batch_size / 256
    opt = torch.optim.SGD(model.parameters(), lr=base_lr, momentum=0.9)
    # bf16 has fp32's range: ResNet-50 from scratch in fp16 autocast still overflowed after the
    # warm-up on an H200 (2026-11-26, 70 of 200 sampled losses NaN, the last one too; GradScaler
    # skipped those steps), so fp16 is the choice of a GPU without bf16 or of --amp-dtype fp16.
    if args.amp_dtype is None:
        args.amp_dtype = "bf16" if not on_gpu or torch.cuda.is_bf16_supported() else "fp16"
    amp_dtype = torch.bfloat16 if args.amp_dtype == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(enabled=on_gpu and amp_dtype == torch.float16)
    loss_fn = soft_cross_entropy if args.preset == "deit" else nn.CrossEntropyLoss()

    # Non-finite values in stoke's batches, counted on the device (read once at the end).
    nonfinite = torch.zeros((), dtype=torch.int64, device=device)

    def train_step(x, y, step=None):
        if step is not None:
            nonfinite.add_((~torch.isfinite(x)).sum())
            for g in opt.param_groups:
                g["lr"] = base_lr * min(1.0, (step + 1) / max(1, args.warmup_steps))
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=on_gpu):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    util = UtilSampler() if on_gpu and not args.no_gpu_util else None
    step, waits, steps_t, losses = 0, [], [], []
    epoch = 0
    t_step = time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)
        t_wait = time.perf_counter()
        for images, labels in loader:
            # DLPack: torch passes its current stream to __dlpack__ (1 for the legacy default
            # stream, whose handle is 0: DLPack refuses 0 as ambiguous), which then waits on the
            # batch's ready event (no host sync).
            x = torch.from_dlpack(images)
            y = torch.from_dlpack(labels)
            waits.append(time.perf_counter() - t_wait)
            loss = train_step(x, y, step)
            del x, y, images, labels  # the batch goes back to stoke once the step's kernels ran
            if on_gpu and step % 10 == 0:
                torch.cuda.synchronize()
            losses.append(float(loss.detach()) if not on_gpu or step % 10 == 0 else losses[-1])
            now = time.perf_counter()
            steps_t.append(now - t_step)
            t_step = now
            step += 1
            if util is not None and step == args.warmup_steps:
                util.start()
            t_wait = time.perf_counter()
            if step >= args.steps:
                break
        epoch += 1
    if on_gpu:
        torch.cuda.synchronize()
    gpu_util = util.stop() if util is not None else None
    timed = steps_t[args.warmup_steps:] or steps_t[1:]
    total = sum(timed) or 1e-9
    wait = sum(waits[len(waits) - len(timed):])
    ips = args.batch_size * len(timed) / total

    # The model alone on one fixed device batch: the rate stoke would have to keep up with.
    alone = None
    if args.synthetic_steps > 0:
        x = torch.randn(args.batch_size, 3, 224, 224, device=device, dtype=torch.float16)
        if args.preset == "deit":
            y = torch.softmax(torch.randn(args.batch_size, classes, device=device), -1)
        else:
            y = torch.randint(0, classes, (args.batch_size,), device=device)
        for _ in range(5):
            train_step(x, y)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.synthetic_steps):
            train_step(x, y)
        torch.cuda.synchronize()
        alone = args.batch_size * args.synthetic_steps / (time.perf_counter() - t0)

    bad_inputs = int(nonfinite)
    bad_losses = sum(1 for v in losses if not np.isfinite(v))
    s = loader.stats()
    line = (
        f"{step} steps of {args.batch_size} on {loader.backend} ({args.preset}): {ips:.0f} images/s, "
        f"data wait {100 * wait / total:.1f}% of step time, loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
        f"replaced samples {len(loader.errors)}, non-finite input values {bad_inputs}, non-finite sampled losses {bad_losses}"
    )
    if gpu_util is not None:
        line += f", GPU utilization {gpu_util:.0f}%"
    if on_gpu:
        line += ", on a side stream" if args.side_stream else ", on the legacy default stream"
        line += f", {args.gpu_upsampling} chroma upsampling, {args.gpu_wait} GPU waits, {args.amp_dtype} autocast"
    if alone:
        line += f"; model alone on a fixed batch {alone:.0f} images/s (fed/alone {ips / alone:.2f})"
    print(line, flush=True)
    if args.json:
        print(json.dumps({
            "model": "tiny-cnn" if args.smoke else args.model, "preset": args.preset, "batch_size": args.batch_size, "steps": step,
            "side_stream": bool(on_gpu and args.side_stream),
            "gpu_upsampling": args.gpu_upsampling if on_gpu else None,
            "gpu_wait": args.gpu_wait if on_gpu else None,
            "amp_dtype": args.amp_dtype if on_gpu else None,
            "timed_steps": len(timed), "images_per_sec": ips, "data_wait_share": wait / total,
            "gpu_utilization_pct": gpu_util, "model_alone_images_per_sec": alone,
            "loss_first": losses[0], "loss_last": losses[-1], "replaced": len(loader.errors),
            "nonfinite_input_values": bad_inputs, "nonfinite_sampled_losses": bad_losses,
            "backend": loader.backend, "stoke_consumer_wait_s": s.get("consumer_wait_s"),
            "stoke_device_bytes": s.get("device_bytes"), "stoke_pinned_bytes": s.get("pinned_bytes"),
            "torch_max_allocated_bytes": torch.cuda.max_memory_allocated() if on_gpu else None,
        }), flush=True)
    # stoke's batches must be finite; a loss may overflow in fp16 now and then (GradScaler skips
    # that step), but the run must end finite.
    assert bad_inputs == 0, f"{bad_inputs} non-finite values in stoke's batches"
    assert np.isfinite(losses[-1]), f"the last loss is not finite: {losses}"
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
