//! The reader against a naive reference: the sampler's order read one sample at a time with
//! `Dataset::read_bytes`, params drawn with `augment::params::draw`.

mod dataset_common;

use dataset_common::*;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use stoke::augment::params::draw;
use stoke::config::OnError;
use stoke::reader::{ReadBatch, Reader};
use stoke::sampler::{Sampler, SamplerConfig, Weights};
use stoke::source::{Dataset, IndexOptions, Location};
use stoke::PipelineConfig;

fn dataset(root: &Path, cache: &Path) -> Arc<Dataset> {
    let o = IndexOptions { cache_dir: Some(cache.to_path_buf()), ..IndexOptions::default() };
    Arc::new(Dataset::open(root, &o).unwrap())
}

fn config(root: &Path, threads: usize, prefetch: usize) -> PipelineConfig {
    let mut c = PipelineConfig::new(root);
    c.batch_size = 4;
    c.seed = 11;
    c.reader_threads = threads;
    c.prefetch_batches = prefetch;
    c
}

/// (epoch, step, [(index, position, bytes, params, error?)]) for a whole batch.
type Flat = (u64, u64, Vec<(usize, u64, Vec<u8>, Vec<stoke::AugParams>, Option<String>)>);

fn flatten(b: &ReadBatch) -> Flat {
    let s = b
        .samples
        .iter()
        .map(|s| (s.index, s.position, b.data[s.bytes.clone()].to_vec(), s.params.clone(), s.error.as_ref().map(|e| e.to_string())))
        .collect();
    (b.epoch, b.step, s)
}

fn run_epoch(r: &mut Reader, epoch: u64, start: u64) -> Vec<Flat> {
    r.start_epoch(epoch, start);
    take_rest(r)
}

/// The rest of the epoch running, to its end.
fn take_rest(r: &mut Reader) -> Vec<Flat> {
    let mut out = Vec::new();
    while let Some(b) = r.next_batch() {
        let b = b.unwrap();
        out.push(flatten(&b));
        r.recycle(b);
    }
    out
}

/// The naive reference for one epoch.
fn reference(d: &Dataset, c: &PipelineConfig, epoch: u64) -> Vec<Flat> {
    let s = Sampler::new(d.len(), &SamplerConfig::from_pipeline(c)).unwrap();
    let all: Vec<(u64, usize)> = s.iter(epoch, 0).collect();
    all.chunks(c.batch_size)
        .enumerate()
        .map(|(step, chunk)| {
            let samples = chunk
                .iter()
                .map(|&(p, i)| {
                    let mut buf = Vec::new();
                    d.read_bytes(i, &mut buf).unwrap();
                    let info = d.sample(i).info.unwrap();
                    let params = draw(&c.augment, c.seed, epoch, p, info.width as i32, info.height as i32, info.orientation as u32);
                    (i, p, buf, vec![params], None)
                })
                .collect();
            (epoch, step as u64, samples)
        })
        .collect()
}

#[test]
fn batches_match_the_reference_whatever_the_thread_count() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b", "c"], &[7, 5, 6]);
    let mut j = Jpeg::new(300, 200);
    j.exif = Some((6, true));
    write(&root.join("a/rotated.jpg"), &j.bytes());
    let d = dataset(&root, t.path());
    let want0 = reference(&d, &config(&root, 1, 1), 0);
    let want1 = reference(&d, &config(&root, 1, 1), 1);
    assert_eq!(want0.len(), 5); // 19 samples, batches of 4
    assert_ne!(want0, want1);
    for (threads, prefetch) in [(1, 1), (2, 2), (4, 1), (3, 8)] {
        let mut r = Reader::new(d.clone(), &config(&root, threads, prefetch)).unwrap();
        // Several epochs on the same (persistent) threads.
        assert_eq!(run_epoch(&mut r, 0, 0), want0, "threads {threads} prefetch {prefetch}");
        assert_eq!(run_epoch(&mut r, 1, 0), want1);
        assert_eq!(run_epoch(&mut r, 0, 0), want0);
        // Resume at step 3: exactly the tail, nothing replayed.
        assert_eq!(run_epoch(&mut r, 1, 3), want1[3..]);
        assert!(r.next_batch().is_none());
    }
}

/// `try_next_batch` (the pipeline's peek at the next batch, never waiting) interleaved with
/// `next_batch` delivers the same batches in the same order, none twice, none lost; once the
/// epoch is over both say `None`.
#[test]
fn peeking_never_waits_and_keeps_the_order() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b", "c"], &[7, 5, 6]);
    let d = dataset(&root, t.path());
    let want = reference(&d, &config(&root, 1, 1), 0);
    let mut r = Reader::new(d.clone(), &config(&root, 2, 2)).unwrap();
    r.start_epoch(0, 0);
    let (mut got, mut peeked) = (Vec::new(), 0);
    while let Some(b) = r.next_batch() {
        got.push(flatten(&b.unwrap()));
        // Peek until nothing is read yet; what comes is the next batch in order.
        while let Some(p) = r.try_next_batch() {
            got.push(flatten(&p.unwrap()));
            peeked += 1;
        }
    }
    assert_eq!(got, want, "{peeked} batches peeked");
    assert!(r.try_next_batch().is_none() && r.next_batch().is_none());
    // Waiting for the readers before each peek makes the peek find the batch.
    let mut r = Reader::new(d, &config(&root, 2, 4)).unwrap();
    r.start_epoch(0, 0);
    let first = r.next_batch().unwrap().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let second = loop {
        if let Some(b) = r.try_next_batch() {
            break b.unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "the second batch was never read");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!((flatten(&first), flatten(&second)), (want[0].clone(), want[1].clone()));
}

/// The epoch announced with `then` is read once the current one is all issued: its first
/// batch is there before its `start` (`try_next_epoch_first`), and a `start` of exactly it
/// continues from there with the rest, while any other start drops what was read ahead.
#[test]
fn the_next_epoch_announced_is_read_ahead_and_a_start_of_it_continues() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b", "c"], &[7, 5, 6]);
    let d = dataset(&root, t.path());
    let c = config(&root, 2, 2);
    let want: Vec<Vec<Flat>> = (0..4).map(|e| reference(&d, &c, e)).collect();
    let mut r = Reader::new(d.clone(), &c).unwrap();
    let whole = || std::sync::Arc::new(r_share(&d, &c));
    let first_ahead = |r: &mut Reader| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(b) = r.try_next_epoch_first() {
                break b.unwrap();
            }
            assert!(std::time::Instant::now() < deadline, "the next epoch's first batch was never read");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    };

    // Announced, read ahead, handed out first, continued.
    assert!(!r.start(0, whole(), 0), "nothing was announced");
    assert!(r.try_next_epoch_first().is_none(), "nothing announced yet");
    r.then(1, whole());
    assert!(r.try_next_epoch_first().is_none(), "not before the current epoch is all delivered");
    assert_eq!(take_rest(&mut r), want[0]);
    let first = first_ahead(&mut r);
    assert_eq!(flatten(&first), want[1][0]);
    assert!(r.start(1, whole(), 0), "the epoch announced continues");
    assert_eq!(take_rest(&mut r), want[1][1..]);

    // Announced and read ahead but not handed out: the start delivers it from its first batch.
    r.then(2, whole());
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(r.start(2, whole(), 0));
    assert_eq!(take_rest(&mut r), want[2]);

    // Another epoch, or the announced one from a later step: dropped, and the start is exact.
    r.then(3, whole());
    assert_eq!(take_rest(&mut r), Vec::<Flat>::new(), "epoch 2 is over");
    let _ = first_ahead(&mut r);
    assert!(!r.start(0, whole(), 0));
    assert_eq!(take_rest(&mut r), want[0]);
    r.then(1, whole());
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!r.start(1, whole(), 2), "a later step is not what was read ahead");
    assert_eq!(take_rest(&mut r), want[1][2..]);
    // Announced while the current epoch is still being read, then the current one restarted.
    assert!(!r.start(3, whole(), 0));
    r.then(0, whole());
    let one = r.next_batch().unwrap().unwrap();
    assert_eq!(flatten(&one), want[3][0]);
    assert!(!r.start(3, whole(), 0));
    assert_eq!(take_rest(&mut r), want[3]);
}

/// This rank's share of a fresh epoch, as the pipeline gives it.
fn r_share(d: &Dataset, c: &PipelineConfig) -> stoke::sampler::rest::Share {
    let s = Sampler::new(d.len(), &SamplerConfig::from_pipeline(c)).unwrap();
    s.layout().share(s.whole()).unwrap()
}

#[test]
fn ranks_read_their_own_slices() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b"], &[6, 5]);
    let d = dataset(&root, t.path());
    let mut seen = Vec::new();
    for rank in 0..3 {
        let mut c = config(&root, 2, 2);
        c.rank = rank;
        c.world_size = 3;
        let mut r = Reader::new(d.clone(), &c).unwrap();
        let got = run_epoch(&mut r, 2, 0);
        assert_eq!(got, reference(&d, &c, 2));
        let n: usize = got.iter().map(|b| b.2.len()).sum();
        assert_eq!(n, 4); // ceil(11 / 3)
        seen.extend(got.into_iter().flat_map(|b| b.2.into_iter().map(|s| s.1)));
    }
    seen.sort();
    assert_eq!(seen, (0..12).collect::<Vec<u64>>()); // positions of the padded global order
}

#[test]
fn abandoning_an_epoch_midway_and_dropping_mid_flight() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[40]);
    let d = dataset(&root, t.path());
    let c = config(&root, 3, 4);
    let mut r = Reader::new(d.clone(), &c).unwrap();
    r.start_epoch(0, 0);
    let first = r.next_batch().unwrap().unwrap();
    assert_eq!(first.step, 0);
    // Switch epochs with batches in flight: the next batch is the new epoch's first.
    assert_eq!(run_epoch(&mut r, 5, 0), reference(&d, &c, 5));
    r.start_epoch(1, 0);
    drop(r); // must not hang with jobs queued
}

#[test]
fn missing_file_mid_epoch_skip_and_fail() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[10]);
    let d = dataset(&root, t.path());
    fs::remove_file(root.join("a/img_0003.jpg")).unwrap();
    let victim = d.samples().iter().position(|s| s.key == "a/img_0003.jpg").unwrap();

    let mut c = config(&root, 2, 2);
    c.on_error = OnError::Skip;
    let mut r = Reader::new(d.clone(), &c).unwrap();
    let got = run_epoch(&mut r, 0, 0);
    let all: Vec<_> = got.iter().flat_map(|b| b.2.iter()).collect();
    assert_eq!(all.len(), 10);
    for s in &all {
        if s.0 == victim {
            let e = s.4.as_deref().unwrap();
            assert!(e.contains("sample a/img_0003.jpg") && e.contains("cannot open"), "{e}");
            assert!(s.2.is_empty());
        } else {
            assert!(s.4.is_none());
        }
    }

    c.on_error = OnError::Fail;
    let mut r = Reader::new(d.clone(), &c).unwrap();
    r.start_epoch(0, 0);
    let mut errors = Vec::new();
    let mut delivered = 0;
    while let Some(b) = r.next_batch() {
        match b {
            Ok(b) => delivered += b.samples.len(),
            Err(e) => errors.push(e.to_string()),
        }
    }
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("sample a/img_0003.jpg") && errors[0].contains(&root.join("a/img_0003.jpg").display().to_string()),
        "{}",
        errors[0]
    );
    // The failing batch is the error; the others are delivered.
    let order: Vec<usize> = Sampler::new(10, &SamplerConfig::from_pipeline(&c)).unwrap().iter(0, 0).map(|p| p.1).collect();
    let step = order.iter().position(|&i| i == victim).unwrap() / 4;
    assert_eq!(delivered, 10 - order.chunks(4).nth(step).unwrap().len());
}

#[test]
fn shard_truncated_after_indexing_is_reported_not_hung() {
    let t = tempfile::tempdir().unwrap();
    let shard = t.path().join("s.tar");
    let mut b = Vec::new();
    for i in 0..6 {
        tar_member(&mut b, &format!("k{i}.jpg"), &jpeg(10 + i, 10), b'0');
    }
    fs::write(&shard, &b).unwrap();
    let d = dataset(&shard, t.path());
    // Cut the shard in the middle of the fifth member's data.
    let Location::Tar { offset, .. } = d.sample(4).location else { panic!("tar sample") };
    let f = fs::OpenOptions::new().write(true).open(&shard).unwrap();
    f.set_len(offset + 10).unwrap();
    let mut c = config(&shard, 2, 2);
    c.shuffle = false;
    let mut r = Reader::new(d.clone(), &c).unwrap();
    let got = run_epoch(&mut r, 0, 0);
    let errs: Vec<(usize, String)> = got.iter().flat_map(|b| b.2.iter()).filter_map(|s| s.4.clone().map(|e| (s.0, e))).collect();
    assert_eq!(errs.iter().map(|e| e.0).collect::<Vec<_>>(), [4, 5]);
    assert!(errs[0].1.contains("sample s/k4") && errs[0].1.contains(&format!("s.tar at byte {offset}")), "{}", errs[0].1);
}

#[test]
fn ram_cache_fills_in_the_first_epoch_and_respects_its_budget() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b"], &[5, 5]);
    let d = dataset(&root, t.path());
    let total: u64 = d.samples().iter().map(|s| s.len).sum();
    let mut c = config(&root, 2, 2);
    c.cache_bytes = total;
    let mut r = Reader::new(d.clone(), &c).unwrap();
    let want = run_epoch(&mut r, 0, 0);
    assert_eq!(r.cache_used(), total);
    // With every file gone, the cached epoch still reads in full.
    fs::remove_dir_all(root.join("a")).unwrap();
    fs::remove_dir_all(root.join("b")).unwrap();
    assert_eq!(run_epoch(&mut r, 0, 0), want);

    // A budget for about half: never exceeded.
    let t2 = tempfile::tempdir().unwrap();
    let root2 = t2.path().join("ds");
    folder(&root2, &["a", "b"], &[5, 5]);
    let d2 = dataset(&root2, t2.path());
    c.cache_bytes = total / 2;
    let mut r = Reader::new(d2, &c).unwrap();
    run_epoch(&mut r, 0, 0);
    assert!(r.cache_used() <= total / 2 && r.cache_used() > 0, "{} of {}", r.cache_used(), total / 2);
}

#[test]
fn weighted_sampler_through_the_reader() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["big", "small"], &[30, 2]);
    let d = dataset(&root, t.path());
    let c = config(&root, 2, 2);
    let labels: Vec<i64> = d.samples().iter().map(|s| s.label).collect();
    let s = Sampler::weighted(&labels, Weights::ClassBalanced, 400, &SamplerConfig::from_pipeline(&c)).unwrap();
    let mut r = Reader::with_sampler(d.clone(), &stoke::reader::ReaderConfig::from_pipeline(&c), s).unwrap();
    let got = run_epoch(&mut r, 0, 0);
    let small = got.iter().flat_map(|b| b.2.iter()).filter(|s| labels[s.0] == 1).count();
    assert_eq!(got.iter().map(|b| b.2.len()).sum::<usize>(), 400);
    assert!((150..250).contains(&small), "{small} of 400 from the 2-sample class");
}

#[test]
fn a_file_rewritten_after_indexing_is_read_as_it_is_now() {
    // The reader sizes a file's read by its indexed length (one read when the file is still
    // that long); a file that grew, shrank or emptied since is still read whole as it is now.
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[6]);
    let d = dataset(&root, t.path());
    let now: Vec<(String, Vec<u8>)> = d
        .samples()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let path = root.join(&m.key);
            let old = fs::read(&path).unwrap();
            let new = match i % 3 {
                0 => [old.as_slice(), &vec![0x5A; 70_000]].concat(),
                1 => old[..old.len() / 2].to_vec(),
                _ => Vec::new(),
            };
            fs::write(&path, &new).unwrap();
            (m.key.clone(), new)
        })
        .collect();
    let mut c = config(&root, 2, 2);
    c.shuffle = false;
    for threads in [1, 2] {
        c.reader_threads = threads;
        let mut r = Reader::new(d.clone(), &c).unwrap();
        let got: Vec<_> = run_epoch(&mut r, 0, 0).into_iter().flat_map(|b| b.2).collect();
        assert_eq!(got.len(), now.len());
        for s in &got {
            let (key, bytes) = &now[s.0];
            assert!(s.4.is_none(), "{key}: {:?}", s.4);
            assert!(s.2 == *bytes, "{key}: {} bytes read, the file holds {}", s.2.len(), bytes.len());
        }
    }
}
