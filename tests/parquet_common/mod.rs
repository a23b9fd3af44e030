//! Hugging Face-style Parquet files for the tests, written with the parquet crate's own writer
//! (`parquet_source.rs`, `parquet_store.rs`), and the same images as tar shards.
#![allow(dead_code)]

use jpeg_encoder::{ColorType, Encoder};
use parquet::basic::{Compression, ZstdLevel};
use std::path::{Path, PathBuf};
use stoke::source::tar::TarWriter;

/// Rows per row group, as shard sizes (58 in all), and which file each row group is in.
pub const COUNTS: [usize; 8] = [7, 11, 4, 9, 2, 13, 8, 4];
pub const FILE_OF: [usize; 8] = [0, 0, 1, 1, 1, 2, 2, 2];
pub const NAMES: [&str; 5] = ["tench", "goldfish", "shark", "ray", "cock"];

pub fn jpeg(k: usize) -> Vec<u8> {
    let (w, h) = (24 + (k % 4) as u16 * 8, 20 + (k % 3) as u16 * 8);
    let rgb: Vec<u8> = (0..w as usize * h as usize * 3).map(|i| ((i * 7 + k * 31) % 251) as u8).collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 85).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    out
}

/// One row as written: image bytes (`None`: null) and label (`None`: null).
#[derive(Clone)]
pub struct RowIn {
    pub image: Option<Vec<u8>>,
    pub label: Option<i64>,
}

/// An HF-style file at `path`, one row group per element of `groups` (the writer is
/// `stoke::fuzzing::hf_parquet`, which also makes the fuzz seeds).
pub fn write_hf(path: &Path, groups: &[Vec<RowIn>], compression: Compression, names: &[&str]) {
    let groups: Vec<Vec<stoke::fuzzing::HfRow>> = groups.iter().map(|g| g.iter().map(|r| (r.image.clone(), r.label)).collect()).collect();
    std::fs::write(path, stoke::fuzzing::hf_parquet(&groups, compression, names)).unwrap();
}

/// Sample `k`: its JPEG and label.
pub fn sample(k: usize) -> RowIn {
    RowIn { image: Some(jpeg(k)), label: Some((k % 5) as i64) }
}

/// The same 58 images as `dir/data/train-0000{0,1,2}-of-00003.parquet` (row groups of
/// `COUNTS`; snappy, snappy, zstd), and as `dir/tar/shard-{0..7}.tar` (shards of `COUNTS`).
pub fn write_both(dir: &Path, edit: impl Fn(usize, &mut RowIn)) {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::create_dir_all(dir.join("tar")).unwrap();
    let mut files: Vec<Vec<Vec<RowIn>>> = vec![Vec::new(); 3];
    let mut k = 0;
    for (s, &n) in COUNTS.iter().enumerate() {
        let mut rows = Vec::new();
        let mut w = TarWriter::new(std::fs::File::create(dir.join(format!("tar/shard-{s}.tar"))).unwrap());
        for _ in 0..n {
            let mut r = sample(k);
            w.append(&format!("img{k:03}.jpg"), &jpeg(k)).unwrap();
            w.append(&format!("img{k:03}.cls"), format!("{}", k % 5).as_bytes()).unwrap();
            edit(k, &mut r);
            rows.push(r);
            k += 1;
        }
        w.finish().unwrap();
        files[FILE_OF[s]].push(rows);
    }
    for (f, groups) in files.iter().enumerate() {
        let c = if f == 2 { Compression::ZSTD(ZstdLevel::default()) } else { Compression::SNAPPY };
        write_hf(&dir.join(format!("data/train-{f:05}-of-00003.parquet")), groups, c, &NAMES);
    }
}

pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stoke-parquet-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn clean() -> impl Fn(usize, &mut RowIn) {
    |_, _| {}
}

/// The tests' pipeline over `dataset`: the train preset at 16, batches of 5, CPU backend; in
/// stream mode groups of 2 row groups.
pub fn config(dataset: &Path, stream: bool) -> stoke::config::PipelineConfig {
    use stoke::config::{AugmentSpec, BackendKind, PipelineConfig, StreamSpec};
    let mut c = PipelineConfig::new(dataset);
    c.augment = AugmentSpec::train(16);
    (c.batch_size, c.seed, c.backend, c.cpu_threads, c.reader_threads) = (5, 7, BackendKind::Cpu, 1, 2);
    if stream {
        c.stream = Some(StreamSpec { group: 2, read_ahead_bytes: 1 << 20, ..Default::default() });
    }
    c
}
