//! A store that dies mid-epoch (moto's S3 server on loopback, SIGKILLed between batches): the
//! next batch is an error naming the shard and what was tried (`fail`), or carries substitutes
//! naming it (`skip`); nothing hangs, and dropping the pipeline returns. Its own test binary:
//! the endpoint is process-wide.
#![cfg(feature = "remote")]

mod store_common;

use jpeg_encoder::{ColorType, Encoder};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stoke::config::{AugmentSpec, BackendKind, OnError, PipelineConfig};
use stoke::pipeline::Pipeline;
use stoke::source::remote::Store;
use stoke::source::tar::TarWriter;
use stoke::source::{Dataset, IndexOptions};

fn shard(n: usize, first: usize) -> Vec<u8> {
    let mut w = TarWriter::new(Vec::new());
    for k in first..first + n {
        let rgb: Vec<u8> = (0..32 * 24 * 3).map(|i| ((i * 5 + k * 17) % 253) as u8).collect();
        let mut jpg = Vec::new();
        Encoder::new(&mut jpg, 85).encode(&rgb, 32, 24, ColorType::Rgb).unwrap();
        w.append(&format!("s{k:03}.jpg"), &jpg).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn a_server_killed_mid_epoch_gives_named_errors_or_substitutes_never_a_hang() {
    store_common::short_timeouts();
    let Some(mut server) = store_common::moto("a_server_killed_mid_epoch", false) else { return };
    store_common::use_endpoint(&server);
    store_common::make_bucket(&server, "killed");
    let store = Store::for_url("s3://killed/x").unwrap();
    for s in 0..2 {
        store.put(&format!("s3://killed/train/shard-{s}.tar"), shard(40, s * 40).into()).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let opts = IndexOptions { cache_dir: Some(tmp.path().to_path_buf()), ..IndexOptions::default() };
    let url = "s3://killed/train/shard-{0..1}.tar";
    let ds = Arc::new(Dataset::open(Path::new(url), &opts).unwrap());
    let config = |on_error| {
        let mut c = PipelineConfig::new(url);
        c.augment = AugmentSpec::train(16);
        (c.batch_size, c.backend, c.cpu_threads, c.reader_threads, c.prefetch_batches) = (4, BackendKind::Cpu, 1, 1, 1);
        c.on_error = on_error;
        c
    };
    let mut fail = Pipeline::with_dataset(config(OnError::Fail), ds.clone()).unwrap();
    let mut skip = Pipeline::with_dataset(config(OnError::Skip), ds.clone()).unwrap();
    // Stream mode, read ahead one shard at a time: the second shard is read after the kill.
    let stream = |on_error| PipelineConfig {
        stream: Some(stoke::config::StreamSpec { group: 1, read_ahead_bytes: 1, ..Default::default() }),
        shuffle: false,
        ..config(on_error)
    };
    let mut stream_fail = Pipeline::new(stream(OnError::Fail)).unwrap();
    let mut stream_skip = Pipeline::new(stream(OnError::Skip)).unwrap();
    for p in [&mut stream_fail, &mut stream_skip] {
        p.start_epoch(0, 0);
        assert!(p.next_batch().unwrap().is_ok());
    }
    fail.start_epoch(0, 0);
    skip.start_epoch(0, 0);
    assert!(fail.next_batch().unwrap().is_ok());
    assert!(skip.next_batch().unwrap().is_ok());
    server.kill();
    let t = Instant::now();
    // A few batches may have been read ahead before the kill; then the errors come.
    let err = (0..10).find_map(|_| fail.next_batch().unwrap().err()).expect("an error after the server died").to_string();
    assert!(err.contains("s3://killed/train/shard-") && err.contains("tries"), "{err}");
    let named = (0..10).find_map(|_| match skip.next_batch().unwrap() {
        Ok(b) => b.substitutes.first().map(|s| format!("{s:?}")),
        Err(e) => Some(e.to_string()),
    });
    let named = named.expect("substitutes or an error naming every sample after the server died");
    assert!(named.contains("shard-") && named.contains("tries"), "{named}");
    let err = std::iter::from_fn(|| stream_fail.next_batch()).find_map(Result::err).expect("stream: an error after the server died");
    let err = err.to_string();
    assert!(err.contains("s3://killed/train/shard-1.tar") && err.contains("tries"), "{err}");
    // Under skip every sample of the lost shard is replaced; a batch of only lost samples has
    // nothing to substitute from and is an error naming them.
    let named = std::iter::from_fn(|| stream_skip.next_batch())
        .find_map(|b| match b {
            Ok(b) => b.substitutes.first().map(|s| format!("{s:?}")),
            Err(e) => Some(e.to_string()),
        })
        .expect("stream: substitutes or an error after the server died");
    assert!(named.contains("shard-1.tar") && named.contains("tries"), "{named}");
    drop(fail);
    drop(skip);
    drop(stream_fail);
    drop(stream_skip);
    assert!(t.elapsed() < Duration::from_secs(60), "took {:?}", t.elapsed());
}
