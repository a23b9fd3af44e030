#!/usr/bin/env bash
# Builds, on this machine, everything a GPU machine needs to run stoke's GPU checks, into
# ./bundle (ignored by git). The device tool carries at most 64 MiB per call, so the bundle is
# split by call: each call carries run.sh, core.tar.gz and its own part (all of bundle/ also
# works while it stays under 64 MiB):
#   bundle/run.sh              scripts/bundle-run.sh: `run.sh tests|bench|python`, the calls
#                              of a GPU window (see that script); unpacks core + the mode's part
#   bundle/core.tar.gz         every call:
#     bin/stoke                  the CLI (release, stripped)
#     lib/libnvjpeg.so.13        from the pinned PyPI wheel (needs only libc)
#     include/                   the CUDA 13.0 headers NVRTC needs (STOKE_CUDA_INCLUDE)
#     work/tests/golden          test data the tests read relative to the working directory
#     scripts/bundle-questions.py, scripts/gpu-ledger.py, benches/peers/, COMMIT
#     bin/nvjpeg-hw-load         scripts/nvjpeg-hw-load.cu: nvJPEG's hardware engine alone (rate
#                                by output format, under spinning SMs, `ablate`: what of
#                                stoke's call settings costs what, `threads`: concurrent calls); scripts/gpu-under-load.py:
#                                stoke.Loader's rate with fp16 matmuls in the same process
#   bundle/tests.tar.gz        `run.sh tests`:
#     tests/gpu_*, tests/lib-stoke   the GPU test executables and the library's (for its CUDA
#                                unit tests); CPU-only tests stay out (CI runs them)
#     corpus/imagenet_like/      the dev corpus's photos when ../shared/corpus/dev is here
#     corpus/gray/               its gray conformance JPEGs (1×1 sampling)
#     corpus/progressive/        its progressive conformance JPEGs under 1 MB
#   bundle/bench.tar.gz        `run.sh bench`:
#     bench-bin/cuda_kernels     the kernel benchmarks (criterion)
#     examples/train_loop        the example trainer: device batches on its own stream
#     examples/soak              many epochs watched (host, device, pinned memory, threads, fds)
#   bundle/python.tar.gz       `run.sh python`:
#     python/stoke               the Python package (abi3 wheel, unpacked; on PYTHONPATH there)
#     work/tests/python, work/examples/train_torch.py   its tests and the PyTorch trainer
#   bundle/candle.tar.gz       `run.sh candle`, when $STOKE_BUNDLE_CANDLE_DIR holds this commit's
#                              candle-cuda executables (scripts/candle-cuda-executables.sh):
#     candle/tests/candle_cuda, candle/examples/train_candle
#   bundle/checks.tar.gz       `run.sh checks`, `upsampling`, `ahead` and `tail` (`cores` carries the python part): tests/gpu_pipeline,
#                              tests/gpu_backends, tests/gpu_decode, examples/train_torch.py and the
#                              Python package (the decode-only sweep, canaries under load and
#                              the malformed-JPEG sweep use bin/stoke and scripts/malformed-*.py
#                              from core; malformed-report.py runs stoke.Loader on both backends)
# Then, with the device tool, three calls (carry as printed at the end):
#   bundle/run.sh tests; bundle/run.sh bench (carry .whl/peers too for nvImageCodec:
#   scripts/bench-peers.sh fetch-wheels); bundle/run.sh python.
# Each writes summary.txt and one log archive under $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."

NVCC="${NVCC:-$(scripts/setup-cuda.sh)}"
export NVCC STOKE_REQUIRE_NVCC=1
cu13="$(cd "$(dirname "$NVCC")/.." && pwd)"

rm -rf bundle
P=bundle/payload
mkdir -p $P/bin $P/tests $P/bench-bin $P/examples $P/lib $P/work $P/scripts $P/benches

# Executables cargo reports, as "kind name path" lines (kind: lib, bin, test, bench, example).
list_executables() {
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        t = m["target"]
        print(t["kind"][0], t["name"], m["executable"])
'
}

# The GPU tests: every tests/gpu_*.rs but the two that need no GPU (CI runs them): the
# host-compiled kernel test and the nvcc build check.
gpu_tests=()
for f in tests/gpu_*.rs; do
  name="$(basename "$f" .rs)"
  case "$name" in gpu_kernel_host | gpu_kernel_build) ;; *) gpu_tests+=(--test "$name") ;; esac
done
echo "gpu-bundle: building the GPU test executables, stoke, train_loop and cuda_kernels" >&2
cargo test --release --no-run --lib "${gpu_tests[@]}" --message-format=json | list_executables | while read -r kind name exe; do
  case "$kind" in
    lib) cp "$exe" "$P/tests/lib-$name" ;;
    test) cp "$exe" "$P/tests/$name" ;;
  esac
done
cargo build --release --bin stoke --example train_loop --example soak --message-format=json | list_executables | while read -r kind name exe; do
  case "$kind" in
    bin) cp "$exe" "$P/bin/$name" ;;
    example) cp "$exe" "$P/examples/$name" ;;
  esac
done
cargo bench --no-run --bench cuda_kernels --message-format=json | list_executables | while read -r kind name exe; do
  if [ "$kind" = bench ]; then cp "$exe" "$P/bench-bin/$name"; fi
done

# The Python package: the wheel for machines without Rust (scripts/build-wheel.sh: abi3,
# manylinux_2_28), unpacked. $STOKE_WHEEL: one built already (CI builds it once for both).
whl="${STOKE_WHEEL:-}"
if [ -z "$whl" ]; then
  echo "gpu-bundle: building the Python package (scripts/build-wheel.sh)" >&2
  whl="$(scripts/build-wheel.sh)"
fi
mkdir -p $P/python
"${PYTHON:-python3}" -m zipfile -e "$whl" $P/python
mkdir -p $P/work/tests $P/work/examples
cp -r tests/python $P/work/tests/
rm -rf $P/work/tests/python/__pycache__
cp examples/train_torch.py $P/work/examples/

cp "$cu13/lib/libnvjpeg.so.13" $P/lib/
"$NVCC" -O2 -std=c++17 -o $P/bin/nvjpeg-hw-load scripts/nvjpeg-hw-load.cu -I"$cu13/include" -L"$cu13/lib" -l:libnvjpeg.so.13 -lpthread
cp -r "$cu13/include" $P/include
cp scripts/bundle-questions.py scripts/malformed-jpegs.py scripts/malformed-report.py scripts/gpu-under-load.py scripts/gpu-ledger.py $P/scripts/
cp -r benches/peers $P/benches/
rm -rf $P/benches/peers/__pycache__
# The commit the bundle was built from; "+dirty" when tracked files had uncommitted changes (the
# bundle then holds code no commit has: its figures name HEAD, not what ran).
{ git rev-parse --short HEAD 2>/dev/null || echo unknown; } | tr -d '\n' > $P/COMMIT
git diff --quiet HEAD 2>/dev/null || printf '+dirty' >> $P/COMMIT
echo >> $P/COMMIT
# The dev corpus's photos (about 20 MB of JPEG, which gzip cannot shrink) for tests/gpu_decode.rs.
for corpus in ../shared/corpus/dev /work/shared/corpus/dev; do
  if [ -d "$corpus/imagenet_like" ]; then
    mkdir -p $P/corpus
    cp -r "$corpus/imagenet_like" $P/corpus/
    echo "gpu-bundle: carrying $corpus/imagenet_like" >&2
    # Its gray JPEGs (164 KB) for tests/gpu_decode.rs's gray-on-the-engine question: the
    # ImageNet-like ones declare 2×2 sampling, these 1×1 (as encoders write gray).
    if [ -d "$corpus/conformance/gray" ]; then cp -r "$corpus/conformance/gray" $P/corpus/; fi
    # Its progressive JPEGs under 1 MB (about 190 KB) for the rewritten-as-baseline question
    # (tests/gpu_decode.rs, transcode_progressive).
    if [ -d "$corpus/conformance/progressive" ]; then
      mkdir -p $P/corpus/progressive
      find "$corpus/conformance/progressive" -maxdepth 1 -type f -size -1024k -exec cp {} $P/corpus/progressive/ \;
    fi
    break
  fi
done
if [ -d tests/golden ]; then
  mkdir -p $P/work/tests
  cp -r tests/golden $P/work/tests/
fi
# The candle part (`run.sh candle`): tests/candle_cuda and examples/train_candle built with
# candle's CUDA backend, from $STOKE_BUNDLE_CANDLE_DIR (scripts/candle-cuda-executables.sh; CI's
# candle-cuda step fills one), and only when they were built from this commit.
if [ -n "${STOKE_BUNDLE_CANDLE_DIR:-}" ]; then
  built="$(cat "$STOKE_BUNDLE_CANDLE_DIR/COMMIT" 2>/dev/null || true)"
  if [ "$built" = "$(git rev-parse --short HEAD 2>/dev/null)" ]; then
    mkdir -p $P/candle
    cp -r "$STOKE_BUNDLE_CANDLE_DIR/tests" "$STOKE_BUNDLE_CANDLE_DIR/examples" $P/candle/
  else
    echo "gpu-bundle: $STOKE_BUNDLE_CANDLE_DIR holds executables of ${built:-no} commit, not HEAD: no candle part" >&2
  fi
fi
cp scripts/bundle-run.sh bundle/run.sh
chmod +x bundle/run.sh

# Symbols are not needed to run (panic messages keep their file:line).
find $P/bin $P/tests $P/bench-bin $P/examples -type f -exec strip {} +
strip $P/python/stoke/*.so
ntests=$(ls $P/tests | wc -l); raw=$(du -sb $P | cut -f1)
part() { # part NAME PATH...: bundle/NAME.tar.gz from those payload paths
  local name="$1"; shift
  tar -czf "bundle/$name.tar.gz" -C $P "$@"
}
part core bin lib include scripts benches COMMIT work/tests/golden
corpus=(); [ -d $P/corpus ] && corpus=(corpus)
# The GPU tests in two calls' parts (all of them with the corpus are over 64 MiB): `tests`, the
# lib's CUDA unit tests and the pipeline, backend and decode tests with the corpus photos;
# `tests2`, every other gpu_* test (geometry, stream, views, resolution, ...). run.sh runs the
# test executables its call carried.
first=(tests/lib-stoke tests/gpu_pipeline tests/gpu_backends tests/gpu_decode)
rest=(); for t in $P/tests/*; do case " ${first[*]} " in *" tests/$(basename "$t") "*) ;; *) rest+=("tests/$(basename "$t")") ;; esac; done
part tests "${first[@]}" "${corpus[@]}"
part tests2 "${rest[@]}"
part bench bench-bin examples
part python python work/tests/python work/examples
part checks tests/gpu_pipeline tests/gpu_backends tests/gpu_decode python work/examples
[ -d $P/candle ] && part candle candle
rm -rf $P
limit=$((64 * 1024 * 1024))
over=0
# The working tree travels with every call too (tracked and untracked-not-ignored files).
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
modes=(tests tests2 bench python checks upsampling ahead tail cores routes lanes beside round soak)
[ -f bundle/candle.tar.gz ] && modes+=(candle)
for mode in "${modes[@]}"; do
  pt="$mode"; case "$mode" in upsampling | ahead | tail) pt=checks ;; cores | routes | lanes | beside | round) pt=python ;; soak) pt=bench ;; esac
  size=$tree
  for f in bundle/run.sh bundle/core.tar.gz "bundle/$pt.tar.gz"; do size=$((size + $(stat -c %s "$f"))); done
  extra=""; [ "$mode" = bench ] && extra=', ".whl/peers"'
  echo "gpu-bundle: run.sh $mode carries $((size / 1024 / 1024)) MiB with the working tree: carry [\"bundle/run.sh\", \"bundle/core.tar.gz\", \"bundle/$pt.tar.gz\"$extra]" >&2
  [ "$size" -gt "$limit" ] && { echo "gpu-bundle: the $mode call's parts exceed 64 MiB" >&2; over=1; }
done
size=$(du -sb bundle | cut -f1)
echo "gpu-bundle: bundle/ is $((size / 1024 / 1024)) MiB in all ($((raw / 1024 / 1024)) MiB unpacked), $ntests test executables" >&2
exit $over
