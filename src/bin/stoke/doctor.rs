//! `stoke doctor`: what a user needs when something does not work — the driver and CUDA
//! version, each device, libnvjpeg and the hardware JPEG decoder, where the kernels come from,
//! and which backend `stoke bench` would use. Always exits 0 when it could look: a machine
//! without a GPU is a finding, not an error.
//!
//! Not yet verified on a GPU: the device, hardware-decoder and kernel-load lines were written
//! against the documented APIs on a machine without one.

use serde::Serialize;
use stoke::backend::cuda::{device, module, nvjpeg};

/// Options of `stoke doctor`.
#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    stoke_version: &'static str,
    driver: Driver,
    devices: Vec<Device>,
    nvjpeg: Nvjpeg,
    kernels: KernelBuild,
    cpu_decoder: CpuDecoder,
    cpu_augment: CpuAugment,
    backend: Backend,
}

#[derive(Serialize)]
struct CpuAugment {
    /// The instruction set the CPU backend's augment runs on ("avx2" or "baseline"):
    /// the best this CPU has, unless `STOKE_CPU_ISA` says otherwise. Same bits either way.
    isa: stoke::augment::host::Isa,
    /// Whether this CPU has AVX2.
    avx2: bool,
}

#[derive(Serialize)]
struct CpuDecoder {
    /// "libjpeg-turbo 3.1".
    library: &'static str,
    /// Built with its SIMD code (nasm) and using it on this CPU.
    simd: bool,
    /// What to do when `simd` is false.
    advice: Option<&'static str>,
}

#[derive(Serialize)]
struct Driver {
    /// libcuda loaded and initialised.
    available: bool,
    /// Kernel module version from /proc/driver/nvidia/version, e.g. "580.95.05".
    version: Option<String>,
    /// CUDA driver API version, e.g. "13.0".
    cuda: Option<String>,
    /// Why not available.
    error: Option<String>,
}

#[derive(Serialize)]
struct Device {
    #[serde(flatten)]
    info: device::DeviceInfo,
    /// `{engines, cores_per_engine}`, or null when the GPU has no hardware JPEG decoder.
    hardware_jpeg_decoder: Option<HwDecoder>,
    /// Why the hardware decoder could not be queried (null when it was).
    hardware_jpeg_decoder_error: Option<String>,
    /// "fatbin" or "nvrtc compute_XY" once loaded.
    kernels: Option<String>,
    /// Why the kernels did not load.
    kernels_error: Option<String>,
    /// An error opening the device, if any.
    error: Option<String>,
}

#[derive(Serialize)]
struct HwDecoder {
    engines: u32,
    cores_per_engine: u32,
}

#[derive(Serialize)]
struct Nvjpeg {
    path: Option<String>,
    version: Option<String>,
    error: Option<String>,
}

#[derive(Serialize)]
struct KernelBuild {
    precompiled: bool,
    sass: Vec<&'static str>,
    ptx: Option<&'static str>,
    nvcc: Option<&'static str>,
    /// No fatbin: kernels are compiled with NVRTC when a device is opened.
    runtime_compile: bool,
    files: Vec<&'static str>,
}

#[derive(Serialize)]
struct Backend {
    /// "cuda" or "cpu".
    kind: &'static str,
    device: Option<usize>,
    reason: String,
}

/// The version the kernel module reports, e.g. "580.95.05" (Linux only; None elsewhere).
fn kernel_module_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    line.split_whitespace()
        .find(|t| t.split('.').count() >= 2 && t.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())))
        .map(str::to_string)
}

fn gather() -> Report {
    let mut no_gpu_reason = None;
    let (driver, count) = match device::probe_driver() {
        Ok(d) => (
            Driver { available: true, version: kernel_module_version(), cuda: Some(device::version_string(d.version)), error: None },
            d.device_count,
        ),
        Err(e) => {
            no_gpu_reason = Some(match &e {
                stoke::GpuError::NoDriver(_) => "there is no GPU on this machine (no NVIDIA driver)".to_string(),
                other => format!("no usable GPU: {other}"),
            });
            (Driver { available: false, version: kernel_module_version(), cuda: None, error: Some(e.to_string()) }, 0)
        }
    };

    let nvj = match nvjpeg::sys::NvjpegLib::get() {
        Ok(lib) => match nvjpeg::result::get_version(lib) {
            Ok((a, b, c)) => Nvjpeg { path: Some(lib.path.clone()), version: Some(format!("{a}.{b}.{c}")), error: None },
            Err(e) => Nvjpeg { path: Some(lib.path.clone()), version: None, error: Some(e.to_string()) },
        },
        Err(e) => Nvjpeg { path: None, version: None, error: Some(e.to_string()) },
    };

    let mut devices = Vec::new();
    for ordinal in 0..count {
        let info = match device::device_info(ordinal) {
            Ok(i) => i,
            Err(e) => {
                log::warn!("device {ordinal}: {e}");
                continue;
            }
        };
        let mut d = Device {
            info,
            hardware_jpeg_decoder: None,
            hardware_jpeg_decoder_error: None,
            kernels: None,
            kernels_error: None,
            error: None,
        };
        match device::Gpu::open(ordinal) {
            Ok(gpu) => {
                match gpu.kernels() {
                    Ok(k) => {
                        d.kernels = Some(match k.origin() {
                            module::KernelOrigin::Fatbin => "fatbin".to_string(),
                            module::KernelOrigin::Nvrtc(arch) => format!("nvrtc {arch}"),
                        })
                    }
                    Err(e) => d.kernels_error = Some(e.to_string()),
                }
                if nvj.error.is_none() {
                    // Gpu::open made this device's context current on this thread, so nvJPEG
                    // (which works on the current device) asks about this GPU.
                    use nvjpeg::sys::{nvjpegBackend_t, NVJPEG_FLAGS_DEFAULT};
                    match nvjpeg::safe::NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE, NVJPEG_FLAGS_DEFAULT)
                        .and_then(|h| h.hardware_decoder_info())
                    {
                        Ok((0, _)) => {}
                        Ok((engines, cores)) => d.hardware_jpeg_decoder = Some(HwDecoder { engines, cores_per_engine: cores }),
                        Err(e) => d.hardware_jpeg_decoder_error = Some(e.to_string()),
                    }
                }
            }
            Err(e) => d.error = Some(e.to_string()),
        }
        devices.push(d);
    }

    let backend = match (no_gpu_reason, devices.first(), &nvj.error) {
        (Some(reason), _, _) => Backend { kind: "cpu", device: None, reason },
        (None, None, _) => Backend {
            kind: "cpu",
            device: None,
            reason: "there is no GPU: the NVIDIA driver sees none (check CUDA_VISIBLE_DEVICES)".into(),
        },
        (None, Some(d), _) if d.error.is_some() => {
            Backend { kind: "cpu", device: None, reason: format!("device 0 cannot be opened: {}", d.error.as_deref().unwrap_or("")) }
        }
        (None, Some(_), Some(e)) => Backend { kind: "cpu", device: None, reason: format!("libnvjpeg is missing: {e}") },
        (None, Some(d), None) => match &d.kernels_error {
            Some(e) => Backend { kind: "cpu", device: None, reason: format!("the CUDA kernels cannot be loaded: {e}") },
            None => {
                Backend { kind: "cuda", device: Some(0), reason: format!("device 0 ({}) with nvJPEG and the CUDA kernels", d.info.name) }
            }
        },
    };

    Report {
        stoke_version: env!("CARGO_PKG_VERSION"),
        driver,
        devices,
        nvjpeg: nvj,
        kernels: KernelBuild {
            precompiled: module::precompiled(),
            sass: module::SASS_ARCHS.to_vec(),
            ptx: module::PTX_ARCH,
            nvcc: module::NVCC_RELEASE,
            runtime_compile: !module::precompiled(),
            files: module::KERNEL_FILES.to_vec(),
        },
        cpu_decoder: CpuDecoder {
            library: "libjpeg-turbo 3.1",
            simd: stoke::backend::cpu::decode::jpeg_simd(),
            advice: (!stoke::backend::cpu::decode::jpeg_simd()).then_some(stoke::backend::cpu::decode::NO_SIMD_ADVICE),
        },
        cpu_augment: CpuAugment { isa: stoke::augment::host::augment_isa(), avx2: stoke::augment::host::Isa::Avx2.available() },
        backend,
    }
}

fn gib(bytes: usize) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn print_text(r: &Report) {
    println!("stoke {}", r.stoke_version);
    match (&r.driver.error, &r.driver.cuda) {
        (None, Some(cuda)) => println!(
            "NVIDIA driver : {} (CUDA {cuda}; stoke needs CUDA {} or newer)",
            r.driver.version.as_deref().unwrap_or("version unknown"),
            device::version_string(device::MIN_DRIVER_VERSION)
        ),
        (Some(e), _) => println!("NVIDIA driver : none ({e})"),
        _ => {}
    }
    if r.devices.is_empty() {
        println!("GPUs          : none");
    }
    for d in &r.devices {
        let i = &d.info;
        println!(
            "GPU {}         : {}, compute capability {}.{}, {}, {} multiprocessors, PCI {}",
            i.ordinal,
            i.name,
            i.compute_capability.0,
            i.compute_capability.1,
            gib(i.total_memory),
            i.multiprocessors,
            i.pci
        );
        match (&d.hardware_jpeg_decoder, &d.hardware_jpeg_decoder_error) {
            (Some(h), _) => println!("  JPEG engine : {} engines x {} cores (nvJPEG hardware backend)", h.engines, h.cores_per_engine),
            (None, Some(e)) => println!("  JPEG engine : none ({e})"),
            (None, None) => println!("  JPEG engine : none"),
        }
        match (&d.kernels, &d.kernels_error) {
            (Some(k), _) => println!("  kernels     : loaded ({k})"),
            (None, Some(e)) => println!("  kernels     : not loaded ({e})"),
            (None, None) => {}
        }
        if let Some(e) = &d.error {
            println!("  error       : {e}");
        }
    }
    match (&r.nvjpeg.path, &r.nvjpeg.version, &r.nvjpeg.error) {
        (Some(p), Some(v), _) => println!("libnvjpeg     : {p} (version {v})"),
        (Some(p), None, Some(e)) => println!("libnvjpeg     : {p} ({e})"),
        (_, _, Some(e)) => println!("libnvjpeg     : not found ({e})"),
        _ => {}
    }
    let k = &r.kernels;
    if k.precompiled {
        println!("kernels       : precompiled for {} + PTX {} ({})", k.sass.join(", "), k.ptx.unwrap_or("-"), k.nvcc.unwrap_or("nvcc"));
    } else {
        println!("kernels       : not precompiled (built without nvcc); compiled at run time with NVRTC (needs libnvrtc.so.13)");
    }
    match r.cpu_decoder.advice {
        None => println!("CPU decoder   : {} with SIMD", r.cpu_decoder.library),
        Some(a) => println!("CPU decoder   : {} WITHOUT SIMD — {a}", r.cpu_decoder.library),
    }
    println!(
        "CPU augment   : {}{}",
        r.cpu_augment.isa.name(),
        match (r.cpu_augment.isa, r.cpu_augment.avx2) {
            (stoke::augment::host::Isa::Baseline, true) => " (STOKE_CPU_ISA; this CPU has AVX2)",
            (stoke::augment::host::Isa::Baseline, false) => " (this CPU has no AVX2)",
            _ => "",
        }
    );
    match r.backend.kind {
        "cuda" => println!("backend       : CUDA — `stoke bench` will use {}", r.backend.reason),
        _ => println!("backend       : CPU — {}; `stoke bench` will use the CPU backend", r.backend.reason),
    }
}

/// Run `stoke doctor`.
pub fn run(args: Args) -> stoke::Result<()> {
    let report = gather();
    if args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| stoke::Error::config(format!("doctor: {e}")))?;
        println!("{text}");
    } else {
        print_text(&report);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lines_serialise_with_the_documented_fields() {
        let d = Device {
            info: device::DeviceInfo {
                ordinal: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                compute_capability: (9, 0),
                total_memory: 85_520_809_984,
                multiprocessors: 132,
                pci: "0000:19:00".into(),
            },
            hardware_jpeg_decoder: Some(HwDecoder { engines: 7, cores_per_engine: 1 }),
            hardware_jpeg_decoder_error: None,
            kernels: Some("fatbin".into()),
            kernels_error: None,
            error: None,
        };
        let v: serde_json::Value = serde_json::to_value(&d).unwrap();
        assert_eq!(v["name"], "NVIDIA H100 80GB HBM3");
        assert_eq!(v["compute_capability"], serde_json::json!([9, 0]));
        assert_eq!(v["multiprocessors"], 132);
        assert_eq!(v["hardware_jpeg_decoder"]["engines"], 7);
        assert_eq!(v["kernels"], "fatbin");
        assert_eq!(gib(85_520_809_984), "79.6 GiB");
    }
}
