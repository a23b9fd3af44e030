//! What handing a CPU batch to candle costs per batch, through the whole pipeline (CPU
//! backend, built-in set, train preset at 224×224, f32 NCHW, batch 64 or `STOKE_BENCH_BATCH`):
//! - `recycle`: no tensor, the batch goes back and its buffers are reused (the floor);
//! - `take`: `Batch::take_candle` (the tensor takes the vectors; the pipeline's next use of
//!   that batch allocates new ones, and the backend's writes fault their pages in);
//! - `copy`: `Batch::to_candle(&Device::Cpu)` (one copy into a new tensor; buffers reused).
//!
//! Run: `cargo bench --features candle --bench candle_handoff`.

use candle_core::Device;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use stoke::config::{BackendKind, DType, Layout, PipelineConfig};
use stoke::pipeline::Pipeline;

/// Batch size: 64, or `STOKE_BENCH_BATCH`.
fn batch() -> usize {
    std::env::var("STOKE_BENCH_BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

fn pipeline() -> Pipeline {
    let path = stoke::gen::default_dataset(&stoke::gen::cache_root(), 0, stoke::gen::DEFAULT_COUNT, &|_| {}).expect("built-in set");
    let mut c = PipelineConfig::new(path);
    c.backend = BackendKind::Cpu;
    c.batch_size = batch();
    c.output.dtype = DType::F32;
    c.output.layout = Layout::Nchw;
    Pipeline::new(c).expect("pipeline")
}

/// Run `per_batch` on `iters` batches, crossing epochs as needed.
fn run(p: &mut Pipeline, epoch: &mut u64, iters: u64, mut per_batch: impl FnMut(&mut Pipeline, stoke::Batch)) {
    let mut left = iters;
    while left > 0 {
        match p.next_batch() {
            Some(b) => {
                per_batch(p, b.expect("batch"));
                left -= 1;
            }
            None => {
                *epoch += 1;
                p.start_epoch(*epoch, 0);
            }
        }
    }
}

fn handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("candle_handoff");
    g.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(batch() as u64));
    let (mut p, mut epoch) = (pipeline(), 0);
    p.start_epoch(0, 0);
    g.bench_function("recycle", |b| b.iter(|| run(&mut p, &mut epoch, 1, |p, batch| p.recycle(batch))));
    g.bench_function("take", |b| {
        b.iter(|| {
            run(&mut p, &mut epoch, 1, |p, mut batch| {
                black_box(batch.take_candle().expect("tensor"));
                p.recycle(batch)
            })
        })
    });
    g.bench_function("copy", |b| {
        b.iter(|| {
            run(&mut p, &mut epoch, 1, |p, batch| {
                black_box(batch.to_candle(&Device::Cpu).expect("tensor"));
                p.recycle(batch)
            })
        })
    });
    g.finish();
}

criterion_group!(benches, handoff);
criterion_main!(benches);
