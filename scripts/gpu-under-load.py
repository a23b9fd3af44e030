"""stoke's rate on the GPU with and without fp16 matmuls running in the same process (a
trainer's situation): the hardware engine alone and the CUDA decoders alone (decode-only), and
end to end, each with the matmuls on the legacy default stream or a side stream.

    python3 scripts/gpu-under-load.py DATASET [--gpu-upsampling smooth|nearest] [--gpu-engine-lanes 1|2]
        [--only engine]

`--gpu-engine-lanes 2`: two threads call the engine at once (`Loader(gpu_engine_lanes=2)`), so
one's call can keep the engine busy while the other's waits for its conversions. `--only engine`:
the engine's runs alone (decode-only, without load and with the matmuls on the legacy stream),
then end to end with the matmuls.

Needs torch with CUDA and the stoke package. On an H200 (2026-11-26, BENCHMARKS.md "Third GPU
session") the engine route fell from 7050 to about 900 images/s under the matmuls: nvJPEG runs
a small colour-conversion kernel per image (ncu: rgba2rgb), which waits for free SMs.
"""
import argparse
import contextlib
import threading
import time

import stoke
import torch

ap = argparse.ArgumentParser()
ap.add_argument("data")
ap.add_argument("--gpu-upsampling", choices=["smooth", "nearest"], default="smooth")
ap.add_argument("--seconds", type=float, default=5.0)
ap.add_argument("--gpu-engine-lanes", type=int, choices=[1, 2], default=1)
ap.add_argument("--only", choices=["all", "engine"], default="all")
args = ap.parse_args()
data = args.data

def run(label, load=None, decode_only=True, decoders="hw"):
    secs = args.seconds
    stop = threading.Event()
    def busy():
        s = torch.cuda.Stream() if load == "side" else None
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.half); b = torch.randn_like(a)
        with (torch.cuda.stream(s) if s else contextlib.nullcontext()):
            while not stop.is_set():
                for _ in range(10):
                    a = (a @ b).clamp_(-1, 1)
                torch.cuda.current_stream().synchronize()
    th = threading.Thread(target=busy) if load else None
    if th:
        th.start(); time.sleep(1.5)
    L = stoke.Loader(data, 256, device="cuda", dtype="float16", decode_only=decode_only, decoders=decoders,
                     gpu_upsampling=args.gpu_upsampling, gpu_engine_lanes=args.gpu_engine_lanes, drop_last=True)
    seen, t0, n0, s0 = 0, None, 0, None
    while True:
        for _ in L:
            seen += 1
            if seen == 3:
                t0 = time.perf_counter(); st = L.stats(); n0 = st["images"]; s0 = st["decode_s"]; b0 = st["batches"]
            if t0 and time.perf_counter() - t0 > secs:
                break
        if t0 and time.perf_counter() - t0 > secs:
            break
    dt = time.perf_counter() - t0; st = L.stats()
    nb = max(st["batches"] - b0, 1)
    print(f"{label}: {(st['images'] - n0) / dt:.0f} images/s, host decode {1e3 * (st['decode_s'] - s0) / nb:.1f} ms/batch, "
          f"hw {st['decoded_hardware']} cuda {st['decoded_cuda']} cpu {st['decoded_cpu']} retried {st['gpu_decodes_retried']}", flush=True)
    stop.set()
    if th:
        th.join()
    del L

print(f"gpu_upsampling {args.gpu_upsampling}, {args.gpu_engine_lanes} engine lane(s)", flush=True)
lanes = f", {args.gpu_engine_lanes} engine lane(s)"
run("hw decode-only, no load" + lanes)
run("hw decode-only, matmuls on the legacy stream" + lanes, load="legacy")
if args.only == "all":
    run("hw decode-only, matmuls on a side stream" + lanes, load="side")
    run("cuda decoders decode-only, no load", decoders="cuda")
    run("cuda decoders decode-only, matmuls on the legacy stream", load="legacy", decoders="cuda")
    run("e2e all decoders, no load" + lanes, decode_only=False, decoders="all")
run("e2e all decoders, matmuls on the legacy stream" + lanes, load="legacy", decode_only=False, decoders="all")
