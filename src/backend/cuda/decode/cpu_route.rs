//! The CPU route inside the CUDA decoder: libjpeg-turbo on worker threads for what no GPU
//! decoder takes, and for retries.

use super::Decoded;
use crate::augment::params::AugParams;
use crate::backend::cpu::decode::{decode_rgb_region, DecodedImage};
use std::sync::Arc;

pub(super) type CpuResult = (usize, Result<DecodedImage, String>);

/// Decode `list` with libjpeg-turbo (`backend::cpu::decode`) on up to `threads` scoped
/// workers, each image only in the region `out[i]` asks for (the whole image when its header
/// was unreadable); each worker returns its results and the seconds it worked.
pub(super) fn cpu_decode_workers<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    list: &'env [usize],
    jobs: &'env [(&'env [u8], AugParams)],
    out: &'env [Result<Decoded, String>],
    max_pixels: u64,
    threads: usize,
) -> Vec<std::thread::ScopedJoinHandle<'scope, (Vec<CpuResult>, f64)>> {
    if list.is_empty() {
        return Vec::new();
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (0..threads.min(list.len()))
        .map(|_| {
            let next = next.clone();
            scope.spawn(move || {
                let t = std::time::Instant::now();
                let mut done = Vec::new();
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = list.get(k) else { break };
                    let region = match &out[i] {
                        Ok(d) if d.roi.w > 0 && d.roi.h > 0 => Some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)),
                        _ => None,
                    };
                    let mut img = DecodedImage::default();
                    let r = decode_rgb_region(jobs[i].0, max_pixels, region, &mut img).map(|()| img).map_err(|e| e.to_string());
                    done.push((i, r));
                }
                (done, t.elapsed().as_secs_f64())
            })
        })
        .collect()
}
