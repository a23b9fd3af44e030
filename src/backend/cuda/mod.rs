//! The CUDA backend: device, embedded kernels, nvJPEG.
//!
//! | module | what it holds |
//! |---|---|
//! | [`device`] | [`device::Gpu::open`]: driver and device checks, each absence a typed error |
//! | [`error`] | CUDA driver statuses as [`GpuError`]s with the driver's own name and text |
//! | [`module`] | the embedded kernels (fatbin from build.rs, or NVRTC at run time) and the launch path |
//! | [`nvjpeg`] | libnvjpeg opened at run time, in sys / result / safe layers |
//! | [`staging`] | pinned host ring for the compressed bytes, slots guarded by events |
//! | [`decode`] | nvJPEG routing (hardware engine / CUDA / CPU), ROI, arenas, canaries |
//! | [`augment`] | the fused augment kernel's descriptors, filter tables and launches |
//! | [`pipeline`] | [`pipeline::CudaBackend`]: one batch through staging → decode → augment → ring |
//! | [`ring`] | output ring of device slots with ready/released events; [`ring::DeviceImages`] |
//!
//! Nothing here links against CUDA: libcuda, libnvrtc and libnvjpeg are opened at run time,
//! so the binaries start (and fall back to the CPU backend) on machines without them.

pub mod augment;
pub mod decode;
pub mod device;
pub mod error;
pub mod module;
pub mod nvjpeg;
pub mod pipeline;
pub mod ring;
pub mod staging;

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
