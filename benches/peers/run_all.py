"""Run stoke and every peer on the same dataset in one call, print one table with stoke's ratio
to each, and append the rows to BENCHMARKS.md.

On a machine with a CUDA GPU and torch: `stoke bench --backend cuda --dtype f16` against
  1. torch_dataloader.py (DataLoader + Pillow + torchvision, workers swept),
  2. torchvision_gpu.py (decode_jpeg on cuda, batched, + transforms.v2 on GPU tensors),
  3. nvimgcodec_gpu.py (where the nvImageCodec wheel is installed).
Without a GPU: `stoke bench --backend cpu --dtype f32` against
  1. pillow_cpu.py (Pillow + numpy in worker processes; written with the CPU backend),
  2. dali_cpu.py (NVIDIA DALI's CPU pipeline, device_id=None, --threads = the cores). It runs
     with --dali-python (default $STOKE_DALI_PYTHON, else this interpreter), e.g. a venv with
     `pip install nvidia-dali-cuda120`; left out of the default CPU set (with a note) when that
     interpreter cannot import DALI, run (and failing loudly) when named in --peers.

Usage:
  python3 benches/peers/run_all.py [--dataset DIR | --count N] [--stoke PATH] [--epochs E]
      [--peers torch,torchvision,nvimgcodec,pillow,dali] [--dali-python PYTHON]
      [--benchmarks BENCHMARKS.md] [--json-out FILE] [--recipe train|deit]
`--recipe deit` compares DeiT's training recipe: `stoke bench --preset deit` against the
DataLoader peer with timm's DeiT transform and Mixup/CutMix (torch_dataloader.py --recipe deit,
timm installed); the other peers do not implement it and are refused.
Without --dataset it writes the ImageNet-like set with `stoke gen` (seed 0) into
--gen-dir (default: $XDG_CACHE_HOME/stoke/peers-n{count}) once and reuses it.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

GPU_PEERS = {
    "torch": "torch_dataloader.py",
    "torchvision": "torchvision_gpu.py",
    "nvimgcodec": "nvimgcodec_gpu.py",
}
CPU_PEERS = {"pillow": "pillow_cpu.py", "dali": "dali_cpu.py"}
LABELS = {"pillow": "pillow_cpu.py (Pillow + numpy, 2 processes)", "dali": "dali_cpu.py (DALI CPU pipeline)"}


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_info():
    """(name, driver) of GPU 0 from nvidia-smi, or None."""
    if not shutil.which("nvidia-smi"):
        return None
    out = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0"])
    if not out or "," not in out:
        return None
    name, driver = [s.strip() for s in out.split(",", 1)]
    return name, driver


def cpu_info():
    model = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def has_torch_cuda():
    code = "import torch, torchvision; print(torch.cuda.is_available())"
    return sh([sys.executable, "-c", code]) == "True"


def can_import(python, module):
    try:
        return subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def run_json(cmd, timeout):
    """Run `cmd`, pass stderr through, return the JSON object on the last stdout line."""
    print("+ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time of the whole command (its worker processes included, once they are reaped):
    # on a shared machine, images per CPU-second compares loaders fairly when wall-clock
    # shares differ.
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    if p.returncode != 0 or not lines:
        return {"error": f"exit status {p.returncode}", "stdout_tail": lines[-3:]}
    try:
        r = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": "last stdout line is not JSON", "stdout_tail": lines[-3:]}
    r["command_cpu_seconds"] = cpu_s
    return r


def ensure_dataset(args):
    if args.dataset:
        return args.dataset
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = args.gen_dir or os.path.join(cache, "stoke", f"peers-n{args.count}")
    if not os.path.isfile(os.path.join(d, ".complete")):
        subprocess.run([args.stoke, "gen", d, "--count", str(args.count)], check=True)
        open(os.path.join(d, ".complete"), "w").close()
    return d


def commit_id(args):
    if args.commit:
        return args.commit
    return sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]) or os.environ.get("STOKE_COMMIT", "unknown")


def append_rows(path, rows):
    header = (
        "| date (UTC) | device | driver | commit | loader | command | images/s | stoke ÷ loader | images per CPU-s (whole command) |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    title = "## Peers, side by side (benches/peers/run_all.py)"
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    if title not in text:
        text = text.rstrip("\n") + f"\n\n{title}\n\n{header}"
    # The rows go at the end of the peers table, wherever that section stands in the file:
    # after its header line, the last consecutive table line.
    lines = text.splitlines(keepends=True)
    at = next(i for i, l in enumerate(lines) if l.startswith(title))
    at = next(i for i in range(at, len(lines)) if lines[i].startswith("| ---")) + 1
    while at < len(lines) and lines[at].startswith("|"):
        at += 1
    lines[at:at] = rows
    with open(path, "w") as f:
        f.write("".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset")
    ap.add_argument("--count", type=int, default=1280, help="images to generate when no --dataset")
    ap.add_argument("--gen-dir")
    ap.add_argument("--stoke", default=os.environ.get("STOKE_BIN") or os.path.join(ROOT, "target", "release", "stoke"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--warmup-batches", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--workers", default="1,2,4,8,12,16", help="DataLoader worker sweep")
    ap.add_argument("--peers", help="comma-separated subset of: " + ",".join([*GPU_PEERS, *CPU_PEERS]))
    ap.add_argument("--cpu", action="store_true", help="compare on the CPU even when a GPU is there")
    ap.add_argument("--dali-python", default=os.environ.get("STOKE_DALI_PYTHON") or sys.executable,
                    help="python that runs dali_cpu.py, one that imports nvidia.dali "
                         "(default: $STOKE_DALI_PYTHON, else this interpreter)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per peer")
    ap.add_argument("--benchmarks", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--json-out")
    ap.add_argument("--commit")
    ap.add_argument("--gpu-upsampling", choices=["smooth", "nearest"], default="nearest",
                    help="stoke's chroma upsampling on the GPU (nearest, the default: nvJPEG's, what the GPU peers decode with; "
                         "smooth: interpolated, as the CPU backend)")
    ap.add_argument("--recipe", default="train", choices=["train", "deit"],
                    help="train: RandomResizedCrop + flip + normalize; deit: DeiT's recipe (stoke --preset deit vs timm)")
    args = ap.parse_args()
    if not (os.path.isfile(args.stoke) or shutil.which(args.stoke)):
        raise SystemExit(f"stoke binary not found at {args.stoke}: build with `cargo build --release` or pass --stoke")

    gpu = None if args.cpu else gpu_info()
    on_gpu = gpu is not None and has_torch_cuda()
    dataset = ensure_dataset(args)
    device = f"{gpu[0]} + {cpu_info()}" if on_gpu else cpu_info()
    driver = gpu[1] if on_gpu else "-"
    peers = GPU_PEERS if on_gpu else CPU_PEERS
    if args.peers:
        wanted = args.peers.split(",")
        peers = {k: v for k, v in {**GPU_PEERS, **CPU_PEERS}.items() if k in wanted}
    if args.recipe == "deit":
        other = sorted(k for k in peers if k != "torch")
        if other or not peers:
            raise SystemExit(f"--recipe deit: only the torch DataLoader peer implements it (--peers torch), not {other}")

    common = ["--epochs", str(args.epochs), "--warmup-batches", str(args.warmup_batches),
              "--batch-size", str(args.batch_size)]
    backend = (["--backend", "cuda", "--dtype", "f16", "--gpu-upsampling", args.gpu_upsampling] if on_gpu
               else ["--backend", "cpu", "--dtype", "f32"])
    if "pillow" in peers:
        common[common.index("--warmup-batches") + 1] = "0"
    stoke_cmd = [args.stoke, "bench", dataset, "--preset", args.recipe, "--size", "224", "--layout", "nchw",
                 *backend, *common, "--json"]
    results = {"stoke": (stoke_cmd, run_json(stoke_cmd, args.timeout))}
    for name, script in peers.items():
        path = os.path.join(HERE, script)
        if not os.path.exists(path):
            results[name] = ([path], {"skipped": f"{script} not found"})
            continue
        if name == "dali" and not args.peers and not can_import(args.dali_python, "nvidia.dali"):
            results[name] = ([args.dali_python, path], {"skipped": f"{args.dali_python} cannot import nvidia.dali "
                                                                  "(--dali-python / STOKE_DALI_PYTHON)"})
            continue
        if name == "pillow":
            # pillow_cpu.py (written with the CPU backend) times from its pool's start, with no
            # warm-up: it takes only --epochs and --batch-size, and stoke runs with
            # --warmup-batches 0 in this comparison so both clocks include start-up.
            cmd = [sys.executable, path, dataset, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]
        elif name == "dali":
            # The same --warmup-batches as stoke's run (0 when pillow runs beside it); its
            # --threads defaults to the cores, as stoke's --threads 0.
            cmd = [args.dali_python, path, dataset, *common]
        else:
            cmd = [sys.executable, path, dataset, *common]
        if name == "torch":
            cmd += ["--workers", args.workers, "--recipe", args.recipe]
            if not on_gpu:
                cmd += ["--device", "cpu"]
        results[name] = (cmd, run_json(cmd, args.timeout))

    stoke_ips = results["stoke"][1].get("images_per_sec")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    commit = commit_id(args)
    rows = []
    print(f"\n{device} | driver {driver} | commit {commit} | dataset {dataset}")
    print(f"{'loader':<46} {'images/s':>10} {'stoke ÷':>9} {'img/CPU-s':>10}  notes")
    for name, (cmd, r) in results.items():
        ips = r.get("images_per_sec")
        ratio = (stoke_ips / ips) if (stoke_ips and ips) else None
        note = r.get("error") or r.get("skipped") or ""
        if name == "torch" and "sweep" in r:
            note = "workers " + ", ".join(f"{s['workers']}: {s['images_per_sec']:.0f}" for s in r["sweep"])
        up = f", {r['gpu_upsampling']} upsampling" if name == "stoke" and r.get("gpu_upsampling") else ""
        label = f"stoke ({r.get('backend', backend[1])}{up})" if name == "stoke" else r.get("peer", LABELS.get(name, name))
        cpu_s = r.get("command_cpu_seconds")
        per_cpu = r["images"] / cpu_s if cpu_s and r.get("images") else float("nan")
        print(f"{label:<46} {ips if ips is not None else float('nan'):>10.1f} "
              f"{(f'{ratio:.2f}x' if ratio else '-'):>9} {per_cpu:>10.1f}  {note}")
        if ips is None:
            continue
        shown = " ".join(shlex.quote(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c) for c in cmd)
        shown = shown.replace(dataset, "DATASET")
        ratio_s = "1.00 (reference)" if name == "stoke" else (f"{ratio:.2f}" if ratio else "-")
        cpu_s = r.get("command_cpu_seconds")
        per_cpu = f"{r['images'] / cpu_s:.1f}" if cpu_s and r.get("images") else "-"
        rows.append(f"| {date} | {device} | {driver} | {commit} | {label} | `{shown}` | {ips:.1f} | {ratio_s} | {per_cpu} |\n")
    if rows:
        append_rows(args.benchmarks, rows)
        print(f"\nappended {len(rows)} rows to {args.benchmarks}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"device": device, "driver": driver, "commit": commit, "date": date, "dataset": dataset,
                       "results": {k: {"command": c, "result": r} for k, (c, r) in results.items()}}, f, indent=1)
    if "images_per_sec" not in results["stoke"][1]:
        raise SystemExit(f"stoke bench failed: {results['stoke'][1]}")


if __name__ == "__main__":
    main()
