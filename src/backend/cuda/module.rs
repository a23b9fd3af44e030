//! The embedded kernels and the one launch path every kernel uses.
//!
//! build.rs compiles every `kernels/*.cu` (as one translation unit) with nvcc into a fatbin
//! (SASS for the architectures in [`SASS_ARCHS`], PTX for [`PTX_ARCH`]) and embeds it. Without
//! nvcc it embeds the sources instead (local `#include`s inlined), and [`Kernels::load`]
//! compiles them with NVRTC for the device at hand. The sources are embedded either way, so a
//! GPU the fatbin does not cover still gets its kernels (NVRTC needs `libnvrtc.so.13`).
//!
//! A launch is one short function per kernel (candle style): look the function up, a
//! [`LaunchConfig`], the arguments pushed in the order the `.cu` declares them, launch:
//!
//! ```ignore
//! let f = gpu.kernels()?.function("stoke_canary_set")?;
//! let mut b = gpu.stream().launch_builder(&f);
//! b.arg(&arena).arg(&targets) /* ... in .cu order */;
//! launch(&mut b, "stoke_canary_set", LaunchConfig { grid_dim: (n, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 })?;
//! ```
//!
//! Not yet verified on a GPU: module loading and launches were written against cudarc 0.19.10
//! on a machine without one; `stoke doctor` and tests/gpu_*.rs exercise them where a GPU is lent.

use crate::error::cuda_err;
use crate::error::GpuError;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, LaunchArgs, LaunchConfig};
use cudarc::nvrtc::{CompileOptions, Ptx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[allow(missing_docs)]
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/stoke_kernels.rs"));
}

/// Architectures with precompiled SASS in the embedded fatbin, e.g. `["sm_80", "sm_86", ...]`;
/// empty when build.rs found no nvcc.
pub const SASS_ARCHS: &[&str] = embedded::SASS_ARCHS;
/// The virtual architecture whose PTX the fatbin carries for newer GPUs (e.g. `compute_90`).
pub const PTX_ARCH: Option<&str> = embedded::PTX_ARCH;
/// `nvcc --version`'s release line of the compiler that built the fatbin.
pub const NVCC_RELEASE: Option<&str> = embedded::NVCC_RELEASE;
/// The kernel sources, every `kernels/*.cu` in one translation unit with local includes
/// inlined: what NVRTC compiles when there is no fatbin.
pub const SOURCE: &str = embedded::SOURCE;
/// The `kernels/*.cu` files built into [`SOURCE`] (and the fatbin).
pub const KERNEL_FILES: &[&str] = embedded::KERNEL_FILES;
/// Environment variable: CUDA include directory for NVRTC (`.../nvidia/cu13/include`).
pub const INCLUDE_ENV: &str = "STOKE_CUDA_INCLUDE";

fn fatbin() -> Option<&'static [u8]> {
    embedded::FATBIN
}

/// Whether build.rs embedded a precompiled fatbin.
pub fn precompiled() -> bool {
    fatbin().is_some()
}

/// How the loaded kernels were obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelOrigin {
    /// The fatbin build.rs made with nvcc.
    Fatbin,
    /// Compiled at run time with NVRTC for this architecture (e.g. `compute_90`).
    Nvrtc(String),
}

/// The kernels loaded into one context; functions are looked up once and cached.
#[derive(Debug)]
pub struct Kernels {
    module: Arc<CudaModule>,
    origin: KernelOrigin,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl Kernels {
    /// Load the embedded fatbin into `ctx`; when there is none, or the driver finds nothing in
    /// it for this GPU, compile [`SOURCE`] with NVRTC for compute capability `cc`.
    pub fn load(ctx: &Arc<CudaContext>, cc: (i32, i32)) -> Result<Self, GpuError> {
        let mut fatbin_err = None;
        if let Some(bin) = fatbin() {
            match ctx.load_module(Ptx::from_binary(bin.to_vec())) {
                Ok(module) => return Ok(Self::new(module, KernelOrigin::Fatbin)),
                Err(e) => fatbin_err = Some(cuda_err("cuModuleLoadData", e)),
            }
        }
        let arch = format!("compute_{}{}", cc.0, cc.1);
        let ptx = nvrtc_compile(&arch).map_err(|e| match &fatbin_err {
            Some(f) => GpuError::Kernels(format!("the embedded fatbin did not load ({f}), and {e}")),
            None => GpuError::Kernels(e),
        })?;
        let module = ctx
            .load_module(ptx)
            .map_err(|e| GpuError::Kernels(format!("loading NVRTC output for {arch}: {}", cuda_err("cuModuleLoadData", e))))?;
        Ok(Self::new(module, KernelOrigin::Nvrtc(arch)))
    }

    fn new(module: Arc<CudaModule>, origin: KernelOrigin) -> Self {
        Self { module, origin, functions: Mutex::new(HashMap::new()) }
    }

    /// Where these kernels came from (doctor prints it).
    pub fn origin(&self) -> &KernelOrigin {
        &self.origin
    }

    /// The `extern "C" __global__` function `name`.
    pub fn function(&self, name: &str) -> Result<CudaFunction, GpuError> {
        let mut map = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = map.get(name) {
            return Ok(f.clone());
        }
        let f = self
            .module
            .load_function(name)
            .map_err(|e| GpuError::Kernels(format!("kernel {name} not found in the module: {}", cuda_err("cuModuleGetFunction", e))))?;
        map.insert(name.to_string(), f.clone());
        Ok(f)
    }
}

/// The CUDA include directory NVRTC needs for `cuda_fp16.h` and friends: `$STOKE_CUDA_INCLUDE`,
/// else `$CUDA_HOME/include`, else the pinned wheels in `./.venv-cuda` (docs/CONTRACTS.md, "Toolchain facts": NVRTC
/// 13.0 compiles the sources only with `--include-path=<...>/nvidia/cu13/include`).
pub fn nvrtc_include_dirs() -> Vec<String> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os(INCLUDE_ENV) {
        v.push(p.to_string_lossy().into_owned());
    }
    if let Some(p) = std::env::var_os("CUDA_HOME") {
        v.push(format!("{}/include", p.to_string_lossy()));
    }
    if let Ok(rd) = std::fs::read_dir(".venv-cuda/lib") {
        for e in rd.flatten() {
            let inc = e.path().join("site-packages/nvidia/cu13/include");
            if inc.is_dir() {
                v.push(inc.display().to_string());
            }
        }
    }
    v.retain(|p| std::path::Path::new(p).is_dir());
    v
}

/// Compile [`SOURCE`] to PTX for `arch` (e.g. `compute_90`) with the same floating-point
/// contract as the nvcc build (`-fmad=false`: docs/CONTRACTS.md, contract 2).
pub fn nvrtc_compile(arch: &str) -> Result<Ptx, String> {
    if !super::device::library_loadable("nvrtc") {
        return Err(format!(
            "no precompiled kernels for this GPU and libnvrtc (CUDA 13) was not found to compile them for {arch}; \
             rebuild stoke with nvcc (scripts/setup-cuda.sh) or install libnvrtc.so.13"
        ));
    }
    let opts = CompileOptions {
        fmad: Some(false),
        include_paths: nvrtc_include_dirs(),
        // cudarc takes a &'static str; a process compiles for very few architectures.
        arch: Some(Box::leak(arch.to_string().into_boxed_str())),
        name: Some("stoke_kernels.cu".into()),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts))
        .map_err(|_| format!("NVRTC panicked compiling the kernels for {arch}"))?
        .map_err(|e| match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                format!("NVRTC failed to compile the kernels for {arch}:\n{}", log.to_string_lossy())
            }
            other => format!("NVRTC failed for {arch}: {other}"),
        })
}

/// Launch a kernel whose arguments were pushed onto `args` (in `.cu` order).
///
/// # Safety
/// The arguments match the kernel's parameter list in number, order and type, and every
/// device pointer among them covers what the kernel reads and writes under `cfg`.
pub unsafe fn launch(args: &mut LaunchArgs<'_>, name: &'static str, cfg: LaunchConfig) -> Result<(), GpuError> {
    // SAFETY: caller's contract.
    unsafe { args.launch(cfg) }.map(|_| ()).map_err(|e| {
        let GpuError::Cuda { message, .. } = cuda_err("cuLaunchKernel", e) else { unreachable!() };
        GpuError::Cuda { call: "cuLaunchKernel", message: format!("{name}: {message}") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_source_holds_every_kernel_file_inlined() {
        // build.rs inlines local includes: nothing may still include a stoke header.
        assert!(!SOURCE.contains("#include \"stoke_"), "local includes left in the NVRTC source");
        assert!(
            embedded::KERNEL_FILES.contains(&"augment.cu") && embedded::KERNEL_FILES.contains(&"canary.cu"),
            "{:?}",
            embedded::KERNEL_FILES
        );
        for name in embedded::KERNEL_FILES {
            assert!(SOURCE.contains(&format!("// ---- {name}")), "{name} missing from the embedded source");
        }
        // Headers are inlined once (#pragma once honoured).
        assert_eq!(SOURCE.matches("// ---- stoke_common.cuh").count(), 1);
    }

    #[test]
    fn precompiled_architectures_are_consistent() {
        assert_eq!(precompiled(), !SASS_ARCHS.is_empty());
        assert_eq!(precompiled(), PTX_ARCH.is_some());
        if precompiled() {
            assert_eq!(SASS_ARCHS, ["sm_80", "sm_86", "sm_89", "sm_90"]);
            assert_eq!(PTX_ARCH, Some("compute_90"));
            // A CUDA fatbin starts with the fatbin magic 0xBA55ED50 (little endian).
            assert_eq!(&fatbin().unwrap()[..4], &[0x50, 0xed, 0x55, 0xba]);
        }
    }

    /// The `extern "C" __global__` functions declared in the embedded source.
    fn declared_kernels() -> Vec<String> {
        let mut flat = SOURCE.split_whitespace().collect::<Vec<_>>().join(" ");
        // Drop `__launch_bounds__(...)` so the next '(' opens the parameter list.
        while let Some(i) = flat.find("__launch_bounds__(") {
            let close = flat[i..].find(')').map_or(flat.len(), |j| i + j + 1);
            flat.replace_range(i..close, "");
        }
        flat.split("__global__ void ")
            .skip(1)
            .filter_map(|rest| rest.split('(').next())
            .map(|name| name.split_whitespace().last().unwrap_or(name).to_string())
            .collect()
    }

    /// NVRTC runs on the CPU: where libnvrtc.so.13 is on the loader path (e.g. from the
    /// `nvidia-cuda-nvrtc==13.0.88` wheel; .ci/run installs it), the fallback path compiles the
    /// embedded source for the oldest and newest precompiled architectures, and the PTX has an
    /// entry for every kernel the source declares.
    #[test]
    fn nvrtc_compiles_the_embedded_source_where_libnvrtc_is_present() {
        if !crate::backend::cuda::device::library_loadable("nvrtc") {
            eprintln!("skipped: libnvrtc.so.13 not found (put the nvidia-cuda-nvrtc wheel's lib on LD_LIBRARY_PATH)");
            return;
        }
        // libnvrtc alone is not enough: NVRTC 13.0 needs the CUDA headers. A machine with the
        // library but no headers (a GPU image with a pip-installed libnvrtc) skips, saying so;
        // CI, which has the pinned wheels' headers, sets STOKE_REQUIRE_NVRTC=1.
        if nvrtc_include_dirs().is_empty() {
            assert!(
                std::env::var("STOKE_REQUIRE_NVRTC").as_deref() != Ok("1"),
                "STOKE_REQUIRE_NVRTC=1 but no CUDA include directory was found (set {INCLUDE_ENV} or CUDA_HOME)"
            );
            eprintln!("skipped: libnvrtc is present but no CUDA include directory ({INCLUDE_ENV}, CUDA_HOME/include or ./.venv-cuda)");
            return;
        }
        let kernels = declared_kernels();
        assert!(kernels.iter().any(|k| k == "stoke_augment") && kernels.iter().any(|k| k == "stoke_canary_check"), "{kernels:?}");
        for arch in ["compute_80", "compute_90"] {
            let text = nvrtc_compile(arch).unwrap_or_else(|e| panic!("{e}")).to_src();
            for k in &kernels {
                assert!(text.contains(&format!(".entry {k}(")), "{arch}: no {k} entry in the PTX");
            }
        }
    }
}
