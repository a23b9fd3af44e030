#!/usr/bin/env bash
# Builds, on this machine, everything a GPU machine needs to run stoke's GPU tests and
# benchmarks, into ./bundle (ignored by git):
#   bundle/run.sh              unpacks the payload into a temporary folder and runs doctor, the
#                              tests with STOKE_REQUIRE_GPU=1, the train_loop example briefly,
#                              `stoke bench` (GPU and CPU backends), the benchmark executables,
#                              and the peer comparison when STOKE_RUN_PEERS=1
#   bundle/payload.tar.gz      (stripped executables; the folder must stay under 64 MiB):
#     bin/stoke                  the CLI (release)
#     tests/*                    every release test executable (lib, bin and tests/*.rs)
#     bench-bin/*                the benchmark executables (cargo bench targets)
#     examples/train_loop        the example trainer (release): device batches on its own stream
#     corpus/imagenet_like/      the dev corpus's photos, when the shared corpus is on this
#                                machine (/work/shared/corpus/dev or ../shared/corpus/dev):
#                                run.sh gives it to the gpu_* tests as STOKE_CORPUS
#     scripts/bench-peers.sh, benches/peers/   the side-by-side peer comparison
#     lib/libnvjpeg.so.13        from the pinned PyPI wheel (needs only libc)
#     work/                      test data the tests read relative to the working directory
#                                (tests/golden if present); the tests run from here
# Copy the folder to the GPU machine and run `bundle/run.sh`; logs and summary.txt go to
# $OUT when set, else ./bundle-out. The GPU machine needs the NVIDIA driver, nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."

NVCC="$(scripts/setup-cuda.sh)"
export NVCC STOKE_REQUIRE_NVCC=1
cu13="$(cd "$(dirname "$NVCC")/.." && pwd)"

rm -rf bundle
P=bundle/payload
mkdir -p $P/bin $P/tests $P/bench-bin $P/examples $P/lib $P/work

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
    lib) cp "$exe" "$P/tests/lib-$name" ;;
    bin) cp "$exe" "$P/tests/bin-$name" ;;
    test) cp "$exe" "$P/tests/$name" ;;
  esac
done

echo "gpu-bundle: building the stoke binary and the benchmarks" >&2
cargo build --release --bin stoke --message-format=json | list_executables bin | while read -r kind name exe; do
  if [ "$kind" = bin ]; then cp "$exe" "$P/bin/$name"; fi
done
cargo build --release --example train_loop --message-format=json | list_executables any | while read -r kind name exe; do
  if [ "$kind" = example ]; then cp "$exe" "$P/examples/$name"; fi
done
cargo bench --no-run --message-format=json | list_executables any | while read -r kind name exe; do
  if [ "$kind" = bench ]; then cp "$exe" "$P/bench-bin/$name"; fi
done

cp "$cu13/lib/libnvjpeg.so.13" $P/lib/
if [ -d benches/peers ] && [ -f scripts/bench-peers.sh ]; then
  mkdir -p $P/scripts $P/benches
  cp scripts/bench-peers.sh $P/scripts/
  cp -r benches/peers $P/benches/
  rm -rf $P/benches/peers/__pycache__
fi
# The dev corpus's photos (about 20 MB of JPEG, which gzip cannot shrink) for tests/gpu_decode.rs.
for corpus in /work/shared/corpus/dev ../shared/corpus/dev; do
  if [ -d "$corpus/imagenet_like" ]; then
    mkdir -p $P/corpus
    cp -r "$corpus/imagenet_like" $P/corpus/
    echo "gpu-bundle: carrying $corpus/imagenet_like" >&2
    break
  fi
done
if [ -d tests/golden ]; then
  mkdir -p $P/work/tests
  cp -r tests/golden $P/work/tests/
fi

cat > bundle/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs on the GPU machine. Writes doctor.txt, doctor.json, logs/ and summary.txt under $OUT
# (else ./bundle-out). Exit status: 0 when every test executable and the train_loop example
# passed.
set -uo pipefail
out="${OUT:-$PWD/bundle-out}"
here="$(mktemp -d "${TMPDIR:-/tmp}/stoke-bundle.XXXXXX")"
trap 'cd /; rm -rf "$here"' EXIT
tar -xzf "$(cd "$(dirname "$0")" && pwd)/payload.tar.gz" -C "$here"
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
  # The carried corpus holds only imagenet_like/: it goes to the GPU tests (gpu_decode reads
  # $STOKE_CORPUS/imagenet_like), not to the corpus_* tests, which want the whole corpus.
  corpus=()
  case "$name" in gpu_*) [ -d "$here/corpus/imagenet_like" ] && corpus=(env STOKE_CORPUS="$here/corpus") ;; esac
  timeout 300 "${corpus[@]}" "$t" > "$log" 2>&1
  rc=$?
  results="$(grep -E '^test result:' "$log" | tail -1)"
  if [ $rc -eq 0 ]; then echo "PASS $name: $results" >> "$summary"; else echo "FAIL $name (exit $rc): $results" >> "$summary"; failed=1; fi
done
# Generated datasets are cached outside $OUT.
export XDG_CACHE_HOME="${TMPDIR:-/tmp}/stoke-bundle-cache"
# The example trainer, briefly, on its built-in generated set. Its consumer kernel is compiled
# with NVRTC: when the loader does not know libnvrtc.so.13, look for a pip-installed one.
if [ -x "$here/examples/train_loop" ]; then
  nvrtc=""
  if ! ldconfig -p 2>/dev/null | grep 'libnvrtc\.so\.13' >/dev/null; then
    nvrtc="$(python3 -c 'import glob, os, site
hits = [p for s in site.getsitepackages() for p in glob.glob(os.path.join(s, "nvidia", "**", "libnvrtc.so.13*"), recursive=True)]
print(os.path.dirname(hits[0]) if hits else "")' 2>/dev/null || true)"
  fi
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH${nvrtc:+:$nvrtc}" timeout 180 "$here/examples/train_loop" --batches 60 --batch-size 128 > "$out/logs/train_loop.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then echo "PASS train_loop: $(tail -1 "$out/logs/train_loop.log" | cut -c1-120)" >> "$summary"; else echo "FAIL train_loop (exit $rc)" >> "$summary"; failed=1; fi
fi
# The main benchmark on the built-in generated dataset, GPU then CPU.
for backend in auto cpu; do
  [ "${STOKE_SKIP_BENCH:-0}" = 1 ] && break
  timeout 150 "$here/bin/stoke" bench --backend "$backend" --epochs 1 --json > "$out/bench-$backend.json" 2> "$out/logs/bench-$backend.log"
  echo "stoke bench --backend $backend: exit $?" >> "$summary"
done
for b in "$here"/bench-bin/*; do
  [ -f "$b" ] && [ "${STOKE_SKIP_BENCH:-0}" != 1 ] || continue
  name="$(basename "$b")"
  timeout 120 "$b" --bench > "$out/logs/bench-$name.log" 2>&1
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

# Symbols are not needed to run (panic messages keep their file:line); gzip roughly thirds
# what is left.
find $P/bin $P/tests $P/bench-bin $P/examples -type f -exec strip {} +
ntests=$(ls $P/tests | wc -l); nbench=$(ls $P/bench-bin | wc -l); raw=$(du -sb $P | cut -f1)
tar -czf bundle/payload.tar.gz -C $P .
rm -rf $P
size=$(du -sb bundle | cut -f1)
echo "gpu-bundle: bundle/ is $((size / 1024 / 1024)) MiB ($size bytes; $((raw / 1024 / 1024)) MiB unpacked): $ntests test executables, $nbench bench executables" >&2
if [ "$size" -gt $((64 * 1024 * 1024)) ]; then
  echo "gpu-bundle: bundle/ exceeds 64 MiB" >&2
  exit 1
fi
