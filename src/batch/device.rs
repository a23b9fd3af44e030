//! The device half of a batch ([`DeviceImages`]) and the output ring's state it shares with
//! the producer: slot layout, slots, ready/released events, the free channel. The producer's
//! side (acquire, upload, publish) and the ring's numbered invariants are in the CUDA backend's
//! `ring` module; the consumer's side of those invariants (4 and 5) is here.

use crate::config::{DType, Layout};
use crate::error::driver_err as err;
use crate::error::GpuError;
use crossbeam_channel::{Receiver, Sender};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaSlice, CudaStream, CudaView, PinnedHostSlice};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

mod slot;
pub use slot::SlotLayout;

/// The free-slot channel: which slots the producer may take. Bounded by the ring depth; a
/// slot index is in it at most once.
#[derive(Clone)]
pub(crate) struct FreeSlots {
    pub(crate) tx: Sender<usize>,
    pub(crate) rx: Receiver<usize>,
}

impl FreeSlots {
    pub(crate) fn new(depth: usize) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(depth);
        for k in 0..depth {
            tx.send(k).expect("channel has room for every slot");
        }
        Self { tx, rx }
    }
}

/// One ring slot's device memory and its address. Replaced only by
/// [`DeviceImages::hand_over`] (the memory leaves with a consumer's tensor and the slot gets a
/// new allocation), through the one value that owns the slot at that moment.
pub(crate) struct SlotMem(UnsafeCell<(CudaSlice<u8>, sys::CUdeviceptr)>);

// SAFETY: a slot's cell is written only by `DeviceImages::hand_over`, which consumes the
// `DeviceImages` of that slot: then the slot is in no other place (not in the free channel, not
// with the producer: contract 6), and no reference into the cell is alive, because every
// reference handed out (`images_bytes`, `labels`) borrows that `DeviceImages`, and the producer
// reads a slot's address only between `acquire` and `publish`, when it owns the slot. Reads of
// other slots' cells touch other cells. `CudaSlice` itself is Send + Sync.
unsafe impl Sync for SlotMem {}

impl SlotMem {
    pub(crate) fn new(s: CudaSlice<u8>, ptr: sys::CUdeviceptr) -> Self {
        Self(UnsafeCell::new((s, ptr)))
    }
    fn get(&self) -> &(CudaSlice<u8>, sys::CUdeviceptr) {
        // SAFETY: see the `Sync` note: no write to this cell can overlap a borrow of it.
        unsafe { &*self.0.get() }
    }
}

/// The calling thread's current CUDA context when made, made current again when dropped.
///
/// cudarc binds a context to the calling thread for each call (`cuCtxSetCurrent`) and never
/// puts the previous one back. On stoke's own threads that is harmless; on the trainer's it is
/// not: with torch on `cuda:1` and stoke on `cuda:0`, a batch's `wait_on` (what
/// `torch.from_dlpack` calls) would leave `cuda:0` current and send torch's later runtime
/// calls on that thread to the wrong device. So every call a consumer makes on a batch (and
/// every drop, which may run on any thread) holds one of these while it works.
pub(crate) struct KeepCurrent(Option<sys::CUcontext>);

impl KeepCurrent {
    /// Remember the calling thread's current context (none is a context too: the null one).
    pub(crate) fn new() -> Self {
        let mut c = std::ptr::null_mut();
        // SAFETY: out-pointer valid for the call. Fails only before cuInit: nothing to keep.
        Self(unsafe { sys::cuCtxGetCurrent(&mut c) }.result().ok().map(|()| c))
    }
}

impl Drop for KeepCurrent {
    fn drop(&mut self) {
        let Some(prev) = self.0 else { return };
        let mut now = std::ptr::null_mut();
        // SAFETY: out-pointer valid for the call.
        if unsafe { sys::cuCtxGetCurrent(&mut now) }.result().is_ok() && now == prev {
            return;
        }
        // SAFETY: the context that was current on this thread when the guard was made (or none).
        if let Err(e) = unsafe { sys::cuCtxSetCurrent(prev) }.result() {
            log::error!("putting the thread's CUDA context back: {e}");
        }
    }
}

/// Take (and log) an error an earlier destructor stored in `ctx` (cudarc's `record_err`: a
/// `Drop` cannot return one). cudarc hands it to the next call that binds the context, which
/// then fails without doing anything: a ring slot's release or return that fails that way is a
/// slot lost for good. Called before the ring's calls that must not fail for someone else's
/// error; a real fault of the device fails those calls again on its own.
pub(crate) fn take_stale_error(ctx: &CudaContext, before: &str) {
    if let Err(e) = ctx.check_err() {
        log::warn!("before {before}: an earlier CUDA call in a destructor had failed: {e}");
    }
}

/// The pool every ring slot is allocated from where the device has stream-ordered memory
/// pools: its own pool (`cuMemPoolCreate`), so that a slot's memory handed to a consumer's
/// tensor ([`DeviceImages::hand_over`]) comes back to it when that tensor frees it, and its
/// used bytes say how many such batches are still alive.
pub(crate) struct SlotPool {
    ctx: Arc<CudaContext>,
    pool: sys::CUmemoryPool,
    /// The pool's used bytes per slot allocation ([`SlotPool::measured`] once all slots are
    /// allocated: it includes whatever rounding the driver does; 0 until then).
    per_slot: u64,
}

// SAFETY: a pool handle is usable from any thread of the process (the driver's calls on it are
// thread-safe); the context is bound before each call.
unsafe impl Send for SlotPool {}
// SAFETY: as above; nothing here is mutated without an atomic.
unsafe impl Sync for SlotPool {}

impl SlotPool {
    /// A pool of device memory on `ctx`'s device that keeps what is freed to it (release
    /// threshold: everything) until it is destroyed; `None` where the device has no memory
    /// pools (then slots are plain allocations and cannot be handed over).
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Option<Self>, GpuError> {
        if !ctx.has_async_alloc() {
            return Ok(None);
        }
        ctx.bind_to_thread().map_err(err("cuCtxSetCurrent"))?;
        // SAFETY: plain-old-data props, zeroed then filled with the documented fields.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = ctx.ordinal() as i32;
        let mut pool = std::ptr::null_mut();
        // SAFETY: out-pointer and props valid for the call.
        unsafe { sys::cuMemPoolCreate(&mut pool, &props) }.result().map_err(err("cuMemPoolCreate"))?;
        let p = Self { ctx: ctx.clone(), pool, per_slot: 0 };
        let mut keep = u64::MAX;
        // SAFETY: a live pool; the threshold is a cuuint64_t.
        unsafe {
            sys::cuMemPoolSetAttribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &mut keep as *mut u64 as *mut _)
        }
        .result()
        .map_err(err("cuMemPoolSetAttribute"))?;
        Ok(Some(p))
    }

    /// `bytes` from the pool, stream-ordered on `stream` (freed to the pool when dropped).
    pub(crate) fn alloc(
        &self,
        stream: &Arc<CudaStream>,
        bytes: usize,
    ) -> Result<(CudaSlice<u8>, sys::CUdeviceptr), cudarc::driver::DriverError> {
        let _keep = KeepCurrent::new();
        self.ctx.bind_to_thread()?;
        let mut ptr = 0;
        // SAFETY: out-pointer valid; the pool and stream are live and of this context.
        unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, bytes, self.pool, stream.cu_stream()) }.result()?;
        // SAFETY: a fresh allocation of `bytes` from this context, owned by the returned slice
        // (its drop frees it, stream-ordered, back to this pool).
        Ok((unsafe { stream.upgrade_device_ptr::<u8>(ptr, bytes) }, ptr))
    }

    /// The pool's used bytes now (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`). Called by
    /// `Pipeline::next_batch` on the trainer's thread: the thread's current context is put
    /// back as it was (a trainer may have another device's current).
    pub(crate) fn used(&self) -> Result<u64, GpuError> {
        let _keep = KeepCurrent::new();
        self.ctx.bind_to_thread().map_err(err("cuCtxSetCurrent"))?;
        let mut v = 0u64;
        // SAFETY: a live pool; the attribute is a cuuint64_t.
        unsafe {
            sys::cuMemPoolGetAttribute(self.pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &mut v as *mut u64 as *mut _)
        }
        .result()
        .map_err(err("cuMemPoolGetAttribute"))?;
        Ok(v)
    }

    /// This pool with its used bytes per slot measured, with `slots` slot allocations (and
    /// nothing else) live.
    pub(crate) fn measured(mut self, slots: usize) -> Result<Self, GpuError> {
        self.per_slot = (self.used()? / slots as u64).max(1);
        Ok(self)
    }

    /// Allocations alive beyond the ring's own `slots`: batches handed over to tensors.
    pub(crate) fn handed_over(&self, slots: usize) -> usize {
        let per = self.per_slot.max(1);
        match self.used() {
            Ok(u) => ((u + per / 2) / per).saturating_sub(slots as u64) as usize,
            Err(e) => {
                log::error!("reading the ring pool's used bytes: {e}");
                0
            }
        }
    }
}

impl Drop for SlotPool {
    fn drop(&mut self) {
        // With allocations still outstanding (tensors holding handed-over batches) the driver
        // destroys the pool when the last of them is freed.
        let _keep = KeepCurrent::new();
        let r = self.ctx.bind_to_thread().and_then(|()| unsafe { sys::cuMemPoolDestroy(self.pool) }.result());
        if let Err(e) = r {
            log::error!("destroying the output ring's memory pool: {e}");
        }
    }
}

/// The ring's state, shared by the CUDA backend's output ring (the producer) and every live
/// [`DeviceImages`]: the slots, their events and the free channel.
pub(crate) struct RingShared {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) layout: SlotLayout,
    pub(crate) producer: Arc<CudaStream>,
    pub(crate) slots: Vec<SlotMem>,
    pub(crate) tail_host: Vec<Mutex<PinnedHostSlice<u8>>>,
    pub(crate) ready: Vec<CudaEvent>,
    pub(crate) released: Vec<CudaEvent>,
    /// Whether `ready[k]` was ever recorded (invariant 2 waits only then).
    pub(crate) used: Vec<std::sync::atomic::AtomicBool>,
    pub(crate) free: FreeSlots,
    /// Batches handed to the consumer by `Pipeline::next_batch` and still alive: with every
    /// slot held, the next batch is an error instead of a wait that never ends.
    pub(crate) held: Arc<AtomicUsize>,
    /// Where the slots come from (`None`: plain allocations, no hand-over). Declared last:
    /// destroyed after the slots are freed to it.
    pub(crate) pool: Option<SlotPool>,
}

/// What `Pipeline::next_batch` checks before asking for the next batch: how many batches of
/// this ring the consumer holds, and its depth.
#[derive(Clone)]
pub(crate) struct HeldGauge(Arc<RingShared>);

impl HeldGauge {
    /// Batches held now ([`RingShared::held_now`]).
    pub(crate) fn held(&self) -> usize {
        self.0.held_now()
    }
    /// The ring's slots.
    pub(crate) fn depth(&self) -> usize {
        self.0.slots.len()
    }
}

impl RingShared {
    /// Device address of slot `k`.
    pub(crate) fn ptr(&self, k: usize) -> sys::CUdeviceptr {
        self.slots[k].get().1
    }

    /// Batches the consumer holds: live [`DeviceImages`] handed out, and batches handed over
    /// to tensors whose memory is not freed yet.
    pub(crate) fn held_now(&self) -> usize {
        self.held.load(Ordering::SeqCst) + self.pool.as_ref().map_or(0, |p| p.handed_over(self.slots.len()))
    }
}

impl Drop for RingShared {
    fn drop(&mut self) {
        // The slots are freed right after this, stream-ordered on the producer stream, and the
        // pinned tails with them. Consumers read through raw pointers that cudarc's
        // per-allocation tracking never sees, on their own streams: wait for every release
        // (each recorded on its consumer's stream, invariant 5) and for the producer's own
        // work, so no kernel still reads or writes a slot when it is freed. (The last batch
        // dropped may drop the ring: on the trainer's thread.)
        let _keep = KeepCurrent::new();
        take_stale_error(&self.ctx, "freeing the output ring");
        for (k, ev) in self.released.iter().enumerate() {
            if let Err(e) = ev.synchronize() {
                log::error!("waiting for the release of ring slot {k} before freeing it: {e}");
            }
        }
        if let Err(e) = self.producer.synchronize() {
            log::error!("waiting for the producer stream before freeing the ring: {e}");
        }
    }
}

/// The device half of a batch: images and labels in one output-ring slot.
///
/// # Lifetime and synchronisation rules
/// - The memory belongs to the ring; it stays valid while this value lives (even if the
///   pipeline is dropped first) and is rewritten by a later batch once this value is dropped.
/// - **Before reading** on a stream, call [`DeviceImages::wait_on`] (or `wait_on_raw`) with
///   that stream: it enqueues a wait on the ready event, the host does not block. Reading on
///   a stream that did not wait is a race.
/// - **All reads must be enqueued before this value is dropped**, on streams passed to
///   `wait_on`. Drop joins them all into the last one and records the release there, so the
///   slot is rewritten only after every read enqueued on any of them has run (images read on
///   one stream and labels on another included). Reads enqueued after the drop, or on a stream
///   never passed to `wait_on`, race with the next batch.
/// - Every call here leaves the calling thread's current CUDA context as it found it.
/// - [`DeviceImages::synchronize`] blocks the host until the batch is ready, for host-side use
///   (copies, tests).
/// - The ring has `ring_depth` slots: hold at most `ring_depth − 1` while asking for the next.
///   With all of them held, [`crate::Pipeline::next_batch`] returns [`crate::Error::HeldBatches`]
///   (the pipeline stays usable: drop one and ask again) instead of waiting for a slot that
///   only the caller can free. For full overlap with the pipeline's prefetch,
///   `ring_depth ≥ prefetch_batches + 2`.
pub struct DeviceImages {
    pub(crate) shared: Arc<RingShared>,
    pub(crate) slot: usize,
    pub(crate) n: usize,
    /// `[n, ...]` of this batch's first view: a resolution schedule's epoch may be smaller than
    /// the slot's layout (which is sized for the largest).
    pub(crate) shape: [usize; 4],
    /// Bytes of this batch's images, from the slot's start.
    pub(crate) image_bytes: usize,
    pub(crate) consumer: Mutex<Consumer>,
    /// Counted in `RingShared::held` ([`DeviceImages::hand_out`]).
    pub(crate) handed: bool,
}

/// Who reads a device batch, for ordering its release (invariant 5).
#[derive(Default)]
pub(crate) struct Consumer {
    /// Every stream made to wait on the batch, each handle once; the release is recorded on the
    /// last, after the others are joined into it (a consumer may read the images on one stream
    /// and the labels on another).
    streams: Vec<Arc<CudaStream>>,
    /// The threads that passed the per-thread default stream (`CU_STREAM_PER_THREAD`): the
    /// handle names each thread's own stream, so a release on any other thread cannot be
    /// recorded on (or joined from) theirs.
    per_thread: Vec<std::thread::ThreadId>,
    /// The consumer reads on a stream it did not name (DLPack `stream=-1`).
    unordered: bool,
}

impl Consumer {
    /// The stream the release is recorded on: the last one made to wait.
    fn last(&self) -> Option<&Arc<CudaStream>> {
        self.streams.last()
    }
}

/// `CU_STREAM_PER_THREAD`: the calling thread's own default stream.
const STREAM_PER_THREAD: usize = 2;

impl DeviceImages {
    /// Shape of the images tensor (`[N, C, H, W]` or `[N, H, W, C]`); `N` is this batch's
    /// sample count (the last batch of an epoch may be short).
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Bytes of the images tensor.
    pub fn image_bytes(&self) -> usize {
        self.image_bytes
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.shared.layout.dtype
    }

    /// Memory layout.
    pub fn layout(&self) -> Layout {
        self.shared.layout.layout
    }

    /// Count this batch as held by the consumer until it is dropped (once, however often it is
    /// called); returns the gauge `Pipeline::next_batch` checks before the next batch.
    pub(crate) fn hand_out(&mut self) -> HeldGauge {
        if !self.handed {
            self.handed = true;
            self.shared.held.fetch_add(1, Ordering::SeqCst);
        }
        HeldGauge(self.shared.clone())
    }

    /// Whether this batch's memory can leave with a tensor that owns it (candle's:
    /// `Batch::take_candle_cuda`): the ring's slots come from its own memory pool, which needs
    /// a device with stream-ordered memory pools.
    pub fn can_hand_over(&self) -> bool {
        self.shared.pool.is_some()
    }

    /// Give the slot's memory (the images at its start, then the labels and launch data) to
    /// the caller, who frees it, and return the slot to the ring with a new allocation from the
    /// ring's pool (ordered on the producer stream before anything is written into it). The
    /// batch still counts as held (`Pipeline::next_batch`'s bound) until that memory is freed.
    ///
    /// `consumer` must be the stream this batch was last made to wait on ([`Self::wait_on`]):
    /// the slot's release is recorded there as on drop.
    ///
    /// # Safety
    /// The returned address must be freed exactly once, by `cuMemFreeAsync` on `consumer` (or
    /// a stream ordered after it) or by `cuMemFree`, after the caller's last use of it.
    #[cfg_attr(not(feature = "candle-cuda"), allow(dead_code))]
    // its caller: Batch::take_candle_cuda
    // The error gives the batch itself back (its caller keeps it usable): a move of one value
    // on a path taken at most once per batch, not worth a box.
    #[allow(clippy::result_large_err)]
    pub(crate) unsafe fn hand_over(self, consumer: &Arc<CudaStream>) -> Result<sys::CUdeviceptr, (Self, GpuError)> {
        let Some(pool) = self.shared.pool.as_ref() else {
            let message = "this device has no stream-ordered memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0): its ring slots cannot be handed over".into();
            return Err((self, GpuError::Cuda { call: "cuMemPoolCreate", message }));
        };
        let _keep = KeepCurrent::new();
        let waited = self.consumer.lock().expect("consumer lock poisoned").last().map(|s| s.cu_stream());
        assert_eq!(waited, Some(consumer.cu_stream()), "hand_over: the batch must have been made to wait on the consumer's stream");
        let bytes = self.shared.layout.slot_bytes;
        let fresh = match pool.alloc(&self.shared.producer, bytes) {
            Ok(f) => f,
            Err(e) => {
                let what = format!("a new output ring slot {} (the old one was handed over) ({e})", self.slot);
                return Err((self, GpuError::OutOfMemory { kind: "device", bytes, what }));
            }
        };
        // SAFETY: this value owns slot k (see `SlotMem`'s Sync note) and is consumed here; no
        // reference into the cell is alive (every one borrows `self`).
        let (old, ptr) = unsafe { std::mem::replace(&mut *self.shared.slots[self.slot].0.get(), fresh) };
        let leaked = old.leak();
        debug_assert_eq!(leaked, ptr);
        // Drop: the release is recorded on `consumer`, the slot goes back to the free channel.
        drop(self);
        Ok(ptr)
    }

    /// Which ring slot this is (for logging and tests).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The CUDA context (device) the memory lives on.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.shared.ctx
    }

    /// The event recorded when the batch was complete.
    pub fn ready_event(&self) -> &CudaEvent {
        &self.shared.ready[self.slot]
    }

    /// Make `stream` wait (on the device) until the batch is ready, and make it the stream the
    /// release is recorded on. A stream passed earlier is joined into this one first.
    pub fn wait_on(&self, stream: &Arc<CudaStream>) -> Result<(), GpuError> {
        let _keep = KeepCurrent::new();
        stream.wait(self.ready_event()).map_err(err("cuStreamWaitEvent"))?;
        let mut c = self.consumer.lock().expect("consumer lock poisoned");
        // The release goes on the stream named last; the others are joined into it at drop.
        c.streams.retain(|s| s.cu_stream() != stream.cu_stream());
        c.streams.push(stream.clone());
        if stream.cu_stream() as usize == STREAM_PER_THREAD {
            let me = std::thread::current().id();
            if !c.per_thread.contains(&me) {
                c.per_thread.push(me);
            }
        }
        Ok(())
    }

    /// The consumer reads the batch on streams stoke is not told of (the DLPack protocol's
    /// `stream=-1`: no synchronisation asked). Nothing is ordered when it is exported; its
    /// release then waits for the whole device (`cuCtxSynchronize`) before the slot is
    /// written again, since no stream marks when the consumer is done.
    pub fn consumer_unordered(&self) {
        self.consumer.lock().expect("consumer lock poisoned").unordered = true;
    }

    /// [`DeviceImages::wait_on`] for a stream owned by someone else (PyTorch, your own code).
    ///
    /// # Safety
    /// `stream` must be a valid stream of this batch's context and must stay alive until this
    /// value is dropped (the release is recorded on it then).
    pub unsafe fn wait_on_raw(&self, stream: sys::CUstream) -> Result<(), GpuError> {
        // (Wrapping binds nothing; `wait_on` keeps the caller's context.)
        // SAFETY: forwarded to the caller's contract above.
        let s = unsafe { self.shared.ctx.wrap_borrowed_stream(stream) };
        self.wait_on(&s)
    }

    /// Block the host until the batch is ready.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        let _keep = KeepCurrent::new();
        self.ready_event().synchronize().map_err(err("cuEventSynchronize"))
    }

    /// Raw device address of the images tensor (valid under the rules above).
    pub fn images_ptr(&self) -> sys::CUdeviceptr {
        self.shared.ptr(self.slot)
    }

    /// Raw device address of the `i64` labels.
    pub fn labels_ptr(&self) -> sys::CUdeviceptr {
        self.shared.ptr(self.slot) + self.shared.layout.labels_offset as u64
    }

    /// Columns of the soft targets (0 when Mixup/CutMix is off).
    pub fn num_classes(&self) -> usize {
        self.shared.layout.classes
    }

    /// Raw device address of the `f32` soft targets `[n, num_classes]` (Mixup/CutMix on).
    pub fn targets_ptr(&self) -> Option<sys::CUdeviceptr> {
        (self.num_classes() > 0).then(|| self.shared.ptr(self.slot) + self.shared.layout.targets_offset as u64)
    }

    /// Copy the soft targets to the host (waits for ready); empty when Mixup/CutMix is off.
    pub fn copy_targets_to_host(&self, out: &mut Vec<f32>) -> Result<(), GpuError> {
        out.clear();
        let Some(ptr) = self.targets_ptr() else { return Ok(()) };
        let _keep = KeepCurrent::new();
        self.synchronize()?;
        out.resize(self.n * self.num_classes(), 0.0);
        self.shared.ctx.bind_to_thread().map_err(err("cuCtxSetCurrent"))?;
        // SAFETY: the slot holds n × classes f32 targets once ready (synchronised above); `out`
        // has exactly that length.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut out[..], ptr) }.map_err(err("cuMemcpyDtoH"))
    }

    /// The images as raw bytes, a cudarc view. cudarc's own per-allocation tracking does not
    /// see the ring's writes: the rules above still apply.
    pub fn images_bytes(&self) -> CudaView<'_, u8> {
        self.shared.slots[self.slot].get().0.slice(0..self.image_bytes())
    }

    /// The images as `f32` (`None` unless the dtype is f32).
    pub fn images_f32(&self) -> Option<CudaView<'_, f32>> {
        let n = self.image_bytes() / 4;
        // SAFETY: f32 output is n IEEE binary32 values at a 256-aligned address.
        (self.dtype() == DType::F32).then(|| unsafe { self.images_bytes().transmute::<f32>(n) }).flatten()
    }

    /// The images as raw 16-bit words: binary16 bits for f16, bfloat16 bits for bf16
    /// (`None` for f32).
    pub fn images_u16(&self) -> Option<CudaView<'_, u16>> {
        let n = self.image_bytes() / 2;
        // SAFETY: 16-bit output is n u16 words at a 256-aligned address.
        (self.dtype() != DType::F32).then(|| unsafe { self.images_bytes().transmute::<u16>(n) }).flatten()
    }

    /// The labels, a cudarc view.
    pub fn labels(&self) -> CudaView<'_, i64> {
        let l = &self.shared.layout;
        let v = self.shared.slots[self.slot].get().0.slice(l.labels_offset..l.labels_offset + self.n * 8);
        // SAFETY: `n` i64 written by `upload`, 256-aligned.
        unsafe { v.transmute::<i64>(self.n) }.expect("labels fit their range")
    }

    /// Copy the images bytes to the host (waits for ready; for tests and the CLI).
    pub fn copy_images_to_host(&self, out: &mut Vec<u8>) -> Result<(), GpuError> {
        out.resize(self.image_bytes(), 0);
        self.copy_images_into(out)
    }

    /// The images copied into a new host buffer of their element type (waits for ready).
    pub fn to_host_images(&self) -> Result<super::HostImages, GpuError> {
        let mut v = super::HostImages::new(self.dtype());
        v.resize(self.dtype(), self.image_bytes());
        self.copy_images_into(&mut v)?;
        Ok(v)
    }

    /// [`DeviceImages::copy_images_to_host`] into a buffer of exactly
    /// [`DeviceImages::image_bytes`] bytes.
    pub fn copy_images_into(&self, out: &mut [u8]) -> Result<(), GpuError> {
        assert_eq!(out.len(), self.image_bytes(), "the host buffer must hold the batch's images exactly");
        let _keep = KeepCurrent::new();
        self.synchronize()?;
        self.shared.ctx.bind_to_thread().map_err(err("cuCtxSetCurrent"))?;
        // SAFETY: the slot holds `image_bytes` initialised bytes once ready (synchronised
        // above); `out` has exactly that length.
        unsafe { cudarc::driver::result::memcpy_dtoh_sync(out, self.images_ptr()) }.map_err(err("cuMemcpyDtoH"))
    }

    /// Overwrite the images with `byte` after the batch is ready (tests: poison a slot, then
    /// check a later batch in it wrote every element).
    pub fn poison(&self, byte: u8) -> Result<(), GpuError> {
        let _keep = KeepCurrent::new();
        self.synchronize()?;
        let sh = &self.shared;
        sh.ctx.bind_to_thread().map_err(err("cuCtxSetCurrent"))?;
        // SAFETY: inside slot k, which this value owns; the write is ordered before the
        // release recorded on drop because it runs on the producer stream, synchronised here.
        unsafe { cudarc::driver::result::memset_d8_async(self.images_ptr(), byte, sh.layout.image_bytes, sh.producer.cu_stream()) }
            .map_err(err("cuMemsetD8Async"))?;
        sh.producer.synchronize().map_err(err("cuStreamSynchronize"))
    }
}

impl Drop for DeviceImages {
    fn drop(&mut self) {
        let sh = &self.shared;
        let _keep = KeepCurrent::new();
        // Someone else's stored error must not make this release fail (the slot would be
        // returned with the consumer's reads unordered, or the device not waited for).
        take_stale_error(&sh.ctx, "returning an output ring slot");
        let consumer = self.consumer.get_mut().map(std::mem::take).unwrap_or_default();
        let me = std::thread::current().id();
        let foreign = consumer.per_thread.iter().any(|&t| t != me);
        let released = if consumer.unordered || foreign {
            // No stream marks when the consumer is done (it read on a stream stoke was not
            // told of, or on another thread's per-thread stream, which no handle here names):
            // wait for the whole device. The released event keeps its completed state.
            sh.ctx.bind_to_thread().and_then(|()| sh.ctx.synchronize()).map_err(|e| ("waiting for the device", e))
        } else {
            // Invariant 5: every stream that read is joined into the last, the release is
            // recorded there (or on the producer's when nobody read the batch on the device),
            // then the slot goes back.
            let last = consumer.last().unwrap_or(&sh.producer);
            consumer
                .streams
                .iter()
                .filter(|s| s.cu_stream() != last.cu_stream())
                .try_for_each(|s| last.join(s))
                .and_then(|()| sh.released[self.slot].record(last))
                .or_else(|e| {
                    // The event keeps its previous (completed) state: wait on the host for every
                    // stream that read before the slot is written again.
                    log::error!("recording the release of ring slot {}: {e}; synchronising instead", self.slot);
                    consumer.streams.iter().try_for_each(|s| s.synchronize())
                })
                .map_err(|e| ("waiting for the consumer's streams", e))
        };
        if let Err((what, e)) = released {
            log::error!("{what} before returning ring slot {}: {e}", self.slot);
        }
        if self.handed {
            sh.held.fetch_sub(1, Ordering::SeqCst);
        }
        // Fails only when the ring's receiver is gone (pipeline dropped): nothing to return to.
        let _ = sh.free.tx.send(self.slot);
    }
}

impl std::fmt::Debug for DeviceImages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceImages")
            .field("slot", &self.slot)
            .field("shape", &self.shape())
            .field("dtype", &self.dtype())
            .field("layout", &self.layout())
            .field("device", &self.shared.ctx.ordinal())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_slots_hold_each_slot_once_and_block_when_empty() {
        let f = FreeSlots::new(3);
        let got: Vec<usize> = (0..3).map(|_| f.rx.recv().unwrap()).collect();
        assert_eq!(got, vec![0, 1, 2]);
        assert!(f.rx.try_recv().is_err(), "all slots handed out: the producer must wait");
        f.tx.send(1).unwrap();
        assert_eq!(f.rx.try_recv().unwrap(), 1);
        // Bounded at depth: a slot cannot be returned twice without being taken.
        for k in 0..3 {
            f.tx.send(k).unwrap();
        }
        assert!(f.tx.try_send(0).is_err());
    }
}
