//! The AutoAugment-family ops (RandAugment, AutoAugment, TrivialAugmentWide) on the CPU
//! backend, against independent references:
//! - every op, at several arguments and both resampling filters, and chains of ops, against
//!   goldens made by timm's own op functions on Pillow (`tests/golden/auto/make.py`): stoke's
//!   uint8 output of the same input must equal them bit for bit;
//! - the draws against timm's `RandAugment`/`AugmentOp`/`AutoAugment` and torchvision's
//!   `TrivialAugmentWide` sampling logic (op choice, firing probability, magnitude noise and
//!   clip, signs, bins), reimplemented here over an independent generator;
//! - bad `--aa` strings rejected with the option named; `--preset deit` as DeiT's recipe.
//!
//! The GPU path's kernel code is checked against the CPU backend bit for bit in
//! tests/gpu_kernel_host.rs.

mod recipe_common;
use recipe_common::{identity, ks, Xs};

use std::collections::HashMap;
use stoke::augment::auto::{trivial_wide, AutoAugmentSpec, AutoOpCode, AutoPolicy, ORIGINAL_POLICY, RAND_INCREASING_OPS};
use stoke::augment::host::{augment, Scratch, SrcImage};
use stoke::augment::params::{draw, AugParams, AutoOp, AutoParams, SampleRng, AUTO_APPLIED, AUTO_BICUBIC, AUTO_MAX};
use stoke::backend::cpu::decode::{decode_rgb, DecodedImage};
use stoke::config::{DType, Layout, OptionNames, OutputSpec, PipelineOptions, Preset};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/auto");

fn png(name: &str) -> (Vec<u8>, u32, u32) {
    let bytes = std::fs::read(format!("{GOLDEN}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut out = DecodedImage::default();
    decode_rgb(&bytes, 1 << 24, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
    (out.rgb.clone(), out.width, out.height)
}

/// Parameters that leave a `w × h` image as it is (whole-image crop, same-size resize) and
/// then run `ops`.
fn identity_with(w: i32, h: i32, ops: &[AutoOp]) -> AugParams {
    let mut p = identity(w, h);
    p.aa = AutoParams { count: ops.len() as u32, fill: [124, 116, 104, 0], ..AutoParams::default() };
    p.aa.ops[..ops.len()].copy_from_slice(ops);
    p
}

/// stoke's uint8 NHWC output of `p` on the stored image.
fn run_u8(rgb: &[u8], w: i32, h: i32, p: &AugParams) -> Vec<u8> {
    let spec = OutputSpec { dtype: DType::U8, layout: Layout::Nhwc, mean: [0.0; 3], std: [1.0; 3] };
    let mut out = vec![0u8; 3 * (p.out_w * p.out_h) as usize];
    augment(SrcImage::full(rgb, w, h), p, &spec, &mut out, 0, &mut Scratch::default()).expect("augment");
    out
}

#[test]
fn identity_geometry_leaves_the_input_unchanged() {
    let (rgb, w, h) = png("in_0.png");
    assert_eq!(run_u8(&rgb, w as i32, h as i32, &identity_with(w as i32, h as i32, &[])), rgb);
}

#[test]
fn every_op_equals_timms_pillow_op_bit_for_bit() {
    let table: serde_json::Value = serde_json::from_slice(&std::fs::read(format!("{GOLDEN}/cases.json")).unwrap()).unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for img in table["images"].as_array().unwrap() {
        let (rgb, w, h) = png(img["input"].as_str().unwrap());
        let (want, ow, oh) = png(img["output"].as_str().unwrap());
        let cases = img["cases"].as_array().unwrap();
        assert_eq!((ow, oh), (w, h * cases.len() as u32), "golden strip size");
        let frame = (w * h * 3) as usize;
        for (k, case) in cases.iter().enumerate() {
            let ops: Vec<AutoOp> = case
                .as_array()
                .unwrap()
                .iter()
                .map(|o| AutoOp {
                    op: o[0].as_u64().unwrap() as u32,
                    flags: AUTO_APPLIED | if o[2].as_bool().unwrap() { AUTO_BICUBIC } else { 0 },
                    arg: o[1].as_f64().unwrap() as f32,
                })
                .collect();
            let got = run_u8(&rgb, w as i32, h as i32, &identity_with(w as i32, h as i32, &ops));
            let exp = &want[k * frame..(k + 1) * frame];
            let differ = got.iter().zip(exp).filter(|(a, b)| a != b).count();
            if differ > 0 {
                let worst = got.iter().zip(exp).map(|(a, b)| (*a as i32 - *b as i32).abs()).max().unwrap();
                let names: Vec<String> = ops.iter().map(|o| o.describe()).collect();
                failures.push(format!("{} case {k} [{}]: {differ} values differ, worst by {worst}", img["input"], names.join(", ")));
            }
            checked += 1;
        }
    }
    assert!(checked >= 200, "only {checked} cases");
    assert!(failures.is_empty(), "{} of {checked} cases differ from timm/Pillow:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn posterize_to_zero_bits_is_black_as_older_pillow() {
    // timm's increasing posterize reaches 0 bits at magnitude 10; Pillow ≥ 12 refuses 0 bits,
    // earlier Pillow (and TensorFlow's RandAugment) give black. stoke gives black.
    let (rgb, w, h) = png("in_0.png");
    let op = AutoOp { op: AutoOpCode::Posterize.code(), flags: AUTO_APPLIED, arg: 0.0 };
    assert!(run_u8(&rgb, w as i32, h as i32, &identity_with(w as i32, h as i32, &[op])).iter().all(|&v| v == 0));
}

#[test]
fn ops_that_did_not_fire_change_nothing() {
    let (rgb, w, h) = png("in_0.png");
    let skipped = AutoOp { op: AutoOpCode::Invert.code(), flags: 0, arg: 0.0 };
    let identity = AutoOp { op: AutoOpCode::Identity.code(), flags: AUTO_APPLIED, arg: 0.0 };
    assert_eq!(run_u8(&rgb, w as i32, h as i32, &identity_with(w as i32, h as i32, &[skipped, identity])), rgb);
}

fn draws(spec: &AutoAugmentSpec, n: u64, bicubic: Option<bool>) -> Vec<AutoParams> {
    (0..n).map(|s| spec.draw(&mut SampleRng::new(11, 2, s, 9), 224, 224, bicubic)).collect()
}

#[test]
fn randaugment_draws_follow_timm() {
    // rand-m9-mstd0.5-inc1: two ops from the 15 increasing ops, uniform with replacement, each
    // firing with p = 0.5; magnitude N(9, 0.5) clipped to [0, 10].
    let spec = AutoAugmentSpec::parse("rand-m9-mstd0.5-inc1", [0.485, 0.456, 0.406]).unwrap();
    assert_eq!(spec.policy, AutoPolicy::Rand { n: 2, m: 9.0, p: 0.5, increasing: true });
    assert_eq!(spec.fill, [124, 116, 104]);
    let n = 60_000;
    let ds = draws(&spec, n, Some(true));
    let mut counts: HashMap<u32, u64> = HashMap::new();
    let (mut fired, mut rot_stoke, mut rot_neg) = (0u64, Vec::new(), 0u64);
    for a in &ds {
        assert_eq!(a.count, 2);
        for o in a.drawn() {
            *counts.entry(o.op).or_default() += 1;
            fired += (o.flags & AUTO_APPLIED != 0) as u64;
            if o.op == AutoOpCode::Rotate.code() {
                rot_stoke.push(o.arg.abs() as f64);
                rot_neg += (o.arg < 0.0) as u64;
                assert_ne!(o.flags & AUTO_BICUBIC, 0, "bicubic training interpolation");
            }
        }
    }
    // op choice: the 15 ops uniformly (14 kernel ops: the enhance ops map one to one)
    let total = 2 * n;
    for (op, c) in &counts {
        let want = 1.0 / 15.0;
        let share = *c as f64 / total as f64;
        assert!((share - want).abs() < 0.004, "op {op}: share {share}");
    }
    assert_eq!(counts.len(), RAND_INCREASING_OPS.len(), "15 timm ops, 15 kernel ops");
    let fire = fired as f64 / total as f64;
    assert!((fire - 0.5).abs() < 0.01, "firing rate {fire}");
    let neg = rot_neg as f64 / rot_stoke.len() as f64;
    assert!((neg - 0.5).abs() < 0.02, "rotate sign balance {neg}");
    // magnitude: timm's gauss(9, 0.5) clipped to [0, 10] → degrees = level/10·30
    let mut r = Xs(0x9e3779b97f4a7c15);
    let reference: Vec<f64> = (0..rot_stoke.len()).map(|_| r.gauss(9.0, 0.5).clamp(0.0, 10.0) / 10.0 * 30.0).collect();
    let d = ks(rot_stoke, reference);
    assert!(d < 0.03, "rotate magnitude KS distance {d}");
}

#[test]
fn autoaugment_original_draws_follow_the_policy() {
    let spec = AutoAugmentSpec::parse("original", [0.5; 3]).unwrap();
    let n = 50_000;
    let ds = draws(&spec, n, Some(false));
    // Sub-policy 12 is [Equalize 0.0, Equalize 0.8]; count how often each (first op, second op)
    // code pair shows up against the policy table's pairs (uniform over the 25 sub-policies).
    let code = |op: stoke::augment::auto::TimmOp| {
        use stoke::augment::auto::TimmOp::*;
        match op {
            PosterizeOriginal | PosterizeIncreasing | Posterize => AutoOpCode::Posterize,
            Rotate => AutoOpCode::Rotate,
            Solarize | SolarizeIncreasing => AutoOpCode::Solarize,
            AutoContrast => AutoOpCode::AutoContrast,
            Equalize => AutoOpCode::Equalize,
            Invert => AutoOpCode::Invert,
            Color | ColorIncreasing => AutoOpCode::Color,
            Contrast | ContrastIncreasing => AutoOpCode::Contrast,
            Sharpness | SharpnessIncreasing => AutoOpCode::Sharpness,
            ShearX => AutoOpCode::ShearX,
            other => panic!("{other:?} not in the original policy"),
        }
        .code()
    };
    let mut want: HashMap<(u32, u32), f64> = HashMap::new();
    let mut fire_want: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
    for sub in ORIGINAL_POLICY.iter() {
        *want.entry((code(sub[0].0), code(sub[1].0))).or_default() += 1.0 / 25.0;
        fire_want.insert((code(sub[0].0), code(sub[1].0)), (sub[0].1, sub[1].1));
    }
    let mut got: HashMap<(u32, u32), f64> = HashMap::new();
    let mut posterize_bits = Vec::new();
    for a in &ds {
        assert_eq!(a.count, 2);
        *got.entry((a.ops[0].op, a.ops[1].op)).or_default() += 1.0 / n as f64;
        for o in a.drawn() {
            if o.op == AutoOpCode::Posterize.code() {
                posterize_bits.push(o.arg);
            }
        }
    }
    for (pair, share) in &want {
        let g = got.get(pair).copied().unwrap_or(0.0);
        assert!((g - share).abs() < 0.006, "sub-policy pair {pair:?}: {g} vs {share}");
    }
    assert_eq!(got.len(), want.len(), "only the policy's pairs");
    // without mstd the magnitudes are the table's: PosterizeOriginal levels 8, 7, 6, 5 → 7, 6, 6, 6 bits
    assert!(posterize_bits.iter().all(|b| [6.0, 7.0].contains(b)), "posterize bits {:?}", &posterize_bits[..5]);
    // Rotate 0.6 at level 9 in sub-policy 0: rotate fires 60 % of the time there
    let sub0: Vec<&AutoParams> =
        ds.iter().filter(|a| a.ops[0].op == AutoOpCode::Posterize.code() && a.ops[1].op == AutoOpCode::Rotate.code()).collect();
    let rate = sub0.iter().filter(|a| a.ops[1].flags & AUTO_APPLIED != 0).count() as f64 / sub0.len() as f64;
    assert!((rate - 0.6).abs() < 0.05, "rotate firing {rate}");
    assert!(sub0.iter().all(|a| a.ops[1].arg.abs() == 27.0), "level 9 → 27 degrees");
}

#[test]
fn trivialaugment_draws_follow_torchvision() {
    let spec = AutoAugmentSpec::parse("trivialaugment", [0.5; 3]).unwrap();
    let n = 56_000;
    let ds = draws(&spec, n, None);
    let mut counts = [0u64; 16];
    let mut bicubic = 0u64;
    let mut geometric = 0u64;
    let mut rotations = Vec::new();
    for a in &ds {
        assert_eq!(a.count, 1);
        let o = a.ops[0];
        assert_ne!(o.flags & AUTO_APPLIED, 0, "TrivialAugment always applies its op");
        counts[o.op as usize] += 1;
        if AutoOpCode::from_code(o.op).unwrap().is_geometric() {
            geometric += 1;
            bicubic += (o.flags & AUTO_BICUBIC != 0) as u64;
        }
        if o.op == AutoOpCode::Rotate.code() {
            rotations.push(o.arg as f64);
        }
    }
    // 14 ops uniformly; TranslateX/Y and ShearX/Y each their own code
    for (op, c) in counts.iter().enumerate() {
        if op == AutoOpCode::Invert.code() as usize || op == AutoOpCode::SolarizeAdd.code() as usize {
            assert_eq!(*c, 0, "op {op} is not in TrivialAugmentWide");
            continue;
        }
        let share = *c as f64 / n as f64;
        assert!((share - 1.0 / 14.0).abs() < 0.004, "op {op}: {share}");
    }
    let cub = bicubic as f64 / geometric as f64;
    assert!((cub - 0.5).abs() < 0.02, "random interpolation draws each filter half the time: {cub}");
    // rotation: bins linspace(0, 135, 31), uniform, random sign
    let mut r = Xs(12345);
    let reference: Vec<f64> = (0..rotations.len())
        .map(|_| {
            let bin = (r.uniform() * 31.0) as usize;
            let v = 135.0 * bin as f64 / 30.0;
            if r.uniform() < 0.5 {
                -v
            } else {
                v
            }
        })
        .collect();
    assert!(ks(rotations, reference) < 0.03);
    // posterize bins: 8 − round(i/5) for i in 0..31 → 8 (3 bins), 7..3 (5 each), 2 (3 bins)
    assert_eq!(trivial_wide(10, 0, false).1, 8.0);
    assert_eq!(trivial_wide(10, 30, false).1, 2.0);
    assert_eq!(trivial_wide(10, 13, false).1, 5.0);
    assert_eq!(trivial_wide(11, 30, false).1, 0.0);
    assert_eq!(trivial_wide(6, 30, true).1 as f32, 1.0 - 0.99);
}

#[test]
fn torchvision_randaugment_draws_follow_torchvision() {
    // RandAugment(num_ops=2, magnitude=9): two of 14 ops uniformly with replacement, always
    // applied, at bin 9 of 31 with a random sign for the signed ops.
    let spec = AutoAugmentSpec::parse("randaugment-n2-m9", [0.5; 3]).unwrap();
    assert_eq!(spec.policy, AutoPolicy::TorchvisionRand { n: 2, m: 9 });
    assert_eq!(AutoAugmentSpec::parse("randaugment", [0.5; 3]).unwrap().policy, AutoPolicy::TorchvisionRand { n: 2, m: 9 });
    let n = 28_000;
    let ds = draws(&spec, n, Some(false));
    let mut counts = [0u64; 16];
    let mut neg = [0u64; 16];
    for a in &ds {
        assert_eq!(a.count, 2);
        for o in a.drawn() {
            assert_ne!(o.flags & AUTO_APPLIED, 0);
            counts[o.op as usize] += 1;
            neg[o.op as usize] += (o.arg < 0.0) as u64;
            let want = match AutoOpCode::from_code(o.op).unwrap() {
                AutoOpCode::Rotate => Some(9.0),
                AutoOpCode::ShearX | AutoOpCode::ShearY => Some(0.09),
                AutoOpCode::TranslateX | AutoOpCode::TranslateY => Some(30.0), // int(150/331·224·9/30)
                AutoOpCode::Posterize => Some(7.0),                            // 8 − round(9/7.5)
                AutoOpCode::Solarize => Some(178.5),                           // linspace(255, 0, 31)[9]
                AutoOpCode::Brightness | AutoOpCode::Color | AutoOpCode::Contrast | AutoOpCode::Sharpness => None,
                _ => Some(0.0),
            };
            match want {
                Some(v) => assert!((o.arg.abs() as f64 - v).abs() < 1e-6, "{}: {}", o.name(), o.arg),
                None => assert!((o.arg as f64 - 1.27).abs() < 1e-6 || (o.arg as f64 - 0.73).abs() < 1e-6, "{}: {}", o.name(), o.arg),
            }
        }
    }
    for (op, c) in counts.iter().enumerate() {
        if op == AutoOpCode::Invert.code() as usize || op == AutoOpCode::SolarizeAdd.code() as usize {
            assert_eq!(*c, 0);
            continue;
        }
        let share = *c as f64 / (2 * n) as f64;
        assert!((share - 1.0 / 14.0).abs() < 0.005, "op {op}: {share}");
    }
    let r = AutoOpCode::Rotate.code() as usize;
    assert!((neg[r] as f64 / counts[r] as f64 - 0.5).abs() < 0.04, "rotate sign");
}

#[test]
fn mstd_above_100_draws_uniform_magnitudes_and_mmax_clips() {
    let spec = AutoAugmentSpec::parse("rand-m10-mstd101-n1-p1", [0.5; 3]).unwrap();
    assert_eq!(spec.magnitude_std, f64::INFINITY);
    let ds = draws(&spec, 40_000, Some(false));
    let rot: Vec<f64> = ds.iter().filter(|a| a.ops[0].op == AutoOpCode::Rotate.code()).map(|a| a.ops[0].arg.abs() as f64).collect();
    let mut r = Xs(99);
    let reference: Vec<f64> = (0..rot.len()).map(|_| r.uniform() * 10.0 / 10.0 * 30.0).collect();
    assert!(ks(rot, reference) < 0.04);
    let clipped = AutoAugmentSpec::parse("rand-m20-mmax15-n1-p1", [0.5; 3]).unwrap();
    for a in draws(&clipped, 2000, Some(false)) {
        if a.ops[0].op == AutoOpCode::Rotate.code() {
            assert_eq!(a.ops[0].arg.abs(), 45.0, "level min(20, 15) = 15 → 45 degrees");
        }
    }
}

#[test]
fn bad_aa_strings_are_named() {
    for (text, needle) in [
        ("rand-m9-n5", "n must be 1..=4"),
        ("rand-m9-p1.5", "p must be in [0, 1]"),
        ("rand-mx", "unknown section"),
        ("rand-m9x", "m needs a number"),
        ("rand-q3", "unknown section"),
        ("rand-tweights", "transform set"),
        ("v0", "not supported"),
        ("augmix-m5", "AugMix is not supported"),
        ("autoaug", "expected rand"),
        ("original-n2", "unknown section"),
        ("trivialaugment-m3", "takes no options"),
        ("randaugment-m31", "magnitude bin 0..=30"),
        ("randaugment-n0", "n must be 1..=4"),
        ("randaugment-q2", "unknown section"),
        ("rand-m9-mmax0", "mmax must be above 0"),
    ] {
        let o = PipelineOptions { aa: Some(text.into()), ..PipelineOptions::default() };
        let e = o.to_config("/tmp/x", OptionNames::Cli).unwrap_err().to_string();
        assert!(e.contains("--aa") && e.contains(needle), "{text}: {e}");
        let e = o.to_config("/tmp/x", OptionNames::Python).unwrap_err().to_string();
        assert!(e.starts_with("aa ") || e.contains(" aa \""), "{text}: python spelling: {e}");
    }
    assert!(AutoAugmentSpec::parse("rand-m9-mstd-1", [0.5; 3]).is_err(), "negative mstd");
}

#[test]
fn preset_deit_is_deits_recipe_and_each_part_can_be_changed() {
    let c = PipelineOptions { preset: Preset::Deit, ..PipelineOptions::default() }.to_config("/tmp/x", OptionNames::Cli).unwrap();
    let a = &c.augment;
    assert_eq!(a.auto_augment.as_ref().map(|s| s.config.as_str()), Some("rand-m9-mstd0.5-inc1"));
    assert_eq!(a.filter, stoke::config::Filter::Bicubic);
    let e = a.erasing.as_ref().expect("erasing");
    assert_eq!((e.prob, e.max_count), (0.25, 1));
    assert_eq!((c.mixup.mixup, c.mixup.cutmix, c.mixup.smoothing, c.mixup.switch_prob), (0.8, 1.0, 0.1, 0.5));
    let off = PipelineOptions { preset: Preset::Deit, aa: Some("none".into()), reprob: Some(0.0), ..PipelineOptions::default() }
        .to_config("/tmp/x", OptionNames::Cli)
        .unwrap();
    assert!(off.augment.auto_augment.is_none() && off.augment.erasing.is_none());
    // the drawn parameters carry the ops, and every sample's draws are reproducible
    let p1 = draw(&c.augment, 3, 1, 17, 500, 375, 1);
    let p2 = draw(&c.augment, 3, 1, 17, 500, 375, 1);
    assert_eq!(p1, p2);
    assert_eq!(p1.aa.count, 2);
    assert!(p1.aa.count as usize <= AUTO_MAX);
}

#[test]
fn the_command_line_takes_aa_and_preset_deit_and_dump_names_every_op() {
    let set = recipe_common::DumpRun::new(8);
    let out = &set.out;
    let run = |extra: &[&str]| set.dump(2, extra);
    let o = run(&["--preset", "deit"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    let mut ops = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let p = &v["params"];
        assert_eq!(p["filter"], 1, "DeiT resizes bicubic");
        let drawn = p["aa"]["ops"].as_array().expect("aa.ops");
        assert_eq!(drawn.len(), 2, "rand-m9-…: two ops per image");
        for op in drawn {
            let name = op["op"].as_str().unwrap();
            assert!(RAND_INCREASING_OPS.iter().any(|o| format!("{o:?}").starts_with(name)), "{name}");
            assert!(op["applied"].is_boolean());
            ops += 1;
        }
    }
    assert_eq!(ops, 16);
    assert!(out.join("batch_00000.targets.npy").exists(), "DeiT mixes: soft targets beside the images");
    let o = run(&["--aa", "rand-m9-n7"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--aa") && err.contains("n must be 1..=4"), "{err}");
}
