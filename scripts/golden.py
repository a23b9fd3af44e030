#!/usr/bin/env python3
"""Reference outputs for stoke's CPU backend, from Pillow + numpy (the libraries torchvision's
CPU path is built on).

Subcommands
  fixtures --out DIR        golden outputs for fixed parameters on fixture images this script
                            generates from a formula (tests/cpu_golden.rs generates the same
                            pixels); writes DIR/golden.json (committed as tests/golden/golden.json)
  decode-corpus CORPUS --out DIR
                            Pillow's decode of every file under CORPUS's imagenet_like/,
                            conformance/ and generated/: DIR/list.tsv + DIR/<n>.rgb (opt-in tests)
  eval-corpus CORPUS --out DIR [--size 224]
                            torchvision's eval preset with Pillow (Resize(size*256/224) bilinear
                            antialiased, CenterCrop(size), uint8, EXIF orientation applied) on
                            imagenet_like/ and conformance/exif-orientation/: DIR/list.tsv +
                            DIR/<n>.rgb

Only Pillow and numpy are needed (`pip install pillow numpy`).
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
from PIL import Image, ImageOps

Image.MAX_IMAGE_PIXELS = None  # the corpus has a 64250x64250 header; we catch errors ourselves


def corpus_files(corpus, folders):
    out = []
    for top in folders:
        root = os.path.join(corpus, top)
        for dirpath, _, files in os.walk(root):
            for f in files:
                out.append(os.path.relpath(os.path.join(dirpath, f), corpus))
    return sorted(out)


def pil_decode(path):
    """Pillow's RGB decode with EXIF orientation *not* applied (stoke applies it in the math)."""
    im = Image.open(path)
    if im.width * im.height > 100_000_000:
        raise ValueError("over the 100 Mpixel guard")
    im.load()
    return im.convert("RGB")


def cmd_decode_corpus(a):
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "list.tsv"), "w") as lst:
        for n, rel in enumerate(corpus_files(a.corpus, ["imagenet_like", "conformance", "generated"])):
            try:
                im = pil_decode(os.path.join(a.corpus, rel))
                open(os.path.join(a.out, f"{n}.rgb"), "wb").write(im.tobytes())
                lst.write(f"{rel}\tok\t{im.width}\t{im.height}\t{n}.rgb\n")
            except Exception as e:  # noqa: BLE001 - every failure is recorded, not raised
                msg = f"{type(e).__name__}: {e}".replace("\t", " ").replace("\n", " ")
                lst.write(f"{rel}\terr\t0\t0\t{msg}\n")


def eval_preset(im, size):
    """torchvision.transforms Resize(size*256//224) + CenterCrop(size) on a PIL image."""
    short = size * 256 // 224
    w, h = im.size
    if w <= h:
        ow, oh = short, int(short * h / w)
    else:
        ow, oh = int(short * w / h), short
    im = im.resize((ow, oh), Image.BILINEAR)
    top = int(round((oh - size) / 2.0))
    left = int(round((ow - size) / 2.0))
    return im.crop((left, top, left + size, top + size))


def cmd_eval_corpus(a):
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "list.tsv"), "w") as lst:
        for n, rel in enumerate(corpus_files(a.corpus, ["imagenet_like", "conformance/exif-orientation"])):
            try:
                im = Image.open(os.path.join(a.corpus, rel))
                if im.format != "JPEG":
                    raise ValueError(f"not a jpeg ({im.format})")
                im = ImageOps.exif_transpose(im.convert("RGB") if im.mode != "RGB" else im)
                out = eval_preset(im.convert("RGB"), a.size)
                open(os.path.join(a.out, f"{n}.rgb"), "wb").write(out.tobytes())
                lst.write(f"{rel}\tok\t{out.width}\t{out.height}\t{n}.rgb\n")
            except Exception as e:  # noqa: BLE001
                msg = f"{type(e).__name__}: {e}".replace("\t", " ").replace("\n", " ")
                lst.write(f"{rel}\terr\t0\t0\t{msg}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fixtures")
    f.add_argument("--out", required=True)
    d = sub.add_parser("decode-corpus")
    d.add_argument("corpus")
    d.add_argument("--out", required=True)
    e = sub.add_parser("eval-corpus")
    e.add_argument("corpus")
    e.add_argument("--out", required=True)
    e.add_argument("--size", type=int, default=224)
    a = p.parse_args()
    {"fixtures": cmd_fixtures, "decode-corpus": cmd_decode_corpus, "eval-corpus": cmd_eval_corpus}[a.cmd](a)


def fixture(w, h):
    """The fixture picture; tests/cpu_golden.rs builds the same pixels from the same formula:
    red ramps left to right, green top to bottom, blue a 5x3 checkerboard of 40/220."""
    x = np.arange(w)[None, :].repeat(h, 0)
    y = np.arange(h)[:, None].repeat(w, 1)
    r = x * 255 // (w - 1)
    g = y * 255 // (h - 1)
    b = np.where(((x // 5) + (y // 3)) % 2 == 0, 220, 40)
    return Image.fromarray(np.stack([r, g, b], -1).astype(np.uint8), "RGB")


def params(w, h, **kw):
    """An AugParams dict: identity geometry on a w x h image, overridden by kw."""
    p = dict(src_w=w, src_h=h, crop_x=0, crop_y=0, crop_w=w, crop_h=h, resize_w=w, resize_h=h, win_x=0,
             win_y=0, out_w=w, out_h=h, orientation=1, filter=0, antialias=1, flip_h=0, flip_v=0,
             rot_interp=0, angle_deg=0.0, fill=[0.0, 0.0, 0.0])
    p.update(kw)
    return p


EXIF_TRANSPOSE = {2: Image.FLIP_LEFT_RIGHT, 3: Image.ROTATE_180, 4: Image.FLIP_TOP_BOTTOM, 5: Image.TRANSPOSE,
                  6: Image.ROTATE_270, 7: Image.TRANSVERSE, 8: Image.ROTATE_90}


def cmd_fixtures(a):
    W, H = 53, 41
    img = fixture(W, H)
    cases = []

    def add(name, kind, p, out, note):
        arr = np.asarray(out, dtype=np.uint8)
        assert arr.shape == (p["out_h"], p["out_w"], 3), (name, arr.shape)
        cases.append(dict(name=name, kind=kind, note=note, w=W if "w" not in p else p.pop("w"),
                          h=H if "h" not in p else p.pop("h"), params=p, expected_hwc_u8=arr.tobytes().hex()))

    box = (5, 7, 25, 23)  # x0, y0, x1, y1 -> a 20x16 crop
    crop = img.crop(box)
    p = params(W, H, crop_x=5, crop_y=7, crop_w=20, crop_h=16, resize_w=20, resize_h=16, out_w=20, out_h=16)
    add("crop", "exact", dict(p), crop, "Image.crop")
    add("crop_hflip", "exact", dict(p, flip_h=1), crop.transpose(Image.FLIP_LEFT_RIGHT), "crop + FLIP_LEFT_RIGHT")
    add("crop_vflip", "exact", dict(p, flip_v=1), crop.transpose(Image.FLIP_TOP_BOTTOM), "crop + FLIP_TOP_BOTTOM")
    for o, method in EXIF_TRANSPOSE.items():
        oriented = img.transpose(method)
        ow, oh = oriented.size
        add(f"exif_{o}", "exact", params(ow, oh, orientation=o), oriented, f"ImageOps.exif_transpose for tag {o}")
    # EXIF 6 then a crop of the oriented image: the crop box is in oriented coordinates.
    o6 = img.transpose(Image.ROTATE_270)
    add("exif_6_crop", "exact",
        params(H, W, orientation=6, crop_x=3, crop_y=9, crop_w=17, crop_h=20, resize_w=17, resize_h=20, out_w=17,
               out_h=20), o6.crop((3, 9, 20, 29)), "exif_transpose(6) then crop")
    for fname, fcode, resample in (("bilinear", 0, Image.BILINEAR), ("bicubic", 1, Image.BICUBIC)):
        c = img.crop((3, 2, 50, 39))
        add(f"resize_{fname}_down", "resize",
            params(W, H, crop_x=3, crop_y=2, crop_w=47, crop_h=37, resize_w=20, resize_h=15, out_w=20, out_h=15,
                   filter=fcode), c.resize((20, 15), resample), f"crop + Image.resize {fname} (antialiased)")
        c = img.crop((10, 10, 22, 19))
        add(f"resize_{fname}_up", "resize",
            params(W, H, crop_x=10, crop_y=10, crop_w=12, crop_h=9, resize_w=30, resize_h=25, out_w=30, out_h=25,
                   filter=fcode), c.resize((30, 25), resample), f"crop + Image.resize {fname} (upscaling)")
    # Eval-like: Resize(shorter=29) then CenterCrop(24), as torchvision on PIL computes them.
    short = 29
    rw, rh = int(short * W / H), short
    r = img.resize((rw, rh), Image.BILINEAR)
    top, left = int(round((rh - 24) / 2.0)), int(round((rw - 24) / 2.0))
    add("eval_like", "resize",
        params(W, H, resize_w=rw, resize_h=rh, win_x=left, win_y=top, out_w=24, out_h=24),
        r.crop((left, top, left + 24, top + 24)), "Resize(29) + CenterCrop(24), bilinear")
    sq = img.crop((4, 4, 34, 34))
    ps = params(W, H, crop_x=4, crop_y=4, crop_w=30, crop_h=30, resize_w=30, resize_h=30, out_w=30, out_h=30)
    for ang in (90.0, 180.0, 270.0, -90.0):
        add(f"rotate_{int(ang)}", "exact", dict(ps, angle_deg=ang), sq.rotate(ang),
            f"Image.rotate({ang}) (an exact quarter turn)")
    fill = (10, 128, 250)
    add("rotate_30_nearest", "rotate", dict(ps, angle_deg=30.0, fill=[float(v) for v in fill]),
        sq.rotate(30.0, resample=Image.NEAREST, fillcolor=fill), "Image.rotate(30, NEAREST, fillcolor)")
    # Normalize and casts: numpy float32 on the crop case's pixels.
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    x = np.asarray(crop, np.float32)
    f32 = ((x / np.float32(255.0)) - mean) / std
    bits = f32.view(np.uint32).astype(np.uint64)
    bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    norm = dict(case="crop", mean=mean.tolist(), std=std.tolist(), f32_hwc=f32.astype("<f4").tobytes().hex(),
                f16_hwc=f32.astype("<f2").tobytes().hex(), bf16_hwc=bf16.astype("<u2").tobytes().hex())
    out = dict(generator="scripts/golden.py fixtures", pillow=Image.__version__, numpy=np.__version__,
               fixture=f"{W}x{H}: R = x*255//(w-1), G = y*255//(h-1), B = 220 if (x//5 + y//3) even else 40",
               cases=cases, normalize=norm)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "golden.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
