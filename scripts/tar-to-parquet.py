#!/usr/bin/env python3
"""Rewrite WebDataset tar shards (`stoke gen --format tar`, `stoke pack`) as a Hugging Face
Parquet data set, laid out and written as the `datasets` library writes one with pyarrow:
`OUT/data/train-{i:05d}-of-{n:05d}.parquet`, an `image: struct<bytes: binary, path: string>`
column, an int64 `label` whose class names are in the `huggingface` schema metadata, row groups
of 100 images (what `datasets` uses for Image features), snappy. Samples keep the shards' order.

    scripts/tar-to-parquet.py SHARDS_DIR OUT [--files N] [--rows-per-group 100] [--compression snappy|zstd]

Needs pyarrow. Used to compare stoke over the same images in both forms (BENCHMARKS.md).
"""

import argparse
import json
import os
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq


def samples(shards_dir):
    for name in sorted(os.listdir(shards_dir)):
        if not name.endswith(".tar"):
            continue
        with tarfile.open(os.path.join(shards_dir, name)) as t:
            members = {}
            for m in t.getmembers():
                if m.isfile():
                    members[m.name] = t.extractfile(m).read()
            keys = []
            for n in members:
                key, _, ext = n.partition(".")
                if ext.lower() in ("jpg", "jpeg", "png", "webp"):
                    keys.append((key, n))
            for key, n in keys:
                cls = members.get(key + ".cls")
                yield os.path.basename(n), members[n], int(cls) if cls is not None else -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shards")
    ap.add_argument("out")
    ap.add_argument("--files", type=int, default=1)
    ap.add_argument("--rows-per-group", type=int, default=100)
    ap.add_argument("--compression", default="snappy")
    a = ap.parse_args()
    rows = list(samples(a.shards))
    classes = max(r[2] for r in rows) + 1
    features = {
        "image": {"_type": "Image"},
        "label": {"names": [f"class{c:04d}" for c in range(classes)], "_type": "ClassLabel"},
    }
    schema = pa.schema(
        [("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])), ("label", pa.int64())],
        metadata={"huggingface": json.dumps({"info": {"features": features}})},
    )
    os.makedirs(os.path.join(a.out, "data"), exist_ok=True)
    per = -(-len(rows) // a.files)
    for f in range(a.files):
        part = rows[f * per : (f + 1) * per]
        table = pa.table(
            {
                "image": [{"bytes": b, "path": p} for p, b, _ in part],
                "label": pa.array([l for _, _, l in part], pa.int64()),
            },
            schema=schema,
        )
        path = os.path.join(a.out, "data", f"train-{f:05d}-of-{a.files:05d}.parquet")
        pq.write_table(table, path, row_group_size=a.rows_per_group, compression=a.compression)
    print(f"{len(rows)} images, {classes} classes, {a.files} files in {a.out}/data")


if __name__ == "__main__":
    main()
