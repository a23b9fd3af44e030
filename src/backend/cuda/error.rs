//! CUDA driver statuses as [`GpuError`]s: one place for the device, module, staging, decode
//! and ring code to turn a [`DriverError`] into an error that carries the driver's own name
//! and text. It depends on nothing else in the backend, so no module cycle goes through it.

use crate::error::GpuError;
use cudarc::driver::{sys, DriverError};

/// A [`DriverError`] from `call` as a [`GpuError`], with the driver's own name and text.
pub fn cuda_err(call: &'static str, e: DriverError) -> GpuError {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("CUresult {}", e.0 as i32));
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    GpuError::Cuda { call, message: if text.is_empty() { name } else { format!("{name}: {text}") } }
}

/// Like [`cuda_err`], but an out-of-memory status becomes [`GpuError::OutOfMemory`] naming
/// the size and purpose of the allocation.
pub fn alloc_err(call: &'static str, e: DriverError, bytes: usize, what: impl Into<String>) -> GpuError {
    if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        GpuError::OutOfMemory { kind: "device", bytes, what: what.into() }
    } else {
        cuda_err(call, e)
    }
}

/// `map_err` adapter: a driver error from `call` as a [`GpuError`] (with the driver's text).
pub fn driver_err(call: &'static str) -> impl Fn(DriverError) -> GpuError {
    move |e| cuda_err(call, e)
}
