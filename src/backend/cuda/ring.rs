//! The output ring: `depth` (≥ 2) device slots that batches are written into, handed to the
//! trainer without a host synchronisation.
//!
//! # Invariants (docs/CONTRACTS.md, contract 6)
//! Every slot `k` has two events, `ready[k]` and `released[k]`, and is in exactly one place:
//! the free channel, the producer, or one live [`DeviceImages`] (defined, with the state it
//! shares with this ring, in `batch::device`).
//! 1. The producer takes `k` from the free channel ([`OutputRing::acquire`]) and makes its
//!    stream wait on `released[k]` (a device-side wait): the augment kernel cannot start
//!    writing before the previous consumer's reads of `k` finished.
//! 2. Before the host rewrites the slot's pinned label buffer it waits (on the host) for
//!    `ready[k]` of the slot's previous use, which orders after that use's label copy. The
//!    previous use is `depth` batches old, so this wait is, in practice, already satisfied.
//! 3. After the kernel and the label copy are enqueued, the producer records `ready[k]` on
//!    its stream ([`OutputRing::publish`]) and hands out a [`DeviceImages`].
//! 4. The consumer makes its own stream wait on `ready[k]` ([`DeviceImages::wait_on`]): again a
//!    device-side wait, the host never blocks unless it asks ([`DeviceImages::synchronize`]).
//! 5. Dropping the [`DeviceImages`] records `released[k]` on the consumer's stream (the last
//!    one passed to `wait_on`; every other one passed is joined into it at the drop, so reads
//!    enqueued on any of them before the drop are covered) and only then sends `k` back to the
//!    free channel, so the producer's wait in (1) always sees that
//!    record. Where no stream can carry that record — the consumer read on a stream it did not
//!    name (DLPack `stream=-1`), or on a per-thread default stream and the drop happens on
//!    another thread (handle 2 names the dropping thread's own stream there) — the drop waits
//!    for the whole device (`cuCtxSynchronize`) instead.
//!
//! 6. A slot the producer took and does not publish (the batch failed after `acquire`: any
//!    `?` on the way, a failed wait or record) goes back to the free channel when its
//!    [`ProducerSlot`] is dropped: no error costs the ring a slot. Every consumer-facing call and
//!    drop leaves the calling thread's current context as it found it (`KeepCurrent`), and
//!    takes a stale error an earlier destructor left in the context first, so that it cannot
//!    fail a release in its place.
//!
//! A consumer holding every slot blocks the producer (back-pressure, never a reallocation);
//! `Pipeline::next_batch` counts the batches it hands out (`RingShared::held`) and returns an
//! error instead of waiting when the consumer holds them all.
//!
//! **Hand-over** (`DeviceImages::hand_over`, for tensors that must own their memory: candle's):
//! where the device has stream-ordered memory pools every slot is allocated from the ring's own
//! pool. A handed-over slot's memory leaves with the consumer, who frees it (stream-ordered,
//! after its reads, on the stream it made wait in (4)); the slot gets a new allocation from the
//! pool on the producer stream and goes back to the free channel as in (5). The pool's used
//! bytes beyond the ring's own slots count the handed-over batches still alive, and they count
//! as held in `next_batch`'s bound.

use super::augment::SampleDesc;
use crate::augment::mixup::MixParams;
use crate::augment::AugParams;
pub(crate) use crate::batch::device::SlotLayout;
use crate::batch::device::{take_stale_error, FreeSlots, RingShared, SlotMem, SlotPool};
use crate::batch::DeviceImages;
use crate::config::{DType, Layout};
use crate::error::driver_err as err;
use crate::error::GpuError;
use cudarc::driver::{sys, CudaStream};
use std::sync::{Arc, Mutex};

/// The slot layout of the CUDA backend's batches ([`SlotLayout::for_views`] with its
/// descriptors).
pub(crate) fn slot_layout(
    batch: usize,
    groups: &[crate::augment::views::GroupShape],
    dtype: DType,
    layout: Layout,
    classes: usize,
) -> SlotLayout {
    SlotLayout::for_views(batch, groups, dtype, layout, std::mem::size_of::<SampleDesc>(), classes)
}

/// The ring, owned by the producer.
pub struct OutputRing {
    shared: Arc<RingShared>,
}

/// A slot the producer holds between [`OutputRing::acquire`] and [`OutputRing::publish`].
///
/// Dropped without being published (a `?` between the two, a failed wait or record) it goes
/// back to the free channel as [`OutputRing::abandon`] gives it back: a batch that fails never
/// costs the ring a slot (`ring_depth` such failures used to leave `acquire` waiting forever).
pub struct ProducerSlot {
    /// Slot index.
    pub slot: usize,
    /// Device address of the images tensor (the augment kernel's output).
    pub images: sys::CUdeviceptr,
    /// The ring it goes back to; `None` once published.
    ring: Option<Arc<RingShared>>,
}

impl Drop for ProducerSlot {
    fn drop(&mut self) {
        let Some(sh) = self.ring.take() else { return };
        // Nobody read it: whatever the producer stream did to it is ordered before the next
        // acquire's writes on the same stream. The release is recorded there so the next
        // acquire's device-side wait does not wait on a consumer's record from an older use.
        take_stale_error(&sh.ctx, "giving an unpublished output ring slot back");
        if let Err(e) = sh.released[self.slot].record(&sh.producer) {
            log::error!("recording the release of unpublished ring slot {}: {e}", self.slot);
        }
        sh.free.tx.send(self.slot).expect("the ring holds a receiver, and a slot is in one place at a time");
    }
}

impl OutputRing {
    /// Allocate `depth` slots for `layout` on `producer`'s device, once.
    pub fn new(producer: &Arc<CudaStream>, layout: SlotLayout, depth: usize) -> Result<Self, GpuError> {
        assert!(depth >= 2, "config validation guarantees ring depth >= 2");
        let ctx = producer.context().clone();
        // The slots come from the ring's own pool where the device has memory pools, so that a
        // batch's memory can leave with a tensor (`DeviceImages::hand_over`) and come back.
        let pool = SlotPool::new(&ctx)?;
        let mut slots = Vec::with_capacity(depth);
        let mut tail_host = Vec::with_capacity(depth);
        let (mut ready, mut released, mut used) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..depth {
            // SAFETY: uninitialised device memory; every element is written by the augment
            // kernel (tests/gpu_ring.rs poisons the slot to check) before `ready[k]`.
            let oom = |e| GpuError::OutOfMemory {
                kind: "device",
                bytes: layout.slot_bytes,
                what: format!("output ring slot {k} of {depth} ({e})"),
            };
            let (s, p) = match &pool {
                Some(pool) => pool.alloc(producer, layout.slot_bytes).map_err(oom)?,
                None => {
                    let s = unsafe { producer.alloc::<u8>(layout.slot_bytes) }.map_err(oom)?;
                    let (p, _rec) = cudarc::driver::DevicePtr::device_ptr(&s, producer);
                    drop(_rec);
                    (s, p)
                }
            };
            slots.push(SlotMem::new(s, p));
            // SAFETY: write-combined is right here: the host only writes the tail, the copy
            // engine reads it. Uninitialised until `upload` writes it.
            let l = unsafe { ctx.alloc_pinned::<u8>(layout.tail_bytes()) }.map_err(|e| GpuError::OutOfMemory {
                kind: "pinned host",
                bytes: layout.tail_bytes(),
                what: format!("launch data of ring slot {k} ({e})"),
            })?;
            tail_host.push(Mutex::new(l));
            ready.push(ctx.new_event(None).map_err(err("cuEventCreate"))?);
            released.push(ctx.new_event(None).map_err(err("cuEventCreate"))?);
            used.push(std::sync::atomic::AtomicBool::new(false));
        }
        producer.synchronize().map_err(err("cuStreamSynchronize"))?;
        let pool = pool.map(|p| p.measured(depth)).transpose()?;
        let shared = RingShared {
            ctx,
            layout,
            producer: producer.clone(),
            slots,
            tail_host,
            ready,
            released,
            used,
            free: FreeSlots::new(depth),
            held: Default::default(),
            pool,
        };
        Ok(Self { shared: Arc::new(shared) })
    }

    /// Device bytes of all slots.
    pub fn device_bytes(&self) -> u64 {
        (self.shared.slots.len() * self.shared.layout.slot_bytes) as u64
    }

    /// Batches made and not yet taken: slots neither free nor held by the consumer (published
    /// batches in the pipeline's queue, or alive outside it when the backend is driven
    /// directly). Called between batches, when the producer holds no slot. How far stoke is
    /// ahead of its trainer: the batched GPU-hybrid route yields while one waits
    /// (`GpuDecoder::set_waiting_batches`).
    pub fn waiting(&self) -> usize {
        let sh = &self.shared;
        sh.slots.len().saturating_sub(sh.free.rx.len()).saturating_sub(sh.held_now())
    }

    /// Pinned host bytes of all slots' launch data.
    pub fn pinned_bytes(&self) -> u64 {
        (self.shared.slots.len() * self.shared.layout.tail_bytes()) as u64
    }

    /// Take a free slot (blocking while the consumer holds them all) and make the producer
    /// stream wait until the slot's previous consumer has released it (invariant 1).
    pub fn acquire(&self) -> Result<ProducerSlot, GpuError> {
        let sh = &self.shared;
        let slot = sh.free.rx.recv().expect("the ring holds a sender, so the channel never disconnects");
        // From here the slot goes back by itself if anything fails.
        let p = ProducerSlot { slot, images: sh.ptr(slot), ring: Some(self.shared.clone()) };
        take_stale_error(&sh.ctx, "taking an output ring slot");
        sh.producer.wait(&sh.released[slot]).map_err(err("cuStreamWaitEvent"))?;
        Ok(p)
    }

    /// Device address of the slot's Mixup/CutMix parameters (the mixup kernel's input).
    pub fn mix_ptr(&self, p: &ProducerSlot) -> sys::CUdeviceptr {
        self.shared.ptr(p.slot) + self.shared.layout.mix_offset as u64
    }

    /// Device addresses of the slot's params and descriptors (the kernels' inputs).
    pub fn launch_ptrs(&self, p: &ProducerSlot) -> (sys::CUdeviceptr, sys::CUdeviceptr) {
        let base = self.shared.ptr(p.slot);
        let l = &self.shared.layout;
        (base + l.params_offset as u64, base + l.descs_offset as u64)
    }

    /// Write the batch's labels, params and descriptors into the slot's pinned tail and
    /// enqueue their copy on the producer stream (before the kernels that read them).
    pub fn upload(
        &self,
        p: &ProducerSlot,
        labels: &[i64],
        params: &[AugParams],
        descs: &[SampleDesc],
        mix: &[MixParams],
        targets: &[f32],
    ) -> Result<(), GpuError> {
        let sh = &self.shared;
        let (k, l) = (p.slot, &sh.layout);
        let n = labels.len();
        assert!(
            n <= l.batch() && params.len() == n * l.views && descs.len() == n * l.views,
            "one label per sample, params and a descriptor per view of each"
        );
        let mut host = sh.tail_host[k].lock().expect("tail buffer lock poisoned");
        if sh.used[k].load(std::sync::atomic::Ordering::Acquire) {
            // Invariant 2: the previous copy out of this buffer has completed.
            sh.ready[k].synchronize().map_err(err("cuEventSynchronize"))?;
        }
        let tail = host.as_mut_slice().map_err(err("cuEventSynchronize"))?;
        let at = |off: usize| off - l.labels_offset;
        tail[..n * 8].copy_from_slice(bytemuck::cast_slice(labels));
        let pb: &[u8] = bytemuck::cast_slice(params);
        tail[at(l.params_offset)..at(l.params_offset) + pb.len()].copy_from_slice(pb);
        let db: &[u8] = bytemuck::cast_slice(descs);
        tail[at(l.descs_offset)..at(l.descs_offset) + db.len()].copy_from_slice(db);
        assert!(
            mix.len() == if l.classes > 0 { n } else { 0 } && targets.len() == n * l.classes,
            "mix parameters and targets fit the layout"
        );
        let mb: &[u8] = bytemuck::cast_slice(mix);
        tail[at(l.mix_offset)..at(l.mix_offset) + mb.len()].copy_from_slice(mb);
        let tb: &[u8] = bytemuck::cast_slice(targets);
        tail[at(l.targets_offset)..at(l.targets_offset) + tb.len()].copy_from_slice(tb);
        // SAFETY: source is the slot's pinned tail (alive in `RingShared`, not rewritten before
        // `ready[k]` completes: invariant 2); destination is the tail of slot k, which the
        // producer owns between acquire and publish.
        unsafe { cudarc::driver::result::memcpy_htod_async(sh.ptr(k) + l.labels_offset as u64, &tail[..], sh.producer.cu_stream()) }
            .map_err(err("cuMemcpyHtoDAsync"))
    }

    /// Record `ready` after everything enqueued so far on the producer stream (the upload and
    /// the augment kernels) and hand the slot out holding `n` samples.
    pub fn publish(&self, mut p: ProducerSlot, n: usize, groups: &[crate::augment::views::GroupShape]) -> Result<DeviceImages, GpuError> {
        let sh = &self.shared;
        assert!(n >= 1 && n <= sh.layout.batch(), "a batch holds 1..=batch samples");
        // The batch's own views: a resolution schedule's smaller epoch uses the front of the slot.
        let mine = SlotLayout::for_views(n, groups, sh.layout.dtype, sh.layout.layout, 0, 0);
        assert!(mine.image_bytes <= sh.layout.image_bytes, "the batch's images fit the slot sized for the largest");
        // A failed record drops `p`: the slot goes back unpublished.
        sh.ready[p.slot].record(&sh.producer).map_err(err("cuEventRecord"))?;
        sh.used[p.slot].store(true, std::sync::atomic::Ordering::Release);
        p.ring = None; // from here the slot is the batch's: its drop gives it back
        Ok(DeviceImages {
            shared: self.shared.clone(),
            slot: p.slot,
            n,
            shape: mine.shape,
            image_bytes: mine.image_bytes,
            consumer: Mutex::new(Default::default()),
            handed: false,
        })
    }

    /// Give a slot back without publishing it (the batch failed after `acquire`); what
    /// dropping the [`ProducerSlot`] does, said where it happens.
    pub fn abandon(&self, p: ProducerSlot) {
        drop(p);
    }
}
