//! GPU vs CPU backend on the same decoded pixels: the fused augment kernel on the device,
//! fed decoded regions packed in a device arena exactly as the CUDA backend feeds it, against
//! the CPU backend's output for the whole decoded image. Geometry must agree within 1 LSB
//! of the output dtype (GEOMETRY_ULPS); by construction (same f32 operations, no FMA) it is
//! expected to be bit-exact, and the test prints the largest difference seen.
//!
//! Needs a GPU: skips with a printed reason without one, fails with `STOKE_REQUIRE_GPU=1`.

mod gpu_common;

use cudarc::driver::DevicePtr;
use gpu_common::{gpu_or_skip, max_ulps};
use stoke::augment::host::{augment, Scratch, SrcImage};
use stoke::augment::params::{draw, AugParams};
use stoke::backend::cuda::augment::{AugmentKind, Augmenter, TableLayout, TablePlan};
use stoke::backend::cuda::decode::{decode_roi, ArenaCursor, Decoded, Route};
use stoke::config::{AugmentSpec, DType, Layout, OutputSpec};

/// docs/CONTRACTS.md, contract 2: geometry ops agree within 1 LSB of the output dtype.
const GEOMETRY_ULPS: i64 = 1;

fn image(w: u32, h: u32, seed: u32) -> Vec<u8> {
    (0..w * h * 3)
        .map(|i| ((i / 3 % w) * 7 + (i / 3 / w) * 13 + (i % 3) * 50 + seed * 11) as u8 ^ ((i * 2654435761u32) >> 27) as u8)
        .collect()
}

fn region(rgb: &[u8], sw: u32, x: u32, y: u32, w: u32, h: u32) -> Vec<u8> {
    (y..y + h).flat_map(|r| rgb[((r * sw + x) * 3) as usize..((r * sw + x + w) * 3) as usize].iter().copied()).collect()
}

#[test]
fn device_augment_matches_the_cpu_backend() {
    let Some(gpu) = gpu_or_skip("gpu_geometry") else { return };
    let stream = gpu.stream().clone();
    let mut specs = vec![AugmentSpec::train(64), AugmentSpec::eval(56)];
    let mut s = AugmentSpec::train(40);
    s.size = (40, 28);
    s.filter = stoke::config::Filter::Bicubic;
    s.vflip_p = 0.5;
    specs.push(s);
    let mut s = AugmentSpec::train(36);
    s.rotate_deg = (-40.0, 40.0);
    s.rotate_interp = stoke::config::RotateInterp::Bilinear;
    s.fill = [0.0, 128.0, 255.0];
    specs.push(s);
    let mut s = AugmentSpec::train(36);
    s.rotate_deg = (-40.0, 40.0);
    s.rotate_interp = stoke::config::RotateInterp::Nearest;
    specs.push(s);
    // The recipe kernels: stoke_recipe_stats (contrast mean by integer atomics) and
    // stoke_augment_recipe (color steps, grayscale, erasing in each mode), with rotation.
    for mode in [stoke::config::EraseMode::Const, stoke::config::EraseMode::Rand, stoke::config::EraseMode::Pixel] {
        let mut s = AugmentSpec::train(44);
        s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(0.4, 0.4, 0.4, 0.2).unwrap());
        s.grayscale_p = 0.2;
        s.erasing = Some(stoke::config::EraseSpec::timm(0.8, mode, 3));
        s.rotate_deg = (-20.0, 20.0);
        s.random_filter = true;
        specs.push(s);
    }
    // RandomAffine through the rotation stage.
    let mut s = AugmentSpec::train(40);
    s.affine = Some(stoke::config::AffineSpec {
        degrees: (-30.0, 30.0),
        translate: Some((0.1, 0.1)),
        scale: Some((0.8, 1.2)),
        shear: Some(((-10.0, 10.0), Some((-10.0, 10.0)))),
    });
    s.rotate_interp = stoke::config::RotateInterp::Bilinear;
    specs.push(s);
    // The AutoAugment kernels (stoke_auto_base/hist/tables/step) under each policy, the
    // second with jitter and erasing after the ops.
    for aa in ["rand-m9-mstd0.5-inc1", "rand-m7-n4-p1", "original", "trivialaugment"] {
        let mut s = AugmentSpec::train(38);
        s.filter = stoke::config::Filter::Bicubic;
        s.auto_augment = Some(stoke::augment::auto::AutoAugmentSpec::parse(aa, [0.485, 0.456, 0.406]).unwrap());
        if aa == "rand-m7-n4-p1" {
            s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(0.4, 0.4, 0.4, 0.1).unwrap());
            s.erasing = Some(stoke::config::EraseSpec::timm(0.5, stoke::config::EraseMode::Pixel, 1));
        }
        specs.push(s);
    }
    // The blur kernels (stoke_blur_base/weights/pass) in both forms, with solarize, jitter (its
    // contrast mean before the blur), AutoAugment ops and erasing around them; a batch where
    // only some samples blur.
    use stoke::augment::spec::{BlurSpec, SolarizeSpec};
    for (kernel, prob) in [(Some(9), 0.6), (None, 0.6), (Some(23), 1.0)] {
        let mut s = AugmentSpec::train(42);
        s.size = (42, 30);
        s.blur = Some(BlurSpec { prob, kernel, sigma: (0.1, 4.0) });
        s.solarize = Some(SolarizeSpec { prob: 0.5, threshold: 128.0 });
        s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(0.4, 0.4, 0.2, 0.1).unwrap());
        s.grayscale_p = 0.2;
        if kernel.is_none() {
            s.auto_augment = Some(stoke::augment::auto::AutoAugmentSpec::parse("rand-m9-mstd0.5-inc1", [0.485, 0.456, 0.406]).unwrap());
            s.erasing = Some(stoke::config::EraseSpec::timm(0.5, stoke::config::EraseMode::Pixel, 1));
            s.rotate_deg = (-20.0, 20.0);
        }
        specs.push(s);
    }
    let mut worst = 0;
    for spec in &specs {
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let output = OutputSpec { dtype, layout, ..OutputSpec::default() };
                let batch = 9usize;
                let mut imgs = Vec::new();
                let mut params: Vec<AugParams> = Vec::new();
                for i in 0..batch as u32 {
                    let (sw, sh) = (40 + (i * 89) % 400, 30 + (i * 53) % 300);
                    imgs.push((sw, sh, image(sw, sh, i)));
                    params.push(draw(spec, 7, 1, i as u64, sw as i32, sh as i32, 1 + i % 8));
                }
                let mut arena = vec![0u8; 8 << 20];
                let mut cursor = ArenaCursor::new(arena.len() as u64);
                let mut tables = TableLayout::default();
                let mut descs = Vec::new();
                for ((sw, sh, rgb), p) in imgs.iter().zip(&params) {
                    let roi = decode_roi(p, *sw, *sh, 16);
                    let off = cursor.place(roi.w, roi.h).unwrap();
                    let reg = region(rgb, *sw, roi.x, roi.y, roi.w, roi.h);
                    arena[off as usize..off as usize + reg.len()].copy_from_slice(&reg);
                    let mut d = Decoded { offset: off, roi, stored: (*sw, *sh), route: Route::Hardware }.desc(p);
                    tables.add(p, &mut d);
                    descs.push(d);
                }
                let plan = TablePlan { spans: tables.spans, weights: tables.weights, k_max: u32::MAX, batch, pixels: 0 };
                let aug = Augmenter::new(&gpu, &stream, plan, &output).unwrap();
                let (ow, oh) = spec.size;
                let sample = 3 * (ow * oh) as usize * dtype.size();
                let d_arena = stream.clone_htod(&arena).unwrap();
                let d_params = stream.clone_htod(bytemuck::cast_slice::<AugParams, u8>(&params)).unwrap();
                let d_descs = stream.clone_htod(bytemuck::cast_slice::<_, u8>(&descs)).unwrap();
                let d_out = stream.alloc_zeros::<u8>(batch * sample).unwrap();
                let kind = AugmentKind::of(&params);
                {
                    let (a, _a) = d_arena.device_ptr(&stream);
                    let (pp, _p) = d_params.device_ptr(&stream);
                    let (dd, _d) = d_descs.device_ptr(&stream);
                    let (o, _o) = d_out.device_ptr(&stream);
                    aug.launch(&stream, a, pp, dd, batch, (ow, oh), o, kind).unwrap();
                }
                let got = stream.clone_dtoh(&d_out).unwrap();
                let mut want = vec![0u8; batch * sample];
                let mut scratch = Scratch::default();
                for (i, ((sw, sh, rgb), p)) in imgs.iter().zip(&params).enumerate() {
                    augment(SrcImage::full(rgb, *sw as i32, *sh as i32), p, &output, &mut want, i, &mut scratch).unwrap();
                }
                let (d, at) = max_ulps(&got, &want, dtype);
                worst = worst.max(d);
                assert!(d <= GEOMETRY_ULPS, "{spec:?} {dtype:?} {layout:?}: {d} ulps at element {at}");
            }
        }
    }
    eprintln!("largest GPU vs CPU difference: {worst} ulp(s)");
}
