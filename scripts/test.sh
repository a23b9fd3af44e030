#!/usr/bin/env bash
# Every test: the Rust crate's (`cargo test --release`; GPU tests skip without a GPU, saying
# why) and the Python package's (scripts/test-python.sh: pip install . and pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release
scripts/test-python.sh
