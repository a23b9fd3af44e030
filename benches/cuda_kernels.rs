//! GPU microbenchmarks (`cuda_copy_u8`, `cuda_augment_{f16,f32}`), named `{backend}_{stage}_{dtype}`, timed with CUDA events around the
//! launches (the stream is synchronized inside the timed region by the end event), reporting
//! bytes/s against the device's own measured copy bandwidth (`cuda_copy_u8`: a device-to-device
//! copy reads and writes every byte, so it is the ceiling for a kernel that reads its input and
//! writes its output once).
//!
//! Without a usable GPU (no driver, no device, no kernels) every benchmark here is skipped with
//! one line saying why, and the binary exits 0.
//! Run: `cargo bench --bench cuda_kernels` (on the GPU machine: the carried bench binary).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stoke::augment::params::{draw, AugParams};
use stoke::backend::cuda::augment::{oriented_steps, AugmentKind, Augmenter, SampleDesc, TableLayout, TablePlan};
use stoke::backend::cuda::device::Gpu;
use stoke::config::{AugmentSpec, DType, OutputSpec};

/// Best bytes/s seen per benchmark, for the summary against the copy bandwidth.
static BEST: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

fn note(name: &str, bytes_per_sec: f64) {
    let mut v = BEST.lock().expect("not poisoned");
    match v.iter_mut().find(|(n, _)| n == name) {
        Some(e) => e.1 = e.1.max(bytes_per_sec),
        None => v.push((name.to_string(), bytes_per_sec)),
    }
}

/// Time `iters` runs of `work` on `stream` with CUDA events; records bytes/s for `name`.
fn event_time(stream: &Arc<CudaStream>, name: &str, bytes: u64, iters: u64, mut work: impl FnMut()) -> Duration {
    let start = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).expect("record start event");
    for _ in 0..iters {
        work();
    }
    let end = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).expect("record end event");
    let ms = start.elapsed_ms(&end).expect("elapsed (synchronizes both events)") as f64;
    let secs = ms / 1e3;
    if secs > 0.0 {
        note(name, bytes as f64 * iters as f64 / secs);
    }
    Duration::from_secs_f64(secs)
}

fn gpu_or_skip() -> Option<Arc<Gpu>> {
    match Gpu::open(0).and_then(|g| g.kernels().map(|_| g)) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("skipping the CUDA benchmarks: {e}");
            None
        }
    }
}

fn cuda(c: &mut Criterion) {
    let Some(gpu) = gpu_or_skip() else { return };
    let stream = gpu.stream().clone();
    let mut g = c.benchmark_group("cuda");
    g.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));

    // Copy bandwidth: 256 MiB device to device; bytes moved = read + write.
    let n = 256usize << 20;
    let src: CudaSlice<u8> = stream.alloc_zeros(n).expect("alloc copy source");
    let mut dst: CudaSlice<u8> = stream.alloc_zeros(n).expect("alloc copy destination");
    g.throughput(Throughput::Bytes(2 * n as u64));
    g.bench_function("cuda_copy_u8", |b| {
        b.iter_custom(|iters| {
            event_time(&stream, "cuda_copy_u8", 2 * n as u64, iters, || {
                stream.memcpy_dtod(&src, &mut dst).expect("copy");
            })
        })
    });
    drop((src, dst));

    // 256 decoded 500x375 RGB images in device memory, the input of the augment benchmark.
    let (w, h, batch) = (500u32, 375u32, 256usize);
    let img_bytes = (w * h * 3) as usize;
    let pixels: Vec<u8> = (0..img_bytes * batch).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let dev_src = stream.clone_htod(&pixels).expect("upload images");
    let (base, _guard) = dev_src.device_ptr(&stream);

    // The fused augment kernel (tables + augment launches): the same 256 decoded images,
    // train preset at 224, f16 and f32 NCHW. Bytes: every crop pixel read once, the output
    // written once.
    let spec = AugmentSpec::train(224);
    let params: Vec<AugParams> = (0..batch).map(|i| draw(&spec, 0, 0, i as u64, w as i32, h as i32, 1)).collect();
    let mut layout = TableLayout::default();
    let descs: Vec<SampleDesc> = params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (base, step_x, step_y) = oriented_steps((i * img_bytes) as u64, (w * 3) as u64, (0, 0), (w, h), (p.crop_x, p.crop_y), 1);
            let mut d = SampleDesc { base, step_x, step_y, ..SampleDesc::default() };
            layout.add(p, &mut d);
            d
        })
        .collect();
    let plan = TablePlan::new(batch, (224, 224), w.max(h), 224, spec.filter.code(), spec.antialias);
    assert!(plan.fits(&layout), "benchmark batch exceeds its table plan");
    let dev_params = stream.clone_htod(bytemuck::cast_slice::<AugParams, u8>(&params)).expect("upload params");
    let dev_descs = stream.clone_htod(bytemuck::cast_slice::<SampleDesc, u8>(&descs)).expect("upload descriptors");
    let (pp, _pg) = dev_params.device_ptr(&stream);
    let (dp, _dg) = dev_descs.device_ptr(&stream);
    let read: u64 = params.iter().map(|p| 3 * p.crop_w as u64 * p.crop_h as u64).sum();
    for dtype in [DType::F16, DType::F32] {
        let output = OutputSpec { dtype, ..OutputSpec::default() };
        let aug = Augmenter::new(&gpu, &stream, plan, &output).expect("augmenter");
        let out_bytes = batch * 3 * 224 * 224 * dtype.size();
        let out: CudaSlice<u8> = stream.alloc_zeros(out_bytes).expect("alloc batch");
        let (op, _og) = out.device_ptr(&stream);
        let name = format!("cuda_augment_{}", format!("{dtype:?}").to_lowercase());
        let bytes = read + out_bytes as u64;
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                event_time(&stream, &name, bytes, iters, || {
                    aug.launch(&stream, base, pp, dp, batch, (224, 224), op, AugmentKind::Plain).expect("augment launch");
                })
            })
        });
    }
    g.finish();

    let best = BEST.lock().expect("not poisoned");
    if let Some(&(_, copy)) = best.iter().find(|(n, _)| n == "cuda_copy_u8") {
        eprintln!("\n{} — device copy bandwidth {:.1} GB/s", gpu.info().name, copy / 1e9);
        for (name, bps) in best.iter() {
            eprintln!("  {name:<20} {:>8.1} GB/s  {:>5.1} % of copy", bps / 1e9, 100.0 * bps / copy);
        }
    }
}

criterion_group!(benches, cuda);
criterion_main!(benches);
