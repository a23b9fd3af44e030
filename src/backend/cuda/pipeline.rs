//! The CUDA backend: one batch through staging → nvJPEG → fused augment → output ring.
//!
//! Per batch, on the thread that calls [`CudaBackend::run`]:
//! 1. the compressed bytes are placed for the decoders — where the readers put them, in the
//!    backend's pinned pool (no copy), or copied into a staging slot when they are elsewhere
//!    (`staged`) — and every image is routed (hardware engine / CUDA decoders / CPU) from its header — unless that was done
//!    while the previous batch decoded ([`Backend::run_ahead`]: the pipeline says which batch
//!    comes next, and a thread of the backend's stages and routes it, and starts its CPU-route
//!    decodes on the pool, while the hardware engine's calls hold this one; on an H200 staging
//!    and routing took ~6 ms of a 20 ms batch);
//! 2. [`GpuDecoder::decode_routed`] decodes
//!    the region the augment reads into one of two device arenas, retries GPU failures on the
//!    CPU, and returns where each image's pixels are;
//! 3. failed samples are replaced by the next good sample of the batch (`skip`) or fail the
//!    batch naming the sample (`fail`), exactly as the CPU backend does;
//! 4. a ring slot is taken (the producer stream waits for its previous consumer), the labels,
//!    parameters and descriptors are uploaded, the two augment kernels are enqueued, the slot's
//!    ready event is recorded and the batch is handed out with [`Images::Device`].
//!
//! Everything is allocated in [`CudaBackend::new`], sized from the config and the index (the
//! readers' pinned buffers too; only the staging ring waits for the first batch not in them,
//! which a pipeline's readers never make unless a batch outgrows its buffer): no device or
//! pinned allocation happens in steady state (docs/CONTRACTS.md, contract 5). One backend per
//! device (the config's ordinal), each with its own streams, nvJPEG handles and buffers, so
//! several pipelines in one process can each drive their own GPU.
//!
//! Not yet verified on a GPU: written against the nvJPEG 13.0 and CUDA driver documentation
//! and cudarc 0.19.10 on a machine without one; tests/gpu_*.rs check it where a GPU is lent.

use super::augment::{AugmentKind, Augmenter, SampleDesc, TableLayout, TablePlan, TableView};
use super::decode::{
    cuda_slot_bytes, decoder_budget, AheadPlacer, Classifier, CpuRoute, DecodeStats, Decoded, DecoderExtras, DecoderPlan, FixedBytes,
    GpuDecoder, MemoryPlan,
};
use super::device::{elapsed_secs, timing_event, Gpu};
use super::ring::{slot_layout, OutputRing};
use super::staging::StagedRange;
use staged::{prepare, Prepared, Stager};

mod bounds;
mod staged;
use crate::augment::mixup::MixParams;
use crate::augment::AugParams;
use crate::backend::helpers::Helpers;
use crate::backend::{Backend, BatchInput, BatchRun, BatchTimes, SampleIn, SlotPlan};
use crate::batch::{Batch, DecoderCounts, Images};
use crate::codec::{DecodeError, DecodeErrorKind};
use crate::config::{CropMode, PipelineConfig};
use crate::error::{Error, Result, SlotError};
use crate::source::Dataset;
pub use bounds::{typical_batch, IndexBounds};
use cudarc::driver::{CudaEvent, PushKernelArg};
use std::sync::Arc;
use std::time::Instant;

/// Largest decoded-size guard the CUDA backend takes: the kernels address a decoded region
/// with 32-bit byte offsets (3 · pixels < 2^31).
pub const MAX_GPU_PIXELS: u64 = (i32::MAX as u64) / 3;

/// The producer side of the GPU pipeline for one device.
pub struct CudaBackend {
    gpu: Arc<Gpu>,
    config: PipelineConfig,
    // The view groups every batch is made of (one group of one view without `views`).
    groups: Vec<crate::augment::views::GroupShape>,
    // Where batches' bytes are for the decoders: the readers' pinned pool, or the staging ring.
    staging: Stager,
    decoder: GpuDecoder,
    augmenter: Augmenter,
    ring: OutputRing,
    // Routes the batch that comes next, on its helper thread, while this one decodes
    // (`None`: a second classifier could not be made, and nothing is prepared ahead).
    ahead_classifier: Option<(Classifier, Helpers)>,
    // The next batch, staged and routed while the last one decoded.
    ahead: Option<Prepared>,
    // Where the helper starts the next batch's CPU-route decodes (the decoder's pool).
    cpu_route: CpuRoute,
    // With the engine ahead (`gpu_engine_ahead`): how the helper places the next batch and
    // queues its engine calls.
    placer: Option<AheadPlacer>,
    // Per-batch scratch, reused.
    ranges: Vec<Option<StagedRange>>,
    decoded: Vec<std::result::Result<Decoded, SlotError>>,
    params: Vec<AugParams>,
    descs: Vec<SampleDesc>,
    mix: Vec<MixParams>,
    targets: Vec<f32>,
    // Timing events around the augment launches of the last two batches, used in turn; read
    // without waiting (a kernel may still wait on the trainer for its ring slot).
    aug_events: [(CudaEvent, CudaEvent); 2],
    aug_pending: [bool; 2],
    // The last batch failed part-way: what it queued may still be running, and the host-side
    // guards of the buffers it used may not have been recorded (a failed record). The next
    // batch first waits for the device (`recover`).
    failed_last: bool,
    aug_turn: usize,
}

impl CudaBackend {
    /// Open the config's device and allocate everything the pipeline will ever use.
    pub fn new(config: &PipelineConfig, dataset: &Dataset) -> Result<Self> {
        config.validate()?;
        if config.mixup.enabled() && config.mixup.num_classes == 0 {
            return Err(Error::config("mixup/cutmix needs mixup.num_classes (the Pipeline sets it from the dataset)"));
        }
        let gpu = super::open_for_pipeline(config.device)?;
        let rewrites = config.transcode_progressive;
        let samples = dataset.samples().iter().map(move |s| {
            let (w, h) = s.info.map_or((0, 0), |i| (i.width, i.height));
            // Progressive JPEGs rewritten as baseline may be longer than stored, up to `room`.
            let len = if rewrites && crate::reader::transcode::rewritten(s.info.as_ref()) {
                crate::reader::transcode::room(s.len)
            } else {
                s.len
            };
            (len, w, h)
        });
        let bounds = IndexBounds::new(samples, config.batch_size, config.max_decoded_pixels);
        Self::with_bounds(gpu, config, bounds)
    }

    /// As [`CudaBackend::new`] for stream mode, sized by the per-shard facts
    /// ([`IndexBounds::from_shards`]); a sample larger than its shard's facts say goes to the
    /// policy as any sample that does not fit (named, substituted), never past a buffer.
    pub fn for_shards(config: &PipelineConfig, bounds: IndexBounds) -> Result<Self> {
        config.validate()?;
        if config.mixup.enabled() && config.mixup.num_classes == 0 {
            return Err(Error::config("mixup/cutmix needs mixup.num_classes (the Pipeline sets it from the shards)"));
        }
        let gpu = super::open_for_pipeline(config.device)?;
        Self::with_bounds(gpu, config, bounds)
    }

    /// [`CudaBackend::new`] on an open device with explicit bounds (tests, benchmarks).
    pub fn with_bounds(gpu: Arc<Gpu>, config: &PipelineConfig, bounds: IndexBounds) -> Result<Self> {
        config.validate()?;
        check_limits(config)?;
        gpu.set_wait(config.gpu_wait)?;
        let cpu_threads = if config.cpu_threads == 0 { default_cpu_route_threads() } else { config.cpu_threads };
        // What the batch, output size and recipe fix (the output ring, the augment scratch)
        // comes off a stated budget first; the decoder gets the rest. Every view counts: one
        // launch per group of views, the tables of all of them at once.
        // With a resolution schedule everything is sized for `max_res` (the specs' size), the
        // filter taps for `min_res` (the most downscaling): no epoch allocates.
        let groups = config.view_groups();
        let specs: Vec<&crate::config::AugmentSpec> = groups.iter().flat_map(|g| &g.views).collect();
        let smallest = config.resolution.map_or(u32::MAX, |r| r.min_res);
        let views: Vec<TableView> = specs
            .iter()
            .map(|a| {
                let (ow, oh) = a.size;
                let resize_min = match a.crop {
                    CropMode::ResizeCenter { shorter } => shorter.min(ow).min(oh),
                    _ => ow.min(oh),
                }
                .min(smallest);
                let filter = if a.random_filter { crate::augment::params::FILTER_BICUBIC } else { a.filter.code() };
                TableView { out: a.size, resize_min, filter, antialias: a.antialias }
            })
            .collect();
        let counts: Vec<usize> = groups.iter().map(|g| g.count()).collect();
        let tables = TablePlan::for_views(config.batch_size, &counts, &views, bounds.max_side);
        let auto = specs.iter().any(|a| a.auto_augment.is_some());
        let blur =
            specs.iter().any(|a| a.blur.is_some()).then(|| specs.iter().any(|a| a.blur.as_ref().is_some_and(|b| b.kernel.is_some())));
        let classes = if config.mixup.enabled() { config.mixup.num_classes } else { 0 };
        let shapes = crate::augment::views::GroupShape::of(&groups);
        let slot = slot_layout(config.batch_size, &shapes, config.output.dtype, config.output.layout, classes);
        let fixed = FixedBytes {
            ring_device: (config.ring_depth * slot.slot_bytes) as u64,
            ring_pinned: (config.ring_depth * slot.tail_bytes()) as u64,
            augment_device: Augmenter::planned_device_bytes(tables, auto, blur),
        };
        let budget = decoder_budget(config.gpu_memory_budget, config.batch_size, &fixed).map_err(Error::config)?;
        // Device and pinned memory by the budget, not by the index's largest images: a plan
        // that fits is kept as the index made it (module docs of `decode::budget`).
        let extras = DecoderExtras {
            hybrid: config.gpu_hybrid_share != crate::config::HybridShare::Off,
            device_bitstreams: config.gpu_bitstream == crate::config::GpuBitstream::Device,
        };
        let memory = MemoryPlan::fit(bounds.staging, bounds.arena, cuda_slot_bytes(bounds.max_image_pixels), budget, extras);
        if memory.arena != bounds.arena || memory.staging != bounds.staging {
            log::warn!(
                "GPU memory budget: {budget} bytes for the decoder ({} fixed: output ring and augment scratch); decode arenas cut from {} to {} bytes, staging from {} to {} bytes per slot; a batch whose decoded regions exceed an arena substitutes its overflow (raise gpu_memory_budget)",
                fixed.total(),
                bounds.arena.bytes,
                memory.arena.bytes,
                bounds.staging.slot_bytes,
                memory.staging.slot_bytes
            );
        }
        let (use_hardware, use_cuda) = DecoderPlan::switches(config.gpu_decoders);
        // The readers' pinned buffers: a typical batch with room to spare, within the slot the
        // budget allows; as many as the readers and the producer can hold at once (the index
        // reader's jobs in flight, `max(prefetch, reader_threads)`, or the stream reader's
        // `prefetch` made plus one assembling; the batch running and the one prepared ahead),
        // and one to spare.
        let buffer = bounds.typical_batch.min(memory.staging.slot_bytes);
        let staging = Stager::new(gpu.ctx(), memory.staging, buffer, config.prefetch_batches.max(config.reader_threads) + 4)?;
        let mut decoder = GpuDecoder::new(
            &gpu,
            DecoderPlan {
                batch: config.batch_size,
                arena: memory.arena,
                max_pixels: config.max_decoded_pixels,
                max_dims: bounds.max_dims,
                slot_bytes: memory.slot,
                // Several calls per batch: the engine starts on the first while the host
                // parses the next (nvJPEG parses every bitstream on the host before it
                // submits a call). A quarter batch, rounded to the engine width; to be tuned
                // on a GPU.
                hw_max_per_call: (config.batch_size / 4).max(1),
                cpu_threads,
                use_hardware,
                engine_gray: config.gpu_engine_gray,
                engine_lanes: config.gpu_engine_lanes,
                engine_ahead: config.gpu_engine_ahead,
                use_cuda,
                interpolated: config.gpu_upsampling == crate::config::GpuUpsampling::Smooth,
                device_bitstream_bytes: memory.device_bitstream_bytes(),
            },
        )?;
        decoder.enable_batched_hybrid(config.gpu_hybrid_share)?;
        let augmenter = Augmenter::new(&gpu, gpu.stream(), tables, &config.output)?;
        if auto {
            augmenter.reserve_auto()?;
        }
        if let Some(gauss) = blur {
            augmenter.reserve_blur(gauss)?;
        }
        let ring = OutputRing::new(gpu.stream(), slot, config.ring_depth)?;
        if config.ring_depth < config.prefetch_batches + 2 {
            log::info!(
                "ring depth {} < prefetch {} + 2: the producer will wait for the trainer to drop batches before running ahead",
                config.ring_depth,
                config.prefetch_batches
            );
        }
        let aug_events = [timing_pair(&gpu)?, timing_pair(&gpu)?];
        // Only a head start: without a second classifier every batch is routed in its turn.
        let ahead_classifier = match decoder.new_classifier() {
            Ok(c) => Some((c, Helpers::new("stoke-gpu-ahead", 1).map_err(Error::config)?)),
            Err(e) => {
                log::warn!("a second nvJPEG parse stream cannot be made ({e}); batches are not prepared ahead");
                None
            }
        };
        // Without a head start (no second classifier) there is no batch to place ahead.
        let placer = match &ahead_classifier {
            Some(_) => decoder.ahead_placer()?,
            None => None,
        };
        Ok(Self {
            gpu,
            config: config.clone(),
            groups: shapes,
            staging,
            ahead_classifier,
            ahead: None,
            placer,
            cpu_route: decoder.cpu_route(),
            decoder,
            augmenter,
            ring,
            ranges: Vec::new(),
            decoded: Vec::new(),
            params: Vec::new(),
            descs: Vec::new(),
            mix: Vec::new(),
            targets: Vec::new(),
            aug_events,
            aug_pending: [false; 2],
            aug_turn: 0,
            failed_last: false,
        })
    }

    /// Device bytes this backend allocated: decode arenas and buffers, the output ring, the
    /// augment tables (nvJPEG's lazily grown internal buffers are not visible here).
    pub fn device_bytes(&self) -> u64 {
        self.decoder.device_bytes() + self.ring.device_bytes() + self.augmenter.device_bytes()
    }

    /// Pinned host bytes this backend allocated: the staging ring, the decoder's, the ring
    /// slots' launch data.
    pub fn pinned_bytes(&self) -> u64 {
        self.staging.pinned_bytes() + self.decoder.pinned_bytes() + self.ring.pinned_bytes()
    }

    /// GPU time of the augment launches whose end events have completed since last asked;
    /// never waits.
    fn take_augment_time(&mut self) -> Result<f64> {
        let mut t = 0.0;
        for k in 0..2 {
            let (start, end) = &self.aug_events[k];
            if self.aug_pending[k] && end.is_complete() {
                self.aug_pending[k] = false;
                t += elapsed_secs(start, end)?;
            }
        }
        Ok(t)
    }

    /// The device.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Decoder counters (which route decoded how many images).
    pub fn decode_stats(&self) -> DecodeStats {
        self.decoder.stats()
    }

    /// Engines × cores of the hardware JPEG decoder, `None` without one.
    pub fn hardware_width(&self) -> Option<usize> {
        self.decoder.hardware_width()
    }
}

impl Backend for CudaBackend {
    fn threads(&self) -> usize {
        self.decoder.cpu_threads()
    }

    fn held_bytes(&self) -> (u64, u64) {
        (self.device_bytes(), self.pinned_bytes())
    }

    fn nvjpeg_memory(&self) -> crate::backend::NvjpegMemoryStats {
        self.decoder.nvjpeg_memory()
    }

    fn looks_ahead(&self) -> bool {
        self.ahead_classifier.is_some()
    }

    fn bytes_source(&self) -> crate::reader::bytes::BytesSource {
        self.staging.bytes_source()
    }

    /// Decode and augment `samples` into a fresh ring slot and describe it in `batch`
    /// (`batch.images` becomes [`Images::Device`]; a device batch it held before is dropped,
    /// which returns its slot). A replaced slot's kernel reads its source slot's decoded image.
    fn run(&mut self, input: BatchInput<'_, '_>, batch: &mut Batch) -> Result<BatchRun> {
        self.run_ahead(input, None, batch)
    }

    /// [`Backend::run`], staging and routing `ahead` on a thread of its own while the decoders
    /// work on `input` (the engine's calls hold this thread: module doc).
    fn run_ahead(&mut self, input: BatchInput<'_, '_>, ahead: Option<BatchInput<'_, '_>>, batch: &mut Batch) -> Result<BatchRun> {
        if self.failed_last {
            self.recover()?;
        }
        let r = self.run_batch(input, ahead, batch);
        self.failed_last = r.is_err();
        r
    }
}

impl CudaBackend {
    /// After a batch that failed part-way: wait for everything queued in the device's context
    /// (the failed batch's copies, decodes and kernels, on whichever of its streams), so that
    /// no buffer it used is rewritten by the host while a stream still reads it, whatever
    /// guard it could not record; and forget its timing events and its prepared next batch.
    /// The failed batch's ring and staging slots are back already (they go back on every
    /// error path).
    fn recover(&mut self) -> Result<()> {
        let ctx = self.gpu.ctx();
        crate::batch::device::take_stale_error(ctx, "recovering from a failed batch");
        ctx.bind_to_thread().and_then(|()| ctx.synchronize()).map_err(crate::error::driver_err("cuCtxSynchronize"))?;
        self.aug_pending = [false; 2];
        self.forget_ahead()?;
        self.failed_last = false;
        Ok(())
    }

    /// Drop the batch prepared ahead, if any: its engine calls (queued with the engine ahead)
    /// done first, then its bytes released after the engine's stream and the batched
    /// GPU-hybrid route's, which read them (without the engine ahead nothing read them on a
    /// stream).
    fn forget_ahead(&mut self) -> Result<()> {
        if let Some(mut p) = self.ahead.take() {
            // Dropped here, which waits for its engine calls; its canaries' stream waited too.
            let queued = p.placed.take().is_some_and(|placed| placed.queued());
            if let Some(placer) = &self.placer {
                placer.settle();
            }
            let side: Vec<&cudarc::driver::CudaStream> = self.decoder.side_streams().into_iter().filter(|_| queued).map(|s| &**s).collect();
            // The batched GPU-hybrid route's call writes the arena the batch was placed in,
            // stream-ordered (the engine's calls are done when its task is): done before
            // another batch is placed there. Rare (a new epoch, a resume, a failure), so the
            // host waits.
            for s in &side {
                s.synchronize().map_err(crate::error::driver_err("cuStreamSynchronize"))?;
            }
            self.staging.release(p.staged, &side)?;
        }
        Ok(())
    }

    fn run_batch(&mut self, input: BatchInput<'_, '_>, ahead: Option<BatchInput<'_, '_>>, batch: &mut Batch) -> Result<BatchRun> {
        let BatchInput { epoch, step, samples } = input;
        let t0 = Instant::now();
        self.decoder.batch_started(t0);
        // A device batch this `Batch` still holds gives its ring slot back first (its release
        // is recorded on its consumer's stream), so a recycled batch never starves the ring.
        if matches!(batch.images, Images::Device(_)) {
            batch.images = Images::Host(Default::default());
        }
        let n = samples.len();
        let most = self.config.batch_size;
        let fits = |s: &[SampleIn<'_>]| (1..=most).contains(&s.len());
        if !fits(samples) {
            // What was prepared for this call is dropped with it (nothing read its slot).
            self.forget_ahead()?;
            return Err(Error::config(format!("a batch holds 1..={} samples, got {n}", self.config.batch_size)));
        }
        // This epoch's views (a resolution schedule's size; the buffers are sized for the largest).
        let groups = crate::config::shapes_at(&self.groups, self.config.resolution.as_ref(), epoch).into_owned();
        let sizes: Vec<(i32, i32)> = groups.iter().flat_map(|g| std::iter::repeat_n((g.width as i32, g.height as i32), g.count)).collect();
        for s in samples {
            if s.params.len() != sizes.len() || s.params.iter().zip(&sizes).any(|(p, &wh)| (p.out_w, p.out_h) != wh) {
                let got: Vec<String> = s.params.iter().map(|p| format!("{}x{}", p.out_w, p.out_h)).collect();
                let want: Vec<String> = sizes.iter().map(|(w, h)| format!("{w}x{h}")).collect();
                return Err(Error::config(format!(
                    "sample params ask for views [{}], the pipeline makes [{}]",
                    got.join(", "),
                    want.join(", ")
                )));
            }
        }

        // 1. Staging and routing: prepared while the last batch decoded, or now.
        let (staged, routes, cpu_started, placed, was_ahead) = match self.ahead.take() {
            Some(p) if p.key.is_for(epoch, step, samples) => {
                self.ranges = p.ranges;
                (p.staged, Some(p.routes), p.cpu, p.placed, true)
            }
            stale => {
                // Prepared for a batch that did not come (a new epoch started): its engine
                // calls done, nothing read its slot on a stream.
                self.ahead = stale;
                self.forget_ahead()?;
                (self.staging.stage(samples, &mut self.ranges)?, None, None, None, false)
            }
        };
        let jobs = self.staging.jobs(staged, &self.ranges, samples);
        let span = self.staging.span(staged, &self.ranges);

        // 2. Decode; meanwhile the next batch is staged and routed on a thread of its own.
        let t_dec = Instant::now();
        let before = self.decoder.stats();
        // How far ahead of the trainer this batch is made (the GPU-hybrid share yields then).
        self.decoder.set_waiting_batches(self.ring.waiting());
        let ahead = ahead.filter(|a| fits(a.samples));
        // With the engine ahead the next batch takes the arena this one does not.
        let next_arena = placed.as_ref().map_or(self.decoder.next_arena(), |p| p.arena()) ^ 1;
        let CudaBackend { gpu, staging, cpu_route, decoder, decoded: out, ahead_classifier, placer, .. } = self;
        let placer = placer.as_ref().map(|p| (p, next_arena));
        let decode = || match &routes {
            Some(r) => decoder.decode_routed(&jobs, r, cpu_started, span, placed, out),
            None => decoder.decode_within(&jobs, span, out),
        };
        let (decoded, next) = match ahead.zip(ahead_classifier.as_mut()) {
            Some((a, (classifier, helper))) => {
                let (next, decoded) = helper.beside(|| prepare(gpu, staging, classifier, cpu_route, placer, a), decode);
                (decoded, Some(next))
            }
            None => (decode(), None),
        };
        let mut ahead_secs = 0.0;
        match next {
            Some(Ok(p)) => {
                ahead_secs = p.secs;
                self.ahead = Some(p);
            }
            // Only a lost head start: the next call stages and routes it itself, and meets
            // the error again if it lasts.
            Some(Err(e)) => log::warn!("staging the next batch ahead failed ({e}); it is staged when it runs"),
            None => {}
        }
        // The decode stream covers every read of the batch's bytes once the decode returned:
        // it waited for the engine thread's stream and the batched GPU-hybrid route's. A decode
        // that failed may not have got there: then the guard follows those streams too.
        let side = self.decoder.side_streams().into_iter().filter(|_| decoded.is_err());
        let streams: Vec<&cudarc::driver::CudaStream> = std::iter::once(self.decoder.stream()).chain(side).map(|s| &**s).collect();
        let release = self.staging.release(staged, &streams);
        let arena = decoded?;
        release?;
        let decode_time = t_dec.elapsed();
        let after = self.decoder.stats();
        batch.decoders = DecoderCounts {
            hardware: after.hardware - before.hardware,
            cuda: after.cuda - before.cuda,
            gpu_hybrid_batched: after.gpu_hybrid_batched - before.gpu_hybrid_batched,
            cpu: after.cpu - before.cpu,
            retried: after.retried - before.retried,
            gpu_hybrid_yielded: after.gpu_hybrid_yielded - before.gpu_hybrid_yielded,
            bitstream_copies: after.bitstream_copies - before.bitstream_copies,
            engine_queued_ahead: after.engine_queued_ahead - before.engine_queued_ahead,
        };

        // 3. Status per slot and the policy.
        let mut status = Vec::with_capacity(n);
        for (i, s) in samples.iter().enumerate() {
            let st = if let Some(e) = &s.read_error {
                Some(e.clone())
            } else if s.bytes.is_empty() {
                Some(SlotError::Decode(DecodeError::new(DecodeErrorKind::Truncated, "the file is empty")))
            } else if self.ranges[i].is_none() {
                Some(SlotError::Capacity(format!(
                    "{} compressed bytes do not fit the staging slot sized from the index or the shard facts (did the file grow?)",
                    s.bytes.len()
                )))
            } else {
                match &self.decoded[i] {
                    Ok(_) if !s.params.iter().all(|p| self.augmenter.plan().fits_sample(p)) => Some(SlotError::Capacity(
                        "the crop is larger than the index promised (filter tables are sized from it)".to_string(),
                    )),
                    Ok(_) => None,
                    Err(e) => Some(e.clone()),
                }
            };
            status.push(st);
        }
        batch.dtype = self.config.output.dtype;
        batch.layout = self.config.output.layout;
        batch.set_views(n, &groups);
        batch.epoch = epoch;
        batch.step = step;
        // Which slot's pixels each slot shows (itself unless replaced).
        let plan = SlotPlan::new(&status, self.config.on_error);
        let Some(source) = plan.sources() else {
            self.decoder.batch_returned(Instant::now());
            return Ok(BatchRun { times: BatchTimes { decode: decode_time, wall: t0.elapsed(), ..Default::default() }, status, plan });
        };
        crate::backend::fill_records(samples, source, batch);

        let mut gpu_times = self.decoder.stage_times();
        gpu_times.ahead = ahead_secs;
        gpu_times.ahead_batches = if was_ahead { 1.0 } else { 0.0 };
        gpu_times.copied_batches = if matches!(staged, staged::Staged::Slot(_)) { 1.0 } else { 0.0 };
        if self.config.decode_only {
            // Decoder-only measurement (`--decode-only`): the batch's records are settled, its
            // pixels stay in the arena and no output is written.
            let decode_stream = self.decoder.stream().clone();
            self.decoder.release_arena(&decode_stream)?;
            batch.images = Images::Host(Default::default());
            gpu_times.augment = 0.0;
            gpu_times.idle.tail = self.decoder.batch_returned(Instant::now());
            let times = BatchTimes { decode: decode_time, augment: Default::default(), wall: t0.elapsed(), gpu: gpu_times };
            return Ok(BatchRun { times, status, plan });
        }

        // 4. Descriptors, upload, kernels, publish. Params and descriptors in the images'
        // order: group by group, view by view, slot by slot (`augment::views`).
        let t_aug = Instant::now();
        self.params.clear();
        self.descs.clear();
        let mut tables = TableLayout::default();
        let mut kinds = Vec::with_capacity(groups.len());
        let mut first_view = 0;
        for g in &groups {
            let start = self.params.len();
            for v in first_view..first_view + g.count {
                for &j in source {
                    let p = samples[j].params[v];
                    let d = self.decoded[j].as_ref().expect("a source slot decoded");
                    let mut desc = d.desc(&p);
                    tables.add(&p, &mut desc);
                    self.params.push(p);
                    self.descs.push(desc);
                }
            }
            kinds.push(AugmentKind::of(&self.params[start..]));
            first_view += g.count;
        }
        debug_assert!(self.augmenter.plan().fits(&tables), "per-sample checks bound the batch");
        let stream = self.gpu.stream().clone();
        let slot = self.ring.acquire()?;
        gpu_times.augment = self.take_augment_time()?;
        let k = self.aug_turn;
        self.aug_turn ^= 1;
        if self.aug_pending[k] {
            // Two batches back: done unless the trainer still holds ring slots, and then the
            // acquire above already waited for it (elapsed_secs waits for the end event).
            gpu_times.augment += elapsed_secs(&self.aug_events[k].0, &self.aug_events[k].1)?;
        }
        self.aug_events[k].0.record(&stream).map_err(crate::error::driver_err("cuEventRecord"))?;
        // Mixup/CutMix: drawn per batch, applied by a second kernel over the finished slot.
        self.mix.clear();
        self.targets.clear();
        let spec = &self.config.mixup;
        if spec.enabled() {
            let classes = spec.num_classes;
            if let Some(&bad) = batch.labels.iter().find(|&&l| l < 0 || l as usize >= classes) {
                self.ring.abandon(slot);
                return Err(Error::config(format!(
                    "label {bad} is outside the {classes} classes of the mixup soft targets (mixup.num_classes)"
                )));
            }
            let (ow, oh) = self.config.size_at(epoch);
            self.mix = spec.draw(self.config.seed, epoch, step, n, ow, oh);
            spec.targets(&batch.labels, &self.mix, classes, &mut self.targets);
        }
        let launched = self.ring.upload(&slot, &batch.labels, &self.params, &self.descs, &self.mix, &self.targets).and_then(|()| {
            let (params_dev, descs_dev) = self.ring.launch_ptrs(&slot);
            // One launch per group: its images are `count · n` consecutive ones.
            let dsize = self.config.output.dtype.size() as u64;
            let (mut item, mut out) = (0u64, slot.images);
            for (g, &kind) in groups.iter().zip(&kinds) {
                let items = g.count * n;
                let (params_g, descs_g) = (
                    params_dev + item * std::mem::size_of::<AugParams>() as u64,
                    descs_dev + item * std::mem::size_of::<SampleDesc>() as u64,
                );
                self.augmenter.launch(&stream, arena, params_g, descs_g, items, (g.width as u32, g.height as u32), out, kind)?;
                item += items as u64;
                out += (items * g.sample_elements()) as u64 * dsize;
            }
            if self.mix.is_empty() {
                return Ok(());
            }
            let (ow, oh) = self.config.size_at(epoch);
            let f = self.gpu.kernels()?.function("stoke_mixup")?;
            let mut b = stream.launch_builder(&f);
            let (mix_dev, dtype, layout) = (self.ring.mix_ptr(&slot), self.config.output.dtype.code(), self.config.output.layout.code());
            let (nn, hh, ww) = (n as u32, oh as i32, ow as i32);
            b.arg(&slot.images).arg(&mix_dev).arg(&dtype).arg(&layout).arg(&nn).arg(&hh).arg(&ww);
            let total = (n / 2) as u64 * 3 * oh as u64 * ow as u64;
            let cfg = cudarc::driver::LaunchConfig {
                grid_dim: (total.div_ceil(256).clamp(1, 4096) as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: (out, mix, dtype, layout, n, H, W) is stoke_mixup's parameter list; the
            // images hold n samples of H×W×3 of `dtype` in `layout` (written by the augment
            // kernel just before, on this stream) and the slot's mix array n entries (uploaded
            // above, on this stream).
            unsafe { crate::backend::cuda::module::launch(&mut b, "stoke_mixup", cfg) }
        });
        batch.num_classes = if spec.enabled() { spec.num_classes } else { 0 };
        batch.targets.clear();
        self.aug_events[k].1.record(&stream).map_err(crate::error::driver_err("cuEventRecord"))?;
        self.aug_pending[k] = true;
        if let Err(e) = launched {
            self.ring.abandon(slot);
            return Err(e.into());
        }
        self.decoder.release_arena(&stream)?;
        let images = self.ring.publish(slot, n, &groups)?;
        batch.images = Images::Device(Box::new(images));
        gpu_times.idle.tail = self.decoder.batch_returned(Instant::now());
        let times = BatchTimes { decode: decode_time, augment: t_aug.elapsed(), wall: t0.elapsed(), gpu: gpu_times };
        Ok(BatchRun { times, status, plan })
    }
}

impl Drop for CudaBackend {
    /// The batch prepared ahead goes first: with the engine ahead its calls read its bytes (a
    /// staging slot this value frees, a pooled buffer the readers get back) until they are done.
    fn drop(&mut self) {
        if let Err(e) = self.forget_ahead() {
            log::warn!("dropping the batch prepared ahead: {e}");
        }
    }
}

/// A start and an end timing event for one launch.
fn timing_pair(gpu: &Gpu) -> Result<(CudaEvent, CudaEvent)> {
    Ok((timing_event(gpu.ctx())?, timing_event(gpu.ctx())?))
}

/// Threads of the CUDA backend's CPU route (the images nvJPEG cannot take, and retries) when
/// the config leaves it to the backend (`cpu_threads = 0`): 4, or the cores when fewer. On an
/// H200 (16 cores), end to end, 4 threads ran 17.2k / 17.3k images/s against 15.8k / 16.4k
/// with 2 and 17.4k / 17.1k with 8 (BENCHMARKS.md "GPU run 2026-11-26 07:52–08:20 UTC"): a batch waits for
/// its slowest CPU-route image, and 2 threads left two of them in turn.
pub fn default_cpu_route_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4)
}

/// What the CUDA backend cannot take beyond [`PipelineConfig::validate`]: 32-bit offsets into
/// a decoded image, and the batch as the grid's z dimension of every augment launch (CUDA's
/// limit is 65535; a larger batch would fail at its first launch, not here).
pub fn check_limits(config: &PipelineConfig) -> Result<()> {
    if config.max_decoded_pixels > MAX_GPU_PIXELS {
        return Err(Error::config(format!(
            "the CUDA backend addresses a decoded image with 32-bit offsets: the decoded-size guard must be at most {MAX_GPU_PIXELS} pixels, got {}",
            config.max_decoded_pixels
        )));
    }
    if config.batch_size > super::augment::MAX_BATCH {
        return Err(Error::config(format!(
            "the CUDA backend launches one grid slice per sample: the batch size must be at most {}, got {}",
            super::augment::MAX_BATCH,
            config.batch_size
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_batches_over_the_grid_z_limit_and_huge_guards() {
        let mut c = PipelineConfig::new("/nonexistent");
        c.batch_size = 65535;
        assert!(check_limits(&c).is_ok());
        let (_, _, gz) = super::super::augment::augment_grid(c.batch_size, 224, 224);
        assert_eq!(gz, 65535, "z is the batch");
        c.batch_size = 65536;
        let msg = check_limits(&c).unwrap_err().to_string();
        assert!(msg.contains("65535") && msg.contains("65536"), "{msg}");
        c.batch_size = 256;
        c.max_decoded_pixels = MAX_GPU_PIXELS + 1;
        let msg = check_limits(&c).unwrap_err().to_string();
        assert!(msg.contains(&(MAX_GPU_PIXELS + 1).to_string()), "{msg}");
    }
}
