"""Checks the "gauss" goldens of make.py (made with a numpy transcription of torchvision's
gaussian_blur) against torchvision's own `transforms.v2.functional.gaussian_blur` on the uint8
image. Needs torch and torchvision (e.g. the peer venv of benches/peers); prints each case's
largest difference and fails when any value differs by more than 1 level.

    python verify_torchvision.py"""
import json
import sys

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision.transforms.v2 import functional as F


def main():
    cases = json.load(open("cases.json"))["cases"]
    worst = 0
    for i in range(3):
        img = np.asarray(Image.open(f"../jitter/in_{i}.png").convert("RGB"))
        h, w, _ = img.shape
        gold = np.fromfile(f"out_{i}.u8", dtype=np.uint8).reshape(len(cases), h, w, 3)
        t = torch.from_numpy(img.copy()).permute(2, 0, 1)
        for c, case in enumerate(cases):
            b = case["blur"]
            if not b or b["kind"] != "gauss" or case["solarize"]:
                continue
            out = F.gaussian_blur(t, [b["ksize"], b["ksize"]], [b["sigma"], b["sigma"]]).permute(1, 2, 0).numpy()
            d = np.abs(out.astype(int) - gold[c].astype(int))
            worst = max(worst, int(d.max()))
            print(f"in_{i} case {c} k={b['ksize']} sigma={b['sigma']:.4f}: max diff {d.max()}, {int((d > 0).sum())} values differ of {d.size}")
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}: worst {worst}")
    sys.exit(0 if worst <= 1 else 1)


if __name__ == "__main__":
    main()
