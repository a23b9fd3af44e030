//! Pinned host staging: the compressed bytes of a batch, in page-locked memory nvJPEG can
//! copy from asynchronously.
//!
//! # Invariants
//! - Sized once, at pipeline build, from the index ([`StagingPlan`]): a slot holds the
//!   largest possible batch (the sum of the `batch_size` largest compressed files), so no
//!   allocation happens in steady state (docs/CONTRACTS.md, contract 5).
//! - Pinned with flags 0, not write-combined: the host reads these bytes too (header parsing,
//!   nvJPEG's hybrid Huffman decode, the CPU fallback decoder), and write-combined memory is
//!   very slow to read on the host (docs/CONTRACTS.md, "Toolchain facts").
//! - A slot is written by the host only after the event that guards it has completed: the
//!   event is recorded on every stream that read the slot's bytes (the hardware-decode stream
//!   and the CUDA-decode stream) after the last such read was enqueued
//!   ([`PinnedStaging::release`]), and [`PinnedStaging::acquire`] waits for it.
//!
//! The slot bookkeeping ([`SlotCycle`]) is plain data so its rules are unit-tested without a
//! GPU.

pub mod pool;

use crate::error::driver_err;
use crate::error::GpuError;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use std::sync::Arc;

/// Bytes every staged sample is aligned to (nvJPEG reads whole words; 64 also keeps each
/// file on its own cache lines).
pub const STAGING_ALIGN: u64 = 64;

/// Round `n` up to a multiple of `align` (a power of two).
pub fn align_up(n: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    (n + align - 1) & !(align - 1)
}

/// The sum of the `k` largest values of `sizes`, each rounded up to `align`: the exact upper
/// bound on the bytes any batch of `k` distinct samples can need. O(n log k).
pub fn largest_k_sum(sizes: impl IntoIterator<Item = u64>, k: usize, align: u64) -> u64 {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    if k == 0 {
        return 0;
    }
    let mut heap: BinaryHeap<Reverse<u64>> = BinaryHeap::with_capacity(k + 1);
    for s in sizes {
        let s = align_up(s, align);
        if heap.len() < k {
            heap.push(Reverse(s));
        } else if heap.peek().is_some_and(|Reverse(m)| s > *m) {
            heap.pop();
            heap.push(Reverse(s));
        }
    }
    heap.into_iter().map(|Reverse(s)| s).sum()
}

/// How much pinned memory the staging ring takes, decided once from the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingPlan {
    /// Bytes per slot: the largest batch the index allows.
    pub slot_bytes: u64,
    /// Slots in the ring (batches whose bytes can be in flight at once).
    pub slots: usize,
}

impl StagingPlan {
    /// Plan for batches of `batch_size` samples whose compressed sizes are `sizes` (one per
    /// sample of the index; a sample may appear in a batch at most once except for the
    /// padding of the last batch, which the `batch_size` largest already bound).
    ///
    /// `slots` is the pipeline depth: one slot filling while the others decode.
    pub fn new(sizes: impl IntoIterator<Item = u64>, batch_size: usize, slots: usize) -> Self {
        let slot_bytes = largest_k_sum(sizes, batch_size, STAGING_ALIGN).max(STAGING_ALIGN);
        Self { slot_bytes, slots: slots.max(2) }
    }

    /// Total pinned bytes.
    pub fn total_bytes(&self) -> u64 {
        self.slot_bytes * self.slots as u64
    }
}

/// Where each sample of a staged batch lies inside its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedRange {
    /// Byte offset inside the slot (a multiple of [`STAGING_ALIGN`]).
    pub offset: u64,
    /// Length of the compressed file.
    pub len: u64,
}

/// Lay `lens` out back to back at [`STAGING_ALIGN`]; `None` for a sample that does not fit in
/// `capacity` (the file grew since it was indexed). Later samples still get a place if they
/// fit, so one bad sample never fails the batch.
pub fn layout(lens: impl IntoIterator<Item = u64>, capacity: u64, out: &mut Vec<Option<StagedRange>>) {
    out.clear();
    let mut at = 0u64;
    for len in lens {
        let end = at + len;
        if end <= capacity {
            out.push(Some(StagedRange { offset: at, len }));
            at = align_up(end, STAGING_ALIGN);
        } else {
            out.push(None);
        }
    }
}

/// State of one staging slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Never used, or its guard has been waited on: the host may write it.
    Free,
    /// Handed out by [`SlotCycle::acquire`]; the host is filling it or the GPU work that
    /// reads it is being enqueued.
    Held,
    /// Its reads are enqueued and its guard event recorded; the host must wait for the guard
    /// before writing it again.
    Guarded,
}

/// Round-robin bookkeeping for a ring of slots guarded by events. Slots are used strictly in
/// order, so a slot is only ever reused after the `n - 1` slots enqueued after it: the
/// oldest guard is the one waited on.
#[derive(Clone, Debug)]
pub struct SlotCycle {
    states: Vec<SlotState>,
    next: usize,
}

/// What [`SlotCycle::acquire`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// The slot to use.
    pub slot: usize,
    /// The slot's guard was recorded: wait on it before writing.
    pub wait_guard: bool,
}

impl SlotCycle {
    /// `n` free slots.
    pub fn new(n: usize) -> Self {
        assert!(n > 0, "a slot ring needs at least one slot");
        Self { states: vec![SlotState::Free; n], next: 0 }
    }

    /// State of `slot`.
    #[cfg(test)]
    pub fn state(&self, slot: usize) -> SlotState {
        self.states[slot]
    }

    /// Take the next slot in order. `None` when it is still held (the caller released slots
    /// out of order or holds them all): the ring never hands out a slot twice.
    pub fn acquire(&mut self) -> Option<Acquired> {
        let slot = self.next;
        let wait_guard = match self.states[slot] {
            SlotState::Held => return None,
            SlotState::Free => false,
            SlotState::Guarded => true,
        };
        self.states[slot] = SlotState::Held;
        self.next = (slot + 1) % self.states.len();
        Some(Acquired { slot, wait_guard })
    }

    /// The reads of `slot` are enqueued and its guard recorded.
    pub fn release(&mut self, slot: usize) {
        assert_eq!(self.states[slot], SlotState::Held, "released staging slot {slot} that was not held");
        self.states[slot] = SlotState::Guarded;
    }

    /// Undo the [`SlotCycle::acquire`] that returned `a` (its guard could not be waited on):
    /// the slot is as it was, and the next acquire takes it again.
    pub fn unacquire(&mut self, a: Acquired) {
        assert_eq!(self.states[a.slot], SlotState::Held, "un-acquired staging slot {} that was not held", a.slot);
        self.states[a.slot] = if a.wait_guard { SlotState::Guarded } else { SlotState::Free };
        self.next = a.slot;
    }
}

/// One slot handed out by [`PinnedStaging::acquire`].
pub struct StagingSlot<'a> {
    /// Slot index, to pass back to [`PinnedStaging::release`].
    pub slot: usize,
    /// The slot's bytes.
    pub bytes: &'a mut [u8],
}

/// The pinned host ring itself.
pub struct PinnedStaging {
    plan: StagingPlan,
    // Each buffer is allocated once; `ptrs[i]` is `buffers[i]`'s base, taken once so the hot
    // path never goes through cudarc's per-buffer event (nvJPEG, not cudarc, reads them).
    buffers: Vec<PinnedHostSlice<u8>>,
    ptrs: Vec<*mut u8>,
    guards: Vec<CudaEvent>,
    cycle: SlotCycle,
}

// SAFETY: the raw pointers point into `buffers`, which this struct owns and which are
// `Send + Sync`; access is serialised by `&mut self` and the slot cycle.
unsafe impl Send for PinnedStaging {}

impl PinnedStaging {
    /// Pinned host bytes this ring holds (every slot, allocated once).
    pub fn pinned_bytes(&self) -> u64 {
        self.plan.total_bytes()
    }

    /// Allocate every slot now (the only pinned allocation this ring ever makes).
    pub fn new(ctx: &Arc<CudaContext>, plan: StagingPlan) -> Result<Self, GpuError> {
        let bytes = usize::try_from(plan.slot_bytes).map_err(|_| GpuError::OutOfMemory {
            kind: "pinned host",
            bytes: usize::MAX,
            what: format!("a staging slot of {} bytes", plan.slot_bytes),
        })?;
        let mut buffers = Vec::with_capacity(plan.slots);
        let mut ptrs = Vec::with_capacity(plan.slots);
        let mut guards = Vec::with_capacity(plan.slots);
        for i in 0..plan.slots {
            // SAFETY: flags 0 = plain page-locked memory (not write-combined, see the module
            // doc). The bytes are uninitialised until the host writes a batch into them, and
            // nothing reads a range before `fill` wrote it.
            let mut b = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }.map_err(|e| GpuError::OutOfMemory {
                kind: "pinned host",
                bytes,
                what: format!("staging slot {i} of {} ({e})", plan.slots),
            })?;
            ptrs.push(b.as_mut_ptr().map_err(driver_err("cuEventSynchronize"))?);
            buffers.push(b);
            guards.push(ctx.new_event(None).map_err(driver_err("cuEventCreate"))?);
        }
        Ok(Self { plan, buffers, ptrs, guards, cycle: SlotCycle::new(plan.slots) })
    }

    /// Take the next slot, waiting on the host for its guard event (the decodes that read it
    /// two batches ago) if it was recorded.
    pub fn acquire(&mut self) -> Result<StagingSlot<'_>, GpuError> {
        let a = self.cycle.acquire().ok_or_else(|| GpuError::Cuda {
            call: "staging acquire",
            message: "every staging slot is held; release one before acquiring another".into(),
        })?;
        if a.wait_guard {
            if let Err(e) = self.guards[a.slot].synchronize() {
                // Not taken after all: a failed wait must not leave the slot held for good.
                self.cycle.unacquire(a);
                return Err(driver_err("cuEventSynchronize")(e));
            }
        }
        debug_assert_eq!(self.buffers[a.slot].len() as u64, self.plan.slot_bytes);
        // SAFETY: the slot is Held by us alone (SlotCycle), its guard completed above, so no
        // device work reads it; the pointer and length describe the whole allocation.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptrs[a.slot], self.plan.slot_bytes as usize) };
        Ok(StagingSlot { slot: a.slot, bytes })
    }

    /// Base pointer of `slot`, for nvJPEG's input arrays.
    pub fn slot_ptr(&self, slot: usize) -> *const u8 {
        self.ptrs[slot]
    }

    /// The reads of `slot` are enqueued on `streams`: record its guard after all of them.
    /// With several streams the first waits for the others, then the guard is recorded on it.
    /// The slot is released whatever fails: when the streams cannot be joined or the guard
    /// recorded, the host waits for every stream instead (`record_guard`), so the guard's
    /// previous, completed record is then true of these reads too.
    pub fn release(&mut self, slot: usize, streams: &[&CudaStream]) -> Result<(), GpuError> {
        let r = guard_after(&self.guards[slot], streams, "a staging slot");
        self.cycle.release(slot);
        r
    }
}

/// Record `guard` after the reads queued on `streams` (none: nothing to record): the first
/// stream waits for the others, then the guard is recorded on it. When the streams cannot be
/// joined or the guard recorded, the host waits for every stream instead (`record_guard`), so
/// the guard's previous, completed record is then true of these reads too. `what` names the
/// memory in the log. A staging slot's and a reader's pinned buffer's guard alike.
pub fn guard_after(guard: &CudaEvent, streams: &[&CudaStream], what: &str) -> Result<(), GpuError> {
    let Some((first, rest)) = streams.split_first() else { return Ok(()) };
    match rest.iter().try_for_each(|s| first.join(s)) {
        Ok(()) => super::record_guard(guard, first, what),
        Err(e) => {
            log::error!("joining the streams that read {what}: {e}; waiting for them on the host instead");
            streams.iter().try_for_each(|s| s.synchronize()).map_err(driver_err("cuStreamSynchronize"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_k_sum_matches_sorting() {
        // Reference: sort descending, take k, sum (with alignment).
        let sizes: Vec<u64> = (0..500u64).map(|i| (i * 7919 + 13) % 100_003).collect();
        for k in [0usize, 1, 2, 7, 256, 500, 900] {
            let mut s: Vec<u64> = sizes.iter().map(|&x| align_up(x, 64)).collect();
            s.sort_unstable_by(|a, b| b.cmp(a));
            let want: u64 = s.iter().take(k).sum();
            assert_eq!(largest_k_sum(sizes.iter().copied(), k, 64), want, "k = {k}");
        }
    }

    #[test]
    fn align_up_table() {
        assert_eq!(align_up(0, 64), 0);
        assert_eq!(align_up(1, 64), 64);
        assert_eq!(align_up(64, 64), 64);
        assert_eq!(align_up(65, 64), 128);
        assert_eq!(align_up(255, 256), 256);
    }

    #[test]
    fn plan_covers_the_worst_batch_and_at_least_two_slots() {
        let p = StagingPlan::new([100u64, 5000, 70, 4000, 10], 2, 1);
        assert_eq!(p.slot_bytes, align_up(5000, 64) + align_up(4000, 64));
        assert_eq!(p.slots, 2);
        assert_eq!(p.total_bytes(), 2 * p.slot_bytes);
        // Empty index: still a usable (tiny) slot.
        assert_eq!(StagingPlan::new([], 4, 3).slot_bytes, STAGING_ALIGN);
    }

    #[test]
    fn layout_places_aligned_and_skips_what_does_not_fit() {
        let mut out = Vec::new();
        layout([10u64, 64, 1, 300, 5], 200, &mut out);
        assert_eq!(
            out,
            vec![
                Some(StagedRange { offset: 0, len: 10 }),
                Some(StagedRange { offset: 64, len: 64 }),
                Some(StagedRange { offset: 128, len: 1 }),
                None, // 192 + 300 > 200: the file grew; policy handles it
                Some(StagedRange { offset: 192, len: 5 }),
            ]
        );
        // Any plan built from the same sizes fits every batch of them.
        let sizes = [123u64, 77, 4096, 65, 1];
        let plan = StagingPlan::new(sizes, sizes.len(), 2);
        layout(sizes, plan.slot_bytes, &mut out);
        assert!(out.iter().all(Option::is_some));
        for w in out.windows(2) {
            let (a, b) = (w[0].unwrap(), w[1].unwrap());
            assert!(a.offset + a.len <= b.offset && b.offset % STAGING_ALIGN == 0);
        }
    }

    #[test]
    fn slot_cycle_round_robin_waits_only_on_recorded_guards() {
        let mut c = SlotCycle::new(3);
        let a = c.acquire().unwrap();
        assert_eq!(a, Acquired { slot: 0, wait_guard: false });
        c.release(0);
        assert_eq!(c.acquire().unwrap(), Acquired { slot: 1, wait_guard: false });
        c.release(1);
        assert_eq!(c.acquire().unwrap(), Acquired { slot: 2, wait_guard: false });
        c.release(2);
        // Second lap: every slot was guarded, so every acquire waits on its guard.
        for slot in 0..3 {
            assert_eq!(c.state(slot), SlotState::Guarded);
            assert_eq!(c.acquire().unwrap(), Acquired { slot, wait_guard: true });
            c.release(slot);
        }
    }

    #[test]
    fn slot_cycle_never_hands_out_a_held_slot() {
        let mut c = SlotCycle::new(2);
        let a = c.acquire().unwrap();
        let b = c.acquire().unwrap();
        assert_ne!(a.slot, b.slot);
        assert_eq!(c.acquire(), None, "both slots held");
        c.release(b.slot);
        // Next in order is slot 0, still held: refused even though slot 1 is free.
        assert_eq!(c.acquire(), None);
        c.release(a.slot);
        assert_eq!(c.acquire().unwrap(), Acquired { slot: 0, wait_guard: true });
    }

    /// An acquire whose guard could not be waited on is undone: the slot is in its old state
    /// and comes next again (before, it stayed held and the ring refused every later batch).
    #[test]
    fn an_undone_acquire_leaves_the_slot_as_it_was_and_next() {
        let mut c = SlotCycle::new(2);
        let fresh = c.acquire().unwrap();
        c.unacquire(fresh);
        assert_eq!(c.state(0), SlotState::Free);
        assert_eq!(c.acquire().unwrap(), fresh, "the same slot, still free");
        c.release(0);
        let b = c.acquire().unwrap();
        c.release(b.slot);
        let guarded = c.acquire().unwrap();
        assert_eq!(guarded, Acquired { slot: 0, wait_guard: true });
        c.unacquire(guarded);
        assert_eq!(c.state(0), SlotState::Guarded, "its guard must still be waited on");
        assert_eq!(c.acquire().unwrap(), guarded);
    }

    #[test]
    #[should_panic(expected = "was not held")]
    fn releasing_a_free_slot_is_a_bug() {
        SlotCycle::new(2).release(1);
    }
}
