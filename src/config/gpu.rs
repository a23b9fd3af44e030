//! The CUDA backend's decoder settings: which nvJPEG decoders, the batched GPU-hybrid route's
//! share, chroma upsampling, how host threads wait, where the hardware engine reads its
//! bitstreams, and the GPU memory budget's default and floor.

use serde::{Deserialize, Serialize};

/// Which nvJPEG decoders the CUDA backend may use (a measurement knob: "hardware engine
/// alone, CUDA decoders alone, both").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum GpuDecoders {
    /// The hardware engine where it takes the image, the CUDA decoders for the rest, the CPU
    /// for what neither takes.
    #[default]
    All,
    /// Only the hardware engine; what it refuses goes to the CPU route.
    Hw,
    /// Never the hardware engine: the CUDA decoders, then the CPU route.
    Cuda,
}

/// CUDA backend: how many of the hardware engine's images nvJPEG's GPU-assisted hybrid
/// decoder (`NVJPEG_BACKEND_GPU_HYBRID`, Huffman on the GPU) takes in one batched call beside
/// the engine (issue 40, "past the engine's ceiling").
///
/// `off` (the default until a GPU measures the route: it runs on the simulated device only);
/// `auto`: a share computed from the rates measured in the run, so that the engine and the
/// route finish each batch together (`backend::cuda::decode::share`), and none while a batch
/// stoke made waits for the trainer (the route's SMs are the model's then:
/// `backend::cuda::decode::YIELD_WHEN_WAITING`); a number in (0, 1]: that
/// fraction of the engine's eligible images, pinned (a call of 100 images or fewer does its
/// Huffman decoding on the host, nvjpeg.h). Config files spell it `"off"`, `"auto"` or
/// `"0.25"`.
///
/// With `auto`, which images the route takes depends on timing: a run is bit for bit
/// repeatable (docs/CONTRACTS.md, contract 1) only where the route returns the engine's pixels
/// exactly, which a GPU has not yet shown (the stand-in decodes both alike); a pinned share
/// takes the same images every run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum HybridShare {
    /// No batched GPU-hybrid route.
    #[default]
    Off,
    /// From the measured rates.
    Auto,
    /// A fixed fraction of the engine's eligible images.
    Pinned(f64),
}

impl std::str::FromStr for HybridShare {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "off" => Ok(Self::Off),
            "auto" => Ok(Self::Auto),
            x => match x.parse::<f64>() {
                Ok(f) if f > 0.0 && f <= 1.0 => Ok(Self::Pinned(f)),
                _ => Err(format!("gpu hybrid share {s:?}: expected 'off', 'auto' or a fraction in (0, 1]")),
            },
        }
    }
}

impl std::fmt::Display for HybridShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::Auto => f.write_str("auto"),
            Self::Pinned(x) => write!(f, "{x}"),
        }
    }
}

impl TryFrom<String> for HybridShare {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

impl From<HybridShare> for String {
    fn from(h: HybridShare) -> String {
        h.to_string()
    }
}

/// How the CUDA backend's decoders (nvJPEG) upsample chroma (4:2:0 and 4:2:2 JPEGs).
///
/// `nearest` (the default) replicates each chroma sample: nvJPEG's own default and what
/// torchvision's, DALI's and nvImageCodec's GPU decoders do. On an H200 it doubled stoke end to
/// end (12.4k against 6.3k images/s, BENCHMARKS.md "GPU run 2026-11-26 07:52–08:20 UTC") and took a ResNet-50
/// trainer from 0.64 to 0.86 of its speed on a fixed batch; its pictures are 0.67 levels from
/// libjpeg-turbo's on average (worst generated image 3.4, tests/gpu_decode.rs on the H200).
/// `smooth` interpolates between chroma samples (`NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION`),
/// as libjpeg-turbo, Pillow and the CPU backend do — pictures within 0.04 levels of the CPU
/// backend's — at half the hardware engine's rate (6.5k against 20.0k images/s for the engine
/// alone, scripts/nvjpeg-hw-load.cu). tests/gpu_decode.rs holds each mode to its bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum GpuUpsampling {
    /// Chroma interpolated, as libjpeg-turbo's default ("fancy") upsampling and the CPU backend.
    Smooth,
    /// Chroma samples replicated: nvJPEG's default, the hardware engine's fast path.
    #[default]
    Nearest,
}

/// How host threads wait for the GPU in the CUDA backend's device context (the primary
/// context, which a PyTorch trainer in the same process shares).
///
/// `auto` (the default) leaves the context's scheduling as it is: the driver's
/// `CU_CTX_SCHED_AUTO` spins while a thread waits whenever the host has more cores than CUDA
/// contexts, which is every training machine, so each wait keeps a core busy for as long as it
/// lasts (the lowest wake-up latency). `block` sets `CU_CTX_SCHED_BLOCKING_SYNC` on the context
/// when the backend opens: every wait on it then sleeps until the GPU is done — stoke's own,
/// those inside nvJPEG's calls (the hardware engine's batched decode holds its caller until the
/// engine is done: 10.9 of each 14.3 ms batch on an H200) and the trainer's own waits in the
/// same process. Whether that cuts stoke's CPU cores without costing images/s is measured on a
/// GPU, not here (BENCHMARKS.md "GPU run plan").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum GpuWait {
    /// The context's scheduling as it is (the driver's default spins on multi-core hosts).
    #[default]
    Auto,
    /// `CU_CTX_SCHED_BLOCKING_SYNC`: a waiting thread sleeps on a synchronization primitive.
    Block,
}

/// Where the hardware JPEG engine reads each batch's compressed bytes (the CUDA backend).
///
/// `host` (the default): nvJPEG's hardware backend (`NVJPEG_BACKEND_HARDWARE`) takes the
/// bitstreams in the readers' pinned buffers and, per its docs, parses each one on the host
/// before it submits a call; its calls keep their thread busy for as long as the engine decodes
/// (0.86 of a core at 17k images/s on an H100, BENCHMARKS.md "GPU run 2026-11-27"). `device`:
/// stoke copies the engine's images' bytes to the device (DMA from the pinned buffers, one copy
/// per run of adjacent images) and decodes them with `NVJPEG_BACKEND_HARDWARE_DEVICE` ("supports
/// input bitstream on device memory. Can be used only with batched decode APIs"), into one more
/// device buffer the size of a staging slot. Whether that takes host cores off the engine's
/// calls at the same images/s is measured on a GPU, not here (BENCHMARKS.md "GPU run plan");
/// where nvJPEG refuses that backend the engine reads host bytes as before, and says so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum GpuBitstream {
    /// The engine reads the bitstreams in pinned host memory (`NVJPEG_BACKEND_HARDWARE`).
    #[default]
    Host,
    /// The engine reads copies of them in device memory (`NVJPEG_BACKEND_HARDWARE_DEVICE`).
    Device,
}

/// The device + pinned host bytes the CUDA decoder may hold by default for a batch of
/// `batch_size`: 256 MiB fixed (nvJPEG states, staging of the compressed bytes) plus 4 MiB per
/// sample, room for a 1.3-megapixel RGB decode per sample and both decode arenas, so an
/// ImageNet-sized dataset never meets the budget while a dataset of 12-megapixel photos
/// decodes its crops by region instead of holding whole images.
pub fn default_gpu_memory_budget(batch_size: usize) -> u64 {
    (256 << 20) + (batch_size as u64).saturating_mul(4 << 20)
}

/// The smallest budget [`PipelineConfig::gpu_memory_budget`] accepts: below this the fixed parts
/// alone (nvJPEG states, one staging slot) do not fit.
///
/// [`PipelineConfig::gpu_memory_budget`]: super::PipelineConfig::gpu_memory_budget
pub const MIN_GPU_MEMORY_BUDGET: u64 = 64 << 20;
