//! Where a batch's compressed bytes are for the decoders, and the next batch prepared ahead.
//!
//! A batch the readers put in the pinned pool ([`PinnedPool`]; the pipeline's readers do,
//! through [`crate::backend::Backend::bytes_source`]) is decoded where it lies: no copy. Any
//! other (a caller's own buffers, a batch that outgrew its pooled buffer) is copied into the
//! staging ring ([`PinnedStaging`]), made the first time one comes. Either way the decoders get
//! one slice per sample and the place is released with a guard event after the reads are
//! queued.

use super::super::decode::{AheadPlacer, Classified, Classifier, CpuAhead, CpuRoute, PlacedAhead};
use super::super::device::Gpu;
use super::super::staging::pool::{PinnedPool, PoolHold};
use super::super::staging::{layout, PinnedStaging, StagedRange, StagingPlan, STAGING_ALIGN};
use crate::augment::AugParams;
use crate::backend::{BatchInput, SampleIn};
use crate::error::{Result, SlotError};
use crate::reader::bytes::BytesSource;
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;
use std::time::Instant;

/// Where a batch's bytes are: a staging ring slot (copied there), the pool allocation the
/// readers filled (its base address), or nowhere (no sample has bytes: every read failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Staged {
    Slot(usize),
    Pool(usize),
    Nothing,
}

/// The pool the readers fill and the ring for every other batch; see the module docs.
pub(super) struct Stager {
    ctx: Arc<CudaContext>,
    pool: Arc<PinnedPool>,
    // Bytes of one pooled buffer.
    buffer_bytes: usize,
    // The ring for bytes not in the pool: planned at build, allocated when first needed.
    ring: Option<PinnedStaging>,
    ring_plan: StagingPlan,
}

impl Stager {
    /// A pool of `buffers` buffers of `buffer_bytes` (made now), and a ring of `ring_plan` for
    /// what is not in it (made when first needed).
    pub(super) fn new(ctx: &Arc<CudaContext>, ring_plan: StagingPlan, buffer_bytes: u64, buffers: usize) -> Result<Self> {
        let buffer_bytes = usize::try_from(buffer_bytes.max(STAGING_ALIGN)).map_err(|_| crate::error::GpuError::OutOfMemory {
            kind: "pinned host",
            bytes: usize::MAX,
            what: format!("a readers' pinned buffer of {buffer_bytes} bytes"),
        })?;
        Ok(Self {
            ctx: ctx.clone(),
            pool: Arc::new(PinnedPool::new(ctx.clone(), buffers, buffer_bytes)?),
            buffer_bytes,
            ring: None,
            ring_plan,
        })
    }

    /// Where the readers should put batches' bytes.
    pub(super) fn bytes_source(&self) -> BytesSource {
        BytesSource::pool(self.pool.clone(), self.buffer_bytes, STAGING_ALIGN as usize)
    }

    /// Pinned bytes held: the pool's, and the ring's once it is made.
    pub(super) fn pinned_bytes(&self) -> u64 {
        self.pool.pinned_bytes() + self.ring.as_ref().map_or(0, PinnedStaging::pinned_bytes)
    }

    /// Place `samples`' bytes for the decoders (`ranges[i]`: where sample `i` is, `None` when
    /// it does not fit a ring slot); held until [`Self::release`].
    pub(super) fn stage(&mut self, samples: &[SampleIn<'_>], ranges: &mut Vec<Option<StagedRange>>) -> Result<Staged> {
        if samples.iter().all(|s| s.bytes.is_empty()) {
            ranges.clear();
            ranges.extend(samples.iter().map(|_| Some(StagedRange { offset: 0, len: 0 })));
            return Ok(Staged::Nothing);
        }
        if let Some(base) = self.pool.holding(samples.iter().map(|s| s.bytes)) {
            ranges.clear();
            ranges.extend(samples.iter().map(|s| {
                let offset = if s.bytes.is_empty() { 0 } else { s.bytes.as_ptr() as u64 - base as u64 };
                Some(StagedRange { offset, len: s.bytes.len() as u64 })
            }));
            return Ok(Staged::Pool(base as usize));
        }
        let ring = match &mut self.ring {
            Some(r) => r,
            slot => {
                log::debug!("a batch's bytes are not in the readers' pinned pool: the staging ring of {:?} is made for it", self.ring_plan);
                slot.insert(PinnedStaging::new(&self.ctx, self.ring_plan)?)
            }
        };
        let slot = ring.acquire()?;
        layout(samples.iter().map(|s| s.bytes.len() as u64), slot.bytes.len() as u64, ranges);
        for (s, r) in samples.iter().zip(ranges.iter()) {
            if let Some(r) = r {
                slot.bytes[r.offset as usize..(r.offset + r.len) as usize].copy_from_slice(s.bytes);
            }
        }
        Ok(Staged::Slot(slot.slot))
    }

    /// The decoder's jobs for `samples` placed at `staged`: each sample's bytes there (empty
    /// where they did not fit) and the params whose crop covers all its views' crops
    /// ([`crate::augment::views::covering`]: one decode serves every view).
    pub(super) fn jobs<'a>(&self, staged: Staged, ranges: &[Option<StagedRange>], samples: &[SampleIn<'_>]) -> Vec<(&'a [u8], AugParams)> {
        let base = match staged {
            Staged::Slot(slot) => self.ring.as_ref().expect("a slot was staged in the ring").slot_ptr(slot),
            Staged::Pool(base) => base as *const u8,
            Staged::Nothing => std::ptr::null(),
        };
        // SAFETY: the place is held until it is released after the decode that reads these
        // slices: a ring slot is not written while held; a pool buffer is not refilled before
        // its reader's `clear` waits for the guard recorded at that release, and the pipeline
        // holds the batch until this call's `run` returns. The ranges lie inside the place
        // (written by `stage`, or measured from it there), and the slices are dropped before
        // the call that released it returns.
        // (an empty range is an empty slice, whatever the place: `Nothing` has no base.)
        let bytes = |r: &Option<StagedRange>| match r {
            Some(r) if r.len > 0 => unsafe { std::slice::from_raw_parts(base.add(r.offset as usize), r.len as usize) },
            _ => &[][..],
        };
        ranges.iter().zip(samples).map(|(r, s)| (bytes(r), crate::augment::views::covering(s.params))).collect()
    }

    /// The one place that holds every job's bytes of `staged` ([`Self::jobs`]): from its start
    /// to the end of its last range (`None` when nothing was placed). With device bitstreams
    /// the engine's images go over in one copy of it.
    ///
    /// A readers' pooled buffer only: it pads between samples with zeros it writes, where a
    /// staging slot's padding is never written (its batches, not in the pool, are copied image
    /// by image).
    pub(super) fn span<'a>(&self, staged: Staged, ranges: &[Option<StagedRange>]) -> Option<&'a [u8]> {
        let Staged::Pool(base) = staged else { return None };
        let end = ranges.iter().flatten().map(|r| r.offset + r.len).max().filter(|&e| e > 0)?;
        // SAFETY: as in `jobs`: the buffer is held until the decode that reads it returns, and
        // every range lies inside it; its first `end` bytes are the samples and the zeros the
        // buffer wrote between them (`HostBytes::start_sample`).
        Some(unsafe { std::slice::from_raw_parts(base as *const u8, end as usize) })
    }

    /// A hold on `staged`'s pooled buffer for a host thread that reads it past its decode (the
    /// engine's thread with `gpu_engine_ahead`); `None` for any other place (a staging slot
    /// stays the backend's until it releases it).
    pub(super) fn hold(&self, staged: Staged) -> Option<PoolHold> {
        match staged {
            Staged::Pool(base) => self.pool.hold(base as *const u8),
            _ => None,
        }
    }

    /// The reads of `staged` are queued on `streams` (none: nothing read it): record its guard
    /// after them.
    pub(super) fn release(&mut self, staged: Staged, streams: &[&CudaStream]) -> Result<()> {
        match staged {
            Staged::Slot(slot) => self.ring.as_mut().expect("a slot was staged in the ring").release(slot, streams)?,
            Staged::Pool(base) => self.pool.guard(base as *const u8, streams)?,
            Staged::Nothing => {}
        }
        Ok(())
    }
}

/// A batch staged and routed ahead ([`crate::backend::Backend::run_ahead`]), for the call
/// whose input it is.
pub(super) struct Prepared {
    pub(super) key: AheadKey,
    pub(super) staged: Staged,
    pub(super) ranges: Vec<Option<StagedRange>>,
    pub(super) routes: Vec<std::result::Result<Classified, SlotError>>,
    // Its CPU-route images, decoding on the pool since it was prepared.
    pub(super) cpu: Option<CpuAhead>,
    // With the engine ahead: its place in an arena and its engine calls queued. Dropped (which
    // waits for those calls) before the batch's bytes are released.
    pub(super) placed: Option<PlacedAhead>,
    pub(super) secs: f64,
}

/// Which batch was prepared: its place in the epoch and, per sample, the bytes' address and
/// length, the dataset index and the params. The pipeline hands the very batch it announced
/// (the same buffers, unchanged while it holds them); a batch that differs in any of these is
/// another, and what was prepared is dropped.
pub(super) struct AheadKey {
    epoch: u64,
    step: u64,
    samples: Vec<(usize, usize, usize, Vec<AugParams>)>,
}

impl AheadKey {
    fn of(epoch: u64, step: u64, samples: &[SampleIn<'_>]) -> Self {
        Self {
            epoch,
            step,
            samples: samples.iter().map(|s| (s.bytes.as_ptr() as usize, s.bytes.len(), s.index, s.params.to_vec())).collect(),
        }
    }

    pub(super) fn is_for(&self, epoch: u64, step: u64, samples: &[SampleIn<'_>]) -> bool {
        (self.epoch, self.step, self.samples.len()) == (epoch, step, samples.len())
            && self.samples.iter().zip(samples).all(|((ptr, len, index, p), s)| {
                (*ptr, *len, *index) == (s.bytes.as_ptr() as usize, s.bytes.len(), s.index)
                    && bytemuck::cast_slice::<AugParams, u8>(p) == bytemuck::cast_slice::<AugParams, u8>(s.params)
            })
    }
}

/// Stage and route `input` (the batch after the one decoding) and start its CPU-route decodes,
/// on the helper thread.
pub(super) fn prepare(
    gpu: &Gpu,
    stager: &mut Stager,
    classifier: &mut Classifier,
    cpu_route: &CpuRoute,
    placer: Option<(&AheadPlacer, usize)>,
    input: BatchInput<'_, '_>,
) -> Result<Prepared> {
    let t = Instant::now();
    // The staging guard's wait is a driver call: this device's context on this thread too.
    gpu.ctx().bind_to_thread().map_err(crate::error::driver_err("cuCtxSetCurrent"))?;
    let mut ranges = Vec::with_capacity(input.samples.len());
    let staged = stager.stage(input.samples, &mut ranges)?;
    let jobs = stager.jobs(staged, &ranges, input.samples);
    let mut routes = Vec::with_capacity(jobs.len());
    classifier.classify_batch(&jobs, &mut routes);
    let cpu = cpu_route.start(&jobs, &routes);
    // With the engine ahead: placed in arena `a` and its engine calls queued, so the engine
    // starts on them as the batch decoding now is done with it. A failure here only costs the
    // head start: the batch is placed when it runs (its staging is released by the caller).
    let placed = match placer {
        Some((placer, a)) => {
            let span = stager.span(staged, &ranges);
            match placer.place_and_queue(a, &routes, &jobs, span, stager.hold(staged)) {
                Ok(p) => Some(p),
                Err(e) => {
                    log::warn!("placing the next batch ahead and queuing its engine calls failed ({e}); it is placed when it runs");
                    None
                }
            }
        }
        None => None,
    };
    Ok(Prepared {
        key: AheadKey::of(input.epoch, input.step, input.samples),
        staged,
        ranges,
        routes,
        cpu,
        placed,
        secs: t.elapsed().as_secs_f64(),
    })
}
