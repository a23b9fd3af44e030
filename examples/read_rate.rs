//! The readers alone: images/s and CPU time per image of `stoke`'s reader threads over a data
//! set, with nothing decoding (the host cost that every backend pays before its decoder).
//!
//! ```text
//! cargo run --release --example read_rate -- DATASET [--epochs N] [--threads T] [--pooled]
//! ```
//! `--pooled` reads into buffers lent by a backend-like pool (`BytesSource::pool`: fixed
//! allocations, samples at 256-byte multiples, as the CUDA backend's pinned pool lends them,
//! here ordinary memory), else into the heap buffers the CPU backend's readers use. Prints one
//! JSON line: images, seconds, images/s, and the process's CPU microseconds per image (user +
//! system; the readers are the only threads working). BENCHMARKS.md "The readers" has figures.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;
use stoke::config::PipelineConfig;
use stoke::reader::bytes::{BytesSource, HostMemory};
use stoke::reader::Reader;
use stoke::source::{Dataset, IndexOptions};

/// Process CPU seconds, user + system.
fn cpu_secs() -> f64 {
    // SAFETY: `getrusage` writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Page-aligned allocations standing in for a backend's pinned pool.
struct Plain;

impl HostMemory for Plain {
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
        let layout = Layout::from_size_align(bytes, 4096).ok()?;
        // SAFETY: a non-zero size (the reader asks for at least one byte).
        NonNull::new(unsafe { std::alloc::alloc(layout) })
    }
    fn wait_unused(&self, _: NonNull<u8>) {}
    fn free(&self, ptr: NonNull<u8>, bytes: usize) {
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), Layout::from_size_align(bytes, 4096).expect("valid above")) }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut path, mut epochs, mut threads, mut pooled) = (None, 10u64, 1usize, false);
    while let Some(a) = args.next() {
        let mut num = |what: &str| args.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| panic!("{what} needs a number"));
        match a.as_str() {
            "--epochs" => epochs = num("--epochs"),
            "--threads" => threads = num("--threads") as usize,
            "--pooled" => pooled = true,
            p => path = Some(p.to_owned()),
        }
    }
    let path = path.expect("usage: read_rate DATASET [--epochs N] [--threads T] [--pooled]");
    let ds = Arc::new(Dataset::open(std::path::Path::new(&path), &IndexOptions::default()).expect("dataset"));
    let mut cfg = PipelineConfig::new(&path);
    cfg.reader_threads = threads;
    let batch_bytes: u64 = {
        // The largest batch's bytes, as a backend sizes its buffers: the largest samples'.
        let mut lens: Vec<u64> = ds.samples().iter().map(|m| m.len.next_multiple_of(256)).collect();
        lens.sort_unstable_by(|a, b| b.cmp(a));
        lens.iter().take(cfg.batch_size).sum()
    };
    let mut r = Reader::new(ds, &cfg).expect("reader");
    if pooled {
        r.set_bytes_source(BytesSource::pool(Arc::new(Plain), batch_bytes as usize, 256));
    }
    // One epoch first: buffers made, files in the page cache.
    let mut run = |epochs: std::ops::Range<u64>| {
        let mut n = 0usize;
        for e in epochs {
            r.start_epoch(e, 0);
            while let Some(b) = r.next_batch() {
                let b = b.expect("batch");
                n += b.samples.len();
                r.recycle(b);
            }
        }
        n
    };
    run(0..1);
    let (t0, c0) = (Instant::now(), cpu_secs());
    let n = run(1..1 + epochs);
    let (dt, dc) = (t0.elapsed().as_secs_f64(), cpu_secs() - c0);
    println!(
        "{{\"images\": {n}, \"seconds\": {dt:.3}, \"images_per_sec\": {:.0}, \"cpu_us_per_image\": {:.2}, \"threads\": {threads}, \"pooled\": {pooled}}}",
        n as f64 / dt,
        dc / n as f64 * 1e6
    );
}
