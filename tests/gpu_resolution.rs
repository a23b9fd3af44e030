//! A resolution schedule on the CUDA backend: the ring, tables and scratch are sized once for
//! `max_res`; an epoch at a smaller size writes every element of its (smaller) batches in the
//! front of slots a `max_res` epoch filled before, and its images are as close to the CPU
//! backend's as a fixed size's; the device memory does not change between epochs.
//!
//! Needs a GPU (skips with a printed reason without one; fails with `STOKE_REQUIRE_GPU=1`): on
//! the simulated device in CI, on a real one where the GPU bundle runs it.

mod gpu_common;

use gpu_common::{generated, gpu_or_skip, serial};
use stoke::batch::Batch;
use stoke::config::{BackendKind, DType, GpuUpsampling, Layout, OptionNames, PipelineConfig, PipelineOptions, ResolutionSchedule};
use stoke::pipeline::Pipeline;
use stoke::source::Dataset;

/// As tests/gpu_pipeline.rs: the decoders may differ by a mean of 2/255, divided by the
/// smallest ImageNet std, plus margin for the resize.
const MAX_SAMPLE_MEAN_DIFF: f32 = 0.05;

/// 32 up to epoch 1, 64 at epoch 2, 96 from epoch 3.
const SCHEDULE: ResolutionSchedule = ResolutionSchedule { min_res: 32, max_res: 96, start_ramp: 1, end_ramp: 3 };

fn config(ds: &Dataset, backend: BackendKind) -> PipelineConfig {
    let o = PipelineOptions {
        resolution: Some(SCHEDULE),
        batch_size: Some(16),
        seed: Some(11),
        backend: Some(backend),
        threads: Some(2),
        dtype: Some(DType::F16),
        layout: Some(Layout::Nchw),
        color_jitter: Some(vec![0.4]),
        // Interpolated chroma, as the CPU backend decodes: the bound rests on it.
        gpu_upsampling: Some(GpuUpsampling::Smooth),
        ..Default::default()
    };
    let mut c = o.to_config(ds.path(), OptionNames::Cli).unwrap();
    c.ring_depth = 3;
    c
}

fn epoch(p: &mut Pipeline, epoch: u64) -> Vec<(Vec<u8>, Batch)> {
    gpu_common::host_epoch(p, epoch)
}

#[test]
fn a_smaller_epoch_writes_its_batches_fully_in_slots_sized_for_the_largest_and_equals_the_cpu_backend() {
    let _serial = serial();
    let Some(_gpu) = gpu_or_skip("gpu_resolution") else { return };
    let dir = tempfile::tempdir().unwrap();
    let ds = generated(dir.path(), 40, 5);
    let mut cuda = Pipeline::with_dataset(config(&ds, BackendKind::Cuda), ds.clone()).unwrap();
    assert!(cuda.is_cuda());
    let mut cpu = Pipeline::with_dataset(config(&ds, BackendKind::Cpu), ds.clone()).unwrap();
    let f = |v: &[u8], k: usize| half::f16::from_le_bytes([v[2 * k], v[2 * k + 1]]).to_f32();
    let mut held = None;
    // max_res first (every slot filled and poisoned at 96), then the smaller epochs in them.
    for e in [3u64, 0, 2, 1] {
        let s = SCHEDULE.size(e) as usize;
        let (got, want) = (epoch(&mut cuda, e), epoch(&mut cpu, e));
        assert_eq!(got.len(), want.len());
        let mut worst = 0f32;
        for ((g, gb), (w, wb)) in got.iter().zip(&want) {
            assert_eq!(gb.shape, [gb.len(), 3, s, s], "epoch {e}");
            assert_eq!(g.len(), gb.len() * 3 * s * s * 2, "epoch {e}: the batch's own size, not the slot's");
            assert_eq!(g.chunks(2).position(|h| h == [0xff, 0xff]), None, "epoch {e} step {}: an element left unwritten", gb.step);
            assert_eq!((&gb.labels, &gb.params), (&wb.labels, &wb.params), "the same draws on both backends");
            let n = 3 * s * s;
            for i in 0..gb.len() {
                let mad = (0..n).map(|k| (f(g, i * n + k) - f(w, i * n + k)).abs()).sum::<f32>() / n as f32;
                worst = worst.max(mad);
            }
        }
        eprintln!("epoch {e} ({s}x{s}): worst per-sample mean difference from the CPU backend {worst}");
        assert!(worst < MAX_SAMPLE_MEAN_DIFF, "epoch {e}: worst per-sample mean difference {worst}");
        let now = cuda.stats().device_bytes;
        assert!(now > 0);
        assert_eq!(*held.get_or_insert(now), now, "epoch {e}: no epoch allocates");
    }
}
