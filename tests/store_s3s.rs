//! The object-store paths against a second S3-compatible server, s3s-fs (a filesystem-backed S3
//! server from crates.io, checking request signatures), so that no result rests on moto's
//! behaviour alone (`store_s3.rs` runs them on moto): per-sample ranged reads, one at a time and
//! 16 in flight, give the local batches; stream mode gives the local stream batches; the index
//! written beside the shards serves a second node with one GET until a shard changes.

mod store_common;

use jpeg_encoder::{ColorType, Encoder};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use stoke::config::{AugmentSpec, BackendKind, PipelineConfig, StreamSpec};
use stoke::pipeline::Pipeline;
use stoke::source::remote::Store;
use stoke::source::tar::{TarWriter, CLASSES_FILE};
use stoke::source::{Dataset, IndexOptions, IndexOrigin};
use store_common::{s3s_fs, short_timeouts, use_endpoint, Server};

const BUCKET: &str = "s3s-data";

fn jpeg(w: u16, h: u16, seed: usize) -> Vec<u8> {
    let rgb: Vec<u8> = (0..w as usize * h as usize * 3).map(|i| ((i * 13 + seed * 17) % 253) as u8).collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 85).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    out
}

/// `dir/shard-{0..n-1}.tar`, `per` labelled JPEGs each (from `first`), and `classes.txt`.
fn write_shards(dir: &Path, n: usize, per: usize, first: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for s in 0..n {
        let mut w = TarWriter::new(std::fs::File::create(dir.join(format!("shard-{s}.tar"))).unwrap());
        for i in 0..per {
            let k = first + s * per + i;
            w.append(&format!("img{k:03}.jpg"), &jpeg(40 + (k % 4) as u16 * 8, 32 + (k % 3) as u16 * 8, k)).unwrap();
            w.append(&format!("img{k:03}.cls"), format!("{}", k % 2).as_bytes()).unwrap();
        }
        w.finish().unwrap();
    }
    std::fs::write(dir.join(CLASSES_FILE), "a\nb\n").unwrap();
}

fn upload(dir: &Path, base: &str) {
    let store = Store::for_url(base).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let url = format!("{base}/{}", p.file_name().unwrap().to_string_lossy());
        store.put(&url, std::fs::read(&p).unwrap().into()).unwrap();
    }
}

/// One s3s-fs for the binary (the S3 endpoint is process-wide), with the data set uploaded
/// under `s3://s3s-data/<name>/` from `dir/<name>`.
fn server(test: &str) -> Option<&'static (Server, tempfile::TempDir)> {
    short_timeouts();
    static S: std::sync::OnceLock<Option<(Server, tempfile::TempDir)>> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let s = s3s_fs(test, &[BUCKET])?;
        use_endpoint(&s);
        Some((s, tempfile::tempdir().unwrap()))
    })
    .as_ref()
    .inspect(|(s, _)| use_endpoint(s))
}

/// The same shards on local disk and in the store, under `name`.
fn fixture(dir: &Path, name: &str) -> (PathBuf, String) {
    let local = dir.join(name);
    write_shards(&local, 3, 6, 0);
    let base = format!("s3://{BUCKET}/{name}");
    upload(&local, &base);
    (local, base)
}

fn opts(cache: &Path) -> IndexOptions {
    IndexOptions { cache_dir: Some(cache.to_path_buf()), ..IndexOptions::default() }
}

fn config(dataset: &str, in_flight: usize, stream: bool) -> PipelineConfig {
    let mut c = PipelineConfig::new(dataset);
    c.augment = AugmentSpec::train(16);
    (c.batch_size, c.seed, c.backend, c.cpu_threads, c.reader_threads) = (4, 3, BackendKind::Cpu, 1, 2);
    c.store_in_flight = in_flight;
    // One epoch each, its GETs counted: nothing of the next one read ahead after it.
    c.epoch_ahead = false;
    if stream {
        c.stream = Some(StreamSpec { group: 2, read_ahead_bytes: 1 << 20, ..Default::default() });
    }
    c
}

fn epoch(p: &mut Pipeline) -> Vec<(Vec<u8>, Vec<i64>, Vec<usize>)> {
    p.start_epoch(1, 0);
    std::iter::from_fn(|| p.next_batch())
        .map(|b| b.unwrap())
        .map(|b| (b.host_bytes().unwrap().to_vec(), b.labels.clone(), b.indices.clone()))
        .collect()
}

#[test]
fn per_sample_and_stream_reads_from_s3s_fs_give_the_local_batches() {
    let Some((_, dir)) = server("per_sample_and_stream_reads_from_s3s_fs_give_the_local_batches") else { return };
    let (local, base) = fixture(dir.path(), "batches");
    let cache = dir.path().join("cache-batches");
    let pattern = |root: &str| format!("{root}/shard-{{0..2}}.tar");
    let local_pattern = pattern(&local.to_string_lossy());
    let want = epoch(
        &mut Pipeline::with_dataset(
            config(&local_pattern, 1, false),
            Arc::new(Dataset::open(Path::new(&local_pattern), &opts(&cache)).unwrap()),
        )
        .unwrap(),
    );
    assert_eq!(want.len(), 5, "18 samples in batches of 4");
    let remote = Arc::new(Dataset::open(Path::new(&pattern(&base)), &opts(&cache)).unwrap());
    for in_flight in [1, 16] {
        let got = epoch(&mut Pipeline::with_dataset(config(&pattern(&base), in_flight, false), remote.clone()).unwrap());
        assert!(got == want, "{in_flight} ranged GETs in flight: the local batches");
    }
    // The index pass: the index beside the shards (none), every shard, classes.txt; then one
    // ranged GET per sample per epoch.
    assert_eq!(remote.store().unwrap().gets(), 1 + 3 + 1 + 2 * 18);
    let want = epoch(&mut Pipeline::new(config(&local.to_string_lossy(), 1, true)).unwrap());
    assert!(epoch(&mut Pipeline::new(config(&format!("{base}/"), 1, true)).unwrap()) == want, "stream mode: the local stream batches");
}

#[test]
fn the_index_beside_the_shards_serves_a_second_node_with_one_get_until_a_shard_changes() {
    let Some((_, dir)) = server("the_index_beside_the_shards_serves_a_second_node_with_one_get_until_a_shard_changes") else { return };
    let (_, base) = fixture(dir.path(), "shared");
    let url = format!("{base}/");
    let node = |name: &str| Dataset::open(Path::new(&url), &opts(&dir.path().join(name))).unwrap();
    let one = node("node1");
    assert_eq!((one.index_origin(), one.len()), (IndexOrigin::Built, 18));
    assert_eq!(one.publish_index().unwrap(), format!("{base}/.stoke-index"));
    let two = node("node2");
    assert_eq!((two.index_origin(), two.store().unwrap().gets()), (IndexOrigin::Store, 1), "one GET, not every shard");
    assert!((0..18).all(|i| one.sample(i).key == two.sample(i).key && one.sample(i).info == two.sample(i).info));
    // Shard 2 rewritten with other samples: the index beside the shards no longer describes them.
    let other = dir.path().join("other");
    write_shards(&other, 1, 4, 100);
    let shard2 = format!("{base}/shard-2.tar");
    Store::for_url(&shard2).unwrap().put(&shard2, std::fs::read(other.join("shard-0.tar")).unwrap().into()).unwrap();
    let three = node("node3");
    assert_eq!((three.index_origin(), three.len()), (IndexOrigin::Built, 16), "stale: indexed from the shards");
    assert!(three.samples().iter().any(|m| m.key.ends_with("img100")), "the rewritten shard's samples");
}
