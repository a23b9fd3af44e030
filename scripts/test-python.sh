#!/usr/bin/env bash
# The Python package's tests: `pip install .` (maturin builds the PyO3 bindings in python/ as
# an abi3 wheel) into a venv, then pytest on tests/python. Used by scripts/test.sh and CI.
# Environment: PYTHON (default python3), STOKE_PY_VENV (default ./.venv-py).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${STOKE_PY_VENV:-.venv-py}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check pytest Pillow numpy pyarrow
# Reuse the crate's build: the workspace's target folder (or $CARGO_TARGET_DIR).
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check .
rc=0
"$VENV/bin/python" -m pytest -q tests/python || rc=$?
# pytest's 5 means no test ran: that is a failure here.
[ "$rc" -eq 5 ] && echo "test-python: no Python test ran" >&2
exit "$rc"
