//! One error type for the crate. Messages are lowercase sentences that name the sample, the
//! file, the shard and the offset, and show the offending value (STYLE.md).

use std::path::{Path, PathBuf};

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in stoke.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call the value cannot serve in its present state (a batch whose pixels a tensor took,
    /// a device batch asked for a host-only form); the message says why and what to use.
    #[error("{0}")]
    Usage(String),

    /// The consumer holds a device batch in every output-ring slot and asks for another: the
    /// next batch has nowhere to be written, so waiting would never end.
    #[error(
        "{held} device batches are still held and the output ring has {depth} slots (ring_depth): the next batch has no slot to be written into; drop one (or give it back with Pipeline::recycle; a batch taken as tensors counts until its last tensor is dropped) before asking for the next, or build the pipeline with a larger ring_depth"
    )]
    HeldBatches {
        /// Device batches the consumer holds (as batches, or as tensors that took their memory).
        held: usize,
        /// The ring's slots (`ring_depth`).
        depth: usize,
    },

    /// A configuration value is invalid; the message names the field and the value.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// An operating-system I/O error on a path.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The dataset as a whole is unusable: missing path, no class folders, empty class,
    /// truncated tar, duplicate keys, label out of range, bad list line.
    #[error("dataset {}: {message}", path.display())]
    Dataset {
        /// The dataset path (or the file inside it that is wrong).
        path: PathBuf,
        /// What was expected and what was found.
        message: String,
    },

    /// One sample could not be read or decoded. `location` is the file, or the shard and byte
    /// offset, so a user can find the bytes.
    #[error("sample {key} ({location}): {message}")]
    Sample {
        /// The sample's stable key.
        key: String,
        /// Where its bytes live.
        location: String,
        /// What went wrong.
        message: String,
    },

    /// The GPU side is unavailable or failed.
    #[error(transparent)]
    Gpu(#[from] GpuError),

    /// candle refused a tensor made from a batch (feature `candle`).
    #[cfg(feature = "candle")]
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

/// Why the CUDA backend cannot run, or what it failed at.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// libcuda could not be opened.
    #[error("no NVIDIA driver: libcuda could not be loaded ({0}); install the NVIDIA driver or use --backend cpu")]
    NoDriver(String),
    /// The driver is older than the CUDA version the kernels need.
    #[error("NVIDIA driver supports CUDA {found}, stoke needs CUDA {needed} or newer; update the driver or use --backend cpu")]
    DriverTooOld {
        /// e.g. "12.2"
        found: String,
        /// e.g. "13.0"
        needed: String,
    },
    /// No device with that ordinal.
    #[error("no CUDA device with ordinal {ordinal}: {count} device(s) visible (check CUDA_VISIBLE_DEVICES)")]
    NoDevice {
        /// Requested ordinal.
        ordinal: usize,
        /// Devices visible.
        count: usize,
    },
    /// libnvjpeg could not be opened.
    #[error("libnvjpeg could not be loaded; looked for {}; set STOKE_NVJPEG to its path ({detail})", searched.join(", "))]
    NoNvjpeg {
        /// Names and paths tried, in order.
        searched: Vec<String>,
        /// The loader's last message.
        detail: String,
    },
    /// Device or pinned memory ran out.
    #[error("out of {kind} memory allocating {bytes} bytes for {what}")]
    OutOfMemory {
        /// "device" or "pinned host".
        kind: &'static str,
        /// Bytes asked for.
        bytes: usize,
        /// What the memory was for.
        what: String,
    },
    /// No kernel image could be loaded (no fatbin for this GPU and NVRTC failed).
    #[error("CUDA kernels unavailable: {0}")]
    Kernels(String),
    /// A CUDA driver call failed.
    #[error("CUDA {call} failed: {message}")]
    Cuda {
        /// The driver function, e.g. "cuMemAlloc".
        call: &'static str,
        /// The driver's text.
        message: String,
    },
    /// An nvJPEG call failed.
    #[error("nvJPEG {call} failed: {message} (status {status})")]
    Nvjpeg {
        /// The nvJPEG function.
        call: &'static str,
        /// The raw `nvjpegStatus_t`.
        status: i32,
        /// The status as a sentence.
        message: String,
    },
}

/// Why one slot of a batch has no image of its own: what a backend reports per slot, what the
/// `on_error` policy reads ([`crate::backend::SlotPlan`]) and what a
/// [`Substitute`](crate::batch::Substitute) keeps. The message names no file: the pipeline, which
/// owns the dataset, adds the sample's key and location.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The reader could not read the sample's bytes (missing file, I/O error, a shard member
    /// past the end of a truncated shard).
    #[error("{0}")]
    Read(String),
    /// The bytes could not be decoded; the kind says why (unknown format, truncated, corrupt,
    /// unsupported, over the decoded-size guard).
    #[error(transparent)]
    Decode(#[from] crate::codec::DecodeError),
    /// The augment parameters, drawn from the header the index saw, do not fit the image as
    /// decoded (the file changed since indexing, or its header could not be read then).
    #[error("{0}")]
    Params(String),
    /// The sample does not fit a buffer the backend sized from the index (staging slot,
    /// decode arena, filter tables).
    #[error("{0}")]
    Capacity(String),
    /// A device operation for this sample alone failed (its upload).
    #[error("{0}")]
    Device(String),
    /// A GPU decoder failed and the CPU decoder, tried next, failed too.
    #[error("{gpu}; the CPU decoder also failed: {cpu}")]
    Retried {
        /// Why the GPU decoder failed.
        gpu: String,
        /// Why the CPU retry failed.
        cpu: Box<SlotError>,
    },
}

impl SlotError {
    /// A short name of the kind of failure, for statistics and logs: `read`, `unknown format`,
    /// `truncated`, `corrupt`, `unsupported`, `too large`, `params`, `capacity`, `device`
    /// (a retried failure has the kind of its CPU retry).
    pub fn kind(&self) -> &'static str {
        use crate::codec::DecodeErrorKind as K;
        match self {
            SlotError::Read(_) => "read",
            SlotError::Decode(d) => match d.kind {
                K::UnknownFormat => "unknown format",
                K::Truncated => "truncated",
                K::Corrupt => "corrupt",
                K::Unsupported => "unsupported",
                K::TooLarge => "too large",
            },
            SlotError::Params(_) => "params",
            SlotError::Capacity(_) => "capacity",
            SlotError::Device(_) => "device",
            SlotError::Retried { cpu, .. } => cpu.kind(),
        }
    }
}

impl GpuError {
    /// A CUDA driver error from `call` (e.g. `"cuMemcpyDtoH"`), with the driver's own name and
    /// text: for code that makes its own driver calls beside stoke's (benchmarks, trainers).
    pub fn driver(call: &'static str, e: cudarc::driver::DriverError) -> Self {
        cuda_err(call, e)
    }
}

impl Error {
    /// An invalid configuration value.
    pub fn config(msg: impl Into<String>) -> Self {
        Error::Config(msg.into())
    }

    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().to_path_buf(), source }
    }

    /// A dataset-level problem at `path`.
    pub fn dataset(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Error::Dataset { path: path.as_ref().to_path_buf(), message: message.into() }
    }

    /// A per-sample problem.
    pub fn sample(key: impl Into<String>, location: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Sample { key: key.into(), location: location.into(), message: message.into() }
    }
}

/// A caught panic's message (`panic!`'s text), or "unknown panic" when its payload is not text.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

// CUDA driver statuses as `GpuError`s: one place for the device, module, staging, decode, ring
// and device-batch code to turn a driver error into one that carries the driver's own name and
// text.

/// A [`cudarc::driver::DriverError`](cudarc::driver::DriverError) from `call` as a [`GpuError`], with the driver's own name and text.
pub(crate) fn cuda_err(call: &'static str, e: cudarc::driver::DriverError) -> GpuError {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("CUresult {}", e.0 as i32));
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    GpuError::Cuda { call, message: if text.is_empty() { name } else { format!("{name}: {text}") } }
}

/// Like `cuda_err`, but an out-of-memory status becomes [`GpuError::OutOfMemory`] naming
/// the size and purpose of the allocation.
pub(crate) fn alloc_err(call: &'static str, e: cudarc::driver::DriverError, bytes: usize, what: impl Into<String>) -> GpuError {
    if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        GpuError::OutOfMemory { kind: "device", bytes, what: what.into() }
    } else {
        cuda_err(call, e)
    }
}

/// `map_err` adapter: a driver error from `call` as a [`GpuError`] (with the driver's text).
pub(crate) fn driver_err(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> GpuError {
    move |e| cuda_err(call, e)
}
