//! Stream mode over tar shards on local disk (real files, the CPU backend): exact epochs on one
//! rank and across ranks, the same batches for the same seed, resume at `(epoch, step)`, the
//! read-ahead byte budget, and a truncated or corrupt shard under `skip` and `fail`. The same
//! shards in an S3 store are in `store_s3.rs`.

use jpeg_encoder::{ColorType, Encoder};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use stoke::config::{AugmentSpec, BackendKind, OnError, PipelineConfig, StreamSpec};
use stoke::pipeline::Pipeline;
use stoke::reader::stream::{StreamReader, StreamSource};
use stoke::reader::ReaderConfig;
use stoke::sampler::shards::{ShardOrder, ShardOrderConfig};
use stoke::source::shards::{sidecar_json, ShardSet, SIDECAR};
use stoke::source::tar::TarWriter;
use stoke::source::{Dataset, IndexOptions};

/// Samples per shard: uneven, so groups and rank blocks straddle shards (46 in all).
const COUNTS: [usize; 7] = [5, 9, 3, 8, 1, 12, 8];

fn jpeg(w: u16, h: u16, seed: usize) -> Vec<u8> {
    let rgb: Vec<u8> = (0..w as usize * h as usize * 3).map(|i| ((i * 7 + seed * 31) % 251) as u8).collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 85).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    out
}

/// `dir/shard-{0..6}.tar`, `COUNTS[s]` labelled JPEGs each (label `k % 3`).
fn write_shards(dir: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let mut k = 0;
    let mut paths = Vec::new();
    for (s, &n) in COUNTS.iter().enumerate() {
        let p = dir.join(format!("shard-{s}.tar"));
        let mut w = TarWriter::new(std::fs::File::create(&p).unwrap());
        for _ in 0..n {
            w.append(&format!("img{k:03}.jpg"), &jpeg(32 + (k % 5) as u16 * 8, 24 + (k % 3) as u16 * 8, k)).unwrap();
            w.append(&format!("img{k:03}.cls"), format!("{}", k % 3).as_bytes()).unwrap();
            k += 1;
        }
        w.finish().unwrap();
        paths.push(p);
    }
    paths
}

fn config(dataset: &Path, on_error: OnError, rank: usize, world: usize, budget: u64) -> PipelineConfig {
    let mut c = PipelineConfig::new(dataset);
    c.augment = AugmentSpec::train(16);
    (c.batch_size, c.seed, c.backend, c.cpu_threads, c.reader_threads) = (4, 5, BackendKind::Cpu, 2, 2);
    (c.on_error, c.rank, c.world_size) = (on_error, rank, world);
    c.stream = Some(StreamSpec { group: 2, read_ahead_bytes: budget, ..Default::default() });
    c
}

/// Pixels, labels, dataset indices and keys of each batch.
type Seen = Vec<(Vec<u8>, Vec<i64>, Vec<usize>, Vec<String>)>;

fn epoch(p: &mut Pipeline, e: u64, start: u64) -> Seen {
    p.start_epoch(e, start);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        out.push((b.host_bytes().unwrap().to_vec(), b.labels.clone(), b.indices.clone(), b.keys.clone()));
    }
    out
}

fn total() -> usize {
    COUNTS.iter().sum()
}

/// Dataset index of each stream position of `epoch`, from `ShardOrder` directly.
fn expected(rank: usize, world: usize, epoch: u64) -> Vec<usize> {
    let cfg = ShardOrderConfig { seed: 5, shuffle: true, rank, world_size: world, drop_last: false, group: 2 };
    let o = ShardOrder::new(COUNTS.iter().map(|&c| c as u64).collect(), cfg).unwrap();
    let e = o.epoch(epoch);
    let first: Vec<usize> = COUNTS.iter().scan(0, |a, &c| Some(std::mem::replace(a, *a + c))).collect();
    (0..o.len()).map(|i| e.at(i)).map(|s| first[s.shard] + s.index as usize).collect()
}

#[test]
fn every_sample_once_per_epoch_on_one_rank_and_across_four_disjoint_equal_padded_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    write_shards(tmp.path());
    let n = total();
    // The per-sample index of the same shards: stream indices, keys and labels must be its.
    let ds = Dataset::open(tmp.path(), &IndexOptions { save: false, ..IndexOptions::default() }).unwrap();
    assert_eq!(ds.len(), n);
    for world in [1usize, 4] {
        let mut count: HashMap<usize, usize> = HashMap::new();
        let mut lens = Vec::new();
        for rank in 0..world {
            let mut p = Pipeline::new(config(tmp.path(), OnError::Fail, rank, world, 1 << 30)).unwrap();
            assert!(p.dataset().is_none(), "stream mode builds no per-sample index");
            let seen = epoch(&mut p, 2, 0);
            let got: Vec<usize> = seen.iter().flat_map(|b| b.2.clone()).collect();
            assert_eq!(got, expected(rank, world, 2), "world {world} rank {rank}: the ShardOrder stream, in order");
            for (_, labels, indices, keys) in &seen {
                for ((l, i), k) in labels.iter().zip(indices).zip(keys) {
                    assert_eq!((l, k), (&ds.sample(*i).label, &ds.sample(*i).key), "sample {i}");
                }
            }
            lens.push(got.len());
            for i in got {
                *count.entry(i).or_default() += 1;
            }
        }
        assert!(lens.iter().all(|&l| l == n.div_ceil(world)), "equal lengths ceil(N/w): {lens:?}");
        assert_eq!(count.len(), n, "world {world}: every sample delivered");
        // Padding as DistributedSampler: the stream's first ceil(N/w)·w − N positions again.
        let pad = n.div_ceil(world) * world - n;
        let mut twice: Vec<usize> = count.iter().filter(|c| *c.1 == 2).map(|c| *c.0).collect();
        twice.sort();
        let mut head: Vec<usize> = expected(0, 1, 2)[..pad].to_vec();
        head.sort();
        assert_eq!(twice, head, "world {world}: only the padding repeats, and it is the stream's head");
        assert!(count.values().all(|&c| c <= 2));
    }
}

#[test]
fn same_seed_same_batches_and_a_resumed_run_continues_the_uninterrupted_one() {
    let tmp = tempfile::tempdir().unwrap();
    write_shards(tmp.path());
    let mut a = Pipeline::new(config(tmp.path(), OnError::Fail, 1, 2, 1 << 30)).unwrap();
    let mut b = Pipeline::new(config(tmp.path(), OnError::Fail, 1, 2, 1)).unwrap();
    let want = epoch(&mut a, 3, 0);
    assert_eq!(want.len(), 6, "23 samples in batches of 4");
    assert_eq!(epoch(&mut b, 3, 0), want, "same seed, same batches (whatever the read-ahead budget)");
    for start in [1u64, 4, 5] {
        assert_eq!(epoch(&mut b, 3, start), want[start as usize..], "resumed at epoch 3 step {start}");
    }
    assert_ne!(epoch(&mut a, 4, 0), want, "another epoch, another order");
    let mut c = Pipeline::new(PipelineConfig { seed: 6, ..config(tmp.path(), OnError::Fail, 1, 2, 1 << 30) }).unwrap();
    assert_ne!(epoch(&mut c, 3, 0), want, "another seed, another order");
}

/// Bytes of the shards in use at once at the worst point of a rank's epoch: those first used
/// at or before position `i` and last used at or after it.
fn worst_working_set(source: &StreamSource, order: &ShardOrder, epoch: u64) -> u64 {
    let e = order.epoch(epoch);
    let mut span: HashMap<usize, (u64, u64)> = HashMap::new();
    for i in 0..order.len() {
        let s = e.at(i).shard;
        span.entry(s).and_modify(|x| x.1 = i).or_insert((i, i));
    }
    (0..order.len())
        .map(|i| span.iter().filter(|(_, &(a, b))| a <= i && i <= b).map(|(&s, _)| source.set.facts[s].bytes).sum())
        .max()
        .unwrap()
}

/// Polls until the epoch running has read ahead `want` shards of the next one (10 s at most).
fn wait_ahead(r: &StreamReader, want: usize) -> usize {
    let t = std::time::Instant::now();
    while r.next_epoch_ready() < want && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    r.next_epoch_ready()
}

/// The next epoch's first shards are read while the current one ends, within the budget; the
/// epoch after starts with them and delivers the same batches as a reader that did not read
/// ahead; a start other than the next epoch's fresh one does not use them.
fn next_epoch_read_ahead(dir: &Path, source: &Arc<StreamSource>, reader_cfg: &ReaderConfig, order_cfg: &ShardOrderConfig, sizes: &[u64]) {
    let all: u64 = sizes.iter().sum();
    let run = |r: &mut StreamReader, e: u64, start: u64| -> Vec<(Vec<u8>, Vec<usize>)> {
        r.start_epoch(e, start).unwrap();
        let mut out = Vec::new();
        while let Some(b) = r.next_batch() {
            let b = b.unwrap();
            out.push((b.data.to_vec(), b.samples.iter().map(|s| s.index).collect()));
        }
        out
    };
    // A budget of every shard: the whole next epoch is read ahead, once this one's are.
    let mut r = StreamReader::new(source.clone(), order_cfg.clone(), reader_cfg, all).unwrap();
    run(&mut r, 0, 0);
    assert_eq!(wait_ahead(&r, sizes.len()), sizes.len(), "the next epoch's shards are read ahead");
    let fresh = |e, start| run(&mut StreamReader::new(source.clone(), order_cfg.clone(), reader_cfg, all).unwrap(), e, start);
    assert_eq!(run(&mut r, 1, 0), fresh(1, 0), "epoch 1 from the shards read ahead: the same batches");
    assert_eq!(r.shards_read_ahead(), sizes.len() as u64, "it started with all of them");
    assert!(r.peak_held() <= all, "within the budget: {} > {all}", r.peak_held());
    // Another start than the next epoch's fresh one: nothing carried, the same batches.
    wait_ahead(&r, sizes.len());
    assert_eq!(run(&mut r, 3, 2), fresh(3, 2), "epoch 3 from step 2");
    assert_eq!(r.shards_read_ahead(), sizes.len() as u64, "epoch 3 is not the one read ahead for");
    // A budget of the largest shard and a byte: at most one next-epoch shard, and only when it
    // fits beside what is held.
    let tight = sizes.iter().max().unwrap() + 1;
    let mut r = StreamReader::new(source.clone(), order_cfg.clone(), reader_cfg, tight).unwrap();
    run(&mut r, 0, 0);
    wait_ahead(&r, 1);
    assert!(r.next_epoch_ready() <= 1, "{} shards read ahead within {tight} bytes", r.next_epoch_ready());
    assert_eq!(run(&mut r, 1, 0), fresh(1, 0));
    // Through the pipeline: the count is in the stats.
    let mut p = Pipeline::new(config(dir, OnError::Fail, 0, 1, all)).unwrap();
    epoch(&mut p, 0, 0);
    std::thread::sleep(std::time::Duration::from_millis(500));
    epoch(&mut p, 1, 0);
    assert!(p.stats().shards_read_ahead > 0, "{:?}", p.stats());
}

#[test]
fn the_read_ahead_holds_at_most_its_budget_or_the_shards_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    write_shards(tmp.path());
    let source = Arc::new(StreamSource::open(tmp.path(), 1).unwrap());
    let sizes: Vec<u64> = source.set.facts.iter().map(|f| f.bytes).collect();
    let largest = *sizes.iter().max().unwrap();
    let mut sorted = sizes.clone();
    sorted.sort();
    // Room for the two largest shards (a group of 2 always fits), plus a little.
    let roomy = sorted[sorted.len() - 1] + sorted[sorted.len() - 2] + 1000;
    // The defaults' reader settings (2 batches read ahead, no cache, no rewrites) but these.
    let reader_cfg = ReaderConfig {
        specs: vec![AugmentSpec::train(16)],
        seed: 5,
        batch_size: 4,
        on_error: OnError::Fail,
        threads: 3,
        ..ReaderConfig::from_pipeline(&stoke::PipelineConfig::new("unused"))
    };
    let order_cfg = ShardOrderConfig { seed: 5, group: 2, ..ShardOrderConfig::default() };
    for (budget, bound) in [(roomy, roomy), (1, 0)] {
        let mut r = StreamReader::new(source.clone(), order_cfg.clone(), &reader_cfg, budget).unwrap();
        let bound = if bound == 0 { (0..3).map(|e| worst_working_set(&source, r.order(), e)).max().unwrap() } else { bound };
        for e in 0..3 {
            r.start_epoch(e, 0).unwrap();
            let mut seen = 0;
            while let Some(b) = r.next_batch() {
                let b = b.unwrap();
                seen += b.samples.len();
                assert!(r.peak_held() <= bound, "budget {budget}: held {} > bound {bound}", r.peak_held());
                r.recycle(b);
            }
            assert_eq!(seen, total());
        }
        assert!(r.peak_held() >= largest, "budget {budget}: every shard was held once, the largest too");
        if budget == roomy {
            assert!(r.peak_held() > largest, "budget {budget}: shards were read ahead ({})", r.peak_held());
        }
    }
    // Through the pipeline: the peak is reported in the stats.
    next_epoch_read_ahead(tmp.path(), &source, &reader_cfg, &order_cfg, &sizes);
    let mut p = Pipeline::new(config(tmp.path(), OnError::Fail, 0, 1, roomy)).unwrap();
    epoch(&mut p, 0, 0);
    let peak = p.stats().read_ahead_peak;
    assert!(peak > 0 && peak <= roomy, "pipeline peak {peak} within {roomy}");
}

#[test]
fn a_truncated_or_corrupt_shard_is_named_and_replaced_under_skip_and_fails_under_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = write_shards(tmp.path());
    let source = Arc::new(StreamSource::open(tmp.path(), 1).unwrap());
    // After the facts were taken: shard 3 loses its second half, shard 5 its first header.
    let b3 = std::fs::read(&paths[3]).unwrap();
    std::fs::write(&paths[3], &b3[..b3.len() / 2]).unwrap();
    let mut b5 = std::fs::read(&paths[5]).unwrap();
    b5[..100].fill(b'x');
    std::fs::write(&paths[5], &b5).unwrap();

    let mut skip = Pipeline::with_stream(config(tmp.path(), OnError::Skip, 0, 1, 1 << 30), source.clone()).unwrap();
    let seen = {
        skip.start_epoch(0, 0);
        let mut subs = Vec::new();
        let mut delivered = 0;
        while let Some(b) = skip.next_batch() {
            let b = b.unwrap();
            delivered += b.len();
            subs.extend(b.substitutes.iter().map(|s| (s.key.clone(), s.location.clone(), s.reason.clone())));
        }
        assert_eq!(delivered, total(), "the epoch keeps its length");
        subs
    };
    assert_eq!(seen.len(), COUNTS[3] + COUNTS[5], "each sample of the two bad shards replaced: {seen:?}");
    let s3 = paths[3].display().to_string();
    let s5 = paths[5].display().to_string();
    let truncated = seen.iter().filter(|s| s.1 == s3).collect::<Vec<_>>();
    assert_eq!(truncated.len(), COUNTS[3], "{seen:?}");
    assert!(truncated.iter().all(|s| s.0.starts_with("shard-3.tar#") && s.2.contains("truncated or rewritten")), "{truncated:?}");
    let corrupt = seen.iter().filter(|s| s.1 == s5).collect::<Vec<_>>();
    assert_eq!(corrupt.len(), COUNTS[5], "{seen:?}");
    assert!(corrupt.iter().all(|s| s.2.contains("checksum")), "{corrupt:?}");

    let mut fail = Pipeline::with_stream(config(tmp.path(), OnError::Fail, 0, 1, 1 << 30), source).unwrap();
    fail.start_epoch(0, 0);
    let err = std::iter::from_fn(|| fail.next_batch()).find_map(Result::err).expect("the first batch with a bad shard fails");
    let err = err.to_string();
    assert!((err.contains(&s3) && err.contains("truncated")) || (err.contains(&s5) && err.contains("checksum")), "{err}");
    assert!(fail.next_batch().is_none(), "the epoch ends at the failed batch");

    // Opening a set whose shard is already truncated fails, naming it (as the per-sample index).
    let e = StreamSource::open(tmp.path(), 1).unwrap_err().to_string();
    assert!(e.contains("shard-3.tar") || e.contains("shard-5.tar"), "{e}");
}

#[test]
fn stream_options_are_checked_and_cuda_without_shard_bounds_is_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    write_shards(tmp.path());
    let mut c = config(tmp.path(), OnError::Skip, 0, 1, 1 << 30);
    c.stream = Some(StreamSpec { group: 0, read_ahead_bytes: 1, ..Default::default() });
    let e = Pipeline::new(c.clone()).err().unwrap().to_string();
    assert!(e.contains("group") && e.contains("got 0"), "{e}");
    c.stream = Some(StreamSpec::default());
    c.cache_bytes = 5;
    let e = Pipeline::new(c.clone()).err().unwrap().to_string();
    assert!(e.contains("cache_bytes") && e.contains("5"), "{e}");
    c.cache_bytes = 0;
    // A version 1 sidecar (no shard's largest sample): the CUDA backend cannot size its
    // buffers and says so; auto takes the CPU backend.
    let mut set = ShardSet::open(tmp.path(), 1).unwrap();
    assert!(set.facts.iter().all(|f| f.largest.is_some_and(|l| l.bytes > 0 && l.pixels > 0)), "facts read from the shards");
    for f in &mut set.facts {
        f.largest = None;
    }
    std::fs::write(tmp.path().join(SIDECAR), sidecar_json(&set.facts)).unwrap();
    assert!(ShardSet::open(tmp.path(), 1).unwrap().from_sidecar, "a version 1 sidecar is still read");
    c.backend = BackendKind::Cuda;
    let e = Pipeline::new(c.clone()).err().unwrap().to_string();
    assert!(e.contains("version 1") && e.contains(SIDECAR) && e.contains("cannot size its buffers"), "{e}");
    c.backend = BackendKind::Auto;
    assert!(!Pipeline::new(c).unwrap().is_cuda());
}
