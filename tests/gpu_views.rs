//! Several views per sample on the CUDA backend (each sample decoded once, one fused launch per
//! group of views): every element of every view written, each view as close to the CPU
//! backend's as a single view is, and the same seed giving bit-identical views.
//!
//! Needs a GPU (skips with a printed reason without one; fails with `STOKE_REQUIRE_GPU=1`): on
//! the simulated device in CI, on a real one where the GPU bundle runs it.

mod gpu_common;

use gpu_common::{generated, gpu_or_skip, serial};
use std::sync::Arc;
use stoke::batch::Batch;
use stoke::config::{BackendKind, DType, GpuUpsampling, Layout, OptionNames, PipelineConfig, PipelineOptions, ViewOptions};
use stoke::pipeline::Pipeline;
use stoke::source::Dataset;

/// As tests/gpu_pipeline.rs: the decoders may differ by a mean of 2/255, divided by the
/// smallest ImageNet std, plus margin for the resize.
const MAX_SAMPLE_MEAN_DIFF: f32 = 0.05;

/// DINO's shape at a small size: 2 global views (blur 1.0 / 0.1 + solarize 0.2) and 4 local
/// ones, bicubic, colour jitter, grayscale.
const VIEWS: &str = r#"[
  {"count": 2, "size": 48, "scale": [0.4, 1.0], "interpolation": "bicubic",
   "per_view": [{"blur_prob": 1.0}, {"blur_prob": 0.1, "solarize_prob": 0.2}]},
  {"count": 4, "size": 24, "scale": [0.05, 0.4], "interpolation": "bicubic", "blur_prob": 0.5}
]"#;

fn config(ds: &Dataset, backend: BackendKind, seed: u64) -> PipelineConfig {
    let o = PipelineOptions {
        views: Some(ViewOptions::parse_list(VIEWS, OptionNames::Cli).unwrap()),
        batch_size: Some(16),
        seed: Some(seed),
        backend: Some(backend),
        threads: Some(2),
        dtype: Some(DType::F16),
        layout: Some(Layout::Nchw),
        color_jitter: Some(vec![0.4, 0.4, 0.2, 0.1]),
        color_jitter_prob: Some(0.8),
        grayscale_prob: Some(0.2),
        // Interpolated chroma, as the CPU backend decodes: the bound rests on it.
        gpu_upsampling: Some(GpuUpsampling::Smooth),
        ..Default::default()
    };
    let mut c = o.to_config(ds.path(), OptionNames::Cli).unwrap();
    c.ring_depth = 3;
    c
}

/// Every batch of one epoch, its images on the host (device batches poisoned after reading).
fn epoch(ds: &Arc<Dataset>, c: &PipelineConfig) -> Vec<(Vec<u8>, Batch)> {
    gpu_common::host_epoch(&mut Pipeline::with_dataset(c.clone(), ds.clone()).unwrap(), 0)
}

#[test]
fn every_view_is_written_and_close_to_the_cpu_backend_and_a_seed_repeats_bit_for_bit() {
    let _serial = serial();
    let Some(_gpu) = gpu_or_skip("gpu_views") else { return };
    let dir = tempfile::tempdir().unwrap();
    let ds = generated(dir.path(), 40, 3);
    let cuda = epoch(&ds, &config(&ds, BackendKind::Cuda, 7));
    let cpu = epoch(&ds, &config(&ds, BackendKind::Cpu, 7));
    assert_eq!(cuda.len(), cpu.len());
    let f = |v: &[u8], k: usize| half::f16::from_le_bytes([v[2 * k], v[2 * k + 1]]).to_f32();
    let mut worst = 0f32;
    for ((got, gb), (want, wb)) in cuda.iter().zip(&cpu) {
        assert_eq!(gb.groups, wb.groups);
        assert_eq!(got.len(), want.len(), "every view of every sample");
        assert_eq!(got.chunks(2).position(|h| h == [0xff, 0xff]), None, "step {}: an element left unwritten", gb.step);
        assert_eq!((&gb.labels, &gb.params), (&wb.labels, &wb.params), "the same draws on both backends");
        for place in gb.view_places() {
            let n = place.sample_bytes / 2;
            for i in 0..gb.len() {
                let at = (place.offset + i * place.sample_bytes) / 2;
                let mad = (0..n).map(|k| (f(got, at + k) - f(want, at + k)).abs()).sum::<f32>() / n as f32;
                worst = worst.max(mad);
            }
        }
    }
    eprintln!("views: worst per-(view, sample) mean difference from the CPU backend {worst}");
    assert!(worst < MAX_SAMPLE_MEAN_DIFF, "worst per-(view, sample) mean difference {worst}");
    // The same seed: the same bits.
    let again = epoch(&ds, &config(&ds, BackendKind::Cuda, 7));
    for ((a, _), (b, _)) in cuda.iter().zip(&again) {
        assert!(a == b, "same seed, different views");
    }
}
