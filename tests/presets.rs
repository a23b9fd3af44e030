//! The self-supervised presets reproduce their reference code: every view's spec against the
//! values in the reference (file and line cited beside each), and the drawn parameters' rates
//! (blur, solarize, jitter, grayscale, flip per view) against the reference's probabilities over
//! many samples. The crop distributions against torchvision's own sampler are in
//! tests/python/test_presets.py (they need torch).

mod recipe_common;

use recipe_common::ks;
use stoke::augment::params::{BLUR_GAUSS, BLUR_PIL};
use stoke::augment::views::draw_views;
use stoke::config::{AugmentSpec, CropMode, Filter, OptionNames, PipelineConfig, PipelineOptions, Preset, IMAGENET_MEAN, IMAGENET_STD};

fn config(preset: Preset) -> PipelineConfig {
    PipelineOptions { preset, ..Default::default() }.to_config("d", OptionNames::Cli).unwrap()
}

fn rrc(a: &AugmentSpec) -> ((f64, f64), (f64, f64)) {
    match a.crop {
        CropMode::RandomResized { scale, ratio } => (scale, ratio),
        c => panic!("not a RandomResizedCrop: {c:?}"),
    }
}

/// A jitter range (`None`: the step is off).
type Range = Option<(f32, f32)>;

/// Jitter ranges as torchvision's ColorJitter(b, c, s, h) makes them, and its probability.
fn jitter(a: &AugmentSpec) -> (Range, Range, Range, Range, f64) {
    let j = a.color_jitter.as_ref().expect("colour jitter");
    (j.brightness, j.contrast, j.saturation, j.hue, j.prob)
}

#[test]
fn dino_is_data_augmentation_dino() {
    // facebookresearch/dino@7c446df main_dino.py:419-464 (DataAugmentationDINO), defaults at
    // main_dino.py:108-115 (global (0.4, 1), 8 local crops at (0.05, 0.4)); utils.py:36-68
    // (GaussianBlur: Pillow's radius in (0.1, 2); Solarization: ImageOps.solarize, 128).
    let c = config(Preset::Dino);
    assert_eq!(c.view_count(), 10);
    assert_eq!(c.views.iter().map(|g| (g.count(), g.size())).collect::<Vec<_>>(), vec![(2, (224, 224)), (8, (96, 96))]);
    let specs = c.view_specs();
    for (v, a) in specs.iter().enumerate() {
        let scale = if v < 2 { (0.4, 1.0) } else { (0.05, 0.4) };
        assert_eq!(rrc(a), (scale, (3.0 / 4.0, 4.0 / 3.0)), "view {v}");
        assert_eq!((a.filter, a.antialias, a.random_filter), (Filter::Bicubic, true, false), "view {v}: PIL bicubic");
        assert_eq!((a.hflip_p, a.vflip_p), (0.5, 0.0));
        assert_eq!(jitter(a), (Some((0.6, 1.4)), Some((0.6, 1.4)), Some((0.8, 1.2)), Some((-0.1, 0.1)), 0.8));
        assert_eq!(a.grayscale_p, 0.2);
        let b = a.blur.as_ref().expect("every view may blur");
        assert_eq!((b.kernel, b.sigma), (None, (0.1, 2.0)), "Pillow's GaussianBlur(radius)");
        assert_eq!(b.prob, [1.0, 0.1, 0.5][v.min(2)], "view {v}");
        match &a.solarize {
            Some(s) => assert_eq!((v, s.prob, s.threshold), (1, 0.2, 128.0)),
            None => assert_ne!(v, 1),
        }
        assert!(a.erasing.is_none() && a.auto_augment.is_none() && a.affine.is_none());
    }
    assert_eq!((c.output.mean, c.output.std), (IMAGENET_MEAN, IMAGENET_STD));
    // `size` moves the global crops only (main_dino.py's 224 is fixed; DINOv2 has
    // global_crops_size), and an option given wins over the preset.
    let c = PipelineOptions { preset: Preset::Dino, size: Some(192), grayscale_prob: Some(0.0), ..Default::default() }
        .to_config("d", OptionNames::Cli)
        .unwrap();
    assert_eq!(c.views.iter().map(|g| g.size()).collect::<Vec<_>>(), vec![(192, 192), (96, 96)]);
    assert!(c.view_specs().iter().all(|a| a.grayscale_p == 0.0));
}

#[test]
fn dinov2_is_its_code_with_the_blur_probabilities_inverted() {
    // facebookresearch/dinov2@b8931f7 dinov2/data/augmentations.py:43-94; the blur is
    // dinov2/data/transforms.py:12-21: `RandomApply([GaussianBlur(kernel_size=9, sigma=(0.1, 2))],
    // p=1 - p)`, so GaussianBlur(p=1.0) never blurs, p=0.1 blurs 0.9 of the time (dinov2 PR #411);
    // crops from configs/ssl_default_config.yaml:107-116 (0.32 split, 224 / 96, 8 locals);
    // RandomSolarize(threshold=128, p=0.2) on the second global view.
    let c = config(Preset::Dinov2);
    assert_eq!(c.views.iter().map(|g| (g.count(), g.size())).collect::<Vec<_>>(), vec![(2, (224, 224)), (8, (96, 96))]);
    for (v, a) in c.view_specs().iter().enumerate() {
        let scale = if v < 2 { (0.32, 1.0) } else { (0.05, 0.32) };
        assert_eq!(rrc(a).0, scale, "view {v}");
        assert_eq!((a.filter, a.antialias), (Filter::Bicubic, true));
        assert_eq!(jitter(a), (Some((0.6, 1.4)), Some((0.6, 1.4)), Some((0.8, 1.2)), Some((-0.1, 0.1)), 0.8));
        assert_eq!(a.grayscale_p, 0.2);
        match (v, &a.blur) {
            (0, None) => {}
            (0, Some(b)) => panic!("the first global view never blurs in DINOv2's code: {b:?}"),
            (_, Some(b)) => assert_eq!((b.prob, b.kernel, b.sigma), (if v == 1 { 0.9 } else { 0.5 }, Some(9), (0.1, 2.0))),
            (_, None) => panic!("view {v} blurs"),
        }
        assert_eq!(a.solarize.as_ref().map(|s| (s.prob, s.threshold)), (v == 1).then_some((0.2, 128.0)));
    }
}

#[test]
fn simclr_is_its_tf2_preprocessing() {
    // google-research/simclr@383d414 tf2/data_util.py: crop_and_resize:298-322 (area (0.08, 1),
    // aspect (3/4, 4/3), tf.image.resize BICUBIC: TF2's antialias=False), flip:474,
    // color_jitter:53-75 (strength 1: 0.8, 0.8, 0.8, 0.2), random_color_jitter:382-390
    // (p 0.8, then grayscale 0.2), random_blur:393-410 (kernel height//10 made odd: 23 at 224,
    // sigma in (0.1, 2)), batch_random_blur:413-440 (p 0.5); images stay in [0, 1] (no
    // normalization).
    let c = config(Preset::Simclr);
    assert_eq!(c.views.iter().map(|g| (g.count(), g.size())).collect::<Vec<_>>(), vec![(2, (224, 224))]);
    for a in c.view_specs() {
        assert_eq!(rrc(&a), ((0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)));
        assert_eq!((a.filter, a.antialias, a.hflip_p), (Filter::Bicubic, false, 0.5));
        assert_eq!(jitter(&a), (Some((0.2, 1.8)), Some((0.2, 1.8)), Some((0.2, 1.8)), Some((-0.2, 0.2)), 0.8));
        assert_eq!(a.grayscale_p, 0.2);
        let b = a.blur.as_ref().unwrap();
        assert_eq!((b.prob, b.kernel, b.sigma), (0.5, Some(23), (0.1, 2.0)));
        assert!(a.solarize.is_none());
    }
    assert_eq!((c.output.mean, c.output.std), ([0.0; 3], [1.0; 3]));
    let c = PipelineOptions { preset: Preset::Simclr, size: Some(32), ..Default::default() }.to_config("d", OptionNames::Cli).unwrap();
    assert_eq!(c.view_specs()[0].blur.as_ref().unwrap().kernel, Some(3), "CIFAR's 32 // 10 = 3");
}

#[test]
fn mae_is_one_bicubic_crop_of_scale_point_two_to_one() {
    // facebookresearch/mae@efb2a80 main_pretrain.py:123-127.
    let c = config(Preset::Mae);
    assert!(c.views.is_empty(), "one view: batches of images, not a list");
    let a = &c.augment;
    assert_eq!(rrc(a), ((0.2, 1.0), (3.0 / 4.0, 4.0 / 3.0)));
    assert_eq!((a.filter, a.antialias, a.hflip_p), (Filter::Bicubic, true, 0.5));
    assert!(a.color_jitter.is_none() && a.blur.is_none() && a.solarize.is_none() && a.grayscale_p == 0.0);
}

/// `k` successes in `n` trials are within 5 standard deviations of probability `p`.
fn near(k: usize, n: usize, p: f64) -> bool {
    let sd = (n as f64 * p * (1.0 - p)).sqrt().max(1.0);
    (k as f64 - n as f64 * p).abs() <= 5.0 * sd
}

#[test]
fn dino_draws_fire_at_the_references_rates() {
    let c = config(Preset::Dino);
    let specs = c.view_specs();
    let n = 20_000;
    let (mut blur, mut sol, mut jit, mut gray, mut flip) = ([0usize; 10], [0usize; 10], [0usize; 10], [0usize; 10], [0usize; 10]);
    let mut radius = (f32::MAX, f32::MIN);
    let mut views = Vec::new();
    for s in 0..n {
        draw_views(&specs, 1, 0, s as u64, 500, 375, 1, &mut views);
        for (v, p) in views.iter().enumerate() {
            if p.blur.kind != 0 {
                assert_eq!(p.blur.kind, BLUR_PIL);
                blur[v] += 1;
                radius = (radius.0.min(p.blur.sigma), radius.1.max(p.blur.sigma));
            }
            sol[v] += p.blur.solarize as usize;
            jit[v] += (p.color.order != 0) as usize;
            gray[v] += p.color.grayscale as usize;
            flip[v] += p.flip_h as usize;
            let area = (p.crop_w * p.crop_h) as f64 / (500.0 * 375.0);
            let (lo, hi) = if v < 2 { (0.4, 1.0) } else { (0.05, 0.4) };
            // torchvision rounds the box's sides: its area may leave the range by a rounding.
            assert!(area > lo * 0.97 && area < hi * 1.03 + 0.002, "view {v}: area {area}");
        }
    }
    for v in 0..10 {
        assert!(near(blur[v], n, [1.0, 0.1, 0.5][v.min(2)]), "view {v}: blur {}", blur[v]);
        assert!(near(sol[v], n, if v == 1 { 0.2 } else { 0.0 }), "view {v}: solarize {}", sol[v]);
        assert!(near(jit[v], n, 0.8) && near(gray[v], n, 0.2) && near(flip[v], n, 0.5), "view {v}: {} {} {}", jit[v], gray[v], flip[v]);
    }
    assert!(radius.0 >= 0.1 && radius.1 <= 2.0 && radius.0 < 0.11 && radius.1 > 1.99, "radius {radius:?}");
    // DINOv2: torchvision's kernel, the first view never.
    let specs = config(Preset::Dinov2).view_specs();
    let mut blur = [0usize; 10];
    for s in 0..n {
        draw_views(&specs, 1, 0, s as u64, 500, 375, 1, &mut views);
        for (v, p) in views.iter().enumerate() {
            if p.blur.kind != 0 {
                assert_eq!((p.blur.kind, p.blur.ksize), (BLUR_GAUSS, 9));
                blur[v] += 1;
            }
        }
    }
    assert_eq!(blur[0], 0);
    assert!(near(blur[1], n, 0.9) && (2..10).all(|v| near(blur[v], n, 0.5)), "{blur:?}");
}

/// A Python with torchvision: `$STOKE_TORCH_PYTHON`, else `python3` when it imports
/// torchvision; `None` (the test prints why and passes) without one, unless
/// `STOKE_REQUIRE_TORCH=1`.
fn torch_python() -> Option<String> {
    let python = std::env::var("STOKE_TORCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&python).args(["-c", "import torchvision"]).output().is_ok_and(|o| o.status.success());
    if !ok && std::env::var("STOKE_REQUIRE_TORCH").as_deref() == Ok("1") {
        panic!("STOKE_REQUIRE_TORCH=1 but {python} cannot import torchvision");
    }
    ok.then_some(python)
}

/// Every preset view's crop, drawn by stoke, against torchvision's own
/// `RandomResizedCrop.get_params` (which DINO, DINOv2 and MAE call) on images of the same sizes:
/// the distributions of the crop's area fraction, aspect ratio and position are the same
/// (two-sample Kolmogorov–Smirnov, 4000 draws each, at a level where a true match fails once in
/// a thousand runs).
#[test]
fn preset_crops_are_distributed_as_torchvisions_random_resized_crop() {
    let Some(python) = torch_python() else {
        eprintln!("skipped: no Python with torchvision (set STOKE_TORCH_PYTHON)");
        return;
    };
    const N: usize = 4000;
    // One spec per distinct crop range (the views' draws share the crop code), two image sizes.
    let mut cases = Vec::new();
    for preset in [Preset::Dino, Preset::Dinov2, Preset::Mae] {
        let specs = config(preset).view_specs();
        let mut picked = vec![0, specs.len() - 1];
        picked.dedup();
        for v in picked {
            for (w, h) in [(500, 375), (300, 420)] {
                cases.push((preset, specs.clone(), v, w, h));
            }
        }
    }
    let script = r#"
import json, sys, torch
from PIL import Image
from torchvision.transforms import RandomResizedCrop
torch.manual_seed(0)
out = []
for w, h, lo, hi, rlo, rhi, n in json.loads(sys.stdin.read()):
    img = Image.new("RGB", (w, h))
    crops = [RandomResizedCrop.get_params(img, (lo, hi), (rlo, rhi)) for _ in range(n)]
    out.append([[j, i, cw, ch] for i, j, ch, cw in crops])
print(json.dumps(out))
"#;
    let args: Vec<serde_json::Value> = cases
        .iter()
        .map(|(_, specs, v, w, h)| {
            let ((lo, hi), (rlo, rhi)) = rrc(&specs[*v]);
            serde_json::json!([w, h, lo, hi, rlo, rhi, N])
        })
        .collect();
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(serde_json::Value::Array(args).to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "torchvision's draws failed");
    let all: Vec<Vec<[i32; 4]>> = serde_json::from_slice(&out.stdout).unwrap();
    let mut views = Vec::new();
    for ((preset, specs, v, w, h), theirs) in cases.iter().zip(all) {
        let (v, w, h) = (*v, *w, *h);
        let ours: Vec<[i32; 4]> = (0..N as u64)
            .map(|s| {
                draw_views(specs, 11, 0, s, w, h, 1, &mut views);
                let p = &views[v];
                [p.crop_x, p.crop_y, p.crop_w, p.crop_h]
            })
            .collect();
        let stat = |f: &dyn Fn(&[i32; 4]) -> f64| ks(ours.iter().map(f).collect(), theirs.iter().map(f).collect());
        let area = stat(&|c| (c[2] * c[3]) as f64 / (w * h) as f64);
        let aspect = stat(&|c| (c[2] as f64 / c[3] as f64).ln());
        let x = stat(&|c| c[0] as f64 / w as f64);
        let bound = 1.95 * (2.0 / N as f64).sqrt();
        eprintln!("{preset:?} view {v} {w}x{h}: KS area {area:.4}, aspect {aspect:.4}, x {x:.4} (bound {bound:.4})");
        assert!(area < bound && aspect < bound && x < bound, "{preset:?} view {v} {w}x{h}: {area} {aspect} {x} >= {bound}");
    }
}
