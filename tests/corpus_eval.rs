//! Opt-in: the eval preset through the whole CPU pipeline against torchvision's eval
//! transforms done with Pillow (Resize(256) bilinear antialiased + CenterCrop(224), EXIF
//! orientation applied) on the corpus's real photos: per-image mean absolute difference
//! ≤ 1.5 uint8 levels.
//!
//! `STOKE_CORPUS=/path/to/corpus/dev cargo test --release --test corpus_eval -- --nocapture`
//! (needs python3 with Pillow and numpy; run from the repository root).

use std::collections::HashMap;
use std::path::PathBuf;
use stoke::config::{AugmentSpec, BackendKind, DType, Layout, PipelineConfig};
use stoke::pipeline::Pipeline;

/// The bound: Pillow rounds to uint8 after each of its two resize passes, stoke stays
/// in f32; decode is bit-exact, so what remains is rounding (measured mean ≈ 0.25).
const EVAL_MEAN_ABS_TOL: f64 = 1.5;

#[test]
fn eval_preset_matches_pillow_on_real_photos() {
    let Some(corpus) = std::env::var_os("STOKE_CORPUS").map(PathBuf::from) else {
        eprintln!("STOKE_CORPUS not set: skipped");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let refdir = tmp.path().join("pillow");
    let st = std::process::Command::new("python3")
        .args(["scripts/golden.py", "eval-corpus"])
        .arg(&corpus)
        .arg("--out")
        .arg(&refdir)
        .status()
        .expect("python3 scripts/golden.py (run from the repository root)");
    assert!(st.success());
    let mut want: HashMap<String, PathBuf> = HashMap::new();
    for line in std::fs::read_to_string(refdir.join("list.tsv")).unwrap().lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f[1] == "ok" {
            let name = PathBuf::from(f[0]).file_name().unwrap().to_string_lossy().to_string();
            want.insert(name, refdir.join(f[4]));
        }
    }
    // An ImageFolder view of imagenet_like/ and the EXIF orientation samples (tags 1..8).
    let ds = tmp.path().join("ds");
    for (src, class) in [("imagenet_like", "photos"), ("conformance/exif-orientation", "exif")] {
        std::fs::create_dir_all(ds.join(class)).unwrap();
        for e in std::fs::read_dir(corpus.join(src)).unwrap() {
            let p = e.unwrap().path();
            std::os::unix::fs::symlink(&p, ds.join(class).join(p.file_name().unwrap())).unwrap();
        }
    }
    let mut c = PipelineConfig::new(&ds);
    c.augment = AugmentSpec::eval(224);
    c.backend = BackendKind::Cpu;
    c.shuffle = false;
    c.batch_size = 50;
    c.output.dtype = DType::F32;
    c.output.layout = Layout::Nhwc;
    c.output.mean = [0.0; 3];
    c.output.std = [1.0 / 255.0; 3];
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(0, 0);
    let (mut compared, mut worst) = (0, (0.0f64, String::new()));
    let mut over = Vec::new();
    let mut exif = 0;
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        let bytes = b.host_bytes().unwrap();
        let per = b.sample_bytes();
        for slot in 0..b.len() {
            if b.substitutes.iter().any(|s| s.slot == slot) {
                continue;
            }
            let key = &p.dataset().expect("per-sample index").sample(b.indices[slot]).key;
            let name = key.rsplit('/').next().unwrap().to_string();
            let Some(refpath) = want.get(&name) else { continue };
            let r = std::fs::read(refpath).unwrap();
            let ours = &bytes[slot * per..(slot + 1) * per];
            let sum: f64 =
                ours.chunks_exact(4).zip(&r).map(|(o, &e)| (f32::from_le_bytes(o.try_into().unwrap()) as f64 - e as f64).abs()).sum();
            let mean = sum / r.len() as f64;
            compared += 1;
            exif += key.starts_with("exif/") as usize;
            if mean > worst.0 {
                worst = (mean, name.clone());
            }
            if mean > EVAL_MEAN_ABS_TOL {
                over.push((name, mean));
            }
        }
    }
    eprintln!("{compared} photos compared with Pillow, worst per-image mean abs diff {:.4} ({})", worst.0, worst.1);
    assert!(compared >= 290, "only {compared} photos compared");
    assert!(exif >= 8, "only {exif} EXIF-oriented files compared");
    assert!(over.is_empty(), "over {EVAL_MEAN_ABS_TOL}: {over:?}");
}
