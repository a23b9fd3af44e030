//! The per-sample recipe steps (ColorJitter, RandomGrayscale, RandomErasing, random train
//! interpolation) on the CPU backend, against independent references:
//! - the color steps against a naive f64 implementation of torchvision's float formulas
//!   (written here from the functional ops' definitions, HSV in the textbook hexcone form),
//!   applied to stoke's own geometry-only output of drawn samples (order and factors as
//!   drawn, after a real crop and resize). torchvision's own output is the reference in
//!   tests/cpu_jitter_golden.rs: goldens made by its `transforms.v2.functional` ops
//!   (tests/golden/jitter/make.py) for single steps, pairs, the four steps in several orders
//!   and grayscale, matched within a per-case f32 rounding bound;
//! - erasing: the boxes hold exactly the mode's values, everything else is the un-erased output
//!   bit for bit, and the per-element normals are standard normal;
//! - the draws against torchvision's `ColorJitter.get_params` and timm's `RandomErasing._erase`
//!   sampling logic, reimplemented here over an independent generator (distribution checks);
//! - bad values rejected with the option named.
//!
//! The GPU path's kernel code is checked against the CPU backend bit for bit for the same
//! steps in tests/gpu_kernel_host.rs.

mod recipe_common;
use recipe_common::{ks, Xs};

use stoke::augment::host::{augment, Scratch, SrcImage};
use stoke::augment::params::{draw, AugParams, ColorOp, ColorParams, EraseParams, ERASE_MAX};
/// An erasing box `(x, y, w, h)`.
type Box4 = (i64, i64, i64, i64);

use stoke::config::{AugmentSpec, ColorJitterSpec, DType, EraseMode, EraseSpec, Layout, OptionNames, OutputSpec, PipelineOptions};

/// A stored photo-like image: smooth color fields with texture, so every step moves pixels.
fn image(w: i32, h: i32, seed: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let t = (x as u32).wrapping_mul(2654435761) ^ (y as u32).wrapping_mul(40503) ^ seed.wrapping_mul(97);
            let n = (t >> 13) & 31;
            v.push((40 + x * 170 / w.max(1)) as u8 ^ n as u8);
            v.push((200 - y * 150 / h.max(1)) as u8 ^ (n >> 1) as u8);
            v.push(((x + y) * 255 / (w + h).max(1)) as u8);
        }
    }
    v
}

/// The sample as f32 NCHW with mean 0 and std 1: each value is x/255 of the 0..255 result.
fn run(rgb: &[u8], w: i32, h: i32, p: &AugParams) -> Vec<f32> {
    let spec = OutputSpec { dtype: DType::F32, layout: Layout::Nchw, mean: [0.0; 3], std: [1.0; 3] };
    let mut out = vec![0u8; 3 * (p.out_w * p.out_h) as usize * 4];
    augment(SrcImage::full(rgb, w, h), p, &spec, &mut out, 0, &mut Scratch::default()).expect("augment");
    bytemuck::cast_slice::<u8, f32>(&out).to_vec()
}

fn gray(p: [f64; 3]) -> f64 {
    0.2989 * p[0] + 0.587 * p[1] + 0.114 * p[2]
}

/// Hue rotation of one 0..1 pixel by `shift` turns, hexcone model, f64.
fn hue_shift(p: [f64; 3], shift: f64) -> [f64; 3] {
    let (r, g, b) = (p[0], p[1], p[2]);
    let max = r.max(g).max(b);
    let min = r.min(g).min(b);
    let c = max - min;
    let h = if c == 0.0 {
        0.0
    } else if max == r {
        ((g - b) / c).rem_euclid(6.0)
    } else if max == g {
        (b - r) / c + 2.0
    } else {
        (r - g) / c + 4.0
    } / 6.0;
    let s = if max == 0.0 { 0.0 } else { c / max };
    let h = (h + shift).rem_euclid(1.0) * 6.0;
    let v = max;
    let chroma = v * s;
    let x = chroma * (1.0 - ((h % 2.0) - 1.0).abs());
    let m = v - chroma;
    let (r1, g1, b1) = match h as i32 {
        0 => (chroma, x, 0.0),
        1 => (x, chroma, 0.0),
        2 => (0.0, chroma, x),
        3 => (0.0, x, chroma),
        4 => (x, 0.0, chroma),
        _ => (chroma, 0.0, x),
    };
    [r1 + m, g1 + m, b1 + m]
}

/// torchvision's ColorJitter (drawn order) then RandomGrayscale on a float image, f64.
fn reference(img: &[[f64; 3]], c: &ColorParams) -> Vec<[f64; 3]> {
    let clamp = |v: f64| v.clamp(0.0, 1.0);
    let mut img = img.to_vec();
    for op in c.ops() {
        match op {
            ColorOp::Brightness => img.iter_mut().for_each(|p| p.iter_mut().for_each(|v| *v = clamp(*v * c.brightness as f64))),
            ColorOp::Contrast => {
                let f = c.contrast as f64;
                let m = img.iter().map(|p| gray(*p)).sum::<f64>() / img.len() as f64;
                img.iter_mut().for_each(|p| p.iter_mut().for_each(|v| *v = clamp(*v * f + m * (1.0 - f))));
            }
            ColorOp::Saturation => {
                let f = c.saturation as f64;
                for p in img.iter_mut() {
                    let g = gray(*p);
                    p.iter_mut().for_each(|v| *v = clamp(*v * f + g * (1.0 - f)));
                }
            }
            ColorOp::Hue => img.iter_mut().for_each(|p| *p = hue_shift(*p, c.hue as f64)),
        }
    }
    if c.grayscale != 0 {
        img.iter_mut().for_each(|p| *p = [gray(*p); 3]);
    }
    img
}

fn planar_to_pixels(v: &[f32], n: usize) -> Vec<[f64; 3]> {
    (0..n).map(|i| [v[i] as f64, v[n + i] as f64, v[2 * n + i] as f64]).collect()
}

fn jitter_spec() -> AugmentSpec {
    let mut s = AugmentSpec::train(40);
    s.color_jitter = Some(ColorJitterSpec::from_values(0.6, 0.6, 0.6, 0.5).unwrap());
    s.grayscale_p = 0.2;
    s
}

#[test]
fn color_steps_match_torchvision_float_semantics() {
    let spec = jitter_spec();
    let (w, h) = (97, 71);
    let mut seen_ops = [0usize; 5];
    let mut worst = 0f64;
    for sample in 0..60u64 {
        let rgb = image(w, h, sample as u32);
        let p = draw(&spec, 11, 0, sample, w, h, 1);
        for op in p.color.ops() {
            seen_ops[op as usize] += 1;
        }
        let geometry = AugParams { color: ColorParams::default(), ..p };
        let n = (p.out_w * p.out_h) as usize;
        let base = planar_to_pixels(&run(&rgb, w, h, &geometry), n);
        let want = reference(&base, &p.color);
        let got = planar_to_pixels(&run(&rgb, w, h, &p), n);
        for (i, (g, r)) in got.iter().zip(&want).enumerate() {
            for c in 0..3 {
                let d = (g[c] - r[c]).abs();
                worst = worst.max(d);
                // f32 on the 0..255 scale vs f64 on 0..1: a few f32 ulps of 255 per step, and the
                // reference starts from the f32 geometry output (x/255 rounded once).
                assert!(d < 2e-5, "sample {sample} pixel {i} channel {c}: stoke {} vs torchvision {} ({:?})", g[c], r[c], p.color);
            }
        }
    }
    // Every step ran, in more than one position.
    assert!(seen_ops[1..].iter().all(|&k| k > 20), "{seen_ops:?}");
    eprintln!("color steps: worst |stoke - reference| = {worst:e} on the 0..1 scale");
}

#[test]
fn the_reference_can_tell_a_wrong_order_apart() {
    // Swapping two drawn steps changes the output by far more than the tolerance above, so
    // the comparison would catch an order bug.
    let spec = jitter_spec();
    let (w, h) = (64, 48);
    let rgb = image(w, h, 5);
    let mut p = draw(&spec, 3, 0, 1, w, h, 1);
    p.color = ColorParams {
        order: ColorParams::pack(&[ColorOp::Contrast, ColorOp::Hue, ColorOp::Brightness]),
        brightness: 1.4,
        contrast: 0.5,
        hue: 0.3,
        ..ColorParams::default()
    };
    let n = (p.out_w * p.out_h) as usize;
    let base = planar_to_pixels(&run(&rgb, w, h, &AugParams { color: ColorParams::default(), ..p }), n);
    let mut swapped = p.color;
    swapped.order = ColorParams::pack(&[ColorOp::Brightness, ColorOp::Hue, ColorOp::Contrast]);
    let got = planar_to_pixels(&run(&rgb, w, h, &p), n);
    let other = reference(&base, &swapped);
    let max = got.iter().zip(&other).flat_map(|(a, b)| (0..3).map(move |c| (a[c] - b[c]).abs())).fold(0.0, f64::max);
    assert!(max > 0.05, "orders indistinguishable: {max}");
}

#[test]
fn erasing_writes_the_mode_values_in_the_boxes_and_nothing_else() {
    let (w, h) = (120, 90);
    let output = OutputSpec::default();
    let mut normals = Vec::new();
    for (mode, seed) in [(EraseMode::Const, 1u64), (EraseMode::Rand, 2), (EraseMode::Pixel, 3)] {
        let mut spec = AugmentSpec::train(36);
        spec.erasing = Some(EraseSpec::timm(1.0, mode, 3));
        let mut boxes_seen = 0;
        for sample in 0..40u64 {
            let rgb = image(w, h, sample as u32 + 7);
            let p = draw(&spec, seed, 0, sample, w, h, 1);
            assert!(p.erase.count >= 1, "reprob 1 erases every sample ({:?})", p.erase);
            boxes_seen += p.erase.count;
            let plain = AugParams { erase: EraseParams::default(), ..p };
            let (ow, oh) = (p.out_w as usize, p.out_h as usize);
            let mut a = vec![0u8; 3 * ow * oh * 4];
            let mut b = a.clone();
            augment(SrcImage::full(&rgb, w, h), &p, &output, &mut a, 0, &mut Scratch::default()).unwrap();
            augment(SrcImage::full(&rgb, w, h), &plain, &output, &mut b, 0, &mut Scratch::default()).unwrap();
            let (a, b) = (bytemuck::cast_slice::<u8, f32>(&a), bytemuck::cast_slice::<u8, f32>(&b));
            for y in 0..oh {
                for x in 0..ow {
                    let hit = (0..p.erase.count as usize).rev().find(|&k| {
                        let [bx, by, bw, bh] = p.erase.boxes[k];
                        (x as i32) >= bx && (x as i32) < bx + bw && (y as i32) >= by && (y as i32) < by + bh
                    });
                    for c in 0..3 {
                        let i = (c * oh + y) * ow + x;
                        match (hit, mode) {
                            (None, _) => assert_eq!(a[i].to_bits(), b[i].to_bits(), "outside the boxes at ({x}, {y})"),
                            (Some(_), EraseMode::Const) => assert_eq!(a[i], 0.0),
                            (Some(k), EraseMode::Rand) => assert_eq!(a[i], p.erase.colors[k][c]),
                            (Some(_), EraseMode::Pixel) => normals.push(a[i] as f64),
                        }
                    }
                }
            }
        }
        assert!(boxes_seen > 40, "{mode:?}: recount 3 gives more than one box on average ({boxes_seen})");
    }
    // The per-element values: standard normal (mean, variance, tails) and not repeating.
    let n = normals.len() as f64;
    assert!(n > 20_000.0, "{n}");
    let mean = normals.iter().sum::<f64>() / n;
    let var = normals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let tail = normals.iter().filter(|v| v.abs() > 1.959964).count() as f64 / n;
    assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.03 && (tail - 0.05).abs() < 0.006, "mean {mean} var {var} tail {tail}");
    let mut sorted: Vec<u64> = normals.iter().map(|v| v.to_bits()).collect();
    sorted.sort_unstable();
    sorted.dedup();
    assert!(sorted.len() as f64 > 0.99 * n, "per-element values repeat");
}

/// timm's `RandomErasing._erase` sampling (probability, count, 10 tries per box), as Python
/// runs it: returns the (w, h) of every box placed.
fn timm_erase(r: &mut Xs, prob: f64, max_count: i64, w: i64, h: i64) -> Vec<Box4> {
    let mut out = Vec::new();
    if r.uniform() > prob {
        return out;
    }
    let count = if max_count == 1 { 1 } else { r.randint(1, max_count) };
    let area = (w * h) as f64;
    let (la, lb) = (0.3f64.ln(), (1.0f64 / 0.3).ln());
    for _ in 0..count {
        for _ in 0..10 {
            let target = (0.02 + (1.0 / 3.0 - 0.02) * r.uniform()) * area / count as f64;
            let aspect = (la + (lb - la) * r.uniform()).exp();
            let bh = (target * aspect).sqrt().round_ties_even() as i64;
            let bw = (target / aspect).sqrt().round_ties_even() as i64;
            if bw < w && bh < h {
                let top = r.randint(0, h - bh);
                let left = r.randint(0, w - bw);
                out.push((left, top, bw, bh));
                break;
            }
        }
    }
    out
}

#[test]
fn erasing_draws_follow_timm() {
    let (w, h) = (224i64, 160i64);
    let n = 20_000;
    let mut spec = AugmentSpec::train(224);
    spec.size = (w as u32, h as u32);
    spec.erasing = Some(EraseSpec::timm(0.6, EraseMode::Pixel, 3));
    let mut ours: Vec<Vec<Box4>> = Vec::new();
    for s in 0..n {
        let p = draw(&spec, 9, 1, s, 500, 400, 1);
        ours.push(
            (0..p.erase.count as usize)
                .map(|k| p.erase.boxes[k])
                .map(|[x, y, bw, bh]| (x as i64, y as i64, bw as i64, bh as i64))
                .collect(),
        );
    }
    let mut r = Xs(0x9e37_79b9_7f4a_7c15);
    let theirs: Vec<_> = (0..n).map(|_| timm_erase(&mut r, 0.6, 3, w, h)).collect();
    // Probability of erasing and the count of boxes.
    let rate = |v: &[Vec<Box4>], k: usize| v.iter().filter(|b| b.len() == k).count() as f64 / n as f64;
    for k in 0..=3 {
        let (a, b) = (rate(&ours, k), rate(&theirs, k));
        assert!((a - b).abs() < 0.02, "boxes = {k}: stoke {a}, timm {b}");
    }
    // Box area, aspect and position distributions.
    let flat = |v: &[Vec<Box4>]| v.iter().flatten().copied().collect::<Vec<_>>();
    let (a, b) = (flat(&ours), flat(&theirs));
    let stat = |f: &dyn Fn(&Box4) -> f64| ks(a.iter().map(f).collect(), b.iter().map(f).collect());
    for (name, d) in [
        ("area", stat(&|b| (b.2 * b.3) as f64)),
        ("aspect", stat(&|b| b.3 as f64 / b.2.max(1) as f64)),
        ("left", stat(&|b| b.0 as f64)),
        ("top", stat(&|b| b.1 as f64)),
    ] {
        // ~19k boxes each: the 0.1% critical value is about 0.02.
        assert!(d < 0.02, "{name}: KS distance {d} between stoke's and timm's draws");
    }
    assert!(a.iter().all(|&(x, y, bw, bh)| x >= 0 && y >= 0 && bw < w && bh < h && x + bw <= w && y + bh <= h));
}

#[test]
fn color_draws_follow_torchvision() {
    let mut spec = AugmentSpec::train(32);
    spec.color_jitter = Some(ColorJitterSpec { prob: 0.8, ..ColorJitterSpec::from_values(0.4, 0.3, 0.2, 0.1).unwrap() });
    spec.grayscale_p = 0.25;
    let n = 48_000u64;
    let mut perms = std::collections::HashMap::new();
    let (mut runs, mut gray) = (0usize, 0usize);
    let mut factors: [Vec<f64>; 4] = Default::default();
    for s in 0..n {
        let c = draw(&spec, 5, 2, s, 300, 200, 1).color;
        gray += c.grayscale as usize;
        if c.order == 0 {
            continue;
        }
        runs += 1;
        *perms.entry(c.order).or_insert(0usize) += 1;
        for (k, v) in [c.brightness, c.contrast, c.saturation, c.hue].into_iter().enumerate() {
            factors[k].push(v as f64);
        }
    }
    let runs_f = runs as f64 / n as f64;
    assert!((runs_f - 0.8).abs() < 0.01, "jitter ran in {runs_f} of samples, prob 0.8");
    assert!((gray as f64 / n as f64 - 0.25).abs() < 0.01, "grayscale rate {}", gray as f64 / n as f64);
    // torch.randperm(4): all 24 orders, equally likely.
    assert_eq!(perms.len(), 24);
    let expect = runs as f64 / 24.0;
    for (order, k) in &perms {
        assert!((*k as f64 - expect).abs() < 5.0 * expect.sqrt(), "order {order:#x}: {k} of {runs}");
    }
    // Factors uniform on torchvision's ranges: [1−v, 1+v] and [−h, h].
    for (k, (lo, hi)) in [(0.6, 1.4), (0.7, 1.3), (0.8, 1.2), (-0.1, 0.1)].into_iter().enumerate() {
        let u: Vec<f64> = factors[k].iter().map(|v| (v - lo) / (hi - lo)).collect();
        assert!(u.iter().all(|x| (0.0..=1.0).contains(x)), "factor {k} outside its range");
        let mut r = Xs(77 + k as u64);
        let uniform: Vec<f64> = (0..u.len()).map(|_| r.uniform()).collect();
        let d = ks(u, uniform);
        assert!(d < 0.015, "factor {k}: KS distance {d} from uniform");
    }
}

#[test]
fn random_train_interpolation_draws_both_filters() {
    let mut spec = AugmentSpec::train(64);
    spec.random_filter = true;
    let bicubic = (0..4000u64).filter(|&s| draw(&spec, 1, 0, s, 320, 240, 1).filter == stoke::augment::params::FILTER_BICUBIC).count();
    assert!((bicubic as f64 / 4000.0 - 0.5).abs() < 0.03, "{bicubic}");
    // Turning it on moves no other draw.
    spec.random_filter = false;
    let a = draw(&spec, 1, 0, 17, 320, 240, 1);
    spec.random_filter = true;
    let b = draw(&spec, 1, 0, 17, 320, 240, 1);
    assert_eq!(AugParams { filter: a.filter, ..b }, a);
}

#[test]
fn recipe_options_reject_bad_values_naming_the_option() {
    let err = |o: PipelineOptions, names: OptionNames| o.to_config("d", names).unwrap_err().to_string();
    let o = || PipelineOptions::default();
    let cases: Vec<(PipelineOptions, &str)> = vec![
        (
            PipelineOptions { color_jitter: Some(vec![-0.4]), ..o() },
            "color_jitter: color jitter brightness must be a finite value >= 0, got -0.4",
        ),
        (PipelineOptions { color_jitter: Some(vec![0.4, 0.4, 0.4, 0.7]), ..o() }, "color jitter hue must be in [0, 0.5], got 0.7"),
        (PipelineOptions { color_jitter: Some(vec![0.4, 0.4]), ..o() }, "color jitter takes 1, 3 or 4 values, got 2"),
        (
            PipelineOptions { color_jitter: Some(vec![0.4]), color_jitter_prob: Some(1.5), ..o() },
            "color jitter probability must be in [0, 1], got 1.5",
        ),
        (PipelineOptions { color_jitter_prob: Some(0.5), ..o() }, "color_jitter_prob needs color_jitter"),
        (PipelineOptions { grayscale_prob: Some(2.0), ..o() }, "grayscale_prob must be in [0, 1], got 2"),
        (PipelineOptions { reprob: Some(1.25), ..o() }, "reprob must be in [0, 1], got 1.25"),
        (PipelineOptions { reprob: Some(0.25), recount: Some(5), ..o() }, "recount must be 1..=4, got 5"),
        (PipelineOptions { reprob: Some(0.25), recount: Some(0), ..o() }, "recount must be 1..=4, got 0"),
        (PipelineOptions { remode: Some(EraseMode::Rand), ..o() }, "remode and recount need reprob above 0"),
    ];
    for (opts, want) in cases {
        let e = err(opts, OptionNames::Python);
        assert!(e.contains(want), "{e:?} does not say {want:?}");
    }
    let e = err(PipelineOptions { color_jitter: Some(vec![-1.0]), ..o() }, OptionNames::Cli);
    assert!(e.contains("--color-jitter: "), "{e}");
    // Good values land in the spec with timm's meaning.
    let c = PipelineOptions { color_jitter: Some(vec![0.4]), reprob: Some(0.25), grayscale_prob: Some(0.1), ..o() }
        .to_config("d", OptionNames::Cli)
        .unwrap();
    let j = c.augment.color_jitter.unwrap();
    assert_eq!((j.brightness, j.contrast, j.saturation, j.hue), (Some((0.6, 1.4)), Some((0.6, 1.4)), Some((0.6, 1.4)), None));
    assert_eq!(c.augment.erasing, Some(EraseSpec::timm(0.25, EraseMode::Pixel, 1)));
    assert_eq!(c.augment.grayscale_p, 0.1);
    // A zero jitter is no jitter, as torchvision's None.
    let c = PipelineOptions { color_jitter: Some(vec![0.0]), ..o() }.to_config("d", OptionNames::Cli).unwrap();
    assert_eq!(c.augment.color_jitter, None);
    let e = err(PipelineOptions { reprob: Some(0.5), recount: Some(ERASE_MAX as u32 + 1), ..o() }, OptionNames::Cli);
    assert!(e.contains(&format!("--recount must be 1..={ERASE_MAX}")), "{e}");
}

#[test]
fn dump_names_every_drawn_recipe_parameter() {
    let mut spec = jitter_spec();
    spec.erasing = Some(EraseSpec::timm(1.0, EraseMode::Rand, 2));
    let p = (0..50).map(|s| draw(&spec, 4, 0, s, 200, 150, 1)).find(|p| p.color.ops().len() == 4).expect("a sample with all four steps");
    let v = serde_json::to_value(p).unwrap();
    let order = v["color"]["order"].as_array().unwrap();
    assert_eq!(order.len(), 4);
    for name in ["brightness", "contrast", "saturation", "hue"] {
        assert!(order.iter().any(|o| o == name), "{v}");
        assert!(v["color"][name].is_number(), "{v}");
    }
    assert!(v["color"]["grayscale"].is_boolean());
    assert_eq!(v["erase"]["mode"], "rand");
    assert_eq!(v["erase"]["boxes"].as_array().unwrap().len(), p.erase.count as usize);
    assert_eq!(v["erase"]["colors"].as_array().unwrap().len(), p.erase.count as usize);
}

#[test]
fn uint8_output_is_the_unnormalized_image_rounded() {
    // Geometry and color steps, then u8: round half to even of the 0..255 value, mean/std not
    // applied. The f32 output with mean 0 / std 1 is that value / 255.
    let mut spec = jitter_spec();
    spec.rotate_deg = (-15.0, 15.0);
    let (w, h) = (150, 110);
    let f32_spec = OutputSpec { dtype: DType::F32, layout: Layout::Nhwc, mean: [0.0; 3], std: [1.0; 3] };
    let mut rounded_up = 0;
    for sample in 0..20u64 {
        let rgb = image(w, h, sample as u32 + 40);
        let p = draw(&spec, 8, 0, sample, w, h, 1);
        let n = 3 * (p.out_w * p.out_h) as usize;
        let (mut a, mut b) = (vec![0u8; n * 4], vec![0u8; n]);
        augment(SrcImage::full(&rgb, w, h), &p, &f32_spec, &mut a, 0, &mut Scratch::default()).unwrap();
        // mean/std of the u8 spec are ignored: give them odd values to show it.
        let u8_spec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, mean: [0.3, 0.2, 0.1], std: [0.5, 0.6, 0.7] };
        augment(SrcImage::full(&rgb, w, h), &p, &u8_spec, &mut b, 0, &mut Scratch::default()).unwrap();
        for (i, (x, q)) in bytemuck::cast_slice::<u8, f32>(&a).iter().zip(&b).enumerate() {
            let v = *x as f64 * 255.0;
            let d = (*q as f64 - v).abs();
            assert!(d <= 0.5 + 1e-3, "sample {sample} element {i}: u8 {q} for {v}");
            if (v - v.floor() - 0.5).abs() > 1e-3 {
                assert_eq!(*q as f64, v.round(), "sample {sample} element {i}");
            }
            rounded_up += (*q as f64 > v) as usize;
        }
    }
    assert!(rounded_up > 1000, "values were rounded, not truncated ({rounded_up})");
}

#[test]
fn uint8_output_refuses_the_steps_that_need_normalized_values() {
    use stoke::config::PipelineConfig;
    let mut c = PipelineConfig::new("d");
    c.output.dtype = DType::U8;
    c.augment.erasing = Some(EraseSpec::timm(0.25, EraseMode::Pixel, 1));
    assert!(c.validate().unwrap_err().to_string().contains("random erasing (reprob) needs a float output dtype"));
    c.augment.erasing = None;
    c.mixup.mixup = 0.8;
    c.mixup.num_classes = 10;
    assert!(c.validate().unwrap_err().to_string().contains("mixup/cutmix need a float output dtype"));
    c.mixup.mixup = 0.0;
    c.validate().unwrap();
}

/// torchvision's `affine` on a float image, f64: output pixel → source through the inverse
/// matrix about the centre (pixel-centre grid), nearest (half to even) or bilinear with the
/// fill blended by the in-image weight (v2's mask), from the un-transformed window `src`
/// (planar 0..1, w × h).
fn affine_reference(src: &[f32], w: usize, h: usize, m: [f64; 6], bilinear: bool, fill: [f64; 3]) -> (Vec<f64>, Vec<bool>) {
    let (hx, hy) = ((w as f64 - 1.0) / 2.0, (h as f64 - 1.0) / 2.0);
    let px = |c: usize, x: i64, y: i64| src[(c * h + y as usize) * w + x as usize] as f64;
    let inside = |x: i64, y: i64| x >= 0 && y >= 0 && x < w as i64 && y < h as i64;
    let mut out = vec![0.0; 3 * w * h];
    let mut exact = vec![true; w * h];
    for y in 0..h {
        for x in 0..w {
            let (gx, gy) = (x as f64 - hx, y as f64 - hy);
            let fx = m[0] * gx + m[1] * gy + m[2] + hx;
            let fy = m[3] * gx + m[4] * gy + m[5] + hy;
            for c in 0..3 {
                let v = if bilinear {
                    let (x0, y0) = (fx.floor() as i64, fy.floor() as i64);
                    let (tx, ty) = (fx - x0 as f64, fy - y0 as f64);
                    let taps = [
                        (x0, y0, (1.0 - tx) * (1.0 - ty)),
                        (x0 + 1, y0, tx * (1.0 - ty)),
                        (x0, y0 + 1, (1.0 - tx) * ty),
                        (x0 + 1, y0 + 1, tx * ty),
                    ];
                    let (mut v, mut mask) = (0.0, 0.0);
                    for (xx, yy, wt) in taps {
                        if inside(xx, yy) {
                            v += wt * px(c, xx, yy);
                            mask += wt;
                        }
                    }
                    (v - fill[c]) * mask + fill[c]
                } else {
                    // Near a half-way point f32 and f64 may round to different neighbours.
                    let near_half = |f: f64| ((f - f.floor()) - 0.5).abs() < 1e-3;
                    if near_half(fx) || near_half(fy) {
                        exact[y * w + x] = false;
                    }
                    let (nx, ny) = (fx.round_ties_even() as i64, fy.round_ties_even() as i64);
                    if inside(nx, ny) {
                        px(c, nx, ny)
                    } else {
                        fill[c]
                    }
                };
                out[(c * h + y) * w + x] = v;
            }
        }
    }
    (out, exact)
}

#[test]
fn random_affine_matches_torchvision_affine() {
    let (w, h) = (140, 100);
    let mut worst = 0f64;
    for (bilinear, interp) in [(false, stoke::config::RotateInterp::Nearest), (true, stoke::config::RotateInterp::Bilinear)] {
        let mut spec = AugmentSpec::train(48);
        spec.size = (48, 36);
        spec.affine = Some(stoke::config::AffineSpec {
            degrees: (-45.0, 45.0),
            translate: Some((0.15, 0.2)),
            scale: Some((0.7, 1.3)),
            shear: Some(((-15.0, 15.0), Some((-8.0, 8.0)))),
        });
        spec.rotate_interp = interp;
        spec.fill = [30.0, 140.0, 220.0];
        let fill = spec.fill.map(|v| v as f64 / 255.0);
        let mut inexact = 0usize;
        for sample in 0..30u64 {
            let rgb = image(w, h, sample as u32 + 90);
            let p = draw(&spec, 12, 0, sample, w, h, 1);
            assert_eq!(p.affine, 1);
            // The draw as torchvision's get_params would give it, and its f64 matrix.
            let mut rng = stoke::augment::params::SampleRng::new(12, 0, sample, stoke::augment::params::STREAM_AFFINE);
            let d = spec.affine.as_ref().unwrap().draw(&mut rng, 48, 36);
            let m64 = f64_inverse_matrix(d.angle, d.translate, d.scale, d.shear);
            for k in 0..6 {
                assert!((m64[k] as f32 - p.affine_m[k]).abs() <= 1e-6, "matrix entry {k}: {:?} vs {m64:?}", p.affine_m);
            }
            let window = run(&rgb, w, h, &AugParams { affine: 0, affine_m: [0.0; 6], ..p });
            let got = run(&rgb, w, h, &p);
            let (want, exact) = affine_reference(&window, 48, 36, m64, bilinear, fill);
            for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                if !exact[i % (48 * 36)] {
                    inexact += 1;
                    continue;
                }
                let diff = (*g as f64 - r).abs();
                worst = worst.max(diff);
                // Bilinear: the f32 source coordinate is within ~1e-5 px of the f64 one.
                assert!(diff < 2e-4, "sample {sample} element {i}: stoke {g} vs torchvision {r} (bilinear {bilinear})");
            }
        }
        assert!(inexact < 30 * 48 * 36 * 3 / 100, "{inexact} elements at half-way points");
    }
    eprintln!("RandomAffine: worst |stoke - reference| = {worst:e} on the 0..1 scale");
}

/// torchvision's `_get_inverse_affine_matrix` with centre (0, 0), written out again in f64.
fn f64_inverse_matrix(angle: f64, t: (i64, i64), scale: f64, shear: (f64, f64)) -> [f64; 6] {
    let rot = angle.to_radians();
    let (sx, sy) = (shear.0.to_radians(), shear.1.to_radians());
    let a = (rot - sy).cos() / sy.cos();
    let b = -(rot - sy).cos() * sx.tan() / sy.cos() - rot.sin();
    let c = (rot - sy).sin() / sy.cos();
    let d = -(rot - sy).sin() * sx.tan() / sy.cos() + rot.cos();
    let m = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0];
    let (tx, ty) = (t.0 as f64, t.1 as f64);
    [m[0], m[1], m[0] * -tx + m[1] * -ty, m[3], m[4], m[3] * -tx + m[4] * -ty]
}

#[test]
fn random_affine_draws_follow_torchvision_get_params_and_bad_values_are_named() {
    let spec = stoke::config::AffineSpec {
        degrees: (-10.0, 20.0),
        translate: Some((0.1, 0.25)),
        scale: Some((0.9, 1.1)),
        shear: Some(((-5.0, 5.0), None)),
    };
    let (mut tx, mut ty) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for s in 0..5000u64 {
        let mut rng = stoke::augment::params::SampleRng::new(1, 0, s, stoke::augment::params::STREAM_AFFINE);
        let d = spec.draw(&mut rng, 200, 100);
        assert!((-10.0..20.0).contains(&d.angle) && (0.9..1.1).contains(&d.scale) && (-5.0..5.0).contains(&d.shear.0) && d.shear.1 == 0.0);
        // max_dx = 0.1 * 200 = 20, max_dy = 0.25 * 100 = 25; round() of a uniform in (-max, max).
        assert!(d.translate.0.abs() <= 20 && d.translate.1.abs() <= 25, "{d:?}");
        tx.insert(d.translate.0);
        ty.insert(d.translate.1);
    }
    assert_eq!((tx.len(), ty.len()), (41, 51), "every integer shift in range occurs");
    let err = |o: PipelineOptions| o.to_config("d", OptionNames::Cli).unwrap_err().to_string();
    let o = PipelineOptions::default;
    assert!(err(PipelineOptions { affine_degrees: Some(vec![1.0, 2.0, 3.0]), ..o() })
        .contains("--affine-degrees takes one value >= 0 or min,max"));
    assert!(err(PipelineOptions { affine_shear: Some(vec![1.0, 2.0, 3.0]), ..o() })
        .contains("--affine-shear takes one value >= 0, x0,x1 or x0,x1,y0,y1"));
    assert!(err(PipelineOptions { affine_scale: Some((0.0, 1.0)), ..o() }).contains("affine scale must satisfy 0 < min <= max"));
    assert!(err(PipelineOptions { affine_translate: Some((1.5, 0.0)), ..o() }).contains("affine translate must be fractions in [0, 1]"));
    assert!(err(PipelineOptions { affine_degrees: Some(vec![10.0]), rotate: Some((-5.0, 5.0)), ..o() })
        .contains("RandomAffine and a rotation range are both set"));
    assert!(err(PipelineOptions { affine_shear: Some(vec![-95.0, 0.0]), ..o() }).contains("affine shear must be within (-90, 90)"));
    let c = PipelineOptions { affine_degrees: Some(vec![15.0]), affine_shear: Some(vec![5.0]), ..o() }
        .to_config("d", OptionNames::Cli)
        .unwrap();
    let a = c.augment.affine.unwrap();
    assert_eq!((a.degrees, a.shear, a.translate, a.scale), ((-15.0, 15.0), Some(((-5.0, 5.0), None)), None, None));
}

#[test]
fn the_command_line_takes_the_recipe_flags_and_dump_names_every_draw() {
    let set = recipe_common::DumpRun::new(8);
    let out = &set.out;
    let run = |extra: &[&str]| set.dump(1, extra);
    let o = run(&[
        "--color-jitter",
        "0.4,0.4,0.4,0.1",
        "--grayscale-prob",
        "0.5",
        "--reprob",
        "1",
        "--remode",
        "rand",
        "--recount",
        "2",
        "--affine-degrees",
        "10",
        "--affine-shear",
        "5",
        "--affine-translate",
        "0.1,0.2",
        "--train-interpolation",
        "random",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    let mut lines = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let p = &v["params"];
        assert_eq!(p["color"]["order"].as_array().unwrap().len(), 4, "{p}");
        assert!(p["color"]["grayscale"].is_boolean() && p["color"]["hue"].as_f64().unwrap().abs() <= 0.1);
        assert_eq!(p["erase"]["mode"], "rand");
        assert!(!p["erase"]["boxes"].as_array().unwrap().is_empty());
        let a = &p["affine_draw"];
        assert!(a["angle"].as_f64().unwrap().abs() <= 10.0 && a["shear"][0].as_f64().unwrap().abs() <= 5.0, "{a}");
        assert!(a["translate"][0].as_i64().unwrap().abs() <= 2 && a["translate"][1].as_i64().unwrap().abs() <= 5, "{a}");
        lines += 1;
    }
    assert_eq!(lines, 4);
    // preview prints each tile's draws.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
        .arg("preview")
        .arg(&set.ds)
        .arg("--out")
        .arg(out.with_file_name("grid.png"))
        .args(["--count", "3", "--size", "24", "--backend", "cpu", "--color-jitter", "0.4", "--reprob", "1", "--affine-degrees", "10"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(text.lines().count(), 3, "{text}");
    for l in text.lines() {
        assert!(
            l.starts_with("tile ")
                && l.contains("crop ")
                && l.contains("brightness ")
                && l.contains("affine [")
                && l.contains("erase pixel "),
            "{l}"
        );
    }
    for (args, word) in [
        (&["--reprob", "0.5", "--remode", "noise"][..], "remode"),
        (&["--reprob", "0.5", "--recount", "9"][..], "--recount must be 1..=4"),
        (&["--color-jitter=-1"][..], "--color-jitter"),
        (&["--affine-scale", "1"][..], "--affine-scale takes 2"),
        (&["--affine-degrees", "10", "--rotate", "-5,5"][..], "RandomAffine and a rotation range"),
        (&["--dtype", "u8", "--reprob", "0.25"][..], "needs a float output dtype"),
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success() && err.contains(word), "{args:?}: {err}");
    }
}

#[test]
fn a_config_file_takes_the_recipe_under_timms_names() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("deit-ish.json");
    std::fs::write(
        &f,
        r#"{"batch_size": 8, "recipe": {"color_jitter": 0.3, "grayscale_prob": 0.1, "reprob": 0.25, "remode": "const", "recount": 2,
            "mixup": 0.8, "cutmix": 1.0, "mixup_mode": "pair", "smoothing": 0.1, "num_classes": 10,
            "train_interpolation": "bicubic", "affine_degrees": [-5, 5], "affine_shear": 3}}"#,
    )
    .unwrap();
    // The file is applied last: its recipe over the options (reprob 0.5 from the "command line").
    let o = PipelineOptions { config: Some(f.clone()), reprob: Some(0.5), ..PipelineOptions::default() };
    let c = o.to_config("d", OptionNames::Cli).unwrap();
    assert_eq!(c.batch_size, 8);
    assert_eq!(c.augment.erasing, Some(EraseSpec::timm(0.25, EraseMode::Const, 2)));
    assert_eq!(c.augment.color_jitter.as_ref().unwrap().brightness, Some((0.7, 1.3)));
    assert_eq!(c.augment.grayscale_p, 0.1);
    assert_eq!(c.augment.filter, stoke::config::Filter::Bicubic);
    let a = c.augment.affine.as_ref().unwrap();
    assert_eq!((a.degrees, a.shear), ((-5.0, 5.0), Some(((-3.0, 3.0), None))));
    assert_eq!((c.mixup.mixup, c.mixup.cutmix, c.mixup.mode, c.mixup.smoothing), (0.8, 1.0, stoke::config::MixupMode::Pair, 0.1));
    // Unknown or bad recipe names are named with the file.
    for (text, word) in [
        (r#"{"recipe": {"color_jitterr": 0.4}}"#, "unknown field `color_jitterr`"),
        (r#"{"recipe": {"train_interpolation": "lanczos"}}"#, "train_interpolation must be"),
        (r#"{"recipe": {"remode": "noise"}}"#, "recipe: unknown variant `noise`"),
        (r#"{"recipe": {"reprob": 0.5, "recount": 7}}"#, "recount must be 1..=4, got 7"),
        (r#"{"recipe": {"aa": "rand-m9-n9"}}"#, "recipe: aa \"rand-m9-n9\": n must be 1..=4"),
    ] {
        std::fs::write(&f, text).unwrap();
        let e = PipelineOptions { config: Some(f.clone()), ..PipelineOptions::default() }
            .to_config("d", OptionNames::Cli)
            .unwrap_err()
            .to_string();
        assert!(e.contains(word), "{text}: {e}");
        if text.contains("\"aa\"") {
            assert!(e.contains(&f.display().to_string()), "the file is named: {e}");
        }
    }
    std::fs::write(&f, r#"{"recipe": {"aa": "trivialaugment"}}"#).unwrap();
    let c = PipelineOptions { config: Some(f.clone()), ..PipelineOptions::default() }.to_config("d", OptionNames::Cli).unwrap();
    assert_eq!(c.augment.auto_augment.map(|a| a.config), Some("trivialaugment".to_string()));
}
