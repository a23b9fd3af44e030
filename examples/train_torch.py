"""A PyTorch trainer fed by stoke against the same model alone: fed/alone, measured fairly.

    python examples/train_torch.py /data/imagenet/train                       # a GPU: ResNet-50
    python examples/train_torch.py /data/imagenet/train --model vit_b16       # a GPU: ViT-B/16
    python examples/train_torch.py --smoke                                     # CPU smoke test

It runs `--pairs` (default 3) interleaved (fed, alone) pairs. "fed" trains on stoke's batches;
"alone" trains the same model on one fixed batch already in memory (a copy of stoke's first
batch: same dtype, shape and strides), the rate stoke would have to keep up with. Both loops
are the same harness (`run_segment`) around the same step function: the same warm-up, the same
optimizer step, the same host sync plus loss read every `--sync-every` steps, the same
non-finite check of the input, the same NVML sampling; only where the batch comes from
differs. Each pair's fed/alone is printed, then their median and spread (min-max), then one
machine-readable line `RESULT {json}` (scripts/bundle-run.sh reads it with `--figure`).
fed/alone near 1 means the loader keeps up and costs the model nothing.

`--beside thread|process` adds a third segment to each pair, after its alone one: the model on
the fixed batch while a second stoke.Loader of the same settings makes batches at that pair's
fed rate and drops them (paced; `beside_loop`), in a thread of this process or in a process of
its own (`--beside-worker`, stoke without torch: its own CUDA context and host threads).
beside/alone is what stoke's work costs the model without waiting for its data; fed/alone
below beside/alone is the data dependency's share; thread against process tells whether
stoke's host threads in the trainer's process cost it (what a producer process handing batches
over through CUDA IPC would remove; issue 40 item 2). Each pair line then has its beside rate,
stoke's rate beside it (at most the fed rate; below it when stoke could not keep up) and
beside/alone, with their median and spread after.

Models: `resnet50` (torchvision; channels_last and bf16 autocast by default), `vit_b16` (timm's
vit_base_patch16_224, bf16 autocast: a step of few, large kernels, which shares the GPU with
stoke's kernels differently), `tiny` (a small CNN for the CPU), `timm:NAME` or another
torchvision name. With channels_last stoke is asked for NHWC (`layout="nhwc"`) and the model
gets `torch.from_dlpack(images).permute(0, 3, 1, 2)`: a channels_last-strided NCHW view of
stoke's memory, never a `.contiguous()` copy (asserted for every batch).

Without a dataset path, a small ImageNet-like set is generated with `stoke gen` (the CLI must
be built: `cargo build --release`, or STOKE_BIN) or with Pillow. `--device cpu` runs stoke's CPU
backend (the harness logic, not a speed figure); `--smoke` is `--device cpu --model tiny` with
small images and a few steps. `--preset deit` trains on stoke's DeiT recipe (mixup/cutmix soft
targets). `--preset dino` (or `dinov2`) trains DINO's multi-crop step on stoke's ten views per
image: the model (e.g. `--model timm:vit_small_patch16_224`, made with `dynamic_img_size` so it
takes the 96-pixel crops) runs one forward per resolution on each view group as one tensor
(`views[i].group`, no copy), an EMA teacher runs on the two global views, and the loss is DINO's
cross-entropy between the teacher's sharpened, centred outputs and the student's on every other
view (the head is the model's classifier: `--classes` outputs). The alone loop runs the same step
on a copy of the first groups. `--json` adds the older one-line JSON summary (medians) for scripts/bundle-questions.py.

Nothing here imports torch or stoke at module import: the pure helpers (summarize_pairs,
result_line, figure_from_log) are tested without either (tests/python/test_train_harness.py).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

RESULT_PREFIX = "RESULT "


# --- pure helpers (no torch): the pairs' summary and its lines -------------------------------


def summarize_pairs(pairs):
    """pairs: [(fed images/s, alone images/s or None)], in the order they ran. Returns the
    per-pair ratios, their median and spread (min, max), and the median rates. Ratios are
    taken pair by pair (each fed segment against the alone segment right after it, so slow
    drift of the machine cancels) and the median is of those ratios, not a ratio of medians."""
    if not pairs:
        raise ValueError("no pairs")
    rows = []
    for fed, alone in pairs:
        rows.append({"fed": fed, "alone": alone, "ratio": fed / alone if alone else None})
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    alones = [r["alone"] for r in rows if r["alone"]]
    return {
        "pairs": rows,
        "fed_median": statistics.median(r["fed"] for r in rows),
        "alone_median": statistics.median(alones) if alones else None,
        "fed_alone_median": statistics.median(ratios) if ratios else None,
        "fed_alone_min": min(ratios) if ratios else None,
        "fed_alone_max": max(ratios) if ratios else None,
    }


def pair_lines(summary):
    """Human lines: one per pair, then the median and the spread."""
    lines = []
    for i, r in enumerate(summary["pairs"], 1):
        if r["ratio"] is None:
            lines.append(f"pair {i}: fed {r['fed']:.0f} images/s (no alone segment)")
        else:
            text = f"pair {i}: fed {r['fed']:.0f} images/s, alone {r['alone']:.0f} images/s, fed/alone {r['ratio']:.3f}"
            if r.get("beside") is not None:
                text += (f"; beside {r['beside']:.0f} images/s (stoke beside at {r['beside_stoke_rate']:.0f} of "
                         f"{r['beside_target_rate']:.0f} images/s), beside/alone {r['beside_ratio']:.3f}")
            lines.append(text)
    if summary["fed_alone_median"] is not None:
        lines.append(
            f"fed/alone median {summary['fed_alone_median']:.3f} over {len(summary['pairs'])} pairs, "
            f"spread {summary['fed_alone_min']:.3f}-{summary['fed_alone_max']:.3f}; "
            f"median rates fed {summary['fed_median']:.0f}, alone {summary['alone_median']:.0f} images/s"
        )
    if summary.get("beside_alone_median") is not None:
        lines.append(f"beside/alone median {summary['beside_alone_median']:.3f}, spread "
                     f"{summary['beside_alone_min']:.3f}-{summary['beside_alone_max']:.3f}")
    return lines


def result_line(record):
    """The one machine-readable line: `RESULT ` and the record as compact JSON."""
    return RESULT_PREFIX + json.dumps(record, separators=(",", ":"), sort_keys=True)


def parse_result_lines(text):
    """Every RESULT record in a log, in order (lines that do not parse are skipped)."""
    out = []
    for line in text.splitlines():
        if line.startswith(RESULT_PREFIX):
            try:
                out.append(json.loads(line[len(RESULT_PREFIX):]))
            except ValueError:
                continue
    return out


def figure_from_log(text):
    """scripts/bundle-run.sh's figure for a step: the last RESULT record in one short line
    (model, recipe, fed/alone median and spread, each pair's ratio, median rates, data wait,
    utilization fed/alone). None when the log has no RESULT line (the run failed early)."""
    recs = parse_result_lines(text)
    if not recs:
        return None
    r = recs[-1]

    def f(v, fmt):
        return format(v, fmt) if v is not None else "-"

    s = f"{r.get('model')} {r.get('preset')}"
    if r.get("fed_alone_median") is not None:
        ratios = ",".join(f(p.get("ratio"), ".2f") for p in r.get("pairs", []))
        s += (f": fed/alone median {f(r['fed_alone_median'], '.3f')} "
              f"[{f(r.get('fed_alone_min'), '.3f')}-{f(r.get('fed_alone_max'), '.3f')}] x{len(r.get('pairs', []))} ({ratios})")
    if r.get("beside_alone_median") is not None:
        s += (f", beside({r.get('beside')})/alone {f(r['beside_alone_median'], '.3f')} "
              f"[{f(r.get('beside_alone_min'), '.3f')}-{f(r.get('beside_alone_max'), '.3f')}]")
    s += f", fed {f(r.get('fed_median'), '.0f')} / alone {f(r.get('alone_median'), '.0f')} img/s"
    if r.get("data_wait_share") is not None:
        s += f", wait {100 * r['data_wait_share']:.1f}%"
    if r.get("gpu_util_fed_pct") is not None:
        s += f", util {f(r.get('gpu_util_fed_pct'), '.0f')}/{f(r.get('gpu_util_alone_pct'), '.0f')}%"
    return s


def beside_summary(rows):
    """rows: [(beside images/s, alone images/s)] pair by pair -> the beside/alone median and
    spread (summarize_pairs' figures under beside_* names)."""
    s = summarize_pairs(rows)
    return {"beside_median": s["fed_median"], "beside_alone_median": s["fed_alone_median"],
            "beside_alone_min": s["fed_alone_min"], "beside_alone_max": s["fed_alone_max"]}


# --- stoke beside the model (--beside) -------------------------------------------------------


def beside_loop(batches, commands, reply, batch_size, now=time.perf_counter, sleep=time.sleep):
    """The worker of `--beside`: takes stoke's batches from `batches` and drops them, paced,
    while the model trains on its fixed batch elsewhere. `commands(block)` returns the next
    command, waiting for one when `block` (while paused), else None when none came (it is
    polled between batches): ("run", images/s), ("pause",) or ("quit",). `reply` is given
    ("running",) when a run starts, ("paused", images, seconds) when it ends (what was taken in
    what time: at most the rate, below it when stoke could not keep up), ("bye",) at quit. Batch
    k of a run (from 1) is taken no earlier than k * batch_size / rate after the run began, so
    stoke does the work of a fed segment at that segment's rate, and nothing while paused (its
    ring full, its threads waiting)."""
    rate = None
    while True:
        cmd = commands(rate is None)
        if cmd is not None:
            if cmd[0] == "quit":
                reply(("bye",))
                return
            if cmd[0] == "run":
                rate, t0, k = float(cmd[1]), now(), 0
                if not rate > 0:
                    raise ValueError(f"a beside rate must be positive, got {cmd[1]!r}")
                reply(("running",))
            elif cmd[0] == "pause":
                if rate is not None:
                    reply(("paused", k * batch_size, now() - t0))
                rate = None
            else:
                raise ValueError(f"unknown beside command {cmd!r}")
            continue
        wait = t0 + (k + 1) * batch_size / rate - now()
        if wait > 0:
            sleep(wait)
        next(batches)
        k += 1


def dropped_batches(loader):
    """A loader's batches, epoch after epoch, each dropped as soon as it is taken (back to
    stoke at once: nothing reads it)."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for batch in loader:
            del batch
            yield None
        epoch += 1


def beside_worker(config_json):
    """`--beside-worker CONFIG`: the process of `--beside process`. Makes the loader of the
    parent's settings (CONFIG: its resolved arguments as JSON), takes one batch (the pipeline
    started), says `BESIDE ready`, then runs beside_loop on commands read from stdin (`run
    RATE`, `pause`, `quit`), answering on stdout (`BESIDE running`, `BESIDE paused N SECONDS`,
    `BESIDE bye`). Imports stoke, not torch: this process is stoke's alone."""
    import queue
    import threading

    import stoke

    a = argparse.Namespace(**json.loads(config_json))
    loader = make_loader(stoke, a, a.device == "cuda", a.classes)
    batches = dropped_batches(loader)
    next(batches)
    inbox = queue.Queue()

    def read_stdin():
        for line in sys.stdin:
            inbox.put(tuple(line.split()))
        inbox.put(("quit",))

    threading.Thread(target=read_stdin, daemon=True).start()

    def commands(block):
        try:
            return inbox.get(block)
        except queue.Empty:
            return None

    def reply(r):
        print("BESIDE " + " ".join(str(v) for v in r), flush=True)

    reply(("ready",))
    beside_loop(batches, commands, reply, a.batch_size)
    return 0


class Beside:
    """stoke beside the model (`--beside thread|process`): a second stoke.Loader of the same
    settings whose batches are taken and dropped at a given rate (beside_loop) while the model
    trains on its fixed batch; in a thread of this process (`thread`), or in a process of its
    own (`process`: its own CUDA context, its host threads outside this process, as a
    producer process handing batches over through CUDA IPC would be). Paused between
    segments."""

    def __init__(self, mode, config, make):
        import queue

        self.mode = mode
        if mode == "thread":
            import threading

            self.inbox, self.outbox = queue.Queue(), queue.Queue()
            batches = dropped_batches(make())
            next(batches)

            def commands(block):
                try:
                    return self.inbox.get(block)
                except queue.Empty:
                    return None

            self.thread = threading.Thread(target=beside_loop, args=(batches, commands, self.outbox.put, config["batch_size"]),
                                           daemon=True)
            self.thread.start()
        else:
            self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--beside-worker", json.dumps(config)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            self._expect("ready")

    def _send(self, *cmd):
        if self.mode == "thread":
            self.inbox.put(cmd)
        else:
            self.proc.stdin.write(" ".join(str(c) for c in cmd) + "\n")
            self.proc.stdin.flush()

    def _expect(self, what):
        if self.mode == "thread":
            r = self.outbox.get(timeout=600)
        else:
            while True:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the beside process ended (exit {self.proc.wait()}) before saying {what!r}")
                if line.startswith("BESIDE "):
                    r = tuple(line.split()[1:])
                    break
        if r[0] != what:
            raise RuntimeError(f"the beside worker said {r!r}, not {what!r}")
        return r

    def run(self, rate):
        self._send("run", rate)
        self._expect("running")

    def pause(self):
        """(images taken, seconds) of the run that ends."""
        self._send("pause")
        r = self._expect("paused")
        return int(r[1]), float(r[2])

    def close(self):
        self._send("quit")
        self._expect("bye")
        if self.mode == "thread":
            self.thread.join()
        else:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


# --- data ------------------------------------------------------------------------------------


def make_dataset(root, count=96, classes=4):
    """A tiny ImageFolder: the stoke CLI's generator when it is built, else Pillow."""
    cli = os.environ.get("STOKE_BIN", "target/release/stoke")
    if os.path.exists(cli):
        subprocess.run([cli, "gen", root, "--count", str(count), "--classes", str(classes)], check=True, capture_output=True)
        return root
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
        for i in range(count // classes):
            px = rng.integers(0, 255, (64, 80, 3), dtype=np.uint8)
            px[..., c % 3] = np.linspace(0, 255, 80, dtype=np.uint8)  # a learnable cue per class
            Image.fromarray(px).save(os.path.join(root, f"class{c}", f"{i}.jpg"))
    return root


def hybrid_share(text):
    """`--gpu-hybrid-share` as `stoke.Loader` takes it: "off", "auto" or a fraction."""
    return text if text in ("off", "auto") else float(text)


def make_loader(stoke, a, on_gpu, classes):
    """The stoke.Loader of the run's settings (`a`: the parsed arguments; the fed loop's and a
    --beside worker's alike)."""
    return stoke.Loader(
        a.data,
        a.batch_size,
        device=a.device,
        dtype=a.input_dtype,
        layout="nhwc" if a.channels_last else "nchw",
        size=a.size,
        drop_last=True,
        preset=a.preset,
        epoch_ahead=not a.no_epoch_ahead,
        transcode_progressive=a.transcode_progressive,
        **({"num_classes": classes} if a.preset == "deit" else {}),
        **({"gpu_upsampling": a.gpu_upsampling, "gpu_wait": a.gpu_wait, "decoders": a.decoders,
            "gpu_bitstream": a.gpu_bitstream, "gpu_engine_gray": a.gpu_engine_gray,
            "gpu_engine_lanes": a.gpu_engine_lanes, "gpu_engine_ahead": a.gpu_engine_ahead,
            "gpu_hybrid_share": hybrid_share(a.gpu_hybrid_share)} if on_gpu else {}),
    )


def channels_last_view(torch, nhwc):
    """stoke's NHWC batch as the NCHW tensor a channels_last model takes: a permuted view whose
    strides are channels_last's, on the same memory. Asserted, so a copy or a wrong layout
    anywhere on the way fails loudly instead of costing time silently."""
    x = nhwc.permute(0, 3, 1, 2)
    assert x.is_contiguous(memory_format=torch.channels_last), (tuple(nhwc.shape), nhwc.stride())
    assert x.data_ptr() == nhwc.data_ptr(), "the NCHW view is not on stoke's memory"
    return x


def fed_batches(torch, loader, channels_last):
    """stoke's batches as torch tensors, epoch after epoch, forever (the harness takes what it
    needs). DLPack: torch passes its current stream to __dlpack__ (1 for the legacy default
    stream, whose handle is 0: DLPack refuses 0 as ambiguous), which then waits on the batch's
    ready event (no host sync). No copy: the tensors are views of stoke's ring slot."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for images, labels in loader:
            x = torch.from_dlpack(images)
            y = torch.from_dlpack(labels)
            del images, labels
            if channels_last:
                x = channels_last_view(torch, x)
            yield x, y
            # Drop the frame's references before the next batch is asked for: the batch goes
            # back to stoke once the step's kernels ran (at most max_held_batches are held).
            del x, y
        epoch += 1


def group_tensors(torch, views, channels_last):
    """stoke's views (a list of Tensors, group after group) as one torch tensor per group
    `[count * N, ...]`: each group's views lie one after another in one buffer, and
    `views[i].group` exports them whole (no concatenating copy, as DINO's MultiCropWrapper does
    with torch.cat)."""
    groups, i = [], 0
    while i < len(views):
        g = torch.from_dlpack(views[i].group)
        n = torch.from_dlpack(views[i]).shape[0]
        groups.append(channels_last_view(torch, g) if channels_last else g)
        i += g.shape[0] // n
    return tuple(groups)


def multiview_batches(torch, loader, channels_last):
    """fed_batches for a multi-view loader: (group tensors, labels), epoch after epoch."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for views, labels in loader:
            x = group_tensors(torch, views, channels_last)
            y = torch.from_dlpack(labels)
            del views, labels
            yield x, y
            del x, y
        epoch += 1


def fixed_batches(x, y):
    """The alone loop's source: the same batch every step (nothing to wait for)."""
    while True:
        yield x, y


# --- models ----------------------------------------------------------------------------------


def build_model(torch, name, classes, multicrop=False):
    nn = torch.nn
    if name == "tiny":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, classes),
        )
    if name == "vit_b16" or name.startswith("timm:"):
        import timm

        # No pretrained weights (no network on the GPU machine): a from-scratch step costs the same.
        kw = {"dynamic_img_size": True} if multicrop and "vit" in name else {}
        return timm.create_model("vit_base_patch16_224" if name == "vit_b16" else name[5:], num_classes=classes, **kw)
    import torchvision

    return getattr(torchvision.models, name)(num_classes=classes)


class UtilSampler:
    """GPU utilization (NVML's percent of time a kernel ran) sampled every 50 ms on a thread
    between start() and stop(), which returns that segment's mean; None where nvidia-ml-py is
    not installed or sampling is off. Runs in the fed and the alone segments alike, so its
    thread costs both the same."""

    def __init__(self, index=0, enabled=True):
        self.handle, self.thread = None, None
        if not enabled:
            return
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

        self.samples = []
        self.stop_flag = threading.Event()

        def loop():
            while not self.stop_flag.wait(0.05):
                self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def stop(self):
        if self.thread is None:
            return None
        self.stop_flag.set()
        self.thread.join()
        self.thread = None
        return sum(self.samples) / len(self.samples) if self.samples else None


# --- the harness -----------------------------------------------------------------------------


def run_segment(batches, step_fn, *, steps, warmup, sync, sync_every, batch_size, sampler=None):
    """One timed segment, the same for fed and alone: `warmup` untimed steps, a sync, then
    `steps` timed steps, a sync. After every `sync_every`-th step (counted from the segment's
    first step, so the same step numbers in both loops) the host syncs and reads the loss; at
    the end it syncs and reads the last loss. The clock runs from the sync after the warm-up to
    the sync after the last step. `waits` is the host's time in next(batches) per timed step
    (stoke's data wait when fed; ~0 when alone)."""
    losses, waits = [], []

    def one(i, timed):
        t = time.perf_counter()
        x, y = next(batches)
        if timed:
            waits.append(time.perf_counter() - t)
        loss = step_fn(x, y)
        del x, y
        if (i + 1) % sync_every == 0:
            sync()
            losses.append(float(loss.detach()))
        return loss

    for i in range(warmup):
        one(i, False)
    sync()
    if sampler is not None:
        sampler.start()
    t0 = time.perf_counter()
    loss = None
    for i in range(steps):
        loss = one(i, True)
    sync()
    seconds = time.perf_counter() - t0
    util = sampler.stop() if sampler is not None else None
    if loss is not None:
        losses.append(float(loss.detach()))
    return {
        "images_per_sec": batch_size * steps / seconds if steps else 0.0,
        "seconds": seconds,
        "wait_s": sum(waits),
        "losses": losses,
        "gpu_util_pct": util,
    }


def run_pairs(npairs, fed, alone, segment, beside=None):
    """`npairs` interleaved (fed, alone) segments; alone None runs fed ones only. `segment` is
    run_segment with everything but the source bound. `beside` (with alone): a third segment
    in each pair, after its alone one, `beside(fed segment)` (the model on the fixed batch with
    stoke working beside it at the fed segment's rate). Returns (fed, alone, beside) segments
    as they ran (None where a kind did not run)."""
    out = []
    for _ in range(npairs):
        f = segment(fed)
        a = segment(alone) if alone is not None else None
        b = beside(f) if beside is not None and alone is not None else None
        out.append((f, a, b))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?")
    ap.add_argument("--figure", action="store_true",
                    help="read a log of this script on stdin, print its last RESULT as one short line (scripts/bundle-run.sh)")
    ap.add_argument("--smoke", action="store_true", help="tiny model, CPU, small images, a few steps")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                    help="auto: cuda where torch sees a GPU (cpu with --smoke); cpu: stoke's CPU backend")
    ap.add_argument("--model", default="resnet50", help="resnet50, vit_b16 (timm vit_base_patch16_224), tiny, timm:NAME or a torchvision name")
    ap.add_argument("--pairs", type=int, default=3, help="interleaved (fed, alone) pairs; fed/alone is their median")
    ap.add_argument("--steps", type=int, default=100, help="timed steps in each segment (fed and alone alike)")
    ap.add_argument("--warmup-steps", type=int, default=10,
                    help="untimed steps before each segment's clock (fed and alone alike); the first ones also "
                         "autotune cuDNN and ramp the learning rate")
    ap.add_argument("--sync-every", type=int, default=10, help="host sync + loss read after every Nth step of a segment, in both loops")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--size", type=int, default=None, help="image side (default 224; 64 with --smoke)")
    ap.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                    help="channels_last model fed stoke's NHWC batches as a view (default: on for CNNs, off for ViT)")
    ap.add_argument("--input-dtype", choices=["float16", "bfloat16", "float32"], default=None,
                    help="stoke's output dtype (default float16 on a GPU, float32 on the CPU); the alone batch has it too")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--preset", default="train", choices=["train", "deit", "dino", "dinov2"],
                    help="stoke's recipe (deit: mixup soft targets; dino, dinov2: DINO's multi-crop step on ten views)")
    ap.add_argument("--synthetic-steps", type=int, default=None,
                    help="0: no alone segments (fed only); the alone segments otherwise run --steps, the same as fed")
    ap.add_argument("--json", action="store_true", help="also print the medians as one JSON line (scripts/bundle-questions.py)")
    ap.add_argument("--side-stream", action="store_true",
                    help="train on a CUDA stream of its own instead of the legacy default stream (which "
                         "synchronizes with every blocking stream): tells whether the model waits on "
                         "stoke's work through it")
    ap.add_argument("--stream-priority", choices=["default", "high"], default="default",
                    help="high: train on a side stream of the GPU's greatest priority (stoke's streams keep "
                         "the default, which is the lowest), so the model's kernels are scheduled before "
                         "stoke's when both wait for SMs; implies --side-stream")
    ap.add_argument("--gpu-upsampling", choices=["smooth", "nearest"], default="nearest",
                    help="nvJPEG's chroma upsampling (nearest: about twice the hardware engine's rate)")
    ap.add_argument("--gpu-wait", choices=["auto", "block"], default="auto",
                    help="how host threads wait for the GPU (block: CU_CTX_SCHED_BLOCKING_SYNC on the device's "
                         "context, stoke's waits and this trainer's syncs sleep instead of spinning)")
    ap.add_argument("--gpu-bitstream", choices=["host", "device"], default="host",
                    help="where stoke's hardware JPEG engine reads the compressed bytes (device: copies on the GPU, "
                         "NVJPEG_BACKEND_HARDWARE_DEVICE, whose host part may take fewer cores)")
    ap.add_argument("--gpu-engine-gray", action="store_true",
                    help="ask stoke's hardware JPEG engine for baseline gray JPEGs sampled 1x1 too (off: nvJPEG's "
                         "CUDA decoders take them, Huffman on the host); not GPU-verified")
    ap.add_argument("--gpu-engine-lanes", type=int, choices=[1, 2], default=1,
                    help="threads calling stoke's hardware JPEG engine at once, each with its own state and stream "
                         "(2: a second caller while one waits for nvJPEG's colour conversions, which queue behind "
                         "the model's kernels for SMs); not GPU-measured")
    ap.add_argument("--gpu-engine-ahead", action="store_true",
                    help="make stoke's hardware JPEG engine calls on a thread of their own, a batch ahead (the "
                         "engine starts on the next batch while the producer finishes this one); not GPU-measured")
    ap.add_argument("--transcode-progressive", action="store_true",
                    help="rewrite progressive JPEGs as baseline once, kept in RAM (stoke's hardware JPEG engine then "
                         "decodes them, not nvJPEG's CUDA decoders with Huffman on the host; the CPU backend's pixels "
                         "are the same); not GPU-verified")
    ap.add_argument("--decoders", choices=["all", "hw", "cuda"], default="all",
                    help="stoke's nvJPEG decoders (hw: the engine only, what it cannot take on the CPU route: "
                         "no nvJPEG CUDA-decoder kernels beside the model's)")
    ap.add_argument("--gpu-hybrid-share", default="off",
                    help="stoke's batched GPU-hybrid route beside the engine: off, auto (a share from the measured "
                         "rates, none while a batch waits for this trainer) or a fraction")
    ap.add_argument("--no-epoch-ahead", action="store_true",
                    help="stoke makes an epoch's batches only once it starts (by default the next epoch's first "
                         "batches are made as one ends, so the trainer does not wait at an epoch's start)")
    ap.add_argument("--amp-dtype", choices=["bf16", "fp16"], default=None,
                    help="autocast dtype on a GPU (default bf16 where the GPU has it: fp16 activations "
                         "overflowed from scratch at this rate, NaN losses in a third of the steps on an H200)")
    ap.add_argument("--beside", choices=["none", "thread", "process"], default="none",
                    help="a third segment in each pair: the model on the fixed batch while a second stoke.Loader of "
                         "the same settings makes batches at the pair's fed rate and drops them, in a thread of this "
                         "process or in a process of its own; beside/alone is what stoke's work costs the model "
                         "without the data dependency, and thread against process what stoke's host threads in the "
                         "trainer's process cost it (issue 40 item 2)")
    ap.add_argument("--beside-worker", metavar="CONFIG", help=argparse.SUPPRESS)
    ap.add_argument("--no-gpu-util", action="store_true",
                    help="do not sample GPU utilization with NVML during the timed steps (to check the sampling costs nothing)")
    args = ap.parse_args(argv)

    if args.beside_worker:
        return beside_worker(args.beside_worker)
    if args.figure:
        fig = figure_from_log(sys.stdin.read())
        if fig is None:
            return 1
        print(fig)
        return 0

    import torch

    import stoke

    if args.smoke:
        args.device = "cpu" if args.device == "auto" else args.device
        args.model = "tiny"
        args.batch_size = min(args.batch_size, 8)
        args.steps, args.warmup_steps = min(args.steps, 4), min(args.warmup_steps, 1)
        args.size = args.size or 64
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    on_gpu = args.device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no GPU")
    if args.model == "tiny":
        args.size = args.size or 64
    args.size = args.size or 224
    if args.channels_last is None:
        args.channels_last = not (args.model == "vit_b16" or args.model.startswith("timm:vit"))
    if args.input_dtype is None:
        args.input_dtype = "float16" if on_gpu else "float32"
    with_alone = args.synthetic_steps != 0
    if args.pairs < 1 or args.steps < 1 or args.sync_every < 1:
        ap.error("--pairs, --steps and --sync-every must be at least 1")
    if args.beside != "none" and not with_alone:
        ap.error("--beside runs beside the alone segments: not with --synthetic-steps 0")

    torch.manual_seed(0)
    tmp = None
    if args.data is None:
        tmp = tempfile.TemporaryDirectory()
        args.data = make_dataset(os.path.join(tmp.name, "data"))
    device = torch.device(args.device)
    if args.stream_priority == "high":
        args.side_stream = True
    if on_gpu and args.side_stream:
        # Everything after this (the model, torch.from_dlpack's stream, synchronize) uses it. A
        # priority beyond the device's range is clamped to its greatest.
        priority = -100 if args.stream_priority == "high" else 0
        torch.cuda.set_stream(torch.cuda.Stream(priority=priority))
    if on_gpu:
        torch.backends.cudnn.benchmark = True
    classes = 4 if args.model == "tiny" else args.classes
    loader = make_loader(stoke, args, on_gpu, classes)
    multicrop = args.preset in ("dino", "dinov2")
    model = build_model(torch, args.model, classes, multicrop)
    model = model.to(device, memory_format=torch.channels_last if args.channels_last else torch.contiguous_format)
    teacher = None
    if multicrop:
        import copy

        # DINO's teacher: the student's EMA, never trained by the optimizer.
        teacher = copy.deepcopy(model).requires_grad_(False)
        center = torch.zeros(classes, device=device)
    is_vit = args.model == "vit_b16" or args.model.startswith("timm:vit")
    if is_vit:
        # DeiT's AdamW at 5e-4 per 512 images, weight decay 0.05.
        base_lr = 5e-4 * args.batch_size / 512
        opt = torch.optim.AdamW(model.parameters(), lr=base_lr, weight_decay=0.05)
    else:
        # Goyal et al.'s rule, 0.1 per 256 images, reached by a linear warm-up over the first
        # --warmup-steps steps: from scratch at a higher rate, fp16 activations overflowed (NaN
        # losses) in the first hundred steps on an H200.
        base_lr = 0.1 if args.model == "tiny" else 0.1 * args.batch_size / 256
        opt = torch.optim.SGD(model.parameters(), lr=base_lr, momentum=0.9)
    # bf16 has fp32's range: ResNet-50 from scratch in fp16 autocast still overflowed after the
    # warm-up on an H200 (2026-11-26, 70 of 200 sampled losses NaN, the last one too; GradScaler
    # skipped those steps), so fp16 is the choice of a GPU without bf16 or of --amp-dtype fp16.
    if args.amp_dtype is None:
        args.amp_dtype = "bf16" if not on_gpu or torch.cuda.is_bf16_supported() else "fp16"
    amp_dtype = torch.bfloat16 if args.amp_dtype == "bf16" else torch.float16
    scaler = torch.amp.GradScaler(enabled=on_gpu and amp_dtype == torch.float16)
    if multicrop:
        def dino_loss(student, teacher_out, globals_n):
            """DINO's loss (main_dino.py's DINOLoss): the teacher's globals, centred and sharpened
            (temperature 0.04), against the student's every view (0.1), skipping a view paired
            with itself; the centre follows the teacher's mean (momentum 0.9)."""
            t = torch.softmax((teacher_out.float() - center) / 0.04, dim=-1).chunk(2)
            s_all = [torch.log_softmax(o.float() / 0.1, dim=-1) for o in student]
            views = [v for o in s_all for v in o.chunk(o.shape[0] // globals_n)]
            total, terms = 0.0, 0
            for i, ti in enumerate(t):
                for j, sj in enumerate(views):
                    if i != j:
                        total = total + torch.sum(-ti * sj, dim=-1).mean()
                        terms += 1
            center.mul_(0.9).add_(teacher_out.float().mean(0), alpha=0.1)
            return total / terms
    elif args.preset == "deit":
        def loss_fn(logits, target):  # timm's SoftTargetCrossEntropy: mixup/cutmix soft targets
            return torch.sum(-target * torch.log_softmax(logits.float(), dim=-1), dim=-1).mean()
    else:
        loss_fn = torch.nn.CrossEntropyLoss()

    # The non-finite check runs in BOTH loops, inside the timed steps, on every batch: it is
    # what makes the run's "0 non-finite input values" claim cover every batch stoke delivered
    # (checking only untimed batches would not), and in the alone loop the same reduction over
    # a tensor of the same shape and dtype costs the same, so it cancels in fed/alone. It is
    # counted on the device and read once at the end: no sync of its own.
    nonfinite = torch.zeros((), dtype=torch.int64, device=device)
    gstep = [0]  # steps taken over the whole run: the learning-rate ramp's clock

    def train_step(x, y):
        """The one step both loops run. The batch is handed to the model as it comes: no
        .contiguous(), no dtype cast outside autocast."""
        for t in x if multicrop else (x,):
            nonfinite.add_((~torch.isfinite(t)).sum())
        for g in opt.param_groups:
            g["lr"] = base_lr * min(1.0, (gstep[0] + 1) / max(1, args.warmup_steps))
        gstep[0] += 1
        with torch.autocast(device.type, dtype=amp_dtype, enabled=on_gpu):
            if multicrop:
                # One forward per resolution (DINO's MultiCropWrapper): globals, then locals.
                with torch.no_grad():
                    t_out = teacher(x[0])
                loss = dino_loss([model(g) for g in x], t_out, y.shape[0])
            else:
                loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if multicrop:
            with torch.no_grad():  # the teacher's EMA, momentum 0.996 (DINO's default)
                t_params, s_params = list(teacher.parameters()), list(model.parameters())
                torch._foreach_mul_(t_params, 0.996)
                torch._foreach_add_(t_params, s_params, alpha=0.004)
        return loss

    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    fed = (multiview_batches if multicrop else fed_batches)(torch, loader, args.channels_last)
    # The alone loop's batch: a copy of stoke's first batch, made before any clock runs (clone
    # keeps the strides: channels_last when fed is). Same dtype, shape, layout and values as
    # the fed batches, so the two loops run the same kernels.
    x0, y0 = next(fed)
    fixed = (tuple(t.clone() for t in x0) if multicrop else x0.clone(), y0.clone())
    del x0, y0
    if args.channels_last:
        for t in fixed[0] if multicrop else (fixed[0],):
            assert t.is_contiguous(memory_format=torch.channels_last), t.stride()
    alone = fixed_batches(*fixed) if with_alone else None
    sampler = UtilSampler(enabled=on_gpu and not args.no_gpu_util)

    def segment(batches):
        return run_segment(batches, train_step, steps=args.steps, warmup=args.warmup_steps, sync=sync,
                           sync_every=args.sync_every, batch_size=args.batch_size, sampler=sampler)

    beside, beside_segment = None, None
    if args.beside != "none":
        config = {k: v for k, v in vars(args).items() if k not in ("beside_worker",)}
        config["classes"] = classes
        beside = Beside(args.beside, config, lambda: make_loader(stoke, args, on_gpu, classes))

        def beside_segment(fed_seg):
            # stoke beside at the rate it fed the model in this pair's fed segment.
            beside.run(fed_seg["images_per_sec"])
            r = segment(alone)
            images, secs = beside.pause()
            r["stoke_rate"], r["target_rate"] = images / secs if secs > 0 else 0.0, fed_seg["images_per_sec"]
            return r

    segments = run_pairs(args.pairs, fed, alone, segment, beside_segment)
    if beside is not None:
        beside.close()
    fed.close()
    del fed, alone, fixed
    sync()

    summary = summarize_pairs([(f["images_per_sec"], a["images_per_sec"] if a else None) for f, a, _ in segments])
    for row, (f, a, b) in zip(summary["pairs"], segments):
        row["fed_wait_share"] = f["wait_s"] / f["seconds"]
        row["gpu_util_fed_pct"], row["gpu_util_alone_pct"] = f["gpu_util_pct"], a["gpu_util_pct"] if a else None
        if b is not None:
            row.update(beside=b["images_per_sec"], beside_ratio=b["images_per_sec"] / a["images_per_sec"],
                       beside_stoke_rate=b["stoke_rate"], beside_target_rate=b["target_rate"],
                       gpu_util_beside_pct=b["gpu_util_pct"])
    if beside is not None:
        summary.update(beside_summary([(b["images_per_sec"], a["images_per_sec"]) for _, a, b in segments]))
    fed_secs = sum(f["seconds"] for f, _, _ in segments)
    wait_share = sum(f["wait_s"] for f, _, _ in segments) / fed_secs

    def mean(vals):
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    util_fed = mean(f["gpu_util_pct"] for f, _, _ in segments)
    util_alone = mean(a["gpu_util_pct"] for _, a, _ in segments if a)
    losses = [v for segs in segments for seg in segs if seg for v in seg["losses"]]
    fed_losses = [v for f, _, _ in segments for v in f["losses"]]
    bad_inputs = int(nonfinite)
    bad_losses = sum(1 for v in losses if v != v or v in (float("inf"), float("-inf")))
    s = loader.stats()

    line = (
        f"{args.model}: {args.pairs} pairs of {args.steps} timed steps of {args.batch_size} on {loader.backend} "
        f"({args.preset}, {args.input_dtype} {'NHWC as a channels_last view' if args.channels_last else 'NCHW'}): "
        f"fed {summary['fed_median']:.0f} images/s (median), data wait {100 * wait_share:.1f}% of fed step time, "
        f"loss {fed_losses[0]:.3f} -> {fed_losses[-1]:.3f}, replaced samples {len(loader.errors)}, "
        f"non-finite input values {bad_inputs}, non-finite sampled losses {bad_losses}"
    )
    if util_fed is not None:
        line += f", GPU utilization fed {util_fed:.0f}%" + (f" / alone {util_alone:.0f}%" if util_alone is not None else "")
    if on_gpu:
        line += ", on the legacy default stream" if not args.side_stream else (
            ", on a side stream of the greatest priority" if args.stream_priority == "high" else ", on a side stream")
        line += f", {args.gpu_upsampling} chroma upsampling, {args.gpu_wait} GPU waits, {args.amp_dtype} autocast"
    print(line, flush=True)
    for text in pair_lines(summary):
        print(text, flush=True)
    record = {
        "model": args.model, "preset": args.preset, "device": args.device, "backend": loader.backend,
        "batch_size": args.batch_size, "steps": args.steps, "warmup_steps": args.warmup_steps,
        "sync_every": args.sync_every, "input_dtype": args.input_dtype,
        "layout": "nhwc-view" if args.channels_last else "nchw", "channels_last": args.channels_last,
        "amp_dtype": args.amp_dtype if on_gpu else None,
        "side_stream": bool(on_gpu and args.side_stream),
        "stream_priority": args.stream_priority if on_gpu else None,
        "gpu_wait": args.gpu_wait if on_gpu else None,
        "gpu_upsampling": args.gpu_upsampling if on_gpu else None,
        "epoch_ahead": not args.no_epoch_ahead,
        "decoders": args.decoders if on_gpu else None,
        "gpu_hybrid_share": args.gpu_hybrid_share if on_gpu else None,
        "decoded_gpu_hybrid_batched": s.get("decoded_gpu_hybrid_batched"),
        "gpu_hybrid_yielded_batches": s.get("gpu_hybrid_yielded_batches"),
        "gpu_bitstream": args.gpu_bitstream if on_gpu else None,
        "gpu_engine_gray": args.gpu_engine_gray if on_gpu else None,
        "gpu_engine_lanes": args.gpu_engine_lanes if on_gpu else None,
        "gpu_engine_ahead": args.gpu_engine_ahead if on_gpu else None,
        "transcode_progressive": args.transcode_progressive,
        "beside": args.beside if args.beside != "none" else None,
        "transcoded_rewrites": s.get("transcoded_rewrites"), "transcoded_kept": s.get("transcoded_kept"),
        "bitstream_copies": s.get("bitstream_copies"),
        "nvjpeg_device_bytes": s.get("nvjpeg_device_bytes"), "nvjpeg_pinned_bytes": s.get("nvjpeg_pinned_bytes"),
        "nvjpeg_allocations": s.get("nvjpeg_allocations"),
        **summary,
        "data_wait_share": wait_share, "gpu_util_fed_pct": util_fed, "gpu_util_alone_pct": util_alone,
        "nonfinite_input_values": bad_inputs, "nonfinite_sampled_losses": bad_losses,
        "replaced": len(loader.errors),
    }
    print(result_line(record), flush=True)
    if args.json:
        # The older summary (scripts/bundle-questions.py's "trainer" reads these keys): medians.
        print(json.dumps({
            "model": args.model, "preset": args.preset, "batch_size": args.batch_size,
            "steps": args.steps * args.pairs, "pairs": args.pairs,
            "side_stream": bool(on_gpu and args.side_stream),
            "stream_priority": args.stream_priority if on_gpu else None,
            "gpu_upsampling": args.gpu_upsampling if on_gpu else None,
            "gpu_wait": args.gpu_wait if on_gpu else None,
            "amp_dtype": args.amp_dtype if on_gpu else None,
            "timed_steps": args.steps * args.pairs, "images_per_sec": summary["fed_median"], "data_wait_share": wait_share,
            "gpu_utilization_pct": util_fed, "model_alone_images_per_sec": summary["alone_median"],
            "fed_alone_median": summary["fed_alone_median"],
            "loss_first": fed_losses[0], "loss_last": fed_losses[-1], "replaced": len(loader.errors),
            "nonfinite_input_values": bad_inputs, "nonfinite_sampled_losses": bad_losses,
            "backend": loader.backend, "stoke_consumer_wait_s": s.get("consumer_wait_s"),
            "stoke_device_bytes": s.get("device_bytes"), "stoke_pinned_bytes": s.get("pinned_bytes"),
            "torch_max_allocated_bytes": torch.cuda.max_memory_allocated() if on_gpu else None,
        }), flush=True)
    # stoke's batches must be finite; a loss may overflow in fp16 now and then (GradScaler skips
    # that step), but the run must end finite.
    assert bad_inputs == 0, f"{bad_inputs} non-finite values in stoke's batches"
    assert losses[-1] == losses[-1] and abs(losses[-1]) != float("inf"), f"the last loss is not finite: {losses}"
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
