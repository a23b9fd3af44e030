//! Tar shards in an S3-compatible store (moto's server on loopback, started here) and on an
//! HTTP server with range support (nginx): indexed and read as the same shards on local disk
//! are (the reference), and every failure (missing bucket, wrong credentials, truncated shard,
//! a server killed mid-epoch, a slow server) is an error naming the shard, in bounded time.
#![cfg(feature = "remote")]

mod store_common;

use jpeg_encoder::{ColorType, Encoder};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stoke::config::{AugmentSpec, BackendKind, OnError, PipelineConfig};
use stoke::pipeline::Pipeline;
use stoke::source::remote::Store;
use stoke::source::tar::{TarWriter, CLASSES_FILE};
use stoke::source::{Dataset, IndexOptions};
use store_common::{make_bucket, moto, nginx, short_timeouts, use_endpoint, Server};

/// Longest any failing call may take with the short timeouts (2 s per request, 2 retries,
/// 4 s budget): the bound is the call limit plus slack for a loaded machine.
const NO_HANG: Duration = Duration::from_secs(20);

fn jpeg(w: u16, h: u16, seed: usize) -> Vec<u8> {
    let rgb: Vec<u8> = (0..w as usize * h as usize * 3).map(|i| ((i * 7 + seed * 31) % 251) as u8).collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 85).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    out
}

/// `dir/shard-{0..n-1}.tar` with `per` labelled JPEGs each, and `classes.txt`.
fn write_shards(dir: &Path, n: usize, per: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let mut paths = Vec::new();
    for s in 0..n {
        let p = dir.join(format!("shard-{s}.tar"));
        let mut w = TarWriter::new(std::fs::File::create(&p).unwrap());
        for i in 0..per {
            let k = s * per + i;
            w.append(&format!("img{k:03}.jpg"), &jpeg(32 + (k % 5) as u16 * 8, 24 + (k % 3) as u16 * 8, k)).unwrap();
            w.append(&format!("img{k:03}.cls"), format!("{}", k % 3).as_bytes()).unwrap();
        }
        w.finish().unwrap();
        paths.push(p);
    }
    std::fs::write(dir.join(CLASSES_FILE), "ant\nbee\ncat\n").unwrap();
    paths
}

/// Upload every file of `dir` to `s3://bucket/prefix/`.
fn upload(dir: &Path, base: &str) {
    let store = Store::for_url(base).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let url = format!("{base}/{}", p.file_name().unwrap().to_string_lossy());
            store.put(&url, std::fs::read(&p).unwrap().into()).unwrap();
        }
    }
}

fn opts(cache: &Path) -> IndexOptions {
    IndexOptions { cache_dir: Some(cache.to_path_buf()), ..IndexOptions::default() }
}

/// One moto server for every test of this binary (the endpoint is process-wide).
fn shared_moto(test: &str) -> Option<&'static Server> {
    short_timeouts();
    static SERVER: std::sync::OnceLock<Option<Server>> = std::sync::OnceLock::new();
    let s = SERVER.get_or_init(|| moto("store_s3", false)).as_ref();
    if s.is_none() {
        let _ = store_common::find("moto_server", test);
    }
    s.inspect(|s| use_endpoint(s))
}

/// The same data set in a fresh bucket and on local disk.
struct Fixture {
    _tmp: tempfile::TempDir,
    local: PathBuf,
    cache: PathBuf,
    bucket: String,
}

fn fixture(server: &Server, name: &str, shards: usize, per: usize) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("shards");
    write_shards(&local, shards, per);
    make_bucket(server, name);
    upload(&local, &format!("s3://{name}/train"));
    let cache = tmp.path().join("cache");
    Fixture { local, cache, bucket: name.to_string(), _tmp: tmp }
}

#[test]
fn s3_shards_index_and_read_as_the_local_shards_do() {
    let Some(server) = shared_moto("s3_shards_index_and_read_as_the_local_shards_do") else { return };
    let f = fixture(server, "same-as-local", 3, 7);
    let local = Dataset::open(&f.local.join("shard-{0..2}.tar"), &opts(&f.cache)).unwrap();
    for url in [format!("s3://{}/train/shard-{{0..2}}.tar", f.bucket), format!("s3://{}/train/", f.bucket)] {
        let remote = Dataset::open(Path::new(&url), &opts(&f.cache)).unwrap();
        assert_eq!(remote.len(), 21, "{url}");
        assert_eq!(remote.classes(), ["ant", "bee", "cat"], "classes.txt beside the shards: {url}");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..local.len() {
            let (l, r) = (local.sample(i), remote.sample(i));
            assert_eq!((&l.key, l.label, l.len, l.info), (&r.key, r.label, r.len, r.info), "{url} sample {i}");
            local.read_bytes(i, &mut a).unwrap();
            remote.read_bytes(i, &mut b).unwrap();
            assert_eq!(a, b, "{url} sample {i}: ranged read");
        }
        assert!(remote.location(4).starts_with(&format!("s3://{}/train/shard-0.tar at byte ", f.bucket)), "{}", remote.location(4));
        // The index was kept in the cache folder: the second open reuses it.
        let again = Dataset::open(Path::new(&url), &opts(&f.cache)).unwrap();
        assert!(again.index_reused(), "{url}");
    }
}

fn pipeline_config(dataset: &str, on_error: OnError) -> PipelineConfig {
    let mut c = PipelineConfig::new(dataset);
    c.augment = AugmentSpec::train(16);
    c.batch_size = 4;
    c.seed = 5;
    c.backend = BackendKind::Cpu;
    c.cpu_threads = 2;
    c.reader_threads = 2;
    c.on_error = on_error;
    c
}

type Seen = Vec<(Vec<u8>, Vec<i64>, Vec<usize>)>;

fn epoch(p: &mut Pipeline, e: u64, start: u64) -> Seen {
    p.start_epoch(e, start);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        out.push((b.host_bytes().unwrap().to_vec(), b.labels.clone(), b.indices.clone()));
    }
    out
}

#[test]
fn a_pipeline_over_s3_delivers_the_local_pipelines_batches_and_resumes() {
    let Some(server) = shared_moto("a_pipeline_over_s3_delivers_the_local_pipelines_batches_and_resumes") else { return };
    let f = fixture(server, "pipeline", 2, 9);
    let local_pat = f.local.join("shard-{0..1}.tar").to_string_lossy().into_owned();
    let url = format!("s3://{}/train/shard-{{0..1}}.tar", f.bucket);
    let open = |p: &str| std::sync::Arc::new(Dataset::open(Path::new(p), &opts(&f.cache)).unwrap());
    let mut lp = Pipeline::with_dataset(pipeline_config(&local_pat, OnError::Fail), open(&local_pat)).unwrap();
    let mut rp = Pipeline::with_dataset(pipeline_config(&url, OnError::Fail), open(&url)).unwrap();
    let want = epoch(&mut lp, 1, 0);
    assert_eq!(want.len(), 5);
    assert_eq!(epoch(&mut rp, 1, 0), want, "same pixels, labels and order as from local disk");
    assert_eq!(epoch(&mut rp, 1, 3), want[3..], "resumed at step 3");
}

#[test]
fn stream_mode_over_s3_delivers_the_local_stream_batches_reading_each_shard_once() {
    let Some(server) = shared_moto("stream_mode_over_s3_delivers_the_local_stream_batches_reading_each_shard_once") else { return };
    let f = fixture(server, "stream", 5, 7);
    let url = format!("s3://{}/train/", f.bucket);
    let stream = |c: PipelineConfig, budget: u64| PipelineConfig {
        stream: Some(stoke::config::StreamSpec { group: 2, read_ahead_bytes: budget, ..Default::default() }),
        ..c
    };
    let mut lp = Pipeline::new(stream(pipeline_config(&f.local.to_string_lossy(), OnError::Fail), 1 << 30)).unwrap();
    let mut rp = Pipeline::new(stream(pipeline_config(&url, OnError::Fail), 1)).unwrap();
    assert!(rp.dataset().is_none() && rp.stream_source().unwrap().set.facts.len() == 5);
    let want = epoch(&mut lp, 2, 0);
    assert_eq!(want.len(), 9, "35 samples in batches of 4");
    let mut all: Vec<usize> = want.iter().flat_map(|b| b.2.clone()).collect();
    all.sort();
    assert_eq!(all, (0..35).collect::<Vec<_>>(), "each sample once");
    assert_eq!(epoch(&mut rp, 2, 0), want, "same pixels, labels and order as the same shards on disk");
    assert_eq!(epoch(&mut rp, 2, 6), want[6..], "resumed at step 6");

    // A shard rewritten shorter in the store after the facts were read: named, its samples
    // replaced under skip; opening the set again fails naming it.
    // All 5 shards mixed in one group, batches of 5: (with this seed) every batch has a good
    // sample to substitute from; a batch of only lost samples would be an error naming them.
    let mut sp = Pipeline::new(PipelineConfig {
        batch_size: 5,
        stream: Some(stoke::config::StreamSpec { group: 5, read_ahead_bytes: 1 << 30, ..Default::default() }),
        ..pipeline_config(&url, OnError::Skip)
    })
    .unwrap();
    let shard = format!("s3://{}/train/shard-3.tar", f.bucket);
    let bytes = std::fs::read(f.local.join("shard-3.tar")).unwrap();
    Store::for_url(&shard).unwrap().put(&shard, bytes[..bytes.len() / 2 + 100].to_vec().into()).unwrap();
    sp.start_epoch(2, 0);
    let mut subs = Vec::new();
    while let Some(b) = sp.next_batch() {
        subs.extend(b.unwrap().substitutes.iter().map(|s| (s.location.clone(), s.reason.clone())));
    }
    assert_eq!(subs.len(), 7, "the 7 samples of shard-3: {subs:?}");
    assert!(subs.iter().all(|(l, r)| l == &shard && r.contains("truncated or rewritten")), "{subs:?}");
    let e = stoke::reader::stream::StreamSource::open(Path::new(&url), 1).unwrap_err().to_string();
    assert!(e.contains(&shard) && e.contains("truncated tar"), "{e}");
}

/// Bytes of complete entries in a node cache folder.
fn cache_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |rd| {
        rd.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "obj")).map(|e| e.metadata().unwrap().len()).sum()
    })
}

#[test]
fn stream_mode_with_a_node_cache_downloads_each_shard_once_and_stays_within_its_limit() {
    let Some(server) = shared_moto("stream_mode_with_a_node_cache_downloads_each_shard_once_and_stays_within_its_limit") else { return };
    let f = fixture(server, "node-cache", 4, 5);
    let url = format!("s3://{}/train/", f.bucket);
    let node = f.cache.join("node");
    let stream = |c: PipelineConfig, cache_limit: u64| PipelineConfig {
        stream: Some(stoke::config::StreamSpec {
            group: 2,
            read_ahead_bytes: 1 << 30,
            cache_dir: (cache_limit > 0).then(|| node.clone()),
            cache_limit,
        }),
        ..c
    };
    let mut lp = Pipeline::new(stream(pipeline_config(&f.local.to_string_lossy(), OnError::Fail), 0)).unwrap();
    let mut rp = Pipeline::new(stream(pipeline_config(&url, OnError::Fail), 1 << 30)).unwrap();
    let stats = |p: &Pipeline| p.stream_source().unwrap().cache_stats().expect("a cache over a store");
    let want0 = epoch(&mut lp, 0, 0);
    assert_eq!(epoch(&mut rp, 0, 0), want0, "through the cache: the local shards' batches");
    assert_eq!(stats(&rp).fetches, 4, "each shard downloaded once in epoch 0");
    assert_eq!(epoch(&mut rp, 1, 0), epoch(&mut lp, 1, 0));
    let s = stats(&rp);
    // (Hits: epoch 1's shards, some of them read ahead of their epoch as well.)
    assert!(s.fetches == 4 && s.hits >= 4, "epoch 1 read the node's disk only: {s:?}");
    // Another process of the node (or the same after a restart): the folder is reused.
    let mut again = Pipeline::new(stream(pipeline_config(&url, OnError::Fail), 1 << 30)).unwrap();
    assert_eq!(epoch(&mut again, 0, 0), want0);
    assert_eq!(stats(&again).fetches, 0, "nothing downloaded again");
    drop((rp, again));

    // A limit of two shards' bytes: least recently used shards go, the folder never holds
    // more than the limit, the batches are the same.
    let shard = std::fs::metadata(f.local.join("shard-0.tar")).unwrap().len();
    let _ = std::fs::remove_dir_all(&node);
    let mut small = Pipeline::new(stream(pipeline_config(&url, OnError::Fail), 2 * shard + shard / 2)).unwrap();
    for e in 0..3u64 {
        let want = epoch(&mut lp, e, 0);
        assert_eq!(epoch(&mut small, e, 0), want, "epoch {e} under a small cache");
        assert!(cache_bytes(&node) <= 2 * shard + shard / 2, "{} bytes in the folder", cache_bytes(&node));
    }
    assert!(stats(&small).evictions > 0, "{:?}", stats(&small));

    // A cache_dir without a limit, or a limit without a folder, is refused by name.
    let mut c = stream(pipeline_config(&url, OnError::Fail), 1 << 20);
    c.stream.as_mut().unwrap().cache_limit = 0;
    let e = Pipeline::new(c).err().expect("cache_dir without cache_limit").to_string();
    assert!(e.contains("cache_dir needs cache_limit"), "{e}");
}

/// Elastic resume over S3: 3 ranks deliver 2 batches of 4 each and save their states (the
/// same on every rank); 2 ranks with batches of 5 resume from one and finish the epoch. Every
/// sample exactly once across both worlds (plus at most 2 + 1 padded copies); per-sample mode
/// (ranged reads) and stream mode (whole shards). `tests/elastic.rs` has the local cases.
#[test]
fn elastic_resume_over_s3_delivers_every_sample_once() {
    let Some(server) = shared_moto("elastic_resume_over_s3_delivers_every_sample_once") else { return };
    let f = fixture(server, "elastic", 5, 7);
    let pattern = format!("s3://{}/train/shard-{{0..4}}.tar", f.bucket);
    let dataset = std::sync::Arc::new(Dataset::open(Path::new(&pattern), &opts(&f.cache)).unwrap());
    for stream in [false, true] {
        let make = |rank: usize, world: usize, batch: usize| {
            let c = PipelineConfig { rank, world_size: world, batch_size: batch, ..pipeline_config(&pattern, OnError::Fail) };
            if stream {
                let spec = stoke::config::StreamSpec { group: 2, read_ahead_bytes: 1 << 20, ..Default::default() };
                Pipeline::new(PipelineConfig { stream: Some(spec), ..c }).unwrap()
            } else {
                Pipeline::with_dataset(c, dataset.clone()).unwrap()
            }
        };
        let (mut delivered, mut states) = (Vec::new(), Vec::new());
        for r in 0..3 {
            let mut p = make(r, 3, 4);
            p.start_epoch(4, 0);
            for _ in 0..2 {
                delivered.extend(p.next_batch().unwrap().unwrap().indices);
            }
            states.push(p.state());
        }
        assert!(states.iter().all(|s| s == &states[0]), "stream {stream}: the same state on every rank");
        for r in 0..2 {
            let mut p = make(r, 2, 5);
            p.resume(&states[0]).unwrap();
            while let Some(b) = p.next_batch() {
                delivered.extend(b.unwrap().indices);
            }
        }
        let mut once: Vec<usize> = delivered.clone();
        once.sort();
        once.dedup();
        assert_eq!(once, (0..35).collect::<Vec<_>>(), "stream {stream}: every sample");
        assert!(delivered.len() - 35 <= 3, "stream {stream}: {} padded copies", delivered.len() - 35);
    }
}

/// One index for all nodes: `stoke index URL` (node 1) writes the index beside the shards; a
/// second node (its own cache folder) reads that one object, one GET, instead of every shard,
/// and the same samples as a local index of the same shards; then its cache. A shard rewritten
/// makes it stale: the next node reads every shard itself, and `stoke index` writes a current
/// one, which the node after reads with one GET again.
#[test]
fn the_index_beside_the_shards_serves_every_node_with_one_get_until_a_shard_changes() {
    use stoke::source::IndexOrigin;
    let Some(server) = shared_moto("the_index_beside_the_shards_serves_every_node_with_one_get_until_a_shard_changes") else { return };
    let f = fixture(server, "shared-index", 4, 6);
    let url = format!("s3://{}/train/", f.bucket);
    let node = |name: &str| Dataset::open(Path::new(&url), &opts(&f.cache.join(name))).unwrap();
    let index_cli = || {
        let out = stoke_cli(&["index", &url], server, &f.cache.join("node1"));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = index_cli();
    assert!(err.contains(&format!("index written to s3://{}/train/.stoke-index", f.bucket)), "{err}");

    let two = node("node2");
    assert_eq!((two.index_origin(), two.store().unwrap().gets(), two.len()), (IndexOrigin::Store, 1, 24), "one GET, not 4");
    let local = Dataset::open(&f.local.join("shard-{0..3}.tar"), &opts(&f.cache.join("local"))).unwrap();
    for i in 0..local.len() {
        let (l, r) = (local.sample(i), two.sample(i));
        assert_eq!((&l.key, l.label, l.len, l.info), (&r.key, r.label, r.len, r.info), "sample {i}");
    }
    let again = node("node2");
    assert_eq!((again.index_origin(), again.store().unwrap().gets()), (IndexOrigin::Saved, 0), "then the node's own cache");

    // Shard 1 rewritten with 3 samples: the index beside the shards is stale.
    let fewer = f.cache.join("fewer");
    write_shards(&fewer, 1, 3);
    let shard1 = format!("s3://{}/train/shard-1.tar", f.bucket);
    Store::for_url(&shard1).unwrap().put(&shard1, std::fs::read(fewer.join("shard-0.tar")).unwrap().into()).unwrap();
    let three = node("node3");
    assert_eq!(
        (three.index_origin(), three.store().unwrap().gets(), three.len()),
        (IndexOrigin::Built, 1 + 4 + 1, 21),
        "stale: the index, every shard and classes.txt read"
    );
    let err = index_cli();
    assert!(err.contains("index written to"), "{err}");
    let four = node("node4");
    assert_eq!((four.index_origin(), four.store().unwrap().gets(), four.len()), (IndexOrigin::Store, 1, 21));
    let out = stoke_cli(&["index", &url], server, &f.cache.join("node5"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is current"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_missing_bucket_or_shard_is_named() {
    let Some(_server) = shared_moto("a_missing_bucket_or_shard_is_named") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let e = Dataset::open(Path::new("s3://no-such-bucket/train/shard-{0..3}.tar"), &opts(tmp.path())).unwrap_err().to_string();
    assert!(e.contains("s3://no-such-bucket/train/") && e.contains("LIST failed"), "{e}");
    assert!(e.contains("NoSuchBucket") || e.contains("404"), "{e}");
    let f = fixture(_server, "missing-shard", 2, 2);
    let e = Dataset::open(Path::new(&format!("s3://{}/train/shard-{{0..2}}.tar", f.bucket)), &opts(&f.cache)).unwrap_err().to_string();
    assert!(e.contains(&format!("s3://{}/train/shard-2.tar", f.bucket)) && e.contains("does not exist"), "{e}");
    let e = Dataset::open(Path::new(&format!("s3://{}/nothing-here/", f.bucket)), &opts(&f.cache)).unwrap_err().to_string();
    assert!(e.contains("no .tar shards"), "{e}");
    assert!(t.elapsed() < NO_HANG);
}

#[test]
fn a_truncated_shard_is_named_with_the_offset() {
    let Some(server) = shared_moto("a_truncated_shard_is_named_with_the_offset") else { return };
    let f = fixture(server, "truncated", 2, 4);
    let bytes = std::fs::read(f.local.join("shard-1.tar")).unwrap();
    let url = format!("s3://{}/train/shard-1.tar", f.bucket);
    Store::for_url(&url).unwrap().put(&url, bytes[..bytes.len() / 2 + 100].to_vec().into()).unwrap();
    let e = Dataset::open(Path::new(&format!("s3://{}/train/", f.bucket)), &opts(&f.cache)).unwrap_err().to_string();
    assert!(e.contains(&url) && e.contains("truncated tar"), "{e}");
}

#[test]
fn wrong_credentials_are_named_and_do_not_hang() {
    short_timeouts();
    let Some(server) = moto("wrong_credentials_are_named_and_do_not_hang", true) else { return };
    let tmp = tempfile::tempdir().unwrap();
    // This server checks keys; the tests' "testing" key is unknown to it. The endpoint comes
    // from the environment: a child process keeps the shared server's for the other tests.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
        .args(["index", "s3://secured/train/shard-{0..1}.tar"])
        .env("XDG_CACHE_HOME", tmp.path())
        .env("AWS_ENDPOINT_URL", server.url())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("s3://secured/train/") && (err.contains("403") || err.contains("InvalidAccessKeyId")), "{err}");
}

#[test]
fn http_shards_with_ranges_read_as_local_and_a_slow_server_times_out() {
    short_timeouts();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("www");
    write_shards(&local, 3, 5);
    let Some(server) = nginx("http_shards_with_ranges_read_as_local_and_a_slow_server_times_out", &local) else { return };
    let cache = tmp.path().join("cache");
    let l = Dataset::open(&local.join("shard-{0..2}.tar"), &opts(&cache)).unwrap();
    let url = format!("{}/shard-{{0..2}}.tar", server.url());
    let r = Dataset::open(Path::new(&url), &opts(&cache)).unwrap();
    assert_eq!(r.classes(), ["ant", "bee", "cat"]);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..l.len() {
        assert_eq!((&l.sample(i).key, l.sample(i).info), (&r.sample(i).key, r.sample(i).info));
        l.read_bytes(i, &mut a).unwrap();
        r.read_bytes(i, &mut b).unwrap();
        assert_eq!(a, b, "sample {i}");
    }
    let e = Dataset::open(Path::new(&format!("{}/shard-{{0..3}}.tar", server.url())), &opts(&cache)).unwrap_err().to_string();
    assert!(e.contains("shard-3.tar") && e.contains("404"), "{e}");
    let e = Dataset::open(Path::new(&format!("{}/", server.url())), &opts(&cache)).unwrap_err().to_string();
    assert!(e.contains("cannot list"), "{e}");
    // 1 KiB/s: a shard of ~10 KiB is not whole within the 2 s timeout (about 9 s).
    let t = Instant::now();
    let e = Dataset::open(Path::new(&format!("{}/slow/shard-0.tar", server.url())), &opts(&cache)).unwrap_err().to_string();
    assert!(e.contains("/slow/shard-0.tar") && (e.contains("tim") || e.contains("no answer")), "{e}");
    assert!(t.elapsed() < NO_HANG, "took {:?}", t.elapsed());
}

fn stoke_cli(args: &[&str], server: &Server, cache: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
        .args(args)
        .env("AWS_ENDPOINT_URL", server.url())
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap()
}

#[test]
fn pack_writes_shards_and_the_sidecar_to_the_store_and_plan_streams_them_by_rank() {
    let Some(server) = shared_moto("pack_writes_shards_and_the_sidecar_to_the_store_and_plan_streams_them_by_rank") else { return };
    make_bucket(server, "packed");
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    for (c, class) in ["ant", "bee"].iter().enumerate() {
        std::fs::create_dir_all(src.join(class)).unwrap();
        for i in 0..7 {
            std::fs::write(src.join(class).join(format!("{i}.jpg")), jpeg(40, 30, c * 10 + i)).unwrap();
        }
    }
    let cache = tmp.path().join("cache");
    let out = stoke_cli(&["pack", &src.to_string_lossy(), "s3://packed/train", "--shard-size", "4KiB"], server, &cache);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sidecar = Store::for_url("s3://packed/x").unwrap().get("s3://packed/train/stoke-shards.json").unwrap();
    let v: serde_json::Value = serde_json::from_slice(&sidecar).unwrap();
    let shards = v["shards"].as_array().unwrap();
    assert!(shards.len() > 2, "several shards at 4 KiB: {v}");
    assert_eq!(shards.iter().map(|s| s["samples"].as_u64().unwrap()).sum::<u64>(), 14);
    let plan = |rank: usize, seed: &str| {
        let o = stoke_cli(
            &["plan", "--stream", "s3://packed/train/", "--rank", &rank.to_string(), "--world-size", "3", "--seed", seed, "--group", "2"],
            server,
            &cache,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap().lines().map(str::to_owned).collect::<Vec<_>>()
    };
    let ranks: Vec<Vec<String>> = (0..3).map(|r| plan(r, "7")).collect();
    assert!(ranks.iter().all(|r| r.len() == 5), "ceil(14/3) each: {ranks:?}");
    let mut all: Vec<&String> = ranks.iter().flatten().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 14, "every sample delivered; only the one padding sample repeats: {ranks:?}");
    assert_eq!(plan(1, "7"), ranks[1], "same seed, same order");
    // The same shards read from the store as a per-sample data set hold the same 14 samples,
    // from the index pack wrote beside them (one GET).
    let d = Dataset::open(Path::new("s3://packed/train/"), &opts(&tmp.path().join("node2"))).unwrap();
    assert_eq!((d.len(), d.classes()), (14, &["ant".to_string(), "bee".to_string()][..]));
    assert_eq!((d.index_origin(), d.store().unwrap().gets()), (stoke::source::IndexOrigin::Store, 1));
}
