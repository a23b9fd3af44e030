"""Peer 3: nvImageCodec batched decode + the same torchvision GPU ops as peer 2.

Decoding: one `nvimgcodec.Decoder().decode(list_of_bytes)` call per batch. nvImageCodec picks
its own backend per image (hardware JPEG engine, CUDA, or its CPU fallback, which is how it
takes CMYK), so nothing is routed by hand. Images come back as device HWC uint8 RGB and are
taken into torch with `torch.from_dlpack` (which makes torch's stream wait for the decode),
then permuted to CHW. An image it fails on (None in the result) is decoded by
torchvision on the CPU and counted in `cpu_decoded`.
Reading, augment, normalize and the clock: common.run_gpu_peer, shared with torchvision_gpu.py.

Needs the `nvidia-nvimgcodec-cu13` wheel (scripts/bench-peers.sh installs it from a folder
of carried wheels); prints a `skipped` result when it is absent.

Usage: python3 benches/peers/nvimgcodec_gpu.py DATASET [--epochs 2] [--read-threads 8]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    from nvidia import nvimgcodec
except ImportError as e:  # the wheel is optional
    common.emit({"peer": "nvimgcodec-gpu", "skipped": f"nvImageCodec not installed ({e})"})
    sys.exit(0)

import torch  # noqa: E402
from torchvision.io import ImageReadMode, decode_jpeg  # noqa: E402


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    args, device, samples = common.gpu_peer_args(__doc__.splitlines()[0])
    decoder = nvimgcodec.Decoder()  # the current CUDA device
    stats = {"cpu_decoded": 0}

    def decode(idx, datas):
        imgs = []
        for data, img in zip(datas, decoder.decode(datas)):
            if img is None:
                t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
                imgs.append(decode_jpeg(t, mode=ImageReadMode.RGB).to(device, non_blocking=True))
                stats["cpu_decoded"] += 1
            else:
                # `.to` is a no-op for device images; a CPU-fallback decode may come back in host memory.
                imgs.append(torch.from_dlpack(img).to(device, non_blocking=True).permute(2, 0, 1))
        return imgs

    r = common.run_gpu_peer("nvimgcodec-gpu", args, samples, read_bytes, decode, device)
    r.update(stats)
    r["nvimgcodec"] = getattr(nvimgcodec, "__version__", "unknown")
    r["torch"] = torch.__version__
    common.emit(r)


if __name__ == "__main__":
    main()
