//! The CUDA backend: device, embedded kernels, nvJPEG.
//!
//! | module | what it holds |
//! |---|---|
//! | [`pipeline`] | [`pipeline::CudaBackend`]: one batch through staging → decode → augment → ring |
//! | `device` | `Gpu::open`: driver and device checks, each absence a typed error |
//! | `module` | the embedded kernels (fatbin from build.rs, or NVRTC at run time) and the launch path |
//! | `nvjpeg` | libnvjpeg opened at run time, in sys / result / safe layers |
//! | `staging` | the readers' pinned pool (`staging::pool`) and the pinned host ring for bytes not in it, guarded by events |
//! | `decode` | nvJPEG routing (hardware engine / CUDA / CPU), ROI, arenas, canaries |
//! | `augment` | the fused augment kernel's descriptors, filter tables and launches |
//! | `ring` | output ring of device slots with ready/released events; [`DeviceImages`](crate::DeviceImages) |
//!
//! Only [`pipeline`] is documented: the rest is the backend's machinery (the crate docs say
//! what that means).
//!
//! Nothing here links against CUDA: libcuda, libnvrtc and libnvjpeg are opened at run time,
//! so the binaries start (and fall back to the CPU backend) on machines without them.

#[doc(hidden)] // internals: see the crate docs
pub mod augment;
#[doc(hidden)] // internals: see the crate docs
pub mod decode;
#[doc(hidden)] // internals: see the crate docs
pub mod device;
#[doc(hidden)] // internals: see the crate docs
pub mod module;
#[doc(hidden)] // internals: see the crate docs
pub mod nvjpeg;
pub mod pipeline;
pub(crate) mod ring;
pub(crate) mod staging;

use crate::error::GpuError;
use std::sync::Arc;

/// Open device `ordinal` with everything the CUDA pipeline needs: the device, libnvjpeg and
/// the kernels. `Err` says which is missing; `BackendKind::Auto` falls back to the CPU on it.
pub fn open_for_pipeline(ordinal: usize) -> Result<Arc<device::Gpu>, GpuError> {
    let gpu = device::Gpu::open(ordinal)?;
    nvjpeg::sys::NvjpegLib::get()?;
    gpu.kernels()?;
    Ok(gpu)
}

/// Record `guard` on `stream` after the work queued there that reads (or writes) memory the
/// host will reuse once `guard` completes: pinned bytes a copy reads, a decode arena.
///
/// A record that fails leaves the event at its previous state, which says nothing of that
/// work: the host would then reuse the memory while the stream still uses it. So on failure
/// this waits for the stream itself instead (the guard's promise holds either way, at the cost
/// of one host wait) and fails only when that wait fails too. A stale error another call left
/// in the context (cudarc's `record_err`, from a destructor) is taken first, so that it cannot
/// make this record fail in its place.
pub(crate) fn record_guard(guard: &cudarc::driver::CudaEvent, stream: &cudarc::driver::CudaStream, what: &str) -> Result<(), GpuError> {
    crate::batch::device::take_stale_error(stream.context(), what);
    let Err(e) = guard.record(stream) else { return Ok(()) };
    log::error!("recording the guard of {what}: {e}; waiting for its stream on the host instead");
    stream.synchronize().map_err(crate::error::driver_err("cuStreamSynchronize"))
}
