#!/usr/bin/env bash
# Builds, on this machine, everything a GPU machine needs to run stoke's GPU tests and
# benchmarks, into ./bundle (ignored by git):
#   bundle/bin/stoke           the CLI (release)
#   bundle/tests/*             every release test executable (lib, bin and tests/*.rs)
#   bundle/bench-bin/*         the benchmark executables (cargo bench targets, if any)
#   bundle/scripts/bench-peers.sh, bundle/benches/peers/  the side-by-side peer comparison
#   bundle/lib/libnvjpeg.so.13 from the pinned PyPI wheel (needs only libc)
#   bundle/work/               the repository's test data that tests read relative to the
#                              working directory (tests/golden if present)
#   bundle/run.sh              runs doctor, the tests with STOKE_REQUIRE_GPU=1, `stoke bench`
#                              (GPU and CPU backends), the benchmark executables, and the peer
#                              comparison when STOKE_RUN_PEERS=1
# Copy the folder to the GPU machine and run `bundle/run.sh`; logs and summary.txt go to
# $OUT when set, else ./bundle-out. The GPU machine needs the NVIDIA driver, nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."

NVCC="$(scripts/setup-cuda.sh)"
export NVCC STOKE_REQUIRE_NVCC=1
cu13="$(cd "$(dirname "$NVCC")/.." && pwd)"

rm -rf bundle
mkdir -p bundle/bin bundle/tests bundle/bench-bin bundle/lib bundle/work

# Executables cargo reports, as "kind name path" lines; $1 = "test" keeps only test harnesses
# (cargo test --no-run also reports the plain `stoke` binary it builds for the CLI tests);
# "bin" keeps the rest; "any" keeps everything.
list_executables() {
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        if sys.argv[1] != "any" and (sys.argv[1] == "test") != bool(m["profile"]["test"]):
            continue
        t = m["target"]
        print(t["kind"][0], t["name"], m["executable"])
' "$1"
}

echo "gpu-bundle: building release test executables" >&2
cargo test --release --no-run --message-format=json | list_executables test | while read -r kind name exe; do
  case "$kind" in
    lib) cp "$exe" "bundle/tests/lib-$name" ;;
    bin) cp "$exe" "bundle/tests/bin-$name" ;;
    test) cp "$exe" "bundle/tests/$name" ;;
  esac
done

echo "gpu-bundle: building the stoke binary and the benchmarks" >&2
cargo build --release --bin stoke --message-format=json | list_executables bin | while read -r kind name exe; do
  if [ "$kind" = bin ]; then cp "$exe" "bundle/bin/$name"; fi
done
cargo bench --no-run --message-format=json | list_executables any | while read -r kind name exe; do
  if [ "$kind" = bench ]; then cp "$exe" "bundle/bench-bin/$name"; fi
done

cp "$cu13/lib/libnvjpeg.so.13" bundle/lib/
if [ -d benches/peers ] && [ -f scripts/bench-peers.sh ]; then
  mkdir -p bundle/scripts bundle/benches
  cp scripts/bench-peers.sh bundle/scripts/
  cp -r benches/peers bundle/benches/
  rm -rf bundle/benches/peers/__pycache__
fi
if [ -d tests/golden ]; then
  mkdir -p bundle/work/tests
  cp -r tests/golden bundle/work/tests/
fi

cat > bundle/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs on the GPU machine. Writes doctor.txt, doctor.json, logs/ and summary.txt under $OUT
# (else ./bundle-out). Exit status: 0 when every test executable passed.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$PWD/bundle-out}"
mkdir -p "$out/logs"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export STOKE_REQUIRE_GPU=1 STOKE_BIN="$here/bin/stoke" STOKE_NVJPEG="$here/lib/libnvjpeg.so.13"
export CRITERION_HOME="$out/criterion"
summary="$out/summary.txt"
{
  echo "stoke GPU bundle run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
} > "$summary"

"$here/bin/stoke" doctor > "$out/doctor.txt" 2>&1; echo "doctor: exit $?" >> "$summary"
"$here/bin/stoke" doctor --json > "$out/doctor.json" 2>"$out/logs/doctor-json.stderr"
cat "$out/doctor.txt"

failed=0
cd "$here/work"
for t in "$here"/tests/*; do
  name="$(basename "$t")"
  log="$out/logs/test-$name.log"
  timeout 300 "$t" > "$log" 2>&1
  rc=$?
  results="$(grep -E '^test result:' "$log" | tail -1)"
  if [ $rc -eq 0 ]; then echo "PASS $name: $results" >> "$summary"; else echo "FAIL $name (exit $rc): $results" >> "$summary"; failed=1; fi
done
# The main benchmark on the built-in generated dataset (cached outside $OUT), GPU then CPU.
export XDG_CACHE_HOME="${TMPDIR:-/tmp}/stoke-bundle-cache"
for backend in auto cpu; do
  timeout 300 "$here/bin/stoke" bench --backend "$backend" --epochs 1 --json > "$out/bench-$backend.json" 2> "$out/logs/bench-$backend.log"
  echo "stoke bench --backend $backend: exit $?" >> "$summary"
done
for b in "$here"/bench-bin/*; do
  [ -f "$b" ] || continue
  name="$(basename "$b")"
  timeout 300 "$b" --bench > "$out/logs/bench-$name.log" 2>&1
  echo "bench $name: exit $?" >> "$summary"
done
if [ "${STOKE_RUN_PEERS:-0}" = 1 ] && [ -x "$here/scripts/bench-peers.sh" ]; then
  STOKE_BIN="$here/bin/stoke" STOKE_LIBDIR="$here/lib" timeout 400 "$here/scripts/bench-peers.sh" --json-out "$out/peers.json" > "$out/logs/peers.log" 2>&1
  echo "bench-peers: exit $?" >> "$summary"
fi
[ $failed -eq 0 ] && echo "all test executables passed" >> "$summary" || echo "SOME TESTS FAILED" >> "$summary"
cat "$summary"
exit $failed
RUN
chmod +x bundle/run.sh

size=$(du -sb bundle | cut -f1)
echo "gpu-bundle: bundle/ is $((size / 1024 / 1024)) MiB ($size bytes): $(ls bundle/tests | wc -l) test executables, $(ls bundle/bench-bin | wc -l) bench executables" >&2
if [ "$size" -gt $((64 * 1024 * 1024)) ]; then
  echo "gpu-bundle: bundle/ exceeds 64 MiB" >&2
  exit 1
fi
