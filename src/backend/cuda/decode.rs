//! nvJPEG decode: which decoder takes each image, how the hardware calls are sized, which
//! region of the image is decoded and where it lands, and the decoder itself
//! ([`GpuDecoder`]).
//!
//! Routing (DESIGN.md "performance model", contract 4), from the header alone:
//! - baseline 8-bit YCbCr/gray JPEGs that `nvjpegDecodeBatchedSupportedEx` accepts go to
//!   the hardware engine (`NVJPEG_BACKEND_HARDWARE`), in calls sized in multiples of
//!   engines × cores per engine (`nvjpegGetHardwareDecoderInfo`), with the region of interest
//!   when the engine takes it (else the whole image);
//! - progressive, extended-sequential and what the engine refuses go to the CUDA decoders
//!   (`NVJPEG_BACKEND_GPU_HYBRID`, then `NVJPEG_BACKEND_HYBRID`, whichever
//!   `nvjpegDecoderJpegSupported` accepts) on a second stream, while the engine works;
//! - what nvJPEG cannot represent faithfully (CMYK/YCCK and Adobe no-transform RGB, whose
//!   colour conventions are libjpeg-turbo's; 12-bit; lossless; arithmetic; hierarchical; DNL;
//!   odd sampling factors; unreadable headers) goes to the CPU decoder
//!   (`backend::cpu::decode::decode_rgb_region`, on worker threads, concurrently);
//! - every GPU decode is checked twice: nvJPEG's status, and canaries written into its
//!   destination before the decode ([`CANARIES`]); a failure is retried on the CPU decoder,
//!   and what the CPU cannot decode either goes to the `skip`/`fail` policy with both reasons.
//!
//! Only the region the augment step reads is decoded ([`decode_roi`]: the crop box plus the
//! filter's reach, grown to the 16-pixel block grid). Every decoded region is interleaved RGB
//! (`NVJPEG_OUTPUT_RGBI`), pitch `3 · width`, at an [`ARENA_ALIGN`]-aligned offset of one of
//! two device arenas used in turn, each sized once ([`ArenaPlan`]).
//!
//! Chroma upsampling: the handles are created with
//! `NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION` ("fancy" upsampling, libjpeg-turbo's default),
//! so GPU- and CPU-decoded pictures agree to the corpus tolerance (mean abs diff < 2).

use crate::augment::params::{AugParams, FILTER_BICUBIC};
use crate::source::jpeg::{Coding, JpegInfo, Subsampling};

/// Offset alignment of every decoded image in the arena (the CUDA allocation granularity;
/// nvJPEG's hardware engine writes whole 256-byte lines most efficiently).
pub const ARENA_ALIGN: u64 = 256;

/// Which decoder takes an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// nvJPEG's hardware engine, batched.
    Hardware,
    /// nvJPEG's CUDA decoders (GPU-assisted hybrid, then hybrid), on their own stream.
    Cuda,
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
/// asking (`Some(true)`) — from the header alone (`source::jpeg::parse`). `None` facts (a
/// header our parser refused) go to the CPU decoder, which produces the message if it fails.
pub fn gpu_candidate(info: Option<&JpegInfo>, max_pixels: u64) -> Result<Option<bool>, Reject> {
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
    if !colour_ok || f.precision != 8 || !gpu_css || !gpu_coding || f.dnl {
        return Ok(None);
    }
    // The engine takes single-scan baseline without 4:1:1 / 4:1:0 (nvjpeg.h); nvJPEG's own
    // check (`nvjpegDecodeBatchedSupportedEx`) has the last word.
    Ok(Some(f.coding == Coding::Baseline && !matches!(f.subsampling, Subsampling::S411 | Subsampling::S410)))
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

/// Sizes of the hardware-engine calls for `n` images: the engine has `unit` = engines ×
/// cores-per-engine decode slots, so every call but the last takes `per_call` images (a
/// multiple of `unit`, at most `max_per_call` rounded down to one, at least `unit`) and the
/// last takes the rest. Fewer, fuller calls keep every core busy; more than one call lets
/// the host parse call `i + 1` while the engine decodes call `i`.
pub fn hw_calls(n: usize, unit: usize, max_per_call: usize) -> Vec<usize> {
    let unit = unit.max(1);
    let per_call = (max_per_call / unit).max(1) * unit;
    let mut v = vec![per_call; n / per_call];
    if n % per_call != 0 {
        v.push(n % per_call);
    }
    v
}

/// A region of an image, in pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roi {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width.
    pub w: u32,
    /// Height.
    pub h: u32,
}

/// Stored coordinates of oriented pixel `(x, y)` of an image stored as `sw × sh` under EXIF
/// orientation `o` (the oriented image is `sh × sw` for 5..=8).
pub fn oriented_to_stored(x: u32, y: u32, sw: u32, sh: u32, o: u32) -> (u32, u32) {
    match o {
        2 => (sw - 1 - x, y),
        3 => (sw - 1 - x, sh - 1 - y),
        4 => (x, sh - 1 - y),
        5 => (y, x),
        6 => (y, sh - 1 - x),
        7 => (sw - 1 - y, sh - 1 - x),
        8 => (sw - 1 - y, x),
        _ => (x, y),
    }
}

/// Source span `[lo, hi)` along one axis that output indices `[first, first + n)` of a
/// resize from `in_size` to `out_size` can touch, a superset of Pillow's
/// `precompute_coeffs` taps (antialiased) and of the two taps of plain bilinear/bicubic.
fn tap_span(in_size: u32, out_size: u32, first: u32, n: u32, filter: u32, antialias: bool) -> (u32, u32) {
    let scale = in_size as f64 / out_size as f64;
    let a = if filter == FILTER_BICUBIC { 2.0 } else { 1.0 };
    let fs = if antialias { scale.max(1.0) } else { 1.0 };
    let support = a * fs;
    let c0 = (first as f64 + 0.5) * scale;
    let c1 = ((first + n) as f64 - 0.5) * scale;
    // One extra pixel each side covers int() truncation and the plain filters' -0.5 shift.
    let lo = (c0 - support - 1.0).floor().max(0.0) as u32;
    let hi = ((c1 + support + 1.0).ceil() as u32).min(in_size);
    (lo.min(hi.saturating_sub(1)), hi)
}

/// Round a span outward to multiples of `mcu` (the JPEG block grid), clamped to `size`.
fn to_grid(lo: u32, hi: u32, mcu: u32, size: u32) -> (u32, u32) {
    let lo = lo / mcu * mcu;
    let hi = hi.div_ceil(mcu).saturating_mul(mcu).min(size);
    (lo, hi)
}

/// The part of the stored image that the augment step reads for `p`, in stored coordinates,
/// grown to the `mcu` grid (16 covers every subsampling). Decoding only this region is the
/// crop-before-decode of random-resized crop. The whole image when nothing can be saved.
pub fn decode_roi(p: &AugParams, stored_w: u32, stored_h: u32, mcu: u32) -> Roi {
    let aa = p.antialias != 0;
    let (x0, x1) = tap_span(p.crop_w as u32, p.resize_w as u32, p.win_x.max(0) as u32, p.out_w as u32, p.filter, aa);
    let (y0, y1) = tap_span(p.crop_h as u32, p.resize_h as u32, p.win_y.max(0) as u32, p.out_h as u32, p.filter, aa);
    let (ox0, oy0) = (p.crop_x as u32 + x0, p.crop_y as u32 + y0);
    let (ox1, oy1) = (p.crop_x as u32 + x1 - 1, p.crop_y as u32 + y1 - 1); // inclusive
    let (ax, ay) = oriented_to_stored(ox0, oy0, stored_w, stored_h, p.orientation);
    let (bx, by) = oriented_to_stored(ox1, oy1, stored_w, stored_h, p.orientation);
    let (sx0, sx1) = to_grid(ax.min(bx), ax.max(bx) + 1, mcu, stored_w);
    let (sy0, sy1) = to_grid(ay.min(by), ay.max(by) + 1, mcu, stored_h);
    Roi { x: sx0, y: sy0, w: sx1 - sx0, h: sy1 - sy0 }
}

/// The device arena for one batch's decoded images, sized once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaPlan {
    /// Bytes of the arena.
    pub bytes: u64,
}

/// Decoded bytes of a `w × h` RGB image, aligned.
pub fn decoded_bytes(w: u32, h: u32) -> u64 {
    (w as u64 * h as u64 * 3).next_multiple_of(ARENA_ALIGN)
}

impl ArenaPlan {
    /// Room for the `batch` largest images of the index (`pixels`: stored `w·h` per sample,
    /// already capped by the decoded-size guard), so any batch fits whole even without ROI
    /// decode.
    pub fn new(pixels: impl IntoIterator<Item = u64>, batch: usize, max_pixels: u64) -> Self {
        let sizes = pixels.into_iter().map(|p| (p.min(max_pixels) * 3).next_multiple_of(ARENA_ALIGN));
        Self { bytes: super::staging::largest_k_sum(sizes, batch, ARENA_ALIGN).max(ARENA_ALIGN) }
    }
}

/// Bump allocation of a batch's decoded images inside the arena. An image that does not fit
/// (its header disagrees with the index) gets `None` and goes to the policy, never to a
/// bigger allocation.
#[derive(Clone, Debug)]
pub struct ArenaCursor {
    capacity: u64,
    used: u64,
}

impl ArenaCursor {
    /// An empty arena of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self { capacity, used: 0 }
    }

    /// Offset for a `w × h` RGB image, or `None` when it does not fit.
    pub fn place(&mut self, w: u32, h: u32) -> Option<u64> {
        let n = decoded_bytes(w, h);
        let end = self.used.checked_add(n)?;
        (end <= self.capacity).then(|| std::mem::replace(&mut self.used, end))
    }

    /// Offset for a `w × h` RGB image that may take over `prev` (offset and bytes of a place
    /// given earlier in this batch, to an image whose GPU decode failed): the same place when
    /// the image fits in it, else [`Self::place`]. Retrying on the CPU must not need more
    /// room than the batch was sized for: the arena holds one place per image, and one bad
    /// image fails a whole hardware call, whose images are all retried.
    pub fn place_or_reuse(&mut self, prev: Option<(u64, u64)>, w: u32, h: u32) -> Option<u64> {
        match prev {
            Some((offset, bytes)) if decoded_bytes(w, h) <= bytes => Some(offset),
            _ => self.place(w, h),
        }
    }

    /// Start a new batch.
    pub fn reset(&mut self) {
        self.used = 0;
    }
}

/// Canary pixels written into every GPU decode destination before the decode and checked
/// after it (`stoke_canary_set` / `stoke_canary_check` in `kernels/augment.cu`): a decoder,
/// the hardware engine in particular, can report success for an image it skipped. The
/// `CANARIES` pixels are spread over every row band and column band of the region, each with
/// its own three-byte value; an image counts as not written when at least
/// `CANARY_MIN_INTACT` of them survive. A decoded pixel equals a given canary with
/// probability about 2^-24, so a false alarm (which only costs a CPU re-decode) happens about
/// once in 500 000 images; a skipped or partly written image keeps canaries.
pub const CANARIES: u32 = 32;
/// See [`CANARIES`].
pub const CANARY_MIN_INTACT: u32 = 1;

/// Where one GPU decode writes, for the canary kernels. Mirrored by `StokeDecodeTarget` in
/// `kernels/augment.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DecodeTarget {
    /// Arena byte offset of the decoded region.
    pub offset: u64,
    /// Decoded width (the ROI's).
    pub width: u32,
    /// Decoded height.
    pub height: u32,
    /// Bytes per row (`3 · width`).
    pub pitch: u32,
    /// Zero.
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<DecodeTarget>() == 24);

mod canary_ffi {
    extern "C" {
        pub fn stoke_host_canary_at(t: *const super::DecodeTarget, k: u32, v: *mut u8) -> u64;
        #[cfg(test)]
        pub fn stoke_host_canaries() -> u32;
    }
}

/// Arena offset and bytes of canary `k` of `t`, as the canary kernels compute them (their
/// code, host-compiled).
pub fn canary_at(t: &DecodeTarget, k: u32) -> (u64, [u8; 3]) {
    let mut v = [0u8; 3];
    // SAFETY: reads `t`, writes three bytes into `v`.
    let off = unsafe { canary_ffi::stoke_host_canary_at(t, k, v.as_mut_ptr()) };
    (off, v)
}

// SAFETY: #[repr(C)] plain integers, the layout `StokeDecodeTarget` asserts on the C side.
unsafe impl cudarc::driver::DeviceRepr for DecodeTarget {}
// SAFETY: all-zero bytes are a valid DecodeTarget (integers only).
unsafe impl cudarc::driver::ValidAsZeroBits for DecodeTarget {}

// ---------------------------------------------------------------------------------------
// The decoder itself (needs a GPU). Not yet verified on a GPU: written against the nvJPEG
// 13.0 header and documentation and cudarc 0.19.10 on a machine without one.
// ---------------------------------------------------------------------------------------

use super::augment::SampleDesc;
use super::device::Gpu;
use super::error::alloc_err;
use super::module::launch;
use super::nvjpeg::result as nvr;
use super::nvjpeg::safe::{DecodeParams, Decoder, DeviceBuffer, JpegState, JpegStream, NvjpegHandle, PinnedBuffer};
use super::nvjpeg::sys::{
    nvjpegBackend_t, nvjpegDecodeParams_t, nvjpegImage_t, nvjpegOutputFormat_t, NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION,
};
use super::error::{cuda_err, driver_err};
use crate::backend::cpu::decode::{decode_rgb_region, DecodedImage};
use crate::error::GpuError;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PinnedHostSlice, PushKernelArg};
use std::sync::Arc;

/// The nvJPEG handles are created with interpolated ("fancy") chroma upsampling, as
/// libjpeg-turbo's default (module doc).
pub const NVJPEG_FLAGS: u32 = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;
const RGBI: nvjpegOutputFormat_t = nvjpegOutputFormat_t::NVJPEG_OUTPUT_RGBI;

/// Sizes the decoder is built for, from the config and the index.
#[derive(Clone, Copy, Debug)]
pub struct DecoderPlan {
    /// Samples per batch.
    pub batch: usize,
    /// Bytes of each of the two decode arenas.
    pub arena: ArenaPlan,
    /// The decoded-size guard.
    pub max_pixels: u64,
    /// Largest stored width and height in the index (hardware pre-allocation).
    pub max_dims: (u32, u32),
    /// Most images per hardware call (rounded to the engine width).
    pub hw_max_per_call: usize,
    /// Threads decoding on the CPU (fallback route and retries).
    pub cpu_threads: usize,
    /// Use the hardware engine (off: its images go to the CUDA decoders). For measuring the
    /// decoders one at a time; the pipeline turns both on.
    pub use_hardware: bool,
    /// Use the CUDA decoders (off: their images go to the CPU).
    pub use_cuda: bool,
}

/// Where one sample's pixels are, after [`GpuDecoder::decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Byte offset of the decoded region in the arena.
    pub offset: u64,
    /// The decoded region, in stored coordinates.
    pub roi: Roi,
    /// Stored size of the whole image.
    pub stored: (u32, u32),
    /// Which decoder produced it (after retries).
    pub route: Route,
}

impl Decoded {
    /// The augment kernel's descriptor fields for this image under `p` (table fields are
    /// filled by [`super::augment::TableLayout::add`]).
    pub fn desc(&self, p: &AugParams) -> SampleDesc {
        let (base, step_x, step_y) = super::augment::oriented_steps(
            self.offset,
            3 * self.roi.w as u64,
            (self.roi.x, self.roi.y),
            self.stored,
            (p.crop_x, p.crop_y),
            p.orientation,
        );
        SampleDesc { base, step_x, step_y, ..Default::default() }
    }
}

/// Counters for `stoke bench` and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Images the hardware engine decoded.
    pub hardware: u64,
    /// Images the CUDA decoders decoded.
    pub cuda: u64,
    /// Images routed to the CPU decoder.
    pub cpu: u64,
    /// GPU decodes that failed or were not written (canaries) and went to the CPU.
    pub retried: u64,
    /// Images no decoder could decode (left to the policy).
    pub failed: u64,
}

struct HwPath {
    handle: Arc<NvjpegHandle>,
    parse: JpegStream,
    params: Vec<DecodeParams>,
    // Two states used in turn, each guarded by the event recorded after its last call.
    states: [JpegState; 2],
    state_done: [CudaEvent; 2],
    unit: usize,
    per_call: usize,
}

struct CudaSlot {
    state: JpegState,
    stream: JpegStream,
    params: DecodeParams,
    done: CudaEvent,
}

struct CudaPath {
    // [GPU-assisted hybrid, hybrid]: the first that supports an image decodes it.
    decoders: Vec<(Decoder, [CudaSlot; 2])>,
    turn: usize,
}

/// nvJPEG on one device: the hardware engine (when the GPU has one) and the CUDA decoders,
/// on two streams, plus two decode arenas used in turn (the augment of batch n reads one while
/// batch n + 1 decodes into the other).
pub struct GpuDecoder {
    gpu: Arc<Gpu>,
    plan: DecoderPlan,
    hw: Option<HwPath>,
    cuda: CudaPath,
    hw_stream: Arc<CudaStream>,
    cuda_stream: Arc<CudaStream>,
    // Owns the memory `arena_ptr` points into.
    _arenas: [CudaSlice<u8>; 2],
    arena_ptr: [u64; 2],
    arena_free: [CudaEvent; 2],
    arena_used: [bool; 2],
    next: usize,
    targets_host: PinnedHostSlice<DecodeTarget>,
    targets_dev: CudaSlice<DecodeTarget>,
    intact_host: PinnedHostSlice<u32>,
    intact_dev: CudaSlice<u32>,
    canaries_set: CudaEvent,
    done: CudaEvent,
    stats: DecodeStats,
    // Per-batch scratch, reused.
    routes: Vec<Result<Classified, String>>,
    cpu_out: Vec<CpuResult>,
}

// SAFETY: every raw nvJPEG/CUDA object inside is owned by this value and used from one thread
// at a time (`&mut self`).
unsafe impl Send for GpuDecoder {}

impl Drop for GpuDecoder {
    fn drop(&mut self) {
        // The arenas are freed stream-ordered on `hw_stream` right after this, but the augment
        // kernels read them on another stream through raw addresses (and a decode that
        // returned early may leave work on `cuda_stream`): wait for all of it first.
        for a in 0..2 {
            if self.arena_used[a] {
                if let Err(e) = self.arena_free[a].synchronize() {
                    log::error!("waiting for the augment reading decode arena {a} before freeing it: {e}");
                }
            }
        }
        for s in [&self.cuda_stream, &self.hw_stream] {
            if let Err(e) = s.synchronize() {
                log::error!("waiting for a decode stream before freeing the arenas: {e}");
            }
        }
    }
}

fn nv_ptr(p: &DecodeParams) -> nvjpegDecodeParams_t {
    p.raw()
}

impl GpuDecoder {
    /// Create the handles, states, streams and the two arenas (the only allocations).
    pub fn new(gpu: &Arc<Gpu>, plan: DecoderPlan) -> Result<Self, GpuError> {
        let ctx = gpu.ctx();
        ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        let hw_stream = ctx.new_stream().map_err(driver_err("cuStreamCreate"))?;
        let cuda_stream = ctx.new_stream().map_err(driver_err("cuStreamCreate"))?;
        let ev = || ctx.new_event(None).map_err(driver_err("cuEventCreate"));

        // Hardware engine: absent on most GPUs (nvJPEG refuses the backend), which is fine.
        // Interpolated upsampling first; if this nvJPEG refuses the flag for the engine, the
        // engine without it beats no engine (tests/gpu_decode.rs measures the difference).
        let hw_handle = NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE, NVJPEG_FLAGS).or_else(|e| {
            NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE, 0).inspect(|_| {
                log::warn!("nvJPEG hardware decoder refused interpolated upsampling ({e}); using its default");
            })
        });
        let hw = match hw_handle {
            Ok(handle) => match handle.hardware_decoder_info() {
              Err(e) => {
                // A VM or MIG slice can open the handle yet not report (or reach) the engine:
                // run without it rather than fail the backend.
                log::warn!("nvJPEG hardware decoder opened but its engine info failed ({e}); running without it");
                None
              }
              Ok((engines, cores)) => {
                let unit = (engines as usize * cores as usize).max(1);
                let per_call = hw_calls(plan.batch, unit, plan.hw_max_per_call.max(unit))[0];
                let mut states = [JpegState::new(&handle)?, JpegState::new(&handle)?];
                let (pw, ph) = prealloc_dims(plan.max_dims, per_call, plan.arena.bytes);
                for st in &mut states {
                    // Reserve the engine's buffers up front so steady state allocates nothing;
                    // nvJPEG grows them itself for a larger image, so a refusal is not fatal.
                    if let Err(e) = st.batched_pre_allocate(
                        per_call,
                        pw,
                        ph,
                        super::nvjpeg::sys::nvjpegChromaSubsampling_t::NVJPEG_CSS_444,
                        RGBI,
                    ) {
                        log::warn!("nvJPEG hardware pre-allocation for {per_call} images of {pw}x{ph} failed: {e}");
                    }
                }
                let params = (0..plan.batch).map(|_| DecodeParams::new(&handle)).collect::<Result<Vec<_>, _>>()?;
                log::info!("nvJPEG hardware decoder: {engines} engine(s) x {cores} core(s); {per_call} images per call");
                Some(HwPath { parse: JpegStream::new(&handle)?, handle, params, states, state_done: [ev()?, ev()?], unit, per_call })
              }
            },
            Err(e) => {
                log::info!("no nvJPEG hardware decoder on this GPU ({e}); baseline JPEGs use the CUDA decoder");
                None
            }
        };

        let handle = NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_DEFAULT, NVJPEG_FLAGS)?;
        let mut decoders = Vec::new();
        for backend in [nvjpegBackend_t::NVJPEG_BACKEND_GPU_HYBRID, nvjpegBackend_t::NVJPEG_BACKEND_HYBRID] {
            let d = Decoder::new(&handle, backend)?;
            let slot = || -> Result<CudaSlot, GpuError> {
                let mut state = d.new_state()?;
                state.attach_pinned(PinnedBuffer::new(&handle)?)?;
                state.attach_device(DeviceBuffer::new(&handle)?)?;
                let mut params = DecodeParams::new(&handle)?;
                params.set_output_format(RGBI)?;
                Ok(CudaSlot { state, stream: JpegStream::new(&handle)?, params, done: ev()? })
            };
            let slots = [slot()?, slot()?];
            decoders.push((d, slots));
        }

        let bytes = usize::try_from(plan.arena.bytes).map_err(|_| GpuError::OutOfMemory {
            kind: "device",
            bytes: usize::MAX,
            what: format!("a decode arena of {} bytes", plan.arena.bytes),
        })?;
        let alloc = |what: &str| -> Result<CudaSlice<u8>, GpuError> {
            // SAFETY: uninitialised device memory; every byte the augment kernel reads was
            // written by a decode (or the CPU upload) of the same batch first.
            unsafe { hw_stream.alloc::<u8>(bytes) }.map_err(|e| alloc_err("cuMemAlloc", e, bytes, what))
        };
        let arenas = [alloc("decode arena 0")?, alloc("decode arena 1")?];
        let arena_ptr = [arenas[0].device_ptr(&hw_stream).0, arenas[1].device_ptr(&hw_stream).0];
        let n = plan.batch;
        // SAFETY (both pinned buffers): plain data, written by the host (targets) or by a copy
        // (intact) before being read. `intact` is read on the host: flags 0, not
        // write-combined (TOOLCHAIN.md).
        let targets_host = unsafe { ctx.alloc_pinned::<DecodeTarget>(n) }.map_err(driver_err("cuMemHostAlloc"))?;
        let intact_host = unsafe { ctx.alloc_pinned_with_flags::<u32>(n, 0) }.map_err(driver_err("cuMemHostAlloc"))?;
        // SAFETY: small device arrays written before they are read (upload / check kernel).
        let targets_dev = unsafe { hw_stream.alloc::<DecodeTarget>(n) }.map_err(|e| alloc_err("cuMemAlloc", e, n * 24, "decode targets"))?;
        let intact_dev = unsafe { hw_stream.alloc::<u32>(n) }.map_err(|e| alloc_err("cuMemAlloc", e, n * 4, "canary results"))?;
        hw_stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
        Ok(Self {
            gpu: gpu.clone(),
            plan,
            hw,
            cuda: CudaPath { decoders, turn: 0 },
            hw_stream,
            cuda_stream,
            _arenas: arenas,
            arena_ptr,
            arena_free: [ev()?, ev()?],
            arena_used: [false; 2],
            next: 0,
            targets_host,
            targets_dev,
            intact_host,
            intact_dev,
            canaries_set: ev()?,
            done: ev()?,
            stats: DecodeStats::default(),
            routes: Vec::new(),
            cpu_out: Vec::new(),
        })
    }

    /// Engines × cores of the hardware decoder, or `None` without one.
    pub fn hardware_width(&self) -> Option<usize> {
        self.hw.as_ref().map(|h| h.unit)
    }

    /// The hardware-decode stream (which the CUDA-decode stream is joined into at the end of
    /// every [`Self::decode`]): recording on it covers every read of the staged bytes.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.hw_stream
    }

    /// Counters so far.
    pub fn stats(&self) -> DecodeStats {
        self.stats
    }

    /// Decode one batch into the next arena. `jobs[i]` is the compressed bytes (inside the
    /// pinned staging slot, alive until this returns) and the augment parameters of sample
    /// `i`; `out[i]` is where its pixels are, or why no decoder could produce them (for the
    /// policy). Returns the arena's device address. Blocks until the GPU decodes are done (the
    /// canaries must be read before anything is retried on the CPU).
    pub fn decode(
        &mut self,
        jobs: &[(&[u8], AugParams)],
        out: &mut Vec<Result<Decoded, String>>,
    ) -> Result<u64, GpuError> {
        let n = jobs.len();
        assert!(n <= self.plan.batch, "batch of {n} over the planned {}", self.plan.batch);
        // nvJPEG and the raw copies work on the thread's current context: this device's (one
        // pipeline per device in a process, each on its own thread).
        self.gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        let a = self.next;
        self.next ^= 1;
        if self.arena_used[a] {
            // The augment kernel of two batches ago read this arena.
            self.arena_free[a].synchronize().map_err(driver_err("cuEventSynchronize"))?;
        }
        let arena = self.arena_ptr[a];
        let mut cursor = ArenaCursor::new(self.plan.arena.bytes);
        out.clear();

        // 1. Route every image and give it its place (ROI-sized for the GPU decoders).
        self.routes.clear();
        for (bytes, p) in jobs {
            let r = self.classify(bytes, p);
            self.routes.push(r);
        }
        let mut hw_list = Vec::new();
        let mut cuda_list = Vec::new();
        let mut cpu_list = Vec::new();
        out.extend(self.routes.iter().enumerate().map(|(i, r)| match r {
            Err(e) => Err(e.clone()),
            // Placed once decoded: the CPU decoder widens the region to its iMCU grid.
            Ok((Route::Cpu, roi, stored)) => {
                cpu_list.push(i);
                Ok(Decoded { offset: 0, roi: *roi, stored: *stored, route: Route::Cpu })
            }
            Ok((route, roi, stored)) => match cursor.place(roi.w, roi.h) {
                None => Err(arena_full(self.plan.arena.bytes)),
                Some(offset) => {
                    if *route == Route::Hardware {
                        hw_list.push(i);
                    } else {
                        cuda_list.push(i);
                    }
                    Ok(Decoded { offset, roi: *roi, stored: *stored, route: *route })
                }
            },
        }));

        // 2. Canaries into every GPU destination, before any decoder runs.
        let gpu_list: Vec<usize> = hw_list.iter().chain(&cuda_list).copied().collect();
        let targets = self.targets_host.as_mut_slice().map_err(driver_err("cuEventSynchronize"))?;
        for (k, &i) in gpu_list.iter().enumerate() {
            let d = out[i].as_ref().expect("placed above");
            targets[k] = DecodeTarget { offset: d.offset, width: d.roi.w, height: d.roi.h, pitch: 3 * d.roi.w, pad: 0 };
        }
        if !gpu_list.is_empty() {
            self.hw_stream
                .memcpy_htod(&self.targets_host, &mut self.targets_dev)
                .map_err(driver_err("cuMemcpyHtoDAsync"))?;
            self.launch_canaries("stoke_canary_set", arena, gpu_list.len(), false)?;
            self.canaries_set.record(&self.hw_stream).map_err(driver_err("cuEventRecord"))?;
            self.cuda_stream.wait(&self.canaries_set).map_err(driver_err("cuStreamWaitEvent"))?;
        }

        // 3-5. CPU route on worker threads while the host enqueues the GPU decodes.
        let mut gpu_failed: Vec<(usize, String)> = Vec::new();
        let max_pixels = self.plan.max_pixels;
        let cpu_threads = self.plan.cpu_threads.max(1);
        let mut cpu_out = std::mem::take(&mut self.cpu_out);
        cpu_out.clear();
        std::thread::scope(|scope| -> Result<(), GpuError> {
            let workers = cpu_decode_workers(scope, &cpu_list, jobs, out, max_pixels, cpu_threads);
            if !hw_list.is_empty() {
                self.decode_hardware(&hw_list, jobs, arena, out, &mut gpu_failed)?;
            }
            for &i in &cuda_list {
                let d = *out[i].as_ref().expect("placed above");
                if let Err(e) = self.decode_cuda(jobs[i].0, &d, arena) {
                    gpu_failed.push((i, e.to_string()));
                }
            }
            for w in workers {
                cpu_out.extend(w.join().expect("cpu decode worker panicked"));
            }
            Ok(())
        })?;

        // 6. Wait for the GPU decodes and read the canaries.
        self.hw_stream.join(&self.cuda_stream).map_err(driver_err("cuStreamWaitEvent"))?;
        if !gpu_list.is_empty() {
            self.launch_canaries("stoke_canary_check", arena, gpu_list.len(), true)?;
            self.hw_stream.memcpy_dtoh(&self.intact_dev, &mut self.intact_host).map_err(driver_err("cuMemcpyDtoHAsync"))?;
        }
        self.done.record(&self.hw_stream).map_err(driver_err("cuEventRecord"))?;
        self.done.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        let intact = self.intact_host.as_slice().map_err(driver_err("cuEventSynchronize"))?;
        for (k, &i) in gpu_list.iter().enumerate() {
            if intact[k] >= CANARY_MIN_INTACT && !gpu_failed.iter().any(|(j, _)| *j == i) {
                gpu_failed.push((i, format!("nvJPEG reported success but left {} of {CANARIES} canaries unwritten", intact[k])));
            }
        }

        // 7. Retry the GPU failures on the CPU (in parallel), then upload every CPU result.
        let retry: Vec<usize> = gpu_failed.iter().map(|(i, _)| *i).collect();
        let retried = std::thread::scope(|scope| {
            cpu_decode_workers(scope, &retry, jobs, out, max_pixels, cpu_threads)
                .into_iter()
                .flat_map(|w| w.join().expect("cpu decode worker panicked"))
                .collect::<Vec<_>>()
        });
        self.stats.retried += retry.len() as u64;
        let why_gpu: std::collections::HashMap<usize, String> = gpu_failed.into_iter().collect();
        self.gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        let upload_stream = self.hw_stream.cu_stream();
        let mut uploaded = false;
        for (i, r) in cpu_out.drain(..).chain(retried) {
            // A GPU decode that failed keeps its place in the arena: the retry reuses it.
            let prev = match &out[i] {
                Ok(d) if d.route != Route::Cpu => Some((d.offset, decoded_bytes(d.roi.w, d.roi.h))),
                _ => None,
            };
            let result = r.and_then(|img| {
                check_params(&jobs[i].1, (img.width, img.height))?;
                let roi = Roi { x: img.region_x, y: img.region_y, w: img.region_w, h: img.region_h };
                let offset = cursor.place_or_reuse(prev, roi.w, roi.h).ok_or_else(|| arena_full(self.plan.arena.bytes))?;
                let len = 3 * roi.w as usize * roi.h as usize;
                // Stream-ordered on the decode stream, which is synchronised below. Not the
                // synchronous cuMemcpyHtoD: that runs on the legacy stream, which stoke's
                // non-blocking streams do not wait for, and from pageable memory it may return
                // before the DMA lands, so the augment kernel could read stale bytes. From
                // pageable memory the driver stages the bytes before returning, so `img` may
                // be dropped right after.
                // SAFETY: `offset .. offset + len` lies inside arena `a` (placed by the
                // cursor); no GPU work reads or writes it (decodes finished, the augment of
                // this arena's previous batch was waited on above).
                unsafe { cudarc::driver::result::memcpy_htod_async(arena + offset, &img.rgb[..len], upload_stream) }
                    .map_err(|e| cuda_err("cuMemcpyHtoDAsync", e).to_string())?;
                uploaded = true;
                Ok(Decoded { offset, roi, stored: (img.width, img.height), route: Route::Cpu })
            });
            out[i] = result.map_err(|e| match why_gpu.get(&i) {
                Some(g) => format!("{g}; the CPU decoder also failed: {e}"),
                None => e,
            });
        }
        if uploaded {
            // decode() returns with every pixel of the arena in place (module doc).
            self.hw_stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
        }
        for r in out.iter() {
            match r {
                Ok(d) if d.route == Route::Hardware => self.stats.hardware += 1,
                Ok(d) if d.route == Route::Cuda => self.stats.cuda += 1,
                Ok(_) => self.stats.cpu += 1,
                Err(_) => self.stats.failed += 1,
            }
        }
        self.cpu_out = cpu_out;
        Ok(arena)
    }

    /// After the augment kernel that reads the arena of the last [`Self::decode`] is enqueued
    /// on `stream`: record that the arena is free once it ran.
    pub fn release_arena(&mut self, stream: &CudaStream) -> Result<(), GpuError> {
        let a = self.next ^ 1;
        self.arena_free[a].record(stream).map_err(driver_err("cuEventRecord"))?;
        self.arena_used[a] = true;
        Ok(())
    }

    /// Route one image from its header (and nvJPEG's hardware check), and the region to decode.
    fn classify(&mut self, bytes: &[u8], p: &AugParams) -> Result<Classified, String> {
        let info = crate::source::jpeg::parse(bytes).ok();
        let cand = gpu_candidate(info.as_ref(), self.plan.max_pixels).map_err(|r| r.to_string())?;
        let Some(info) = info else { return Ok((Route::Cpu, Roi { x: 0, y: 0, w: 0, h: 0 }, (0, 0))) };
        let stored = (info.width, info.height);
        check_params(p, stored)?;
        let mut roi = decode_roi(p, stored.0, stored.1, 16);
        let full = Roi { x: 0, y: 0, w: stored.0, h: stored.1 };
        let use_hw = self.plan.use_hardware;
        let hw_ok = match (&mut self.hw, cand) {
            (Some(hw), Some(true)) if use_hw => {
                hw.parse.parse_header(bytes).is_ok() && {
                    // Ask with the region the engine would decode (the decode pass sets the
                    // params for real); when it refuses the region, ask for the whole image.
                    let pr = &mut hw.params[0];
                    let mut ask = |r: Option<Roi>| {
                        pr.set_output_format(RGBI).is_ok()
                            && pr.set_roi(r.map(|r| (r.x, r.y, r.w, r.h))).is_ok()
                            && hw.parse.batched_supported(Some(pr)).unwrap_or(false)
                    };
                    (roi != full && ask(Some(roi))) || (ask(None) && {
                        roi = full;
                        true
                    })
                }
            }
            _ => false,
        };
        let route = match route(cand, cand.and(Some(hw_ok))) {
            Route::Cuda if !self.plan.use_cuda => Route::Cpu,
            r => r,
        };
        Ok((route, roi, stored))
    }

    fn launch_canaries(&self, name: &'static str, arena: u64, count: usize, check: bool) -> Result<(), GpuError> {
        let f = self.gpu.kernels()?.function(name)?;
        let mut b = self.hw_stream.launch_builder(&f);
        let (targets, _t) = self.targets_dev.device_ptr(&self.hw_stream);
        let (intact, _i) = self.intact_dev.device_ptr(&self.hw_stream);
        b.arg(&arena).arg(&targets);
        if check {
            b.arg(&intact);
        }
        let cfg = LaunchConfig { grid_dim: (count as u32, 1, 1), block_dim: (CANARIES, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: (arena, targets[, intact]) is the kernels' parameter list; every target lies
        // inside the arena (placed by the cursor) and `count` targets were uploaded.
        unsafe { launch(&mut b, name, cfg) }
    }

    /// The hardware route, in calls of `per_call` images on `hw_stream`, two states in turn.
    fn decode_hardware(
        &mut self,
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        arena: u64,
        out: &[Result<Decoded, String>],
        failed: &mut Vec<(usize, String)>,
    ) -> Result<(), GpuError> {
        let hw = self.hw.as_mut().expect("hardware route only with an engine");
        let mut at = 0;
        for (call, size) in hw_calls(list.len(), hw.unit, hw.per_call).into_iter().enumerate() {
            let idx = &list[at..at + size];
            at += size;
            let s = call % 2;
            hw.state_done[s].synchronize().map_err(driver_err("cuEventSynchronize"))?;
            let mut data = Vec::with_capacity(size);
            let mut lens = Vec::with_capacity(size);
            let mut dests = Vec::with_capacity(size);
            let mut params = Vec::with_capacity(size);
            for (k, &i) in idx.iter().enumerate() {
                let d = out[i].as_ref().expect("placed");
                let pr = &mut hw.params[at - size + k];
                pr.set_output_format(RGBI)?;
                let whole = (d.roi.x, d.roi.y, d.roi.w, d.roi.h) == (0, 0, d.stored.0, d.stored.1);
                pr.set_roi((!whole).then_some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)))?;
                data.push(jobs[i].0.as_ptr());
                lens.push(jobs[i].0.len());
                let mut img = nvjpegImage_t::default();
                img.channel[0] = (arena + d.offset) as *mut u8;
                img.pitch[0] = 3 * d.roi.w as usize;
                dests.push(img);
                params.push(nv_ptr(pr));
            }
            let st = &mut hw.states[s];
            let r = st.batched_initialize(size, 1, RGBI).and_then(|()| {
                // SAFETY: `size` inputs (pinned staging bytes alive until decode returns and
                // the done event is waited), `size` destinations inside the arena each sized
                // for its ROI in RGBI, `size` live params; the stream is ours.
                unsafe {
                    nvr::decode_batched_ex(
                        hw.handle.lib(),
                        hw.handle.raw(),
                        st.raw(),
                        data.as_ptr(),
                        lens.as_ptr(),
                        dests.as_mut_ptr(),
                        params.as_mut_ptr(),
                        self.hw_stream.cu_stream() as _,
                    )
                }
            });
            hw.state_done[s].record(&self.hw_stream).map_err(driver_err("cuEventRecord"))?;
            if let Err(e) = r {
                // One bad image fails the whole call: every image of it goes to the CPU.
                failed.extend(idx.iter().map(|&i| (i, format!("hardware decode call failed: {e}"))));
            }
        }
        Ok(())
    }

    /// One image through the CUDA decoders' decoupled phases on `cuda_stream`.
    fn decode_cuda(&mut self, bytes: &[u8], d: &Decoded, arena: u64) -> Result<(), GpuError> {
        let turn = self.cuda.turn;
        self.cuda.turn ^= 1;
        let stream = self.cuda_stream.cu_stream() as _;
        for (dec, slots) in &mut self.cuda.decoders {
            let slot = &mut slots[turn];
            slot.done.synchronize().map_err(driver_err("cuEventSynchronize"))?;
            slot.stream.parse(bytes)?;
            let whole = (d.roi.x, d.roi.y, d.roi.w, d.roi.h) == (0, 0, d.stored.0, d.stored.1);
            slot.params.set_roi((!whole).then_some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)))?;
            if !dec.supports(&slot.stream, &slot.params)? {
                continue;
            }
            let mut img = nvjpegImage_t::default();
            img.channel[0] = (arena + d.offset) as *mut u8;
            img.pitch[0] = 3 * d.roi.w as usize;
            dec.decode_host(&mut slot.state, &slot.params, &slot.stream)?;
            // SAFETY: our stream; the state's pinned and device buffers are this slot's, and
            // the slot's previous copy finished (`done` was waited on above).
            let queued = unsafe { dec.transfer_to_device(&mut slot.state, &slot.stream, stream) };
            // SAFETY: our stream; `img` points inside the arena at a region sized for this
            // ROI in RGBI, which stays allocated (the decoder owns the arenas).
            let decoded = queued.and_then(|()| unsafe { dec.decode_device(&mut slot.state, &mut img, stream) });
            // Record whatever the decode said: once the async copy out of this slot's pinned
            // buffer is queued, the next use of the slot must wait for it, or the host rewrites
            // the buffer while the DMA may still read it.
            slot.done.record(&self.cuda_stream).map_err(driver_err("cuEventRecord"))?;
            decoded?;
            return Ok(());
        }
        Err(GpuError::Nvjpeg {
            call: "nvjpegDecoderJpegSupported",
            status: 4,
            message: "no CUDA decoder takes this image".into(),
        })
    }
}

/// Image size the hardware decoder's buffers are reserved for: the index's largest, scaled
/// down (aspect kept) so `per_call` such images take no more than one decode arena — one huge
/// image in the index must not reserve gigabytes per call slot.
pub fn prealloc_dims(max_dims: (u32, u32), per_call: usize, arena_bytes: u64) -> (u32, u32) {
    let (w, h) = (max_dims.0.max(1) as f64, max_dims.1.max(1) as f64);
    let budget = arena_bytes as f64 / (3.0 * per_call.max(1) as f64);
    let k = (budget / (w * h)).sqrt().min(1.0);
    (((w * k) as u32).max(1), ((h * k) as u32).max(1))
}

fn arena_full(bytes: u64) -> String {
    format!("the batch's decoded images do not fit the {bytes}-byte decode arena sized from the index (did files change since indexing?)")
}

/// The params were drawn for the header the index saw; refuse them if the image says
/// otherwise (the kernel would read outside it).
fn check_params(p: &AugParams, stored: (u32, u32)) -> Result<(), String> {
    let code = crate::augment::host::params_check(p, stored.0 as i32, stored.1 as i32);
    if code != 0 {
        return Err(crate::augment::host::params_problem(code, p, stored.0 as i32, stored.1 as i32));
    }
    Ok(())
}

type CpuResult = (usize, Result<DecodedImage, String>);

/// A route, the region to decode and the stored size.
type Classified = (Route, Roi, (u32, u32));

/// Decode `list` with libjpeg-turbo (`backend::cpu::decode`) on up to `threads` scoped
/// workers, each image only in the region `out[i]` asks for (the whole image when its header
/// was unreadable); each worker returns its results.
fn cpu_decode_workers<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    list: &'env [usize],
    jobs: &'env [(&'env [u8], AugParams)],
    out: &'env [Result<Decoded, String>],
    max_pixels: u64,
    threads: usize,
) -> Vec<std::thread::ScopedJoinHandle<'scope, Vec<CpuResult>>> {
    if list.is_empty() {
        return Vec::new();
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (0..threads.min(list.len()))
        .map(|_| {
            let next = next.clone();
            scope.spawn(move || {
                let mut done = Vec::new();
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = list.get(k) else { break };
                    let region = match &out[i] {
                        Ok(d) if d.roi.w > 0 && d.roi.h > 0 => Some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)),
                        _ => None,
                    };
                    let mut img = DecodedImage::default();
                    let r = decode_rgb_region(jobs[i].0, max_pixels, region, &mut img).map(|()| img).map_err(|e| e.to_string());
                    done.push((i, r));
                }
                done
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(coding: Coding, subsampling: Subsampling, components: u8) -> JpegInfo {
        JpegInfo {
            width: 500,
            height: 375,
            components,
            precision: 8,
            sof: 0xc0,
            coding,
            sampling: [(2, 2), (1, 1), (1, 1), (0, 0)],
            subsampling,
            adobe_transform: None,
            orientation: 1,
            jfif: true,
            icc: false,
            restart_interval: 0,
            dnl: false,
        }
    }

    fn route_of(i: &JpegInfo, hw: Option<bool>) -> Route {
        route(gpu_candidate(Some(i), 100_000_000).unwrap(), hw)
    }

    #[test]
    fn routing_table() {
        use Coding::*;
        use Subsampling as S;
        // (header, nvJPEG's hardware answer, expected)
        let cases = [
            (info(Baseline, S::S420, 3), Some(true), Route::Hardware),
            (info(Baseline, S::S420, 3), Some(false), Route::Cuda), // engine refused
            (info(Baseline, S::S420, 3), None, Route::Cuda),        // no engine on this GPU
            (info(Baseline, S::Gray, 1), Some(true), Route::Hardware),
            (info(Baseline, S::S440, 3), Some(true), Route::Hardware),
            (info(Baseline, S::S411, 3), Some(true), Route::Cuda), // engine lacks 4:1:1
            (info(Baseline, S::S410, 3), Some(true), Route::Cuda),
            (info(Progressive, S::S420, 3), Some(true), Route::Cuda),
            (info(Extended, S::S444, 3), None, Route::Cuda),
            (info(Lossless, S::S444, 3), None, Route::Cpu),
            (info(ArithmeticSequential, S::S420, 3), None, Route::Cpu),
            (info(Hierarchical, S::S420, 3), None, Route::Cpu),
            (info(Baseline, S::Other, 3), Some(true), Route::Cpu), // odd sampling factors
            (info(Baseline, S::Other, 4), Some(true), Route::Cpu), // CMYK
        ];
        for (i, hw, want) in cases {
            assert_eq!(route_of(&i, hw), want, "{:?} {:?} hw={hw:?}", i.coding, i.subsampling);
        }
        let mut rgb = info(Baseline, S::S444, 3);
        rgb.adobe_transform = Some(0);
        assert_eq!(route_of(&rgb, Some(true)), Route::Cpu);
        rgb.adobe_transform = Some(1);
        assert_eq!(route_of(&rgb, Some(true)), Route::Hardware);
        let mut p12 = info(Extended, S::S420, 3);
        p12.precision = 12;
        assert_eq!(route_of(&p12, None), Route::Cpu);
        let mut dnl = info(Baseline, S::S420, 3);
        dnl.dnl = true;
        assert_eq!(route_of(&dnl, Some(true)), Route::Cpu);
        assert_eq!(route(gpu_candidate(None, 100).unwrap(), Some(true)), Route::Cpu);
    }

    #[test]
    fn routing_rejects_bombs_and_empty_headers_before_any_decoder() {
        let mut f = info(Coding::Baseline, Subsampling::S420, 3);
        (f.width, f.height) = (64250, 64250);
        let e = gpu_candidate(Some(&f), 100_000_000).unwrap_err();
        assert_eq!(e, Reject::TooLarge { width: 64250, height: 64250, max_pixels: 100_000_000 });
        assert!(e.to_string().contains("64250x64250 = 4128062500 pixels"), "{e}");
        f.width = 0;
        assert_eq!(gpu_candidate(Some(&f), 100), Err(Reject::Empty));
    }

    #[test]
    fn hw_calls_are_multiples_of_the_engine_width() {
        // Shapes like A100 (5 decode cores) and H100 (7 NVJPG engines).
        assert_eq!(hw_calls(0, 5, 64), Vec::<usize>::new());
        assert_eq!(hw_calls(256, 5, 64), [vec![60; 4], vec![16]].concat());
        assert_eq!(hw_calls(256, 7, 256), vec![252, 4]);
        assert_eq!(hw_calls(3, 7, 256), vec![3]);
        assert_eq!(hw_calls(20, 8, 4), vec![8, 8, 4]); // cap below one unit: one unit per call
        for (n, unit, cap) in [(1000usize, 6usize, 100usize), (17, 1, 1), (255, 16, 64)] {
            let v = hw_calls(n, unit, cap);
            assert_eq!(v.iter().sum::<usize>(), n);
            assert!(v[..v.len() - 1].iter().all(|&c| c % unit == 0 && c == v[0]));
        }
    }

    /// Naive orientation: build the oriented picture by explicit flips/transposes of a stored
    /// grid of ids and compare with the point map.
    #[test]
    fn orientation_point_map_matches_explicit_transforms() {
        let (sw, sh) = (5u32, 3u32);
        let stored: Vec<Vec<u32>> = (0..sh).map(|y| (0..sw).map(|x| y * sw + x).collect()).collect();
        let flip_h = |g: &Vec<Vec<u32>>| g.iter().map(|r| r.iter().rev().copied().collect()).collect::<Vec<Vec<u32>>>();
        let flip_v = |g: &Vec<Vec<u32>>| g.iter().rev().cloned().collect::<Vec<Vec<u32>>>();
        let transpose = |g: &Vec<Vec<u32>>| {
            (0..g[0].len()).map(|x| (0..g.len()).map(|y| g[y][x]).collect()).collect::<Vec<Vec<u32>>>()
        };
        let oriented = |o: u32| match o {
            1 => stored.clone(),
            2 => flip_h(&stored),
            3 => flip_v(&flip_h(&stored)),
            4 => flip_v(&stored),
            5 => transpose(&stored),
            6 => flip_h(&transpose(&stored)), // rotate 90° clockwise
            7 => flip_v(&flip_h(&transpose(&stored))),
            8 => flip_v(&transpose(&stored)), // rotate 90° counter-clockwise
            _ => unreachable!(),
        };
        for o in 1..=8 {
            let g = oriented(o);
            for (y, row) in g.iter().enumerate() {
                for (x, &id) in row.iter().enumerate() {
                    let (px, py) = oriented_to_stored(x as u32, y as u32, sw, sh, o);
                    assert_eq!(py * sw + px, id, "orientation {o} at ({x},{y})");
                }
            }
        }
    }

    /// Naive taps (Pillow `precompute_coeffs` bounds for the antialiased case, the two/four
    /// neighbours for the plain case) must lie inside [`tap_span`].
    fn naive_taps(in_size: u32, out_size: u32, i: u32, filter: u32, antialias: bool) -> (u32, u32) {
        let scale = in_size as f64 / out_size as f64;
        let a = if filter == FILTER_BICUBIC { 2.0 } else { 1.0 };
        let c = (i as f64 + 0.5) * scale;
        if antialias {
            let support = a * scale.max(1.0);
            let lo = ((c - support + 0.5) as i64).max(0) as u32;
            let hi = ((c + support + 0.5) as i64).min(in_size as i64) as u32;
            (lo, hi)
        } else {
            let x = c - 0.5;
            let lo = (x.floor() as i64 - (a as i64 - 1)).clamp(0, in_size as i64 - 1) as u32;
            let hi = (x.floor() as i64 + a as i64 + 1).clamp(1, in_size as i64) as u32;
            (lo, hi)
        }
    }

    #[test]
    fn roi_contains_every_tap_for_every_orientation() {
        let mut rng = crate::augment::params::SampleRng::new(3, 0, 0, 9);
        for _ in 0..4000 {
            let sw = 1 + rng.below(700) as u32;
            let sh = 1 + rng.below(700) as u32;
            let o = 1 + rng.below(8) as u32;
            let (w, h) = if o >= 5 { (sh, sw) } else { (sw, sh) };
            let cw = 1 + rng.below(w as u64) as u32;
            let ch = 1 + rng.below(h as u64) as u32;
            let cx = rng.below((w - cw + 1) as u64) as u32;
            let cy = rng.below((h - ch + 1) as u64) as u32;
            let rw = 1 + rng.below(400) as u32;
            let rh = 1 + rng.below(400) as u32;
            let ow = 1 + rng.below(rw as u64) as u32;
            let oh = 1 + rng.below(rh as u64) as u32;
            let wx = rng.below((rw - ow + 1) as u64) as u32;
            let wy = rng.below((rh - oh + 1) as u64) as u32;
            let filter = rng.below(2) as u32;
            let aa = rng.below(2) == 1;
            let p = AugParams {
                src_w: w as i32,
                src_h: h as i32,
                crop_x: cx as i32,
                crop_y: cy as i32,
                crop_w: cw as i32,
                crop_h: ch as i32,
                resize_w: rw as i32,
                resize_h: rh as i32,
                win_x: wx as i32,
                win_y: wy as i32,
                out_w: ow as i32,
                out_h: oh as i32,
                orientation: o,
                filter,
                antialias: aa as u32,
                ..Default::default()
            };
            let roi = decode_roi(&p, sw, sh, 16);
            assert!(roi.x + roi.w <= sw && roi.y + roi.h <= sh && roi.w > 0 && roi.h > 0, "{roi:?} in {sw}x{sh}");
            assert!(roi.x % 16 == 0 && roi.y % 16 == 0);
            for (ox, oy) in [(wx, wy), (wx + ow - 1, wy + oh - 1), (wx, wy + oh - 1), (wx + ow - 1, wy)] {
                let (x0, x1) = naive_taps(cw, rw, ox, filter, aa);
                let (y0, y1) = naive_taps(ch, rh, oy, filter, aa);
                for (tx, ty) in [(x0, y0), (x1 - 1, y1 - 1), (x0, y1 - 1), (x1 - 1, y0)] {
                    let (sx, sy) = oriented_to_stored(cx + tx, cy + ty, sw, sh, o);
                    assert!(
                        sx >= roi.x && sx < roi.x + roi.w && sy >= roi.y && sy < roi.y + roi.h,
                        "tap ({sx},{sy}) outside {roi:?} for {p:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn roi_of_a_small_crop_is_small() {
        // 500x375, a 100x80 crop resized to 224: the region is the crop plus a filter margin
        // on the 16-pixel grid, far less than the image.
        let p = AugParams {
            src_w: 500,
            src_h: 375,
            crop_x: 200,
            crop_y: 100,
            crop_w: 100,
            crop_h: 80,
            resize_w: 224,
            resize_h: 224,
            out_w: 224,
            out_h: 224,
            orientation: 1,
            antialias: 1,
            ..Default::default()
        };
        let r = decode_roi(&p, 500, 375, 16);
        assert_eq!(r, Roi { x: 192, y: 96, w: 112, h: 96 });
    }

    /// The canary kernels write only inside their target's region: every canary lies on a row
    /// and column of it, spread over every row band when the region is tall enough, and the
    /// kernels agree with [`CANARIES`].
    #[test]
    fn canaries_stay_inside_their_region_and_spread_over_it() {
        // SAFETY: returns a constant.
        assert_eq!(unsafe { canary_ffi::stoke_host_canaries() }, CANARIES);
        for (w, h) in [(1u32, 1u32), (2, 3), (31, 33), (64, 32), (500, 375), (7, 4000), (4000, 7)] {
            let t = DecodeTarget { offset: 4096, width: w, height: h, pitch: 3 * w, pad: 0 };
            let mut rows = std::collections::BTreeSet::new();
            let mut values = std::collections::BTreeSet::new();
            for k in 0..CANARIES {
                let (off, v) = canary_at(&t, k);
                let rel = off - t.offset;
                let (y, x) = (rel / t.pitch as u64, (rel % t.pitch as u64) / 3);
                assert!(rel % 3 == 0 && y < h as u64 && x < w as u64, "{w}x{h} canary {k} at ({x},{y})");
                rows.insert(y);
                values.insert(v);
                assert!(v[0] != v[1] && v[1] != v[2] && v[0] != v[2]);
            }
            assert_eq!(rows.len() as u32, CANARIES.min(h), "{w}x{h}: rows {rows:?}");
            assert_eq!(values.len() as u32, CANARIES, "every canary has its own value");
        }
    }

    #[test]
    fn hardware_preallocation_stays_within_one_arena() {
        // ImageNet-like index: 500x375 max, 256 per call, arena for 256 such images: as is.
        let arena = ArenaPlan::new(std::iter::repeat_n(500 * 375, 300), 256, u64::MAX).bytes;
        assert_eq!(prealloc_dims((500, 375), 256, arena), (500, 375));
        // One 20000x15000 image in the index: scaled down, aspect kept, budget respected.
        let (w, h) = prealloc_dims((20000, 15000), 256, arena);
        assert!((w as u64 * h as u64 * 3 * 256) <= arena && w >= 490 && (w as f64 / h as f64 - 4.0 / 3.0).abs() < 0.01, "{w}x{h}");
    }

    #[test]
    fn arena_fits_any_batch_of_the_index_and_refuses_overflow() {
        let pixels = [500u64 * 375, 375 * 500, 64 * 64, 1000 * 1000, 1];
        let plan = ArenaPlan::new(pixels, 2, u64::MAX);
        assert_eq!(plan.bytes, decoded_bytes(1000, 1000) + decoded_bytes(500, 375));
        let mut c = ArenaCursor::new(plan.bytes);
        assert_eq!(c.place(1000, 1000), Some(0));
        assert_eq!(c.place(375, 500), Some(decoded_bytes(1000, 1000)));
        assert_eq!(c.place(1, 1), None, "full");
        c.reset();
        assert_eq!(c.place(1, 1), Some(0));
        assert_eq!(c.place(1, 1), Some(ARENA_ALIGN));
        // The guard caps what the index can ask for.
        assert_eq!(ArenaPlan::new([u64::MAX / 8], 1, 100).bytes, ARENA_ALIGN * 2);
    }

    #[test]
    fn cpu_retries_of_a_full_arena_reuse_the_failed_gpu_places() {
        // A batch of four same-size images fills its arena exactly (the index's worst case).
        let plan = ArenaPlan::new(std::iter::repeat_n(500 * 375, 10), 4, u64::MAX);
        let one = decoded_bytes(500, 375);
        assert_eq!(plan.bytes, 4 * one);
        let mut c = ArenaCursor::new(plan.bytes);
        let places: Vec<u64> = (0..4).map(|_| c.place(500, 375).expect("fits")).collect();
        assert_eq!(places, [0, one, 2 * one, 3 * one]);
        // The hardware call holding images 1 and 2 failed: both are decoded on the CPU and
        // must land where their GPU decodes would have (a fresh place no longer exists).
        assert_eq!(c.place(500, 375), None, "no room for a second place");
        assert_eq!(c.place_or_reuse(Some((places[1], one)), 500, 375), Some(one));
        assert_eq!(c.place_or_reuse(Some((places[2], one)), 496, 368), Some(2 * one), "a smaller region fits");
        // A region larger than the old place needs a new one (none left here)...
        assert_eq!(c.place_or_reuse(Some((places[3], one)), 512, 384), None);
        // ...and a CPU-routed image (no earlier place) takes one from the cursor.
        let mut c = ArenaCursor::new(plan.bytes);
        assert_eq!(c.place_or_reuse(None, 500, 375), Some(0));
        assert_eq!(c.place_or_reuse(Some((0, one)), 512, 384), Some(one));
    }
}
