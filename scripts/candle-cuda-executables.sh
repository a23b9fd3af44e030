#!/usr/bin/env bash
# Copies the `candle-cuda` executables the GPU bundle carries (scripts/gpu-bundle.sh's candle
# part: tests/candle_cuda.rs and examples/train_candle, built with candle's CUDA backend) into
# OUTDIR/tests/candle_cuda and OUTDIR/examples/train_candle, stripped.
#
#   scripts/candle-cuda-executables.sh OUTDIR
#
# Run it in the environment that built them (.ci/run's candle-cuda step calls it there: the
# same NVCC, CUDA_COMPUTE_CAP, CARGO_TARGET_DIR and scripts/with-sim-gpu.sh's link folder), so
# cargo only reports what it built; anywhere else it builds them first (candle's kernels: about
# 8 minutes on 2 cores). They link the stand-in's `libcuda.so` name and the pinned wheels'
# libnvrtc.so.13/libcudart.so.13; bundle/run.sh candle gives them the GPU machine's driver and
# its torch's CUDA libraries under those names.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/candle-cuda-executables.sh OUTDIR}"
mkdir -p "$out/tests" "$out/examples"
exes() {
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["kind"][0], m["executable"])
'
}
scripts/with-sim-gpu.sh cargo test --release --features candle-cuda --test candle_cuda --no-run --message-format=json | exes |
  while read -r kind exe; do if [ "$kind" = test ]; then cp "$exe" "$out/tests/candle_cuda"; fi; done
scripts/with-sim-gpu.sh cargo build --release --features candle-cuda --example train_candle --message-format=json | exes |
  while read -r kind exe; do if [ "$kind" = example ]; then cp "$exe" "$out/examples/train_candle"; fi; done
for f in "$out/tests/candle_cuda" "$out/examples/train_candle"; do
  [ -x "$f" ] || { echo "candle-cuda-executables: $f was not built" >&2; exit 1; }
  strip "$f"
done
git rev-parse --short HEAD > "$out/COMMIT" 2>/dev/null || echo unknown > "$out/COMMIT"
