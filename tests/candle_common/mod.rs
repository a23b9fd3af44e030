//! Shared by tests/candle.rs and tests/candle_cuda.rs: the small generated set and the
//! pipeline configuration both run.
#![allow(dead_code)]

use std::path::Path;
use stoke::config::{BackendKind, DType, Layout, PipelineConfig};

/// 22 generated images of 3 classes under `root` (batches of 8, 8 and a short 6).
pub fn dataset(root: &Path) {
    let mut cfg = stoke::gen::GenConfig::new(22);
    cfg.classes = 3;
    cfg.seed = 5;
    stoke::gen::generate(root, &cfg, &|_| {}).unwrap();
}

/// The train preset at 20×12 (not square: a swapped H and W would show), batches of 8.
pub fn config(root: &Path, dtype: DType, layout: Layout, backend: BackendKind) -> PipelineConfig {
    let mut c = PipelineConfig::new(root);
    c.augment = stoke::config::AugmentSpec::train(20);
    c.augment.size = (20, 12);
    c.output.dtype = dtype;
    c.output.layout = layout;
    c.batch_size = 8;
    c.seed = 3;
    c.backend = backend;
    c.cpu_threads = 2;
    c
}

/// A device batch's images (bytes) and soft targets (empty without Mixup/CutMix) copied to the
/// host by the batch itself (`DeviceImages`' own copies: the reference the tensors are checked
/// against, a path that does not go through candle).
pub fn own_host_copies(b: &stoke::Batch) -> (Vec<u8>, Vec<f32>) {
    let d = b.device().expect("the cuda backend makes device batches");
    let (mut bytes, mut targets) = (Vec::new(), Vec::new());
    d.copy_images_to_host(&mut bytes).unwrap();
    d.copy_targets_to_host(&mut targets).unwrap();
    (bytes, targets)
}
