#!/usr/bin/env python3
"""The next epoch made ahead against the same binary without it (`--no-epoch-ahead`).

    python3 benches/epoch_ahead.py STOKE_BIN DATASET [ROUNDS] [EXTRA ARGS...]

For a trainer slower than the loader (`--consumer-us 70000`) and none, each round runs both
builds' modes one after the other; prints per run the trainer's wait for each epoch's first
batch (median over every epoch but the first, which starts cold either way, and the max), the
batch wait's p50/p99, images/s and cores. BENCHMARKS.md "The next epoch made ahead" came from
`benches/epoch_ahead.py target/release/stoke /tmp/g1280 3 --backend cpu --batch-size 64
--epochs 6` with `stoke gen /tmp/g1280 --count 1280`.
"""
import json
import statistics
import subprocess
import sys

stoke, data = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
extra = sys.argv[4:] or ["--backend", "cpu", "--batch-size", "64", "--epochs", "6"]
rows = {}
for _ in range(rounds):
    for consumer in ["70000", None]:
        for ahead in [True, False]:
            cmd = [stoke, "bench", data, "--json", *extra]
            cmd += ["--consumer-us", consumer] if consumer else []
            cmd += [] if ahead else ["--no-epoch-ahead"]
            d = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            starts, lat = d["epoch_start_wait_ms"][1:], d["latency_ms"]
            rows.setdefault((consumer, ahead), []).append(
                (statistics.median(starts), max(starts), lat["p50"], lat["p99"], d["images_per_sec"], d["cpu_cores_used"])
            )
for (consumer, ahead), runs in rows.items():
    print(
        f"consumer-us {consumer or 'none'}, made ahead {ahead}:",
        "epoch-start wait median", [round(r[0], 1) for r in runs],
        "max", [round(r[1], 1) for r in runs],
        "p50/p99", [(round(r[2], 1), round(r[3], 1)) for r in runs],
        "images/s", [round(r[4]) for r in runs],
        "cores", [round(r[5], 2) for r in runs],
    )
