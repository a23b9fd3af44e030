"""Writes the ColorJitter/RandomGrayscale goldens of tests/cpu_jitter_golden.rs: three small
RGB inputs (in_<i>.png) and, for each, every case of cases.json applied by torchvision's own
functional ops to the float image, stored as raw little-endian float32 (out_<i>.f32: the
cases one after the other, each 3 × H × W, channel-major, on torchvision's 0..1 scale).

Each case is a list of color steps [name, factor] in the order they are applied, then whether
RandomGrayscale follows. The image goes to float32 as torchvision's ColorJitter sees a float
image (`to_dtype(uint8 → float32, scale=True)`), then each step is
`torchvision.transforms.v2.functional.adjust_<name>` and grayscale is
`rgb_to_grayscale(num_output_channels=3)`, as `ColorJitter` / `RandomGrayscale` call them. The
factors are rounded to f32 first, as stoke stores them. torch runs on the CPU with one thread
(elementwise results do not depend on it; the contrast mean's summation order would); its
vectorized kernels fuse multiply-adds where the CPU has FMA, which moves the last bit only
(tests/cpu_jitter_golden.rs's bound covers both).

Run from this folder with the pinned versions of tests/golden/jitter/requirements.txt (the CPU
wheels are enough; the repository's development venv is /work/venv-torch):
    pip install -r requirements.txt && python make.py"""
import json

import numpy as np
import PIL
import torch
import torchvision
from PIL import Image
from torchvision.transforms.v2 import functional as F

STEPS = {
    "brightness": F.adjust_brightness,
    "contrast": F.adjust_contrast,
    "saturation": F.adjust_saturation,
    "hue": F.adjust_hue,
}


def f32(v):
    return float(np.float32(v))


def cases():
    c = [([], False), ([], True)]  # identity (the input as torchvision's float image), grayscale alone
    c += [([["brightness", f]], False) for f in (0.0, 0.37, 1.0, 1.23, 1.9)]
    c += [([["contrast", f]], False) for f in (0.0, 0.41, 1.0, 1.37, 1.9)]
    c += [([["saturation", f]], False) for f in (0.0, 0.6, 1.0, 1.45, 1.9)]
    c += [([["hue", h]], False) for h in (-0.5, 0.5, -0.25, 0.25, 0.1, -0.03, 0.003, 0.0, 0.4999)]
    # pairs, both orders (contrast's mean is taken on the image the first step left)
    c += [([["brightness", 1.6], ["contrast", 0.55]], False), ([["contrast", 0.55], ["brightness", 1.6]], False)]
    c += [([["saturation", 1.9], ["hue", 0.31]], False), ([["hue", 0.31], ["saturation", 1.9]], False)]
    c += [([["hue", -0.2], ["contrast", 1.8]], False), ([["contrast", 0.0], ["hue", 0.4]], True)]
    # all four in several permutations, with ColorJitter(0.4, 0.4, 0.4, 0.1)-like and extreme factors
    b, ct, s, h = 1.27, 0.71, 1.33, -0.07
    for order, gray in [("bcsh", False), ("hscb", False), ("csbh", True), ("shbc", False), ("cbhs", False), ("hbcs", True)]:
        name = {"b": ("brightness", b), "c": ("contrast", ct), "s": ("saturation", s), "h": ("hue", h)}
        c.append(([list(name[k]) for k in order], gray))
    c += [([["contrast", 1.9], ["saturation", 0.0], ["brightness", 1.9], ["hue", 0.5]], False)]
    c += [([["saturation", 1.9], ["brightness", 0.6], ["hue", -0.5], ["contrast", 1.9]], False)]
    c += [([["hue", 0.25], ["contrast", 0.3], ["saturation", 1.9], ["brightness", 0.0]], True)]
    return [{"steps": [[n, f32(f)] for n, f in steps], "grayscale": gray} for steps, gray in c]


def inputs():
    rng = np.random.default_rng(11)
    # a photo-like image: smooth color fields with texture
    y, x = np.mgrid[0:27, 0:36].astype(np.float64)
    photo = np.stack([110 + 70 * np.sin(x / 6) + 35 * np.cos(y / 4), 50 + 4 * x + 2 * y, 190 - 5 * y + 25 * np.sin(x * y / 30)], -1)
    photo += rng.normal(0, 10, photo.shape)
    yield np.clip(photo, 0, 255).round().astype(np.uint8)
    # edge cases: gray (r == g == b, incl. 0 and 255), two channels tied at the max or the min
    # in every arrangement, saturated primaries and secondaries, near-black and near-white,
    # channels at 0 and 255 (the clamps), then random pixels
    edge = [[0, 0, 0], [255, 255, 255], [1, 1, 1], [128, 128, 128], [254, 255, 255], [255, 254, 255], [1, 0, 0], [0, 0, 1],
            [255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [0, 255, 255], [255, 0, 255], [3, 2, 2], [253, 254, 253]]
    for _ in range(40):
        a, b = sorted(rng.integers(0, 256, 2))
        for t in ([b, b, a], [b, a, b], [a, b, b], [a, a, b], [a, b, a], [b, a, a]):
            edge.append(t)
    edge = np.array(edge, np.uint8)
    w, h = 28, 20
    img = rng.integers(0, 256, (h * w, 3)).astype(np.uint8)
    img[: len(edge)] = edge
    yield img.reshape(h, w, 3)
    # low contrast, dark, nearly gray: small chroma (hue's divisions by max − min)
    y, x = np.mgrid[0:16, 0:20].astype(np.float64)
    low = np.stack([30 + x / 2 + rng.normal(0, 1.5, x.shape), 28 + y / 2, 29 + (x + y) / 6], -1)
    yield np.clip(low, 0, 255).round().astype(np.uint8)


def run(arr, case):
    img = F.to_dtype(torch.from_numpy(arr).permute(2, 0, 1).contiguous(), torch.float32, scale=True)
    for name, f in case["steps"]:
        img = STEPS[name](img, f)
    if case["grayscale"]:
        img = F.rgb_to_grayscale(img, num_output_channels=3)
    return img.contiguous().numpy().astype("<f4")


def main():
    torch.set_num_threads(1)
    cs = cases()
    table = {"torch": torch.__version__, "torchvision": torchvision.__version__, "pillow": PIL.__version__, "cases": cs, "images": []}
    for i, arr in enumerate(inputs()):
        h, w = arr.shape[:2]
        Image.fromarray(arr, "RGB").save(f"in_{i}.png")
        back = np.array(Image.open(f"in_{i}.png").convert("RGB"))
        assert (back == arr).all()
        out = np.concatenate([run(back, c) for c in cs])
        assert out.shape == (3 * len(cs), h, w)
        out.tofile(f"out_{i}.f32")
        table["images"].append({"input": f"in_{i}.png", "output": f"out_{i}.f32", "width": w, "height": h})
        print(f"in_{i}.png {w}x{h}: {len(cs)} cases")
    with open("cases.json", "w") as f:
        json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
