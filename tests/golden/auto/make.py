"""Writes the AutoAugment-family goldens of tests/cpu_auto.rs: three small RGB inputs
(in_<i>.png) and, for each, every case of cases.json applied by timm's own op functions
(timm/data/auto_augment.py, which only needs Pillow and numpy) stacked top to bottom in
out_<i>.png.

Each case is a list of ops [kernel code, argument, bicubic]; the argument is rounded to f32
first, as stoke stores it. Run from this folder with the pinned versions of
tests/golden/auto/requirements.txt installed (timm without its dependencies):
    pip install --no-deps -r requirements.txt && python make.py"""
import importlib.util
import json
import os

import numpy as np
import PIL
from PIL import Image

spec = importlib.util.find_spec("timm")
if spec is None:
    raise SystemExit("timm is not installed: pip install --no-deps -r requirements.txt")
path = os.path.join(spec.submodule_search_locations[0], "data", "auto_augment.py")
loader = importlib.util.spec_from_file_location("timm_auto_augment", path)
aa = importlib.util.module_from_spec(loader)
loader.loader.exec_module(aa)  # only PIL, numpy and the standard library

FILL = (124, 116, 104)  # timm's img_mean for the ImageNet mean
BIL, BIC = Image.Resampling.BILINEAR, Image.Resampling.BICUBIC

# kernel code -> timm function and how its argument is passed
OPS = {
    1: lambda im, a, r: aa.auto_contrast(im),
    2: lambda im, a, r: aa.equalize(im),
    3: lambda im, a, r: aa.invert(im),
    4: lambda im, a, r: aa.rotate(im, a, fillcolor=FILL, resample=r),
    5: lambda im, a, r: aa.posterize(im, int(a)),
    6: lambda im, a, r: aa.solarize(im, a),
    7: lambda im, a, r: aa.solarize_add(im, int(a)),
    8: lambda im, a, r: aa.color(im, a),
    9: lambda im, a, r: aa.contrast(im, a),
    10: lambda im, a, r: aa.brightness(im, a),
    11: lambda im, a, r: aa.sharpness(im, a),
    12: lambda im, a, r: aa.shear_x(im, a, fillcolor=FILL, resample=r),
    13: lambda im, a, r: aa.shear_y(im, a, fillcolor=FILL, resample=r),
    14: lambda im, a, r: aa.translate_x_abs(im, a, fillcolor=FILL, resample=r),
    15: lambda im, a, r: aa.translate_y_abs(im, a, fillcolor=FILL, resample=r),
}


def f32(v):
    return float(np.float32(v))


def cases(w, h):
    c = [[[1, 0, False]], [[2, 0, False]], [[3, 0, False]]]
    c += [[[5, b, False]] for b in (1, 2, 4, 7, 8)]
    c += [[[6, t, False]] for t in (0, 77, 128, 200.5, 256)]
    c += [[[7, a, False]] for a in (0, 55, 110)]
    for op in (8, 9, 10, 11):
        c += [[[op, f, False]] for f in (0.1, 0.37, 1.0, 1.55, 1.9)]
    for cubic in (False, True):
        c += [[[4, d, cubic]] for d in (-30.0, 7.3, 90.0, 180.0, -135.0)]
        c += [[[op, s, cubic]] for op in (12, 13) for s in (-0.3, 0.17, 0.99)]
        c += [[[14, 0.45 * w * s, cubic]] for s in (-1, 0.3)]
        c += [[[15, 0.45 * h * s, cubic]] for s in (-0.6, 1)]
    # chains: statistics taken on the image the previous op left
    c += [[[4, 23.0, True], [2, 0, False]], [[6, 100, False], [1, 0, False]], [[12, 0.2, False], [9, 0.4, False]],
          [[11, 1.8, False], [5, 3, False], [8, 0.3, False]], [[2, 0, False], [4, -12.5, False], [1, 0, False], [10, 1.4, False]]]
    return [[[code, f32(a), cubic] for code, a, cubic in case] for case in c]


def inputs():
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:37, 0:53].astype(np.float64)
    photo = np.stack([90 + 80 * np.sin(x / 7) + 40 * np.cos(y / 5), 60 + 2.5 * x + y, 200 - 3 * y + 20 * np.sin(x * y / 40)], -1)
    photo += rng.normal(0, 12, photo.shape)
    yield np.clip(photo, 0, 255).round().astype(np.uint8)
    y, x = np.mgrid[0:32, 0:32].astype(np.float64)  # square (rotations by 90 are transposes), low contrast
    low = np.stack([70 + x * 2 + rng.normal(0, 3, x.shape), 100 + y, 90 + (x + y) / 2], -1)
    yield np.clip(low, 0, 255).round().astype(np.uint8)
    few = np.zeros((20, 27, 3), np.uint8)  # few distinct values: equalize's and autocontrast's edge cases
    few[:, :, 0] = 40
    few[5:, :, 1] = 200
    few[:, 9:, 2] = (np.arange(27)[9:] % 3) * 60
    yield few


def main():
    table = {"pillow": PIL.__version__, "timm_file": "timm/data/auto_augment.py", "fill": FILL, "images": []}
    for i, arr in enumerate(inputs()):
        h, w = arr.shape[:2]
        Image.fromarray(arr, "RGB").save(f"in_{i}.png")
        cs = cases(w, h)
        outs = []
        for case in cs:
            im = Image.fromarray(arr, "RGB")
            for code, a, cubic in case:
                im = OPS[code](im, a, BIC if cubic else BIL)
            outs.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
        Image.fromarray(np.concatenate(outs, 0), "RGB").save(f"out_{i}.png")
        table["images"].append({"input": f"in_{i}.png", "output": f"out_{i}.png", "width": w, "height": h, "cases": cs})
        print(f"in_{i}.png {w}x{h}: {len(cs)} cases")
    with open("cases.json", "w") as f:
        json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
