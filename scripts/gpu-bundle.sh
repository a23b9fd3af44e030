#!/usr/bin/env bash
# Builds, on this machine, everything a GPU machine needs to run stoke's GPU tests and
# benchmarks, into ./bundle (ignored by git; must stay under 64 MiB, the device tool's limit):
#   bundle/run.sh              scripts/bundle-run.sh: `run.sh tests` (probe, doctor, gpu_* tests,
#                              compute-sanitizer) and `run.sh bench` (train_loop, stoke bench on
#                              the CUDA backend, kernel benchmarks, GPU peers), each one device
#                              call well under 10 minutes; $OUT gets <mode>-summary.txt and one
#                              <mode>-logs.tar.gz, nothing else
#   bundle/payload.tar.gz      (stripped executables):
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
# With the device tool: carry `bundle` and run `bundle/run.sh tests`, then `bundle/run.sh bench`.
# The GPU machine needs the NVIDIA driver, nothing else. Without a GPU, run.sh still runs (every
# GPU step a SKIP) in seconds: .ci/run checks the plumbing that way.
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

cp scripts/bundle-run.sh bundle/run.sh
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
