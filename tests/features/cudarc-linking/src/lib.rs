//! Compiles stoke's CUDA backend against cudarc in linking mode (see Cargo.toml): stoke's own
//! library probe, not cudarc's loading-only `is_culib_present`, is what it calls.

/// libcuda present (in linking mode, the process could not start without it).
pub fn driver_present() -> bool {
    stoke::backend::cuda::device::library_loadable("cuda")
}

/// The driver probe, through cudarc's linked API.
pub fn probe() -> Result<stoke::backend::cuda::device::DriverInfo, stoke::GpuError> {
    stoke::backend::cuda::device::probe_driver()
}
