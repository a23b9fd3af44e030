#!/usr/bin/env bash
# bundle/run.sh (copied there by scripts/gpu-bundle.sh): runs stoke's GPU checks on a machine
# with an NVIDIA driver and nothing else (no Rust, no network). Two calls, each well under the
# device tool's 10 minutes, GPU work first:
#
#   run.sh tests   environment probe (nvidia-smi, which libcuda/libnvrtc/libnvjpeg load),
#                  `stoke doctor`, the gpu_* test executables and the library's CUDA unit
#                  tests (one test thread, RUST_BACKTRACE=1, a timeout per executable), then
#                  compute-sanitizer memcheck + racecheck on the pipeline and geometry tests;
#                  the tests part holds lib, gpu_pipeline, gpu_backends, gpu_decode and the
#                  corpus; `run.sh tests2` (the tests2 part) the other gpu_* tests (geometry,
#                  stream, views, resolution): two calls, each under 64 MiB
#   run.sh bench   train_loop, `stoke bench --backend cuda` end to end (with and without a
#                  consumer) and decoder-only (hardware, CUDA, both), the kernel benchmarks on
#                  a short budget, `stoke tune`, the GPU peers (torchvision, nvImageCodec when
#                  its wheel is carried in .whl/peers)
#   run.sh python  the Python package (carried, abi3) with the machine's torch: first
#                  examples/train_torch.py's fed/alone, 3 interleaved (fed, alone) pairs each for
#                  ResNet-50 (bf16 autocast, channels_last fed stoke's NHWC as a view) and ViT-B/16
#                  (timm, bf16 autocast): the summary line is the median of the pairs' ratios
#                  and their spread; then pytest on tests/python (test_cuda.py's device tests
#                  required), ResNet-50 on the DeiT recipe and on a side stream (one pair each),
#                  and the DeiT recipe against timm's transform + Mixup in a tuned DataLoader;
#                  the GPU peers too when the nvImageCodec wheel is carried
#   run.sh checks  the decoders side by side (decode-only with each decoder set, the engine at
#                  three call widths), canaries under a GPU another process saturates, malformed
#                  JPEGs through nvJPEG under a timeout (scripts/malformed-jpegs.py), the
#                  pipeline and backend tests and memcheck on the pipeline test
#   run.sh upsampling  (carries the checks part) smooth against nearest chroma upsampling:
#                  nvJPEG's engine alone one setting at a time (bin/nvjpeg-hw-load ablate) and
#                  called from 1, 2, 4 threads with and without a busy GPU (… threads),
#                  stoke bench end to end and engine-only with each (interleaved, twice; then
#                  end to end without NVML sampling),
#                  tests/gpu_decode's error per mode, ResNet-50 fed with each, and the rates
#                  with fp16 matmuls in the same process (scripts/gpu-under-load.py, nearest)
#   run.sh ahead   (carries the checks part) the producer's head start: `stoke bench` end to
#                  end and engine-only of this build against BASE_BIN (a stoke binary of an
#                  earlier commit, carried beside the bundle) interleaved three times, the
#                  pipeline and backend tests (batches prepared ahead equal those made in
#                  turn) and memcheck on the pipeline test, ResNet-50 fed, the torchvision peer
#   run.sh tail    (carries the checks part) what makes the slow batches: end to end with the
#                  CPU route on 2, 4 and 8 threads (`--threads`) interleaved twice, each
#                  report with its slowest batches' routes and stage times; the DeiT preset;
#                  the CUDA decoders alone; the engine alone with 8 CPU threads
#   run.sh cores   (carries the python part) where the CPU cores go and what the next epoch
#                  made ahead does: `stoke bench` end to end with and without it (--no-epoch-ahead)
#                  interleaved three times (every report has its cores by thread group, the CPU
#                  time inside the engine's calls, p99/p50 and each epoch start's wait), the engine
#                  alone, ResNet-50 fed/alone with and without it (3 pairs each)
#   run.sh routes  (carries the python part) where the ~5 % of images the engine cannot take
#                  (progressive, gray) are cheaper: `stoke bench` end to end with the default
#                  decoders against --decoders hw (those images on libjpeg-turbo's CPU route
#                  instead of nvJPEG's CUDA decoders, whose Huffman phase runs on the host too)
#                  and against the engine asked for gray too (--gpu-engine-gray, alone and with
#                  --decoders hw) and against everything the engine can take on it (gray, and
#                  the progressive photos rewritten as baseline: --transcode-progressive),
#                  interleaved three times after an epoch of warm-up (cores by thread, the CUDA
#                  lanes' CPU by part), then
#                  ResNet-50 fed/alone with each (3 pairs): whether the CUDA decoders' kernels
#                  cost the trainer, and which route costs fewer host cores
#   run.sh lanes   (carries the python part) one thread calling the hardware engine against two
#                  (--gpu-engine-lanes 2: each its own state and stream, so one call may keep the
#                  engine busy while the other waits for nvJPEG's per-image colour conversions,
#                  which queue behind a trainer's kernels for SMs): stoke.Loader's engine and end
#                  to end under fp16 matmuls in the same process (scripts/gpu-under-load.py
#                  --only engine), ResNet-50 fed/alone with each (3 pairs), then `stoke bench`
#                  end to end without load, interleaved twice (two lanes must not cost the idle
#                  rate)
#   run.sh beside  (carries the python part) what stoke's work costs the model without the data
#                  dependency, and whether its host threads in the trainer's process do:
#                  ResNet-50 and ViT-B/16, 3 pairs each of (fed, alone, beside): the model on
#                  its fixed batch while a second stoke.Loader makes and drops batches at the
#                  pair's fed rate, in a thread of the trainer's process (--beside thread) and in
#                  a process of its own (--beside process: its own CUDA context, as a producer
#                  process handing batches over through CUDA IPC would be; no MPS, so the GPU
#                  time-slices between the two processes as it would for that producer)
#   run.sh round   (carries the python part) every candidate of issue 40 once, in one call
#                  (about 7 minutes with the generated 12800): `stoke bench` end to end with the
#                  defaults and with the engine taking gray and rewritten progressive photos
#                  (cores, p99/p50), ResNet-50 fed/alone with --beside process and thread (the
#                  baseline twice, and what stoke's work and its host threads cost), with two
#                  engine lanes and with the engine variant, ViT-B/16 fed/alone, then end to end
#                  with two lanes, device bitstreams and the GPU-hybrid share, and the defaults
#                  again (drift): a first look at each where the window holds one call of them
#   run.sh soak    (carries the bench part) examples/soak on the device: 30 epochs of 2560
#                  images with host, device and pinned memory, threads and fds after each, then
#                  10 pipelines dropped mid-epoch; fails when anything grows after the warm-up
#   run.sh candle  (the candle part, when the bundle has one) candle's CUDA backend fed by
#                  stoke: tests/candle_cuda.rs and examples/train_candle --cuda
#
# Everything is logged into a temporary folder; after every step and on exit (also on TERM or
# INT, which the device tool sends at its limit) the logs are packed into ONE archive under
# $OUT (else ./bundle-out), beside summary.txt: one line per step (PASS/FAIL/SKIP and its
# figure), then the open questions of the GPU run, each answered from the logs or "not
# measured: <why>". So $OUT holds 2 files (3 for an instant while the archive is replaced).
# The summary also carries the ledger's lines (scripts/gpu-ledger.py, benches/results/gpu.jsonl):
# one LEDGER-MACHINE line (device, driver, CUDA, nvJPEG, commit) and a LEDGER line per figure of
# each passed step that names a ledger metric. The summary is printed last, without those.
# Without a GPU every GPU step is skipped (the executables are
# only listed, to show they start), the summary says so, and the run takes seconds.
#
# Settings: BUDGET (seconds for the whole call, default 540), TEST_TIMEOUT (per test
# executable, default 110), BENCH_SECONDS (stoke bench window, default 10), BENCH_COUNT
# (generated images, default 5120). STOKE_BUNDLE_ASSUME_GPU=1 runs the GPU steps even where no
# GPU is found (they fail there): to check their plumbing (logs, timeouts, the kill trap).
# TESTS_SMOKE=1 (`tests`, `tests2`): each test executable runs its first listed test only —
# CI's run on the simulated device, whose sim step has run the same executables whole.
set -uo pipefail
mode="${1:-tests}"
case "$mode" in tests | tests2 | bench | python | checks | upsampling | ahead | tail | cores | routes | lanes | beside | round | soak | candle) ;; *) echo "usage: run.sh tests|tests2|bench|python|checks|upsampling|ahead|tail|cores|routes|lanes|beside|round|soak|candle" >&2; exit 2 ;; esac
# The part of the bundle each mode carries besides core.
part="$mode"; case "$mode" in upsampling | ahead | tail) part=checks ;; cores | routes | lanes | beside | round) part=python ;; soak) part=bench ;; esac

bundle="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$PWD/bundle-out}"
mkdir -p "$out"
here="$(mktemp -d "${TMPDIR:-/tmp}/stoke-bundle.XXXXXX")"
logs="$here/logs"
p="$here/payload"
mkdir -p "$logs" "$p"
start=$(date +%s)
started_utc="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
budget="${BUDGET:-540}"
test_timeout="${TEST_TIMEOUT:-110}"
summary="$logs/summary.txt"
archive="stoke-$mode-logs.tar.gz"
failed=0
child=""
current=""

# Pack the logs and write the summary under $OUT; called after every step and at the end.
checkpoint() {
  tar -czf "$out/.$archive.part" -C "$here" logs 2>/dev/null && mv -f "$out/.$archive.part" "$out/$archive"
  cp "$summary" "$out/summary.txt" 2>/dev/null
}
finish() {
  trap - EXIT TERM INT
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  if [ -f "$p/scripts/bundle-questions.py" ] && command -v python3 >/dev/null 2>&1; then
    python3 "$p/scripts/bundle-questions.py" "$mode" "$logs" >> "$summary" 2>> "$logs/questions.err" \
      || echo "questions: the log reader failed (see questions.err)" >> "$summary"
  else
    echo "questions: not answered (no python3 on this machine)" >> "$summary"
  fi
  echo "total: $(( $(date +%s) - start )) s; logs in $out/$archive" >> "$summary"
  checkpoint
  # Printed without its LEDGER lines (long JSON, a few per step), which stay in summary.txt.
  grep -v '^LEDGER' "$summary"
  local nl; nl=$(grep -c '^LEDGER ' "$summary")
  [ "$nl" -gt 0 ] && echo "ledger: $nl figures in $out/summary.txt (scripts/gpu-ledger.py SUMMARY --append benches/results/gpu.jsonl)"
  cd / && rm -rf "$here"
}
killed() {
  echo "KILLED by signal $1 after $(( $(date +%s) - start )) s${current:+, during $current}: the steps after this line did not run" >> "$summary"
  failed=1
  finish
  exit 143
}
trap finish EXIT
trap 'killed TERM' TERM
trap 'killed INT' INT

note() { echo "$*" >> "$summary"; }
left() { echo $(( budget - ($(date +%s) - start) )); }

# ledger_lines KIND INPUT STEP COMMAND...: the step's figures as `LEDGER {json}` lines in the
# summary (scripts/gpu-ledger.py --emit KIND reads INPUT, the step's JSON), which
# scripts/gpu-ledger.py turns into benches/results/gpu.jsonl lines with the LEDGER-MACHINE
# line's facts: no figure is typed by hand. The command is written without this machine's
# paths (DATA for the generated set); the note names the call, its start and the step.
ledger_lines() {
  local kind="$1" input="$2" name="$3"; shift 3
  local cmd="$*"
  cmd="${cmd//"$data"/DATA}"; cmd="${cmd//"$logs/"/}"; cmd="${cmd//"$p/work/"/}"; cmd="${cmd//"$p/"/}"
  python3 "$p/scripts/gpu-ledger.py" --emit "$kind" --input "$input" --command "$cmd" \
    --note "run.sh $mode started $started_utc, step '$name'; ${BENCH_COUNT:-5120} generated images" \
    >> "$summary" 2>> "$logs/ledger.err" || note "ledger: no figure from step '$name' (see ledger.err)"
}

# step NAME TIMEOUT LOG COMMAND...: run with a timeout (never past the budget), log, record.
# The figure for the summary line comes from $figure (a command run on the log) when set; a
# step that passed with $ledger set (a kind of scripts/gpu-ledger.py --emit) also writes its
# ledger lines, from $ledger_in when set (a JSON file the command wrote), else from the log.
step() {
  local name="$1" limit="$2" log="$logs/$3"; shift 3
  local remain; remain=$(( $(left) - 15 ))
  if [ "$remain" -lt 10 ]; then note "SKIP $name: out of time (budget ${budget} s)"; checkpoint; return 0; fi
  [ "$limit" -gt "$remain" ] && limit=$remain
  local t=$(date +%s)
  echo "+ $* (timeout ${limit} s)" >> "$log"
  current="$name"
  timeout -k 5 "$limit" "$@" >> "$log" 2>&1 &
  child=$!
  wait "$child"; local rc=$?
  child=""
  current=""
  local secs=$(( $(date +%s) - t )) fig=""
  [ -n "${figure:-}" ] && fig="$(eval "$figure" < "$log" 2>/dev/null | tail -1 | cut -c1-160)"
  # A failure without its figure shows the log's last line (usually the error).
  [ $rc -ne 0 ] && [ -z "$fig" ] && fig="$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-160)"
  if [ $rc -eq 0 ]; then
    note "PASS $name (${secs} s)${fig:+: $fig}"
    [ -n "${ledger:-}" ] && ledger_lines "$ledger" "${ledger_in:-$log}" "$name" "$@"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    note "FAIL $name: timed out after ${limit} s${fig:+: $fig}"; failed=1
  else
    note "FAIL $name (exit $rc, ${secs} s)${fig:+: $fig}"; failed=1
  fi
  checkpoint
  return $rc
}

note "stoke GPU bundle, run.sh $mode: $started_utc on $(hostname)"
# core.tar.gz and this mode's part (scripts/gpu-bundle.sh: the device tool carries 64 MiB a call).
for pt in core "$part"; do
  if ! tar -xzf "$bundle/$pt.tar.gz" -C "$p" 2>> "$logs/unpack.log"; then
    note "FAIL unpack: $bundle/$pt.tar.gz (carry bundle/run.sh, bundle/core.tar.gz and bundle/$part.tar.gz)"; failed=1; exit 1
  fi
done
bin="$p/bin/stoke"
export LD_LIBRARY_PATH="$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export STOKE_NVJPEG="$p/lib/libnvjpeg.so.13" STOKE_BIN="$bin" RUST_BACKTRACE=1
# STOKE_BUNDLE_DEVICE_LIBS: a folder whose libcuda.so.1 and libnvjpeg.so.13 are used instead of
# the machine's driver and the bundle's nvJPEG (CI: the simulated device, docs/sim.md).
if [ -n "${STOKE_BUNDLE_DEVICE_LIBS:-}" ]; then
  export LD_LIBRARY_PATH="$STOKE_BUNDLE_DEVICE_LIBS:$LD_LIBRARY_PATH"
  export STOKE_NVJPEG="$STOKE_BUNDLE_DEVICE_LIBS/libnvjpeg.so.13"
fi
# NVRTC (the fallback test, train_loop's consumer kernel) needs the CUDA 13.0 headers: carried.
[ -d "$p/include" ] && export STOKE_CUDA_INCLUDE="$p/include"
# libnvrtc: the system's, else the pip wheel's (the GPU image has nvidia-cuda-nvrtc).
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so\.13'; then
  nvrtc="$(python3 -c 'import glob, os, site
hits = [p for s in site.getsitepackages() for p in glob.glob(os.path.join(s, "nvidia", "**", "libnvrtc.so.13*"), recursive=True)]
print(os.path.dirname(hits[0]) if hits else "")' 2>/dev/null || true)"
  [ -n "$nvrtc" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nvrtc"
fi
export XDG_CACHE_HOME="${TMPDIR:-/tmp}/stoke-bundle-cache"
export CRITERION_HOME="$here/criterion"

# --- environment probe (both modes) ----------------------------------------------------------
{
  echo "== nvidia-smi"; timeout 20 nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  echo "== LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "== STOKE_CUDA_INCLUDE=${STOKE_CUDA_INCLUDE:-}"
  for lib in libcuda.so.1 libnvrtc.so.13 libnvjpeg.so.13 libnvidia-ml.so.1; do
    found="$(ldconfig -p 2>/dev/null | grep -m1 "$lib" | sed 's/.*=> //')"
    for d in ${LD_LIBRARY_PATH//:/ }; do [ -z "$found" ] && [ -e "$d/$lib" ] && found="$d/$lib"; done
    echo "$lib: ${found:-not found}"
  done
  echo "== compute-sanitizer: $(command -v compute-sanitizer || echo 'not found')"
  echo "== python3: $(python3 --version 2>&1)"
} > "$logs/env.log" 2>&1
gpu_name="$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
if [ "${STOKE_BUNDLE_ASSUME_GPU:-0}" = 1 ]; then
  gpu=1
  note "GPU ASSUMED (STOKE_BUNDLE_ASSUME_GPU=1, to check the plumbing of the GPU steps): ${gpu_name:-none found}"
elif [ -n "$gpu_name" ] && grep -q '^libcuda.so.1: /' "$logs/env.log"; then
  gpu=1
  note "GPU: $gpu_name"
elif [ -n "${STOKE_BUNDLE_DEVICE_LIBS:-}" ] && dev_name="$("$bin" doctor --json 2>/dev/null | python3 -c 'import json, sys
d = json.load(sys.stdin)["devices"]
print(d[0]["name"] if d else "")' 2>/dev/null)" && [ -n "$dev_name" ]; then
  gpu=1
  note "DEVICE (from STOKE_BUNDLE_DEVICE_LIBS, no nvidia-smi): $dev_name"
else
  gpu=0
  note "NO GPU: nvidia-smi found no GPU or libcuda.so.1 is not loadable; every GPU step is SKIPPED (this run only checks the bundle's plumbing)"
fi
checkpoint

figure='grep -m1 "^backend"' step "doctor" 30 doctor.txt "$bin" doctor
figure='' step "doctor --json" 30 doctor.json sh -c "'$bin' doctor --json"
# The ledger's facts of this run (scripts/gpu-ledger.py): device and driver as nvidia-smi names
# them, CUDA and nvJPEG as stoke doctor finds them, the bundle's commit. On the simulated device
# the device is its name, which the ledger refuses.
if [ $gpu = 1 ] && [ -f "$p/scripts/gpu-ledger.py" ]; then
  python3 "$p/scripts/gpu-ledger.py" --emit machine --input "$logs/doctor.json" --smi "$gpu_name" \
    --commit "$(cat "$p/COMMIT" 2>/dev/null)" --date "${started_utc%%T*}" >> "$summary" 2>> "$logs/ledger.err" \
    || note "ledger: no LEDGER-MACHINE line (see ledger.err): this call's figures cannot enter the ledger"
  checkpoint
fi

# Test executables run from work/ (test data found relative to the working directory).
cd "$p/work" || exit 1
test_figure='grep -E "^test result:"'

# smoke_args EXECUTABLE [FILTER]: with TESTS_SMOKE=1, the libtest arguments that select its
# first listed test (matching FILTER) and nothing else; otherwise FILTER alone.
smoke_args() {
  local first
  if [ "${TESTS_SMOKE:-0}" = 1 ]; then
    first="$("$1" ${2:+"$2"} --list 2>/dev/null | sed -n 's/: test$//p' | head -1)"
    [ -n "$first" ] && { printf '%s\n' --exact "$first"; return; }
  fi
  [ -z "${2:-}" ] || printf '%s\n' "$2"
}

run_tests() {
  local t name sel
  for t in "$p"/tests/gpu_*; do
    [ -x "$t" ] || continue
    name="$(basename "$t")"
    if [ $gpu = 0 ]; then
      local n; n="$("$t" --list 2>/dev/null | grep -c ': test$')"
      note "SKIP $name: no GPU (the executable starts: $n tests listed)"
      continue
    fi
    local corpus=()
    [ -d "$p/corpus/imagenet_like" ] && corpus=(env STOKE_CORPUS="$p/corpus")
    mapfile -t sel < <(smoke_args "$t")
    figure="$test_figure" step "$name" "$test_timeout" "test-$name.log" \
      env STOKE_REQUIRE_GPU=1 "${corpus[@]}" "$t" "${sel[@]}" --test-threads=1 --nocapture
  done
  local lib="$p/tests/lib-stoke"
  if [ -x "$lib" ]; then
    if [ $gpu = 0 ]; then
      note "SKIP lib CUDA unit tests: no GPU ($("$lib" backend::cuda --list 2>/dev/null | grep -c ': test$') tests listed)"
    else
      mapfile -t sel < <(smoke_args "$lib" backend::cuda)
      figure="$test_figure" step "lib CUDA unit tests (backend::cuda)" "$test_timeout" test-lib-cuda.log \
        env STOKE_REQUIRE_GPU=1 "$lib" "${sel[@]}" --test-threads=1 --nocapture
    fi
  fi
  local tool name2
  for t in gpu_pipeline gpu_geometry; do
    for tool in memcheck racecheck; do
      name2="compute-sanitizer $tool $t"
      if [ $gpu = 0 ]; then note "SKIP $name2: no GPU"; continue; fi
      if ! command -v compute-sanitizer >/dev/null 2>&1; then note "SKIP $name2: compute-sanitizer not found"; continue; fi
      [ -x "$p/tests/$t" ] || { note "SKIP $name2: $t not in the bundle"; continue; }
      figure='grep -E "ERROR SUMMARY|^test result:"' step "$name2" 120 "sanitizer-$tool-$t.log" \
        env STOKE_REQUIRE_GPU=1 STOKE_UNDER_SANITIZER="$tool" compute-sanitizer --tool "$tool" --error-exitcode 3 "$p/tests/$t" --test-threads=1
    done
  done
}

bench_json_figure='python3 -c "import json,sys
r=[json.loads(l) for l in sys.stdin if l.startswith(\"{\")][-1]
w=r[\"windows\"]
print(\"%s %.0f images/s (windows min %.0f / median %.0f / max %.0f), %.2f cores, decoders %s\" % (r[\"backend\"], r[\"images_per_sec\"], w[\"min\"], w[\"median\"], w[\"max\"], r[\"cpu_cores_used\"], r[\"decoders\"]))"'

# The generated ImageNet-like set both bench and python use (kept while the machine is warm).
data="$XDG_CACHE_HOME/stoke/bundle-n${BENCH_COUNT:-5120}"
ensure_data() {
  if [ ! -f "$data/.complete" ]; then
    figure='' step "gen ${BENCH_COUNT:-5120} images" 150 gen.log sh -c "'$bin' gen '$data' --count ${BENCH_COUNT:-5120} && touch '$data/.complete'"
  fi
}

# The GPU peers (torchvision's batched GPU decode + transforms v2, nvImageCodec) against stoke on
# the same set; nvImageCodec from the wheels carried in .whl/peers (bench-peers.sh fetch-wheels).
gpu_peers() {
  if [ -f "$p/benches/peers/run_all.py" ]; then
    local wheels="$bundle/../.whl/peers" deps="$here/peer-deps"
    if compgen -G "$wheels/*.whl" >/dev/null; then
      python3 -m pip install -q --no-deps --no-index --target "$deps" "$wheels"/*.whl > "$logs/peer-wheels.log" 2>&1 \
        && export PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}"
    else
      note "nvImageCodec: no wheel carried in .whl/peers (scripts/bench-peers.sh fetch-wheels, here): its peer fails to import"
    fi
    ledger=peers ledger_in="$logs/peers.json" figure='grep -E "images/s|stoke|torchvision|nvImageCodec" | tail -4 | tr -s " " | paste -sd";"' \
      step "peers (torchvision GPU decode + v2, nvImageCodec)" 200 peers.log \
      python3 "$p/benches/peers/run_all.py" --stoke "$bin" --dataset "$data" --epochs 3 --peers torchvision,nvimgcodec \
      --timeout 90 --commit "$(cat "$p/COMMIT" 2>/dev/null || echo unknown)" \
      --benchmarks "$logs/peer-rows.md" --json-out "$logs/peers.json"
  fi
}

# decode_only BENCH-ARGS...: `stoke bench BENCH-ARGS --decode-only` with each decoder set (both,
# the hardware engine alone, the CUDA decoders alone), logged as bench-decode-<set>.json.
decode_only() {
  if ! "$bin" bench --help 2>/dev/null | grep -q -- '--decode-only'; then
    note "SKIP stoke bench decode-only: this stoke has no --decode-only/--decoders flags yet"
    return
  fi
  local dec kind
  for dec in all hw cuda; do
    case "$dec" in all) kind=decode-all ;; hw) kind=engine ;; cuda) kind=cuda-decoders ;; esac
    ledger="$kind" figure="$bench_json_figure" step "stoke bench decode-only --decoders $dec" 60 "bench-decode-$dec.json" \
      "$bin" "$@" --decode-only --decoders "$dec"
  done
}

# What `stoke bench --json` says of a malformed set: images, replaced, and which decoders.
malformed_figure='python3 -c "import json,sys
r=[json.loads(l) for l in sys.stdin if l.startswith(\"{\")][-1]
print(\"%d images, %d replaced, decoders %s\" % (r[\"images\"], r[\"errors\"], r[\"decoders\"]))"'

run_bench() {
  local secs="${BENCH_SECONDS:-10}"
  if [ $gpu = 0 ]; then
    for s in gen train_loop "stoke bench e2e" "stoke bench e2e --preset deit" "stoke bench e2e + consumer" "stoke bench decode-only" cuda_kernels tune peers; do
      note "SKIP $s: no GPU"
    done
    return
  fi
  ensure_data
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --seconds "$secs" --json)
  ledger=e2e figure="$bench_json_figure" step "stoke bench e2e" 90 bench-e2e.json "$bin" "${common[@]}"
  # DeiT's recipe (bicubic, RandAugment's uint8 op chain, erasing, mixup) on the GPU.
  ledger=e2e-deit figure="$bench_json_figure" step "stoke bench e2e --preset deit" 90 bench-deit.json \
    "$bin" "${common[@]}" --preset deit
  # About a ResNet-50 step on one H100 per batch of 256: the trainer's wait should be ~0.
  figure="$bench_json_figure" step "stoke bench e2e + consumer 40 ms" 90 bench-consumer.json \
    "$bin" "${common[@]}" --consumer-us 40000
  decode_only "${common[@]}"
  if [ -x "$p/examples/train_loop" ]; then
    figure='tail -1' step "train_loop" 120 train_loop.log "$p/examples/train_loop" "$data" --batches 200 --batch-size 256
  fi
  local b
  for b in "$p"/bench-bin/cuda_kernels*; do
    [ -x "$b" ] || continue
    figure='grep -cE "^[a-z_/0-9]+ +time:"' step "cuda_kernels (criterion, 1 s warm-up, 2 s per bench)" 150 cuda_kernels.log \
      "$b" --bench --warm-up-time 1 --measurement-time 2 --noplot
  done
  figure='' step "tune" 120 tune.json "$bin" tune "$data" --backend cuda --dtype f16 --batch-size 256 --batches 10 \
    --out "$logs/tuned.json" --json
  gpu_peers
}

# train_torch.py's figure: its last `RESULT {json}` line as one short line (the model, recipe,
# fed/alone median [min-max] over the pairs and each pair's ratio, the median rates, data wait,
# GPU utilization fed/alone); the script reads its own log (`--figure`, no torch imported).
train_figure='python3 "$p/work/examples/train_torch.py" --figure'
pytest_figure='grep -E "(passed|failed|error)" | tail -1'

run_python() {
  if [ ! -d "$p/python/stoke" ]; then note "FAIL python: python.tar.gz holds no Python package"; failed=1; return; fi
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" STOKE_BIN="$bin" PYTHONUNBUFFERED=1
  figure='tail -1' step "python: import stoke" 60 python-import.log python3 -c \
    "import importlib.util as u, stoke; print('stoke', stoke.__file__, 'dlpack', stoke.DLPACK_VERSION, 'torch', 'importable' if u.find_spec('torch') else 'absent')"
  if [ $gpu = 0 ]; then
    for s in "train_torch resnet50 fed/alone, 3 pairs" "train_torch vit_b16 fed/alone, 3 pairs" "pytest tests/python" "train_torch resnet50 deit" "train_torch resnet50 side stream" "peers deit"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  # fed/alone first (the call's main figure; a call cut at its limit still has it): 3
  # interleaved (fed, alone) pairs, each segment 10 untimed + --steps timed steps of 256 with
  # the same per-step work. Rough times on one H100/H200, from the H200 run at 8e74fe8
  # (BENCHMARKS.md; ResNet-50 ~5.3k images/s fed, ~5.9k alone: ~45 ms a step): ResNet-50 3 x 220 steps ~30 s
  # plus ~20 s of start (torch, CUDA, loader, cuDNN autotuning): ~50 s. ViT-B/16 has not run
  # here; at an estimated 1.5k-3k images/s (85-170 ms a step) 3 x 140 steps is 35-70 s plus
  # start: ~60-90 s. Memory: ViT-B/16 at 256 in bf16 autocast, roughly 40-50 GB (DeiT-B fit
  # 128 a GPU in 32 GB): within an H100's 78 GiB (the --json line has torch's peak).
  ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone, 3 pairs (train preset)" 180 train-torch.log \
    python3 "$p/work/examples/train_torch.py" "$data" --model resnet50 --pairs 3 --steps 100 --batch-size 256 --json
  ledger=train figure="$train_figure" step "train_torch vit_b16 fed/alone, 3 pairs (train preset)" 240 train-torch-vit.log \
    python3 "$p/work/examples/train_torch.py" "$data" --model vit_b16 --pairs 3 --steps 60 --batch-size 256 --json
  # ~40 s (36.7 s at 8e74fe8).
  figure="$pytest_figure" step "pytest tests/python (device tests required)" 240 pytest.log \
    env STOKE_REQUIRE_GPU=1 python3 -m pytest -q -rs -s -p no:cacheprovider "$p/work/tests/python"
  # One pair each (~35 s each): the DeiT recipe's cost to the trainer, and the same on a stream
  # of the trainer's own: a fed/alone that rises there says the model waited on stoke's work
  # through the legacy default stream.
  ledger=train figure="$train_figure" step "train_torch resnet50 deit preset, 1 pair" 120 train-torch-deit.log \
    python3 "$p/work/examples/train_torch.py" "$data" --preset deit --pairs 1 --steps 100 --batch-size 256 --json
  ledger=train figure="$train_figure" step "train_torch resnet50 train preset, side stream, 1 pair" 120 train-torch-side.log \
    python3 "$p/work/examples/train_torch.py" "$data" --pairs 1 --steps 100 --batch-size 256 --side-stream --json
  if [ -f "$p/benches/peers/run_all.py" ]; then
    ledger=peers ledger_in="$logs/peers-deit.json" figure='grep -E "images/s|stoke|torch-dataloader" | tail -3 | tr -s " " | paste -sd";"' \
      step "peers deit: stoke --preset deit vs timm transform + Mixup in a DataLoader" 200 peers-deit.log \
      python3 "$p/benches/peers/run_all.py" --stoke "$bin" --dataset "$data" --epochs 6 --peers torch --recipe deit \
      --workers 8,16 --timeout 90 --commit "$(cat "$p/COMMIT" 2>/dev/null || echo unknown)" \
      --benchmarks "$logs/peer-rows-deit.md" --json-out "$logs/peers-deit.json"
  fi
  # The GPU peers here too when the nvImageCodec wheel travelled with this call.
  if compgen -G "$bundle/../.whl/peers/*.whl" >/dev/null; then gpu_peers; fi
}

# The targeted checks only hardware answers, and the decoders' rates side by side: decode-only
# with each decoder set and at three call widths (the engine's calls hold batch/4 images), the
# engine under a GPU saturated by another process (canaries: `retried` must stay 0), malformed
# JPEGs through nvJPEG under a timeout (no crash, no hang: named substitutes; by kind and file
# with scripts/malformed-report.py), and the pipeline and backend tests with memcheck.
run_checks() {
  if [ $gpu = 0 ]; then
    for s in "decode-only sweep" "canary under load" "malformed JPEGs" "gpu_pipeline" "gpu_backends" "peers"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  local secs="${BENCH_SECONDS:-5}" t
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --seconds "$secs" --json)
  ledger=e2e figure="$bench_json_figure" step "stoke bench e2e" 60 bench-e2e.json "$bin" "${common[@]}" --batch-size 256
  decode_only "${common[@]}" --batch-size 256
  for bs in 64 1024; do
    figure="$bench_json_figure" step "decode-only --decoders hw, batch $bs (calls of $((bs / 4)))" 60 "bench-decode-hw-b$bs.json" \
      "$bin" "${common[@]}" --batch-size "$bs" --decode-only --decoders hw
  done
  # Another process keeps the GPU busy (large half-precision matmuls) while the engine decodes.
  python3 -c "
import torch, time
a = torch.randn(8192, 8192, device='cuda', dtype=torch.half); b = torch.randn_like(a)
t = time.time()
while time.time() - t < ${secs} + 12:
    for _ in range(20): a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize()
" > "$logs/load.log" 2>&1 &
  local load=$!
  sleep 4
  figure="$bench_json_figure" \
    step "canary under load: decode-only --decoders hw while another process saturates the GPU" 60 bench-decode-hw-load.json \
    "$bin" "${common[@]}" --batch-size 256 --decode-only --decoders hw
  wait "$load" 2>/dev/null
  local bad="$here/malformed"
  figure='tail -1' step "malformed JPEGs: make" 60 malformed-make.log python3 "$p/scripts/malformed-jpegs.py" "$data" "$bad" --per-kind 48
  # The CPU backend on the same files: what a decoder that sees them whole replaces.
  figure="$malformed_figure" \
    step "malformed JPEGs through the CPU backend (reference)" 60 malformed-cpu.json \
    "$bin" bench "$bad" --backend cpu --batch-size 64 --epochs 2 --warmup-batches 0 --on-error skip --json
  for dec in all hw; do
    figure="$malformed_figure" \
      step "malformed JPEGs through --decoders $dec (2 epochs, --on-error skip, 90 s timeout)" 90 "malformed-$dec.json" \
      "$bin" bench "$bad" --backend cuda --dtype f16 --batch-size 64 --epochs 2 --warmup-batches 0 --on-error skip --decoders "$dec" --json
  done
  # The same files through stoke.Loader on each backend: which ones each replaces, by kind, and
  # the files one delivers where the other replaces them (with both reasons).
  if [ -d "$p/python/stoke" ]; then
    figure='tail -1 | cut -c1-150' step "malformed JPEGs by kind: CPU and CUDA backends (stoke.Loader)" 90 malformed-report.log \
      env PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$p/scripts/malformed-report.py" "$bad"
  fi
  for t in gpu_pipeline gpu_backends; do
    [ -x "$p/tests/$t" ] || { note "SKIP $t: not in the bundle"; continue; }
    figure="$test_figure" step "$t" "$test_timeout" "test-$t.log" env STOKE_REQUIRE_GPU=1 "$p/tests/$t" --test-threads=1 --nocapture
  done
  if command -v compute-sanitizer >/dev/null 2>&1 && [ -x "$p/tests/gpu_pipeline" ]; then
    figure='grep -E "ERROR SUMMARY|^test result:"' step "compute-sanitizer memcheck gpu_pipeline" 90 sanitizer-memcheck-gpu_pipeline.log \
      env STOKE_REQUIRE_GPU=1 STOKE_UNDER_SANITIZER=memcheck compute-sanitizer --tool memcheck --error-exitcode 3 "$p/tests/gpu_pipeline" --test-threads=1
  fi
  gpu_peers
}

# smooth (the default) against nearest chroma upsampling (PipelineConfig::gpu_upsampling): what
# the engine gains, what the pictures lose, what a trainer gets.
run_upsampling() {
  if [ $gpu = 0 ]; then
    for s in "nvjpeg-hw-load ablate" "nvjpeg-hw-load threads" "stoke bench per upsampling" gpu_decode "train_torch per upsampling" gpu-under-load "peers at nearest"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  figure='grep -E "^[A-G] |^A again" | sed -E "s/ +/ /g; s/;.*//" | paste -sd";"' \
    step "nvjpeg-hw-load ablate: the engine alone, one of stoke's settings at a time" 60 hw-ablate.log \
    sh -c "find '$data' -type f | sort | head -2048 | '$p/bin/nvjpeg-hw-load' 64 2 ablate"
  # Do concurrent engine calls overlap the conversion kernels' waits under a busy GPU?
  figure='grep "thread(s) calling" | sed -E "s/ +/ /g; s/;.*//" | paste -sd";"' \
    step "nvjpeg-hw-load threads: 1, 2, 4 threads calling the engine, without and with spinning SMs" 60 hw-threads.log \
    sh -c "find '$data' -type f | sort | head -2048 | '$p/bin/nvjpeg-hw-load' 64 2 threads"
  local secs="${BENCH_SECONDS:-5}" up rep
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --seconds "$secs" --json)
  for rep in 1 2; do
    for up in smooth nearest; do
      ledger=e2e figure="$bench_json_figure" step "stoke bench e2e, $up upsampling ($rep)" 60 "bench-e2e-$up-$rep.json" \
        "$bin" "${common[@]}" --gpu-upsampling "$up"
      ledger=engine figure="$bench_json_figure" step "decode-only --decoders hw, $up upsampling ($rep)" 60 "bench-decode-hw-$up-$rep.json" \
        "$bin" "${common[@]}" --gpu-upsampling "$up" --decode-only --decoders hw
    done
  done
  # NVML sampling off: stoke.Loader (no sampling) ran 7.2k images/s where `stoke bench` ran 5.8k.
  for up in smooth nearest; do
    ledger=e2e figure="$bench_json_figure" step "stoke bench e2e, $up upsampling, --no-gpu-util" 60 "bench-e2e-$up-nonvml.json" \
      "$bin" "${common[@]}" --gpu-upsampling "$up" --no-gpu-util
  done
  if [ -x "$p/tests/gpu_decode" ]; then
    figure='grep "STOKE-Q pixel-error: whole" | sed "s/; DecodeStats.*//" | paste -sd";"' \
      step "gpu_decode: each upsampling against libjpeg-turbo (generated images)" "$test_timeout" test-gpu_decode.log \
      env STOKE_REQUIRE_GPU=1 "$p/tests/gpu_decode" --test-threads=1 --nocapture
  fi
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  for up in smooth nearest; do
    ledger=train figure="$train_figure" step "train_torch resnet50, $up upsampling" 120 "train-torch-$up.log" \
      python3 "$p/work/examples/train_torch.py" "$data" --pairs 1 --steps 100 --batch-size 256 --gpu-upsampling "$up" --json
  done
  # NVML sampling (every 50 ms over the timed steps) off: does it cost the trainer anything?
  ledger=train figure="$train_figure" step "train_torch resnet50, smooth upsampling, no NVML sampling" 120 train-torch-smooth-nonvml.log \
    python3 "$p/work/examples/train_torch.py" "$data" --pairs 1 --steps 100 --batch-size 256 --no-gpu-util --json
  figure='grep "images/s" | sed -E "s/, host decode.*//" | paste -sd";"' \
    step "gpu-under-load.py: fp16 matmuls in the same process, nearest" 120 under-load.log \
    python3 "$p/scripts/gpu-under-load.py" "$data" --gpu-upsampling nearest --seconds 4
  # The GPU peers decode with nvJPEG's default (nearest): stoke the same way beside them.
  if [ -f "$p/benches/peers/run_all.py" ]; then
    ledger=peers ledger_in="$logs/peers-nearest.json" figure='grep -E "images/s|stoke|torchvision" | tail -3 | tr -s " " | paste -sd";"' \
      step "peers with stoke at nearest upsampling (torchvision GPU decode + v2)" 120 peers-nearest.log \
      python3 "$p/benches/peers/run_all.py" --stoke "$bin" --dataset "$data" --epochs 3 --peers torchvision \
      --gpu-upsampling nearest --timeout 90 --commit "$(cat "$p/COMMIT" 2>/dev/null || echo unknown)" \
      --benchmarks "$logs/peer-rows-nearest.md" --json-out "$logs/peers-nearest.json"
  fi
}

# This build against BASE_BIN (an earlier commit's stoke), interleaved, then the checks that
# the batches prepared ahead (Backend::run_ahead) are the batches made in turn.
run_ahead() {
  if [ $gpu = 0 ]; then
    for s in "stoke bench against BASE_BIN" gpu_pipeline gpu_backends "memcheck gpu_pipeline" "train_torch" "peers"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  local secs="${BENCH_SECONDS:-5}" rep
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --seconds "$secs" --json --gpu-upsampling nearest)
  local base="${BASE_BIN:-}"
  [ -n "$base" ] && [ ! -x "$base" ] && { note "SKIP base: BASE_BIN=$base is not an executable"; base=""; }
  for rep in 1 2 3; do
    if [ -n "$base" ]; then
      figure="$bench_json_figure" step "base: stoke bench e2e ($rep)" 60 "bench-e2e-base-$rep.json" "$base" "${common[@]}"
    fi
    # Only this build's figures go to the ledger: the summary names one commit, the bundle's.
    ledger=e2e figure="$bench_json_figure" step "this build: stoke bench e2e ($rep)" 60 "bench-e2e-new-$rep.json" "$bin" "${common[@]}"
  done
  if [ -n "$base" ]; then
    figure="$bench_json_figure" step "base: decode-only --decoders hw" 60 bench-decode-hw-base.json "$base" "${common[@]}" --decode-only --decoders hw
  fi
  ledger=engine figure="$bench_json_figure" step "this build: decode-only --decoders hw" 60 bench-decode-hw-new.json "$bin" "${common[@]}" --decode-only --decoders hw
  for t in gpu_pipeline gpu_backends; do
    [ -x "$p/tests/$t" ] || { note "SKIP $t: not in the bundle"; continue; }
    figure="$test_figure" step "$t" "$test_timeout" "test-$t.log" env STOKE_REQUIRE_GPU=1 "$p/tests/$t" --test-threads=1 --nocapture
  done
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  ledger=train figure="$train_figure" step "train_torch resnet50 (defaults: nearest upsampling)" 120 train-torch.log \
    python3 "$p/work/examples/train_torch.py" "$data" --pairs 1 --steps 100 --batch-size 256 --json
  if [ -f "$p/benches/peers/run_all.py" ]; then
    ledger=peers ledger_in="$logs/peers.json" figure='grep -E "images/s|stoke|torchvision" | tail -3 | tr -s " " | paste -sd";"' \
      step "peers (torchvision GPU decode + v2)" 120 peers.log \
      python3 "$p/benches/peers/run_all.py" --stoke "$bin" --dataset "$data" --epochs 3 --peers torchvision \
      --timeout 90 --commit "$(cat "$p/COMMIT" 2>/dev/null || echo unknown)" \
      --benchmarks "$logs/peer-rows.md" --json-out "$logs/peers.json"
  fi
  if command -v compute-sanitizer >/dev/null 2>&1 && [ -x "$p/tests/gpu_pipeline" ]; then
    figure='grep -E "ERROR SUMMARY|^test result:"' step "compute-sanitizer memcheck gpu_pipeline" 120 sanitizer-memcheck-gpu_pipeline.log \
      env STOKE_REQUIRE_GPU=1 STOKE_UNDER_SANITIZER=memcheck compute-sanitizer --tool memcheck --error-exitcode 3 "$p/tests/gpu_pipeline" --test-threads=1
  fi
}

# The batches far over the median (p99 ~2.4x p50 on an H200): is it the CPU route's threads?
run_tail() {
  if [ $gpu = 0 ]; then
    for s in "stoke bench --threads 2/4/8" "--preset deit" "--decoders cuda" "--decoders hw --threads 8" "train_torch --preset deit"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  local secs="${BENCH_SECONDS:-5}" rep t
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --seconds "$secs" --json)
  for rep in 1 2; do
    for t in 2 4 8; do
      ledger=e2e figure="$bench_json_figure" step "stoke bench e2e --threads $t ($rep)" 60 "bench-e2e-t$t-$rep.json" "$bin" "${common[@]}" --threads "$t"
    done
  done
  ledger=e2e-deit figure="$bench_json_figure" step "stoke bench e2e --preset deit" 60 bench-e2e-deit.json "$bin" "${common[@]}" --preset deit
  ledger=cuda-decoders figure="$bench_json_figure" step "decode-only --decoders cuda (two lanes)" 60 bench-decode-cuda.json "$bin" "${common[@]}" --decode-only --decoders cuda
  ledger=engine figure="$bench_json_figure" step "decode-only --decoders hw --threads 8" 60 bench-decode-hw-t8.json "$bin" "${common[@]}" --decode-only --decoders hw --threads 8
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  ledger=train figure="$train_figure" step "train_torch resnet50 --preset deit" 120 train-torch-deit.log \
    python3 "$p/work/examples/train_torch.py" "$data" --pairs 1 --steps 100 --batch-size 256 --preset deit --json
}

# Where the cores go (the goal: at most 1 per 10k images/s; 2.23-2.37 on an H100 at 7f8b030), and
# whether the next epoch made ahead takes the epoch starts out of the batch wait's tail.
cores_figure='python3 -c "import json,sys
r=[json.loads(l) for l in sys.stdin if l.startswith(\"{\")][-1]
g=r.get(\"gpu_stages\") or {}
n=max(g.get(\"batches\",0),1)
t=\", \".join(\"%s x%d %.2f\" % (x[\"name\"], x[\"threads\"], x[\"cores\"]) for x in r.get(\"cpu_by_thread\",[])[:6])
l=r.get(\"latency_ms\") or {}
e=[round(x) for x in r.get(\"epoch_start_wait_ms\",[])[:8]]
d=r.get(\"decoders\") or {}
i=g.get(\"idle\") or {}
w=sum(v for x,v in i.items() if x!=\"batches\")*1e3/max(i.get(\"batches\",0),1)
print(\"%.0f images/s, %.2f cores (%.2f per 10k), engine idle %.1f ms/batch, images engine/cuda/cpu %s/%s/%s%s%s, waits %s, bitstreams %s (%s copies); engine calls %.1f ms wall / %.1f ms cpu per batch; CUDA lanes cpu huffman %.1f / queue %.1f / wait %.1f ms per batch; nvJPEG holds %.0f MiB, %s allocations in the window; by thread: %s; p99/p50 %.2f; epoch starts %s ms (made ahead: %s)\" % (r[\"images_per_sec\"], r[\"cpu_cores_used\"], r[\"cpu_cores_used\"]*1e4/max(r[\"images_per_sec\"],1), w, d.get(\"hardware\"), d.get(\"cuda\"), d.get(\"cpu\"), \" (gray on the engine)\" if r.get(\"gpu_engine_gray\") else \"\", \" (progressive rewritten: %s, %s in the window)\" % ((r.get(\"transcoded\") or {}).get(\"rewrites\"), (r.get(\"transcoded\") or {}).get(\"rewrites_in_window\")) if r.get(\"transcoded\") else \"\", r.get(\"gpu_wait\"), r.get(\"gpu_bitstream\"), (r.get(\"decoders\") or {}).get(\"bitstream_copies\"), 1e3*g.get(\"hw_host\",0)/n, 1e3*g.get(\"hw_host_cpu\",0)/n, 1e3*g.get(\"cuda_huffman_cpu\",0)/n, 1e3*g.get(\"cuda_queue_cpu\",0)/n, 1e3*g.get(\"cuda_wait_cpu\",0)/n, ((r.get(\"nvjpeg\") or {}).get(\"device_bytes\",0)+(r.get(\"nvjpeg\") or {}).get(\"pinned_bytes\",0))/2**20, (r.get(\"nvjpeg\") or {}).get(\"allocations_in_window\"), t, l.get(\"p99\",0)/max(l.get(\"p50\",0),1e-9), e, r.get(\"epoch_ahead\")))"'
run_cores() {
  if [ $gpu = 0 ]; then
    for s in "stoke bench, next epoch made ahead or not, device bitstreams" "decode-only --decoders hw, host and device bitstreams" "train_torch, next epoch made ahead or not, device bitstreams"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  local secs="${BENCH_SECONDS:-5}" rep a
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --seconds "$secs" --json --gpu-upsampling nearest)
  # Where the cores go now (cpu_by_thread: the readers read into pinned memory, no staging copy)
  # and the epoch starts: the next epoch made ahead (the default) against --no-epoch-ahead,
  # interleaved three times (latency_ms's p99/p50, epoch_start_wait_ms), and the engine reading
  # device copies of its bitstreams (--gpu-bitstream device, NVJPEG_BACKEND_HARDWARE_DEVICE:
  # whether the engine's calls then leave the producer's core; the summary line says "bitstreams
  # host (device refused ...)" where nvJPEG does not open it). (--gpu-wait block was measured on
  # an H100 on 2026-11-27: no cores saved.)
  for rep in 1 2 3; do
    for a in ahead no-ahead device; do
      ledger=e2e figure="$cores_figure" step "stoke bench e2e, $a ($rep)" 60 "bench-e2e-$a-$rep.json" \
        "$bin" "${common[@]}" $([ $a = no-ahead ] && echo --no-epoch-ahead) $([ $a = device ] && echo --gpu-bitstream device)
    done
  done
  for a in host device; do
    ledger=engine figure="$cores_figure" step "decode-only --decoders hw, $a bitstreams" 60 "bench-decode-hw-$a.json" \
      "$bin" "${common[@]}" --decode-only --decoders hw --gpu-bitstream $a
  done
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  # fed/alone with and without the next epoch made ahead, 3 pairs of 60 timed steps each: ~3 x
  # 140 x 70 ms = 30 s plus ~20 s of start each (ResNet-50 on the H100 at 7f8b030). An epoch of
  # the generated 12800 is 50 steps: each segment crosses an epoch start.
  local steps="${CORES_TRAIN_STEPS:-60}"
  for a in ahead no-ahead device; do
    ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone, $a, 3 pairs" 150 "train-torch-$a.log" \
      python3 "$p/work/examples/train_torch.py" "$data" --pairs 3 --steps "$steps" --batch-size 256 --json \
      $([ $a = no-ahead ] && echo --no-epoch-ahead) $([ $a = device ] && echo --gpu-bitstream device)
  done
}

# A long run, watched (examples/soak.rs): 30 epochs of 2560 generated images through Pipeline on
# the device, host memory, threads, fds, the device's free memory and the backend's device and
# pinned bytes after every epoch, then 10 pipelines dropped mid-epoch; it fails, saying what
# grew, when anything grows after the warm-up. ~77k images: under a minute at 17k images/s.
# candle's CUDA backend on the device (issue 39 item 4): tests/candle_cuda.rs (a device batch's
# tensors: the batch's own memory on a candle stream of its own, a copy on the per-thread
# stream, held-batch counts, refusals) and examples/train_candle --cuda (a small convnet trained
# on device batches). Built against the stand-in's `libcuda.so` name and the pinned wheels'
# libnvrtc.so.13/libcudart.so.13 (scripts/candle-cuda-executables.sh): a folder of links gives
# them the driver's libcuda.so.1 under that name, and cuBLAS, cuRAND, NVRTC and the runtime from
# this machine's torch (site-packages/nvidia/cu13/lib) under the names candle's cudarc opens.
run_candle() {
  if [ $gpu = 0 ]; then
    for s in "candle_cuda tests" "train_candle --cuda"; do note "SKIP $s: no GPU"; done
    return
  fi
  local links="$here/candle-libs" cuda nv lib real
  mkdir -p "$links"
  if [ -n "${STOKE_BUNDLE_DEVICE_LIBS:-}" ]; then
    cuda="$STOKE_BUNDLE_DEVICE_LIBS/libcuda.so.1"
  else
    cuda="$(ldconfig -p 2>/dev/null | grep -m1 'libcuda\.so\.1 ' | sed 's/.*=> //')"
  fi
  [ -n "$cuda" ] && ln -sfn "$cuda" "$links/libcuda.so"
  nv="$(python3 -c 'import glob, os, site
hits = [p for s in site.getsitepackages() for p in glob.glob(os.path.join(s, "nvidia", "**", "libcublas.so.*"), recursive=True)]
print(os.path.dirname(hits[0]) if hits else "")' 2>/dev/null || true)"
  for lib in libcublas libcublasLt libcurand libnvrtc libcudart; do
    real="$(ls "${STOKE_BUNDLE_DEVICE_LIBS:-/nonexistent}/$lib.so" "$nv/$lib.so."* 2>/dev/null | head -1)"
    [ -n "$real" ] && ln -sfn "$real" "$links/$lib.so"
  done
  {
    echo "libcuda.so -> ${cuda:-not found}; torch's CUDA libraries: ${nv:-not found}"
    ls -l "$links"
  } > "$logs/candle-libs.log" 2>&1
  export LD_LIBRARY_PATH="$links${nv:+:$nv}:$LD_LIBRARY_PATH"
  figure="$test_figure" step "candle_cuda tests" 180 candle-cuda.log env STOKE_REQUIRE_GPU=1 "$p/candle/tests/candle_cuda" --test-threads 1
  if [ -n "${STOKE_BUNDLE_DEVICE_LIBS:-}" ]; then
    # The simulated device runs stoke's kernels, not candle's (nor cuBLAS's).
    note "SKIP train_candle --cuda: the simulated device runs no candle kernels"
    return
  fi
  figure='grep -iE "loss|images/s" | tail -1' step "train_candle --cuda" 180 train-candle.log "$p/candle/examples/train_candle" --cuda --steps 200
}

# The engine's refusals on nvJPEG's CUDA decoders (the default) or on the CPU route (--decoders
# hw): host cores per image of each (cpu_by_thread: stoke-gpu-cuda + stoke-gpu-lane against
# stoke-gpu-cpu, and the lanes' huffman/queue/wait) and what the CUDA decoders' kernels cost a
# GPU-bound trainer. (On an H200 the CUDA decoders alone ran 2025 images/s on 2.06 cores.)
run_routes() {
  if [ $gpu = 0 ]; then
    for s in "stoke bench e2e, decoders all and hw" "train_torch resnet50 fed/alone, decoders all and hw"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  local secs="${BENCH_SECONDS:-5}" rep d
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --seconds "$secs" --json --gpu-upsampling nearest)
  # gray: the default decoders with the engine asked for gray baseline JPEGs sampled 1x1 too
  # (--gpu-engine-gray; ~2 % of the generated set, ~40 % of the CUDA decoders' images), whose
  # pixels `run.sh tests` checks (STOKE-Q gray-engine); hw-gray: both (gray on the engine, the
  # progressive and odd rest on the CPU route).
  # engine: gray on the engine and the progressive photos rewritten as baseline once
  # (--transcode-progressive, kept in RAM; `run.sh tests` checks their pixels, STOKE-Q
  # transcoded): all but the CMYK and odd-subsampling images on the engine. Every run's window
  # starts after one epoch of warm-up (--warmup-batches 52), past the rewrites.
  local -A flags=([all]="--decoders all" [hw]="--decoders hw" [gray]="--decoders all --gpu-engine-gray" [hw-gray]="--decoders hw --gpu-engine-gray" [engine]="--decoders all --gpu-engine-gray --transcode-progressive")
  for rep in 1 2 3; do
    for d in all hw gray hw-gray engine; do
      # shellcheck disable=SC2086
      ledger=e2e figure="$cores_figure" step "stoke bench e2e, decoders $d ($rep)" 60 "bench-e2e-$d-$rep.json" \
        "$bin" "${common[@]}" --warmup-batches 52 ${flags[$d]}
    done
  done
  # The rewrites' own epoch: the first, with the readers rewriting the progressive photos (about
  # 4 ms of a reader thread each on the 2-core VM), at the default 2 reader threads and at 4.
  local t
  for t in 2 4; do
    # shellcheck disable=SC2086
    figure="$cores_figure" step "stoke bench e2e, decoders engine, first epoch, $t reader threads" 60 "bench-e2e-engine-first-r$t.json" \
      "$bin" bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --epochs 1 --json --gpu-upsampling nearest --reader-threads "$t" ${flags[engine]}
  done
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  local -A train=([all]="--decoders all" [engine]="--decoders all --gpu-engine-gray --transcode-progressive" [hw]="--decoders hw")
  for d in all engine hw; do
    # shellcheck disable=SC2086
    ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone, decoders $d, 3 pairs" 150 "train-torch-$d.log" \
      python3 "$p/work/examples/train_torch.py" "$data" --pairs 3 --steps "${CORES_TRAIN_STEPS:-60}" --batch-size 256 --json ${train[$d]}
  done
}

# One thread calling the engine against two (gpu_engine_lanes), where the second should matter:
# under a load that keeps the SMs busy (the engine's calls then wait for their colour-conversion
# kernels: 19k images/s alone fell to 2.1k under spinning kernels on an H200, 2026-11-26), and
# beside the trainer that is below 0.97 of its speed alone (ResNet-50). About 5 minutes at
# BENCH_SECONDS=4 with the generated set made: the loaded Loader ~35 s a lane setting, the
# trainer's pairs ~60 s each, the four idle benches ~15 s each.
run_lanes() {
  if [ $gpu = 0 ]; then
    for s in "gpu-under-load.py, engine lanes 1 and 2" "train_torch resnet50 fed/alone, engine lanes 1 and 2" "stoke bench e2e, engine lanes 1 and 2"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  local secs="${BENCH_SECONDS:-4}" rep l
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  # The mechanism first (the engine's rate under the matmuls, ~35 s a run), then what the
  # trainer feels, then the idle rate: a short budget drops the idle pairs first.
  for l in 1 2; do
    figure='grep "images/s" | sed -E "s/, host decode [0-9.]+ ms.batch//; s/ retried [0-9]+//" | paste -sd";"' \
      step "gpu-under-load.py, engine lanes $l" 90 "under-load-lanes$l.log" \
      python3 "$p/scripts/gpu-under-load.py" "$data" --gpu-upsampling nearest --seconds "$secs" --gpu-engine-lanes $l --only engine
  done
  for l in 1 2; do
    ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone, engine lanes $l, 3 pairs" 150 "train-torch-lanes$l.log" \
      python3 "$p/work/examples/train_torch.py" "$data" --pairs 3 --steps "${CORES_TRAIN_STEPS:-60}" --batch-size 256 --json --gpu-engine-lanes $l
  done
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --seconds "$secs" --json --gpu-upsampling nearest)
  for rep in 1 2; do
    for l in 1 2; do
      ledger=e2e figure="$cores_figure" step "stoke bench e2e, engine lanes $l ($rep)" 60 "bench-e2e-lanes$l-$rep.json" \
        "$bin" "${common[@]}" --gpu-engine-lanes $l
    done
  done
}

# stoke beside the model (issue 40 item 2: is the trainer's loss stoke's work on the GPU, the wait
# for its data, or its host threads in the trainer's process?). Each pair: fed, alone, then the
# model on the fixed batch with a second stoke.Loader making and dropping batches at the fed
# segment's rate, in a thread of this process or a process of its own. beside/alone near fed/alone:
# the loss is stoke's work beside the model, not the data dependency; process above thread: the
# host threads in the trainer's process cost it (a producer process through CUDA IPC would help);
# both near 1 with fed/alone below: the data dependency (the model waiting for batches). About 4
# minutes: ResNet-50 ~3 x 3 segments of 60 steps (~6 s each at 3.7k images/s) plus ~25 s of start
# a run, ViT-B/16 the same at 2.4k images/s with 40 steps.
run_beside() {
  if [ $gpu = 0 ]; then
    for s in "train_torch resnet50, beside thread and process" "train_torch vit_b16, beside thread and process"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  local b
  for b in thread process; do
    ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone/beside, beside $b, 3 pairs" 150 "train-torch-beside-$b.log" \
      python3 "$p/work/examples/train_torch.py" "$data" --pairs 3 --steps "${CORES_TRAIN_STEPS:-60}" --batch-size 256 --json --beside $b
  done
  for b in thread process; do
    ledger=train figure="$train_figure" step "train_torch vit_b16 fed/alone/beside, beside $b, 3 pairs" 150 "train-torch-vit-beside-$b.log" \
      python3 "$p/work/examples/train_torch.py" "$data" --model vit_b16 --pairs 3 --steps 40 --batch-size 256 --json --beside $b
  done
}

# Every candidate once (the mode list above), the steps in the order of what they decide, so a
# short budget drops the least first: each trainer run ~45-60 s (3 pairs of 40 steps), each bench
# ~10 s. The trainer's baseline comes twice (the beside runs' fed/alone), the bench's twice too.
run_round() {
  if [ $gpu = 0 ]; then
    for s in "stoke bench e2e, defaults, engine ahead and engine variant" "train_torch resnet50 beside, lanes, engine" "train_torch vit_b16" "train_torch resnet50 engine ahead" "stoke bench e2e, lanes 2, device bitstreams, hybrid share, hybrid share with the engine ahead"; do note "SKIP $s: no GPU"; done
    return
  fi
  ensure_data
  local secs="${BENCH_SECONDS:-4}" steps="${CORES_TRAIN_STEPS:-40}" v
  local common=(bench "$data" --backend cuda --dtype f16 --layout nchw --batch-size 256 --seconds "$secs" --json --gpu-upsampling nearest)
  local engine=(--gpu-engine-gray --transcode-progressive)
  ledger=e2e figure="$cores_figure" step "stoke bench e2e, defaults (1)" 60 bench-e2e-defaults-1.json "$bin" "${common[@]}"
  # The engine's calls a batch ahead on their own thread: does the engine's idle time between
  # batches (each line's "engine idle", the defaults' split in the summary's engine-idle answer)
  # turn into images/s?
  ledger=e2e figure="$cores_figure" step "stoke bench e2e, --gpu-engine-ahead" 60 bench-e2e-engineahead.json \
    "$bin" "${common[@]}" --gpu-engine-ahead
  # Past the first epoch's rewrites (52 batches of the 12800).
  ledger=e2e figure="$cores_figure" step "stoke bench e2e, engine takes gray and rewritten progressive" 60 bench-e2e-engine.json \
    "$bin" "${common[@]}" --warmup-batches 52 "${engine[@]}"
  export PYTHONPATH="$p/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  local train=(python3 "$p/work/examples/train_torch.py" "$data" --pairs 3 --steps "$steps" --batch-size 256 --json)
  for v in process thread; do
    ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone/beside, beside $v, 3 pairs" 150 "train-torch-beside-$v.log" \
      "${train[@]}" --beside $v
  done
  ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone, engine lanes 2, 3 pairs" 150 train-torch-lanes2.log \
    "${train[@]}" --gpu-engine-lanes 2
  ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone, engine takes gray and rewritten progressive, 3 pairs" 150 train-torch-engine.log \
    "${train[@]}" "${engine[@]}"
  ledger=train figure="$train_figure" step "train_torch vit_b16 fed/alone, 3 pairs" 150 train-torch-vit.log \
    "${train[@]}" --model vit_b16
  ledger=train figure="$train_figure" step "train_torch resnet50 fed/alone, engine ahead, 3 pairs" 150 train-torch-engineahead.log \
    "${train[@]}" --gpu-engine-ahead
  # The last beside the one before it: the GPU-hybrid share with the engine's calls (and the
  # route's) a batch ahead on their own thread, both past the engine's ceiling at once.
  for v in "--gpu-engine-lanes 2" "--gpu-bitstream device" "--gpu-hybrid-share auto" "--gpu-hybrid-share auto --gpu-engine-ahead"; do
    # shellcheck disable=SC2086
    ledger=e2e figure="$cores_figure" step "stoke bench e2e, $v" 60 "bench-e2e-${v//[ -]/}.json" "$bin" "${common[@]}" $v
  done
  ledger=e2e figure="$cores_figure" step "stoke bench e2e, defaults (2)" 60 bench-e2e-defaults-2.json "$bin" "${common[@]}"
}

run_soak() {
  if [ $gpu = 0 ]; then
    note "SKIP soak (examples/soak --backend cuda): no GPU"
    return
  fi
  figure='grep "^SOAK " | tail -1 | cut -c1-400' step "soak: 30 epochs, 10 pipelines dropped mid-epoch (examples/soak)" 240 soak.log \
    env XDG_CACHE_HOME="$here/cache" "$p/examples/soak" --backend cuda --epochs 30 --images 2560 --batch-size 256 --drops 10 --json
}

case "$mode" in
  tests | tests2) run_tests ;;
  bench) run_bench ;;
  python) run_python ;;
  checks) run_checks ;;
  upsampling) run_upsampling ;;
  ahead) run_ahead ;;
  tail) run_tail ;;
  cores) run_cores ;;
  routes) run_routes ;;
  lanes) run_lanes ;;
  beside) run_beside ;;
  round) run_round ;;
  soak) run_soak ;;
  candle) run_candle ;;
esac
[ $failed -eq 0 ] && note "RESULT: every step that ran passed" || note "RESULT: SOME STEPS FAILED"
exit $failed
