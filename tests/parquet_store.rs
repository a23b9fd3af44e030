//! Parquet data sets in a store (moto's S3 server, as `store_s3.rs` runs it): the same files
//! read through stoke's own store client (footers and column chunks by ranged GETs) give the
//! local files' batches, per-sample and in stream mode, for one object, a folder, a split
//! prefix and a repository folder with `data/`.

mod parquet_common;
mod store_common;

use parquet_common::{clean, config, jpeg, tempdir, write_both, NAMES};
use std::path::{Path, PathBuf};
use stoke::config::PipelineConfig;
use stoke::pipeline::Pipeline;
use stoke::source::remote::Store;
use stoke::source::{Dataset, IndexOptions};
use store_common::{make_bucket, moto, short_timeouts, use_endpoint};

fn batches(c: PipelineConfig) -> Vec<(Vec<i64>, Vec<u8>)> {
    let mut p = Pipeline::new(c).unwrap();
    p.start_epoch(1, 0);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        assert!(b.substitutes.is_empty());
        out.push((b.labels.clone(), b.host_bytes().unwrap().to_vec()));
    }
    out
}

#[test]
fn parquet_in_s3_reads_as_the_local_files_do() {
    short_timeouts();
    let Some(server) = moto("parquet_store", false) else { return };
    use_endpoint(&server);
    make_bucket(&server, "hf-data");
    let dir = tempdir("store");
    write_both(&dir, clean());
    let store = Store::for_url("s3://hf-data/ds").unwrap();
    for e in std::fs::read_dir(dir.join("data")).unwrap() {
        let p = e.unwrap().path();
        let url = format!("s3://hf-data/ds/data/{}", p.file_name().unwrap().to_string_lossy());
        store.put(&url, std::fs::read(&p).unwrap().into()).unwrap();
    }
    let cache = dir.join("cache");
    let local = dir.join("data");
    for (url, n) in [
        ("s3://hf-data/ds/data/train-00001-of-00003.parquet", 15),
        ("s3://hf-data/ds/data/train-", 58),
        ("s3://hf-data/ds/data", 58),
        ("s3://hf-data/ds", 58),
    ] {
        let d = Dataset::open(Path::new(url), &IndexOptions { cache_dir: Some(cache.clone()), ..IndexOptions::default() })
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(d.len(), n, "{url}");
        assert_eq!(d.classes(), NAMES.map(String::from).as_slice(), "{url}");
        let first = if n == 15 { 18 } else { 0 };
        let mut buf = Vec::new();
        for i in [0, n / 2, n - 1] {
            d.read_bytes(i, &mut buf).unwrap();
            assert!(buf == jpeg(first + i), "{url} sample {i}");
        }
    }
    for stream in [false, true] {
        let remote = batches(config(&PathBuf::from("s3://hf-data/ds/data/train-"), stream));
        let here = batches(config(&local, stream));
        assert_eq!(remote.len(), 12);
        assert!(remote == here, "stream {stream}: the store's batches are the local ones");
    }
    // Stream mode with the node cache: every row group's column chunks downloaded once; the
    // next epoch and a second pipeline of the node read them from its disk; same batches.
    let node = dir.join("node-cache");
    let cached = |c: PipelineConfig| {
        let mut c = c;
        let st = c.stream.as_mut().unwrap();
        (st.cache_dir, st.cache_limit) = (Some(node.clone()), 1 << 30);
        c
    };
    let url = PathBuf::from("s3://hf-data/ds/data/train-");
    let mut p = Pipeline::new(cached(config(&url, true))).unwrap();
    let epoch = |p: &mut Pipeline, e: u64| {
        p.start_epoch(e, 0);
        let mut out = Vec::new();
        while let Some(b) = p.next_batch() {
            let b = b.unwrap();
            out.push((b.labels.clone(), b.host_bytes().unwrap().to_vec()));
        }
        out
    };
    assert!(epoch(&mut p, 1) == batches(config(&local, true)), "through the cache: the local batches");
    let stats = |p: &Pipeline| p.stream_source().unwrap().cache_stats().expect("a node cache over the store");
    let first = stats(&p);
    // 8 row groups, two column chunks each (image, label).
    assert_eq!(first.fetches, 16, "{first:?}");
    epoch(&mut p, 2);
    assert_eq!(stats(&p).fetches, 16, "epoch 2 downloaded nothing: {:?}", stats(&p));
    let mut again = Pipeline::new(cached(config(&url, true))).unwrap();
    epoch(&mut again, 1);
    assert_eq!(stats(&again).fetches, 0, "a second pipeline of the node downloaded nothing");
}
