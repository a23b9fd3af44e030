//! The pipeline end to end with the CPU backend on a folder dataset the test writes.

use jpeg_encoder::{ColorType, Encoder};
use std::path::Path;
use stoke::config::{AugmentSpec, BackendKind, DType, Layout, OnError, PipelineConfig};
use stoke::pipeline::Pipeline;

fn write_jpeg(path: &Path, w: u16, h: u16, seed: usize) {
    let mut rgb = Vec::new();
    for y in 0..h as usize {
        for x in 0..w as usize {
            rgb.push(((x * 2 + seed * 37) % 256) as u8);
            rgb.push(((y * 3 + seed * 11) % 256) as u8);
            rgb.push(((x + y + seed) % 256) as u8);
        }
    }
    let mut out = Vec::new();
    Encoder::new(&mut out, 90).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    std::fs::write(path, out).unwrap();
}

/// root/{cat,dog}/NN.jpg: 11 images of assorted sizes, one of them truncated if `broken`.
fn dataset(root: &Path, broken: bool) {
    for (c, class) in ["cat", "dog"].iter().enumerate() {
        std::fs::create_dir_all(root.join(class)).unwrap();
        for i in 0..(5 + c) {
            let p = root.join(class).join(format!("{i:02}.jpg"));
            write_jpeg(&p, 40 + 13 * i as u16, 30 + 7 * (c + i) as u16, c * 10 + i);
        }
    }
    if broken {
        let p = root.join("dog").join("02.jpg");
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() / 2]).unwrap();
    }
}

fn config(root: &Path, threads: usize) -> PipelineConfig {
    let mut c = PipelineConfig::new(root);
    c.augment = AugmentSpec::train(24);
    c.batch_size = 4;
    c.seed = 3;
    c.backend = BackendKind::Cpu;
    c.cpu_threads = threads;
    c.on_error = OnError::Skip;
    c
}

/// Images bytes, labels, positions, indices of one batch.
type Seen = (Vec<u8>, Vec<i64>, Vec<u64>, Vec<usize>);

/// What every batch of one epoch held.
fn run_epoch(p: &mut Pipeline, epoch: u64, start: u64) -> Vec<Seen> {
    p.start_epoch(epoch, start);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        out.push((b.host_bytes().unwrap().to_vec(), b.labels.clone(), b.positions.clone(), b.indices.clone()));
        p.recycle(b);
    }
    out
}

#[test]
fn every_sample_once_per_epoch_and_the_same_bytes_whatever_the_threads() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let mut p1 = Pipeline::new(config(dir.path(), 1)).unwrap();
    let mut p2 = Pipeline::new(config(dir.path(), 2)).unwrap();
    assert_eq!(p1.steps_per_epoch(), 3);
    let a = run_epoch(&mut p1, 0, 0);
    let b = run_epoch(&mut p2, 0, 0);
    assert_eq!(a, b);
    assert_eq!(a.len(), 3);
    let mut idx: Vec<usize> = a.iter().flat_map(|x| x.3.clone()).collect();
    idx.sort();
    assert_eq!(idx, (0..11).collect::<Vec<_>>());
    for (bytes, labels, _, indices) in &a {
        assert_eq!(bytes.len(), labels.len() * 3 * 24 * 24 * 4);
        for (l, i) in labels.iter().zip(indices) {
            assert_eq!(*l, p1.dataset().sample(*i).label);
        }
    }
    // Another epoch is another order and other crops.
    let c = run_epoch(&mut p1, 1, 0);
    assert_ne!(a, c);
    // Resume at step 1 gives exactly the tail of the full epoch.
    let tail = run_epoch(&mut p2, 1, 1);
    assert_eq!(&c[1..], &tail[..]);
    let s = p1.stats();
    assert_eq!((s.batches, s.images, s.substitutes), (6, 22, 0));
    assert!(s.bytes > 0 && s.decode > std::time::Duration::ZERO);
}

#[test]
fn a_broken_file_is_substituted_and_named() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), true);
    let mut c = config(dir.path(), 2);
    c.output.dtype = DType::F16;
    c.output.layout = Layout::Nhwc;
    let mut p = Pipeline::new(c.clone()).unwrap();
    p.start_epoch(0, 0);
    let mut subs = Vec::new();
    let mut n = 0;
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        assert_eq!(b.shape[1..], [24, 24, 3]);
        n += b.len();
        subs.extend(b.substitutes.clone());
    }
    assert_eq!(n, 11);
    assert_eq!(subs.len(), 1, "{subs:?}");
    assert!(subs[0].key.contains("02") && subs[0].reason.contains("02.jpg"), "{:?}", subs[0]);
    // Under `fail` the same epoch stops with an error naming the file.
    c.on_error = OnError::Fail;
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(0, 0);
    let mut err = None;
    while let Some(b) = p.next_batch() {
        if let Err(e) = b {
            err = Some(e.to_string());
        }
    }
    let err = err.expect("an error under fail");
    assert!(err.contains("02.jpg"), "{err}");
}

#[test]
fn dropping_mid_epoch_and_restarting_do_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let mut p = Pipeline::new(config(dir.path(), 2)).unwrap();
    p.start_epoch(0, 0);
    let first = p.next_batch().unwrap().unwrap();
    p.start_epoch(0, 0); // restart: the batches made ahead are dropped
    let again = p.next_batch().unwrap().unwrap();
    assert_eq!(first.host_bytes(), again.host_bytes());
    assert!(p.next_batch().is_some());
    drop(p); // mid-epoch, with batches in flight
    let mut q = Pipeline::new(config(dir.path(), 1)).unwrap();
    assert!(q.next_batch().is_none(), "no epoch started yet");
}
