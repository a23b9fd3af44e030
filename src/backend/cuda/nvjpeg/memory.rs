//! nvJPEG's own device and pinned memory, made through stoke's allocators and counted
//! ([`NvjpegMemory`]).
//!
//! A handle made by [`super::safe::NvjpegHandle::new`] gives nvJPEG (`nvjpegCreateExV2`, and
//! `nvjpeg*BufferCreateV2` for the buffers stoke attaches) allocators that make the driver calls
//! nvJPEG's defaults make — `cuMemAlloc` / `cuMemFree`, `cuMemHostAlloc` / `cuMemFreeHost`, so
//! when memory is made and freed, and what each free waits for, is as before — and count what
//! they hand out. The backend then reports what nvJPEG holds beside its own bytes, and how many
//! allocations nvJPEG made: after the first epoch, any is memory the pipeline's plan did not
//! reserve, and each free of device memory synchronizes the whole device (the trainer's kernels
//! with it). The H100 soak of 2026-11-27 saw the device's free memory fall 30 MiB over 15 epochs
//! with stoke's own bytes exact: these counts say whether nvJPEG is where it went.
//!
//! Where this nvJPEG lacks the V2 calls, or refuses a handle with allocators, the handle is made
//! with nvJPEG's defaults and its memory is not counted (the stats say so); so it is when
//! `STOKE_NVJPEG_ALLOCATORS=nvjpeg` asks for them (a way back, should a driver or nvJPEG
//! misbehave with a caller's allocators).

use super::sys::{cudaStream_t, nvjpegDevAllocatorV2_t, nvjpegPinnedAllocatorV2_t};
use cudarc::driver::sys::{CUcontext, CUdeviceptr};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Environment variable: `nvjpeg` makes every handle with nvJPEG's default allocators (its
/// memory then not counted); unset or `stoke`: stoke's counting allocators.
pub const ALLOCATORS_ENV: &str = "STOKE_NVJPEG_ALLOCATORS";

/// Whether [`ALLOCATORS_ENV`] asks for nvJPEG's defaults.
pub fn defaults_asked() -> bool {
    std::env::var(ALLOCATORS_ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("nvjpeg"))
}

/// What nvJPEG held and did through stoke's allocators (summed over handles with `+=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NvjpegMemoryStats {
    /// Device bytes nvJPEG holds now.
    pub device_bytes: u64,
    /// Pinned host bytes nvJPEG holds now.
    pub pinned_bytes: u64,
    /// Allocations nvJPEG made (device and pinned), since its handles were made.
    pub allocations: u64,
    /// Allocations the driver refused (nvJPEG reports them as `NVJPEG_STATUS_ALLOCATOR_FAILURE`).
    pub failures: u64,
    /// Handles whose memory is not counted (made with nvJPEG's default allocators).
    pub uncounted_handles: u64,
}

impl std::ops::AddAssign for NvjpegMemoryStats {
    fn add_assign(&mut self, o: Self) {
        self.device_bytes += o.device_bytes;
        self.pinned_bytes += o.pinned_bytes;
        self.allocations += o.allocations;
        self.failures += o.failures;
        self.uncounted_handles += o.uncounted_handles;
    }
}

/// The allocators' state for one handle (and the buffers made with it): live allocations by
/// address, and counters. Shared by the handle and its buffers (`Arc`), so it outlives every
/// nvJPEG object that may call it.
#[derive(Debug)]
pub struct NvjpegMemory {
    // The context current where the handle was made: bound on a thread that calls an allocator
    // without one (an nvJPEG thread of its own).
    ctx: usize,
    device: Mutex<HashMap<usize, usize>>,
    pinned: Mutex<HashMap<usize, usize>>,
    device_bytes: AtomicU64,
    pinned_bytes: AtomicU64,
    allocations: AtomicU64,
    failures: AtomicU64,
}

#[derive(Clone, Copy)]
enum Kind {
    Device,
    Pinned,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Pinned => "pinned",
        }
    }
}

impl NvjpegMemory {
    /// Allocators for the context current on this thread.
    pub fn new() -> Arc<Self> {
        let ctx = cudarc::driver::result::ctx::get_current().ok().flatten().map_or(0, |c| c as usize);
        Arc::new(Self {
            ctx,
            device: Mutex::default(),
            pinned: Mutex::default(),
            device_bytes: AtomicU64::new(0),
            pinned_bytes: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        })
    }

    /// What nvJPEG holds and did so far.
    pub fn stats(&self) -> NvjpegMemoryStats {
        NvjpegMemoryStats {
            device_bytes: self.device_bytes.load(Ordering::Relaxed),
            pinned_bytes: self.pinned_bytes.load(Ordering::Relaxed),
            allocations: self.allocations.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            uncounted_handles: 0,
        }
    }

    /// The device allocator for nvJPEG; valid while `self` is.
    pub(super) fn device_allocator(self: &Arc<Self>) -> nvjpegDevAllocatorV2_t {
        nvjpegDevAllocatorV2_t { dev_malloc: Some(dev_malloc), dev_free: Some(dev_free), dev_ctx: Arc::as_ptr(self) as *mut c_void }
    }

    /// The pinned allocator for nvJPEG; valid while `self` is.
    pub(super) fn pinned_allocator(self: &Arc<Self>) -> nvjpegPinnedAllocatorV2_t {
        nvjpegPinnedAllocatorV2_t {
            pinned_malloc: Some(pinned_malloc),
            pinned_free: Some(pinned_free),
            pinned_ctx: Arc::as_ptr(self) as *mut c_void,
        }
    }

    fn live(&self, kind: Kind) -> (&Mutex<HashMap<usize, usize>>, &AtomicU64) {
        match kind {
            Kind::Device => (&self.device, &self.device_bytes),
            Kind::Pinned => (&self.pinned, &self.pinned_bytes),
        }
    }

    fn made(&self, kind: Kind, at: usize, bytes: usize) {
        let (map, total) = self.live(kind);
        map.lock().unwrap_or_else(|p| p.into_inner()).insert(at, bytes);
        total.fetch_add(bytes as u64, Ordering::Relaxed);
        self.allocations.fetch_add(1, Ordering::Relaxed);
    }

    /// Forget `at`; false when it was not handed out here.
    fn freed(&self, kind: Kind, at: usize) -> bool {
        let (map, total) = self.live(kind);
        match map.lock().unwrap_or_else(|p| p.into_inner()).remove(&at) {
            Some(bytes) => {
                total.fetch_sub(bytes as u64, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Bind the handle's context where the calling thread has none.
    fn ensure_context(&self) {
        if self.ctx != 0 && cudarc::driver::result::ctx::get_current().ok().flatten().is_none() {
            // SAFETY: sets the calling thread's current context to the one the handle was made
            // in, which outlives its nvJPEG objects (the backend holds it).
            let _ = unsafe { cudarc::driver::result::ctx::set_current(self.ctx as CUcontext) };
        }
    }
}

/// # Safety
/// `ctx` is the `NvjpegMemory` the allocator was made from (nvJPEG passes it back as given).
unsafe fn memory<'a>(ctx: *mut c_void) -> &'a NvjpegMemory {
    // SAFETY: the caller's contract; the handle and every buffer made with it hold the Arc.
    unsafe { &*(ctx as *const NvjpegMemory) }
}

// nvJPEG's allocator callbacks: 0 for success, non-zero for failure (nvjpeg.h). They never
// panic (a panic cannot cross into C): locks are taken even when poisoned.

/// One allocation for nvJPEG of `kind`: `make` asks the driver for `size` bytes; the address
/// goes to nvJPEG's `ptr` and into the count.
///
/// # Safety
/// `ctx` is an `NvjpegMemory` (nvJPEG passes back what it was given); `ptr` is nvJPEG's out
/// pointer.
unsafe fn allocate(
    ctx: *mut c_void,
    ptr: *mut *mut c_void,
    size: usize,
    kind: Kind,
    make: impl FnOnce(usize) -> Result<usize, cudarc::driver::DriverError>,
) -> c_int {
    // SAFETY: the caller's contract.
    let m = unsafe { memory(ctx) };
    m.ensure_context();
    match make(size.max(1)) {
        Ok(p) => {
            // SAFETY: nvJPEG's out pointer.
            unsafe { *ptr = p as *mut c_void };
            m.made(kind, p, size);
            0
        }
        Err(e) => {
            m.failures.fetch_add(1, Ordering::Relaxed);
            log::warn!("nvJPEG asked for {size} bytes of {} memory: {e}", kind.name());
            1
        }
    }
}

/// Give back what [`allocate`] made: `free` hands it to the driver.
///
/// # Safety
/// As [`allocate`]; `ptr` came from it (or is null) and is freed once (nvJPEG's contract).
unsafe fn release(
    ctx: *mut c_void,
    ptr: *mut c_void,
    kind: Kind,
    free: impl FnOnce(usize) -> Result<(), cudarc::driver::DriverError>,
) -> c_int {
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: the caller's contract.
    let m = unsafe { memory(ctx) };
    if !m.freed(kind, ptr as usize) {
        log::error!("nvJPEG freed {} memory at {ptr:p} that its allocator did not hand out", kind.name());
    }
    m.ensure_context();
    match free(ptr as usize) {
        Ok(()) => 0,
        Err(e) => {
            log::warn!("freeing nvJPEG's {} memory at {ptr:p}: {e}", kind.name());
            1
        }
    }
}

unsafe extern "C" fn dev_malloc(ctx: *mut c_void, ptr: *mut *mut c_void, size: usize, _stream: cudaStream_t) -> c_int {
    // SAFETY: nvJPEG's context and out pointer; a plain allocation in the current context.
    unsafe { allocate(ctx, ptr, size, Kind::Device, |n| cudarc::driver::result::malloc_sync(n).map(|p| p as usize)) }
}

unsafe extern "C" fn dev_free(ctx: *mut c_void, ptr: *mut c_void, _size: usize, _stream: cudaStream_t) -> c_int {
    // SAFETY: nvJPEG gives back an allocation of `dev_malloc`, once.
    unsafe { release(ctx, ptr, Kind::Device, |p| cudarc::driver::result::free_sync(p as CUdeviceptr)) }
}

unsafe extern "C" fn pinned_malloc(ctx: *mut c_void, ptr: *mut *mut c_void, size: usize, _stream: cudaStream_t) -> c_int {
    // SAFETY: nvJPEG's context and out pointer; a plain pinned allocation, flags 0 (readable by
    // the host at full speed, as nvJPEG's default `cudaHostAlloc` gives).
    unsafe { allocate(ctx, ptr, size, Kind::Pinned, |n| cudarc::driver::result::malloc_host(n, 0).map(|p| p as usize)) }
}

unsafe extern "C" fn pinned_free(ctx: *mut c_void, ptr: *mut c_void, _size: usize, _stream: cudaStream_t) -> c_int {
    // SAFETY: nvJPEG gives back an allocation of `pinned_malloc`, once.
    unsafe { release(ctx, ptr, Kind::Pinned, |p| cudarc::driver::result::free_host(p as *mut c_void)) }
}
