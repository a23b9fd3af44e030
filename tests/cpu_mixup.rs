//! Mixup / CutMix through the CPU pipeline and the command line: soft targets beside the
//! images, every mixed image equal to timm's formula over the same run without mixing (a naive
//! statement of it here, not the library's code), the same bytes whatever the thread count,
//! and bad values named.

use std::path::Path;
use stoke::config::{BackendKind, DType, Layout, MixupMode, MixupSpec, PipelineConfig};
use stoke::pipeline::Pipeline;

fn dataset(root: &Path) {
    let mut cfg = stoke::gen::GenConfig::new(26);
    cfg.classes = 5;
    cfg.seed = 2;
    stoke::gen::generate(root, &cfg, &|_| {}).unwrap();
}

fn config(root: &Path, threads: usize, mixup: MixupSpec) -> PipelineConfig {
    let mut c = PipelineConfig::new(root);
    c.augment = stoke::config::AugmentSpec::train(24);
    c.output.dtype = DType::F32;
    c.output.layout = Layout::Nhwc;
    c.batch_size = 8;
    c.seed = 11;
    c.backend = BackendKind::Cpu;
    c.cpu_threads = threads;
    c.mixup = mixup;
    c
}

/// Images as f32, labels, targets and classes of one batch.
type Seen = (Vec<f32>, Vec<i64>, Vec<f32>, usize);

/// Every batch of epoch 1.
fn epoch(c: PipelineConfig) -> Vec<Seen> {
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(1, 0);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        let x: Vec<f32> = b.host_bytes().unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        out.push((x, b.labels.clone(), b.targets.clone(), b.num_classes));
        p.recycle(b);
    }
    out
}

#[test]
fn mixed_batches_are_timms_formula_over_the_unmixed_run_with_soft_targets() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path());
    let plain = epoch(config(dir.path(), 2, MixupSpec::default()));
    assert!(plain.iter().all(|b| b.2.is_empty() && b.3 == 0), "no targets without mixing");
    let (mut blends, mut boxes) = (0, 0);
    for mode in [MixupMode::Batch, MixupMode::Pair, MixupMode::Elem] {
        let spec = MixupSpec { mixup: 0.8, cutmix: 1.0, smoothing: 0.1, mode, ..MixupSpec::default() };
        let mixed = epoch(config(dir.path(), 2, spec.clone()));
        assert_eq!(mixed, epoch(config(dir.path(), 1, spec.clone())), "{mode:?}: same bytes with 1 and 2 threads");
        let (w, h) = (24usize, 24usize);
        let per = w * h * 3;
        for ((x0, y, _, _), (x1, y1, t, classes)) in plain.iter().zip(&mixed) {
            assert_eq!((y, *classes), (y1, 5));
            let n = y.len();
            let (off, on) = (0.1f32 / 5.0, 0.9f32 + 0.1 / 5.0);
            for i in 0..n {
                let j = n - 1 - i;
                let row = &t[i * 5..(i + 1) * 5];
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
                if i == j || y[i] == y[j] {
                    continue;
                }
                // lam from the targets: row[y_i] = lam·on + (1−lam)·off.
                let lam = (row[y[i] as usize] - off) / (on - off);
                let own = &x1[i * per..(i + 1) * per];
                let (a, b) = (&x0[i * per..(i + 1) * per], &x0[j * per..(j + 1) * per]);
                if (lam - 1.0).abs() < 1e-6 {
                    assert_eq!(own, a, "unmixed sample {i}");
                    continue;
                }
                // Blend: every element lam·a + (1−lam)·b. Box: each element is a's or b's, and
                // the share of b's pixels is 1 − lam.
                let blend = own.iter().zip(a.iter().zip(b)).all(|(o, (a, b))| (o - (a * lam + b * (1.0 - lam))).abs() < 1e-4);
                if blend {
                    blends += 1;
                    continue;
                }
                let mut from_b = 0usize;
                for p in 0..w * h {
                    let (o, pa, pb) = (&own[p * 3..p * 3 + 3], &a[p * 3..p * 3 + 3], &b[p * 3..p * 3 + 3]);
                    if o == pb && o != pa {
                        from_b += 1;
                    } else {
                        assert!(o == pa || o == pb, "sample {i} pixel {p}: neither its own nor its partner's");
                    }
                }
                let share = from_b as f32 / (w * h) as f32;
                assert!((share - (1.0 - lam)).abs() < 0.06, "sample {i}: box share {share} vs 1 - lam {}", 1.0 - lam);
                boxes += 1;
            }
        }
    }
    assert!(blends > 0 && boxes > 0, "{blends} blends, {boxes} boxes");
}

#[test]
fn the_command_line_takes_timms_flags_and_names_bad_values() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    dataset(&ds);
    let out = dir.path().join("out");
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
            .args(["dump"])
            .arg(&ds)
            .arg("--out")
            .arg(&out)
            .args(["--batch-size", "4", "--batches", "1", "--size", "16", "--backend", "cpu"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&["--mixup", "0.8", "--cutmix", "1.0", "--mixup-mode", "elem", "--smoothing", "0.1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = std::fs::read(out.join("batch_00000.targets.npy")).unwrap();
    let header = String::from_utf8_lossy(&t[10..80]).to_string();
    assert!(header.contains("'<f4'") && header.contains("(4, 5)"), "{header}");
    for (args, word) in [
        (&["--mixup=-0.5"][..], "mixup"),
        (&["--cutmix-minmax", "0.6,0.2"][..], "cutmix_minmax"),
        (&["--cutmix-minmax", "0.2"][..], "--cutmix-minmax"),
        (&["--mixup-prob", "2"][..], "mixup_prob"),
        (&["--mixup", "1", "--num-classes", "3"][..], "num_classes 3 is fewer than the dataset's 5 classes"),
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success() && err.contains(word), "{args:?}: {err}");
    }
}
