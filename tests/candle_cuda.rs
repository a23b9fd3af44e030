//! Device batches as candle CUDA tensors (feature `candle-cuda`): `Batch::take_candle_cuda`.
//!
//! On a device (a GPU, or the simulated one: `scripts/with-sim-gpu.sh`, which also answers the
//! cuBLAS/cuRAND handle calls a candle device makes): on a candle device with a stream of its
//! own (`CudaDevice::new_with_stream`) the image tensor's storage is the batch's own memory
//! (same device address, no copy), on one that uses the per-thread default stream
//! (`Device::new_cuda`) a copy whose slot goes back at once, tensors dropped on another thread
//! (one with no current context) leave nothing held; with the values of the batch's own host copy
//! (`DeviceImages::copy_images_to_host`, a path independent of candle), labels and soft targets
//! equal, a held tensor is never overwritten by later batches, a taken batch counts against
//! `ring_depth` until its last tensor is dropped (`Error::HeldBatches` as for device batches),
//! and what is refused says why and leaves the batch usable. The stand-in's hazard checker
//! sees candle's reads and its stream-ordered free of the images: both must be ordered after
//! the producer's writes (the ready event candle's stream waits on), or the test binary fails.
#![cfg(feature = "candle-cuda")]

mod candle_common;
mod gpu_common;

use candle_core::{CudaDevice, DType as CDType, Device, Storage, Tensor};
use std::path::Path;
use stoke::config::{BackendKind, DType, Layout, MixupSpec, PipelineConfig};
use stoke::pipeline::Pipeline;
use stoke::Error;

use candle_common::dataset;

/// A candle device with a stream of its own: the zero-copy hand-over.
fn own_stream_device() -> Device {
    Device::Cuda(CudaDevice::new_with_stream(0).unwrap())
}

fn config(root: &Path, dtype: DType, layout: Layout) -> PipelineConfig {
    candle_common::config(root, dtype, layout, BackendKind::Cuda)
}

/// The tensor's values as little-endian bytes of its dtype, through candle's own copy to the host.
fn host_bytes(t: &Tensor) -> Vec<u8> {
    let t = t.to_device(&Device::Cpu).unwrap().flatten_all().unwrap();
    match t.dtype() {
        CDType::U8 => t.to_vec1::<u8>().unwrap(),
        CDType::F16 => t.to_vec1::<half::f16>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
        CDType::BF16 => t.to_vec1::<half::bf16>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
        CDType::F32 => t.to_vec1::<f32>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
        d => panic!("unexpected {d:?}"),
    }
}

/// Device address of a CUDA tensor's storage.
fn device_ptr(t: &Tensor) -> u64 {
    use cudarc::driver::DevicePtr;
    let (s, _) = t.storage_and_layout();
    let Storage::Cuda(c) = &*s else { panic!("a CUDA tensor") };
    let stream = c.device.cuda_stream();
    macro_rules! ptr {
        ($t:ty) => {{
            let sl = c.as_cuda_slice::<$t>().unwrap();
            let (p, _rec) = sl.device_ptr(&stream);
            p
        }};
    }
    match t.dtype() {
        CDType::U8 => ptr!(u8),
        CDType::F16 => ptr!(half::f16),
        CDType::BF16 => ptr!(half::bf16),
        CDType::F32 => ptr!(f32),
        d => panic!("unexpected {d:?}"),
    }
}

#[test]
fn device_tensors_are_the_batchs_own_memory_with_its_values() {
    let _serial = gpu_common::serial();
    let Some(_gpu) = gpu_common::gpu_or_skip("candle_cuda") else { return };
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let dev = own_stream_device();
    let cases = [
        (DType::U8, Layout::Nhwc, false, CDType::U8),
        (DType::F16, Layout::Nchw, false, CDType::F16),
        (DType::Bf16, Layout::Nhwc, false, CDType::BF16),
        (DType::F32, Layout::Nchw, true, CDType::F32),
    ];
    for (dtype, layout, mixup, want) in cases {
        let mut c = config(dir.path(), dtype, layout);
        if mixup {
            c.mixup = MixupSpec { mixup: 1.0, smoothing: 0.1, ..MixupSpec::default() };
        }
        let mut p = Pipeline::new(c).unwrap();
        p.start_epoch(0, 0);
        let mut steps = 0;
        while let Some(b) = p.next_batch() {
            let mut b = b.unwrap();
            let what = format!("{dtype:?} {layout:?} batch {}", b.step);
            let n = b.len();
            let (bytes, targets) = candle_common::own_host_copies(&b);
            let d = b.device().unwrap();
            let at = d.images_ptr();
            let labels = b.labels.clone();
            let (x, y) = b.take_candle_cuda(&dev).unwrap();
            assert_eq!((x.dims(), x.dtype()), (&b.shape[..], want), "{what}");
            assert!(x.device().is_cuda() && y.device().is_cuda(), "{what}");
            assert_eq!(device_ptr(&x), at, "{what}: the tensor is the batch's own memory (no copy)");
            assert_eq!(host_bytes(&x), bytes, "{what}");
            if mixup {
                assert_eq!((y.dims(), y.dtype()), (&[n, b.num_classes][..], CDType::F32), "{what}");
                let got = y.to_device(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
                assert_eq!(got, targets, "{what}");
            } else {
                assert_eq!((y.dims(), y.dtype()), (&[n][..], CDType::I64), "{what}");
                assert_eq!(y.to_device(&Device::Cpu).unwrap().to_vec1::<i64>().unwrap(), labels, "{what}");
            }
            // The batch keeps its records, not its pixels or targets.
            assert!(b.device().is_none() && b.positions.len() == n, "{what}");
            let e = b.take_candle_cuda(&dev).unwrap_err().to_string();
            assert!(e.contains("already taken"), "{what}: {e}");
            p.recycle(b);
            steps += 1;
        }
        assert_eq!(steps, 3);
    }
}

#[test]
fn a_held_tensor_is_never_overwritten_and_counts_as_held_until_dropped() {
    let _serial = gpu_common::serial();
    let Some(_gpu) = gpu_common::gpu_or_skip("candle_cuda") else { return };
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let dev = own_stream_device();
    let mut c = config(dir.path(), DType::F32, Layout::Nchw);
    c.ring_depth = 2;
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(0, 0);
    // Two batches taken as tensors and held: the ring's two slots' worth.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut b = p.next_batch().unwrap().unwrap();
        let mut bytes = Vec::new();
        b.device().unwrap().copy_images_to_host(&mut bytes).unwrap();
        let (x, y) = b.take_candle_cuda(&dev).unwrap();
        p.recycle(b);
        held.push((bytes, x, y));
    }
    match p.next_batch() {
        Some(Err(Error::HeldBatches { held: 2, depth: 2 })) => {}
        other => panic!("two batches held as tensors with ring_depth 2: expected HeldBatches, got {other:?}"),
    }
    // Dropping one batch's tensors (the images tensor is what holds its memory) frees a place.
    let (_, x1, y1) = held.pop().unwrap();
    let view = x1.narrow(0, 1, 2).unwrap(); // a view shares the storage: still held
    drop((x1, y1));
    assert!(matches!(p.next_batch(), Some(Err(Error::HeldBatches { .. }))), "a view still holds the batch");
    drop(view);
    let mut made = 0;
    for epoch in 0..3u64 {
        if epoch > 0 {
            p.start_epoch(epoch, 0);
        }
        while let Some(b) = p.next_batch() {
            let mut b = b.unwrap();
            // Taken and dropped at once: its memory goes back to the ring's pool each time.
            drop(b.take_candle_cuda(&dev).unwrap());
            p.recycle(b);
            made += 1;
        }
    }
    assert_eq!(made, 1 + 3 + 3, "the rest of epoch 0 (3 batches: 8, 8, 6 samples) and two more epochs");
    let (then, x, _) = &held[0];
    assert_eq!(&host_bytes(x), then, "a held tensor changed while later batches were made");
}

#[test]
fn what_cannot_be_taken_is_refused_by_name_and_the_batch_stays_usable() {
    let _serial = gpu_common::serial();
    let Some(_gpu) = gpu_common::gpu_or_skip("candle_cuda") else { return };
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let dev = Device::new_cuda(0).unwrap();
    let mut p = Pipeline::new(config(dir.path(), DType::F16, Layout::Nchw)).unwrap();
    p.start_epoch(0, 0);
    let mut b = p.next_batch().unwrap().unwrap();
    let e = b.take_candle_cuda(&Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("not a candle CUDA device"), "{e}");
    let pools = b.device().unwrap().can_hand_over();
    // STOKE_SIM_MEMPOOLS=0 (CI runs this test that way too): a device without memory pools.
    assert_eq!(pools, std::env::var("STOKE_SIM_MEMPOOLS").as_deref() != Ok("0"));
    if pools {
        b.take_candle_cuda(&dev).unwrap();
    } else {
        let e = b.take_candle_cuda(&dev).unwrap_err().to_string();
        assert!(e.contains("no stream-ordered memory pools") && e.contains("to_candle"), "{e}");
        // Unchanged: still a device batch, and the copy route works.
        let (x, _) = b.to_candle(&dev).unwrap();
        assert_eq!(x.dims(), b.shape);
    }
    drop(b);
    // A host batch (the CPU backend) goes through take_candle.
    let mut c = config(dir.path(), DType::F16, Layout::Nchw);
    c.backend = BackendKind::Cpu;
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(0, 0);
    let mut b = p.next_batch().unwrap().unwrap();
    let e = b.take_candle_cuda(&dev).unwrap_err().to_string();
    assert!(e.contains("host batch") && e.contains("take_candle"), "{e}");
    assert!(b.host_bytes().is_some(), "the refused host batch keeps its pixels");
}

/// Takes every batch of `epochs` epochs as tensors on `dev` and drops them on a new thread (no
/// current context there): with `ring_depth` 2 a slot held for good would stop the pipeline
/// with `HeldBatches` within two batches. Returns (batches, whether the images were copies).
fn take_and_drop_elsewhere(dev: &Device, epochs: u64) -> (usize, bool) {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let mut c = config(dir.path(), DType::F16, Layout::Nchw);
    c.ring_depth = 2;
    let mut p = Pipeline::new(c).unwrap();
    let (mut made, mut copies) = (0, false);
    for epoch in 0..epochs {
        p.start_epoch(epoch, 0);
        while let Some(b) = p.next_batch() {
            let mut b = b.unwrap_or_else(|e| panic!("batch {made}: {e}"));
            let mut bytes = Vec::new();
            b.device().unwrap().copy_images_to_host(&mut bytes).unwrap();
            let at = b.device().unwrap().images_ptr();
            let (x, y) = b.take_candle_cuda(dev).unwrap();
            assert_eq!(host_bytes(&x), bytes, "batch {made}: the tensor's values");
            copies |= device_ptr(&x) != at;
            p.recycle(b);
            std::thread::spawn(move || drop((x, y))).join().unwrap();
            made += 1;
        }
    }
    (made, copies)
}

#[test]
fn per_thread_stream_tensors_are_copies_and_hold_no_slot() {
    let _serial = gpu_common::serial();
    let Some(_gpu) = gpu_common::gpu_or_skip("candle_cuda") else { return };
    // Device::new_cuda: candle on the per-thread default stream. A zero-copy hand-over would
    // free the slot on whichever thread's stream drops the tensor (unordered; with no context
    // there, never); the copy gives the slot back at once, so tensors held past ring_depth
    // batches stop nothing. (Dropping a per-thread-stream tensor on a thread with no context
    // fails in candle for any of its tensors, stoke's or not: not exercised here.)
    let dev = Device::new_cuda(0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let mut c = config(dir.path(), DType::F16, Layout::Nchw);
    c.ring_depth = 2;
    let mut p = Pipeline::new(c).unwrap();
    let mut held = Vec::new();
    for epoch in 0..2u64 {
        p.start_epoch(epoch, 0);
        while let Some(b) = p.next_batch() {
            let mut b = b.unwrap_or_else(|e| panic!("batch {}: {e}", held.len()));
            let mut bytes = Vec::new();
            b.device().unwrap().copy_images_to_host(&mut bytes).unwrap();
            let at = b.device().unwrap().images_ptr();
            let (x, y) = b.take_candle_cuda(&dev).unwrap();
            assert_ne!(device_ptr(&x), at, "a per-thread-stream device gets a copy");
            p.recycle(b);
            held.push((bytes, x, y));
        }
    }
    assert_eq!(held.len(), 2 * 3, "every batch of two epochs (8, 8, 6 samples), all held");
    for (i, (bytes, x, _)) in held.iter().enumerate() {
        assert_eq!(&host_bytes(x), bytes, "held batch {i} changed or differs from the batch");
    }
}

#[test]
fn own_stream_tensors_dropped_on_another_thread_leave_nothing_held() {
    let _serial = gpu_common::serial();
    let Some(_gpu) = gpu_common::gpu_or_skip("candle_cuda") else { return };
    let (made, copies) = take_and_drop_elsewhere(&own_stream_device(), 3);
    assert_eq!(made, 3 * 3, "every batch of three epochs (8, 8, 6 samples)");
    assert!(!copies, "a device with its own stream takes the batch's memory itself");
}

/// Several views per sample: `take_candle_cuda_views` gives one tensor per view, each a view
/// into the batch's own memory (every tensor's storage is the batch's images, no copy), with
/// the bytes at the view's place in the batch's own host copy.
#[test]
fn views_are_tensors_over_the_batchs_own_memory() {
    let _serial = gpu_common::serial();
    let Some(_gpu) = gpu_common::gpu_or_skip("candle_cuda") else { return };
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let dev = own_stream_device();
    let groups = r#"[{"count": 2, "size": 20, "scale": [0.4, 1.0]}, {"count": 3, "size": 8, "scale": [0.05, 0.4]}]"#;
    let o = stoke::config::PipelineOptions {
        views: Some(stoke::config::ViewOptions::parse_list(groups, stoke::config::OptionNames::Cli).unwrap()),
        ..Default::default()
    };
    let v = o.to_config(dir.path(), stoke::config::OptionNames::Cli).unwrap();
    let mut c = config(dir.path(), DType::F16, Layout::Nchw);
    (c.views, c.augment) = (v.views, v.augment);
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(0, 0);
    while let Some(b) = p.next_batch() {
        let mut b = b.unwrap();
        let (bytes, _) = candle_common::own_host_copies(&b);
        let at = b.device().unwrap().images_ptr();
        assert!(b.take_candle_cuda(&dev).unwrap_err().to_string().contains("take_candle_cuda_views"));
        let places = b.view_places();
        let n = b.len();
        let (views, _y) = b.take_candle_cuda_views(&dev).unwrap();
        assert_eq!(views.len(), 5);
        for (t, pl) in views.iter().zip(&places) {
            assert_eq!(t.dims(), &[n, 3, pl.height, pl.width]);
            assert_eq!(device_ptr(t), at, "a view of the batch's own memory");
            assert_eq!(host_bytes(t), bytes[pl.offset..pl.offset + n * pl.sample_bytes]);
        }
        drop(views);
        p.recycle(b);
    }
}
