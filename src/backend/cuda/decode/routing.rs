//! Which decoder takes an image, from its header alone, and how the hardware-engine calls
//! are sized.

use crate::codec::jpeg::{Coding, JpegInfo, Subsampling};

/// Which decoder takes an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// nvJPEG's hardware engine, batched.
    Hardware,
    /// nvJPEG's CUDA decoders (GPU-assisted hybrid, then hybrid), on their own stream.
    Cuda,
    /// nvJPEG's GPU-assisted hybrid decoder in one batched call, whole images, beside the
    /// engine: a share of the engine's images (`decode::batched_hybrid`). Never a
    /// classifier's answer: the decoder moves images here from [`Route::Hardware`].
    GpuHybridBatched,
    /// The CPU decoder.
    Cpu,
}

/// Why an image is rejected before any decoder sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Header dimensions over the decoded-size guard.
    TooLarge {
        /// Stored width.
        width: u32,
        /// Stored height.
        height: u32,
        /// The guard.
        max_pixels: u64,
    },
    /// A zero dimension in the header.
    Empty,
}

impl From<Reject> for crate::error::SlotError {
    fn from(r: Reject) -> Self {
        use crate::codec::{DecodeError, DecodeErrorKind};
        let kind = match r {
            Reject::TooLarge { .. } => DecodeErrorKind::TooLarge,
            Reject::Empty => DecodeErrorKind::Corrupt,
        };
        crate::error::SlotError::Decode(DecodeError::new(kind, r.to_string()))
    }
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reject::TooLarge { width, height, max_pixels } => write!(
                f,
                "image is {width}x{height} = {} pixels, over the decoded-size guard of {max_pixels} pixels",
                *width as u64 * *height as u64
            ),
            Reject::Empty => write!(f, "image header has a zero dimension"),
        }
    }
}

/// Whether an image can go to a GPU decoder at all, and whether the hardware engine is worth
/// asking (`Some(true)`) — from the header alone (`codec::jpeg::parse`). `None` facts (a
/// header our parser refused) go to the CPU decoder, which produces the message if it fails.
/// `engine_gray` ([`DecoderPlan::engine_gray`](super::DecoderPlan::engine_gray), the config's
/// `gpu_engine_gray`) lets the engine be asked for baseline gray JPEGs whose one component is
/// sampled 1×1 ([`engine_gray_candidate`]).
pub fn gpu_candidate(info: Option<&JpegInfo>, max_pixels: u64, engine_gray: bool) -> Result<Option<bool>, Reject> {
    let Some(f) = info else { return Ok(None) };
    if f.width == 0 || f.height == 0 {
        return Err(Reject::Empty);
    }
    if f.pixels() > max_pixels {
        return Err(Reject::TooLarge { width: f.width, height: f.height, max_pixels });
    }
    let colour_ok = match f.components {
        1 => true,
        // Adobe transform 0 on 3 components is RGB stored as is: nvJPEG would convert it as
        // YCbCr.
        3 => f.adobe_transform != Some(0),
        // CMYK / YCCK: libjpeg-turbo's inverted-CMYK convention lives on the CPU.
        _ => false,
    };
    let gpu_css = !matches!(f.subsampling, Subsampling::Other);
    let gpu_coding = matches!(f.coding, Coding::Baseline | Coding::Extended | Coding::Progressive);
    // A header libjpeg-turbo refuses (Huffman tables, the scan header, a side over 65500): the
    // CPU decoder names it (`JpegInfo::turbo_refuses`).
    if !colour_ok || f.precision != 8 || !gpu_css || !gpu_coding || f.dnl || f.turbo_refuses {
        return Ok(None);
    }
    // The engine takes single-scan baseline without 4:1:1 / 4:1:0 (nvjpeg.h); nvJPEG's own
    // check (`nvjpegDecodeBatchedSupportedEx`) has the last word. Grayscale only when asked
    // (engine_gray_candidate).
    let colour = f.components == 3 && f.coding == Coding::Baseline && !matches!(f.subsampling, Subsampling::S411 | Subsampling::S410);
    Ok(Some(colour || (engine_gray && engine_gray_candidate(f))))
}

/// A gray JPEG the hardware engine may be asked for under `gpu_engine_gray`: baseline, one
/// component sampled 1×1 (what encoders write for gray: every gray image of the generated set,
/// 10 of the corpus's 16 baseline gray files). Off by default: on an H200 (driver 580, nvJPEG
/// 13.0) the engine accepted a 1-component baseline JPEG whose component declares sampling
/// 2×2 (legal, and meaningless for one component) and returned a mean error of 50 levels
/// against libjpeg-turbo (tests/gpu_decode.rs, corpus inet_dev_0046), where 3-component images
/// matched; those stay on the CUDA decoders whatever the setting. Whether the engine decodes
/// the 1×1 ones right, and what moving them off the CUDA decoders' host Huffman saves, is a GPU
/// run's (tests/gpu_decode.rs `gray_baseline_on_the_engine_matches_the_cpu_decoder`,
/// `bundle/run.sh routes`); nvImageCodec's hardware decoder takes gray images.
pub fn engine_gray_candidate(f: &JpegInfo) -> bool {
    f.components == 1 && f.coding == Coding::Baseline && f.sampling[0] == (1, 1)
}

/// Whether a JPEG's bytes end with an EOI marker (in their last KiB: what follows it, if
/// anything, is padding or appended data). nvJPEG decodes a stream cut short without an error
/// (on an H200 it returned pixels for a file cut to a third); libjpeg-turbo reports it, so a
/// stream without one goes to the CPU decoder, which names it (`truncated`). Inside
/// entropy-coded data `FF D9` cannot occur (an `FF` there is followed by `00` or a restart
/// marker).
pub fn has_eoi(bytes: &[u8]) -> bool {
    bytes[bytes.len().saturating_sub(1024)..].windows(2).any(|w| w == [0xFF, 0xD9])
}

/// Pick the decoder: `candidate` from [`gpu_candidate`], `hw_supported` nvJPEG's answer for
/// the hardware engine (`None` when the GPU has no engine or it was not asked).
pub fn route(candidate: Option<bool>, hw_supported: Option<bool>) -> Route {
    match candidate {
        None => Route::Cpu,
        Some(true) if hw_supported == Some(true) => Route::Hardware,
        Some(_) => Route::Cuda,
    }
}

/// Decoded size above which the CUDA route tries the GPU-assisted hybrid decoder
/// (`NVJPEG_BACKEND_GPU_HYBRID`, Huffman decoding on the GPU) before the hybrid one (Huffman
/// on the host): below it the GPU Huffman pass costs more than it saves. DALI's
/// `hybrid_huffman_threshold` default.
pub const GPU_HYBRID_MIN_PIXELS: u64 = 1000 * 1000;

/// Whether the CUDA route tries the GPU-assisted hybrid decoder first for this image: above
/// [`GPU_HYBRID_MIN_PIXELS`] and never for progressive JPEGs (as DALI), whose many scans the
/// host Huffman decoder handles.
pub fn gpu_hybrid_first(info: &JpegInfo) -> bool {
    info.pixels() > GPU_HYBRID_MIN_PIXELS && info.coding != Coding::Progressive
}

/// Sizes of the hardware-engine calls for `n` images: the engine has `unit` = engines ×
/// cores-per-engine decode slots, so the images are cut into `ceil(n / unit)` chunks of `unit`
/// (the last chunk holds the remainder) and the chunks are spread as evenly as possible over
/// the fewest calls of at most `max_per_call` images (rounded down to a multiple of `unit`, at
/// least `unit`). Calls differ by at most one chunk, and every call but the last is a whole
/// number of chunks: no tiny trailing call (256 images on 7 units at most 63 per call give
/// 56, 56, 49, 49, 46, not 63, 63, 63, 63, 4). More than one call lets the host parse call
/// `i + 1` while the engine decodes call `i`.
pub fn hw_calls(n: usize, unit: usize, max_per_call: usize) -> Vec<usize> {
    let unit = unit.max(1);
    let chunks = n.div_ceil(unit);
    let calls = chunks.div_ceil((max_per_call / unit).max(1));
    let mut v: Vec<usize> = (0..calls).map(|i| (chunks / calls + usize::from(i < chunks % calls)) * unit).collect();
    if let Some(last) = v.last_mut() {
        *last -= chunks * unit - n;
    }
    v
}
