#!/usr/bin/env bash
# Checks bundle/run.sh's plumbing on a machine without a GPU (.ci/run calls it after
# scripts/gpu-bundle.sh): each mode ends within 3 minutes with exit 0, says plainly that there is
# no GPU, and leaves in $OUT exactly its summary and one archive holding the logs, never more
# than 8 files nor deeper than 2 folders (the device tool's limits); a run killed mid-step
# (TERM, as the device tool does at its limit) still leaves both.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bundle/run.sh ] && [ -f bundle/payload.tar.gz ] || { echo "check-bundle: run scripts/gpu-bundle.sh first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "check-bundle: FAIL: $*" >&2; exit 1; }

check_out() { # check_out DIR MODE
  local dir="$1" mode="$2" n depth
  n=$(find "$dir" -type f | wc -l)
  [ "$n" -le 8 ] || fail "$mode: $n files under OUT (at most 8 come back)"
  depth=$(find "$dir" -type f -printf '%d\n' | sort -n | tail -1)
  [ "${depth:-1}" -le 3 ] || fail "$mode: a file $depth levels down (at most 2 folders)"
  [ -f "$dir/$mode-summary.txt" ] || fail "$mode: no $mode-summary.txt"
  [ -f "$dir/$mode-logs.tar.gz" ] || fail "$mode: no $mode-logs.tar.gz"
  tar -tzf "$dir/$mode-logs.tar.gz" | grep -q 'env.log' || fail "$mode: the archive holds no env.log"
  tar -tzf "$dir/$mode-logs.tar.gz" | grep -q 'doctor.json' || fail "$mode: the archive holds no doctor.json"
}

for mode in tests bench; do
  out="$work/$mode"
  mkdir -p "$out"
  s0=$(date +%s)
  OUT="$out" timeout 180 bundle/run.sh "$mode" > "$work/$mode.log" 2>&1 || fail "$mode: exit $? (log: $(tail -5 "$work/$mode.log"))"
  took=$(( $(date +%s) - s0 ))
  check_out "$out" "$mode"
  grep -q '^NO GPU' "$out/$mode-summary.txt" || fail "$mode: the summary does not say there is no GPU"
  grep -q '^SKIP' "$out/$mode-summary.txt" || fail "$mode: no SKIP line for the GPU steps"
  tail -1 "$work/$mode.log" | grep -q '^done in' || fail "$mode: the summary is not the last thing printed"
  echo "check-bundle: $mode: ${took}s, $(find "$out" -type f | wc -l) files: $(cd "$out" && ls | tr '\n' ' ')"
done

# Killed mid-step: TERM during a step that sleeps (the self-test hook).
out="$work/killed"
mkdir -p "$out"
OUT="$out" STOKE_BUNDLE_SELFTEST_SLEEP=30 bundle/run.sh tests > "$work/killed.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  grep -qs 'self-test sleep' "$out/../killed.log" 2>/dev/null && break
  [ -f "$out/tests-summary.txt" ] && grep -q 'doctor' "$out/tests-summary.txt" && break
  sleep 0.2
done
sleep 1
kill -TERM "$pid"
wait "$pid" && fail "killed run exited 0" || true
check_out "$out" tests
grep -q '^STOPPED: killed' "$out/tests-summary.txt" || fail "killed run: the summary does not say it was killed"
echo "check-bundle: killed mid-step: summary and archive still there ($(grep -c . "$out/tests-summary.txt") summary lines)"
echo "check-bundle: ok"
