//! Resolution schedules (FFCV's progressive resizing) and the eval preset's crop ratio on the
//! CPU backend: the schedule is FFCV's formula; every batch of epoch e has the schedule's size
//! and is the batch a fixed-size pipeline at that size makes; a resumed epoch keeps its size
//! and continues bit for bit; the crop ratio sets the eval crop as computed by hand; each bad
//! input is named.

mod photos_common;

use std::path::Path;
use stoke::batch::Batch;
use stoke::config::{
    AugmentSpec, BackendKind, CropMode, OptionNames, PipelineConfig, PipelineOptions, Preset, ResolutionSchedule, ViewOptions,
};
use stoke::pipeline::Pipeline;

/// root/{a,b}/NN.jpg: 11 photos of assorted sizes.
fn dataset(root: &Path) {
    photos_common::photo_folder(root, 5);
}

/// FFCV's `get_resolution` (ffcv-imagenet train_imagenet.py), written again from its text:
/// `min_res` up to `start_ramp`, `max_res` from `end_ramp`, between them
/// `int(np.round(np.interp([epoch], [start_ramp, end_ramp], [min_res, max_res])[0] / 32)) * 32`
/// with numpy's interp `slope * (x - xp[0]) + fp[0]` and its round half to even.
fn ffcv(min_res: u32, max_res: u32, start_ramp: u64, end_ramp: u64, epoch: u64) -> u32 {
    if epoch <= start_ramp {
        return min_res;
    }
    if epoch >= end_ramp {
        return max_res;
    }
    let (xp0, xp1, fp0, fp1) = (start_ramp as f64, end_ramp as f64, min_res as f64, max_res as f64);
    let slope = (fp1 - fp0) / (xp1 - xp0);
    let interp = slope * (epoch as f64 - xp0) + fp0;
    let q = interp / 32.0;
    // Python's round: to the nearest integer, a tie to the even one.
    let (fl, frac) = (q.floor(), q - q.floor());
    let r = if frac > 0.5 || (frac == 0.5 && fl % 2.0 != 0.0) { fl + 1.0 } else { fl };
    r as u32 * 32
}

#[test]
fn the_schedule_is_ffcvs_get_resolution() {
    let mut checked = 0;
    for min_res in (32..=256).step_by(32) {
        for max_res in (min_res..=320).step_by(32) {
            for start_ramp in 0..6u64 {
                for end_ramp in start_ramp..start_ramp + 9 {
                    let r = ResolutionSchedule { min_res, max_res, start_ramp, end_ramp };
                    r.validate().unwrap();
                    for epoch in 0..end_ramp + 3 {
                        let got = r.size(epoch);
                        assert_eq!(got, ffcv(min_res, max_res, start_ramp, end_ramp, epoch), "{r:?} epoch {epoch}");
                        assert!((min_res..=max_res).contains(&got), "{r:?} epoch {epoch}: {got}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 10_000);
    // ffcv-imagenet's own configs (rn50_88_epochs.yaml: 160 → 192 over epochs 65..76).
    let r = ResolutionSchedule { min_res: 160, max_res: 192, start_ramp: 65, end_ramp: 76 };
    let sizes: Vec<u32> = (60..80).map(|e| r.size(e)).collect();
    let first_192 = 60 + sizes.iter().position(|&s| s == 192).unwrap() as u64;
    // 160 + 32 · (e − 65) / 11 reaches 176 (the tie, rounded to 192) at e = 70.5: 71.
    assert_eq!(first_192, 71);
}

/// Small batches with a recipe whose draws depend on the output size (affine translation).
fn options() -> PipelineOptions {
    PipelineOptions {
        batch_size: Some(4),
        seed: Some(3),
        backend: Some(BackendKind::Cpu),
        threads: Some(2),
        color_jitter: Some(vec![0.4]),
        affine_degrees: Some(vec![10.0]),
        affine_translate: Some((0.1, 0.1)),
        ..PipelineOptions::default()
    }
}

const SCHEDULE: ResolutionSchedule = ResolutionSchedule { min_res: 32, max_res: 96, start_ramp: 1, end_ramp: 3 };

/// The next `take` batches of the epoch running (all that are left: `None`).
fn take(p: &mut Pipeline, take: Option<usize>) -> Vec<Batch> {
    let mut out = Vec::new();
    while take.is_none_or(|k| out.len() < k) {
        match p.next_batch() {
            Some(b) => out.push(b.unwrap()),
            None => break,
        }
    }
    out
}

/// Every batch of `epoch`.
fn epoch(p: &mut Pipeline, epoch: u64) -> Vec<Batch> {
    p.start_epoch(epoch, 0);
    take(p, None)
}

#[test]
fn every_batch_of_an_epoch_has_its_size_and_is_the_fixed_size_pipelines_batch() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let o = PipelineOptions { resolution: Some(SCHEDULE), ..options() };
    let c = o.to_config(dir.path(), OptionNames::Cli).unwrap();
    assert_eq!((c.augment.size, c.resolution), ((96, 96), Some(SCHEDULE)), "memory sized for max_res");
    let mut p = Pipeline::new(c.clone()).unwrap();
    // Epochs out of order: each has its own size whatever ran before.
    for e in [3u64, 0, 2, 1, 4] {
        let s = SCHEDULE.size(e);
        assert_eq!(s, [32, 32, 64, 96, 96][e as usize]);
        let got = epoch(&mut p, e);
        assert_eq!(got.len(), 3);
        let fixed = PipelineOptions { size: Some(s), ..options() }.to_config(dir.path(), OptionNames::Cli).unwrap();
        let mut q = Pipeline::new(fixed).unwrap();
        let want = epoch(&mut q, e);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.shape, [g.len(), 3, s as usize, s as usize], "epoch {e}");
            assert_eq!((g.groups[0].width, g.groups[0].height), (s as usize, s as usize));
            assert!(g.params.iter().all(|p| (p.out_w, p.out_h) == (s as i32, s as i32)));
            assert_eq!(g.params, w.params, "epoch {e}: the fixed-size pipeline's draws");
            assert!(g.host_bytes().unwrap() == w.host_bytes().unwrap(), "epoch {e} step {}: the fixed-size pipeline's pixels", g.step);
        }
    }
}

#[test]
fn a_resumed_epoch_keeps_its_size_and_continues_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let c = PipelineOptions { resolution: Some(SCHEDULE), ..options() }.to_config(dir.path(), OptionNames::Cli).unwrap();
    let whole = epoch(&mut Pipeline::new(c.clone()).unwrap(), 2);
    let mut p = Pipeline::new(c.clone()).unwrap();
    p.start_epoch(2, 0);
    let head = take(&mut p, Some(1));
    let state: stoke::state::ResumeState = serde_json::from_str(&serde_json::to_string(&p.state()).unwrap()).unwrap();
    drop(p);
    let mut q = Pipeline::new(c).unwrap();
    q.resume(&state).unwrap();
    let tail = take(&mut q, None);
    let resumed: Vec<&Batch> = head.iter().chain(&tail).collect();
    assert_eq!(resumed.len(), whole.len());
    for (r, w) in resumed.iter().zip(&whole) {
        assert_eq!(r.shape, [r.len(), 3, 64, 64], "epoch 2's size");
        assert_eq!((&r.params, &r.labels), (&w.params, &w.labels));
        assert!(r.host_bytes().unwrap() == w.host_bytes().unwrap(), "step {}: the uninterrupted run's pixels", r.step);
    }
}

#[test]
fn the_crop_ratio_sets_the_eval_crop_as_computed_by_hand() {
    // The default is torchvision's Resize(size·256/224): the same integer at every size.
    for size in 1..=8192u32 {
        assert_eq!(AugmentSpec::eval(size).crop, CropMode::ResizeCenter { shorter: size * 256 / 224 }, "size {size}");
    }
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let o = PipelineOptions { preset: Preset::Eval, size: Some(32), crop_ratio: Some(0.5), no_shuffle: true, ..options() };
    let c = o.to_config(dir.path(), OptionNames::Python).unwrap();
    // ⌊32 / 0.5⌋ = 64.
    assert_eq!(c.augment.crop, CropMode::ResizeCenter { shorter: 64 });
    let b = epoch(&mut Pipeline::new(c).unwrap(), 0);
    // a/00.jpg is 120×90: Resize(64) → (⌊64·120/90⌋, 64) = (85, 64); CenterCrop(32) at
    // (round((85 − 32) / 2), (64 − 32) / 2) = (round(26.5) = 26, half to even, 16).
    let p = b[0].params[0];
    assert_eq!((p.src_w, p.src_h), (120, 90));
    assert_eq!((p.resize_w, p.resize_h, p.win_x, p.win_y, p.out_w, p.out_h), (85, 64, 26, 16, 32, 32));
    // A ratio of 1: the crop is the whole shorter side.
    let o = PipelineOptions { preset: Preset::Eval, size: Some(32), crop_ratio: Some(1.0), ..options() };
    assert_eq!(o.to_config(dir.path(), OptionNames::Cli).unwrap().augment.crop, CropMode::ResizeCenter { shorter: 32 });
}

#[test]
fn bad_schedules_and_crop_ratios_are_named() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let r = |min_res, max_res, start_ramp, end_ramp| Some(ResolutionSchedule { min_res, max_res, start_ramp, end_ramp });
    let err = |o: PipelineOptions, names| o.to_config(dir.path(), names).unwrap_err().to_string();
    for (o, names, want) in [
        (
            PipelineOptions { resolution: r(192, 160, 1, 2), ..options() },
            OptionNames::Cli,
            "--resolution: min_res 192 is larger than max_res 160",
        ),
        (
            PipelineOptions { resolution: r(0, 160, 1, 2), ..options() },
            OptionNames::Python,
            "resolution: min_res and max_res must be at least 32, got 0 and 160",
        ),
        (
            PipelineOptions { resolution: r(160, 192, 4, 2), ..options() },
            OptionNames::Cli,
            "--resolution: end_ramp 2 is before start_ramp 4",
        ),
        (PipelineOptions { resolution: r(160, 200, 1, 2), ..options() }, OptionNames::Cli, "multiples of 32"),
        (
            PipelineOptions { resolution: r(160, 192, 1, 2), size: Some(192), ..options() },
            OptionNames::Cli,
            "--size 192 and --resolution both set the output size",
        ),
        (
            PipelineOptions { resolution: r(160, 192, 1, 2), preset: Preset::Eval, ..options() },
            OptionNames::Cli,
            "resolution with the eval preset's centre crop: refused",
        ),
        (
            PipelineOptions {
                resolution: r(32, 64, 1, 2),
                views: Some(ViewOptions::parse_list(r#"[{"count": 2}]"#, OptionNames::Cli).unwrap()),
                ..options()
            },
            OptionNames::Cli,
            "resolution with views: refused",
        ),
        (
            PipelineOptions { resolution: r(32, 64, 1, 2), blur_prob: Some(1.0), blur_kernel: Some(75), ..options() },
            OptionNames::Cli,
            "resolution: at min_res 32: blur_kernel 75",
        ),
        (
            PipelineOptions { preset: Preset::Eval, crop_ratio: Some(0.0), ..options() },
            OptionNames::Cli,
            "--crop-ratio must be in (0, 1] (the crop's share of the resized shorter side), got 0",
        ),
        (PipelineOptions { preset: Preset::Eval, crop_ratio: Some(1.5), ..options() }, OptionNames::Python, "crop_ratio must be in (0, 1]"),
        (PipelineOptions { preset: Preset::Eval, crop_ratio: Some(-0.5), ..options() }, OptionNames::Python, "got -0.5"),
        (PipelineOptions { preset: Preset::Eval, crop_ratio: Some(f64::NAN), ..options() }, OptionNames::Python, "got NaN"),
        (
            PipelineOptions { preset: Preset::Eval, crop_ratio: Some(1e-4), ..options() },
            OptionNames::Python,
            "crop_ratio 0.0001 resizes the shorter side to 2240000 for a 224 crop: at most 65536",
        ),
        (PipelineOptions { crop_ratio: Some(0.5), ..options() }, OptionNames::Cli, "--crop-ratio applies to the eval preset's centre crop"),
    ] {
        let e = err(o, names);
        assert!(e.contains(want), "{e}\n  want: {want}");
    }
    // A config whose augment is not max_res (a file that sets the field alone) is named too.
    let mut c = PipelineConfig::new(dir.path());
    c.resolution = r(160, 192, 1, 2);
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("the augment's size must be max_res 192x192") && e.contains("got 224x224"), "{e}");
    // The same schedule in a config file's "recipe" is the option's.
    let f = dir.path().join("c.json");
    std::fs::write(&f, r#"{"recipe": {"resolution": {"min_res": 32, "max_res": 64, "start_ramp": 0, "end_ramp": 1}}}"#).unwrap();
    let c = PipelineOptions { config: Some(f), ..options() }.to_config(dir.path(), OptionNames::Cli).unwrap();
    assert_eq!((c.augment.size, c.size_at(0), c.size_at(1)), ((64, 64), (32, 32), (64, 64)));
}
