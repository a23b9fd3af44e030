#!/usr/bin/env python3
"""Which malformed files each backend replaces, kind by kind (the folder scripts/malformed-jpegs.py
makes: one class folder per kind of damage), and the files one backend delivers where the
other replaces them, with both reasons. For the GPU run's malformed-JPEG check: `stoke bench`
counts the substitutes, this names them.

    python3 scripts/malformed-report.py BAD [--devices cpu,cuda] [--batch-size 64]

Needs the `stoke` package (the GPU bundle puts it on PYTHONPATH). Prints one line per kind and
device, then the disagreements, then one JSON line.
"""

import argparse
import collections
import json
import sys

import stoke


def replaced(root, device, batch):
    """{key: reason} of the samples `device`'s loader replaced over one epoch (skip policy)."""
    kw = {"dtype": "float16"} if device == "cuda" else {}
    ld = stoke.Loader(root, batch, device=device, on_error="skip", shuffle=True, seed=3, **kw)
    ld.set_epoch(0)
    batches, failed = 0, []
    it = iter(ld)
    while True:
        try:
            next(it)
            batches += 1
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001 - a batch with nothing good: named, the epoch goes on
            failed.append(str(e)[:300])
    return {e["key"]: e.get("reason", "") for e in ld.errors}, batches, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--batch-size", type=int, default=64)
    a = ap.parse_args()
    devices = a.devices.split(",")
    got = {}
    for d in devices:
        errors, batches, failed = replaced(a.root, d, a.batch_size)
        got[d] = errors
        kinds = collections.Counter(k.split("/")[0] for k in errors)
        print(f"{d}: {len(errors)} replaced over {batches} batches; batches with nothing good: {len(failed)}")
        for k in sorted(kinds):
            print(f"  {d:5} {k:16} {kinds[k]}")
    report = {"replaced": {d: len(got[d]) for d in devices}}
    if len(devices) == 2:
        x, y = devices
        for a_, b_ in ((x, y), (y, x)):
            only = sorted(set(got[a_]) - set(got[b_]))
            report[f"only_{a_}"] = only
            print(f"replaced on {a_} only: {len(only)}")
            for k in only[:40]:
                print(f"  {k}: {got[a_][k][:200]}")
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
