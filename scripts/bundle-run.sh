#!/usr/bin/env bash
# bundle/run.sh: runs on the GPU machine (scripts/gpu-bundle.sh copies this file there).
#
#   bundle/run.sh tests    environment probe, stoke doctor, the gpu_* tests and the library's CUDA
#                          unit tests (one test thread, a timeout per binary), compute-sanitizer
#                          memcheck + racecheck on the pipeline and geometry tests
#   bundle/run.sh bench    train_loop, `stoke bench --backend cuda` (decoder-only per route and end
#                          to end, with and without a consumer), the kernel benchmarks on a short
#                          budget, the GPU peers
#
# The device tool brings back at most 8 files from $OUT, none deeper than 2 folders, and kills a
# command at its limit. So every log goes to a scratch folder, and after every step (and on exit,
# TERM or INT) that folder is packed into ONE archive, $OUT/<mode>-logs.tar.gz, beside
# $OUT/<mode>-summary.txt: two files per mode, whatever happens. The summary (one line per step:
# PASS/FAIL/SKIP, the figure) is printed last, so it is in the command's output tail.
#
# A whole mode stays inside $STOKE_BUDGET_S seconds (default 540, under the tool's 600): each
# step's timeout is cut to what is left. Without a GPU every GPU step is a SKIP that says why, the
# mode ends in seconds and exits 0: that is how CI checks this plumbing.
set -uo pipefail

mode="${1:-tests}"
case "$mode" in tests|bench) ;; *) echo "usage: run.sh tests|bench" >&2; exit 2 ;; esac
bundle="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$PWD/bundle-out}"
mkdir -p "$out"
t0=$(date +%s)
budget="${STOKE_BUDGET_S:-540}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/stoke-logs.XXXXXX")"
here="$(mktemp -d "${TMPDIR:-/tmp}/stoke-bundle.XXXXXX")"
summary="$logs/summary.txt"
archive="$out/$mode-logs.tar.gz"
failed=0

# Pack the logs (atomically: a kill mid-pack leaves the previous archive) and copy the summary.
pack() {
  tar -czf "$out/.$mode-logs.tmp" -C "$logs" . 2>/dev/null && mv -f "$out/.$mode-logs.tmp" "$archive"
  cp -f "$summary" "$out/$mode-summary.txt" 2>/dev/null
}
child=""
finish() {
  local why="$1"
  trap - EXIT TERM INT
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  [ -n "$why" ] && echo "STOPPED: $why after $(( $(date +%s) - t0 )) s; logs so far are in $(basename "$archive")" >> "$summary"
  echo "done in $(( $(date +%s) - t0 )) s: $([ $failed -eq 0 ] && echo 'no step failed' || echo 'SOME STEPS FAILED')" >> "$summary"
  pack
  echo; cat "$summary"
  cd / && rm -rf "$here" "$logs"
}
trap 'finish ""' EXIT
trap 'finish "killed (TERM)"; exit 143' TERM
trap 'finish "interrupted (INT)"; exit 130' INT

say() { echo "$*" >> "$summary"; }
# Seconds a step may take: its own limit, cut to the mode's budget left (minus 15 s to pack).
limit() {
  local left=$(( budget - ($(date +%s) - t0) - 15 ))
  [ "$left" -lt "$1" ] && echo $(( left > 5 ? left : 5 )) || echo "$1"
}
# step NAME SECONDS LOG COMMAND...: run with a timeout into logs/LOG; PASS/FAIL line; pack.
step() {
  local name="$1" secs log="$logs/$3" rc s0=$(date +%s)
  secs="$(limit "$2")"; shift 3
  echo "+ [$name, ${secs}s] $*" >> "$logs/commands.txt"
  # In the background and waited for: bash runs a TERM trap only between commands, and `wait`
  # is one it can interrupt (a foreground child would hold the trap until it ended).
  timeout -k 5 "$secs" "$@" > "$log" 2>&1 &
  child=$!
  wait "$child"
  rc=$?
  child=""
  local took=$(( $(date +%s) - s0 ))
  local fig
  fig="$(grep -E '^test result:' "$log" | tail -1 | cut -c1-110)"
  if [ $rc -eq 0 ]; then
    say "PASS $name (${took}s)${fig:+: $fig}"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    say "FAIL $name: timed out after ${secs}s${fig:+: $fig}"; failed=1
  else
    say "FAIL $name (exit $rc, ${took}s)${fig:+: $fig}"; failed=1
  fi
  pack
  return $rc
}
skip() { say "SKIP $1: $2"; }

echo "stoke bundle, mode $mode: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)" > "$summary"
if ! tar -xzf "$bundle/payload.tar.gz" -C "$here" 2>"$logs/unpack.log"; then
  say "FAIL unpack: $(head -c 200 "$logs/unpack.log")"; failed=1; exit 1
fi
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export STOKE_NVJPEG="$here/lib/libnvjpeg.so.13" STOKE_BIN="$here/bin/stoke" RUST_BACKTRACE=1
export XDG_CACHE_HOME="${TMPDIR:-/tmp}/stoke-bundle-cache" CRITERION_HOME="$logs/criterion"
stoke="$here/bin/stoke"

# --- environment probe (both modes): is there a GPU, and what loads -------------------------
{
  echo "== nvidia-smi"; nvidia-smi 2>&1 || true
  echo "== nvidia-smi -q (clocks, MIG, decoder)"; nvidia-smi -q 2>&1 | grep -iE 'product name|mig mode|current|decoder|jpg|clocks' | head -40 || true
  echo "== libraries the loader knows"; ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libnvjpeg|libnvidia-ml' || echo "(none)"
  echo "== LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "== compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1 || echo none)"
  echo "== python: $(python3 -c 'import sys; print(sys.version.split()[0])' 2>&1)"
  python3 -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__)' 2>&1 | tail -1
  echo "== cpu: $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
} > "$logs/env.log" 2>&1
gpu_name="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
"$stoke" doctor > "$logs/doctor.txt" 2>&1
"$stoke" doctor --json > "$logs/doctor.json" 2>>"$logs/doctor.txt"
# The doctor's verdict decides: a GPU nvidia-smi sees but stoke cannot open is a FAIL, not a SKIP.
backend="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["backend"]["kind"])' "$logs/doctor.json" 2>/dev/null)"
if [ -z "$gpu_name" ]; then
  say "NO GPU on this machine (nvidia-smi found none): the GPU steps below are SKIPs; this run checks the bundle's plumbing only"
  gpu=0
elif [ "$backend" != cuda ]; then
  say "GPU $gpu_name, but stoke doctor says it would use '${backend:-?}': $(grep -iE 'cpu backend|error|cannot|not' "$logs/doctor.txt" | head -2 | tr '\n' ' ')"
  failed=1; gpu=0
else
  say "GPU $gpu_name; stoke doctor: cuda backend usable"
  gpu=1
fi
grep -E 'hardware|nvjpeg|kernels' "$logs/doctor.txt" | head -4 | sed 's/^/  doctor: /' >> "$summary"
pack

# Lines a test or tool prints as "@q name: value" answer the open questions of the first GPU run;
# they are gathered into the summary at the end of each mode.
questions() {
  say "-- open questions (from the logs' @q lines)"
  local found
  found="$(grep -rh '^@q ' "$logs" 2>/dev/null | sort -u | head -60)"
  if [ -n "$found" ]; then sed 's/^@q /  /' <<<"$found" >> "$summary"; fi
  for q in $1; do
    grep -q "^@q $q:" <<<"$found" || say "  $q: not measured$([ $gpu -eq 0 ] && echo ' (no GPU)' || echo ': no log printed it')"
  done
}

# Self-test hook for .ci/run: a step that only sleeps, so CI can kill a run mid-step and check
# that the summary and the archive are still there.
if [ -n "${STOKE_BUNDLE_SELFTEST_SLEEP:-}" ]; then
  step "self-test sleep" 60 selftest.log sleep "$STOKE_BUNDLE_SELFTEST_SLEEP"
fi

if [ "$mode" = tests ]; then
  cd "$here/work"
  if [ $gpu -eq 0 ]; then
    skip "gpu tests" "no usable GPU"
  else
    for t in "$here"/tests/gpu_*; do
      [ -x "$t" ] || continue
      name="$(basename "$t")"
      corpus=()
      [ -d "$here/corpus/imagenet_like" ] && corpus=(env STOKE_CORPUS="$here/corpus")
      step "$name" 120 "test-$name.log" "${corpus[@]}" env STOKE_REQUIRE_GPU=1 "$t" --test-threads=1 --nocapture
    done
    # The library's own CUDA unit tests (nvJPEG loading, hardware decode of the fixtures).
    # (The NVRTC-fallback test is CPU-only and needs CUDA headers the bundle does not carry: CI runs it.)
    step "lib CUDA unit tests" 120 "test-lib-cuda.log" env STOKE_REQUIRE_GPU=1 "$here/tests/lib-stoke" backend::cuda --skip nvrtc --test-threads=1 --nocapture
    sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
    if [ -z "$sanitizer" ]; then
      skip "compute-sanitizer" "not installed on this machine"
    else
      for t in gpu_pipeline gpu_geometry; do
        for tool in memcheck racecheck; do
          [ -x "$here/tests/$t" ] || continue
          step "$tool $t" 150 "sanitizer-$tool-$t.log" env STOKE_REQUIRE_GPU=1 "$sanitizer" --tool "$tool" --error-exitcode 3 "$here/tests/$t" --test-threads=1
        done
      done
    fi
  fi
  questions "hw_engine engines_x_cores hw_small_gray pixel_error_whole_hw pixel_error_whole_cuda pixel_error_roi_hw pixel_error_roi_cuda canary_false_alarms memory_per_epoch"
else
  data="$XDG_CACHE_HOME/stoke/bench-n${STOKE_BENCH_COUNT:-5120}"
  if [ $gpu -eq 0 ]; then
    skip "train_loop, stoke bench --backend cuda, kernel benchmarks, GPU peers" "no usable GPU"
  else
    if [ ! -f "$data/.complete" ]; then
      step "gen ${STOKE_BENCH_COUNT:-5120} images" 150 gen.log "$stoke" gen "$data" --count "${STOKE_BENCH_COUNT:-5120}" && touch "$data/.complete"
    fi
    # The example trainer compiles its consumer kernel with NVRTC: find a pip-installed libnvrtc
    # when the loader knows none.
    nvrtc=""
    if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so\.13'; then
      nvrtc="$(python3 -c 'import glob, os, site
hits = [p for s in site.getsitepackages() for p in glob.glob(os.path.join(s, "nvidia", "**", "libnvrtc.so.13*"), recursive=True)]
print(os.path.dirname(hits[0]) if hits else "")' 2>/dev/null || true)"
    fi
    step train_loop 120 train_loop.log env LD_LIBRARY_PATH="$LD_LIBRARY_PATH${nvrtc:+:$nvrtc}" "$here/examples/train_loop" --batches 200 --batch-size 256
    say "  train_loop: $(tail -1 "$logs/train_loop.log" | cut -c1-150)"
    # Always --backend cuda: `auto` would fall back to the CPU and report CPU numbers with exit 0.
    common=(--backend cuda --preset train --dtype f16 --layout nchw --batch-size 256 --json)
    bench() { # bench NAME SECONDS ARGS...: one `stoke bench` into NAME.json; the images/s figure
      local name="$1" secs="$2"; shift 2
      step "bench $name" "$secs" "bench-$name.json" "$stoke" bench "$data" "${common[@]}" "$@"
      say "  $name: $(python3 - "$logs/bench-$name.json" <<'PY' 2>/dev/null
import json, sys
text = open(sys.argv[1]).read()
j = json.loads(text[text.index("{"):])
print(f"{j.get('images_per_sec', 0):.0f} images/s, {j.get('cpu_cores_used', 0):.2f} cores, decoders {j.get('decoders')}")
PY
)"
    }
    if "$stoke" bench --help 2>/dev/null | grep -q -- '--decode-only'; then
      bench decode-all 90 --decode-only --decoders all
      bench decode-hw 90 --decode-only --decoders hw
      bench decode-cuda 90 --decode-only --decoders cuda
    else
      skip "decoder-only benches" "this build of stoke bench has no --decode-only"
    fi
    bench end-to-end 120
    bench end-to-end-consumer 120 --consumer-us 40000
    for b in "$here"/bench-bin/cuda_kernels*; do
      [ -x "$b" ] || continue
      step "criterion $(basename "$b")" 150 "kernels.log" "$b" --bench --warm-up-time 1 --measurement-time 3
    done
    if [ -x "$here/scripts/bench-peers.sh" ]; then
      step "peers (torchvision GPU, nvImageCodec)" 240 peers.log env STOKE_BIN="$stoke" STOKE_LIBDIR="$here/lib" \
        "$here/scripts/bench-peers.sh" --dataset "$data" --epochs 2 --json-out "$logs/peers.json"
    fi
  fi
  questions "images_per_s_end_to_end images_per_s_decode_only hw_plus_cuda_vs_alone stage_times peak_device_bytes peak_pinned_bytes"
fi
exit $failed
