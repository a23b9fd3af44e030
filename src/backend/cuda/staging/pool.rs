//! The readers' pinned pool: batches' compressed bytes read straight into page-locked memory,
//! so the decoders take them where the readers put them and no staging copy is made (issue 40
//! item 3: that copy was a share of the host cores at 17k images/s).
//!
//! # Invariants
//! - `buffers` allocations of `buffer_bytes` each (a typical batch with room to spare, not the
//!   index's worst case: a batch that outgrows its buffer moves to the heap and is copied into
//!   the staging ring like any caller's bytes), all made when the pool is, and kept until it
//!   goes: a buffer the readers give back waits for its next reader, so the pinned bytes are
//!   the same from the first batch on (docs/CONTRACTS.md, contract 5). When every buffer is in
//!   use, a reader's new batch goes on the heap (and is copied).
//! - Pinned with flags 0, as the staging ring: the host reads these bytes too (headers, the CPU
//!   route).
//! - Each allocation has its guard event. The backend records it after the last queued read of
//!   a batch in it ([`PinnedPool::guard`]); a reader's refill ([`HostMemory::wait_unused`], from
//!   [`crate::reader::bytes::HostBytes::clear`]) and a free wait for it first, so the host never
//!   writes bytes a queued copy or decode has yet to read (the stand-in's pinned-memory guards
//!   report any such write).
//! - A host thread that reads an allocation after the batch's decode returned (the hardware
//!   engine's thread, `gpu_engine_ahead`: it reads the next batch's bytes, which the pipeline
//!   may give back unrun) holds it ([`PinnedPool::hold`]); a refill and a free wait for every
//!   hold to end, then for the guard.

use crate::error::{driver_err, GpuError};
use crate::reader::bytes::HostMemory;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

struct Entry {
    base: usize,
    len: usize,
    // Handed to a reader's buffer and not given back yet.
    in_use: bool,
    // Host threads still reading it ([`PoolHold`]).
    holds: usize,
    guard: Arc<CudaEvent>,
    // Owns the allocation (cuMemFreeHost when dropped).
    _memory: PinnedHostSlice<u8>,
}

/// See the module docs.
pub struct PinnedPool {
    ctx: Arc<CudaContext>,
    entries: Mutex<Vec<Entry>>,
    // Signalled when a hold ends.
    unheld: std::sync::Condvar,
}

/// A host thread's hold on a pooled allocation ([`PinnedPool::hold`]), ended when dropped.
pub struct PoolHold {
    pool: Arc<PinnedPool>,
    base: usize,
}

impl PoolHold {
    /// The holder's reads of the allocation are queued on `streams` (the engine's batched call
    /// and the batched GPU-hybrid route read their bitstreams stream-ordered): record its guard
    /// after them, so that a refill once the hold ends waits for them too.
    pub fn guard_after(&self, streams: &[&CudaStream]) -> Result<(), GpuError> {
        self.pool.guard(self.base as *const u8, streams)
    }
}

impl Drop for PoolHold {
    fn drop(&mut self) {
        let mut entries = self.pool.entries();
        if let Some(e) = entries.iter_mut().find(|e| e.base == self.base) {
            e.holds -= 1;
        }
        drop(entries);
        self.pool.unheld.notify_all();
    }
}

impl PinnedPool {
    /// A pool of `buffers` allocations of `buffer_bytes` in `ctx`, made now.
    pub fn new(ctx: Arc<CudaContext>, buffers: usize, buffer_bytes: usize) -> Result<Self, GpuError> {
        let mut entries = Vec::with_capacity(buffers);
        for i in 0..buffers {
            // SAFETY: flags 0 = plain page-locked memory (module docs); `HostBytes` zeroes a
            // buffer before anything reads it.
            let mut memory = unsafe { ctx.alloc_pinned_with_flags::<u8>(buffer_bytes, 0) }.map_err(|e| GpuError::OutOfMemory {
                kind: "pinned host",
                bytes: buffer_bytes,
                what: format!("the readers' pinned buffer {i} of {buffers} ({e})"),
            })?;
            let base = memory.as_mut_ptr().map_err(driver_err("cuEventSynchronize"))? as usize;
            let guard = Arc::new(ctx.new_event(None).map_err(driver_err("cuEventCreate"))?);
            entries.push(Entry { base, len: buffer_bytes, in_use: false, holds: 0, guard, _memory: memory });
        }
        Ok(Self { ctx, entries: Mutex::new(entries), unheld: std::sync::Condvar::new() })
    }

    fn entries(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pinned bytes the pool holds (all its buffers, from the start).
    pub fn pinned_bytes(&self) -> u64 {
        self.entries().iter().map(|e| e.len as u64).sum()
    }

    /// The base of the pool allocation that holds every one of `slices` (empty ones aside),
    /// `None` when they are not all in one allocation of this pool (a caller's own bytes, or
    /// a batch that moved to the heap).
    pub fn holding<'a>(&self, slices: impl IntoIterator<Item = &'a [u8]>) -> Option<*const u8> {
        let entries = self.entries();
        let mut found: Option<&Entry> = None;
        for s in slices.into_iter().filter(|s| !s.is_empty()) {
            let (start, end) = (s.as_ptr() as usize, s.as_ptr() as usize + s.len());
            let inside = |e: &Entry| e.base <= start && end <= e.base + e.len;
            match found {
                Some(e) if inside(e) => {}
                Some(_) => return None,
                None => found = Some(entries.iter().find(|e| inside(e))?),
            }
        }
        found.map(|e| e.base as *const u8)
    }

    /// The reads of the batch in the allocation at `base` are queued on `streams`: record its
    /// guard after all of them (as a staging slot's, [`super::guard_after`]).
    pub fn guard(&self, base: *const u8, streams: &[&CudaStream]) -> Result<(), GpuError> {
        if streams.is_empty() {
            return Ok(());
        }
        let guard = self
            .guard_of(base)
            .ok_or_else(|| GpuError::Cuda { call: "pinned pool guard", message: format!("{base:p} is not an allocation of the pool") })?;
        super::guard_after(&guard, streams, "a reader's pinned batch")
    }

    /// Hold the allocation at `base` while a host thread reads it past the decode that
    /// released it: its refill and its free wait until the hold is dropped. `None`: `base` is
    /// not an allocation of the pool.
    pub fn hold(self: &Arc<Self>, base: *const u8) -> Option<PoolHold> {
        let mut entries = self.entries();
        let e = entries.iter_mut().find(|e| e.base == base as usize)?;
        e.holds += 1;
        Some(PoolHold { pool: self.clone(), base: base as usize })
    }

    /// Wait until no host thread holds the allocation at `base`.
    fn wait_unheld(&self, base: usize) {
        let mut entries = self.entries();
        while entries.iter().any(|e| e.base == base && e.holds > 0) {
            entries = self.unheld.wait(entries).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The guard event of the allocation at `base`.
    fn guard_of(&self, base: *const u8) -> Option<Arc<CudaEvent>> {
        self.entries().iter().find(|e| e.base == base as usize).map(|e| e.guard.clone())
    }

    /// Wait for `guard`; a wait that fails waits for the whole context instead (the memory is
    /// about to be written or freed: it must not be read any more either way).
    fn wait(&self, guard: &CudaEvent) {
        if let Err(e) = guard.synchronize() {
            log::error!("waiting for a pinned batch's guard: {e}; waiting for the whole device instead");
            if let Err(e) = self.ctx.bind_to_thread().and_then(|()| self.ctx.synchronize()) {
                log::error!("waiting for the device before reusing a pinned batch: {e}");
            }
        }
    }
}

impl HostMemory for PinnedPool {
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
        let mut entries = self.entries();
        let e = entries.iter_mut().find(|e| !e.in_use && e.len >= bytes)?;
        e.in_use = true;
        NonNull::new(e.base as *mut u8)
    }

    fn wait_unused(&self, ptr: NonNull<u8>) {
        self.wait_unheld(ptr.as_ptr() as usize);
        if let Some(g) = self.guard_of(ptr.as_ptr()) {
            self.wait(&g);
        }
    }

    fn free(&self, ptr: NonNull<u8>, _bytes: usize) {
        // Kept for the next reader; its guard is waited for before it is handed out again (a
        // refill's `clear`), and here, so that a buffer given back is idle.
        self.wait_unused(ptr);
        if let Some(e) = self.entries().iter_mut().find(|e| e.base == ptr.as_ptr() as usize) {
            e.in_use = false;
        }
    }
}
