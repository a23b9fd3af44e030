//! JPEG → RGB on the CPU, with libjpeg-turbo 3.1 (the TurboJPEG API, built from the source
//! bundled in `turbojpeg-sys`).
//!
//! Why libjpeg-turbo (measured on `corpus/dev/imagenet_like`, 299 photos, this machine):
//!
//! | decoder | ms/image | vs Pillow (max / mean abs diff) |
//! |---|---|---|
//! | libjpeg-turbo 3.1 (TurboJPEG) | 1.52 | 0 / 0 (bit-exact) |
//! | zune-jpeg 0.5 | 1.69 | 19 / 0.15 |
//! | jpeg-decoder 0.3 | 1.78 (5 files refused) | 5 / 0.09 |
//!
//! It is the fastest, decodes every kind Pillow does (arithmetic coding included), supports
//! decoding only a region (rows and iMCU columns outside it are not transformed) and gives
//! exactly Pillow's pixels, which is what torchvision users train on.
//!
//! Conventions (docs/CONTRACTS.md, "Semantics"):
//! - always 3-channel RGB: grayscale is replicated, CMYK/YCCK converted by libjpeg-turbo
//!   (Adobe-inverted CMYK read as libjpeg-turbo reads it: Pillow's pixels);
//! - chroma upsampling is libjpeg-turbo's default smooth ("fancy") upsampling with the
//!   accurate integer IDCT, bit-exact with Pillow. The CUDA backend creates nvJPEG with its
//!   interpolated-upsampling flag to come as close as nvJPEG allows;
//! - EXIF orientation is *not* applied here: the stored image is returned and the orientation
//!   travels in [`crate::AugParams`], applied by the augment math's inverse mapping;
//! - the decoded-size guard is checked from the header before anything is allocated;
//! - libjpeg-turbo warnings about damaged data are accepted (the image is delivered, as Pillow
//!   does), except a premature end of data, which Pillow also refuses ("image file is
//!   truncated"): that is an error of kind [`DecodeErrorKind::Truncated`].

use crate::codec::ImageFormat;
use std::cell::RefCell;
use std::ffi::CStr;
use turbojpeg_sys as tj;

pub use crate::codec::{DecodeError, DecodeErrorKind, DecodedImage};

// libjpeg-turbo's own SIMD dispatch (its simd/x86_64/jsimd.c): in the static library
// turbojpeg-sys links when it was built with nasm (build.rs sets `stoke_jpeg_simd` then), absent
// otherwise. Not part of the TurboJPEG API, so declared here.
#[cfg(stoke_jpeg_simd)]
extern "C" {
    fn jsimd_can_idct_islow() -> std::os::raw::c_int;
    fn jsimd_can_ycc_rgb() -> std::os::raw::c_int;
}

/// Whether the linked libjpeg-turbo decodes with SIMD (its inverse DCT and colour conversion).
/// `false` when it was built without nasm (about 1.5× slower decoding; `stoke doctor` says so),
/// or when `JSIMD_FORCENONE=1` turns SIMD off. The answer is fixed for the process.
pub fn jpeg_simd() -> bool {
    #[cfg(stoke_jpeg_simd)]
    {
        static SIMD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        // SAFETY: both take no arguments and only read the CPU's features and the environment
        // (OnceLock keeps libjpeg-turbo's unsynchronised first-call initialisation on one
        // thread).
        *SIMD.get_or_init(|| unsafe { jsimd_can_idct_islow() != 0 && jsimd_can_ycc_rgb() != 0 })
    }
    #[cfg(not(stoke_jpeg_simd))]
    false
}

/// What a user is told when [`jpeg_simd`] is false: the cost, and the one command that fixes
/// it in a checkout (scripts/setup.sh installs nasm, then the decoder is rebuilt).
pub const NO_SIMD_ADVICE: &str =
    "libjpeg-turbo runs without SIMD (built without nasm, or JSIMD_FORCENONE=1): JPEG decoding is about 1.5x slower; \
fix: scripts/setup.sh --rebuild-jpeg in the checkout (installs nasm, makes cargo rebuild the decoder), then build or pip install . again";

/// What libjpeg-turbo needs of a JPEG header to decode it (the header facts the index and the
/// routing use come from [`crate::codec::jpeg::parse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct JpegHeader {
    /// Stored width.
    pub width: u32,
    /// Stored height.
    pub height: u32,
    /// Sample precision in bits.
    pub precision: u32,
    /// Width of one iMCU in pixels (regions start on multiples of it), 0 when the chroma
    /// layout is one TurboJPEG does not name (then only full decodes are done).
    pub mcu_width: u32,
    /// Height of one iMCU in pixels (0 as for `mcu_width`).
    pub mcu_height: u32,
    /// Colour components in the frame (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK).
    pub components: u32,
    /// An Adobe APP14 marker is present (4-component data is then stored inverted).
    pub adobe: bool,
}

/// One TurboJPEG instance: a decompressor (one per thread, made afresh for an image that does
/// not define its own tables) or a transformer (one per rewrite). `Drop` destroys it.
struct Handle(tj::tjhandle);

impl Handle {
    fn new() -> Result<Self, DecodeError> {
        Self::open(tj::TJINIT_TJINIT_DECOMPRESS, "decompressor")
    }

    fn open(init: tj::TJINIT, what: &str) -> Result<Self, DecodeError> {
        // SAFETY: tj3Init has no preconditions; a null return is handled.
        let h = unsafe { tj::tj3Init(init as i32) };
        if h.is_null() {
            return Err(DecodeError::new(DecodeErrorKind::Corrupt, format!("could not create a libjpeg-turbo {what}")));
        }
        Ok(Handle(h))
    }

    fn error_text(&self) -> String {
        // SAFETY: the handle is valid; tj3GetErrorStr returns a NUL-terminated string owned by
        // the handle (or a static one), valid until the next call on this handle.
        let s = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.0)) };
        let s = s.to_string_lossy();
        let mut chars = s.chars();
        match chars.next() {
            Some(c) => c.to_lowercase().chain(chars).collect(),
            None => String::new(),
        }
    }

    fn get(&self, param: tj::TJPARAM) -> i32 {
        // SAFETY: valid handle; tj3Get only reads the handle's state.
        unsafe { tj::tj3Get(self.0, param as i32) }
    }

    fn set(&self, param: tj::TJPARAM, value: i32) {
        // SAFETY: valid handle; setting a parameter to a value in its documented range.
        unsafe { tj::tj3Set(self.0, param as i32, value) };
    }

    fn classify(&self, during: &str) -> DecodeError {
        let text = self.error_text();
        let lower = text.to_lowercase();
        // "Premature end of JPEG file" is the data running out (Pillow: "image file is
        // truncated"); "premature end of data segment" is damage inside, a warning.
        let kind = if lower.contains("premature end of jpeg file") || lower.contains("truncated") {
            DecodeErrorKind::Truncated
        } else if lower.contains("not a jpeg") || lower.contains("soi") && lower.contains("not") {
            DecodeErrorKind::UnknownFormat
        } else if lower.contains("unsupported") || lower.contains("not supported") || lower.contains("precision") {
            DecodeErrorKind::Unsupported
        } else if lower.contains("exceeds the limit") || lower.contains("maximum") {
            DecodeErrorKind::TooLarge
        } else {
            DecodeErrorKind::Corrupt
        };
        DecodeError::new(kind, format!("{during}: {text}"))
    }

    fn header(&self, bytes: &[u8]) -> Result<JpegHeader, DecodeError> {
        // Our own marker walk first: libjpeg-turbo's header call "succeeds" on a stream that
        // ends before its frame header and then reports the previous image's size.
        let frame = scan_markers(bytes)?;
        // SAFETY: valid handle; the buffer pointer and length describe `bytes`.
        let rc = unsafe { tj::tj3DecompressHeader(self.0, bytes.as_ptr(), bytes.len() as _) };
        // SAFETY: valid handle.
        if rc != 0 && unsafe { tj::tj3GetErrorCode(self.0) } == tj::TJERR_TJERR_FATAL as i32 {
            let e = self.classify("reading the header");
            // A stream that ends inside its headers is truncated as far as the user cares.
            return Err(if e.kind == DecodeErrorKind::Corrupt && bytes.len() < 1024 {
                DecodeError::new(DecodeErrorKind::Truncated, format!("{} ({} bytes)", e.message, bytes.len()))
            } else {
                e
            });
        }
        let width = self.get(tj::TJPARAM_TJPARAM_JPEGWIDTH);
        let height = self.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT);
        if width <= 0 || height <= 0 || (width as u32, height as u32) != (frame.width, frame.height) {
            return Err(DecodeError::new(
                DecodeErrorKind::Corrupt,
                format!("the frame header says {}x{} but libjpeg-turbo read {width}x{height}", frame.width, frame.height),
            ));
        }
        let subsamp = self.get(tj::TJPARAM_TJPARAM_SUBSAMP);
        // turbojpeg.h's tjMCUWidth (a header-only table): 4:4:4, 4:2:2, 4:2:0, gray, 4:4:0,
        // 4:1:1, 4:4:1.
        const MCU_WIDTH: [u32; 7] = [8, 16, 16, 8, 8, 32, 8];
        const MCU_HEIGHT: [u32; 7] = [8, 8, 16, 8, 16, 8, 32];
        let mcu_width = usize::try_from(subsamp).ok().and_then(|i| MCU_WIDTH.get(i)).copied().unwrap_or(0);
        let mcu_height = usize::try_from(subsamp).ok().and_then(|i| MCU_HEIGHT.get(i)).copied().unwrap_or(0);
        Ok(JpegHeader {
            width: width as u32,
            height: height as u32,
            precision: frame.precision,
            mcu_width,
            mcu_height,
            components: frame.components,
            adobe: frame.adobe,
        })
    }
}

/// What the marker walk finds before the first scan.
struct Frame {
    width: u32,
    height: u32,
    precision: u32,
    components: u32,
    adobe: bool,
}

/// Walk the markers up to the frame header (SOFn): checks the stream starts like a JPEG,
/// reads the size and precision, and notes an Adobe APP14 marker. Errors name the offset.
fn scan_markers(b: &[u8]) -> Result<Frame, DecodeError> {
    if b.len() < 4 || b[0] != 0xFF || b[1] != 0xD8 {
        let head: Vec<String> = b.iter().take(4).map(|x| format!("{x:02x}")).collect();
        return Err(DecodeError::new(
            DecodeErrorKind::UnknownFormat,
            format!("not a jpeg: expected the start-of-image marker ff d8, found [{}] ({} bytes)", head.join(" "), b.len()),
        ));
    }
    let truncated = |at: usize| {
        DecodeError::new(DecodeErrorKind::Truncated, format!("the stream ends at byte {at} of {} before the frame header", b.len()))
    };
    let mut i = 2;
    let mut adobe = false;
    loop {
        if i >= b.len() {
            return Err(truncated(i));
        }
        if b[i] != 0xFF {
            // Junk between segments: libjpeg skips to the next marker with a warning, and so
            // does Pillow, so the walk does too.
            match b[i..].iter().position(|&x| x == 0xFF) {
                Some(k) => i += k,
                None => return Err(truncated(b.len())),
            }
        }
        while i < b.len() && b[i] == 0xFF {
            i += 1; // fill bytes
        }
        if i >= b.len() {
            return Err(truncated(i));
        }
        let m = b[i];
        i += 1;
        if m == 0x01 || (0xD0..=0xD7).contains(&m) {
            continue; // standalone markers
        }
        if m == 0xD9 || m == 0xDA {
            return Err(DecodeError::new(
                DecodeErrorKind::Corrupt,
                format!("no frame header: marker ff {m:02x} at byte {} comes first", i - 2),
            ));
        }
        if i + 2 > b.len() {
            return Err(truncated(i));
        }
        let len = u16::from_be_bytes([b[i], b[i + 1]]) as usize;
        if len < 2 {
            return Err(DecodeError::new(DecodeErrorKind::Corrupt, format!("marker ff {m:02x} at byte {} has length {len}", i - 2)));
        }
        if i + len > b.len() {
            return Err(truncated(b.len()));
        }
        let seg = &b[i + 2..i + len];
        match m {
            0xEE if seg.len() >= 5 && &seg[..5] == b"Adobe" => adobe = true,
            0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                if seg.len() < 6 {
                    return Err(DecodeError::new(DecodeErrorKind::Corrupt, format!("frame header at byte {} is {} bytes", i - 2, len)));
                }
                if matches!(m, 0xC5..=0xC7 | 0xCD..=0xCF) {
                    return Err(DecodeError::new(
                        DecodeErrorKind::Unsupported,
                        format!("hierarchical (differential, marker ff {m:02x}) jpeg is not supported"),
                    ));
                }
                let precision = seg[0] as u32;
                if precision != 8 {
                    let kind = if matches!(m, 0xC3 | 0xCB) { "lossless" } else { "dct" };
                    return Err(DecodeError::new(
                        DecodeErrorKind::Unsupported,
                        format!("{precision}-bit {kind} jpeg is not supported (8-bit sample precision only)"),
                    ));
                }
                let height = u16::from_be_bytes([seg[1], seg[2]]) as u32;
                let width = u16::from_be_bytes([seg[3], seg[4]]) as u32;
                if height == 0 {
                    return Err(DecodeError::new(
                        DecodeErrorKind::Unsupported,
                        format!("frame height 0 (height given by a DNL marker) is not supported, width {width}"),
                    ));
                }
                return Ok(Frame { width, height, precision, components: seg[5] as u32, adobe });
            }
            _ => {}
        }
        i += len;
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed exactly once.
        unsafe { tj::tj3Destroy(self.0) };
    }
}

thread_local! {
    static HANDLE: RefCell<Option<Handle>> = const { RefCell::new(None) };
    static CMYK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether [`to_baseline`] would rewrite a JPEG with these header facts: progressive (Huffman),
/// 8-bit, one or three components (what nvJPEG's hardware engine refuses and would take as
/// baseline; four-component CMYK/YCCK it takes in neither form). Not arithmetic-coded files:
/// libjpeg-turbo's arithmetic decoder reads past a damaged stream without a warning, and a
/// fuzzed SOF9 file rewritten without one decoded to other pixels than stored
/// (fuzz/fuzz_targets/jpeg_rewrite.rs); they are rare, and the CPU route takes them.
pub fn transcodable(info: &crate::codec::jpeg::JpegInfo) -> bool {
    info.coding == crate::codec::jpeg::Coding::Progressive && info.precision == 8 && matches!(info.components, 1 | 3)
}

/// The same image as a baseline JPEG: libjpeg-turbo's lossless transform (what `jpegtran`
/// does without `-progressive`) reads the progressive scans' DCT
/// coefficients and writes them again as one sequential Huffman scan with the standard tables
/// (optimized ones would make the generated set's progressive photos 2 % smaller for twice the
/// CPU: 3.1 against 1.7 ms each for the transform, before the check below), every marker
/// copied. The transform decodes nothing to pixels, so every decoder should read the same
/// picture from either form; libjpeg-turbo's is checked on every image (below, and
/// tests/transcode.rs).
///
/// `None` — deliver the stored bytes — when the image is not [`transcodable`], its header
/// announces more than `max_pixels`, its scans leave its first coefficients unrefined
/// ([`crate::codec::jpeg::progressive_complete`]: libjpeg-turbo smooths those, a baseline file
/// it would not), libjpeg-turbo warns or fails on it (damaged data: the stored bytes keep their
/// own decoder's handling and error), the result would not be baseline (SOF0: 16-bit
/// quantization tables make it extended sequential), or libjpeg-turbo does not decode the
/// result to exactly the stored file's pixels (checked on each image).
pub fn to_baseline(bytes: &[u8], max_pixels: u64) -> Option<Vec<u8>> {
    let info = crate::codec::jpeg::parse(bytes).ok()?;
    if !transcodable(&info) || info.pixels() > max_pixels || !crate::codec::jpeg::progressive_complete(bytes) {
        return None;
    }
    let made = {
        // A transformer of its own for each image: a handle keeps the tables earlier images
        // defined (see `defines_its_tables`), and a rewrite happens once per image.
        let h = Handle::open(tj::TJINIT_TJINIT_TRANSFORM, "transformer").ok()?;
        h.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 1);
        h.set(tj::TJPARAM_TJPARAM_MAXPIXELS, max_pixels.min(i32::MAX as u64) as i32);
        h.set(tj::TJPARAM_TJPARAM_PROGRESSIVE, 0);
        h.set(tj::TJPARAM_TJPARAM_ARITHMETIC, 0);
        h.set(tj::TJPARAM_TJPARAM_OPTIMIZE, 0);
        h.set(tj::TJPARAM_TJPARAM_RESTARTBLOCKS, 0);
        h.set(tj::TJPARAM_TJPARAM_RESTARTROWS, 0);
        h.set(tj::TJPARAM_TJPARAM_NOREALLOC, 0);
        h.set(tj::TJPARAM_TJPARAM_SAVEMARKERS, 2);
        let t = tj::tjtransform {
            r: tj::tjregion { x: 0, y: 0, w: 0, h: 0 },
            op: tj::TJXOP_TJXOP_NONE as i32,
            options: 0,
            data: std::ptr::null_mut(),
            customFilter: None,
        };
        let mut out: *mut u8 = std::ptr::null_mut();
        let mut len: tj::size_t = 0;
        // SAFETY: valid transformer handle; `bytes` is the source; one transform, one output
        // pointer and size, the pointer null so TurboJPEG allocates it (NOREALLOC 0).
        let rc = unsafe { tj::tj3Transform(h.0, bytes.as_ptr(), bytes.len() as _, 1, &mut out, &mut len, &t) };
        let made = (rc == 0 && !out.is_null()).then(|| {
            // SAFETY: on success TurboJPEG wrote `len` bytes at `out`, which it allocated.
            unsafe { std::slice::from_raw_parts(out, len as usize) }.to_vec()
        });
        // SAFETY: `out` is null or TurboJPEG's own allocation, freed once here.
        unsafe { tj::tj3Free(out.cast()) };
        made.filter(|b| crate::codec::jpeg::parse(b).is_ok_and(|i| i.coding == crate::codec::jpeg::Coding::Baseline))?
    };
    // The promise, checked on every image rather than trusted: libjpeg-turbo decodes the
    // rewrite to the stored file's pixels. (A damaged file can decode without a warning and
    // hold coefficients a baseline scan cannot code, which libjpeg-turbo's encoder writes
    // anyway: found by fuzz/fuzz_targets/jpeg_rewrite.rs.) Twice a decode, once per image.
    let (mut stored, mut rewritten) = (DecodedImage::default(), DecodedImage::default());
    decode_rgb(bytes, max_pixels, &mut stored).ok()?;
    decode_rgb(&made, max_pixels, &mut rewritten).ok()?;
    ((stored.width, stored.height, &stored.rgb) == (rewritten.width, rewritten.height, &rewritten.rgb)).then_some(made)
}

/// Run `f` on this thread's decompressor; on a fresh one when `fresh` (an image that does not
/// define every table it uses: [`crate::codec::jpeg::defines_its_tables`]), so that what an
/// earlier image left in the handle never reaches it.
fn with_handle<T>(fresh: bool, f: impl FnOnce(&Handle) -> Result<T, DecodeError>) -> Result<T, DecodeError> {
    HANDLE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() || fresh {
            *slot = Some(Handle::new()?);
        }
        let r = f(slot.as_ref().expect("handle was just created"));
        if r.is_err() {
            // libjpeg-turbo can keep state from a failed stream: start the next image afresh.
            *slot = None;
        }
        r
    })
}

/// Pillow's `MULDIV255`: `a·b/255` rounded, in integers.
#[inline(always)]
fn muldiv255(a: u32, b: u32) -> u32 {
    let t = a * b + 128;
    ((t >> 8) + t) >> 8
}

/// CMYK → RGB as Pillow converts (`cmyk2rgb`): `R = (255 − K) − C·(255 − K)/255`. Adobe
/// (Photoshop) files store the inks inverted; libjpeg-turbo hands them over as stored, so
/// they are inverted first, as Pillow's "CMYK;I" raw mode does. On the CPU augment's ISA
/// ([`crate::augment::host::augment_isa`], `STOKE_CPU_ISA`): integer math, the same bytes on
/// either; with AVX2 the compiler vectorizes it (CMYK and YCCK photos decode 11–12 % faster
/// for it, BENCHMARKS.md).
fn cmyk_to_rgb(cmyk: &[u8], rgb: &mut [u8], inverted: bool) {
    #[cfg(target_arch = "x86_64")]
    if crate::augment::host::augment_isa() == crate::augment::host::Isa::Avx2 {
        // SAFETY: augment_isa picks AVX2 only where the CPU has it.
        return unsafe { cmyk_to_rgb_avx2(cmyk, rgb, inverted) };
    }
    cmyk_to_rgb_here(cmyk, rgb, inverted)
}

/// [`cmyk_to_rgb`]'s loop, compiled into each caller's ISA.
#[inline(always)]
fn cmyk_to_rgb_here(cmyk: &[u8], rgb: &mut [u8], inverted: bool) {
    let inv = if inverted { 255u8 } else { 0 };
    for (s, d) in cmyk.chunks_exact(4).zip(rgb.chunks_exact_mut(3)) {
        let nk = 255 - (s[3] ^ inv) as u32;
        for c in 0..3 {
            d[c] = (nk - muldiv255((s[c] ^ inv) as u32, nk).min(nk)) as u8;
        }
    }
}

/// [`cmyk_to_rgb_here`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn cmyk_to_rgb_avx2(cmyk: &[u8], rgb: &mut [u8], inverted: bool) {
    cmyk_to_rgb_here(cmyk, rgb, inverted)
}

/// Decode the whole image to RGB into `out` (buffers reused). `max_pixels` is the
/// decoded-size guard, checked from the header before anything is allocated.
pub fn decode_rgb(bytes: &[u8], max_pixels: u64, out: &mut DecodedImage) -> Result<(), DecodeError> {
    decode_rgb_region(bytes, max_pixels, None, out)
}

/// Decode the region `(x, y, w, h)` of the stored image (or all of it for `None`) to RGB.
/// The decoded region contains the requested one with a margin of one iMCU on each side (so
/// that smooth chroma upsampling sees the same neighbours as in the full image) and its left
/// edge on an iMCU boundary, as libjpeg-turbo requires; `out.region_*` say what was decoded,
/// and inside the requested region the pixels are exactly those of [`decode_rgb`]. Rows
/// below the region are not decoded and columns outside it are not transformed, so a crop
/// decodes faster than the whole image.
pub fn decode_rgb_region(
    bytes: &[u8],
    max_pixels: u64,
    region: Option<(u32, u32, u32, u32)>,
    out: &mut DecodedImage,
) -> Result<(), DecodeError> {
    decode_inner(bytes, max_pixels, region, 1, out)
}

/// Decode the whole image reduced by `denom` (1, 2, 4 or 8) in the DCT domain (libjpeg-turbo's
/// scaled inverse DCT: much less work for large images). `out.width × out.height` is the
/// reduced size, `ceil(w / denom) × ceil(h / denom)`. The pixels are not those of a full decode
/// followed by a resize; see [`crate::backend::cpu`] for where the backend uses it. Formats
/// without DCT scaling (PNG) are decoded whole at full size.
pub fn decode_rgb_scaled(bytes: &[u8], max_pixels: u64, denom: u32, out: &mut DecodedImage) -> Result<(), DecodeError> {
    if ![1, 2, 4, 8].contains(&denom) {
        return Err(DecodeError::new(DecodeErrorKind::Unsupported, format!("scale 1/{denom} is not one of 1, 1/2, 1/4, 1/8")));
    }
    decode_inner(bytes, max_pixels, None, denom, out)
}

fn decode_inner(
    bytes: &[u8],
    max_pixels: u64,
    region: Option<(u32, u32, u32, u32)>,
    denom: u32,
    out: &mut DecodedImage,
) -> Result<(), DecodeError> {
    guarded(|| decode_any(bytes, max_pixels, region, denom, &mut *out))
}

/// `decode` with a panic turned into this image's error: a codec crate's bug on hostile bytes
/// (png 0.18 indexed past a bad palette's end: fuzz/regressions/png) then costs the image, named
/// and substituted by the policy, not the decode thread and with it the pipeline (contract 4).
/// Every CPU decode goes through here, the CUDA backend's CPU route and retries included.
pub fn guarded(decode: impl FnOnce() -> Result<(), DecodeError>) -> Result<(), DecodeError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode))
        .unwrap_or_else(|_| Err(DecodeError::new(DecodeErrorKind::Corrupt, "the CPU decoder panicked on this image")))
}

fn decode_any(
    bytes: &[u8],
    max_pixels: u64,
    region: Option<(u32, u32, u32, u32)>,
    denom: u32,
    out: &mut DecodedImage,
) -> Result<(), DecodeError> {
    match crate::codec::sniff(bytes) {
        Some(ImageFormat::Jpeg) => {}
        // Formats without region or DCT-scaled decoding are decoded whole; `out.region_*`
        // and `out.width/height` say so, which both callers handle.
        Some(ImageFormat::Png) => return crate::codec::png::decode_rgb(bytes, max_pixels, out),
        Some(ImageFormat::WebP) => return crate::codec::webp::decode_rgb(bytes, max_pixels, out),
        None => {
            let head: Vec<String> = bytes.iter().take(4).map(|x| format!("{x:02x}")).collect();
            return Err(DecodeError::new(
                DecodeErrorKind::UnknownFormat,
                format!("not a supported image format (jpeg, png): starts with [{}] ({} bytes)", head.join(" "), bytes.len()),
            ));
        }
    }
    with_handle(!crate::codec::jpeg::defines_its_tables(bytes), |h| {
        let hdr = h.header(bytes)?;
        let pixels = hdr.width as u64 * hdr.height as u64;
        if pixels > max_pixels {
            return Err(DecodeError::new(
                DecodeErrorKind::TooLarge,
                format!(
                    "the header announces {}x{} = {pixels} pixels, over the decoded-size guard of {max_pixels} pixels",
                    hdr.width, hdr.height
                ),
            ));
        }
        // Second line of defence inside libjpeg-turbo itself.
        h.set(tj::TJPARAM_TJPARAM_MAXPIXELS, max_pixels.min(i32::MAX as u64) as i32);
        h.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 0);
        // libjpeg-turbo cannot decode part of a lossless image: those are decoded whole.
        let lossless = h.get(tj::TJPARAM_TJPARAM_LOSSLESS) == 1;
        let (rx, ry, rw, rh) = match region {
            // The sums in u64: a region whose edge is past 2^32 lies outside the image (decoded
            // whole), never an overflow (found by fuzz/fuzz_targets/jpeg_decode.rs).
            Some((x, y, w, h))
                if !lossless
                    && hdr.mcu_width > 0
                    && w > 0
                    && h > 0
                    && x as u64 + w as u64 <= hdr.width as u64
                    && y as u64 + h as u64 <= hdr.height as u64 =>
            {
                // Smooth chroma upsampling reads the neighbouring chroma samples, which at the
                // edge of a decoded region are replaced by the edge's own: decode one iMCU
                // more on every side so the requested pixels are those of the full decode
                // (checked on the whole corpus by tests/corpus_decode.rs). The left edge must
                // also sit on an iMCU boundary.
                let (mw, mh) = (hdr.mcu_width, hdr.mcu_height);
                let x0 = x.saturating_sub(mw);
                let x0 = x0 - x0 % mw;
                let x1 = (x + w + mw).min(hdr.width);
                let y0 = y.saturating_sub(mh);
                let y1 = (y + h + mh).min(hdr.height);
                (x0, y0, x1 - x0, y1 - y0)
            }
            _ => (0, 0, hdr.width, hdr.height),
        };
        // The handle is reused: set the scale on every call. Lossless images do not scale.
        let denom = if lossless { 1 } else { denom };
        // SAFETY: valid handle; 1/1, 1/2, 1/4 and 1/8 are scaling factors libjpeg-turbo supports.
        if unsafe { tj::tj3SetScalingFactor(h.0, tj::tjscalingfactor { num: 1, denom: denom as i32 }) } != 0 {
            return Err(h.classify("setting the scale"));
        }
        let (rw, rh) = if denom > 1 { (hdr.width.div_ceil(denom), hdr.height.div_ceil(denom)) } else { (rw, rh) };
        let full = rx == 0 && ry == 0 && (denom > 1 || (rw == hdr.width && rh == hdr.height));
        let crop = if full {
            tj::tjregion { x: 0, y: 0, w: 0, h: 0 }
        } else {
            tj::tjregion { x: rx as i32, y: ry as i32, w: rw as i32, h: rh as i32 }
        };
        // SAFETY: valid handle; the region lies inside the image with x aligned to the iMCU.
        if unsafe { tj::tj3SetCroppingRegion(h.0, crop) } != 0 {
            return Err(h.classify("setting the crop region"));
        }
        let len = rw as usize * rh as usize * 3;
        out.rgb.clear();
        out.rgb.resize(len, 0);
        let four = hdr.components == 4;
        let rc = if four {
            // libjpeg-turbo converts 4-component data only to CMYK; Pillow's formula does the rest.
            CMYK.with(|c| {
                let mut cmyk = c.borrow_mut();
                cmyk.clear();
                cmyk.resize(rw as usize * rh as usize * 4, 0);
                // SAFETY: valid handle; `cmyk` holds rh rows of `rw·4` bytes, what the cropping
                // region produces in TJPF_CMYK with that pitch.
                let rc = unsafe {
                    tj::tj3Decompress8(h.0, bytes.as_ptr(), bytes.len() as _, cmyk.as_mut_ptr(), (rw * 4) as i32, tj::TJPF_TJPF_CMYK)
                };
                // SAFETY: valid handle.
                if rc == 0 || unsafe { tj::tj3GetErrorCode(h.0) } != tj::TJERR_TJERR_FATAL as i32 {
                    cmyk_to_rgb(&cmyk, &mut out.rgb, hdr.adobe);
                }
                rc
            })
        } else {
            // SAFETY: valid handle; `out.rgb` holds rh rows of `rw·3` bytes, exactly what the
            // cropping region set above produces in TJPF_RGB with that pitch.
            unsafe { tj::tj3Decompress8(h.0, bytes.as_ptr(), bytes.len() as _, out.rgb.as_mut_ptr(), (rw * 3) as i32, tj::TJPF_TJPF_RGB) }
        };
        if rc != 0 {
            // SAFETY: valid handle.
            let fatal = unsafe { tj::tj3GetErrorCode(h.0) } == tj::TJERR_TJERR_FATAL as i32;
            let e = h.classify("decoding");
            if fatal || e.kind == DecodeErrorKind::Truncated {
                return Err(e);
            }
            log::debug!("libjpeg-turbo warning accepted: {}", e.message);
        }
        out.width = if denom > 1 { rw } else { hdr.width };
        out.height = if denom > 1 { rh } else { hdr.height };
        out.region_x = rx;
        out.region_y = ry;
        out.region_w = rw;
        out.region_h = rh;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CMYK → RGB on every ISA this CPU has equals Pillow's formula computed in floating point
    /// (`(255 − K) − round(C·(255 − K)/255)`, C and K inverted first for Adobe files), for every
    /// ink and black value, in a row long enough for the vectorized loop and its tail.
    #[test]
    fn cmyk_to_rgb_is_pillows_formula_on_every_isa() {
        let mut cmyk = Vec::with_capacity(4 * 65536 + 4 * 7);
        for k in 0..=255u8 {
            for c in 0..=255u8 {
                cmyk.extend([c, 255 - c, c / 3, k]);
            }
        }
        cmyk.extend((0..28u8).map(|i| i.wrapping_mul(37)));
        for inverted in [false, true] {
            let want: Vec<u8> = cmyk
                .chunks_exact(4)
                .flat_map(|p| {
                    let ink = |v: u8| f64::from(if inverted { 255 - v } else { v });
                    let nk = 255.0 - ink(p[3]);
                    [0, 1, 2].map(|c| (nk - (ink(p[c]) * nk / 255.0).round()) as u8)
                })
                .collect();
            let mut got = vec![0u8; want.len()];
            cmyk_to_rgb_here(&cmyk, &mut got, inverted);
            assert!(got == want, "baseline, inverted {inverted}");
            got.fill(0);
            cmyk_to_rgb(&cmyk, &mut got, inverted);
            assert!(got == want, "{:?}, inverted {inverted}", crate::augment::host::augment_isa());
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                got.fill(0);
                // SAFETY: this CPU has AVX2.
                unsafe { cmyk_to_rgb_avx2(&cmyk, &mut got, inverted) };
                assert!(got == want, "avx2, inverted {inverted}");
            }
        }
    }

    /// A decoder that panics gives this image a named corrupt error and leaves the thread
    /// decoding: the next image decodes.
    #[test]
    fn a_decoder_panic_is_the_images_error_and_the_thread_goes_on() {
        let e = guarded(|| panic!("a codec's bug")).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::Corrupt);
        assert!(e.to_string().contains("panicked"), "{e}");
        let mut out = DecodedImage::default();
        let png = include_bytes!("../../../tests/golden/png/palette_trns.png");
        guarded(|| decode_rgb(png, 1 << 20, &mut out)).unwrap();
        assert!(out.width > 0 && out.rgb.len() == out.width as usize * out.height as usize * 3);
    }

    /// The SIMD probe answers what the build did: under `JSIMD_FORCENONE=1` (libjpeg-turbo's
    /// own switch, read once) a child process must say "no SIMD", so the probe can fail; in
    /// this process it must say "SIMD" whenever the build had nasm (CI requires it with
    /// STOKE_REQUIRE_SIMD=1; elsewhere a build without nasm prints the advice).
    #[test]
    fn the_simd_probe_reports_the_build_and_the_forced_off_switch() {
        if std::env::var_os("STOKE_SIMD_PROBE_CHILD").is_some() {
            println!("SIMD={}", jpeg_simd());
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", "backend::cpu::decode::tests::the_simd_probe_reports_the_build_and_the_forced_off_switch", "--nocapture"])
            .env("STOKE_SIMD_PROBE_CHILD", "1")
            .env("JSIMD_FORCENONE", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("SIMD=false"), "JSIMD_FORCENONE=1 should turn SIMD off: {text}");
        if std::env::var("STOKE_REQUIRE_SIMD").is_ok_and(|v| v == "1") {
            assert!(jpeg_simd(), "{NO_SIMD_ADVICE}");
        } else if !jpeg_simd() {
            eprintln!("{NO_SIMD_ADVICE}");
        }
    }

    #[test]
    fn unknown_bytes_are_named_as_such() {
        let mut out = DecodedImage::default();
        let e = decode_rgb(b"GIF89a....", 1 << 20, &mut out).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::UnknownFormat);
        assert!(e.message.contains("not a supported image format") && e.message.contains("47 49 46 38"), "{e}");
        let e = decode_rgb(b"", 1 << 20, &mut out).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::UnknownFormat);
    }
}
