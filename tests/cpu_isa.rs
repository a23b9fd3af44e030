//! The CPU backend's augment on each instruction set it dispatches to: the AVX2 build of the
//! kernels' host source against the baseline build, bit for bit, over every recipe (plain
//! train, eval, rotation both ways, ColorJitter + RandomGrayscale, RandomErasing in each mode,
//! affine, the AutoAugment family, DeiT), every dtype and layout, EXIF orientations, odd and
//! tiny sizes and a region decode; and which ISA runs (`STOKE_CPU_ISA`, asserted when CI sets
//! `STOKE_EXPECT_CPU_ISA`).

use stoke::augment::host::{augment_isa, augment_on, pick_isa, Isa, Scratch, SrcImage};
use stoke::augment::params::draw;
use stoke::config::{DType, EraseMode, Layout, OptionNames, OutputSpec, PipelineOptions, Preset, RotateInterp};

/// SplitMix64: the test's own noise (an image with texture and flat parts).
fn image(w: i32, h: i32, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let r = next();
            for c in 0..3u64 {
                // smooth gradient + noise + a hard edge
                let g = (x * 255 / w.max(1) + y * 97 / h.max(1)) as u64 + c * 40;
                let edge = if x > w / 3 && y < h / 2 { 120 } else { 0 };
                v.push(((g + edge + (r >> (8 * c)) % 48) % 256) as u8);
            }
        }
    }
    v
}

fn recipes() -> Vec<(&'static str, PipelineOptions)> {
    let base = PipelineOptions { size: Some(56), ..PipelineOptions::default() };
    vec![
        ("train", base.clone()),
        ("eval", PipelineOptions { preset: Preset::Eval, ..base.clone() }),
        ("rotate bilinear + vflip", PipelineOptions { rotate: Some((-30.0, 30.0)), vflip: Some(0.5), ..base.clone() }),
        ("rotate nearest", PipelineOptions { rotate: Some((-180.0, 180.0)), rotate_interp: Some(RotateInterp::Nearest), ..base.clone() }),
        ("jitter + grayscale", PipelineOptions { color_jitter: Some(vec![0.4, 0.4, 0.4, 0.1]), grayscale_prob: Some(0.3), ..base.clone() }),
        ("erase pixel x3", PipelineOptions { reprob: Some(0.9), remode: Some(EraseMode::Pixel), recount: Some(3), ..base.clone() }),
        ("erase rand", PipelineOptions { reprob: Some(0.9), remode: Some(EraseMode::Rand), ..base.clone() }),
        ("erase const", PipelineOptions { reprob: Some(0.9), remode: Some(EraseMode::Const), ..base.clone() }),
        (
            "affine",
            PipelineOptions {
                affine_degrees: Some(vec![-20.0, 20.0]),
                affine_translate: Some((0.1, 0.1)),
                affine_scale: Some((0.8, 1.2)),
                affine_shear: Some(vec![-10.0, 10.0]),
                ..base.clone()
            },
        ),
        ("autoaugment", PipelineOptions { aa: Some("original".into()), ..base.clone() }),
        ("trivialaugment", PipelineOptions { aa: Some("trivialaugment".into()), ..base.clone() }),
        ("deit", PipelineOptions { preset: Preset::Deit, ..base.clone() }),
        (
            "pillow blur + solarize",
            PipelineOptions { blur_prob: Some(0.8), blur_sigma: Some((0.1, 5.0)), solarize_prob: Some(0.5), ..base.clone() },
        ),
        (
            "gaussian blur k23 + jitter",
            PipelineOptions { blur_prob: Some(0.8), blur_kernel: Some(23), color_jitter: Some(vec![0.4]), ..base.clone() },
        ),
    ]
}

#[test]
fn the_avx2_augment_is_bit_identical_to_the_baseline_on_every_recipe_dtype_and_layout() {
    if !Isa::Avx2.available() {
        eprintln!("cpu_isa: this CPU has no AVX2; only the baseline runs here");
        return;
    }
    let sizes = [(97, 61, 1u32), (640, 480, 6), (33, 200, 3), (8, 9, 8), (300, 301, 1)];
    let mut compared = 0usize;
    for (name, opts) in recipes() {
        let c = opts.to_config("/tmp/x", OptionNames::Cli).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (si, &(w, h, orientation)) in sizes.iter().enumerate() {
            let rgb = image(w, h, si as u64 * 7 + 1);
            for sample in 0..6u64 {
                // stored size as decoded; the params take the stored size and the orientation
                let p = draw(&c.augment, 11, 2, sample * 31 + si as u64, w, h, orientation);
                for dtype in [DType::F32, DType::F16, DType::Bf16, DType::U8] {
                    for layout in [Layout::Nchw, Layout::Nhwc] {
                        let spec = OutputSpec { dtype, layout, ..OutputSpec::default() };
                        let bytes = 3 * (p.out_w * p.out_h) as usize * dtype.size();
                        let mut outs = [vec![0xA5u8; 2 * bytes], vec![0x5Au8; 2 * bytes]];
                        for (isa, out) in [Isa::Baseline, Isa::Avx2].into_iter().zip(outs.iter_mut()) {
                            augment_on(isa, SrcImage::full(&rgb, w, h), &p, &spec, out, 1, &mut Scratch::default())
                                .unwrap_or_else(|e| panic!("{name} {w}x{h}: {e}"));
                        }
                        let what = format!("{name}, {w}x{h} orientation {orientation}, sample {sample}, {dtype:?} {layout:?}");
                        assert!(outs[0][..bytes].iter().all(|&b| b == 0xA5), "{what}: sample 0 written");
                        if let Some(i) = (bytes..2 * bytes).find(|&i| outs[0][i] != outs[1][i]) {
                            panic!("{what}: byte {} of the sample differs: baseline {} avx2 {}", i - bytes, outs[0][i], outs[1][i]);
                        }
                        compared += 1;
                    }
                }
            }
        }
    }
    assert_eq!(compared, recipes().len() * 5 * 6 * 8);
}

/// A region decode (the crop's rows and columns only, with a padded stride) gives the same
/// bits on both ISAs as the whole image does.
#[test]
fn a_region_gives_the_same_bits_on_both_isas() {
    if !Isa::Avx2.available() {
        return;
    }
    let (w, h) = (400, 300);
    let rgb = image(w, h, 5);
    let c = PipelineOptions { size: Some(64), ..PipelineOptions::default() }.to_config("/tmp/x", OptionNames::Cli).unwrap();
    let spec = OutputSpec::default();
    for sample in 0..8 {
        let p = draw(&c.augment, 3, 0, sample, w, h, 1);
        let (x0, y0, rw, rh) = (p.crop_x, p.crop_y, p.crop_w, p.crop_h);
        let stride = rw as usize * 3 + 16;
        let mut region = vec![0u8; stride * rh as usize];
        for y in 0..rh as usize {
            let from = ((y0 as usize + y) * w as usize + x0 as usize) * 3;
            region[y * stride..y * stride + rw as usize * 3].copy_from_slice(&rgb[from..from + rw as usize * 3]);
        }
        let bytes = 3 * (p.out_w * p.out_h) as usize * 4;
        let mut whole = vec![0u8; bytes];
        augment_on(Isa::Baseline, SrcImage::full(&rgb, w, h), &p, &spec, &mut whole, 0, &mut Scratch::default()).unwrap();
        for isa in [Isa::Baseline, Isa::Avx2] {
            let mut out = vec![0u8; bytes];
            let src = SrcImage { rgb: &region, width: w, height: h, region: (x0, y0, rw, rh), row_stride: stride };
            augment_on(isa, src, &p, &spec, &mut out, 0, &mut Scratch::default()).unwrap();
            assert!(out == whole, "sample {sample}: the region on {isa:?} differs from the whole image");
        }
    }
}

#[test]
fn stoke_cpu_isa_picks_the_path_and_says_when_it_cannot() {
    assert_eq!(pick_isa(None, true), (Isa::Avx2, None));
    assert_eq!(pick_isa(Some("auto"), true), (Isa::Avx2, None));
    assert_eq!(pick_isa(None, false), (Isa::Baseline, None));
    assert_eq!(pick_isa(Some("baseline"), true), (Isa::Baseline, None));
    assert_eq!(pick_isa(Some("avx2"), true), (Isa::Avx2, None));
    let (isa, w) = pick_isa(Some("avx2"), false);
    assert_eq!(isa, Isa::Baseline);
    assert!(w.unwrap().contains("no AVX2"));
    let (isa, w) = pick_isa(Some("sse9"), true);
    assert_eq!(isa, Isa::Avx2);
    assert!(w.unwrap().contains("\"sse9\""));
    // The ISA this process runs, as CI asks for it (both ways).
    if let Ok(want) = std::env::var("STOKE_EXPECT_CPU_ISA") {
        assert_eq!(augment_isa().name(), want, "STOKE_CPU_ISA={:?}", std::env::var("STOKE_CPU_ISA"));
    }
    if !Isa::Avx2.available() {
        let p = draw(&stoke::config::AugmentSpec::eval(1), 0, 0, 0, 1, 1, 1);
        let e =
            augment_on(Isa::Avx2, SrcImage::full(&[0; 3], 1, 1), &p, &OutputSpec::default(), &mut [0u8; 12], 0, &mut Scratch::default());
        assert!(e.unwrap_err().contains("cannot run the avx2"));
    }
}
