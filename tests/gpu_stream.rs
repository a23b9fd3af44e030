//! Stream mode on the CUDA backend: staging and decode arenas sized from the per-shard facts
//! (each shard's largest sample, `IndexBounds::from_shards`), no per-sample index. The same
//! shards through the CPU backend are the reference: the same samples, labels and positions in
//! the same order, pixels within the decoders' difference; a sample larger than its shard's
//! facts say is named and substituted, never written past a buffer (the simulated device checks
//! every access).
//!
//! Needs a GPU: skips with a printed reason without one, fails with `STOKE_REQUIRE_GPU=1`.

mod gpu_common;

use gpu_common::{generated, gpu_or_skip, serial};
use std::path::{Path, PathBuf};
use stoke::batch::Batch;
use stoke::config::{AugmentSpec, BackendKind, DType, Layout, OnError, PipelineConfig, StreamSpec};
use stoke::pipeline::Pipeline;
use stoke::source::shards::{sidecar_json, ShardSet, SIDECAR};
use stoke::source::tar::TarWriter;
use stoke::source::Dataset;

/// Same bound as tests/gpu_pipeline.rs: the decoders may differ a little.
const MAX_SAMPLE_MEAN_DIFF: f32 = 0.05;

/// `ds`'s samples in shards of `per` (images and `.cls` labels), in `dir`.
fn pack(ds: &Dataset, dir: &Path, per: usize) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mut buf = Vec::new();
    for (s, chunk) in (0..ds.len()).collect::<Vec<_>>().chunks(per).enumerate() {
        let mut w = TarWriter::new(std::fs::File::create(dir.join(format!("shard-{s:03}.tar"))).unwrap());
        for &i in chunk {
            ds.read_bytes(i, &mut buf).unwrap();
            w.append(&format!("s{i:04}.jpg"), &buf).unwrap();
            w.append(&format!("s{i:04}.cls"), ds.sample(i).label.to_string().as_bytes()).unwrap();
        }
        w.finish().unwrap();
    }
    dir.to_path_buf()
}

fn config(shards: &Path, backend: BackendKind, on_error: OnError) -> PipelineConfig {
    let mut c = PipelineConfig::new(shards);
    c.augment = AugmentSpec::train(64);
    (c.output.dtype, c.output.layout) = (DType::F16, Layout::Nchw);
    (c.batch_size, c.seed, c.backend, c.on_error) = (24, 7, backend, on_error);
    (c.ring_depth, c.reader_threads, c.cpu_threads) = (3, 2, 2);
    c.stream = Some(StreamSpec { group: 2, read_ahead_bytes: 1 << 30, ..Default::default() });
    // Interpolated chroma, as the CPU backend decodes: the comparison below rests on it
    // (nearest, the default, is 0.67 levels away on average: tests/gpu_decode.rs).
    c.gpu_upsampling = stoke::config::GpuUpsampling::Smooth;
    c
}

/// Per batch: host pixels, labels, dataset indices, positions, substitutes (key, kind).
type Seen = Vec<(Vec<u8>, Vec<i64>, Vec<usize>, Vec<u64>, Vec<(String, &'static str)>)>;

fn epoch(p: &mut Pipeline, e: u64) -> Seen {
    p.start_epoch(e, 0);
    let mut out = Vec::new();
    while let Some(b) = p.next_batch() {
        let mut b: Batch = b.unwrap();
        b.make_host().unwrap();
        let subs = b.substitutes.iter().map(|s| (s.key.clone(), s.error.kind())).collect();
        out.push((b.host_bytes().unwrap().to_vec(), b.labels.clone(), b.indices.clone(), b.positions.clone(), subs));
    }
    out
}

fn mean_diff(a: &[u8], b: &[u8], i: usize, per: usize) -> f32 {
    let f = |v: &[u8], k: usize| half::f16::from_le_bytes([v[2 * k], v[2 * k + 1]]).to_f32();
    let n = per / 2;
    (0..n).map(|k| (f(a, i * n + k) - f(b, i * n + k)).abs()).sum::<f32>() / n as f32
}

#[test]
fn stream_mode_on_cuda_delivers_the_cpu_backends_samples() {
    let _serial = serial();
    if gpu_or_skip("gpu_stream").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ds = generated(dir.path(), 150, 5);
    let shards = pack(&ds, &dir.path().join("shards"), 20);
    let mut gpu = Pipeline::new(config(&shards, BackendKind::Cuda, OnError::Fail)).unwrap();
    let mut cpu = Pipeline::new(config(&shards, BackendKind::Cpu, OnError::Fail)).unwrap();
    assert!(gpu.is_cuda() && gpu.dataset().is_none(), "stream mode on the CUDA backend");
    let simulated = gpu_common::sim_stats().is_some();
    for e in 0..2 {
        let (g, c) = (epoch(&mut gpu, e), epoch(&mut cpu, e));
        assert_eq!(g.len(), 7, "150 samples in batches of 24");
        for (k, (gb, cb)) in g.iter().zip(&c).enumerate() {
            assert_eq!((&gb.1, &gb.2, &gb.3), (&cb.1, &cb.2, &cb.3), "epoch {e} batch {k}: labels, samples, positions");
            assert!(gb.4.is_empty(), "epoch {e} batch {k}: nothing substituted: {:?}", gb.4);
            let per = gb.0.len() / gb.1.len();
            for i in 0..gb.1.len() {
                let d = mean_diff(&gb.0, &cb.0, i, per);
                assert!(d < MAX_SAMPLE_MEAN_DIFF, "epoch {e} batch {k} sample {i}: mean diff {d}");
            }
            if simulated {
                // The stand-in decodes with libjpeg-turbo as the CPU backend does, and the
                // kernels are the CPU backend's math: the same bytes.
                assert!(gb.0 == cb.0, "epoch {e} batch {k}: the simulated device's pixels are the CPU backend's");
            }
        }
    }
}

#[test]
fn a_sample_larger_than_its_shards_facts_say_is_named_and_substituted() {
    let _serial = serial();
    if gpu_or_skip("gpu_stream").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ds = generated(dir.path(), 96, 6);
    let shards = pack(&ds, &dir.path().join("shards"), 16);
    // A sidecar that understates every shard's largest sample: 60 % of the mean size, so a
    // batch's samples overflow the staging slot sized from it.
    let mut set = ShardSet::open(&shards, 1).unwrap();
    let mean = ds.samples().iter().map(|s| s.len).sum::<u64>() / ds.len() as u64;
    for f in &mut set.facts {
        f.largest.as_mut().unwrap().bytes = mean * 6 / 10;
    }
    std::fs::write(shards.join(SIDECAR), sidecar_json(&set.facts)).unwrap();
    assert!(ShardSet::open(&shards, 1).unwrap().from_sidecar);
    let mut p = Pipeline::new(config(&shards, BackendKind::Cuda, OnError::Skip)).unwrap();
    let seen = epoch(&mut p, 0);
    let subs: Vec<&(String, &str)> = seen.iter().flat_map(|b| &b.4).collect();
    assert!(!subs.is_empty(), "samples past the understated bound are substituted");
    assert!(subs.iter().all(|(key, kind)| *kind == "capacity" && key.starts_with("shard-")), "named by shard and key: {subs:?}");
    assert_eq!(seen.iter().map(|b| b.1.len()).sum::<usize>(), 96, "every slot delivered");
    // Under fail, the first one is an error naming it.
    let mut p = Pipeline::new(config(&shards, BackendKind::Cuda, OnError::Fail)).unwrap();
    p.start_epoch(0, 0);
    let err = std::iter::from_fn(|| p.next_batch()).find_map(|b| b.err()).expect("an error").to_string();
    assert!(err.contains("staging slot") && err.contains("shard-"), "{err}");
}
