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

/// A region of a stored image, `(x, y, w, h)`; `None`: the whole image.
pub(super) type Region = Option<(u32, u32, u32, u32)>;

/// CPU-route decodes of a batch started before its turn ([`CpuRoute::start`]): they run on the
/// pool while the batch before it decodes, and the batch's decode collects them. Each job
/// owns a copy of its image's bytes, so dropping this unfinished (the batch did not come) leaves
/// nothing dangling: the jobs finish into a channel nobody reads.
pub struct CpuAhead {
    list: Vec<usize>,
    results: std::sync::mpsc::Receiver<CpuResult>,
}

impl CpuAhead {
    /// The batch's indices these decodes cover, in order.
    pub(super) fn list(&self) -> &[usize] {
        &self.list
    }

    /// Wait for every decode; returns the results and the seconds waited.
    pub(super) fn finish(self) -> (Vec<CpuResult>, f64) {
        let t = std::time::Instant::now();
        let done: Vec<CpuResult> = self.results.iter().take(self.list.len()).collect();
        assert_eq!(done.len(), self.list.len(), "every CPU-route job sends its result");
        (done, t.elapsed().as_secs_f64())
    }
}

/// The CPU route for a thread other than the decoder's (the CUDA backend's helper, which starts
/// the next batch's CPU-route decodes while this batch decodes): the decoder's pool and guard.
#[derive(Clone)]
pub struct CpuRoute {
    pub(super) pool: std::sync::Arc<CpuPool>,
    pub(super) max_pixels: u64,
}

impl CpuRoute {
    /// Start the CPU-route images of a routed batch (`routes[i]` for `jobs[i]`, from
    /// [`super::Classifier::classify_batch`]), each in the region it will be placed with, on
    /// copies of their bytes; `None` when the batch has none.
    pub fn start(&self, jobs: &[(&[u8], AugParams)], routes: &[Result<super::Classified, SlotError>]) -> Option<CpuAhead> {
        let items: Vec<_> = routes
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Ok((super::Route::Cpu, roi, _, _)) => Some((i, jobs[i].0.to_vec(), cpu_region(roi))),
                _ => None,
            })
            .collect();
        (!items.is_empty()).then(|| self.pool.start(items, self.max_pixels))
    }
}

/// The region the CPU decoder decodes for a placed image: the whole image when its header was
/// unreadable (an empty region).
pub(super) fn cpu_region(roi: &super::Roi) -> Region {
    (roi.w > 0 && roi.h > 0).then_some((roi.x, roi.y, roi.w, roi.h))
}

/// Decode `bytes` with libjpeg-turbo, only `region` of it (the whole image when `None`): one
/// CPU-route image, as [`CpuPool::decode_while`] and [`CpuPool::start`] decode each.
fn decode_region(bytes: &[u8], max_pixels: u64, region: Region) -> Result<DecodedImage, DecodeError> {
    let mut img = DecodedImage::default();
    decode_rgb_region(bytes, max_pixels, region, &mut img).map(|()| img)
}

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
            .thread_name(|i| format!("stoke-gpu-cpu-{i}"))
            .build()
            .map_err(|e| GpuError::Cuda { call: "starting the CPU decode threads", message: e.to_string() })?;
        Ok(Self { pool, threads })
    }

    /// Start decoding `items` (`(index, bytes, region)`: the whole image when the region is
    /// `None`) on the pool's workers and return at once; as [`Self::decode_while`] decodes them.
    pub(super) fn start(&self, items: Vec<(usize, Vec<u8>, Region)>, max_pixels: u64) -> CpuAhead {
        let (tx, rx) = std::sync::mpsc::channel();
        let list = items.iter().map(|(i, _, _)| *i).collect();
        for (i, bytes, region) in items {
            let tx = tx.clone();
            self.pool.spawn(move || {
                // A decoder's panic is this image's error already (`decode::guarded`).
                let r = decode_region(&bytes, max_pixels, region);
                // The receiver is gone when the batch did not come: nothing to do then.
                let _ = tx.send((i, r));
            });
        }
        CpuAhead { list, results: rx }
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
                        let region = out[i].as_ref().ok().and_then(|d| cpu_region(&d.roi));
                        done.push((i, decode_region(jobs[i].0, max_pixels, region)));
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
