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
                            antialiased, CenterCrop(size), uint8) on imagenet_like/: DIR/list.tsv +
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
        for n, rel in enumerate(corpus_files(a.corpus, ["imagenet_like"])):
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


def cmd_fixtures(a):
    raise SystemExit("fixtures: see below")


if __name__ == "__main__":
    main()
