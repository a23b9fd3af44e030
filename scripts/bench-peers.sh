#!/usr/bin/env bash
# Run stoke and its peers side by side on one dataset and append the rows to BENCHMARKS.md.
#
#   scripts/bench-peers.sh fetch-wheels        # here (network): nvImageCodec wheel into .whl/peers
#   scripts/bench-peers.sh [run_all.py args]   # anywhere: the comparison (GPU machine or CPU)
#
# On the GPU machine (no network, no Rust) the peers run inside `bundle/run.sh bench` (built by
# scripts/gpu-bundle.sh; carry bundle/ and .whl/peers), which calls benches/peers/run_all.py
# with the carried `stoke` and packs its table and JSON into the log archive. Here (CPU), e.g.
#   scripts/bench-peers.sh --count 1280 --epochs 2
# With $OUT set, the updated BENCHMARKS.md is copied there too (to bring the rows back).
# Wheels found in $STOKE_PEER_WHEELS (default .whl/peers) are installed with --no-deps into a
# scratch folder on PYTHONPATH, so the machine's torch/torchvision stay as they are.
# The DALI CPU peer (benches/peers/dali_cpu.py, `--peers dali`) runs with $STOKE_DALI_PYTHON (or
# run_all.py's --dali-python): a python with `pip install nvidia-dali-cuda120`, e.g. a venv.
set -euo pipefail
cd "$(dirname "$0")/.."

wheels="${STOKE_PEER_WHEELS:-.whl/peers}"
if [[ "${1:-}" == fetch-wheels ]]; then
    mkdir -p "$wheels"
    # nvImageCodec for CUDA 13, for the GPU machine's Python 3.12 on x86_64.
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        -d "$wheels" nvidia-nvimgcodec-cu13
    ls -la "$wheels"
    exit 0
fi

if compgen -G "$wheels/*.whl" >/dev/null; then
    deps="${TMPDIR:-/tmp}/stoke-peer-deps"
    python3 -m pip install --quiet --no-deps --no-index --target "$deps" "$wheels"/*.whl
    export PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}"
fi
if [[ -n "${STOKE_LIBDIR:-}" ]]; then
    export LD_LIBRARY_PATH="$STOKE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [[ -z "${STOKE_BIN:-}" && ! -x target/release/stoke ]]; then
    cargo build --release --bin stoke
fi
if [[ -n "${STOKE_BIN:-}" ]]; then
    set -- --stoke "$STOKE_BIN" "$@"
fi
rc=0
python3 benches/peers/run_all.py "$@" || rc=$?
if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
    cp BENCHMARKS.md "$OUT/BENCHMARKS.md"
fi
exit $rc
