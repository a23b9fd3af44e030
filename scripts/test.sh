#!/usr/bin/env bash
# Every test: the Rust crate's (`cargo test --release`; GPU tests skip without a GPU, saying
# why) and the Python package's (scripts/test-python.sh: pip install . and pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release
# The `candle` feature: batches as candle tensors, and a small CNN trained on them (--smoke:
# 40 steps, the loss must fall to at most 0.9x). candle-core and candle-nn compile once.
cargo test --release --features candle --test candle
cargo run --release --quiet --features candle --example train_candle -- --smoke
scripts/test-python.sh
