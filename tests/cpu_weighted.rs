//! Weighted sampling through the whole pipeline (CPU backend) and `stoke dump`, on an
//! imbalanced folder dataset the test writes: 30 images of class `a`, 3 of class `b`.

use jpeg_encoder::{ColorType, Encoder};
use std::path::Path;
use stoke::config::{AugmentSpec, BackendKind, PipelineConfig, Sampling, WeightSource};
use stoke::pipeline::Pipeline;

fn write_jpeg(path: &Path, w: u16, h: u16, seed: usize) {
    let mut rgb = Vec::new();
    for y in 0..h as usize {
        for x in 0..w as usize {
            rgb.extend([((x * 5 + seed * 37) % 256) as u8, ((y * 3 + seed * 11) % 256) as u8, ((x + y + seed) % 256) as u8]);
        }
    }
    let mut out = Vec::new();
    Encoder::new(&mut out, 90).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    std::fs::write(path, out).unwrap();
}

/// root/a/NN.jpg (30 images, label 0) and root/b/NN.jpg (3 images, label 1).
fn imbalanced(root: &Path) {
    for (c, (class, n)) in [("a", 30), ("b", 3)].into_iter().enumerate() {
        std::fs::create_dir_all(root.join(class)).unwrap();
        for i in 0..n {
            write_jpeg(&root.join(class).join(format!("{i:02}.jpg")), 16 + i as u16, 12 + c as u16, c * 100 + i);
        }
    }
}

fn config(root: &Path, sampling: Sampling, threads: usize, readers: usize) -> PipelineConfig {
    let mut c = PipelineConfig::new(root);
    c.augment = AugmentSpec::train(8);
    c.batch_size = 16;
    c.seed = 11;
    c.backend = BackendKind::Cpu;
    c.cpu_threads = threads;
    c.reader_threads = readers;
    c.sampling = sampling;
    c
}

fn balanced(len: u64) -> Sampling {
    Sampling::Weighted { weights: WeightSource::ClassBalanced, epoch_length: Some(len) }
}

/// (image bytes, labels, indices, positions) of every batch of `epoch` from `start`.
type Seen = Vec<(Vec<u8>, Vec<i64>, Vec<usize>, Vec<u64>)>;

fn run(p: &mut Pipeline, epoch: u64, start: u64) -> Seen {
    p.start_epoch(epoch, start);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        out.push((b.host_bytes().unwrap().to_vec(), b.labels.clone(), b.indices.clone(), b.positions.clone()));
        p.recycle(b);
    }
    out
}

fn labels(seen: &Seen) -> Vec<i64> {
    seen.iter().flat_map(|b| b.1.iter().copied()).collect()
}

#[test]
fn class_balanced_epoch_is_near_half_and_half_has_its_length_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    imbalanced(dir.path());
    let mut p = Pipeline::new(config(dir.path(), balanced(400), 1, 1)).unwrap();
    assert_eq!(p.steps_per_epoch(), 25);
    let a = run(&mut p, 0, 0);
    let l = labels(&a);
    assert_eq!(l.len(), 400, "the epoch length is honoured");
    assert_eq!(a.len(), 25);
    // Binomial(400, 1/2): sd 10, so 160..240 is ±4 sd. A permutation epoch gives 3/33 of b
    // (about 36 of 400) and fails this.
    let b = l.iter().filter(|&&x| x == 1).count();
    assert!((160..=240).contains(&b), "{b} of 400 from the 3-image class");
    assert_eq!(l.iter().filter(|&&x| x == 0).count(), 400 - b);
    // With replacement: the 3 class-b images come back many times; labels match the index.
    let mut b_indices: Vec<usize> = a.iter().flat_map(|s| s.1.iter().zip(&s.2)).filter(|(l, _)| **l == 1).map(|(_, i)| *i).collect();
    b_indices.sort();
    b_indices.dedup();
    assert_eq!(b_indices.len(), 3);
    for (_, ls, is, _) in &a {
        for (l, i) in ls.iter().zip(is) {
            assert_eq!(*l, p.dataset().expect("per-sample index").sample(*i).label);
        }
    }
    let positions: Vec<u64> = a.iter().flat_map(|s| s.3.iter().copied()).collect();
    assert_eq!(positions, (0..400).collect::<Vec<_>>());
    // Same seed and config: bit-identical whatever the thread counts.
    for (threads, readers) in [(3, 2), (2, 4)] {
        let mut q = Pipeline::new(config(dir.path(), balanced(400), threads, readers)).unwrap();
        assert_eq!(run(&mut q, 0, 0), a, "threads {threads}, readers {readers}");
    }
    // Resume at (epoch, step) replays nothing and delivers the same tail.
    assert_eq!(run(&mut p, 0, 10), a[10..].to_vec());
    // Another epoch draws another order.
    assert_ne!(labels(&run(&mut p, 1, 0)), l);
}

#[test]
fn per_class_weights_set_the_class_mix_and_wrong_lists_are_named() {
    let dir = tempfile::tempdir().unwrap();
    imbalanced(dir.path());
    let w = |w: Vec<f64>| Sampling::Weighted { weights: WeightSource::PerClass(w), epoch_length: Some(400) };
    let mut p = Pipeline::new(config(dir.path(), w(vec![1.0, 3.0]), 2, 2)).unwrap();
    let l = labels(&run(&mut p, 0, 0));
    assert_eq!(l.len(), 400);
    // Binomial(400, 3/4): sd ≈ 8.7; ±4 sd.
    let b = l.iter().filter(|&&x| x == 1).count();
    assert!((265..=335).contains(&b), "{b} of 400 from class b at weight 3:1");
    // A zero weight never draws the class.
    let mut p = Pipeline::new(config(dir.path(), w(vec![0.0, 1.0]), 1, 1)).unwrap();
    assert!(labels(&run(&mut p, 0, 0)).iter().all(|&x| x == 1));
    // One weight per class.
    let e = Pipeline::new(config(dir.path(), w(vec![1.0, 2.0, 3.0]), 1, 1)).err().unwrap().to_string();
    assert!(e.contains("3 class weights given but the dataset has 2 classes"), "{e}");
    let e = Pipeline::new(config(dir.path(), w(vec![1.0, f64::NAN]), 1, 1)).err().unwrap().to_string();
    assert!(e.contains("class weight 1 must be finite and >= 0, got NaN"), "{e}");
    // Without an epoch length, a weighted epoch is the dataset size.
    let s = Sampling::Weighted { weights: WeightSource::ClassBalanced, epoch_length: None };
    let mut p = Pipeline::new(config(dir.path(), s, 1, 1)).unwrap();
    assert_eq!(labels(&run(&mut p, 0, 0)).len(), 33);
}

fn stoke(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_stoke")).args(args).output().unwrap()
}

#[test]
fn dump_with_class_balanced_and_epoch_length_writes_that_many_samples() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    imbalanced(&ds);
    let out = dir.path().join("out");
    let (ds_s, out_s) = (ds.to_str().unwrap(), out.to_str().unwrap());
    let common = ["dump", ds_s, "--out", out_s, "--batches", "0", "--size", "8", "--backend", "cpu", "--batch-size", "8"];
    let o = stoke(&[&common[..], &["--class-balanced", "--epoch-length", "37"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let samples = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    assert_eq!(samples.lines().count(), 37);
    assert!(out.join("batch_00004.npy").exists() && !out.join("batch_00005.npy").exists());
    // --class-weights reaches the pipeline: all weight on class b.
    let out2 = dir.path().join("out2");
    let mut args = common.to_vec();
    args[3] = out2.to_str().unwrap();
    let o = stoke(&[&args[..], &["--class-weights", "0,1", "--epoch-length", "20"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let samples = std::fs::read_to_string(out2.join("samples.jsonl")).unwrap();
    assert_eq!(samples.lines().count(), 20);
    for line in samples.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["label"], 1, "{line}");
    }
    // Errors name the numbers.
    let o = stoke(&[&common[..], &["--class-weights", "1,2,3"]].concat());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("3 class weights given but the dataset has 2 classes"), "{e}");
    let o = stoke(&[&common[..], &["--epoch-length", "5"]].concat());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--epoch-length 5 needs --class-balanced or --class-weights"), "{e}");
    let o = stoke(&[&common[..], &["--class-balanced", "--class-weights", "1,1"]].concat());
    assert!(!o.status.success());
    // plan shows the same order dump delivered.
    let o = stoke(&["plan", ds_s, "--class-weights", "0,1", "--epoch-length", "20"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let keys: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect();
    let dumped: Vec<String> =
        samples.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["key"].as_str().unwrap().to_string()).collect();
    assert_eq!(keys, dumped);
}
