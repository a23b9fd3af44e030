//! nvJPEG 13.0, the functions stoke declares, with each backend's documented behaviour as far
//! as NVIDIA's documentation states it. Decoding is libjpeg-turbo's, with interpolated
//! ("fancy") chroma upsampling when the handle was created with
//! `NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION`, replication otherwise.
//!
//! - **Hardware backend** (`NVJPEG_BACKEND_HARDWARE`): baseline and extended sequential
//!   Huffman JPEGs with 1 or 3 components only (no progressive, lossless, arithmetic, 12-bit or
//!   CMYK), as `nvjpegDecodeBatchedSupported(Ex)` answers (0 = supported). A batched decode
//!   writes its outputs **when it is called**, without waiting for earlier work on its stream
//!   (the hazard torchcodec PR #1634 describes): a kernel still queued on that stream that
//!   touches the same bytes is a hazard. `nvjpegGetHardwareDecoderInfo` reports
//!   `STOKE_SIM_HW_ENGINES` × `STOKE_SIM_HW_CORES`; with 0 engines ("hardware decoder not
//!   available") every hardware decode fails. Its bitstreams in pinned memory are read **on
//!   the stream** (a read the host must not overwrite before it knows the stream passed it). Buffers for images larger than
//!   `nvjpegDecodeBatchedPreAllocate` reserved are allocated during the decode, as nvJPEG does.
//!   `NVJPEG_BACKEND_HARDWARE_DEVICE` ("supports input bitstream on device memory. Can be used
//!   only with batched decode APIs", nvJPEG docs) is the same engine with each bitstream in a
//!   live device allocation (a host pointer there is a finding, as a device pointer is for
//!   the host variant), read **when it is called**, like its outputs: a copy into a bitstream
//!   still queued on a stream is a hazard. `STOKE_SIM_HW_DEVICE_ABSENT=1` makes creating such
//!   a handle fail (`NVJPEG_STATUS_ARCH_MISMATCH`), as an nvJPEG without that variant would.
//! - **Decoupled API** (`nvjpegDecodeJpegHost` → `TransferToDevice` → `DecodeJpegDevice`): the
//!   host stage decodes into the state's pinned buffer (a host write at call time), the
//!   transfer copies it into the device buffer and the device stage writes the output, both on
//!   the stream. A pinned or device buffer too small for an image grows (a new allocation),
//!   as nvJPEG's do, unless resized first (`nvjpegBuffer*Resize`). `GPU_HYBRID` takes
//!   sequential JPEGs only, `HYBRID` progressive too.
//! - **Batched GPU-assisted hybrid** (`nvjpegDecodeBatched` on an `NVJPEG_BACKEND_GPU_HYBRID`
//!   handle): nvjpeg.h says this backend's batched decode "will use GPU decoding for baseline
//!   JPEG bitstreams with interleaved scan when batch size is bigger than 100"; the rest of a
//!   call is decoded as the hybrid backend does (Huffman on the host). The stand-in decodes
//!   what `HYBRID` takes, parses and decodes every image **at the call** (the host's part; an
//!   image it cannot decode fails the whole call), and writes the outputs **on the stream**
//!   (asynchronous to the host, as the docs say), whole images only: `nvjpegDecodeBatchedEx`
//!   (ROI) is documented for the hardware and lossless backends only and is a finding here.
//!   Its buffers are the state's, grown to a call's needs (coefficients of every image plus
//!   the bitstreams, device; the bitstreams, pinned) and kept: `nvjpegDecodeBatchedPreAllocate`
//!   is documented as a no-op for backends other than the hardware one. Calling
//!   `nvjpegDecodeBatchedInitialize` while the state's last batched decode is still queued
//!   ("any currently running batched decoding should be finished", nvJPEG docs) and decoding
//!   again after a failed call without initializing ("if the batch decoding fails, call
//!   nvjpegDecodeBatchedInitialize() again") are findings. `stoke_sim_stats` counts the images
//!   decoded on each path (`gpu_hybrid_batched.gpu_huffman` / `host_huffman`).
//! - Output `NVJPEG_OUTPUT_RGBI` only (what stoke uses); an ROI must lie inside the image; every
//!   destination row must lie inside a live device allocation.
//!
//! Fault injection for the error paths: `STOKE_SIM_FAIL=func[@hw|@hwdev],...` makes every call
//! of `func` fail (`@hw`: only for objects of a hardware-backend handle, either variant;
//! `@hwdev`: of an `NVJPEG_BACKEND_HARDWARE_DEVICE` handle) with
//! `NVJPEG_STATUS_ALLOCATOR_FAILURE`; `STOKE_SIM_HW_ABSENT=1` makes creating a hardware handle
//! fail as on a GPU without the engine (`NVJPEG_STATUS_ARCH_MISMATCH`). A failure at a chosen
//! use ([`crate::faults`]: `stoke_sim_inject`, `STOKE_SIM_FAULTS`) of the object-creating calls,
//! the batched decode, both parses and the three decoupled stages fails the call before it does
//! anything (`NVJPEG_STATUS_EXECUTION_FAILED`; the creating calls as above).

#![allow(non_snake_case)]

use crate::dev::{self, Access};
use crate::mem::{self, Kind, Want};
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use turbojpeg_sys as tj;

type Status = c_int;
const SUCCESS: Status = 0;
const NOT_INITIALIZED: Status = 1;
const INVALID_PARAMETER: Status = 2;
const BAD_JPEG: Status = 3;
const JPEG_NOT_SUPPORTED: Status = 4;
const ALLOCATOR_FAILURE: Status = 5;
const EXECUTION_FAILED: Status = 6;
const ARCH_MISMATCH: Status = 7;
const IMPLEMENTATION_NOT_SUPPORTED: Status = 9;

const BACKEND_DEFAULT: c_int = 0;
const BACKEND_HYBRID: c_int = 1;
const BACKEND_GPU_HYBRID: c_int = 2;
const BACKEND_HARDWARE: c_int = 3;
const BACKEND_HARDWARE_DEVICE: c_int = 5;
const OUTPUT_RGBI: c_int = 5;
const FLAG_INTERPOLATE: c_uint = 1 << 5;

const CSS_444: c_int = 0;
const CSS_422: c_int = 1;
const CSS_420: c_int = 2;
const CSS_440: c_int = 3;
const CSS_411: c_int = 4;
const CSS_GRAY: c_int = 6;
const CSS_UNKNOWN: c_int = -1;

fn failing(func: &str, backend: c_int) -> bool {
    if crate::faults::inject(func) {
        return true;
    }
    let Ok(list) = std::env::var("STOKE_SIM_FAIL") else { return false };
    list.split(',').map(str::trim).any(|e| {
        if let Some(f) = e.strip_suffix("@hwdev") {
            backend == BACKEND_HARDWARE_DEVICE && f == func
        } else if let Some(f) = e.strip_suffix("@hw") {
            is_hw(backend) && f == func
        } else {
            e == func
        }
    })
}

fn finding(msg: String) -> Status {
    crate::report("nvjpeg", msg);
    INVALID_PARAMETER
}

// ---- objects -----------------------------------------------------------------------------

struct Handle {
    backend: c_int,
    interpolate: bool,
    /// `nvjpegCreateExV2`'s allocators: every buffer of the handle's states (and of buffers
    /// made with the V2 calls) is made and freed through them.
    dev_alloc: Option<Alloc>,
    pinned_alloc: Option<Alloc>,
}

/// A caller's V2 allocator (`nvjpegDevAllocatorV2_t` / `nvjpegPinnedAllocatorV2_t`: the same
/// layout): `malloc(ctx, &ptr, size, stream)`, `free(ctx, ptr, size, stream)`, 0 for success.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Alloc {
    malloc: Option<unsafe extern "C" fn(*mut c_void, *mut *mut c_void, usize, *mut c_void) -> c_int>,
    free: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void) -> c_int>,
    ctx: *mut c_void,
}

// SAFETY: the allocator's functions are the caller's to call from any thread (nvJPEG's contract
// for them); `ctx` is only passed back.
unsafe impl Send for Alloc {}
// SAFETY: as above.
unsafe impl Sync for Alloc {}

impl Alloc {
    /// The allocator `a` points to; `None` for null, a finding for one without both functions.
    fn read(a: *mut c_void, what: &str) -> Result<Option<Self>, Status> {
        if a.is_null() {
            return Ok(None);
        }
        // SAFETY: the caller passes a valid V2 allocator struct (nvJPEG's contract).
        let v = unsafe { *(a as *const Alloc) };
        if v.malloc.is_none() || v.free.is_none() {
            return Err(finding(format!("{what}: an allocator without both functions")));
        }
        Ok(Some(v))
    }
}

/// Bytes of nvJPEG's own buffers live now, device and pinned (`stoke_sim_stats`'s
/// `nvjpeg_buffers`), and how many of them the caller's allocators made.
static BUFFER_BYTES: [std::sync::atomic::AtomicU64; 2] = [std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0)];
static CALLER_ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) fn buffers_json() -> String {
    use std::sync::atomic::Ordering::Relaxed;
    format!(
        "\"nvjpeg_buffers\":{{\"device_bytes\":{},\"pinned_bytes\":{},\"caller_allocations\":{}}}",
        BUFFER_BYTES[0].load(Relaxed),
        BUFFER_BYTES[1].load(Relaxed),
        CALLER_ALLOCATIONS.load(Relaxed)
    )
}

impl Handle {
    /// The hardware engine's backend, with its bitstreams in host or device memory.
    fn hw(&self) -> bool {
        is_hw(self.backend)
    }
}

/// `NVJPEG_BACKEND_HARDWARE` or `NVJPEG_BACKEND_HARDWARE_DEVICE`.
fn is_hw(backend: c_int) -> bool {
    matches!(backend, BACKEND_HARDWARE | BACKEND_HARDWARE_DEVICE)
}

/// A buffer of nvJPEG's own: a tracked allocation that grows (reallocates) when too small,
/// through the caller's allocator when it gave one.
struct Buffer {
    kind: Kind,
    ptr: usize,
    len: usize,
    alloc: Option<Alloc>,
}

impl Buffer {
    fn new(kind: Kind, alloc: Option<Alloc>) -> Self {
        Self { kind, ptr: 0, len: 0, alloc }
    }

    fn counter(&self) -> &'static std::sync::atomic::AtomicU64 {
        &BUFFER_BYTES[usize::from(matches!(self.kind, Kind::Pinned))]
    }

    fn ensure(&mut self, need: usize, call: &'static str) -> Result<(), Status> {
        use std::sync::atomic::Ordering::Relaxed;
        if need <= self.len {
            return Ok(());
        }
        let p = match self.alloc {
            Some(a) => {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: the caller's allocator (checked to have both functions when given).
                if unsafe { (a.malloc.expect("checked"))(a.ctx, &mut p, need, std::ptr::null_mut()) } != 0 || p.is_null() {
                    return Err(ALLOCATOR_FAILURE);
                }
                // What it handed out must be a live allocation of the kind asked for, as large.
                if !mem::find(p as usize).is_some_and(|m| m.kind == self.kind && m.base == p as usize && m.len >= need) {
                    crate::report(
                        "nvjpeg",
                        format!(
                            "{call}: the caller's allocator returned {p:p} for {need} bytes of {} memory, which is not a live allocation of that kind and size",
                            self.kind.name()
                        ),
                    );
                }
                CALLER_ALLOCATIONS.fetch_add(1, Relaxed);
                p as usize
            }
            None => mem::alloc(self.kind, need, dev::primary().handle(), call).map_err(|()| ALLOCATOR_FAILURE)?,
        };
        self.free_now(call);
        self.ptr = p;
        self.len = need;
        self.counter().fetch_add(need as u64, Relaxed);
        Ok(())
    }

    /// Give the allocation back (through the caller's allocator when it came from one).
    fn free_now(&mut self, call: &'static str) {
        if self.ptr == 0 {
            return;
        }
        match self.alloc {
            // SAFETY: the caller's allocator, given back what it handed out.
            Some(a) => unsafe {
                (a.free.expect("checked"))(a.ctx, self.ptr as *mut c_void, self.len, std::ptr::null_mut());
            },
            None => {
                let _ = mem::free(self.ptr, self.kind, call);
            }
        }
        self.counter().fetch_sub(self.len as u64, std::sync::atomic::Ordering::Relaxed);
        self.ptr = 0;
        self.len = 0;
    }

    fn release(&mut self) {
        self.free_now("nvJPEG buffer destroy");
    }
}

struct State {
    /// `nvjpegDecodeBatchedInitialize`'s batch size and format; cleared by a failed batched
    /// decode (the docs ask for a new initialization then).
    batch: Option<(c_int, c_int)>,
    /// The last batched GPU-hybrid decode's op: its stream and sequence number.
    batched_pending: Option<(Arc<dev::Stream>, u64)>,
    /// GPU-hybrid batched: the pinned copy of a call's bitstreams (grown, kept).
    batch_pinned: Buffer,
    pinned: *mut Mutex<Buffer>,
    device: *mut Mutex<Buffer>,
    /// Hardware: reserved by PreAllocate or grown by decodes.
    hw_buffer: Buffer,
    /// The host stage's result, waiting for the device stage.
    host: Option<Arc<Decoded>>,
}

struct Params {
    format: c_int,
    roi: (c_int, c_int, c_int, c_int),
    allow_cmyk: bool,
}

struct Stream {
    data: Vec<u8>,
    info: Option<Info>,
}

#[derive(Clone, Copy, Debug)]
struct Info {
    w: u32,
    h: u32,
    comps: u32,
    css: c_int,
    sof: u8,
    precision: c_int,
    arithmetic: bool,
}

struct Decoded {
    rgb: Vec<u8>,
    w: u32,
    h: u32,
}

macro_rules! obj {
    ($p:expr, $t:ty) => {{
        if $p.is_null() {
            return INVALID_PARAMETER;
        }
        // SAFETY: a handle this library created (Box::into_raw) and the caller has not
        // destroyed (the API's contract).
        unsafe { &mut *($p as *mut $t) }
    }};
}

fn new<T>(out: *mut *mut c_void, v: T) -> Status {
    if out.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: a non-null out-pointer (the API's contract).
    unsafe { *out = Box::into_raw(Box::new(v)) as *mut c_void };
    SUCCESS
}

fn destroy<T>(p: *mut c_void) -> Status {
    if p.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: created by `new::<T>` and not destroyed before (the API's contract).
    drop(unsafe { Box::from_raw(p as *mut T) });
    SUCCESS
}

// ---- headers and decoding ----------------------------------------------------------------

/// Offset of the first marker segment after SOI whose marker `want` accepts, walking the
/// segments by their lengths (fill bytes skipped); `None` without SOI, at a byte that is not a
/// marker, or when none is found with its 2-byte length inside `d`.
fn find_segment(d: &[u8], want: impl Fn(u8) -> bool) -> Option<usize> {
    if d.len() < 4 || d[0] != 0xff || d[1] != 0xd8 {
        return None;
    }
    let mut i = 2;
    while i + 4 <= d.len() {
        if d[i] != 0xff {
            return None;
        }
        let m = d[i + 1];
        if m == 0xff {
            i += 1;
            continue;
        }
        if want(m) {
            return Some(i);
        }
        i += 2 + u16::from_be_bytes([d[i + 2], d[i + 3]]) as usize;
    }
    None
}

/// The first SOF marker's type (0xc0 baseline, 0xc1 extended, 0xc2 progressive, 0xc3
/// lossless, ...).
fn sof_marker(d: &[u8]) -> Option<u8> {
    find_segment(d, |m| (0xc0..=0xcf).contains(&m) && m != 0xc4 && m != 0xc8 && m != 0xcc).map(|i| d[i + 1])
}

struct Tj(tj::tjhandle);
impl Drop for Tj {
    fn drop(&mut self) {
        // SAFETY: created by tj3Init below, destroyed once.
        unsafe { tj::tj3Destroy(self.0) };
    }
}

fn tj_new() -> Result<Tj, Status> {
    // SAFETY: plain constructor.
    let h = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as c_int) };
    if h.is_null() {
        return Err(EXECUTION_FAILED);
    }
    Ok(Tj(h))
}

fn parse(d: &[u8]) -> Result<Info, Status> {
    let sof = sof_marker(d).ok_or(BAD_JPEG)?;
    let t = tj_new()?;
    // SAFETY: `d` is readable for its length; the handle is live.
    if unsafe { tj::tj3DecompressHeader(t.0, d.as_ptr(), d.len() as _) } != 0 {
        return Err(BAD_JPEG);
    }
    // SAFETY: getters on a live handle.
    let g = |p: tj::TJPARAM| unsafe { tj::tj3Get(t.0, p as c_int) };
    let cs = g(tj::TJPARAM_TJPARAM_COLORSPACE);
    let comps = match cs as u32 {
        tj::TJCS_TJCS_GRAY => 1,
        tj::TJCS_TJCS_CMYK | tj::TJCS_TJCS_YCCK => 4,
        _ => 3,
    };
    let css = match g(tj::TJPARAM_TJPARAM_SUBSAMP) {
        0 => CSS_444,
        1 => CSS_422,
        2 => CSS_420,
        3 => CSS_GRAY,
        4 => CSS_440,
        5 => CSS_411,
        _ => CSS_UNKNOWN,
    };
    Ok(Info {
        w: g(tj::TJPARAM_TJPARAM_JPEGWIDTH) as u32,
        h: g(tj::TJPARAM_TJPARAM_JPEGHEIGHT) as u32,
        comps,
        css,
        sof,
        precision: g(tj::TJPARAM_TJPARAM_PRECISION),
        arithmetic: g(tj::TJPARAM_TJPARAM_ARITHMETIC) == 1,
    })
}

/// Whether `backend` decodes this JPEG (nvJPEG's documented coverage).
fn supported(backend: c_int, i: &Info, allow_cmyk: bool) -> bool {
    let sequential = matches!(i.sof, 0xc0 | 0xc1);
    let common = i.precision == 8 && !i.arithmetic && (i.comps != 4 || allow_cmyk) && i.css != CSS_UNKNOWN;
    match backend {
        BACKEND_HARDWARE | BACKEND_HARDWARE_DEVICE => common && sequential && i.comps != 4,
        BACKEND_GPU_HYBRID => common && sequential,
        _ => common && (sequential || i.sof == 0xc2),
    }
}

/// The ROI of `p` on a `w × h` image: `(x, y, w, h)`, the whole image for `(0, 0, -1, -1)`.
fn roi_of(p: Option<&Params>, w: u32, h: u32) -> Result<(u32, u32, u32, u32), Status> {
    let Some(p) = p else { return Ok((0, 0, w, h)) };
    let (x, y, rw, rh) = p.roi;
    if (rw, rh) == (-1, -1) && (x, y) == (0, 0) {
        return Ok((0, 0, w, h));
    }
    if x < 0 || y < 0 || rw <= 0 || rh <= 0 || x as u64 + rw as u64 > w as u64 || y as u64 + rh as u64 > h as u64 {
        return Err(INVALID_PARAMETER);
    }
    Ok((x as u32, y as u32, rw as u32, rh as u32))
}

/// Decode `d` to interleaved RGB and cut out `roi`.
fn decode(d: &[u8], info: &Info, roi: (u32, u32, u32, u32), interpolate: bool) -> Result<Decoded, Status> {
    let t = tj_new()?;
    // SAFETY: setters on a live handle; `d` readable.
    unsafe {
        tj::tj3Set(t.0, tj::TJPARAM_TJPARAM_FASTUPSAMPLE as c_int, (!interpolate) as c_int);
        tj::tj3Set(t.0, tj::TJPARAM_TJPARAM_STOPONWARNING as c_int, 1);
        if tj::tj3DecompressHeader(t.0, d.as_ptr(), d.len() as _) != 0 {
            return Err(BAD_JPEG);
        }
    }
    let (w, h) = (info.w as usize, info.h as usize);
    let full = if info.comps == 4 {
        let mut cmyk = vec![0u8; w * h * 4];
        // SAFETY: `cmyk` holds w·h·4 bytes at pitch 4w.
        if unsafe { tj::tj3Decompress8(t.0, d.as_ptr(), d.len() as _, cmyk.as_mut_ptr(), (w * 4) as c_int, tj::TJPF_TJPF_CMYK as c_int) }
            != 0
        {
            return Err(BAD_JPEG);
        }
        // Adobe's inverted CMYK, as libjpeg writes it: R = C·K/255 and so on.
        cmyk.chunks(4).flat_map(|p| [0, 1, 2].map(|c| ((p[c] as u32 * p[3] as u32 + 127) / 255) as u8)).collect()
    } else {
        let mut rgb = vec![0u8; w * h * 3];
        // SAFETY: `rgb` holds w·h·3 bytes at pitch 3w.
        if unsafe { tj::tj3Decompress8(t.0, d.as_ptr(), d.len() as _, rgb.as_mut_ptr(), (w * 3) as c_int, tj::TJPF_TJPF_RGB as c_int) } != 0
        {
            return Err(BAD_JPEG);
        }
        rgb
    };
    let (x, y, rw, rh) = (roi.0 as usize, roi.1 as usize, roi.2 as usize, roi.3 as usize);
    let mut rgb = Vec::with_capacity(rw * rh * 3);
    for r in y..y + rh {
        rgb.extend_from_slice(&full[(r * w + x) * 3..(r * w + x + rw) * 3]);
    }
    Ok(Decoded { rgb, w: rw as u32, h: rh as u32 })
}

/// The destination rows of an RGBI image, checked against live device memory: the accesses.
fn destination(img: &NvImage, w: u32, h: u32, call: &str) -> Result<Vec<Access>, Status> {
    let (p, pitch) = (img.channel[0] as usize, img.pitch[0]);
    if p == 0 || pitch < 3 * w as usize {
        return Err(finding(format!(
            "{call}: RGBI destination {p:#x} with pitch {pitch} for a {w}x{h} image (pitch must be >= {})",
            3 * w
        )));
    }
    let span = pitch * (h as usize - 1) + 3 * w as usize;
    match mem::check(p, span, Want::Device, call, "destination") {
        Ok(Some(a)) => Ok(vec![Access::new(a, p, p + span, true, call.to_string())]),
        Ok(None) => unreachable!(),
        Err(m) => Err(finding(m)),
    }
}

fn write_rows(img: &NvImage, d: &Decoded) {
    let (p, pitch) = (img.channel[0] as usize, img.pitch[0]);
    let row = 3 * d.w as usize;
    for r in 0..d.h as usize {
        // SAFETY: every row was checked inside a live device allocation (`destination`).
        unsafe { std::ptr::copy_nonoverlapping(d.rgb.as_ptr().add(r * row), (p + r * pitch) as *mut u8, row) };
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NvImage {
    channel: [*mut u8; 4],
    pitch: [usize; 4],
}

fn ensure_ctx() {
    // nvJPEG runs on the CUDA runtime, which makes the primary context current on a thread
    // that has none.
    if dev::current_handle() == 0 {
        dev::set_current(dev::primary().handle());
    }
}

// ---- the API -----------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvjpegGetProperty(t: c_int, v: *mut c_int) -> Status {
    if v.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: non-null out-pointer.
    unsafe { *v = [13, 0, 1][t.clamp(0, 2) as usize] };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegCreateEx(
    backend: c_int,
    dev_alloc: *mut c_void,
    pinned_alloc: *mut c_void,
    flags: c_uint,
    h: *mut *mut c_void,
) -> Status {
    if !dev_alloc.is_null() || !pinned_alloc.is_null() {
        return finding("nvjpegCreateEx: V1 allocators are not simulated (stoke passes its own through nvjpegCreateExV2)".into());
    }
    create(backend, flags, None, None, h)
}

fn create(backend: c_int, flags: c_uint, dev_alloc: Option<Alloc>, pinned_alloc: Option<Alloc>, h: *mut *mut c_void) -> Status {
    if !(0..=6).contains(&backend) {
        return INVALID_PARAMETER;
    }
    if is_hw(backend) && std::env::var("STOKE_SIM_HW_ABSENT").is_ok_and(|v| v == "1") {
        return ARCH_MISMATCH;
    }
    // An nvJPEG or GPU without the device-input variant of the engine's backend.
    if backend == BACKEND_HARDWARE_DEVICE && std::env::var("STOKE_SIM_HW_DEVICE_ABSENT").is_ok_and(|v| v == "1") {
        return ARCH_MISMATCH;
    }
    if failing("nvjpegCreateEx", backend) {
        return ALLOCATOR_FAILURE;
    }
    ensure_ctx();
    new(h, Handle { backend, interpolate: flags & FLAG_INTERPOLATE != 0, dev_alloc, pinned_alloc })
}

/// `nvjpegCreateExV2`: the same, with the caller's V2 allocators (null: nvJPEG's own), which
/// every buffer of the handle's states is then made and freed through.
#[no_mangle]
pub unsafe extern "C" fn nvjpegCreateExV2(
    backend: c_int,
    dev_alloc: *mut c_void,
    pinned_alloc: *mut c_void,
    flags: c_uint,
    h: *mut *mut c_void,
) -> Status {
    let (dev, pinned) = match (Alloc::read(dev_alloc, "nvjpegCreateExV2"), Alloc::read(pinned_alloc, "nvjpegCreateExV2")) {
        (Ok(d), Ok(p)) => (d, p),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    create(backend, flags, dev, pinned, h)
}

#[no_mangle]
pub extern "C" fn nvjpegDestroy(h: *mut c_void) -> Status {
    destroy::<Handle>(h)
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegGetHardwareDecoderInfo(h: *mut c_void, engines: *mut c_uint, cores: *mut c_uint) -> Status {
    let hd = obj!(h, Handle);
    if !hd.hw() {
        return INVALID_PARAMETER;
    }
    if engines.is_null() || cores.is_null() {
        return INVALID_PARAMETER;
    }
    let c = crate::config();
    // SAFETY: non-null out-pointers.
    unsafe {
        *engines = c.hw_engines;
        *cores = if c.hw_engines == 0 { 0 } else { c.hw_cores };
    }
    SUCCESS
}

fn new_state(h: *mut c_void, out: *mut *mut c_void, call: &str) -> Status {
    let hd = obj!(h, Handle);
    if failing(call, hd.backend) {
        return ALLOCATOR_FAILURE;
    }
    new(
        out,
        State {
            batch: None,
            pinned: std::ptr::null_mut(),
            device: std::ptr::null_mut(),
            hw_buffer: Buffer::new(Kind::Device, hd.dev_alloc),
            batched_pending: None,
            batch_pinned: Buffer::new(Kind::Pinned, hd.pinned_alloc),
            host: None,
        },
    )
}

#[no_mangle]
pub extern "C" fn nvjpegJpegStateCreate(h: *mut c_void, out: *mut *mut c_void) -> Status {
    new_state(h, out, "nvjpegJpegStateCreate")
}

#[no_mangle]
pub extern "C" fn nvjpegDecoderStateCreate(h: *mut c_void, _dec: *mut c_void, out: *mut *mut c_void) -> Status {
    new_state(h, out, "nvjpegDecoderStateCreate")
}

#[no_mangle]
pub extern "C" fn nvjpegJpegStateDestroy(s: *mut c_void) -> Status {
    let st = obj!(s, State);
    st.hw_buffer.release();
    st.batch_pinned.release();
    destroy::<State>(s)
}

#[no_mangle]
pub unsafe extern "C" fn nvjpegGetImageInfo(
    _h: *mut c_void,
    d: *const u8,
    n: usize,
    comps: *mut c_int,
    css: *mut c_int,
    w: *mut c_int,
    hh: *mut c_int,
) -> Status {
    if d.is_null() {
        return INVALID_PARAMETER;
    }
    // SAFETY: `d` holds `n` bytes (the API's contract).
    let i = match parse(unsafe { std::slice::from_raw_parts(d, n) }) {
        Ok(i) => i,
        Err(e) => return e,
    };
    // SAFETY: out-pointers of the documented sizes (4 widths and heights).
    unsafe {
        *comps = i.comps as c_int;
        *css = i.css;
        for c in 0..4 {
            let sub = c > 0 && c < 3 && i.comps == 3;
            let (dx, dy) = match (sub, i.css) {
                (true, CSS_420) => (2, 2),
                (true, CSS_422) => (2, 1),
                (true, CSS_440) => (1, 2),
                (true, CSS_411) => (4, 1),
                _ => (1, 1),
            };
            let present = (c as u32) < i.comps;
            *w.add(c) = if present { i.w.div_ceil(dx) as c_int } else { 0 };
            *hh.add(c) = if present { i.h.div_ceil(dy) as c_int } else { 0 };
        }
    }
    SUCCESS
}

fn stream_supported(h: *mut c_void, js: *mut c_void, p: Option<&Params>, backend: Option<c_int>, out: *mut c_int) -> Status {
    let hd = obj!(h, Handle);
    let j = obj!(js, Stream);
    if out.is_null() {
        return INVALID_PARAMETER;
    }
    let Some(info) = j.info else { return INVALID_PARAMETER };
    let b = backend.unwrap_or(hd.backend);
    let mut ok = supported(b, &info, p.is_some_and(|p| p.allow_cmyk));
    if let Some(p) = p {
        ok &= p.format == OUTPUT_RGBI && roi_of(Some(p), info.w, info.h).is_ok();
    }
    // SAFETY: non-null out-pointer. 0 means supported.
    unsafe { *out = if ok { 0 } else { 1 } };
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeParamsCreate(h: *mut c_void, out: *mut *mut c_void) -> Status {
    let hd = obj!(h, Handle);
    if failing("nvjpegDecodeParamsCreate", hd.backend) {
        return ALLOCATOR_FAILURE;
    }
    new(out, Params { format: OUTPUT_RGBI, roi: (0, 0, -1, -1), allow_cmyk: false })
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeParamsDestroy(p: *mut c_void) -> Status {
    destroy::<Params>(p)
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeParamsSetOutputFormat(p: *mut c_void, f: c_int) -> Status {
    obj!(p, Params).format = f;
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeParamsSetROI(p: *mut c_void, x: c_int, y: c_int, w: c_int, h: c_int) -> Status {
    obj!(p, Params).roi = (x, y, w, h);
    SUCCESS
}

#[no_mangle]
pub extern "C" fn nvjpegDecodeParamsSetAllowCMYK(p: *mut c_void, v: c_int) -> Status {
    obj!(p, Params).allow_cmyk = v != 0;
    SUCCESS
}

/// Bytes of the intermediate buffers for one image: its DCT coefficients, 2 bytes per sample
/// of every component at that component's resolution (the model of what the decoupled
/// decode's pinned and device buffers hold; nvJPEG does not document its exact sizes).
fn stage_bytes(i: &Info) -> usize {
    let (w, h) = (i.w as usize, i.h as usize);
    let chroma = match i.css {
        CSS_420 => w.div_ceil(2) * h.div_ceil(2),
        CSS_422 => w.div_ceil(2) * h,
        CSS_440 => w * h.div_ceil(2),
        CSS_411 => w.div_ceil(4) * h,
        _ => w * h,
    };
    let samples = match i.comps {
        1 => w * h,
        4 => 4 * w * h,
        _ => w * h + 2 * chroma,
    };
    2 * samples
}

/// The accesses of the first `len` bytes of one of nvJPEG's buffers (none if it holds no allocation).
fn access_of(b: &Buffer, len: usize, write: bool, what: &str) -> Vec<Access> {
    mem::find(b.ptr).map(|a| vec![Access::new(a, b.ptr, b.ptr + len, write, what.to_string())]).unwrap_or_default()
}

/// A decoded image's destination, sent to the stream's thread that writes it.
struct SendImage(NvImage);
// SAFETY: the image holds device addresses checked at the call; the op that writes through
// them runs on the stream's thread while the allocation is live.
unsafe impl Send for SendImage {}

// The batched decodes (hardware and GPU-assisted hybrid) and the decoupled API, each in a file of
// its own; both use the objects, the decoding and the checks above.
mod batched;
mod decoupled;

pub(crate) use batched::stats_json;
