#!/usr/bin/env python3
"""Malformed JPEGs for the GPU decoders' robustness sweep (issue 21): from a folder of good
JPEGs (`stoke gen`), an ImageFolder of broken copies, seeded, one class per kind of damage,
plus one class of intact images, so a `stoke bench --on-error skip` over it must finish, name
each substitute and decode the intact ones.

    python3 scripts/malformed-jpegs.py SRC OUT [--per-kind 48] [--seed 7]

Kinds (each a class folder of OUT):
  truncated_eoi   the stream cut at 10-90 % of its scan and an EOI appended (so it reaches
                  nvJPEG: a stream without EOI goes to the CPU decoder)
  truncated       cut at 10-90 % of the scan, no EOI
  scan_flips      1-64 random bytes of the entropy-coded scan XORed with random values
  scan_markers    random RSTn / stray markers written into the scan
  dqt_zero        every quantization table's values set to 0
  dht_counts      a Huffman table's code counts inflated past 256 codes
  dht_values      a Huffman table's symbol values randomised
  sof_dims        the frame header's width or height set to 0 or 65535
  sof_components  the frame header's component count or sampling factors changed
  sos_header      the scan header's component selectors or table ids changed
  intact          unchanged copies (must decode)
Prints one JSON line: the counts per kind.
"""

import argparse
import json
import os
import random
import sys


def segments(b):
    """(marker, start, end) of each header segment up to and including SOS, and the scan's
    start (the byte after the SOS header)."""
    out, i = [], 2
    while i + 4 <= len(b):
        if b[i] != 0xFF:
            return out, None
        m = b[i + 1]
        if m == 0xFF:
            i += 1
            continue
        n = (b[i + 2] << 8) | b[i + 3]
        out.append((m, i, i + 2 + n))
        if m == 0xDA:
            return out, i + 2 + n
        i += 2 + n
    return out, None


def scan_end(b, start):
    e = b.rfind(b"\xff\xd9")
    return e if e > start else len(b)


def damage(kind, b, rng):
    b = bytearray(b)
    segs, scan = segments(b)
    if scan is None:
        return None
    end = scan_end(b, scan)
    seg = {m: (s, e) for m, s, e in segs}
    if kind == "truncated_eoi" or kind == "truncated":
        cut = scan + int((end - scan) * rng.uniform(0.1, 0.9))
        out = b[:cut]
        return out + b"\xff\xd9" if kind == "truncated_eoi" else out
    if kind == "scan_flips":
        for _ in range(rng.randint(1, 64)):
            k = rng.randrange(scan, end)
            b[k] ^= rng.randint(1, 255)
        return b
    if kind == "scan_markers":
        for _ in range(rng.randint(1, 16)):
            k = rng.randrange(scan, end - 1)
            b[k : k + 2] = bytes([0xFF, rng.choice([0xD0 + rng.randrange(8), 0xC4, 0xDB, 0xD8, 0x01])])
        return b
    if kind == "dqt_zero":
        if 0xDB not in seg:
            return None
        for m, s, e in segs:
            if m == 0xDB:
                i = s + 4
                while i < e:
                    pq = b[i] >> 4
                    n = 64 * (2 if pq else 1)
                    b[i + 1 : i + 1 + n] = bytes(n)
                    i += 1 + n
        return b
    if kind in ("dht_counts", "dht_values"):
        dhts = [(s, e) for m, s, e in segs if m == 0xC4]
        if not dhts:
            return None
        s, e = rng.choice(dhts)
        if kind == "dht_counts":
            for k in range(s + 5, s + 5 + 16):
                b[k] = rng.randint(16, 255)
        else:
            counts = sum(b[s + 5 : s + 5 + 16])
            for k in range(s + 21, min(e, s + 21 + counts)):
                b[k] = rng.randrange(256)
        return b
    if kind == "sof_dims":
        sof = next(((s, e) for m, s, e in segs if m in (0xC0, 0xC1, 0xC2)), None)
        if sof is None:
            return None
        k = sof[0] + 5 + rng.choice([0, 2])  # height or width
        v = rng.choice([0, 65535])
        b[k], b[k + 1] = v >> 8, v & 0xFF
        return b
    if kind == "sof_components":
        sof = next(((s, e) for m, s, e in segs if m in (0xC0, 0xC1, 0xC2)), None)
        if sof is None:
            return None
        s = sof[0]
        if rng.random() < 0.5:
            b[s + 9] = rng.choice([0, 2, 4, 7])  # component count
        else:
            c = rng.randrange(b[s + 9] or 1)
            b[s + 11 + 3 * c] = rng.choice([0x00, 0x33, 0x44, 0x15, 0xF1])  # sampling factors
        return b
    if kind == "sos_header":
        sos = seg.get(0xDA)
        if sos is None:
            return None
        s, e = sos
        k = rng.randrange(s + 5, e)
        b[k] = rng.randrange(256)
        return b
    if kind == "intact":
        return b
    raise ValueError(kind)


KINDS = [
    "truncated_eoi", "truncated", "scan_flips", "scan_markers", "dqt_zero", "dht_counts", "dht_values",
    "sof_dims", "sof_components", "sos_header", "intact",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--per-kind", type=int, default=48)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    srcs = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(a.src) for f in fs if f.lower().endswith((".jpg", ".jpeg"))
    )
    if not srcs:
        sys.exit(f"{a.src}: no JPEG files")
    rng = random.Random(a.seed)
    counts = {}
    for kind in KINDS:
        os.makedirs(os.path.join(a.out, kind), exist_ok=True)
        made, tries = 0, 0
        while made < a.per_kind and tries < 20 * a.per_kind:
            tries += 1
            src = rng.choice(srcs)
            with open(src, "rb") as f:
                data = f.read()
            bad = damage(kind, data, rng)
            if bad is None:
                continue
            with open(os.path.join(a.out, kind, f"{kind}_{made:04d}.jpg"), "wb") as f:
                f.write(bytes(bad))
            made += 1
        counts[kind] = made
    print(json.dumps({"malformed": counts, "seed": a.seed}))


if __name__ == "__main__":
    main()
