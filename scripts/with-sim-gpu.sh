#!/usr/bin/env bash
# Runs COMMAND with the simulated device (sim/: CPU stand-ins for libcuda.so.1 and
# libnvjpeg.so.13) in front of the loader path, so stoke's CUDA backend runs without a GPU:
#
#   scripts/with-sim-gpu.sh target/release/stoke bench --backend cuda
#   scripts/with-sim-gpu.sh cargo test --release --test gpu_pipeline
#
# Builds the stand-in first when it is missing or older than its sources (cargo decides). It
# is test equipment: everything measured on it is "on the simulated device", never a GPU
# figure, and the device names itself "stoke-sim (simulated device, not a GPU)".
#
# Environment passed through to the stand-in (sim/src/lib.rs): STOKE_SIM_SEED,
# STOKE_SIM_DELAY_US, STOKE_SIM_MEMORY, STOKE_SIM_HW_ENGINES, STOKE_SIM_HW_CORES,
# STOKE_SIM_MEMPOOLS, STOKE_SIM_CC, STOKE_SIM_ALLOW_FINDINGS, STOKE_SIM_NVJPEG_GROW.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$#" -eq 0 ]; then
  echo "usage: scripts/with-sim-gpu.sh COMMAND [ARGS...]" >&2
  exit 2
fi
target="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build --release --quiet -p stoke-sim) >&2
lib="$target/release/libstoke_sim.so"
[ -f "$lib" ] || { echo "with-sim-gpu: $lib was not built" >&2; exit 1; }
dir="$target/sim-gpu"
mkdir -p "$dir"
for name in libcuda.so libcuda.so.1 libnvjpeg.so.13; do
  ln -sfn "$lib" "$dir/$name"
done
# Link names for binaries built with candle's CUDA backend (stoke's `candle-cuda` feature: its
# cudarc links libcuda, cuBLAS, cuRAND and NVRTC at build time): the stand-in answers the
# handle calls a candle device makes (sim/src/handles.rs), nothing of cuBLAS's or cuRAND's
# math. NVRTC (a compiler, no device) and the CUDA runtime that candle's statically compiled
# kernels register with are the real ones from the pinned wheels in scripts/setup-cuda.sh's
# venv (.ci/run installs nvidia-cuda-nvrtc there); the runtime calls nothing until one of
# those kernels is launched.
for name in libcublas.so libcublasLt.so libcurand.so; do
  ln -sfn "$lib" "$dir/$name"
done
venv="${STOKE_CUDA_VENV:-.venv-cuda}"
case "$venv" in /*) ;; *) venv="$root/$venv" ;; esac
for real in "$venv"/lib/python3*/site-packages/nvidia/cu13/lib/lib{cudart,nvrtc}.so.13; do
  [ -f "$real" ] && ln -sfn "$real" "$dir/$(basename "$real" .13)" && ln -sfn "$real" "$dir/$(basename "$real")"
done
export LIBRARY_PATH="$dir${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export STOKE_NVJPEG="$dir/libnvjpeg.so.13"
exec "$@"
