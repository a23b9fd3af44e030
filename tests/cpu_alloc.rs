//! Steady state allocates nothing per sample: after a warm-up batch, decoding and augmenting
//! a batch costs a number of allocations that does not grow with the batch size.

use jpeg_encoder::{ColorType, Encoder};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use stoke::augment::params::draw;
use stoke::backend::cpu::CpuBackend;
use stoke::backend::{BatchInput, SampleIn};
use stoke::batch::Batch;
use stoke::config::{AugmentSpec, DType, Layout as TensorLayout, PipelineConfig};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` above with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn jpeg(w: u16, h: u16) -> Vec<u8> {
    let rgb: Vec<u8> = (0..w as usize * h as usize * 3).map(|i| (i * 7 % 251) as u8).collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 90).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    out
}

#[test]
fn batch_allocations_do_not_grow_with_the_batch() {
    let file = jpeg(160, 120);
    let spec = AugmentSpec::train(64);
    let mut c = PipelineConfig::new("unused");
    c.augment = spec.clone();
    c.cpu_threads = 2;
    let mut backend = CpuBackend::new(&c).unwrap();
    let mut batch = Batch::new_host(DType::F32, TensorLayout::Nchw);
    let describe = |i: usize| (format!("k{i}"), String::new());
    let mut count = |n: usize, seed: u64| {
        let params: Vec<_> = (0..n).map(|i| draw(&spec, seed, 0, i as u64, 160, 120, 1)).collect();
        let ins: Vec<SampleIn<'_>> = (0..n)
            .map(|i| SampleIn {
                index: i,
                position: i as u64,
                label: 0,
                bytes: &file,
                params: std::slice::from_ref(&params[i]),
                read_error: None,
            })
            .collect();
        let before = ALLOCS.load(Ordering::SeqCst);
        stoke::pipeline::run_batch(&mut backend, BatchInput { epoch: 0, step: 0, samples: &ins }, &describe, &mut batch).unwrap();
        ALLOCS.load(Ordering::SeqCst) - before
    };
    // Warm-up: buffers grow to the largest image and batch.
    for seed in 0..3 {
        count(64, seed);
    }
    let small = count(8, 10);
    let large = count(64, 11);
    eprintln!("allocations per batch: {small} (8 samples), {large} (64 samples)");
    assert!(large <= small + 8, "{large} allocations for 64 samples vs {small} for 8: something allocates per sample");
}
