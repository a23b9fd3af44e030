//! A candle model trained on stoke's batches: a small CNN (candle-nn) on the CPU, fed by the
//! CPU backend through `Batch::take_candle` (the tensors take the batch's vectors, no copy); or,
//! with `--cuda`, on the GPU, fed by the CUDA backend through `Batch::take_candle_cuda` (the
//! image tensor is the batch's own device memory, no copy).
//!
//! ```text
//! cargo run --release --features candle --example train_candle -- [--steps N] [--batch-size B] [--smoke]
//! cargo run --release --features candle-cuda --example train_candle -- --cuda [--steps N] [--batch-size B] [--smoke]
//! ```
//! (`--cuda` needs a GPU: the simulated device runs stoke's kernels, not candle's.)
//! The data is a small ImageFolder set written once into the system's temp folder: four
//! classes told apart by their colour under varied texture, so that the loss can fall (the
//! built-in benchmark set's labels do not depend on the pixels). The pipeline applies the
//! `train` recipe (RandomResizedCrop to 32×32, horizontal flip, normalize) in f32 NCHW.
//!
//! It prints the loss, images/s and the share of each step spent waiting for data.
//! `--smoke` (CI) runs 40 steps and fails unless the mean loss of the last 5 steps is at most
//! 0.9× that of the first 5.

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{conv2d, linear, Conv2d, Conv2dConfig, Linear, Optimizer, VarBuilder, VarMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stoke::config::{BackendKind, Layout, PipelineConfig};
use stoke::pipeline::Pipeline;
use stoke::Batch;

const CLASSES: usize = 4;
const PER_CLASS: usize = 96;
const SIDE: u32 = 32;

struct Net {
    c1: Conv2d,
    c2: Conv2d,
    fc: Linear,
}

impl Net {
    fn new(vb: VarBuilder) -> candle_core::Result<Self> {
        let cfg = Conv2dConfig { padding: 1, stride: 2, ..Default::default() };
        Ok(Self {
            c1: conv2d(3, 16, 3, cfg, vb.pp("c1"))?,
            c2: conv2d(16, 32, 3, cfg, vb.pp("c2"))?,
            fc: linear(32, CLASSES, vb.pp("fc"))?,
        })
    }
}

impl Module for Net {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.c1.forward(x)?.relu()?;
        let x = self.c2.forward(&x)?.relu()?;
        self.fc.forward(&x.mean((2, 3))?)
    }
}

/// Cross-entropy against class labels `[N]` (I64) or soft targets `[N, classes]` (F32, what the
/// batch holds under Mixup/CutMix).
fn loss(logits: &Tensor, targets: &Tensor) -> candle_core::Result<Tensor> {
    if targets.rank() == 2 {
        let logp = candle_nn::ops::log_softmax(logits, D::Minus1)?;
        (targets * logp)?.sum(D::Minus1)?.neg()?.mean_all()
    } else {
        candle_nn::loss::cross_entropy(logits, targets)
    }
}

/// Write the example set once (`<temp>/stoke-candle-example-v2/<class>/<i>.jpg`): each class
/// a base colour, each image its own brightness and tint, a random stripe texture and noise,
/// 48..80 px a side.
fn dataset() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let root = std::env::temp_dir().join("stoke-candle-example-v2");
    if root.join(".complete").exists() {
        return Ok(root);
    }
    // Written beside it and renamed into place, so a second run at the same time never reads
    // a half-written set.
    let tmp = root.with_extension(format!("part{}", std::process::id()));
    let colours = [[200.0, 60.0, 50.0], [60.0, 180.0, 70.0], [50.0, 80.0, 210.0], [210.0, 190.0, 40.0]];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        // SplitMix64: the set is the same on every machine.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    for (c, base) in colours.iter().enumerate() {
        let dir = tmp.join(format!("class{c}"));
        std::fs::create_dir_all(&dir)?;
        for i in 0..PER_CLASS {
            let (w, h) = (48 + (next() * 32.0) as usize, 48 + (next() * 32.0) as usize);
            let (fx, fy, phase, depth) = (next() * 0.5 - 0.25, next() * 0.5 - 0.25, next() * 6.0, 0.2 + next() * 0.5);
            // Per image: brightness 0.5..1.2 and a tint of up to ±60 per channel, so the
            // classes overlap and the model has something to learn.
            let gain = 0.5 + next() * 0.7;
            let tint: Vec<f64> = (0..3).map(|_| (next() - 0.5) * 120.0).collect();
            let mut rgb = Vec::with_capacity(w * h * 3);
            for y in 0..h {
                for x in 0..w {
                    // A triangle wave (no sin: the same bytes everywhere).
                    let t = (x as f64 * fx + y as f64 * fy + phase).rem_euclid(2.0);
                    let shade = 1.0 - depth * (t - 1.0).abs();
                    for (b, t) in base.iter().zip(&tint) {
                        rgb.push(((b + t) * gain * shade + (next() - 0.5) * 60.0).clamp(0.0, 255.0) as u8);
                    }
                }
            }
            let path = dir.join(format!("{i:03}.jpg"));
            jpeg_encoder::Encoder::new_file(&path, 90)?.encode(&rgb, w as u16, h as u16, jpeg_encoder::ColorType::Rgb)?;
        }
    }
    std::fs::write(tmp.join(".complete"), b"")?;
    if std::fs::rename(&tmp, &root).is_err() {
        // Another run got there first (or a stale, incomplete set is in the way: replace it).
        if !root.join(".complete").exists() {
            std::fs::remove_dir_all(&root)?;
            std::fs::rename(&tmp, &root)?;
        } else {
            std::fs::remove_dir_all(&tmp)?;
        }
    }
    Ok(root)
}

fn config(path: &Path, batch_size: usize, cuda: bool) -> PipelineConfig {
    let mut config = PipelineConfig::new(path);
    config.backend = if cuda { BackendKind::Cuda } else { BackendKind::Cpu };
    config.batch_size = batch_size;
    config.augment = stoke::augment::spec::AugmentSpec::train(SIDE);
    config.output.dtype = stoke::config::DType::F32;
    config.output.layout = Layout::Nchw;
    config
}

/// The batch as tensors on `device`: taken without a copy, from a host batch (CPU) or a device
/// batch (CUDA, with the `candle-cuda` feature).
fn take(batch: &mut Batch, device: &Device) -> stoke::Result<(Tensor, Tensor)> {
    match device {
        #[cfg(feature = "candle-cuda")]
        Device::Cuda(_) => batch.take_candle_cuda(device),
        _ => batch.take_candle(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut steps, mut batch_size, mut smoke, mut cuda) = (300usize, 64usize, false, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--steps" => steps = args.next().ok_or("--steps needs a number")?.parse()?,
            "--batch-size" => batch_size = args.next().ok_or("--batch-size needs a number")?.parse()?,
            "--smoke" => (steps, batch_size, smoke) = (40, 32, true),
            "--cuda" => cuda = true,
            other => return Err(format!("unknown argument {other:?} (--steps N, --batch-size B, --smoke, --cuda)").into()),
        }
    }
    if cuda && cfg!(not(feature = "candle-cuda")) {
        return Err("--cuda needs candle's CUDA backend: build with --features candle-cuda".into());
    }
    let device = cuda_device(cuda)?;
    let mut pipeline = Pipeline::new(config(&dataset()?, batch_size, cuda))?;

    let vars = VarMap::new();
    let net = Net::new(VarBuilder::from_varmap(&vars, DType::F32, &device))?;
    let mut opt = candle_nn::AdamW::new(vars.all_vars(), candle_nn::ParamsAdamW { lr: 1e-2, ..Default::default() })?;

    let (mut losses, mut images) = (Vec::with_capacity(steps), 0usize);
    let (mut wait, mut compute) = (Duration::ZERO, Duration::ZERO);
    let t0 = Instant::now();
    let mut epoch = 0;
    'train: loop {
        pipeline.start_epoch(epoch, 0);
        loop {
            let t = Instant::now();
            let Some(batch) = pipeline.next_batch() else { break };
            let mut batch = batch?;
            let (x, y) = take(&mut batch, &device)?;
            pipeline.recycle(batch);
            let t_data = t.elapsed();
            let l = loss(&net.forward(&x)?, &y)?;
            opt.backward_step(&l)?;
            let l = l.to_scalar::<f32>()?;
            let t_step = t.elapsed() - t_data;
            wait += t_data;
            compute += t_step;
            images += x.dim(0)?;
            losses.push(l);
            let s = losses.len();
            if s % 10 == 0 || s == 1 || s == steps {
                println!(
                    "step {s:4}  loss {l:.4}  data wait {:.1}% of the step",
                    100.0 * t_data.as_secs_f64() / (t_data + t_step).as_secs_f64()
                );
            }
            if s == steps {
                break 'train;
            }
        }
        epoch += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{steps} steps, {images} images in {secs:.2} s: {:.0} images/s; data wait {:.1}% of the time ({:.1} ms per step), model {:.1} ms per step",
        images as f64 / secs,
        100.0 * wait.as_secs_f64() / (wait + compute).as_secs_f64(),
        1e3 * wait.as_secs_f64() / steps as f64,
        1e3 * compute.as_secs_f64() / steps as f64,
    );
    let k = 5.min(losses.len());
    let first = losses[..k].iter().sum::<f32>() / k as f32;
    let last = losses[losses.len() - k..].iter().sum::<f32>() / k as f32;
    println!("mean loss of the first {k} steps {first:.4}, of the last {k} {last:.4} ({:.2}x)", last / first);
    if smoke && last > 0.9 * first {
        return Err(format!("the loss did not fall: {first:.4} -> {last:.4} (the smoke test asks for at most 0.9x)").into());
    }
    Ok(())
}

/// The candle device: on a GPU one with a stream of its own, so that `take_candle_cuda` hands
/// the batch's memory over without a copy (on `Device::new_cuda`'s per-thread default stream it
/// copies: docs/candle.md).
fn cuda_device(cuda: bool) -> candle_core::Result<Device> {
    #[cfg(feature = "candle-cuda")]
    if cuda {
        return Ok(Device::Cuda(candle_core::CudaDevice::new_with_stream(0)?));
    }
    let _ = cuda;
    Ok(Device::Cpu)
}
