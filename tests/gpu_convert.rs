//! The convert kernel on a real GPU against its host build (the same `convert.cuh` compiled
//! by the C++ compiler), bit for bit, for every dtype and layout, odd sizes, padded strides
//! and smaller images padded into the batch.
//!
//! Without a usable GPU the test prints why and passes, unless `STOKE_REQUIRE_GPU=1`, in
//! which case it fails (scripts/gpu-bundle.sh's run.sh sets it on the GPU machine).
//!
//! Not yet verified on a GPU: written on a machine without one.

use stoke::backend::cuda::convert::{convert_u8_batch, convert_u8_batch_host, ConvertShape, HostImage, Normalize};
use stoke::backend::cuda::device::Gpu;
use stoke::config::{DType, Layout, IMAGENET_MEAN, IMAGENET_STD};

fn gpu_or_skip() -> Option<std::sync::Arc<Gpu>> {
    match Gpu::open(0) {
        Ok(g) => Some(g),
        Err(e) if std::env::var("STOKE_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("STOKE_REQUIRE_GPU=1 but no usable GPU: {e}")
        }
        Err(e) => {
            eprintln!("skipped: no usable GPU ({e}); set STOKE_REQUIRE_GPU=1 to make this a failure");
            None
        }
    }
}

/// Deterministic bytes covering every value (xorshift32).
fn pixels(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn device_convert_matches_the_host_build_bit_for_bit() {
    let Some(gpu) = gpu_or_skip() else { return };
    eprintln!("device: {} (cc {:?})", gpu.info().name, gpu.info().compute_capability);
    // (width, height, stride): odd sizes, a padded stride, one smaller than the batch, 1x1,
    // and one wider than a 32-thread block row.
    let sizes = [(37u32, 29u32, 111usize), (36, 29, 128), (5, 3, 15), (1, 1, 3), (37, 29, 111)];
    let bufs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &(_, h, s))| pixels(s * h as usize, i as u32 + 7)).collect();
    let images: Vec<HostImage> =
        sizes.iter().zip(&bufs).map(|(&(w, h, stride), d)| HostImage { data: d, width: w, height: h, stride }).collect();
    let norms = [Normalize { mean: IMAGENET_MEAN, std: IMAGENET_STD }, Normalize { mean: [0.5, 0.25, 1.0], std: [0.5, 2.0, 0.003] }];
    for dtype in [DType::F32, DType::F16, DType::Bf16] {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for norm in &norms {
                let shape = ConvertShape { out_w: 37, out_h: 29, dtype, layout };
                let want = convert_u8_batch_host(&images, shape, norm).unwrap();
                let got = convert_u8_batch(&gpu, &images, shape, norm).unwrap_or_else(|e| panic!("{dtype:?} {layout:?}: {e}"));
                assert_eq!(got.len(), want.len());
                let first = got.iter().zip(&want).position(|(a, b)| a != b);
                assert!(first.is_none(), "{dtype:?} {layout:?} {norm:?}: GPU and host differ first at byte {first:?}");
            }
        }
    }
}

#[test]
fn kernels_load_and_say_where_they_came_from() {
    let Some(gpu) = gpu_or_skip() else { return };
    let k = gpu.kernels().expect("kernels load");
    eprintln!("kernels: {:?}", k.origin());
    k.function("stoke_convert_u8").expect("convert kernel present");
    let e = k.function("no_such_kernel").unwrap_err().to_string();
    assert!(e.contains("no_such_kernel"), "{e}");
}
