#!/usr/bin/env python3
"""The ledger of GPU figures, benches/results/gpu.jsonl: one JSON object per line and figure,
with exactly the fields in FIELDS. BENCHMARKS.md is the readable account; scripts and checks
read the ledger. Figures enter it only from a bundle's summary, so none is typed twice.

  gpu-ledger.py SUMMARY [--append LEDGER]   a bundle call's summary.txt -> ledger lines, printed
                                            (or appended to LEDGER); all or nothing
  gpu-ledger.py --check LEDGER              validate a ledger file (exit 1 naming each problem)
  gpu-ledger.py --emit KIND --input FILE ...   used by bundle/run.sh on the GPU machine: the
                                            summary's LEDGER-MACHINE line (KIND machine) or a
                                            step's LEDGER lines from its JSON output

A summary carries one `LEDGER-MACHINE {...}` line (date, device, driver, cuda, nvjpeg, commit)
and one `LEDGER {...}` line per figure (command, metric, value, unit, note). A summary that says
NO GPU or GPU ASSUMED, or comes from the simulated device, is refused: no stand-in figure enters
the ledger.
Python 3.9+, standard library only (it runs on the GPU machine too).
"""

import argparse
import datetime
import json
import math
import re
import sys

# metric -> (unit, what it measures). Names are how runs compare over time: add, never rename.
METRICS = {
    "e2e_images_per_sec": ("images/s", "stoke bench end to end, train preset, f16 NCHW 224, batch 256 "
                                       "(reference set: 12800 generated images; a note names any other)"),
    "decode_only_images_per_sec": ("images/s", "stoke bench --decode-only --decoders all, batch 256"),
    "engine_only_images_per_sec": ("images/s", "stoke bench --decode-only --decoders hw (the hardware engine "
                                               "and its refusals on the CPU route), batch 256"),
    "cores_per_10k": ("cores", "process CPU cores per 10k images/s, end to end"),
    "fed_over_alone_resnet50": ("ratio", "examples/train_torch.py ResNet-50 fed by stoke (train preset) over "
                                         "the model alone on a fixed device batch"),
    "fed_over_alone_vit_b16": ("ratio", "the same with ViT-B/16"),
    "batch_p99_over_p50": ("ratio", "stoke bench end to end: the trainer's wait per batch, p99 over p50"),
    "peak_device_mib": ("MiB", "most device memory the backend held (stoke bench end to end)"),
    "peak_pinned_mib": ("MiB", "most pinned host memory the backend held (stoke bench end to end)"),
    "peer_ratio_torchvision": ("ratio", "benches/peers/run_all.py: stoke over torchvision GPU decode + v2"),
    "peer_ratio_nvimgcodec": ("ratio", "benches/peers/run_all.py: stoke over nvImageCodec + torchvision ops"),
    "dino_images_per_sec": ("images/s", "stoke bench end to end, DINO multi-crop recipe"),
    # Added for the H200 back-fill and the bundle's other steps.
    "e2e_deit_images_per_sec": ("images/s", "stoke bench end to end --preset deit, f16 NCHW 224, batch 256"),
    "cuda_decoders_only_images_per_sec": ("images/s", "stoke bench --decode-only --decoders cuda, batch 256"),
    "fed_over_alone_resnet50_deit": ("ratio", "fed_over_alone_resnet50 on stoke's --preset deit"),
    "peer_ratio_timm_deit": ("ratio", "run_all.py --recipe deit --peers torch: stoke --preset deit over timm's "
                                      "DeiT transform + Mixup in a DataLoader (best worker count)"),
    "nvjpeg_engine_alone_images_per_sec": ("images/s", "scripts/nvjpeg-hw-load.cu: nvJPEG's hardware engine "
                                                       "with no stoke around it, default flags, calls of 64"),
    "soak_device_free_drop_mib": ("MiB", "examples/soak --backend cuda: how much the device's free memory fell from "
                                         "the end of the warm-up epochs to the last epoch (the note: epochs, images)"),
    "soak_rss_growth_mib": ("MiB", "examples/soak: resident memory growth from the warm-up's end to the last epoch"),
    "beside_thread_over_alone_resnet50": ("ratio", "examples/train_torch.py --beside thread: ResNet-50 on its fixed "
                                                   "batch while a second stoke.Loader in a thread of its process "
                                                   "makes and drops batches at the fed rate, over the model alone"),
    "beside_process_over_alone_resnet50": ("ratio", "the same with that Loader in a process of its own "
                                                    "(--beside process)"),
    "beside_thread_over_alone_vit_b16": ("ratio", "beside_thread_over_alone_resnet50 with ViT-B/16"),
    "beside_process_over_alone_vit_b16": ("ratio", "beside_process_over_alone_resnet50 with ViT-B/16"),
}

MACHINE_FIELDS = ("date", "device", "driver", "cuda", "nvjpeg", "commit")
FIGURE_FIELDS = ("command", "metric", "value", "unit", "note")
FIELDS = MACHINE_FIELDS + FIGURE_FIELDS
KEY = ("date", "device", "commit", "command", "metric", "note")
SIMULATED = "simulated device, not a GPU"
# A short or full hash; "+dirty" when the bundle held uncommitted changes (scripts/gpu-bundle.sh).
COMMIT_RE = re.compile(r"[0-9a-f]{7,40}(\+dirty)?")


def problems(rec):
    """What is wrong with one ledger record (empty when nothing)."""
    if not isinstance(rec, dict):
        return ["not a JSON object"]
    out = []
    missing = [f for f in FIELDS if f not in rec]
    extra = sorted(set(rec) - set(FIELDS))
    if missing:
        out.append("missing field(s): " + ", ".join(missing))
    if extra:
        out.append("unknown field(s): " + ", ".join(extra))
    for f in FIELDS:
        if f in ("value", "note") or f not in rec:
            continue
        if not isinstance(rec[f], str) or not rec[f].strip():
            out.append(f"field {f} must be a non-empty string, not {rec[f]!r}")
    if "note" in rec and not isinstance(rec["note"], str):
        out.append(f"field note must be a string, not {rec['note']!r}")
    metric = rec.get("metric")
    if isinstance(metric, str) and metric and metric not in METRICS:
        out.append(f"unknown metric {metric!r} (scripts/gpu-ledger.py METRICS lists the known ones: add, never rename)")
    elif isinstance(metric, str) and metric in METRICS and "unit" in rec and rec["unit"] != METRICS[metric][0]:
        out.append(f"unit {rec['unit']!r} for {metric}, which is in {METRICS[metric][0]!r}")
    if "value" in rec:
        v = rec["value"]
        # bool is an int in Python; NaN and Infinity parse from JSON as floats.
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            out.append(f"value {v!r} is not a finite number")
    date = rec.get("date")
    if isinstance(date, str):
        try:
            ok = datetime.date.fromisoformat(date).isoformat() == date
        except ValueError:
            ok = False
        if not ok:
            out.append(f"date {date!r} is not YYYY-MM-DD")
    if isinstance(rec.get("device"), str) and SIMULATED in rec["device"]:
        out.append(f"device {rec['device']!r} is the simulated device: its figures are not GPU figures")
    if isinstance(rec.get("commit"), str) and rec["commit"] and not COMMIT_RE.fullmatch(rec["commit"]):
        out.append(f"commit {rec['commit']!r} is not a commit hash")
    return out


def key(rec):
    """What makes a line one figure; as JSON text, so a malformed value cannot break the check."""
    return json.dumps([rec.get(f) for f in KEY])


def line(rec):
    """One ledger line, fields in FIELDS order."""
    return json.dumps({f: rec[f] for f in FIELDS}, ensure_ascii=False)


def read_ledger(path):
    """(records, problems) of a ledger file; problems name the line."""
    recs, errs, seen = [], [], {}
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                errs.append(f"{path}:{n}: empty line")
                continue
            try:
                rec = json.loads(text)
            except ValueError as e:
                errs.append(f"{path}:{n}: not JSON ({e})")
                continue
            errs += [f"{path}:{n}: {p}" for p in problems(rec)]
            if isinstance(rec, dict):
                k = key(rec)
                if k in seen:
                    errs.append(f"{path}:{n}: duplicate of line {seen[k]} (same date, device, commit, command, metric, note)")
                else:
                    seen[k] = n
                recs.append(rec)
    return recs, errs



def json_object(line, tag, where, errs):
    """The JSON object after `tag ` on a summary line, or None with the reason added to errs."""
    try:
        v = json.loads(line[len(tag) + 1:])
    except ValueError as e:
        errs.append(f"{where}: {tag} line is not JSON ({e})")
        return None
    if not isinstance(v, dict):
        errs.append(f"{where}: {tag} line is not a JSON object")
        return None
    return v

def from_summary(text, where="summary"):
    """(records, problems) from a bundle's summary.txt."""
    lines = text.splitlines()
    for n, s in enumerate(lines, 1):
        if s.startswith("NO GPU"):
            return [], [f"{where}:{n}: the summary says NO GPU: its run measured no GPU, nothing enters the ledger"]
        if s.startswith("GPU ASSUMED"):
            return [], [f"{where}:{n}: the GPU steps ran under STOKE_BUNDLE_ASSUME_GPU=1 (a plumbing check where "
                        "no GPU was found): nothing enters the ledger"]
        if SIMULATED in s and (s.startswith("DEVICE") or s.startswith("LEDGER")):
            return [], [f"{where}:{n}: the summary comes from the simulated device ({SIMULATED}): "
                        "nothing measured there enters the ledger"]
    machines = [(n, s) for n, s in enumerate(lines, 1) if s.startswith("LEDGER-MACHINE ")]
    if not machines:
        return [], [f"{where}: no LEDGER-MACHINE line (device, driver, CUDA, nvJPEG, commit): "
                    "a bundle/run.sh from before the ledger, or its doctor step failed"]
    errs, machine = [], None
    for n, s in machines:
        m = json_object(s, "LEDGER-MACHINE", f"{where}:{n}", errs)
        if m is None:
            continue
        if machine is not None and m != machine:
            errs.append(f"{where}:{n}: a second LEDGER-MACHINE line that differs from the first")
        else:
            machine = m
    if machine is None:
        return [], errs
    recs, seen = [], {}
    for n, s in enumerate(lines, 1):
        if not s.startswith("LEDGER "):
            continue
        fig = json_object(s, "LEDGER", f"{where}:{n}", errs)
        if fig is None:
            continue
        # Machine facts come from the machine line only; a figure line naming them is refused
        # (as an unknown field would be), so a figure cannot claim another device.
        clash = sorted(set(fig) & set(MACHINE_FIELDS))
        if clash:
            errs.append(f"{where}:{n}: a LEDGER line may not set machine field(s) {', '.join(clash)}")
            continue
        rec = {**{f: machine[f] for f in MACHINE_FIELDS if f in machine}, **fig}
        errs += [f"{where}:{n}: {p}" for p in problems(rec)]
        k = key(rec)
        if k in seen:
            errs.append(f"{where}:{n}: duplicate of line {seen[k]} (same date, device, commit, command, metric, note)")
        seen.setdefault(k, n)
        recs.append(rec)
    return recs, errs


# --- --emit: what bundle/run.sh writes into summary.txt ---------------------------------------

def last_json(text):
    """The last JSON object in a log: a one-line object (stoke bench, train_torch.py), else the
    object that starts at the first line beginning with '{' (doctor --json, pretty-printed)."""
    for s in reversed(text.splitlines()):
        if s.startswith("{"):
            try:
                return json.loads(s)
            except ValueError:
                pass
    first = re.search(r"^\{", text, re.M)
    if first is None:
        raise ValueError("no JSON object in the input")
    return json.JSONDecoder().raw_decode(text[first.start():])[0]


def figure(metric, value, command, note):
    return {"command": command, "metric": metric, "value": round(float(value), 3),
            "unit": METRICS[metric][0], "note": note}


def bench_figures(kind, r, command, note):
    """stoke bench --json -> figures. Refuses what is not the metric's setting (the CPU backend,
    another batch size or output), so a fallback or a variant cannot pass as the figure."""
    if r.get("backend") != "cuda":
        raise ValueError(f"backend {r.get('backend')!r}, not cuda: not a GPU figure")
    if r.get("batch_size") != 256:
        raise ValueError(f"batch size {r.get('batch_size')}, the metrics' is 256")
    if not str(r.get("output", "")).startswith("f16 nchw"):
        raise ValueError(f"output {r.get('output')!r}, the metrics' is f16 nchw")
    facts = [f"{r[k]} {what}" for k, what in (("gpu_upsampling", "upsampling"), ("gpu_wait", "GPU waits")) if r.get(k)]
    if r.get("epoch_ahead") is False:
        facts.append("next epoch not made ahead")
    note = "; ".join([note] + facts) if note else "; ".join(facts)
    ips = r["images_per_sec"]
    single = {"e2e-deit": "e2e_deit_images_per_sec", "decode-all": "decode_only_images_per_sec",
              "engine": "engine_only_images_per_sec", "cuda-decoders": "cuda_decoders_only_images_per_sec"}
    if kind in single:
        return [figure(single[kind], ips, command, note)]
    out = [figure("e2e_images_per_sec", ips, command, note),
           figure("cores_per_10k", r["cpu_cores_used"] * 1e4 / ips, command, note)]
    lat = r.get("latency_ms") or {}
    if lat.get("p50"):
        out.append(figure("batch_p99_over_p50", lat["p99"] / lat["p50"], command, note))
    for field, metric in (("peak_device_bytes", "peak_device_mib"), ("peak_pinned_bytes", "peak_pinned_mib")):
        if r.get(field) is not None:
            out.append(figure(metric, r[field] / 2**20, command, note))
    return out


# train_torch.py's --model and --preset -> metric.
TRAIN_METRICS = {
    ("resnet50", "train"): "fed_over_alone_resnet50",
    ("resnet50", "deit"): "fed_over_alone_resnet50_deit",
    ("vit_b16", "train"): "fed_over_alone_vit_b16",
    ("timm:vit_base_patch16_224", "train"): "fed_over_alone_vit_b16",
}


def train_figures(r, command, note):
    """examples/train_torch.py's record (its `RESULT {json}` line, else its --json line) -> the
    fed/alone figure: the median over its (fed, alone) pairs where it ran pairs, else the fed
    rate over the model alone."""
    metric = TRAIN_METRICS.get((r.get("model"), r.get("preset")))
    if metric is None:
        raise ValueError(f"no metric for model {r.get('model')!r} on preset {r.get('preset')!r}")
    if r.get("backend") != "cuda":
        raise ValueError(f"backend {r.get('backend')!r}, not cuda: not a GPU figure")
    ratio = r.get("fed_alone_median")
    if ratio is None and r.get("model_alone_images_per_sec"):
        ratio = r["images_per_sec"] / r["model_alone_images_per_sec"]
    if ratio is None:
        raise ValueError("no fed/alone in the trainer's record (the model alone was not timed)")
    pairs = r.get("pairs")
    n = len(pairs) if isinstance(pairs, list) else pairs
    facts = [f"{r.get('batch_size')} a batch"] + ([f"median of {n} (fed, alone) pairs"] if n else [])
    facts += [f"{r[k]} {what}" for k, what in (("gpu_upsampling", "upsampling"), ("gpu_wait", "GPU waits"),
                                              ("amp_dtype", "autocast")) if r.get(k)]
    if r.get("side_stream"):
        facts.append("side stream")
    if r.get("epoch_ahead") is False:
        facts.append("next epoch not made ahead")
    if r.get("decoders") not in (None, "all"):
        facts.append(f"decoders {r['decoders']}")
    if r.get("beside"):
        facts.append(f"beside {r['beside']}")
    note = "; ".join(([note] if note else []) + facts)
    out = [figure(metric, ratio, command, note)]
    # --beside: the model on its fixed batch with stoke working beside it, over the model alone.
    if r.get("beside") and r.get("beside_alone_median") is not None:
        beside = metric.replace("fed_over_alone_", f"beside_{r['beside']}_over_alone_")
        if beside not in METRICS:
            raise ValueError(f"no beside metric for {metric} ({r['beside']})")
        out.append(figure(beside, r["beside_alone_median"], command, note))
    return out


def peer_figures(r, command, note):
    """run_all.py --json-out -> stoke's ratio over each GPU peer that ran."""
    res = r["results"]
    stoke = res["stoke"]["result"].get("images_per_sec")
    if not stoke:
        raise ValueError("stoke's own run has no images_per_sec")
    deit = "deit" in res["stoke"]["command"]
    metrics = {"torchvision": "peer_ratio_torchvision", "nvimgcodec": "peer_ratio_nvimgcodec"}
    if deit:
        metrics = {"torch": "peer_ratio_timm_deit"}
    out = []
    for name, metric in metrics.items():
        ips = res.get(name, {}).get("result", {}).get("images_per_sec")
        if ips:
            out.append(figure(metric, stoke / ips, command, note))
    return out


def machine_line(doctor, smi, commit, date):
    """The LEDGER-MACHINE object: device and driver as nvidia-smi names them (`name, driver,
    memory` as bundle/run.sh queries it), else as the driver tells stoke doctor; CUDA and
    nvJPEG versions from stoke doctor --json. A fact not found is left out: the ledger then
    refuses the summary by naming it."""
    m = {"date": date}
    parts = [p.strip() for p in smi.split(",")] if smi else []
    devices = doctor.get("devices") or []
    device = parts[0] if parts and parts[0] else (devices[0].get("name") if devices else None)
    driver = parts[1] if len(parts) > 1 and parts[1] else (doctor.get("driver") or {}).get("version")
    for k, v in (("device", device), ("driver", driver), ("cuda", (doctor.get("driver") or {}).get("cuda")),
                 ("nvjpeg", (doctor.get("nvjpeg") or {}).get("version")), ("commit", commit.strip() or None)):
        if v:
            m[k] = v
    return m


def emit(args):
    with open(args.input, encoding="utf-8", errors="replace") as f:
        text = f.read()
    # train_torch.py's canonical record is its last `RESULT {json}` line.
    results = [s[len("RESULT "):] for s in text.splitlines() if s.startswith("RESULT {")]
    r = json.loads(results[-1]) if args.emit == "train" and results else last_json(text)
    if args.emit == "machine":
        date = args.date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        print("LEDGER-MACHINE " + json.dumps(machine_line(r, args.smi, args.commit, date), ensure_ascii=False))
        return
    if args.emit in ("e2e", "e2e-deit", "decode-all", "engine", "cuda-decoders"):
        figs = bench_figures(args.emit, r, args.command, args.note)
    elif args.emit == "train":
        figs = train_figures(r, args.command, args.note)
    else:
        figs = peer_figures(r, args.command, args.note)
    for fig in figs:
        print("LEDGER " + json.dumps(fig, ensure_ascii=False))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary", nargs="?", help="a bundle call's summary.txt")
    ap.add_argument("--append", metavar="LEDGER", help="append the summary's lines to LEDGER instead of printing them")
    ap.add_argument("--check", metavar="LEDGER", help="validate LEDGER")
    ap.add_argument("--emit", choices=["machine", "e2e", "e2e-deit", "decode-all", "engine", "cuda-decoders",
                                       "train", "peers"], help="(bundle/run.sh) summary lines from --input")
    ap.add_argument("--input", help="--emit: the step's log or JSON file")
    ap.add_argument("--command", default="", help="--emit: the command that made the figure")
    ap.add_argument("--note", default="", help="--emit: what else names the run")
    ap.add_argument("--smi", default="", help="--emit machine: nvidia-smi's `name, driver_version, memory.total`")
    ap.add_argument("--commit", default="", help="--emit machine: the bundle's COMMIT")
    ap.add_argument("--date", help="--emit machine: YYYY-MM-DD of the run (default: today, UTC)")
    args = ap.parse_args(argv)

    if args.emit:
        if not args.input:
            ap.error("--emit needs --input")
        try:
            emit(args)
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
            print(f"gpu-ledger: --emit {args.emit} {args.input}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        return 0
    if args.check:
        recs, errs = read_ledger(args.check)
        for e in errs:
            print(f"gpu-ledger: {e}", file=sys.stderr)
        if not errs:
            print(f"gpu-ledger: {args.check}: {len(recs)} lines, {len({r['metric'] for r in recs})} metrics, valid")
        return 1 if errs else 0
    if not args.summary:
        ap.error("give a summary.txt, --check LEDGER or --emit KIND")
    with open(args.summary, encoding="utf-8", errors="replace") as f:
        recs, errs = from_summary(f.read(), args.summary)
    if args.append and not errs:
        try:
            old, old_errs = read_ledger(args.append)
        except FileNotFoundError:
            old, old_errs = [], []
        errs += [f"{e} (fix the ledger before appending)" for e in old_errs]
        have = {key(r) for r in old}
        errs += [f"{args.summary}: already in {args.append}: {line(r)}" for r in recs if key(r) in have]
    if errs:
        for e in errs:
            print(f"gpu-ledger: refused: {e}", file=sys.stderr)
        return 1
    if not recs:
        print(f"gpu-ledger: {args.summary}: no LEDGER lines (this call measured no ledger figure)", file=sys.stderr)
        return 0
    if args.append:
        with open(args.append, "a", encoding="utf-8") as f:
            f.writelines(line(r) + "\n" for r in recs)
        print(f"gpu-ledger: appended {len(recs)} lines to {args.append}", file=sys.stderr)
    else:
        for r in recs:
            print(line(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
