//! The CPU route inside the CUDA decoder: libjpeg-turbo on worker threads for what no GPU
//! decoder takes, and for retries.

use super::Decoded;
use crate::augment::params::AugParams;
use crate::backend::cpu::decode::{decode_rgb_region, DecodeError, DecodedImage};
use crate::error::GpuError;
use crate::error::SlotError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

pub(super) type CpuResult = (usize, Result<DecodedImage, DecodeError>);

/// The CPU route's worker threads, started once with the decoder (not twice per batch).
pub(super) struct CpuPool {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl CpuPool {
    /// `threads` persistent workers.
    pub(super) fn new(threads: usize) -> Result<Self, GpuError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("stoke-gpu-cpu-route-{i}"))
            .build()
            .map_err(|e| GpuError::Cuda { call: "starting the CPU decode threads", message: e.to_string() })?;
        Ok(Self { pool, threads })
    }

    /// Decode `list` with libjpeg-turbo (`backend::cpu::decode`) on up to `threads` workers
    /// of the pool while `meanwhile` runs on the calling thread, each image only in the region
    /// `out[i]` asks for (the whole image when its header was unreadable). Returns what
    /// `meanwhile` returned, the results, and the seconds of the longest worker.
    pub(super) fn decode_while<R>(
        &self,
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        out: &[Result<Decoded, SlotError>],
        max_pixels: u64,
        meanwhile: impl FnOnce() -> R,
    ) -> (R, Vec<CpuResult>, f64) {
        let results = Mutex::new(Vec::with_capacity(list.len()));
        let longest = Mutex::new(0f64);
        let next = AtomicUsize::new(0);
        let r = self.pool.in_place_scope(|scope| {
            for _ in 0..self.threads.min(list.len()) {
                scope.spawn(|_| {
                    let t = std::time::Instant::now();
                    let mut done = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = list.get(k) else { break };
                        let region = match &out[i] {
                            Ok(d) if d.roi.w > 0 && d.roi.h > 0 => Some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)),
                            _ => None,
                        };
                        let mut img = DecodedImage::default();
                        let r = decode_rgb_region(jobs[i].0, max_pixels, region, &mut img).map(|()| img);
                        done.push((i, r));
                    }
                    results.lock().unwrap_or_else(|p| p.into_inner()).extend(done);
                    let mut l = longest.lock().unwrap_or_else(|p| p.into_inner());
                    *l = l.max(t.elapsed().as_secs_f64());
                });
            }
            meanwhile()
        });
        (r, results.into_inner().unwrap_or_else(|p| p.into_inner()), longest.into_inner().unwrap_or_else(|p| p.into_inner()))
    }
}
