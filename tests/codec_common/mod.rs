//! Shared by the codec tests (tests/codec_*.rs): a CPU pipeline whose output is each image
//! whole, unscaled, on the 0..255 scale (f32 NHWC), so a batch holds the delivered pixels
//! themselves, comparable to Pillow's `convert('RGB')`.
#![allow(dead_code)]

use std::path::Path;
use stoke::config::{AugmentSpec, BackendKind, CropMode, DType, Layout, OnError, PipelineConfig};

/// The pipeline config for `w × h` images under `root`, `batch` per batch.
pub fn whole_image_config(root: &Path, w: u32, h: u32, batch: usize, on_error: OnError) -> PipelineConfig {
    let mut c = PipelineConfig::new(root);
    let mut spec = AugmentSpec::eval(h);
    spec.size = (w, h);
    spec.crop = CropMode::ResizeCenter { shorter: h };
    c.augment = spec;
    c.output.dtype = DType::F32;
    c.output.layout = Layout::Nhwc;
    c.output.mean = [0.0; 3];
    c.output.std = [1.0 / 255.0; 3];
    c.batch_size = batch;
    c.backend = BackendKind::Cpu;
    c.cpu_threads = 2;
    c.on_error = on_error;
    c
}

/// Slot `slot`'s pixels of a whole-image f32 batch, back on the 0..255 byte scale.
pub fn slot_bytes(batch: &[u8], slot: usize, w: u32, h: u32) -> Vec<u8> {
    let per = (w * h * 3 * 4) as usize;
    batch[slot * per..(slot + 1) * per]
        .chunks_exact(4)
        .map(|o| f32::from_le_bytes(o.try_into().unwrap()).round().clamp(0.0, 255.0) as u8)
        .collect()
}
