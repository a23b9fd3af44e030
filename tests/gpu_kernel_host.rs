//! CI-side check of the GPU path's augment code (no GPU needed): `kernels/augment.cu`'s
//! per-pixel functions, compiled for the host (`kernels/host/gpu_augment_host.cpp`), fed the
//! way the CUDA backend feeds the kernels — decoded *regions* (crop-before-decode ROIs) packed
//! in one arena, per-sample descriptors with the orientation folded into byte steps, filter
//! tables laid out per batch — must give the CPU backend's output (`augment::host::augment`
//! on the whole decoded image) bit for bit, for every dtype, layout, orientation, filter,
//! flip and rotation mode.
//!
//! What this does not cover (needs a GPU): the device build itself, nvJPEG's pixels, the
//! launch geometry and the streams; see tests/gpu_pipeline.rs.

use stoke::augment::host::{augment, Scratch, SrcImage};
use stoke::augment::params::{draw, AugParams};
use stoke::backend::cuda::augment::{augment_on_host, AugmentKind, TableLayout};
use stoke::backend::cuda::decode::{decode_roi, ArenaCursor, Decoded, Route};
use stoke::config::{AugmentSpec, CropMode, DType, EraseMode, EraseSpec, Layout, OutputSpec};

/// A stored image with structure at every scale (gradients plus a hash), so a wrong tap,
/// weight or orientation changes the output.
fn image(w: u32, h: u32, seed: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let hsh = (x.wrapping_mul(73856093) ^ y.wrapping_mul(19349663) ^ seed.wrapping_mul(83492791)) >> 7;
            v.push(((x * 255) / w.max(1)) as u8 ^ (hsh & 0x1f) as u8);
            v.push(((y * 255) / h.max(1)) as u8 ^ ((hsh >> 5) & 0x1f) as u8);
            v.push((hsh >> 10) as u8);
        }
    }
    v
}

/// Copy region `(x, y, w, h)` of a stored `sw`-wide RGB image, rows packed.
fn region(rgb: &[u8], sw: u32, x: u32, y: u32, w: u32, h: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    for r in y..y + h {
        let at = ((r * sw + x) * 3) as usize;
        v.extend_from_slice(&rgb[at..at + (w * 3) as usize]);
    }
    v
}

fn specs() -> Vec<(&'static str, AugmentSpec)> {
    let mut v = vec![("train", AugmentSpec::train(48)), ("eval", AugmentSpec::eval(40))];
    let mut s = AugmentSpec::train(33);
    s.size = (33, 21);
    s.filter = stoke::config::Filter::Bicubic; // bicubic, antialiased
    s.vflip_p = 0.5;
    v.push(("bicubic-rect-vflip", s));
    let mut s = AugmentSpec::train(24);
    s.antialias = false;
    v.push(("bilinear-no-aa", s));
    let mut s = AugmentSpec::train(24);
    s.antialias = false;
    s.filter = stoke::config::Filter::Bicubic;
    v.push(("bicubic-no-aa", s));
    let mut s = AugmentSpec::train(30);
    s.rotate_deg = (-30.0, 30.0);
    s.rotate_interp = stoke::config::RotateInterp::Nearest;
    s.fill = [10.0, 200.0, 77.0];
    v.push(("rotate-nearest", s));
    let mut s = AugmentSpec::train(30);
    s.size = (30, 22);
    s.rotate_deg = (-45.0, 45.0);
    s.rotate_interp = stoke::config::RotateInterp::Bilinear;
    s.fill = [255.0, 0.0, 128.0];
    v.push(("rotate-bilinear-rect", s));
    let mut s = AugmentSpec::train(26);
    s.rotate_deg = (90.0, 90.0); // exact quarter turn on a square output
    v.push(("rotate-90", s));
    let mut s = AugmentSpec::train(26);
    s.crop = CropMode::Resize;
    s.rotate_deg = (180.0, 180.0);
    v.push(("resize-rotate-180", s));
    // The recipe steps (kernels/recipe_math.cuh): ColorJitter with hue, grayscale, erasing in
    // each mode, alone and with rotation, and the per-sample filter.
    let mut s = AugmentSpec::train(28);
    s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(0.4, 0.4, 0.4, 0.1).unwrap());
    s.grayscale_p = 0.3;
    v.push(("color-jitter-grayscale", s));
    for (name, mode) in [("erase-const", EraseMode::Const), ("erase-rand", EraseMode::Rand), ("erase-pixel", EraseMode::Pixel)] {
        let mut s = AugmentSpec::train(27);
        s.size = (27, 19);
        s.erasing = Some(EraseSpec::timm(0.9, mode, 3));
        v.push((name, s));
    }
    let mut s = AugmentSpec::train(25);
    s.rotate_deg = (-40.0, 40.0);
    s.rotate_interp = stoke::config::RotateInterp::Bilinear;
    s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(0.5, 0.8, 0.3, 0.5).unwrap());
    s.erasing = Some(EraseSpec::timm(1.0, EraseMode::Pixel, 2));
    s.random_filter = true;
    v.push(("rotate-jitter-erase-random-filter", s));
    // RandomAffine: the inverse matrix in the rotation stage.
    for (name, interp) in
        [("affine-nearest", stoke::config::RotateInterp::Nearest), ("affine-bilinear", stoke::config::RotateInterp::Bilinear)]
    {
        let mut s = AugmentSpec::train(31);
        s.size = (31, 23);
        s.affine = Some(stoke::config::AffineSpec {
            degrees: (-30.0, 30.0),
            translate: Some((0.2, 0.1)),
            scale: Some((0.8, 1.2)),
            shear: Some(((-10.0, 10.0), Some((-5.0, 5.0)))),
        });
        s.rotate_interp = interp;
        s.fill = [5.0, 99.0, 250.0];
        s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(0.3, 0.3, 0.3, 0.0).unwrap());
        v.push((name, s));
    }
    // AutoAugment-family ops (kernels/auto_math.cuh): every policy, with jitter (its contrast
    // mean over the ops' result), erasing and rotation around them, bilinear/bicubic/random.
    for (name, aa, filter, random) in [
        ("randaugment-inc1", "rand-m9-mstd0.5-inc1", stoke::config::Filter::Bicubic, false),
        ("randaugment-n4-p1", "rand-m7-n4-p1-mstd1", stoke::config::Filter::Bilinear, true),
        ("autoaugment-original", "original-mstd0.5", stoke::config::Filter::Bilinear, false),
        ("trivialaugment", "trivialaugment", stoke::config::Filter::Bicubic, true),
    ] {
        let mut s = AugmentSpec::train(29);
        s.size = (29, 23);
        s.filter = filter;
        s.random_filter = random;
        s.auto_augment = Some(stoke::augment::auto::AutoAugmentSpec::parse(aa, [0.485, 0.456, 0.406]).unwrap());
        if name == "randaugment-n4-p1" {
            s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(0.4, 0.4, 0.4, 0.1).unwrap());
            s.erasing = Some(EraseSpec::timm(0.5, EraseMode::Pixel, 2));
            s.rotate_deg = (-20.0, 20.0);
            s.rotate_interp = stoke::config::RotateInterp::Bilinear;
        }
        v.push((name, s));
    }
    // Blur and solarize (kernels/blur_math.cuh): torchvision's kernel and Pillow's boxes, with
    // jitter (contrast mean before the blur), AutoAugment ops, rotation and erasing around them.
    use stoke::augment::spec::{BlurSpec, SolarizeSpec};
    let mut s = AugmentSpec::train(27);
    s.size = (27, 19);
    s.blur = Some(BlurSpec { prob: 0.7, kernel: Some(9), sigma: (0.1, 2.0) });
    s.solarize = Some(SolarizeSpec { prob: 0.5, threshold: 128.0 });
    s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(0.4, 0.4, 0.2, 0.1).unwrap());
    s.grayscale_p = 0.2;
    v.push(("gaussian-blur-solarize-jitter", s));
    let mut s = AugmentSpec::train(26);
    s.blur = Some(BlurSpec { prob: 0.8, kernel: None, sigma: (0.1, 6.0) });
    s.solarize = Some(SolarizeSpec { prob: 0.3, threshold: 77.5 });
    s.rotate_deg = (-30.0, 30.0);
    s.rotate_interp = stoke::config::RotateInterp::Bilinear;
    s.erasing = Some(EraseSpec::timm(0.5, EraseMode::Pixel, 2));
    s.auto_augment = Some(stoke::augment::auto::AutoAugmentSpec::parse("rand-m9-mstd0.5-inc1", [0.485, 0.456, 0.406]).unwrap());
    v.push(("pil-blur-solarize-rotate-aa-erase", s));
    let mut s = AugmentSpec::train(24);
    s.solarize = Some(SolarizeSpec { prob: 1.0, threshold: 0.0 });
    v.push(("solarize-alone", s));
    v
}

/// A stored image of flat 8 × 8 tiles whose colours the HSV conversion treats apart: greys
/// (every channel equal), two channels equal at the top or the bottom (ties for the largest and
/// smallest channel), primaries, black, white and the 0/255 edges. Inside a tile a resize gives
/// the tile's colour exactly, so the ties reach the hue step as ties.
fn tiles(w: u32, h: u32, seed: u32) -> Vec<u8> {
    const C: [[u8; 3]; 16] = [
        [128, 128, 128],
        [0, 0, 0],
        [255, 255, 255],
        [200, 200, 50],
        [200, 50, 200],
        [50, 200, 200],
        [60, 60, 210],
        [60, 210, 60],
        [210, 60, 60],
        [255, 0, 0],
        [0, 255, 0],
        [0, 0, 255],
        [255, 255, 0],
        [0, 255, 255],
        [17, 16, 16],
        [1, 0, 1],
    ];
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            v.extend_from_slice(&C[((x / 8 + 3 * (y / 8) + seed) % 16) as usize]);
        }
    }
    v
}

fn check(name: &str, spec: &AugmentSpec, output: &OutputSpec, seed: u64) {
    check_on(name, spec, output, seed, image)
}

fn check_on(name: &str, spec: &AugmentSpec, output: &OutputSpec, seed: u64, image: fn(u32, u32, u32) -> Vec<u8>) {
    let batch = 7usize;
    let mut images = Vec::new();
    let mut params: Vec<AugParams> = Vec::new();
    for i in 0..batch {
        let k = seed as u32 * 31 + i as u32;
        let (sw, sh) = (17 + (k * 97) % 260, 13 + (k * 61) % 230);
        let orientation = 1 + (k % 8);
        images.push((sw, sh, image(sw, sh, k)));
        params.push(draw(spec, seed, 3, i as u64, sw as i32, sh as i32, orientation));
    }
    // GPU path: ROIs into one arena, descriptors, tables.
    let mut arena = vec![0u8; 1 << 22];
    let mut cursor = ArenaCursor::new(arena.len() as u64);
    let mut tables = TableLayout::default();
    let mut descs = Vec::new();
    for ((sw, sh, rgb), p) in images.iter().zip(&params) {
        let roi = decode_roi(p, *sw, *sh, 16);
        let offset = cursor.place(roi.w, roi.h).expect("arena large enough");
        let reg = region(rgb, *sw, roi.x, roi.y, roi.w, roi.h);
        arena[offset as usize..offset as usize + reg.len()].copy_from_slice(&reg);
        let d = Decoded { offset, roi, stored: (*sw, *sh), route: Route::Cuda };
        let mut desc = d.desc(p);
        tables.add(p, &mut desc);
        descs.push(desc);
    }
    let (ow, oh) = spec.size;
    let sample = 3 * (ow * oh) as usize * output.dtype.size();
    let mut gpu = vec![0xA5u8; batch * sample];
    // SAFETY: descriptors built from decode_roi regions over `arena`, tables from `tables`.
    unsafe { augment_on_host(&arena, &params, &descs, &tables, &mut gpu, output, AugmentKind::of(&params)) };

    // CPU backend on the whole stored image.
    let mut cpu = vec![0x5Au8; batch * sample];
    let mut scratch = Scratch::default();
    for (i, ((sw, sh, rgb), p)) in images.iter().zip(&params).enumerate() {
        augment(SrcImage::full(rgb, *sw as i32, *sh as i32), p, output, &mut cpu, i, &mut scratch)
            .unwrap_or_else(|e| panic!("{name}: cpu backend refused sample {i}: {e}"));
    }
    if gpu != cpu {
        let first = gpu.iter().zip(&cpu).position(|(a, b)| a != b).unwrap();
        let s = first / sample;
        panic!(
            "{name} {:?}/{:?} seed {seed}: GPU-path output differs from the CPU backend, first at byte {first} (sample {s}, params {:?}, roi {:?})",
            output.dtype,
            output.layout,
            params[s],
            decode_roi(&params[s], images[s].0, images[s].1, 16)
        );
    }
}

#[test]
fn gpu_kernel_code_matches_the_cpu_backend_bit_for_bit() {
    for (name, spec) in specs() {
        spec.validate().unwrap();
        for dtype in [DType::F32, DType::F16, DType::Bf16, DType::U8] {
            if dtype == DType::U8 && spec.erasing.is_some() {
                continue; // the config refuses erasing into unnormalized uint8
            }
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let output = OutputSpec { dtype, layout, ..OutputSpec::default() };
                for seed in 0..3 {
                    check(name, &spec, &output, seed);
                }
            }
        }
    }
}

/// The CPU backend's hue step (eight pixels a vector on AVX2) against the kernel's per-pixel
/// `stoke_adjust_hue` where the HSV conversion branches: greys, ties for the largest or the
/// smallest channel, primaries and the hue's wrap past 0 and 1 (hue factors up to ±0.5).
#[test]
fn the_hue_step_matches_on_greys_ties_and_primaries() {
    for (hue, others) in [(0.5, 0.0), (0.5, 0.6), (0.05, 0.3)] {
        let mut s = AugmentSpec::train(40);
        s.size = (40, 33);
        s.color_jitter = Some(stoke::config::ColorJitterSpec::from_values(others, others, others, hue).unwrap());
        let output = OutputSpec { dtype: DType::F32, layout: Layout::Nchw, ..OutputSpec::default() };
        for seed in 0..6 {
            check_on("hue-tiles", &s, &output, seed, tiles);
        }
    }
}

/// The check can fail: a descriptor one pixel off changes the output.
#[test]
fn a_shifted_descriptor_is_caught() {
    let spec = AugmentSpec::train(32);
    let output = OutputSpec::default();
    let (sw, sh) = (120u32, 90u32);
    let rgb = image(sw, sh, 5);
    let p = draw(&spec, 1, 0, 0, sw as i32, sh as i32, 1);
    let roi = decode_roi(&p, sw, sh, 16);
    let reg = region(&rgb, sw, roi.x, roi.y, roi.w, roi.h);
    let mut arena = vec![0u8; reg.len() + 4096];
    arena[..reg.len()].copy_from_slice(&reg);
    let d = Decoded { offset: 0, roi, stored: (sw, sh), route: Route::Hardware };
    let mut tables = TableLayout::default();
    let mut desc = d.desc(&p);
    tables.add(&p, &mut desc);
    desc.base += 3; // one pixel to the right
    let mut gpu = vec![0u8; 3 * 32 * 32 * 4];
    // SAFETY: shifted by one pixel inside a region with 4096 spare bytes after it.
    unsafe { augment_on_host(&arena, &[p], &[desc], &tables, &mut gpu, &output, AugmentKind::Plain) };
    let mut cpu = vec![0u8; gpu.len()];
    augment(SrcImage::full(&rgb, sw as i32, sh as i32), &p, &output, &mut cpu, 0, &mut Scratch::default()).unwrap();
    assert_ne!(gpu, cpu);
}

/// Large downscales: hundreds of taps per output pixel (the table stride grows with the
/// scale), every orientation, bilinear and bicubic.
#[test]
fn large_downscales_match_too() {
    let output = OutputSpec { dtype: DType::F32, layout: Layout::Nhwc, ..OutputSpec::default() };
    for filter in [stoke::config::Filter::Bilinear, stoke::config::Filter::Bicubic] {
        let mut spec = AugmentSpec::eval(12);
        spec.filter = filter;
        spec.size = (12, 9);
        spec.crop = CropMode::Resize;
        let (sw, sh) = (1500u32, 1100u32);
        let rgb = image(sw, sh, 77);
        let params: Vec<AugParams> = (1..=8).map(|o| draw(&spec, 0, 0, o as u64, sw as i32, sh as i32, o)).collect();
        let mut arena = vec![0u8; 9 * (sw * sh * 3) as usize];
        let mut cursor = ArenaCursor::new(arena.len() as u64);
        let mut tables = TableLayout::default();
        let mut descs = Vec::new();
        for p in &params {
            let roi = decode_roi(p, sw, sh, 16);
            let off = cursor.place(roi.w, roi.h).unwrap();
            let reg = region(&rgb, sw, roi.x, roi.y, roi.w, roi.h);
            arena[off as usize..off as usize + reg.len()].copy_from_slice(&reg);
            let mut d = Decoded { offset: off, roi, stored: (sw, sh), route: Route::Hardware }.desc(p);
            tables.add(p, &mut d);
            descs.push(d);
        }
        assert!(descs.iter().all(|d| d.ktaps_x > 150 && d.ktaps_y > 150), "{descs:?}");
        let sample = 3 * 12 * 9 * 4;
        let mut gpu = vec![0u8; params.len() * sample];
        // SAFETY: descriptors built from decode_roi regions over `arena`, tables from `tables`.
        unsafe { augment_on_host(&arena, &params, &descs, &tables, &mut gpu, &output, AugmentKind::Plain) };
        let mut cpu = vec![0u8; gpu.len()];
        let mut scratch = Scratch::default();
        for (i, p) in params.iter().enumerate() {
            augment(SrcImage::full(&rgb, sw as i32, sh as i32), p, &output, &mut cpu, i, &mut scratch).unwrap();
        }
        assert!(gpu == cpu, "filter {filter:?}: GPU-path output differs from the CPU backend");
    }
}
