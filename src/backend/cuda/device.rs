//! Opening a CUDA device: every way it can be missing becomes a typed [`GpuError`] with a
//! sentence a user understands, never a panic.
//!
//! Order of checks in [`Gpu::open`]: libcuda present (cudarc panics when it is not, so we
//! probe first) → `cuInit` → driver version ≥ [`MIN_DRIVER_VERSION`] → ordinal in range →
//! primary context. [`probe_driver`] and [`device_info`] answer the same questions without
//! creating a context, for `stoke doctor`.
//!
//! Not yet verified on a GPU: written against cudarc 0.19.10 and the CUDA driver API
//! documentation; on this project's machines only the no-driver path has run.

use super::module::Kernels;
use crate::config::GpuWait;
use crate::error::GpuError;
pub(crate) use crate::error::{alloc_err, cuda_err};
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream, DriverError};
use std::sync::{Arc, OnceLock};

/// The oldest driver API version the kernels load on: they are built with CUDA 13.0 (fatbin
/// from nvcc 13.0, cudarc bound to the 13.0 API), which needs a CUDA 13.0 driver (R580+).
pub const MIN_DRIVER_VERSION: i32 = 13000;

/// `13000` → `"13.0"`, the way NVIDIA prints driver API versions.
pub fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The driver as seen without opening a device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DriverInfo {
    /// CUDA driver API version, e.g. 13000 for CUDA 13.0 (`cuDriverGetVersion`).
    pub version: i32,
    /// Devices visible to this process (after `CUDA_VISIBLE_DEVICES`).
    pub device_count: usize,
}

/// What `stoke doctor` prints about a device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    /// Ordinal among the visible devices.
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (i32, i32),
    /// Total device memory in bytes.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// PCI address `domain:bus:device`, to match `nvidia-smi`.
    pub pci: String,
}

/// Runs `f`, turning a panic inside cudarc (e.g. a driver that lacks a symbol the bindings
/// expect) into an error instead of taking the process down.
fn no_panic<T>(call: &'static str, f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, GpuError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(GpuError::Cuda { call, message: crate::error::panic_message(&*p) }))
}

/// Whether a CUDA library (`"cuda"`, `"nvrtc"`) can be opened by one of the names cudarc's
/// run-time loading tries for CUDA 13.0 (`lib<name>.so`, `lib<name>.so.13`, ...; cudarc 0.19.10
/// `get_lib_name_candidates`), so that when this says yes, cudarc's first call finds it too
/// rather than panicking. stoke's own probe, not cudarc's `is_culib_present`: that exists only
/// under cudarc's dynamic loading, and a build with candle's CUDA backend links cudarc's
/// libraries instead (Cargo.toml, `fallback-dynamic-loading`); then the library is already
/// loaded and this finds it by name.
pub fn library_loadable(name: &str) -> bool {
    let (major, minor) = (13, 0);
    let candidates = [
        format!("lib{name}.so"),
        format!("lib{name}64.so"),
        format!("lib{name}64_{major}.so"),
        format!("lib{name}64_{major}{minor}.so"),
        format!("lib{name}64_{major}{minor}_0.so"),
        format!("lib{name}64_{major}0_{minor}.so"),
        format!("lib{name}64_10.so"),
        format!("lib{name}64_11.so"),
        format!("lib{name}64_12.so"),
        format!("lib{name}64_{major}0_0.so"),
        format!("lib{name}64_9.so"),
        format!("lib{name}.so.{major}"),
        format!("lib{name}.so.12"),
        format!("lib{name}.so.11"),
        format!("lib{name}.so.10"),
        format!("lib{name}.so.9"),
        format!("lib{name}.so.1"),
    ];
    // SAFETY: opening a shared library runs its initialisers; these are the CUDA libraries
    // cudarc would open by the same names, and nothing is called.
    candidates.iter().any(|c| unsafe { libloading::Library::new(c) }.is_ok())
}

/// libcuda loaded, initialised and new enough; how many devices it sees.
///
/// Errors: [`GpuError::NoDriver`] (no libcuda), [`GpuError::DriverTooOld`],
/// [`GpuError::Cuda`] (`cuInit` failed for another reason). Zero devices is not an error
/// here (`device_count == 0`).
pub fn probe_driver() -> Result<DriverInfo, GpuError> {
    if !library_loadable("cuda") {
        return Err(GpuError::NoDriver("libcuda.so.1 not found by the dynamic loader".into()));
    }
    no_panic("cuInit", || {
        let mut version = 0;
        // SAFETY: libcuda is present; cuDriverGetVersion may be called before cuInit and
        // writes one int.
        let v = unsafe { sys::cuDriverGetVersion(&mut version) };
        if v != sys::CUresult::CUDA_SUCCESS {
            return Err(cuda_err("cuDriverGetVersion", DriverError(v)));
        }
        if version < MIN_DRIVER_VERSION {
            return Err(GpuError::DriverTooOld { found: version_string(version), needed: version_string(MIN_DRIVER_VERSION) });
        }
        match result::init() {
            Ok(()) => {}
            // No device (or none visible): the driver is fine, there is nothing to open.
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => return Ok(DriverInfo { version, device_count: 0 }),
            // The user-space libcuda and the kernel module disagree: a half-updated driver.
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
                return Err(GpuError::NoDriver(format!(
                    "libcuda {} does not match the loaded NVIDIA kernel module ({}); reboot or reinstall the driver",
                    version_string(version),
                    cuda_err("cuInit", e)
                )))
            }
            Err(e) => return Err(cuda_err("cuInit", e)),
        }
        let n = result::device::get_count().map_err(|e| cuda_err("cuDeviceGetCount", e))?;
        Ok(DriverInfo { version, device_count: n.max(0) as usize })
    })
}

/// Properties of device `ordinal` (after [`probe_driver`] succeeded), without a context.
pub fn device_info(ordinal: usize) -> Result<DeviceInfo, GpuError> {
    no_panic("cuDeviceGet", || {
        let dev = result::device::get(ordinal as i32).map_err(|e| cuda_err("cuDeviceGet", e))?;
        let attr = |a: sys::CUdevice_attribute| {
            // SAFETY: `dev` is a valid device handle from cuDeviceGet.
            unsafe { result::device::get_attribute(dev, a) }.map_err(|e| cuda_err("cuDeviceGetAttribute", e))
        };
        use sys::CUdevice_attribute as A;
        Ok(DeviceInfo {
            ordinal,
            name: result::device::get_name(dev).map_err(|e| cuda_err("cuDeviceGetName", e))?,
            compute_capability: (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            // SAFETY: `dev` is a valid device handle.
            total_memory: unsafe { result::device::total_mem(dev) }.map_err(|e| cuda_err("cuDeviceTotalMem", e))?,
            multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            pci: format!(
                "{:04x}:{:02x}:{:02x}",
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
                attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
            ),
        })
    })
}

/// An opened CUDA device: its primary context, a stream for stoke's work, what it is, and
/// its kernels (loaded on first use, once).
#[derive(Debug)]
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    driver: DriverInfo,
    info: DeviceInfo,
    kernels: OnceLock<Arc<Kernels>>,
}

impl Gpu {
    /// Open device `ordinal`. Every absence is a typed error: [`GpuError::NoDriver`],
    /// [`GpuError::DriverTooOld`], [`GpuError::NoDevice`], [`GpuError::OutOfMemory`] (no
    /// memory for the context), [`GpuError::Cuda`] otherwise. Never panics.
    pub fn open(ordinal: usize) -> Result<Arc<Gpu>, GpuError> {
        let driver = probe_driver()?;
        if ordinal >= driver.device_count {
            return Err(GpuError::NoDevice { ordinal, count: driver.device_count });
        }
        let info = device_info(ordinal)?;
        no_panic("cuDevicePrimaryCtxRetain", || {
            let ctx = CudaContext::new(ordinal).map_err(|e| {
                if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                    GpuError::OutOfMemory { kind: "device", bytes: 0, what: format!("the CUDA context on device {ordinal}") }
                } else {
                    cuda_err("cuDevicePrimaryCtxRetain", e)
                }
            })?;
            let stream = ctx.new_stream().map_err(|e| cuda_err("cuStreamCreate", e))?;
            Ok(Arc::new(Gpu { ctx, stream, driver, info, kernels: OnceLock::new() }))
        })
    }

    /// The primary context.
    pub fn ctx(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// stoke's stream on this device (non-blocking with respect to the legacy stream).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Driver version and device count seen when opening.
    pub fn driver(&self) -> &DriverInfo {
        &self.driver
    }

    /// Name, compute capability, memory, multiprocessors.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// How host threads wait for this device ([`GpuWait`]): `Block` sets the context's
    /// scheduling to `CU_CTX_SCHED_BLOCKING_SYNC`, keeping its other flags; `Auto` changes
    /// nothing (a trainer that set the scheduling itself keeps it). The context is the primary
    /// one, so the setting holds for every user of this device in the process.
    pub fn set_wait(&self, wait: GpuWait) -> Result<(), GpuError> {
        if wait == GpuWait::Auto {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(|e| cuda_err("cuCtxSetCurrent", e))?;
        let flags = context_flags()?;
        let sched = sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC as u32;
        let want = (flags & !(sys::CUctx_flags::CU_CTX_SCHED_MASK as u32)) | sched;
        if want != flags {
            // SAFETY: sets the current context's flags (this device's, bound above); `want` is
            // the flags the driver reported with only the scheduling bits replaced.
            unsafe { sys::cuCtxSetFlags(want) }.result().map_err(|e| cuda_err("cuCtxSetFlags", e))?;
        }
        Ok(())
    }

    /// The embedded kernels loaded into this context: the fatbin when build.rs made one, else
    /// compiled with NVRTC for this device. Loaded on the first call, then shared.
    pub fn kernels(&self) -> Result<Arc<Kernels>, GpuError> {
        if let Some(k) = self.kernels.get() {
            return Ok(k.clone());
        }
        let k = Arc::new(Kernels::load(&self.ctx, self.info.compute_capability)?);
        // Two threads may race to load; the first one stored wins, the other's is dropped.
        Ok(self.kernels.get_or_init(|| k).clone())
    }
}

/// The current context's flags (`cuCtxGetFlags`): its scheduling (`& CU_CTX_SCHED_MASK`) and
/// the rest.
pub fn context_flags() -> Result<u32, GpuError> {
    let mut flags = 0u32;
    // SAFETY: writes one unsigned int; fails (no context) rather than reading anything else.
    unsafe { sys::cuCtxGetFlags(&mut flags) }.result().map_err(|e| cuda_err("cuCtxGetFlags", e))?;
    Ok(flags)
}

/// An event that records time, for the stage timings (`new_event(None)` creates events with
/// timing disabled, which `cuEventElapsedTime` refuses).
pub fn timing_event(ctx: &Arc<CudaContext>) -> Result<CudaEvent, GpuError> {
    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| cuda_err("cuEventCreate", e))
}

/// Seconds between two recorded timing events (waits for both to complete).
pub fn elapsed_secs(start: &CudaEvent, end: &CudaEvent) -> Result<f64, GpuError> {
    start.elapsed_ms(end).map(|ms| ms as f64 / 1e3).map_err(|e| cuda_err("cuEventElapsedTime", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe says no for a library nobody has, and yes for libcuda exactly when the loader
    /// opens `libcuda.so.1` (the driver's name; the stand-in's under scripts/with-sim-gpu.sh).
    #[test]
    fn the_library_probe_agrees_with_the_loader() {
        assert!(!library_loadable("stoke_no_such_library"));
        // SAFETY: opening libcuda (or its stand-in) runs only its initialisers.
        let direct = unsafe { libloading::Library::new("libcuda.so.1") }.is_ok();
        assert_eq!(library_loadable("cuda"), direct);
    }

    #[test]
    fn versions_print_as_nvidia_does() {
        assert_eq!(version_string(13000), "13.0");
        assert_eq!(version_string(12020), "12.2");
        assert_eq!(version_string(12090), "12.9");
    }

    #[test]
    fn driver_too_old_says_what_was_found_and_needed() {
        let e = GpuError::DriverTooOld { found: version_string(12020), needed: version_string(MIN_DRIVER_VERSION) };
        let m = e.to_string();
        assert!(m.contains("CUDA 12.2") && m.contains("CUDA 13.0"), "{m}");
    }

    /// Whatever this machine has, opening never panics: either a device, or a typed error.
    /// (Here, without a driver: NoDriver. With a GPU: an open device.)
    #[test]
    fn open_never_panics_and_absence_is_typed() {
        match Gpu::open(0) {
            Ok(gpu) => assert!(!gpu.info().name.is_empty()),
            Err(GpuError::NoDriver(m)) => assert!(m.contains("libcuda")),
            Err(GpuError::NoDevice { ordinal: 0, count: 0 }) | Err(GpuError::DriverTooOld { .. }) => {}
            Err(e) => panic!("unexpected error kind: {e}"),
        }
        // An ordinal no machine has is always an error, never a panic.
        match Gpu::open(4096) {
            Err(GpuError::NoDevice { ordinal: 4096, .. }) | Err(GpuError::NoDriver(_)) | Err(GpuError::DriverTooOld { .. }) => {}
            other => panic!("ordinal 4096: {:?}", other.map(|g| g.info().clone())),
        }
    }
}
