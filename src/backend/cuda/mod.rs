//! The CUDA backend: device, embedded kernels, nvJPEG.
//!
//! | module | what it holds |
//! |---|---|
//! | [`pipeline`] | [`pipeline::CudaBackend`]: one batch through staging → decode → augment → ring |
//! | `device` | `Gpu::open`: driver and device checks, each absence a typed error |
//! | `module` | the embedded kernels (fatbin from build.rs, or NVRTC at run time) and the launch path |
//! | `nvjpeg` | libnvjpeg opened at run time, in sys / result / safe layers |
//! | `staging` | pinned host ring for the compressed bytes, slots guarded by events |
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
