#!/usr/bin/env bash
# Fuzz every reader of untrusted bytes (fuzz/fuzz_targets; each says its invariants): builds all
# targets with cargo fuzz (libFuzzer, AddressSanitizer, release with debug assertions and
# overflow checks), builds each target's seed folder, runs each target for SECONDS_PER_TARGET
# (default 10; as many targets at once as there are cores) and fails on any crash, printing the
# executions per target.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]
#
# Stable Rust only: RUSTC_BOOTSTRAP=1 lets cargo fuzz pass its nightly flags (-Zsanitizer=address,
# -Cpasses=sancov-module ...) to the stable compiler. cargo-fuzz is installed into the cache
# folder when missing; the targets build into the cache folder too, so a later run rebuilds
# only stoke. The corpus each target grows is kept there as well (every run starts where the
# last one stopped); a crash's input is kept in $cache/fuzz-artifacts and named below.
#
# Seeds, built at run time in a temporary folder (never copied into the project): the JPEGs
# of ../shared/corpus/dev when it is beside the checkout, or of $STOKE_CORPUS (files up to 64 KiB), and for every
# target the files stoke itself makes (stoke::fuzzing::seeds: small JPEGs of each kind, PNGs,
# the WebP and PNG fixtures of tests/golden, tar shards, saved indexes, resume states,
# sidecars), written by the target at start (STOKE_FUZZ_SEEDS).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
case "$secs" in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]" >&2; exit 2 ;; esac
cache="${XDG_CACHE_HOME:-$HOME/.cache}/stoke-ci"
targets=(jpeg_header jpeg_decode jpeg_rewrite png webp tar index resume_state sidecar parquet)

fuzz_root="$cache/cargo-fuzz"
if [ ! -x "$fuzz_root/bin/cargo-fuzz" ]; then
  echo "fuzz: installing cargo-fuzz 0.13.2 into $fuzz_root"
  cargo install --quiet --locked cargo-fuzz --version 0.13.2 --root "$fuzz_root"
fi
export PATH="$fuzz_root/bin:$PATH"
export RUSTC_BOOTSTRAP=1

target_dir="$cache/fuzz-target"
t0=$(date +%s)
cargo fuzz build --fuzz-dir fuzz --target-dir "$target_dir" 2>&1 | grep -v '^\s*Compiling ' || true
bin="$target_dir/x86_64-unknown-linux-gnu/release"
for t in "${targets[@]}"; do
  [ -x "$bin/$t" ] || { echo "fuzz: target $t was not built ($bin/$t)" >&2; exit 1; }
done
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - t0 )) s"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
corpus_dev="${STOKE_CORPUS:-$(cd .. && pwd)/shared/corpus/dev}"
artifacts="$cache/fuzz-artifacts"
mkdir -p "$artifacts"
# LeakSanitizer reports the 32 bytes glibc allocates when a thread-local with a destructor is
# first touched on a thread (__cxa_thread_atexit_impl: its destructor list, which LSan does not
# see as reachable): once per thread-local, whichever input first reaches it (the parquet target
# in 39968 executions). No allocation of ours has that frame in its stack; every other leak still
# fails the run.
printf 'leak:__cxa_thread_atexit_impl\n' >"$work/lsan.supp"
export LSAN_OPTIONS="suppressions=$work/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# Each target's run, in the background: its log in $work/$t.log, libFuzzer's exit status in
# $work/$t.rc (no file: the run itself failed before it).
run_target() {
  local t=$1
  local seeds="$work/seeds/$t" corpus="$cache/fuzz-corpus/$t"
  mkdir -p "$seeds" "$corpus"
  local max_len=()
  case "$t" in
    jpeg_header | jpeg_decode | jpeg_rewrite)
      if [ -d "$corpus_dev" ]; then
        local n=0 f
        while IFS= read -r -d '' f; do
          n=$((n + 1))
          cp "$f" "$seeds/dev-$n"
        done < <(find "$corpus_dev" -type f -size -65k ! -path '*/licenses/*' ! -name '*.tsv' ! -name 'SHA256SUMS' ! -name '*.md' -print0)
      fi
      max_len=(-max_len=65536) ;;
    png | webp | tar | parquet) max_len=(-max_len=65536) ;;
  esac
  local rc=0
  # -malloc_limit_mb: no single allocation past 512 MiB (the targets decode under a 4 Mpixel
  # size guard: no legitimate buffer comes near it); -timeout: a hang is a failure too.
  STOKE_FUZZ_SEEDS="$seeds" "$bin/$t" "$corpus" "$seeds" -max_total_time="$secs" "${max_len[@]}" \
    -malloc_limit_mb=512 -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$t-" >"$work/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}

# As many targets at once as there are cores (each libFuzzer process is one thread), so the
# whole run takes about ceil(targets / cores) × SECONDS_PER_TARGET.
jobs="$(nproc)"
running=0
for t in "${targets[@]}"; do
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=()
printf '%-14s %12s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  log="$work/$t.log"
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo "none")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" 2>/dev/null | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" 2>/dev/null | tail -1)
  size=$(find "$cache/fuzz-corpus/$t" -type f | wc -l)
  if [ "$rc" = 0 ]; then
    printf '%-14s %12s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$size" "0 crashes"
  else
    printf '%-14s %12s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$size" "CRASH (exit $rc)"
    failed+=("$t")
    echo "---- $t: the end of libFuzzer's output" >&2
    tail -60 "$log" >&2 || true
    echo "---- the input is in $artifacts/$t-*; replay: $bin/$t FILE" >&2
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${secs} s each, no crash"
