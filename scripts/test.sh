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
# The CPU augment runs its AVX2 build where the CPU has it; the baseline build again here, on
# the goldens and the kernel equality (tests/cpu_isa.rs compares the two bit for bit).
STOKE_CPU_ISA=baseline STOKE_EXPECT_CPU_ISA=baseline cargo test --release --test cpu_isa --test cpu_golden \
  --test cpu_jitter_golden --test cpu_auto --test cpu_recipe --test cpu_math --test gpu_kernel_host
scripts/test-python.sh
