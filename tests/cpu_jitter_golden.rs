//! ColorJitter's four steps and RandomGrayscale on the CPU backend against goldens made by
//! torchvision itself (`tests/golden/jitter/make.py`: `transforms.v2.functional`'s
//! `adjust_brightness/contrast/saturation/hue` and `rgb_to_grayscale` on the float32 image, as
//! `ColorJitter` and `RandomGrayscale` apply them to a float image): single steps at factors
//! 0, below 1, 1, above 1 and extrapolating to 1.9, hue shifts from −0.5 to 0.5, pairs in both
//! orders, all four steps in several orders, with and without grayscale, on three images (one
//! of them full of gray pixels, tied channels, clamped and near-black/near-white values).
//!
//! stoke runs each case with an identity geometry (whole-image crop, same-size resize, no
//! flip or rotation) and writes f32 NCHW with mean 0 and std 1, so each value is its 0..255
//! result ÷ 255, on torchvision's 0..1 scale; each value must be within [`bound`] of
//! torchvision's (a rounding budget: see there why the two differ at all). The tests also show
//! that the comparison would catch an error: another order of the same steps, a factor off by
//! [`NUDGE`], or a grayscale step added or dropped, each differs from the golden by more than
//! [`FAR`] times the bound.
//!
//! The GPU path's kernel code is checked against the CPU backend bit for bit for the same
//! steps in tests/gpu_kernel_host.rs.

mod recipe_common;
use recipe_common::identity;

use std::collections::BTreeMap;
use stoke::augment::host::{augment, Scratch, SrcImage};
use stoke::augment::params::{AugParams, ColorOp, ColorParams};
use stoke::backend::cpu::decode::{decode_rgb, DecodedImage};
use stoke::config::{DType, Layout, OutputSpec};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/jitter");

/// 2^-24, one ulp of an f32 in [0.5, 1): how far apart two f32 roundings of the same value
/// below 1 can land (each moves it by at most half of that).
const U: f64 = 1.0 / 16_777_216.0;

/// How many times its [`bound`] a wrong order, factor or grayscale must differ by.
const FAR: f64 = 20.0;

/// A factor error the comparison must see: this much added to one step's factor.
const NUDGE: f32 = 0.005;

/// The largest |stoke − torchvision| allowed for `case`, on the 0..1 scale.
///
/// Both evaluate the same formulas in f32 but not the same roundings: stoke works on the
/// 0..255 scale (x, x·f, the blends and the grayscale on 0..255 values; ÷ 255 into and × 255
/// out of hue's HSV, ÷ 255 at the store), torchvision on 0..1 (x · f32(1/255) once), and
/// torch's vectorized CPU kernels fuse `add(a, b, alpha=1 − f)` (in `_blend` and the
/// grayscale) into one FMA, where stoke rounds each product (it has no contraction, so that
/// its CPU and GPU results are the same bits). So each step may round differently by about
/// one ulp of its result, and passes on the difference it got, scaled by how much the step
/// can stretch a difference between its inputs. Carried as a budget `e`, in units of U:
/// - input: e = 1 (x ÷ 255 against x · f32(1/255));
/// - brightness f: e ← f·e + 2 (the product, the store's ÷ 255);
/// - saturation f: e ← (f + |1 − f|)·e + 4 (x·f and gray·(1 − f) stretch input differences
///   by up to f + |1 − f|, 2.8 at f = 1.9; the grayscale, the products and their sum round);
/// - contrast f: as saturation, + 1 for the mean: stoke sums 16.16 fixed-point grays, which
///   truncate by less than 2^-16 of a level (2^-16/255 < U), torch sums f32 grays;
/// - hue: e ← 3·e + 20. torchvision's HSV holds the hue as h/6 + 1 in [1, 2), quantized to
///   2^-23 = 2U, adds the shift, and multiplies by 6 into [0, 6), quantized to 2^-21 = 8U
///   above 4; the fraction within the sextant scales the chroma (max − min ≤ 1). An input one
///   ulp apart can flip either rounding, which moves an output channel by up to
///   (6·2 + 8)·U·chroma = 20U. The rotated channels are piecewise linear in the input with
///   coefficients summing to at most 3 in magnitude (max, min, and the mid channel plus the
///   shift times max − min). torchvision's own `adjust_hue` moves as much: fed x/255 instead
///   of x · f32(1/255) (one ulp apart at most), its output on in_0.png moves by up to 11.5U,
///   as stoke's single hue steps differ from it here;
/// - grayscale: e ← e + 3 (its weights sum to 0.9999; three products and two sums round).
///
/// This is an upper bound, not an estimate: the test prints how much of it each kind of
/// case used (all of it for the identity, which is exactly one rounding on each side; up to
/// about two thirds for single steps; less for the chains, where it adds up the worst case).
fn bound(case: &Case) -> f64 {
    let mut e = 1.0;
    for &(op, f) in &case.steps {
        let f = f as f64;
        e = match op {
            ColorOp::Brightness => f * e + 2.0,
            ColorOp::Saturation => (f + (1.0 - f).abs()) * e + 4.0,
            ColorOp::Contrast => (f + (1.0 - f).abs()) * e + 5.0,
            ColorOp::Hue => 3.0 * e + 20.0,
        };
    }
    if case.grayscale {
        e += 3.0;
    }
    e * U
}

fn png(name: &str) -> (Vec<u8>, i32, i32) {
    let bytes = std::fs::read(format!("{GOLDEN}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut out = DecodedImage::default();
    decode_rgb(&bytes, 1 << 24, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
    (out.rgb.clone(), out.width as i32, out.height as i32)
}

fn f32_file(name: &str) -> Vec<f32> {
    let bytes = std::fs::read(format!("{GOLDEN}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(bytes.len() % 4, 0, "{name}: not whole f32 values");
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// Parameters that leave a `w × h` image as it is (whole-image crop, same-size resize, no flip
/// or rotation), then run `color`.
fn identity_with(w: i32, h: i32, color: ColorParams) -> AugParams {
    AugParams { color, ..identity(w, h) }
}

fn run(rgb: &[u8], w: i32, h: i32, color: ColorParams, dtype: DType) -> Vec<u8> {
    let spec = OutputSpec { dtype, layout: Layout::Nchw, mean: [0.0; 3], std: [1.0; 3] };
    let size = if dtype == DType::U8 { 1 } else { 4 };
    let mut out = vec![0u8; 3 * (w * h) as usize * size];
    augment(SrcImage::full(rgb, w, h), &identity_with(w, h, color), &spec, &mut out, 0, &mut Scratch::default()).expect("augment");
    out
}

/// stoke's f32 NCHW output, mean 0 and std 1: the 0..255 result ÷ 255.
fn run_f32(rgb: &[u8], w: i32, h: i32, color: ColorParams) -> Vec<f32> {
    bytemuck::cast_slice::<u8, f32>(&run(rgb, w, h, color, DType::F32)).to_vec()
}

fn op(name: &str) -> ColorOp {
    match name {
        "brightness" => ColorOp::Brightness,
        "contrast" => ColorOp::Contrast,
        "saturation" => ColorOp::Saturation,
        "hue" => ColorOp::Hue,
        other => panic!("unknown step {other}"),
    }
}

/// One golden case: the steps in order with their factors, then grayscale or not.
#[derive(Clone, Debug)]
struct Case {
    steps: Vec<(ColorOp, f32)>,
    grayscale: bool,
}

impl Case {
    fn params(&self) -> ColorParams {
        let ops: Vec<ColorOp> = self.steps.iter().map(|s| s.0).collect();
        let mut c = ColorParams {
            order: ColorParams::pack(&ops),
            brightness: 1.0,
            contrast: 1.0,
            saturation: 1.0,
            hue: 0.0,
            grayscale: self.grayscale as u32,
        };
        for &(op, f) in &self.steps {
            match op {
                ColorOp::Brightness => c.brightness = f,
                ColorOp::Contrast => c.contrast = f,
                ColorOp::Saturation => c.saturation = f,
                ColorOp::Hue => c.hue = f,
            }
        }
        assert_eq!(c.ops(), ops, "each step once");
        c
    }

    /// What the worst difference is reported under.
    fn kind(&self) -> String {
        let base = match self.steps.len() {
            0 if self.grayscale => return "grayscale".into(),
            0 => return "identity".into(),
            1 => self.steps[0].0.name().to_string(),
            2 => "pair".into(),
            _ => format!("{} steps", self.steps.len()),
        };
        if self.grayscale {
            format!("{base} + grayscale")
        } else {
            base
        }
    }

    fn describe(&self) -> String {
        let mut s: Vec<String> = self.steps.iter().map(|(o, f)| format!("{} {f}", o.name())).collect();
        if self.grayscale {
            s.push("grayscale".into());
        }
        format!("[{}]", s.join(", "))
    }
}

/// An input image, its golden outputs (one per case, channel-major) and the cases.
struct Image {
    name: String,
    rgb: Vec<u8>,
    w: i32,
    h: i32,
    want: Vec<Vec<f32>>,
}

fn load() -> (Vec<Case>, Vec<Image>) {
    let table: serde_json::Value = serde_json::from_slice(&std::fs::read(format!("{GOLDEN}/cases.json")).unwrap()).unwrap();
    let cases: Vec<Case> = table["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            steps: c["steps"].as_array().unwrap().iter().map(|s| (op(s[0].as_str().unwrap()), s[1].as_f64().unwrap() as f32)).collect(),
            grayscale: c["grayscale"].as_bool().unwrap(),
        })
        .collect();
    let images = table["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|img| {
            let name = img["input"].as_str().unwrap().to_string();
            let (rgb, w, h) = png(&name);
            assert_eq!((w as u64, h as u64), (img["width"].as_u64().unwrap(), img["height"].as_u64().unwrap()), "{name}");
            let all = f32_file(img["output"].as_str().unwrap());
            let frame = 3 * (w * h) as usize;
            assert_eq!(all.len(), frame * cases.len(), "{name}: one 3×H×W frame per case");
            let want = all.chunks_exact(frame).map(<[f32]>::to_vec).collect();
            Image { name, rgb, w, h, want }
        })
        .collect();
    (cases, images)
}

/// The largest |a − b| and where it is.
fn worst(a: &[f32], b: &[f32]) -> (f64, usize) {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).abs()).enumerate().fold((0.0, 0), |m, (i, d)| if d > m.0 { (d, i) } else { m })
}

#[test]
fn identity_geometry_reproduces_the_input() {
    let (cases, images) = load();
    assert!(cases[0].steps.is_empty() && !cases[0].grayscale, "case 0 is torchvision's float image of the input");
    for img in &images {
        // uint8 out: the stored pixels exactly
        let u8_nchw = run(&img.rgb, img.w, img.h, ColorParams::default(), DType::U8);
        let n = (img.w * img.h) as usize;
        for (i, px) in img.rgb.chunks_exact(3).enumerate() {
            assert_eq!([u8_nchw[i], u8_nchw[n + i], u8_nchw[2 * n + i]], [px[0], px[1], px[2]], "{} pixel {i}", img.name);
        }
        // f32 out: x ÷ 255 against torchvision's x · (1/255), within one rounding
        let got = run_f32(&img.rgb, img.w, img.h, ColorParams::default());
        let (d, i) = worst(&got, &img.want[0]);
        assert!(d <= 6e-8, "{}: identity differs from to_dtype by {d:e} at {i}", img.name);
    }
}

#[test]
fn color_steps_match_torchvisions_own_output() {
    let (cases, images) = load();
    // kind → (worst difference, its share of the bound, where)
    let mut per_kind: BTreeMap<String, (f64, f64, String)> = BTreeMap::new();
    let mut failures = Vec::new();
    for img in &images {
        for (k, case) in cases.iter().enumerate() {
            let got = run_f32(&img.rgb, img.w, img.h, case.params());
            let (d, i) = worst(&got, &img.want[k]);
            let (n, c) = ((img.w * img.h) as usize, i / (img.w * img.h) as usize);
            let at = format!(
                "{} case {k} {} pixel {} channel {c}: stoke {} vs torchvision {}",
                img.name,
                case.describe(),
                i % n,
                got[i],
                img.want[k][i]
            );
            let e = per_kind.entry(case.kind()).or_insert((0.0, 0.0, String::new()));
            if d >= e.0 {
                e.0 = d;
                e.2 = at.clone();
            }
            e.1 = e.1.max(d / bound(case));
            if d > bound(case) {
                failures.push(format!("{at}: by {d:.3e}, bound {:.3e}", bound(case)));
            }
        }
    }
    eprintln!("worst |stoke − torchvision| on the 0..1 scale, and the largest share of its bound used:");
    for (kind, (d, share, at)) in &per_kind {
        eprintln!("{kind:>20}: {d:.2e} ({:>4.1} × 2^-24), {:>3.0} % of the bound; at {at}", d / U, 100.0 * share);
    }
    for kind in ["brightness", "contrast", "saturation", "hue", "grayscale", "pair", "4 steps", "4 steps + grayscale"] {
        assert!(per_kind.contains_key(kind), "no {kind} case");
    }
    assert!(failures.is_empty(), "{} cases differ from torchvision by more than their bound:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn a_slightly_wrong_factor_or_grayscale_is_far_outside_the_bound() {
    let (cases, images) = load();
    let (mut checked, mut least) = (0, f64::INFINITY);
    for img in &images {
        for (k, case) in cases.iter().enumerate() {
            let want = &img.want[k];
            let stoke = |c: &Case| run_f32(&img.rgb, img.w, img.h, c.params());
            let base = stoke(case);
            let far = |c: &Case, what: &str, least: &mut f64| {
                let d = worst(&stoke(c), want).0;
                *least = least.min(d / bound(case));
                assert!(d > FAR * bound(case), "{} case {k} {}: {what} differs by only {d:.3e}", img.name, case.describe());
            };
            // Skipped where the output hardly depends on the change (a later brightness 0; an
            // image already gray before a hue or grayscale step; saturation just before a
            // grayscale, which cancels it but for clamping): stoke's own output must first move
            // by more than 0.01 (2.5 levels) for a change of 0.25, 50 times the nudge.
            let moves = |c: &Case| worst(&stoke(c), &base).0 > 1e-2;
            let toggled = Case { grayscale: !case.grayscale, ..case.clone() };
            if moves(&toggled) {
                far(&toggled, "grayscale toggled", &mut least);
                checked += 1;
            }
            for s in 0..case.steps.len() {
                let moved = |delta: f32| {
                    let mut c = case.clone();
                    let (op, f) = c.steps[s];
                    let top = if op == ColorOp::Hue { 0.5 } else { f32::INFINITY };
                    c.steps[s].1 = if f + delta <= top { f + delta } else { f - delta };
                    c
                };
                if moves(&moved(0.25)) {
                    far(&moved(NUDGE), &format!("step {s} off by {NUDGE}"), &mut least);
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 150, "only {checked} changes checked");
    eprintln!("{checked} changed factors or grayscale: at least {least:.0} times their bound from the golden");
}

#[test]
fn another_order_of_the_same_steps_is_far_outside_the_bound() {
    // The goldens hold the same steps and factors in several orders (each pair both ways, the
    // four steps in six orders): torchvision's outputs for them differ, and stoke run in one
    // order must be far from torchvision's golden for every other.
    let (cases, images) = load();
    let key = |c: &Case| {
        let mut s: Vec<(u32, u32)> = c.steps.iter().map(|&(o, f)| (o as u32, f.to_bits())).collect();
        s.sort_unstable();
        (s, c.grayscale)
    };
    let (mut checked, mut least) = (0, f64::INFINITY);
    for img in &images {
        for (a, ca) in cases.iter().enumerate() {
            for (b, cb) in cases.iter().enumerate() {
                if a == b || ca.steps.len() < 2 || key(ca) != key(cb) {
                    continue;
                }
                let bound = bound(ca);
                let torchvision = worst(&img.want[a], &img.want[b]).0;
                let d = worst(&run_f32(&img.rgb, img.w, img.h, cb.params()), &img.want[a]).0;
                if torchvision <= FAR * bound {
                    // the orders agree on this image (brightness and contrast commute where
                    // nothing clamps, as on the dark in_2.png)
                    continue;
                }
                assert!(
                    d > FAR * bound,
                    "{} case {a} {}: stoke in the order {} differs by only {d:.3e}",
                    img.name,
                    ca.describe(),
                    cb.describe()
                );
                least = least.min(d / bound);
                checked += 1;
            }
        }
    }
    assert!(checked >= 50, "only {checked} orders checked");
    eprintln!("{checked} other orders: at least {least:.0} times their bound from the golden");
}
