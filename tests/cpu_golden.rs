//! Golden tests: the CPU path against Pillow + numpy outputs for fixed parameters
//! (tests/golden/golden.json, written by `python3 scripts/golden.py fixtures --out tests/golden`).
//! The fixture picture is built here from the same formula as the script's.

use serde_json::Value;
use stoke::augment::host::{self, Scratch, SrcImage};
use stoke::augment::AugParams;
use stoke::config::{DType, Layout, OutputSpec, IMAGENET_MEAN, IMAGENET_STD};

/// Pillow's antialiased bilinear resize works in two integer passes: 22-bit fixed-point
/// weights, each pass rounded to uint8. stoke keeps f32 from the first tap to the output, so
/// it can differ by the two roundings (≤ 0.5 each) plus the fixed-point weight error.
const RESIZE_BILINEAR_TOL: f32 = 1.0 + 1e-3;
/// Bicubic: the same two roundings, plus Pillow clips its first pass to 0..255 where the
/// negative lobes overshoot, which a float path does only at the end. Measured 0.99 on these
/// fixtures; the margin covers the clipping near saturated edges.
const RESIZE_BICUBIC_TOL: f32 = 1.5;
/// Mean absolute difference allowed on resize cases (on the 0..255 scale), a bound on the
/// systematic part of the rounding differences above.
const RESIZE_MEAN_TOL: f64 = 0.5;
/// Nearest rotation: f32 grid vs Pillow's own affine arithmetic can round a source coordinate
/// that sits within float error of a pixel boundary differently; at most this fraction of the
/// pixels may differ (none does on these fixtures).
const ROTATE_NEAREST_MISMATCH: f64 = 0.01;
/// Normalize: `(x/255 − mean)/std` in f32, against numpy's float32 of the same expression.
const NORMALIZE_TOL: f32 = 1e-6;

fn fixture(w: usize, h: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            v.push((x * 255 / (w - 1)) as u8);
            v.push((y * 255 / (h - 1)) as u8);
            v.push(if (x / 5 + y / 3) % 2 == 0 { 220 } else { 40 });
        }
    }
    v
}

fn golden() -> Value {
    serde_json::from_str(include_str!("golden/golden.json")).expect("tests/golden/golden.json")
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn params(v: &Value) -> AugParams {
    let i = |k: &str| v[k].as_i64().unwrap() as i32;
    let u = |k: &str| v[k].as_u64().unwrap() as u32;
    let fill = v["fill"].as_array().unwrap();
    AugParams {
        src_w: i("src_w"),
        src_h: i("src_h"),
        crop_x: i("crop_x"),
        crop_y: i("crop_y"),
        crop_w: i("crop_w"),
        crop_h: i("crop_h"),
        resize_w: i("resize_w"),
        resize_h: i("resize_h"),
        win_x: i("win_x"),
        win_y: i("win_y"),
        out_w: i("out_w"),
        out_h: i("out_h"),
        orientation: u("orientation"),
        filter: u("filter"),
        antialias: u("antialias"),
        flip_h: u("flip_h"),
        flip_v: u("flip_v"),
        rot_interp: u("rot_interp"),
        angle_deg: v["angle_deg"].as_f64().unwrap() as f32,
        fill: [0, 1, 2].map(|c| fill[c].as_f64().unwrap() as f32),
        ..AugParams::default()
    }
}

/// Run a case: stored fixture → the output as f32 HWC with `spec`'s mean/std.
fn run_case(case: &Value, spec: &OutputSpec) -> (AugParams, Vec<u8>) {
    let p = params(&case["params"]);
    let (w, h) = (case["w"].as_u64().unwrap() as i32, case["h"].as_u64().unwrap() as i32);
    let rgb = fixture(w as usize, h as usize);
    let mut out = vec![0u8; (3 * p.out_w * p.out_h) as usize * spec.dtype.size()];
    host::augment(SrcImage::full(&rgb, w, h), &p, spec, &mut out, 0, &mut Scratch::default()).unwrap();
    (p, out)
}

fn nhwc(dtype: DType, mean: [f32; 3], std: [f32; 3]) -> OutputSpec {
    OutputSpec { dtype, layout: Layout::Nhwc, mean, std }
}

#[test]
fn every_golden_case_matches_pillow_within_its_tolerance() {
    let g = golden();
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let kind = case["kind"].as_str().unwrap();
        let want = hex(case["expected_hwc_u8"].as_str().unwrap());
        match kind {
            // Exact: the normalized output equals the normalization of Pillow's pixel, bit for bit.
            "exact" => {
                let spec = nhwc(DType::F32, IMAGENET_MEAN, IMAGENET_STD);
                let (_, out) = run_case(case, &spec);
                for (i, (o, &e)) in out.chunks_exact(4).zip(&want).enumerate() {
                    let got = f32::from_le_bytes(o.try_into().unwrap());
                    let c = i % 3;
                    let exp = (e as f32 / 255.0 - IMAGENET_MEAN[c]) / IMAGENET_STD[c];
                    assert_eq!(got.to_bits(), exp.to_bits(), "{name}: element {i}: {got} vs pillow {e} -> {exp}");
                }
            }
            "resize" | "rotate" => {
                // mean 0, std 1/255 leaves values on the 0..255 scale.
                let spec = nhwc(DType::F32, [0.0; 3], [1.0 / 255.0; 3]);
                let (p, out) = run_case(case, &spec);
                let tol = if p.filter == 1 { RESIZE_BICUBIC_TOL } else { RESIZE_BILINEAR_TOL };
                let (mut worst, mut sum, mut mismatched) = (0f32, 0f64, 0usize);
                for (o, &e) in out.chunks_exact(4).zip(&want) {
                    let d = (f32::from_le_bytes(o.try_into().unwrap()) - e as f32).abs();
                    worst = worst.max(d);
                    sum += d as f64;
                    mismatched += (d > 0.5) as usize;
                }
                let mean = sum / want.len() as f64;
                if kind == "resize" {
                    assert!(worst <= tol, "{name}: max abs diff {worst} > {tol}");
                    assert!(mean <= RESIZE_MEAN_TOL, "{name}: mean abs diff {mean}");
                } else {
                    let frac = mismatched as f64 / want.len() as f64;
                    assert!(frac <= ROTATE_NEAREST_MISMATCH, "{name}: {frac} of the values differ (max {worst})");
                }
                eprintln!("{name}: max {worst:.3}, mean {mean:.4}");
            }
            k => panic!("unknown case kind {k}"),
        }
    }
}

#[test]
fn normalize_and_casts_match_numpy() {
    let g = golden();
    let n = &g["normalize"];
    let case = g["cases"].as_array().unwrap().iter().find(|c| c["name"] == n["case"]).unwrap();
    let mean: Vec<f32> = n["mean"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let std: Vec<f32> = n["std"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    let (mean, std) = ([mean[0], mean[1], mean[2]], [std[0], std[1], std[2]]);
    let (_, f32out) = run_case(case, &nhwc(DType::F32, mean, std));
    let want = hex(n["f32_hwc"].as_str().unwrap());
    for (i, (a, b)) in f32out.chunks_exact(4).zip(want.chunks_exact(4)).enumerate() {
        let (a, b) = (f32::from_le_bytes(a.try_into().unwrap()), f32::from_le_bytes(b.try_into().unwrap()));
        assert!((a - b).abs() <= NORMALIZE_TOL, "element {i}: {a} vs numpy {b}");
    }
    // Round to nearest even, both half types: exact bits.
    for (dtype, key) in [(DType::F16, "f16_hwc"), (DType::Bf16, "bf16_hwc")] {
        let (_, out) = run_case(case, &nhwc(dtype, mean, std));
        assert_eq!(out, hex(n[key].as_str().unwrap()), "{key}");
    }
}
