#!/usr/bin/env bash
# Every benchmark in one call, for the GPU machine (no Rust, no network there).
#
# Here:   scripts/gpu-bundle.sh                  # bundle/: release stoke, bench binaries, libnvjpeg
#         scripts/bench-peers.sh fetch-wheels    # .whl/peers: nvImageCodec (optional)
# There:  (device tool, carry bundle and .whl/peers)  scripts/bench-gpu.sh
#
# Writes under $OUT (else ./bench-out), at most 8 files so all of them come back:
#   doctor.txt     what stoke sees (driver, GPU, nvJPEG, hardware decoder, kernels)
#   bench.jsonl    `stoke bench --json`: data-only, then with a consumer step (overlap)
#   tune.json      `stoke tune --json` table; tuned.json: the chosen config
#   kernels.log    criterion: cuda_kernels (copy bandwidth, convert, augment) and cpu_stages
#   peers.json     benches/peers/run_all.py: stoke vs DataLoader / torchvision GPU / nvImageCodec
#   BENCHMARKS.md  with the peers' rows appended (copy the new rows into the repository's)
#   summary.txt    one line per step with its exit status
# Settings: COUNT (images, default 10240), EPOCHS (default 3), BACKEND (default cuda; `cpu`
# runs the same steps on a machine without a GPU, to check the script), STOKE_BIN, STOKE_LIBDIR.
set -uo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
bin="${STOKE_BIN:-bundle/bin/stoke}"
libdir="${STOKE_LIBDIR:-bundle/lib}"
count="${COUNT:-10240}"
epochs="${EPOCHS:-3}"
backend="${BACKEND:-cuda}"
dtype=f16
[[ "$backend" == cpu ]] && dtype=f32
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[[ -e "$libdir/libnvjpeg.so.13" ]] && export STOKE_NVJPEG="$libdir/libnvjpeg.so.13"
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-${TMPDIR:-/tmp}/stoke-cache}"
export CRITERION_HOME="${TMPDIR:-/tmp}/stoke-criterion"
data="$XDG_CACHE_HOME/stoke/bench-gpu-n$count"
summary="$out/summary.txt"
: > "$summary"

step() { # step NAME COMMAND...: run, log the exit status
    local name="$1"; shift
    echo "+ $*" >&2
    "$@"
    echo "$name: exit $?" >> "$summary"
}

{ date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null; } >> "$summary"
step doctor sh -c "'$bin' doctor > '$out/doctor.txt' 2>&1"
if [[ ! -f "$data/.complete" ]]; then
    step gen sh -c "'$bin' gen '$data' --count $count && touch '$data/.complete'"
fi
common=(--backend "$backend" --dtype "$dtype" --layout nchw --batch-size 256 --epochs "$epochs")
: > "$out/bench.jsonl"
step bench sh -c "'$bin' bench '$data' ${common[*]} --json >> '$out/bench.jsonl'"
# A consumer step of 40 ms per batch of 256 (about a ResNet-50 training step on one H100):
# with the loader faster than that, the trainer's wait per batch should be ~0.
step bench-consumer sh -c "'$bin' bench '$data' ${common[*]} --consumer-us 40000 --json >> '$out/bench.jsonl'"
step tune sh -c "'$bin' tune '$data' --backend $backend --dtype $dtype --batch-size 256 --out '$out/tuned.json' --json > '$out/tune.json'"
: > "$out/kernels.log"
for b in bundle/benches/cuda_kernels* bundle/benches/cpu_stages*; do
    [[ -x "$b" ]] || continue
    step "$(basename "$b")" sh -c "timeout 300 '$b' --bench >> '$out/kernels.log' 2>&1"
done
peers_flag=()
[[ "$backend" == cpu ]] && peers_flag=(--cpu)
step peers env STOKE_BIN="$bin" STOKE_LIBDIR="$libdir" OUT="$out" \
    scripts/bench-peers.sh "${peers_flag[@]}" --dataset "$data" --epochs "$epochs" --json-out "$out/peers.json"
cat "$summary"
