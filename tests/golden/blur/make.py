"""Writes the GaussianBlur / RandomSolarize goldens of tests/cpu_blur_golden.rs: for each input
of ../jitter (in_<i>.png, three small RGB images with gray, tied, clamped and near-black/white
pixels), every case of cases.json applied to the uint8 image, stored as raw uint8
(out_<i>.u8: the cases one after the other, each H × W × 3, interleaved RGB).

A case is a blur (or none) then a solarize (or none):
- "pil": Pillow's own `ImageFilter.GaussianBlur(radius)` (DINO's blur), run here by Pillow.
- "gauss": torchvision's `transforms.v2.functional.gaussian_blur` on a uint8 image. torch could
  not be imported on the machine these were made on (the PyPI wheel needs the CUDA libraries),
  so `tv_gaussian_blur` below is a numpy transcription of torchvision 0.29's source
  (`_misc.py`: `_get_gaussian_kernel1d`, `_get_gaussian_kernel2d`, `gaussian_blur_image`): the
  1-D kernels in float32 as torch computes them (linspace, div, pow, neg, softmax), their outer
  product, reflect padding, the 2-D convolution of the float32 image (summed here in float64,
  so this is the exact value of torchvision's operands; torch's own f32 sum moves it by ~1e-5
  of a level), `round_()` (half to even) and the cast to uint8.
- solarize: Pillow's own `ImageOps.solarize(threshold)` for integer thresholds (DINO's), and
  torchvision's uint8 formula `where(img >= t, 255 - img, img)` for a fractional one.
Sigmas and radii are rounded to float32 first, as stoke stores them.

Run from this folder with numpy and Pillow (../jitter/requirements.txt's versions):
    python make.py"""
import json
import math

import numpy as np
import PIL
from PIL import Image, ImageFilter, ImageOps


def f32(v):
    return float(np.float32(v))


def cases():
    c = [{"blur": None, "solarize": None}]
    for k, s in [(1, 0.5), (3, 0.1), (3, 1.0), (5, 0.7), (7, 2.0), (9, 1.37), (23, 1.3), (23, 2.0), (31, 5.0)]:
        c.append({"blur": {"kind": "gauss", "ksize": k, "sigma": f32(s)}, "solarize": None})
    for r in (0.1, 0.5, 1.0, 1.37, 2.0, 3.3, 6.0, 12.0):
        c.append({"blur": {"kind": "pil", "sigma": f32(r)}, "solarize": None})
    for t in (0.0, 1.0, 128.0, 200.0, 255.0, 127.5):
        c.append({"blur": None, "solarize": t})
    c.append({"blur": {"kind": "pil", "sigma": f32(1.1)}, "solarize": 128.0})  # DINO's second view
    c.append({"blur": {"kind": "gauss", "ksize": 9, "sigma": f32(0.8)}, "solarize": 100.0})
    return c


def linspace_f32(start, end, steps):
    """torch.linspace on the CPU for float32: start + step·i below steps // 2, else
    end − step·(steps − 1 − i)."""
    s, e = np.float32(start), np.float32(end)
    step = (e - s) / np.float32(steps - 1) if steps > 1 else np.float32(0)
    out = np.empty(steps, np.float32)
    for i in range(steps):
        out[i] = s + step * np.float32(i) if i < steps // 2 else e - step * np.float32(steps - 1 - i)
    return out


def tv_kernel1d(k, sigma):
    lim = (k - 1) / (2.0 * math.sqrt(2.0))
    x = linspace_f32(-lim, lim, k)
    v = -np.square(x / np.float32(sigma))
    e = np.exp(v - v.max())
    return (e / e.sum(dtype=np.float32)).astype(np.float32)


def tv_gaussian_blur(img, k, sigma):
    kx = tv_kernel1d(k, sigma)
    k2 = (kx[:, None] * kx[None, :]).astype(np.float32)  # kernel1d_y.unsqueeze(-1) * kernel1d_x
    h = k // 2
    pad = np.pad(img.astype(np.float32), ((h, h), (h, h), (0, 0)), mode="reflect").astype(np.float64)
    H, W = img.shape[:2]
    acc = np.zeros((H, W, 3), np.float64)
    for a in range(k):
        for b in range(k):
            acc += float(k2[a, b]) * pad[a : a + H, b : b + W]
    return np.clip(np.rint(acc), 0, 255).astype(np.uint8)


def apply(img, case):
    b = case["blur"]
    if b and b["kind"] == "pil":
        img = np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius=b["sigma"])))
    elif b:
        img = tv_gaussian_blur(img, b["ksize"], b["sigma"])
    t = case["solarize"]
    if t is not None:
        if float(t).is_integer():
            img = np.asarray(ImageOps.solarize(Image.fromarray(img), threshold=int(t)))
        else:
            img = np.where(img >= t, 255 - img, img).astype(np.uint8)
    return img


def main():
    c = cases()
    json.dump({"pillow": PIL.__version__, "numpy": np.__version__, "torchvision_source": "0.29.2", "cases": c},
              open("cases.json", "w"), indent=1)
    for i in range(3):
        img = np.asarray(Image.open(f"../jitter/in_{i}.png").convert("RGB"))
        with open(f"out_{i}.u8", "wb") as f:
            for case in c:
                f.write(np.ascontiguousarray(apply(img, case)).tobytes())


if __name__ == "__main__":
    main()
