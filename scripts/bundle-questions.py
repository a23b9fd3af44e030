"""The open questions of stoke's first GPU run, answered from one bundle call's logs.

Called by bundle/run.sh (scripts/bundle-run.sh) at its end as
`python3 bundle-questions.py tests|bench|python LOGDIR`; prints one line per question for summary.txt.
Each answer comes from what the binaries wrote: `stoke doctor --json` (doctor.json), the GPU
tests' own lines (test-*.log, run with --nocapture), `stoke bench --json` (bench-*.json). A
line `STOKE-Q <key>: <text>` in any log answers question <key> directly, so a test can report
a figure without this script knowing its wording. Where nothing answers, the line says
"not measured: <why>".
"""

import glob
import json
import os
import re
import sys

# key, question, the call that answers it
QUESTIONS = [
    ("hw-open", "hardware JPEG engine opened (inside the VM)", "tests"),
    ("hw-size", "hardware engines x cores per engine", "tests"),
    ("roi", "hardware/CUDA decoders accept ROI and interpolated upsampling", "tests"),
    ("pixel-error", "decoded-pixel error per route vs libjpeg-turbo (whole image, region)", "tests"),
    ("routes", "route counts (hardware / cuda / cpu)", "both"),
    ("canary", "canary false alarms", "tests"),
    ("bitstreams", "the engine on device copies of its bitstreams (NVJPEG_BACKEND_HARDWARE_DEVICE): opened, same pixels", "tests"),
    ("memory", "device and pinned memory after each epoch", "both"),
    ("gray-engine", "gray baseline JPEGs sampled 1x1, and 2x2-declared ones declared 1x1, on the hardware engine (gpu_engine_gray): what it took, error per route vs libjpeg-turbo", "tests"),
    ("transcoded", "progressive photos rewritten as baseline (transcode_progressive) on the hardware engine: what it took, error per route vs the stored file's libjpeg-turbo picture", "tests"),
    ("mjpeg-tables", "JPEGs without their Huffman tables (Motion-JPEG frames) after images with optimized ones: error per route vs the standard tables' picture", "tests"),
    ("engine-lanes", "two threads calling the hardware engine at once (gpu_engine_lanes = 2): CPU over wall time inside the engine's calls with one lane and with two (above 1 with two: the calls overlap)", "tests"),
    ("nvjpeg-memory", "nvJPEG's own memory through stoke's allocators: bytes, allocations after the first epoch", "tests"),
    ("stages", "per-batch stage times: classify, HW decode, CUDA decode, CPU route, augment", "bench"),
    ("engine-idle", "the hardware engine's idle time on the host between batches' calls, by part (join / cpu / check / retry / tail / outside / arena / head / hybrid, ms per batch; with --gpu-engine-ahead only worker, its thread's own, and hybrid, the GPU-hybrid share's call it makes first): the head room of a deeper decode pipeline", "any"),
    ("concurrency", "HW+CUDA decoders together vs each alone (decode-only images/s)", "bench"),
    ("python-cuda", "Python Loader on CUDA: batches in torch through DLPack (pytest tests/python)", "python"),
    ("trainer", "ResNet-50 (AMP, channels_last) fed by stoke: images/s, data wait, GPU utilization, fed/alone", "python"),
    ("deit-peer", "DeiT recipe: stoke --preset deit vs timm's transform + Mixup in a DataLoader", "python"),
]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def last_json(path):
    for line in reversed(read(path).splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def doctor(logs):
    text = read(os.path.join(logs, "doctor.json"))
    start = text.find("{")
    try:
        return json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        return None


def grep(logs, pattern, files="test-*.log"):
    """(file, line) of each log line matching `pattern`."""
    rx = re.compile(pattern)
    hits = []
    for path in sorted(glob.glob(os.path.join(logs, files))):
        for line in read(path).splitlines():
            if rx.search(line):
                hits.append((os.path.basename(path), line.strip()[:200]))
    return hits


def tagged(logs, key):
    return [f"{l.split(':', 1)[1].strip()} [{f}]" for f, l in grep(logs, rf"STOKE-Q {re.escape(key)}:", "*")]


def answer(key, mode, logs, gpu):
    said = tagged(logs, key)
    if said:
        return "; ".join(said)
    if not gpu:
        return "not measured: no GPU"
    doc = doctor(logs)
    dev = (doc or {}).get("devices") or []
    if key in ("hw-open", "hw-size"):
        if not dev:
            return "not measured: no GPU" if not gpu else "not measured: doctor saw no device"
        d = dev[0]
        hw = d.get("hardware_jpeg_decoder")
        if hw is None:
            return "no: " + (d.get("hardware_jpeg_decoder_error") or "the GPU has no hardware JPEG decoder")
        if key == "hw-size":
            return f"{hw['engines']} x {hw['cores_per_engine']}"
        width = [l for _, l in grep(logs, r"hardware decoder width")]
        return "yes" + (f" ({width[0]})" if width else "")
    if key == "pixel-error":
        hits = [f"{l} [{f}]" for f, l in grep(logs, r"worst mean abs diff|largest GPU vs CPU difference")]
        return "; ".join(hits) if hits else None
    if key == "routes":
        hits = [f"{l} [{f}]" for f, l in grep(logs, r"decode routes")]
        for path in sorted(glob.glob(os.path.join(logs, "bench-*.json"))):
            r = last_json(path)
            if r and "decoders" in r:
                hits.append(f"{os.path.basename(path)}: {r['decoders']}")
        return "; ".join(hits) if hits else None
    if key == "canary":
        hits = [f"{l} [{f}]" for f, l in grep(logs, r"(?i)canar") if not l.startswith("test ")]
        return "; ".join(hits) if hits else "not measured: no test or bench reports canary alarms yet"
    if key == "memory":
        hits = [f"{l} [{f}]" for f, l in grep(logs, r"after each epoch")]
        for path in sorted(glob.glob(os.path.join(logs, "bench-*.json"))):
            r = last_json(path)
            if r and r.get("peak_device_bytes") is not None:
                hits.append(f"{os.path.basename(path)}: peak device {r['peak_device_bytes'] / 2**20:.1f} MiB, "
                            f"peak pinned {r['peak_pinned_bytes'] / 2**20:.1f} MiB")
        return "; ".join(hits) if hits else None
    if key == "stages":
        r = last_json(os.path.join(logs, "bench-e2e.json"))
        if not r:
            return None
        g = r.get("gpu_stages")
        if not g:
            return f"not measured: bench ran on the {r.get('backend')} backend"
        n = max(g.get("batches", 0), 1)
        parts = [(k, g[k]) for k in ("classify", "hw_decode", "hw_host", "cuda_decode", "cpu_route", "augment") if k in g]
        if all(v == 0 for _, v in parts):
            return "not measured: the CUDA backend does not fill Stats.gpu_stages yet (all zero)"
        return ", ".join(f"{k} {v * 1e3 / n:.2f} ms" for k, v in parts) + f" per batch (over {n} batches)"
    if key == "engine-idle":
        parts = ("join", "cpu", "check", "retry", "tail", "outside", "arena", "head", "hybrid", "worker")
        hits = []
        for path in sorted(glob.glob(os.path.join(logs, "bench-*.json"))):
            r = last_json(path)
            i = ((r or {}).get("gpu_stages") or {}).get("idle") or {}
            n = i.get("batches", 0)
            if n > 0:
                ms = [1e3 * i.get(k, 0) / n for k in parts]
                hits.append(f"{os.path.basename(path)}: {sum(ms):.2f} ms = " + " / ".join(f"{v:.2f}" for v in ms))
        return ("; ".join(hits) + " (" + " / ".join(parts) + ")") if hits else None
    if key == "python-cuda":
        hits = [l for _, l in grep(logs, r"^(=+ )?\d+ (passed|failed)", "pytest.log")]
        return hits[-1] if hits else None
    if key == "trainer":
        parts = []
        for name in ("train-torch.log", "train-torch-vit.log", "train-torch-deit.log", "train-torch-side.log",
                     "train-torch-auto.log", "train-torch-block.log", "train-torch-priority.log"):
            r = last_json(os.path.join(logs, name))
            if not r:
                continue
            alone = r.get("model_alone_images_per_sec")
            util = r.get("gpu_utilization_pct")
            parts.append(
                f"{r.get('model', 'resnet50')} {r.get('preset')}"
                f"{' (side stream' + (', greatest priority' if r.get('stream_priority') == 'high' else '') + ')' if r.get('side_stream') else ''}"
                f"{', ' + r['gpu_wait'] + ' waits' if name in ('train-torch-auto.log', 'train-torch-block.log') else ''}"
                f": {r['images_per_sec']:.0f} images/s, data wait {100 * r['data_wait_share']:.1f}%"
                + (f", GPU utilization {util:.0f}%" if util is not None else ", GPU utilization not read (no NVML)")
                + (f", model alone {alone:.0f} images/s (fed/alone {r.get('fed_alone_median') or r['images_per_sec'] / alone:.3f}, median of pairs)" if alone else "")
            )
        return "; ".join(parts) if parts else None
    if key == "deit-peer":
        path = os.path.join(logs, "peers-deit.json")
        try:
            with open(path) as f:
                res = json.load(f)["results"]
        except (OSError, ValueError, KeyError):
            return None
        ips = {k: v["result"].get("images_per_sec") for k, v in res.items()}
        if not ips.get("stoke") or not ips.get("torch"):
            return "not measured: " + "; ".join(f"{k}: {v['result'].get('error', 'no figure')}" for k, v in res.items() if not ips.get(k))
        return f"stoke {ips['stoke']:.0f} images/s, timm DataLoader {ips['torch']:.0f} images/s: {ips['stoke'] / ips['torch']:.2f}x"
    if key == "concurrency":
        rates = {}
        for dec in ("all", "hw", "cuda"):
            r = last_json(os.path.join(logs, f"bench-decode-{dec}.json"))
            if r and "images_per_sec" in r:
                rates[dec] = r["images_per_sec"]
        if rates:
            return ", ".join(f"{k} {v:.0f} images/s" for k, v in rates.items())
        if grep(logs, r"no --decode-only", "summary.txt"):
            return "not measured: this stoke has no --decode-only/--decoders flags yet"
        return None
    return None


def main():
    mode, logs = sys.argv[1], sys.argv[2]
    gpu = not any(l.startswith("NO GPU") for l in read(os.path.join(logs, "summary.txt")).splitlines())
    print("open questions of the first GPU run:")
    for key, question, where in QUESTIONS:
        a = answer(key, mode, logs, gpu)
        if a is None:
            if not gpu:
                a = "not measured: no GPU"
            elif where == "any":
                a = "not measured in this call: no stoke bench step on the CUDA backend reported it"
            elif where not in (mode, "both") or (where == "both" and mode not in ("tests", "bench")):
                a = f"not measured in this call: see run.sh {'tests or bench' if where == 'both' else where}"
            else:
                a = "not measured: the step that reports it failed, timed out or did not run (see its log)"
        print(f"  Q {question}: {a}")


if __name__ == "__main__":
    main()
