#!/usr/bin/env bash
# Installs the pinned CUDA 13.0 compiler (nvcc + what it needs) and libnvjpeg.so.13 from PyPI
# into ./.venv-cuda, for machines without a CUDA toolkit. build.rs finds nvcc there; the tests
# and scripts/gpu-bundle.sh find libnvjpeg.so.13 there.
#
# Why these exact versions (docs/CONTRACTS.md, "Toolchain facts"): the nvcc wheel's dependencies are unpinned and pull
# 13.5 parts whose PTX (ISA 9.5) a CUDA 13.0 driver (R580) cannot load, so everything is
# installed with --no-deps at versions that belong together. cccl supplies <nv/target>.
#
# Idempotent: a second run with everything in place installs nothing. Prints nvcc's path.
# Environment: PYTHON (default python3), STOKE_CUDA_VENV (default ./.venv-cuda).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${STOKE_CUDA_VENV:-.venv-cuda}"
PINS=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
  nvidia-nvjpeg==13.0.1.86
)

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi

# What is installed, as name==version lines (pip's normalised names use '-').
installed="$("$VENV/bin/python" -m pip list --format=freeze 2>/dev/null | tr 'A-Z_' 'a-z-')"
missing=()
for p in "${PINS[@]}"; do
  if ! grep -qx "$p" <<<"$installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup-cuda: installing ${missing[*]}" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${missing[@]}"
fi

site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cu13="$site/nvidia/cu13"
nvcc="$cu13/bin/nvcc"
if ! "$nvcc" --version >/dev/null 2>&1; then
  echo "setup-cuda: $nvcc does not run" >&2
  exit 1
fi
if [ ! -f "$cu13/lib/libnvjpeg.so.13" ]; then
  echo "setup-cuda: $cu13/lib/libnvjpeg.so.13 is missing" >&2
  exit 1
fi
echo "setup-cuda: $("$nvcc" --version | grep release)" >&2
echo "setup-cuda: libnvjpeg at $cu13/lib/libnvjpeg.so.13" >&2
echo "$(cd "$(dirname "$nvcc")" && pwd)/nvcc"
