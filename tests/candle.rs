//! Batches as candle tensors (feature `candle`): shape, dtype and every value equal to the
//! batch's (all dtypes and layouts), labels and soft targets, no copy when a CPU tensor takes
//! a host batch, a taken tensor untouched by the batches made after it, and the errors. On a
//! device (a GPU, or the simulated one: `scripts/with-sim-gpu.sh`), `to_candle` of a device
//! batch against the batch's own copies to the host.
#![cfg(feature = "candle")]

mod candle_common;
mod gpu_common;

use candle_core::{DType as CDType, Device, IndexOp, Storage, Tensor};
use std::path::Path;
use stoke::config::{BackendKind, DType, Layout, MixupSpec, PipelineConfig};
use stoke::pipeline::Pipeline;
use stoke::Batch;

use candle_common::dataset;

fn config(root: &Path, dtype: DType, layout: Layout) -> PipelineConfig {
    candle_common::config(root, dtype, layout, BackendKind::Cpu)
}

/// Every batch of epoch 0 (22 samples: 8, 8 and a short 6).
fn batches(c: PipelineConfig) -> Vec<Batch> {
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(0, 0);
    std::iter::from_fn(|| p.next_batch()).map(|b| b.unwrap()).collect()
}

/// The batch's bytes read as numbers, written out here (little-endian, per dtype).
fn naive_values(b: &Batch) -> Vec<f64> {
    let bytes = b.host_bytes().unwrap();
    match b.dtype {
        DType::U8 => bytes.iter().map(|&v| v as f64).collect(),
        DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
        DType::F16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
        DType::Bf16 => bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
    }
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(CDType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap()
}

/// Address of a CPU tensor's storage.
fn storage_ptr(t: &Tensor) -> usize {
    let (s, _) = t.storage_and_layout();
    let Storage::Cpu(c) = &*s else { panic!("a CPU tensor") };
    match t.dtype() {
        CDType::U8 => c.as_slice::<u8>().unwrap().as_ptr() as usize,
        CDType::F16 => c.as_slice::<half::f16>().unwrap().as_ptr() as usize,
        CDType::BF16 => c.as_slice::<half::bf16>().unwrap().as_ptr() as usize,
        CDType::F32 => c.as_slice::<f32>().unwrap().as_ptr() as usize,
        CDType::I64 => c.as_slice::<i64>().unwrap().as_ptr() as usize,
        d => panic!("unexpected {d:?}"),
    }
}

#[test]
fn tensors_have_the_batchs_shape_dtype_and_values_for_every_dtype_and_layout() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    for (dtype, want) in [(DType::U8, CDType::U8), (DType::F16, CDType::F16), (DType::Bf16, CDType::BF16), (DType::F32, CDType::F32)] {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let all = batches(config(dir.path(), dtype, layout));
            assert_eq!(all.iter().map(|b| b.len()).collect::<Vec<_>>(), [8, 8, 6]);
            for mut b in all {
                let n = b.len();
                let what = format!("{dtype:?} {layout:?} batch {}", b.step);
                let expect = naive_values(&b);
                let labels = b.labels.clone();
                // Pixel (i, c, y, x) through the batch's own accessor, to pin the axis order.
                let probes: Vec<_> = [(0, 0, 0, 0), (n - 1, 2, 11, 19), (n / 2, 1, 7, 3)]
                    .into_iter()
                    .map(|(i, c, y, x)| ((i, c, y, x), b.value(i, c, y, x).unwrap() as f64))
                    .collect();

                let (cx, cy) = b.to_candle(&Device::Cpu).unwrap();
                assert_eq!(values(&cx), expect, "{what}: to_candle");
                assert_eq!(cy.to_vec1::<i64>().unwrap(), labels, "{what}: to_candle labels");

                let before = b.host_bytes().unwrap().as_ptr() as usize;
                let (x, y) = b.take_candle().unwrap();
                let dims = match layout {
                    Layout::Nchw => [n, 3, 12, 20],
                    Layout::Nhwc => [n, 12, 20, 3],
                };
                assert_eq!(x.dims(), dims, "{what}");
                assert_eq!(x.dtype(), want, "{what}");
                assert_eq!(storage_ptr(&x), before, "{what}: the tensor took the batch's vector (no copy)");
                assert_eq!(values(&x), expect, "{what}");
                for ((i, c, yy, xx), v) in probes {
                    let t = match layout {
                        Layout::Nchw => x.i((i, c, yy, xx)),
                        Layout::Nhwc => x.i((i, yy, xx, c)),
                    };
                    assert_eq!(values(&t.unwrap()), [v], "{what}: pixel ({i}, {c}, {yy}, {xx})");
                }
                assert_eq!((y.dims(), y.dtype()), (&[n][..], CDType::I64), "{what}");
                assert_eq!(y.to_vec1::<i64>().unwrap(), labels, "{what}");
                // The batch keeps its records, not its pixels or labels.
                assert!(b.host_bytes().is_none() && b.labels.is_empty() && b.positions.len() == n, "{what}");
            }
        }
    }
}

#[test]
fn soft_targets_become_an_f32_tensor_of_classes_columns() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let mut c = config(dir.path(), DType::F32, Layout::Nchw);
    c.mixup = MixupSpec { mixup: 0.8, cutmix: 1.0, smoothing: 0.1, ..MixupSpec::default() };
    for mut b in batches(c) {
        let (n, k) = (b.len(), b.num_classes);
        assert_eq!(k, 3);
        let targets = b.targets.clone();
        assert_eq!(targets.len(), n * k);
        let (_, cy) = b.to_candle(&Device::Cpu).unwrap();
        let (_, y) = b.take_candle().unwrap();
        for t in [cy, y] {
            assert_eq!((t.dims(), t.dtype()), (&[n, k][..], CDType::F32));
            assert_eq!(t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), targets);
            // Each row is a distribution over the classes.
            for row in t.to_vec2::<f32>().unwrap() {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
            }
        }
    }
}

#[test]
fn a_taken_tensor_is_never_overwritten_by_later_batches() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let mut p = Pipeline::new(config(dir.path(), DType::F32, Layout::Nchw)).unwrap();
    let mut held = Vec::new();
    for epoch in 0..3 {
        p.start_epoch(epoch, 0);
        while let Some(b) = p.next_batch() {
            let mut b = b.unwrap();
            let (x, _) = b.take_candle().unwrap();
            held.push((values(&x), x));
            p.recycle(b); // its buffers go back to the pipeline: the tensor keeps the old ones
        }
    }
    assert_eq!(held.len(), 9);
    for (k, (then, x)) in held.iter().enumerate() {
        assert!(values(x) == *then, "tensor {k} changed after later batches were made");
    }
}

#[test]
fn taking_twice_or_copying_after_taking_is_an_error_that_says_so() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let mut b = batches(config(dir.path(), DType::U8, Layout::Nhwc)).remove(0);
    b.take_candle().unwrap();
    let e = b.take_candle().unwrap_err().to_string();
    assert!(e.contains("already taken"), "{e}");
    let e = b.to_candle(&Device::Cpu).unwrap_err().to_string();
    assert!(e.contains("taken by a tensor"), "{e}");
}

#[test]
fn a_device_batch_copies_to_tensors_equal_to_its_host_copies() {
    let _serial = gpu_common::serial();
    let Some(_gpu) = gpu_common::gpu_or_skip("candle") else { return };
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    for (dtype, layout, mixup) in [(DType::F16, Layout::Nchw, false), (DType::F32, Layout::Nhwc, true)] {
        let mut c = config(dir.path(), dtype, layout);
        c.backend = BackendKind::Cuda;
        if mixup {
            c.mixup = MixupSpec { mixup: 1.0, smoothing: 0.1, ..MixupSpec::default() };
        }
        // One batch at a time: the ring has `ring_depth` slots, so a device batch held across
        // the next `next_batch` counts against that bound.
        let mut p = Pipeline::new(c).unwrap();
        p.start_epoch(0, 0);
        while let Some(b) = p.next_batch() {
            let mut b = b.unwrap();
            let what = format!("{dtype:?} {layout:?} batch {}", b.step);
            let n = b.len();
            let (bytes, targets) = candle_common::own_host_copies(&b);
            let (x, y) = b.to_candle(&Device::Cpu).unwrap();
            assert_eq!(x.dims(), b.shape, "{what}");
            let e = b.take_candle().unwrap_err().to_string();
            assert!(e.contains("device batch"), "{what}: {e}");
            b.make_host().unwrap();
            assert_eq!(b.host_bytes().unwrap(), &bytes[..], "{what}");
            assert_eq!(values(&x), naive_values(&b), "{what}");
            if mixup {
                assert_eq!(y.dims(), [n, b.num_classes], "{what}");
                assert_eq!(y.flatten_all().unwrap().to_vec1::<f32>().unwrap(), targets, "{what}");
            } else {
                assert_eq!(y.to_vec1::<i64>().unwrap(), b.labels, "{what}");
            }
        }
    }
}

/// A batch of several views: `take_candle_views` / `to_candle_views` give one tensor per view,
/// each of its view's shape, holding the bytes at its place in the batch, sharing one storage
/// (no copy per view); the single-tensor calls refuse the batch by name.
#[test]
fn views_become_one_tensor_each_over_one_storage() {
    let dir = tempfile::tempdir().unwrap();
    candle_common::dataset(dir.path());
    let groups = r#"[{"count": 2, "size": 20, "scale": [0.4, 1.0]}, {"count": 3, "size": 8, "scale": [0.05, 0.4]}]"#;
    for (dtype, layout) in [(DType::F32, Layout::Nchw), (DType::F16, Layout::Nhwc)] {
        let mut c = config(dir.path(), dtype, layout);
        let o = stoke::config::PipelineOptions {
            views: Some(stoke::config::ViewOptions::parse_list(groups, stoke::config::OptionNames::Cli).unwrap()),
            ..Default::default()
        };
        let v = o.to_config(dir.path(), stoke::config::OptionNames::Cli).unwrap();
        (c.views, c.augment) = (v.views, v.augment);
        for mut b in batches(c) {
            let n = b.len();
            let e = b.to_candle(&Device::Cpu).unwrap_err().to_string();
            assert!(e.contains("to_candle: this batch has 5 views") && e.contains("to_candle_views"), "{e}");
            assert!(b.take_candle().unwrap_err().to_string().contains("take_candle_views"));
            let want = naive_values(&b);
            let places = b.view_places();
            let (copied, labels) = b.to_candle_views(&Device::Cpu).unwrap();
            let (views, taken) = b.take_candle_views().unwrap();
            assert_eq!((views.len(), copied.len()), (5, 5));
            assert_eq!(values(&taken), values(&labels));
            let base = storage_ptr(&views[0]);
            for ((t, u), p) in views.iter().zip(&copied).zip(&places) {
                let shape = if layout == Layout::Nchw { vec![n, 3, p.height, p.width] } else { vec![n, p.height, p.width, 3] };
                assert_eq!((t.dims().to_vec(), u.dims().to_vec()), (shape.clone(), shape));
                let (at, len) = (p.offset / dtype.size(), n * p.sample_bytes / dtype.size());
                assert_eq!(values(t), want[at..at + len]);
                assert_eq!(values(u), want[at..at + len]);
                assert_eq!(storage_ptr(t), base, "every view shares the batch's one storage");
            }
        }
    }
}
