//! Decode and augment on the CPU: the reference and the fallback.
//!
//! A pool of `cpu_threads` workers (all cores when 0) decodes and augments the samples of one
//! batch in parallel. Each sample is written straight into its slot of the batch tensor by
//! the shared kernel math ([`crate::augment::host::augment`]); every worker keeps its decoded
//! image and scratch buffers between samples, so nothing is allocated per sample once the
//! buffers have grown to the largest image. A sample's bytes depend only on its compressed
//! bytes and its [`AugParams`], so the batch is the same whatever the thread count.
//!
//! Only the part of the image that holds the crop box is decoded (libjpeg-turbo skips the
//! rows below it and the inverse DCT of iMCU columns left and right of it): identical pixels,
//! less work (see [`decode::decode_rgb_region`]). With `cpu_dct_scaling` on, whole-image
//! crops of large images are decoded at 1/2, 1/4 or 1/8 scale instead ([`dct_denominator`]):
//! faster, close to but not bit-identical with the full path. ImageNet-sized images never
//! qualify (on the corpus's 500×375-class photos 1 train crop in 300 would).
//!
//! Substitutes (docs/CONTRACTS.md, contract 4): under `skip`, a sample that cannot be read or decoded is
//! replaced by the next good sample of the same batch (cyclic): pixels, params, label and
//! dataset index are copied into its slot and a [`Substitute`](crate::batch::Substitute) is recorded. A batch with no
//! good sample is an error naming its keys. Under `fail`, the first bad sample (in slot order)
//! is an error naming it.

#[doc(hidden)] // internals: see the crate docs
pub mod decode;

use crate::augment::host::{self, Scratch, SrcImage};
use crate::augment::params::oriented_size;
use crate::augment::AugParams;
use crate::backend::{Backend, BatchInput, BatchRun, BatchTimes, SlotPlan};
use crate::batch::{Batch, DecoderCounts, Images};
use crate::config::{OnError, OutputSpec, PipelineConfig};
use crate::error::{Error, Result, SlotError};
use decode::DecodedImage;
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The batch's images, written by the pool's workers at disjoint ranges (see its use).
struct SharedOut(*mut u8);
// SAFETY: only used to make disjoint per-(view, sample) slices, one worker per sample.
unsafe impl Sync for SharedOut {}

/// The CPU decode + augment backend.
pub struct CpuBackend {
    pool: rayon::ThreadPool,
    threads: usize,
    output: OutputSpec,
    groups: Vec<crate::augment::views::GroupShape>,
    /// Each epoch's output size over `groups`' (a resolution schedule).
    resolution: Option<crate::config::ResolutionSchedule>,
    max_pixels: u64,
    dct: bool,
    on_error: OnError,
    mixup: crate::config::MixupSpec,
    seed: u64,
    decode_only: bool,
    /// Set when the batch being made will be thrown away ([`Backend::set_stop`]).
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

struct Worker {
    image: DecodedImage,
    scratch: Scratch,
}

thread_local! {
    static WORKER: RefCell<Worker> = RefCell::new(Worker { image: DecodedImage::default(), scratch: Scratch::default() });
}

/// Downscale that must remain after DCT-domain scaling (see [`dct_denominator`]).
pub const DCT_MIN_REMAINING_DOWNSCALE: f64 = 3.0;

/// The DCT scale denominator (1, 2, 4 or 8) for `p`: the largest that leaves at least a
/// [`DCT_MIN_REMAINING_DOWNSCALE`]× downscale on both axes, for crops that are the whole image
/// (only those map exactly onto the reduced image); 1 otherwise.
///
/// Measured against the full path (eval preset at 224, f32, 0..255 scale) on the corpus's
/// large photos: 6028×3391 baseline at 1/4 (3.3× left): mean abs diff 0.29, max 11, decode
/// 143 → 49 ms; 4096×4096 progressive at 1/4: mean 0.08 (progressive files barely decode
/// faster: entropy decoding dominates); 2560×3837 at 1/2 (5× left): mean 0.32. At 2–2.5× left
/// the mean grew to 0.95, hence the 3× floor.
pub fn dct_denominator(p: &AugParams) -> u32 {
    let whole = p.crop_x == 0 && p.crop_y == 0 && p.crop_w == p.src_w && p.crop_h == p.src_h;
    if !whole || p.resize_w <= 0 || p.resize_h <= 0 {
        return 1;
    }
    let left = (p.crop_w as f64 / p.resize_w as f64).min(p.crop_h as f64 / p.resize_h as f64);
    [8u32, 4, 2].into_iter().find(|&d| left / d as f64 >= DCT_MIN_REMAINING_DOWNSCALE).unwrap_or(1)
}

/// Decode the region of `bytes` that holds every view's crop box (or, with `dct` and one
/// view, the whole image at reduced scale where [`dct_denominator`] allows) once, and augment
/// each view `views[v]` into `outs[v]` (decode only, for `decode_only`'s measurement, when
/// `outs` is `None`).
#[allow(clippy::too_many_arguments)]
fn process_one(
    bytes: &[u8],
    views: &[AugParams],
    spec: &OutputSpec,
    max_pixels: u64,
    dct: bool,
    outs: Option<&mut [&mut [u8]]>,
    decode_ns: &AtomicU64,
    augment_ns: &AtomicU64,
) -> std::result::Result<(), SlotError> {
    WORKER.with(|w| {
        let w = &mut *w.borrow_mut();
        let t0 = Instant::now();
        let denom = match views {
            [p] if dct => dct_denominator(p),
            _ => 1,
        };
        if denom > 1 {
            let p = &views[0];
            let r = decode::decode_rgb_scaled(bytes, max_pixels, denom, &mut w.image);
            let t1 = Instant::now();
            decode_ns.fetch_add((t1 - t0).as_nanos() as u64, Ordering::Relaxed);
            r?;
            let Some([out]) = outs else { return Ok(()) };
            let img = &w.image;
            // The same geometry on the reduced image: its whole oriented extent is the crop.
            let (ow, oh) = oriented_size(img.width as i32, img.height as i32, p.orientation);
            let q = AugParams { src_w: ow, src_h: oh, crop_w: ow, crop_h: oh, ..*p };
            let src = SrcImage::full(&img.rgb, img.width as i32, img.height as i32);
            let r = host::augment(src, &q, spec, out, 0, &mut w.scratch);
            augment_ns.fetch_add(t1.elapsed().as_nanos() as u64, Ordering::Relaxed);
            return r.map_err(SlotError::Params);
        }
        // Stored bounding box of every view's crop (the params describe the oriented image).
        let region = crate::augment::region::crop_region(&crate::augment::views::covering(views));
        let r = decode::decode_rgb_region(bytes, max_pixels, region, &mut w.image);
        let t1 = Instant::now();
        decode_ns.fetch_add((t1 - t0).as_nanos() as u64, Ordering::Relaxed);
        r?;
        let Some(outs) = outs else { return Ok(()) };
        let img = &w.image;
        let src = SrcImage {
            rgb: &img.rgb,
            width: img.width as i32,
            height: img.height as i32,
            region: (img.region_x as i32, img.region_y as i32, img.region_w as i32, img.region_h as i32),
            row_stride: img.region_w as usize * 3,
        };
        let r = views.iter().zip(outs.iter_mut()).try_for_each(|(p, out)| host::augment(src, p, spec, out, 0, &mut w.scratch));
        augment_ns.fetch_add(t1.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r.map_err(SlotError::Params)
    })
}

impl CpuBackend {
    /// A backend for `config`: a pool of `config.cpu_threads` workers (0 = all cores).
    pub fn new(config: &PipelineConfig) -> Result<Self> {
        config.validate()?;
        if !decode::jpeg_simd() {
            log::warn!("{}", decode::NO_SIMD_ADVICE);
        }
        if config.mixup.enabled() && config.mixup.num_classes == 0 {
            return Err(Error::config("mixup/cutmix needs mixup.num_classes (the Pipeline sets it from the dataset)"));
        }
        let threads =
            if config.cpu_threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { config.cpu_threads };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("stoke-cpu-{i}"))
            .build()
            .map_err(|e| Error::config(format!("cannot start {threads} cpu worker threads: {e}")))?;
        Ok(Self {
            pool,
            threads,
            output: config.output.clone(),
            groups: crate::augment::views::GroupShape::of(&config.view_groups()),
            resolution: config.resolution,
            max_pixels: config.max_decoded_pixels,
            dct: config.cpu_dct_scaling,
            on_error: config.on_error,
            mixup: config.mixup.clone(),
            seed: config.seed,
            decode_only: config.decode_only,
            stop: Default::default(),
        })
    }
}

impl Backend for CpuBackend {
    fn threads(&self) -> usize {
        self.threads
    }

    fn set_stop(&mut self, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.stop = stop;
    }

    /// Decode and augment `samples` into `batch` (its buffers are reused); a replaced slot gets
    /// a host copy of its source slot's pixels.
    fn run(&mut self, input: BatchInput<'_, '_>, batch: &mut Batch) -> Result<BatchRun> {
        let BatchInput { epoch, step, samples } = input;
        let t0 = Instant::now();
        let n = samples.len();
        batch.dtype = self.output.dtype;
        batch.layout = self.output.layout;
        batch.set_views(n, &crate::config::shapes_at(&self.groups, self.resolution.as_ref(), epoch));
        batch.epoch = epoch;
        batch.step = step;
        let places = batch.view_places();
        let image_bytes = batch.images_bytes();
        if !matches!(batch.images, Images::Host(_)) || self.decode_only {
            // A device batch held before is returned; a decode-only batch holds no images.
            batch.images = Images::Host(Default::default());
        }
        let Images::Host(images) = &mut batch.images else { unreachable!("made a host batch above") };
        if !self.decode_only {
            images.resize(self.output.dtype, image_bytes);
        }
        for s in samples {
            let ok = s.params.len() == places.len()
                && s.params.iter().zip(&places).all(|(p, v)| (p.out_w as usize, p.out_h as usize) == (v.width, v.height));
            if !ok {
                let got: Vec<String> = s.params.iter().map(|p| format!("{}x{}", p.out_w, p.out_h)).collect();
                let want: Vec<String> = places.iter().map(|v| format!("{}x{}", v.width, v.height)).collect();
                return Err(Error::config(format!(
                    "sample params ask for views [{}], the pipeline makes [{}]",
                    got.join(", "),
                    want.join(", ")
                )));
            }
        }
        let mut status: Vec<Option<SlotError>> = vec![None; n];
        let (decode_ns, augment_ns) = (AtomicU64::new(0), AtomicU64::new(0));
        let (spec, max_pixels, dct) = (&self.output, self.max_pixels, self.dct);
        let stop = &self.stop;
        let one = |outs: Option<&mut [&mut [u8]]>, s: &crate::backend::SampleIn<'_>| match &s.read_error {
            Some(e) => Some(e.clone()),
            // The batch will be thrown away (Backend::set_stop): not worth decoding.
            None if stop.load(std::sync::atomic::Ordering::Relaxed) => Some(SlotError::Read("not made: the pipeline is stopping".into())),
            None => process_one(s.bytes, s.params, spec, max_pixels, dct, outs, &decode_ns, &augment_ns).err(),
        };
        self.pool.install(|| {
            if self.decode_only {
                samples.par_iter().zip(status.par_iter_mut()).for_each(|(s, st)| *st = one(None, s));
            } else if let [v] = places[..] {
                // One view: each sample's output is one contiguous chunk.
                images[..n * v.sample_bytes]
                    .par_chunks_mut(v.sample_bytes)
                    .zip(samples.par_iter())
                    .zip(status.par_iter_mut())
                    .for_each(|((out, s), st)| *st = one(Some(&mut [out]), s));
            } else {
                let base = SharedOut(images[..image_bytes].as_mut_ptr());
                samples.par_iter().enumerate().zip(status.par_iter_mut()).for_each(|((i, s), st)| {
                    let base = &base;
                    // SAFETY: view `v` of sample `i` is the range `places[v].offset + i ·
                    // sample_bytes` of length `sample_bytes`, inside the `image_bytes` above;
                    // the ranges of distinct (view, sample) pairs are disjoint (views lie
                    // view-major, groups one after another: `view_offsets`), and each sample's
                    // ranges are made by this one closure call only.
                    let mut outs: Vec<&mut [u8]> = places
                        .iter()
                        .map(|v| unsafe { std::slice::from_raw_parts_mut(base.0.add(v.offset + i * v.sample_bytes), v.sample_bytes) })
                        .collect();
                    *st = one(Some(&mut outs), s);
                });
            }
        });

        batch.decoders = DecoderCounts { cpu: status.iter().filter(|s| s.is_none()).count() as u64, ..DecoderCounts::default() };
        let plan = SlotPlan::new(&status, self.on_error);
        if let Some(sources) = plan.sources() {
            if !self.decode_only {
                for (to, &from) in sources.iter().enumerate().filter(|(to, from)| to != *from) {
                    for v in &places {
                        let at = |i: usize| v.offset + i * v.sample_bytes;
                        images.copy_within(at(from)..at(from) + v.sample_bytes, at(to));
                    }
                }
            }
            super::fill_records(samples, sources, batch);
            if self.decode_only {
                // No images, so nothing mixed and no soft targets (a recycled batch's are cleared).
                batch.targets.clear();
                batch.num_classes = 0;
            } else {
                // On the pool's workers: the pairs are independent (same bits whatever the threads).
                self.pool.install(|| super::mix_host_batch(&self.mixup, self.seed, batch))?;
            }
        }
        let times = BatchTimes {
            decode: Duration::from_nanos(decode_ns.into_inner()),
            augment: Duration::from_nanos(augment_ns.into_inner()),
            wall: t0.elapsed(),
            ..BatchTimes::default()
        };
        Ok(BatchRun { times, status, plan })
    }
}
