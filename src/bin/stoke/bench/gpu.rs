//! The GPU side of `stoke bench`: utilization sampled by NVML and the synthetic trainer step
//! that consumes device batches on its own stream.

use std::time::Duration;

/// GPU utilization sampled by NVML in a background thread, when libnvidia-ml is there.
/// Never fails: without a driver it reports nothing.
pub struct GpuMonitor {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<GpuUtil>>>,
}

/// Mean utilization over the measured window, in percent.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GpuUtil {
    /// GPU name as NVML reports it.
    pub name: String,
    /// Driver version.
    pub driver: String,
    /// Kernels running (SM busy), mean percent.
    pub sm_percent: f64,
    /// Device memory being read or written, mean percent.
    pub memory_percent: f64,
    /// JPEG engines (NVJPG) busy, mean percent; absent where NVML or the GPU lacks it.
    pub jpeg_percent: Option<f64>,
    /// Samples taken.
    pub samples: usize,
}

impl GpuMonitor {
    /// Start sampling device `index` every 100 ms; `None` where NVML cannot be loaded or the
    /// device is not there.
    pub fn start(index: u32) -> Option<GpuMonitor> {
        let nvml = nvml_wrapper::Nvml::init().ok()?;
        nvml.device_by_index(index).ok()?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let dev = nvml.device_by_index(index).ok()?;
            let name = dev.name().unwrap_or_default();
            let driver = nvml.sys_driver_version().unwrap_or_default();
            let (mut sm, mut mem, mut jpg, mut n, mut njpg) = (0.0, 0.0, 0.0, 0usize, 0usize);
            let lib = nvml.lib();
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(u) = dev.utilization_rates() {
                    sm += f64::from(u.gpu);
                    mem += f64::from(u.memory);
                    n += 1;
                }
                if lib.nvmlDeviceGetJpgUtilization.is_ok() {
                    let (mut u, mut period) = (0u32, 0u32);
                    // SAFETY: the symbol is present (checked above); the handle belongs to this
                    // live `Nvml`; both out-pointers are valid u32s.
                    let rc = unsafe { lib.nvmlDeviceGetJpgUtilization(dev.handle(), &mut u, &mut period) };
                    if rc == 0 {
                        jpg += f64::from(u);
                        njpg += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (n > 0).then(|| GpuUtil {
                name,
                driver,
                sm_percent: sm / n as f64,
                memory_percent: mem / n as f64,
                jpeg_percent: (njpg > 0).then(|| jpg / njpg as f64),
                samples: n,
            })
        });
        Some(GpuMonitor { stop, thread: Some(thread) })
    }

    /// Stop sampling and return the means.
    pub fn finish(mut self) -> Option<GpuUtil> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take()?.join().ok().flatten()
    }
}

/// The synthetic trainer step for batches on the GPU: after waiting (on the device) for the
/// batch, it keeps a consumer stream busy for about the requested time with device-to-device
/// copies, sized from the copy rate measured once at start, then the host waits for that
/// stream, as a trainer that reads its loss each step does. The pipeline overlaps with it.
pub struct GpuConsumer {
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
    src: cudarc::driver::CudaSlice<u8>,
    dst: cudarc::driver::CudaSlice<u8>,
    /// Copies of `chunk` bytes per step.
    copies: usize,
    chunk: usize,
}

impl GpuConsumer {
    const BUF: usize = 32 << 20;

    /// A consumer on a new stream of `ctx`, calibrated to take about `step` per batch.
    pub fn new(ctx: &std::sync::Arc<cudarc::driver::CudaContext>, step: Duration) -> stoke::Result<Self> {
        use cudarc::driver::sys::CUevent_flags;
        let gpu_err = |call: &'static str| move |e: cudarc::driver::DriverError| stoke::Error::Gpu(stoke::GpuError::driver(call, e));
        let stream = ctx.new_stream().map_err(gpu_err("cuStreamCreate"))?;
        let src = stream.alloc_zeros::<u8>(Self::BUF).map_err(gpu_err("cuMemAlloc"))?;
        let mut dst = stream.alloc_zeros::<u8>(Self::BUF).map_err(gpu_err("cuMemAlloc"))?;
        // Copy rate: the best of a few full-buffer copies.
        let mut best = f64::MAX;
        for _ in 0..5 {
            let a = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(gpu_err("cuEventRecord"))?;
            stream.memcpy_dtod(&src, &mut dst).map_err(gpu_err("cuMemcpyDtoDAsync"))?;
            let b = stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(gpu_err("cuEventRecord"))?;
            best = best.min(f64::from(a.elapsed_ms(&b).map_err(gpu_err("cuEventElapsedTime"))?));
        }
        let bytes_per_ms = Self::BUF as f64 / best.max(1e-6);
        let want = bytes_per_ms * step.as_secs_f64() * 1e3;
        let copies = (want / Self::BUF as f64).ceil().max(1.0) as usize;
        let chunk = ((want / copies as f64) as usize).clamp(1, Self::BUF);
        Ok(Self { stream, src, dst, copies, chunk })
    }

    /// One trainer step on `batch`.
    pub fn step(&mut self, batch: &stoke::batch::DeviceImages) -> stoke::Result<()> {
        let gpu_err = |call: &'static str| move |e: cudarc::driver::DriverError| stoke::Error::Gpu(stoke::GpuError::driver(call, e));
        batch.wait_on(&self.stream)?;
        for _ in 0..self.copies {
            let src = self.src.slice(..self.chunk);
            let mut dst = self.dst.slice_mut(..self.chunk);
            self.stream.memcpy_dtod(&src, &mut dst).map_err(gpu_err("cuMemcpyDtoDAsync"))?;
        }
        self.stream.synchronize().map_err(gpu_err("cuStreamSynchronize"))
    }
}
