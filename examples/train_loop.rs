//! A real consumer of stoke's device batches: a "training step" kernel (per-channel sums of
//! the f16 NCHW batch) on the trainer's own stream, showing the synchronisation done right.
//!
//! ```text
//! cargo run --release --example train_loop -- [DATASET] [--batches N] [--batch-size B]
//! ```
//! Without DATASET it generates (once, cached) the built-in ImageNet-like set of 2048 images.
//!
//! The rules it follows (see `DeviceImages`):
//! 1. `images.wait_on(&train_stream)`: the trainer's stream waits on the batch's ready event,
//!    on the device; the host does not block.
//! 2. Every read of the batch is enqueued on `train_stream` before the batch is dropped.
//! 3. Dropping (or recycling) the batch records its release on `train_stream`, so the ring
//!    rewrites the slot only after the step that read it has run. Nothing else synchronises.
//!
//! The consumer kernel is compiled with NVRTC at start-up (it needs no CUDA headers), so this
//! needs `libnvrtc.so.13` besides the driver and libnvjpeg.
//!
//! Not yet verified on a GPU.

use std::time::Instant;
use stoke::config::{BackendKind, DType, Layout, PipelineConfig};
use stoke::pipeline::Pipeline;

use cudarc::driver::{LaunchConfig, PushKernelArg};

/// Per (sample, channel) block: sum the plane (f16 → f32 with the PTX conversion, no headers)
/// and add it to `sums[channel]`.
const CONSUMER: &str = r#"
extern "C" __global__ void channel_sums(const unsigned short* x, unsigned int plane, float* sums) {
    __shared__ float part[256];
    const unsigned short* p = x + (unsigned long long)blockIdx.x * plane;
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < plane; i += blockDim.x) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i]));
        s += f;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(&sums[blockIdx.x % 3], part[0]);
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut path, mut batches, mut batch_size) = (None, 200u64, 256usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--batches" => batches = args.next().ok_or("--batches needs a number")?.parse()?,
            "--batch-size" => batch_size = args.next().ok_or("--batch-size needs a number")?.parse()?,
            _ => path = Some(std::path::PathBuf::from(a)),
        }
    }
    let path = match path {
        Some(p) => p,
        None => stoke::gen::default_dataset(&stoke::gen::cache_root(), 0, 2048, &|_| {})?,
    };
    let mut config = PipelineConfig::new(&path);
    config.backend = BackendKind::Cuda;
    config.batch_size = batch_size;
    config.output.dtype = DType::F16;
    config.output.layout = Layout::Nchw;
    config.prefetch_batches = 2;
    config.ring_depth = 4; // prefetch + the batch the trainer holds + the one being made

    let mut pipeline = Pipeline::new(config.clone())?;
    let ctx = pipeline.cuda_context().expect("backend cuda gives device batches").clone();
    // The trainer's own stream: never stoke's.
    let train_stream = ctx.new_stream()?;
    let module = ctx.load_module(cudarc::nvrtc::compile_ptx(CONSUMER)?)?;
    let step = module.load_function("channel_sums")?;
    let mut sums = train_stream.alloc_zeros::<f32>(3)?;

    let (mut done, mut images, mut epoch) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    'outer: loop {
        pipeline.start_epoch(epoch, 0);
        while let Some(batch) = pipeline.next_batch() {
            let batch = batch?;
            let dev = batch.device().expect("the cuda backend makes device batches");
            dev.wait_on(&train_stream)?; // rule 1
            let [n, c, h, w] = dev.shape();
            let (x, plane) = (dev.images_ptr(), (h * w) as u32);
            let mut launch = train_stream.launch_builder(&step);
            launch.arg(&x).arg(&plane).arg(&mut sums);
            let cfg = LaunchConfig { grid_dim: ((n * c) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
            // SAFETY: `x` holds n·3·h·w f16 values, ready once train_stream passes the wait
            // above; `sums` holds 3 floats; each block reads one plane.
            unsafe { launch.launch(cfg) }?; // rule 2: enqueued before the batch is dropped
                                            // Rule 3: giving the batch back records its release on `train_stream`.
            pipeline.recycle(batch);
            images += n as u64;
            done += 1;
            if done % 50 == 0 || done == batches {
                let s = train_stream.clone_dtoh(&sums)?; // the only host sync, for printing
                let secs = t0.elapsed().as_secs_f64();
                let per = images as f32 * plane as f32;
                println!(
                    "{done} batches, {images} images, {:.0} images/s; mean normalized value per channel {:.4} {:.4} {:.4}",
                    images as f64 / secs,
                    s[0] / per,
                    s[1] / per,
                    s[2] / per,
                );
            }
            if done == batches {
                break 'outer;
            }
        }
        epoch += 1;
    }
    train_stream.synchronize()?;
    let secs = t0.elapsed().as_secs_f64();
    println!("{images} images in {secs:.2} s: {:.0} images/s end to end; {:?}", images as f64 / secs, pipeline.stats());
    Ok(())
}
