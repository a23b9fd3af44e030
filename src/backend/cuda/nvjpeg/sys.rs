//! Raw declarations of the part of the nvJPEG 13.0 API that stoke uses, transcribed from
//! `nvjpeg.h` of `nvidia-nvjpeg==13.0.1.86` (NVJPEG_VER 13.0.1.86), and a function table
//! filled at run time from `libnvjpeg` with `libloading`.
//!
//! Why at run time: a link-time `-lnvjpeg` (what `nvjpeg-sys` does) makes every binary fail
//! to start on machines without CUDA, CI included. Here a missing library is an ordinary
//! [`GpuError::NoNvjpeg`] that lists where we looked.
//!
//! C enums are declared as `#[repr(transparent)]` wrappers of `c_int` with associated
//! constants rather than Rust enums: the library writes some of them (chroma subsampling,
//! encoding), and a value the header did not know would be undefined behaviour in a Rust enum.

#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use crate::error::GpuError;
use std::ffi::{c_int, c_uint, c_void, OsString};
use std::sync::OnceLock;

/// `NVJPEG_MAX_COMPONENT`.
pub const NVJPEG_MAX_COMPONENT: usize = 4;

/// `NVJPEG_FLAGS_*` for [`NvjpegLib::nvjpegCreateEx`].
pub const NVJPEG_FLAGS_DEFAULT: c_uint = 0;
pub const NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE: c_uint = 1;
pub const NVJPEG_FLAGS_ENABLE_MEMORY_POOLS: c_uint = 1 << 1;
pub const NVJPEG_FLAGS_BITSTREAM_STRICT: c_uint = 1 << 2;
pub const NVJPEG_FLAGS_REDUCED_MEMORY_DECODE: c_uint = 1 << 3;
pub const NVJPEG_FLAGS_REDUCED_MEMORY_DECODE_ZERO_COPY: c_uint = 1 << 4;
pub const NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION: c_uint = 1 << 5;

macro_rules! c_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $x:expr),* $(,)? }) => {
        $(#[$m])*
        #[repr(transparent)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub c_int);
        impl $name {
            $($(#[$vm])* pub const $v: $name = $name($x);)*
        }
    };
}

c_enum!(
    /// `nvjpegStatus_t`, returned by every nvJPEG call.
    nvjpegStatus_t {
        NVJPEG_STATUS_SUCCESS = 0,
        NVJPEG_STATUS_NOT_INITIALIZED = 1,
        NVJPEG_STATUS_INVALID_PARAMETER = 2,
        NVJPEG_STATUS_BAD_JPEG = 3,
        NVJPEG_STATUS_JPEG_NOT_SUPPORTED = 4,
        NVJPEG_STATUS_ALLOCATOR_FAILURE = 5,
        NVJPEG_STATUS_EXECUTION_FAILED = 6,
        NVJPEG_STATUS_ARCH_MISMATCH = 7,
        NVJPEG_STATUS_INTERNAL_ERROR = 8,
        NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED = 9,
        NVJPEG_STATUS_INCOMPLETE_BITSTREAM = 10,
    }
);

c_enum!(
    /// `nvjpegExifOrientation_t`.
    nvjpegExifOrientation_t {
        NVJPEG_ORIENTATION_UNKNOWN = 0,
        NVJPEG_ORIENTATION_NORMAL = 1,
        NVJPEG_ORIENTATION_FLIP_HORIZONTAL = 2,
        NVJPEG_ORIENTATION_ROTATE_180 = 3,
        NVJPEG_ORIENTATION_FLIP_VERTICAL = 4,
        NVJPEG_ORIENTATION_TRANSPOSE = 5,
        NVJPEG_ORIENTATION_ROTATE_90 = 6,
        NVJPEG_ORIENTATION_TRANSVERSE = 7,
        NVJPEG_ORIENTATION_ROTATE_270 = 8,
    }
);

c_enum!(
    /// `nvjpegChromaSubsampling_t`.
    nvjpegChromaSubsampling_t {
        NVJPEG_CSS_444 = 0,
        NVJPEG_CSS_422 = 1,
        NVJPEG_CSS_420 = 2,
        NVJPEG_CSS_440 = 3,
        NVJPEG_CSS_411 = 4,
        NVJPEG_CSS_410 = 5,
        NVJPEG_CSS_GRAY = 6,
        NVJPEG_CSS_410V = 7,
        NVJPEG_CSS_UNKNOWN = -1,
    }
);

c_enum!(
    /// `nvjpegOutputFormat_t`.
    nvjpegOutputFormat_t {
        NVJPEG_OUTPUT_UNCHANGED = 0,
        NVJPEG_OUTPUT_YUV = 1,
        NVJPEG_OUTPUT_Y = 2,
        NVJPEG_OUTPUT_RGB = 3,
        NVJPEG_OUTPUT_BGR = 4,
        /// Interleaved RGB in channel 0 (HWC), pitch ≥ 3·width.
        NVJPEG_OUTPUT_RGBI = 5,
        NVJPEG_OUTPUT_BGRI = 6,
        NVJPEG_OUTPUT_UNCHANGEDI_U16 = 7,
        NVJPEG_OUTPUT_NV12 = 8,
        NVJPEG_OUTPUT_YUY2 = 9,
    }
);

c_enum!(
    /// `nvjpegBackend_t`.
    nvjpegBackend_t {
        NVJPEG_BACKEND_DEFAULT = 0,
        NVJPEG_BACKEND_HYBRID = 1,
        NVJPEG_BACKEND_GPU_HYBRID = 2,
        /// The hardware JPEG engine (A100, H100, ...); baseline Huffman only.
        NVJPEG_BACKEND_HARDWARE = 3,
        NVJPEG_BACKEND_GPU_HYBRID_DEVICE = 4,
        NVJPEG_BACKEND_HARDWARE_DEVICE = 5,
        NVJPEG_BACKEND_LOSSLESS_JPEG = 6,
    }
);

c_enum!(
    /// `nvjpegJpegEncoding_t`: the SOF marker of the frame.
    nvjpegJpegEncoding_t {
        NVJPEG_ENCODING_UNKNOWN = 0x0,
        NVJPEG_ENCODING_BASELINE_DCT = 0xc0,
        NVJPEG_ENCODING_EXTENDED_SEQUENTIAL_DCT_HUFFMAN = 0xc1,
        NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN = 0xc2,
        NVJPEG_ENCODING_LOSSLESS_HUFFMAN = 0xc3,
    }
);

c_enum!(
    /// `libraryPropertyType` from `library_types.h`, for [`NvjpegLib::nvjpegGetProperty`].
    libraryPropertyType {
        MAJOR_VERSION = 0,
        MINOR_VERSION = 1,
        PATCH_LEVEL = 2,
    }
);

/// `cudaStream_t`: the same pointer as the driver API's `CUstream`.
pub type cudaStream_t = *mut c_void;

/// `nvjpegImage_t`: up to four planes, each a device pointer and a pitch in bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nvjpegImage_t {
    pub channel: [*mut u8; NVJPEG_MAX_COMPONENT],
    pub pitch: [usize; NVJPEG_MAX_COMPONENT],
}

impl Default for nvjpegImage_t {
    fn default() -> Self {
        Self { channel: [std::ptr::null_mut(); NVJPEG_MAX_COMPONENT], pitch: [0; NVJPEG_MAX_COMPONENT] }
    }
}

pub type tDevMalloc = Option<unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int>;
pub type tDevFree = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
pub type tPinnedMalloc = Option<unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int>;
pub type tPinnedFree = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
pub type tDevMallocV2 = Option<unsafe extern "C" fn(*mut c_void, *mut *mut c_void, usize, cudaStream_t) -> c_int>;
pub type tDevFreeV2 = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize, cudaStream_t) -> c_int>;
pub type tPinnedMallocV2 = Option<unsafe extern "C" fn(*mut c_void, *mut *mut c_void, usize, cudaStream_t) -> c_int>;
pub type tPinnedFreeV2 = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize, cudaStream_t) -> c_int>;

/// `nvjpegDevAllocator_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nvjpegDevAllocator_t {
    pub dev_malloc: tDevMalloc,
    pub dev_free: tDevFree,
}

/// `nvjpegPinnedAllocator_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nvjpegPinnedAllocator_t {
    pub pinned_malloc: tPinnedMalloc,
    pub pinned_free: tPinnedFree,
}

/// `nvjpegDevAllocatorV2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nvjpegDevAllocatorV2_t {
    pub dev_malloc: tDevMallocV2,
    pub dev_free: tDevFreeV2,
    pub dev_ctx: *mut c_void,
}

/// `nvjpegPinnedAllocatorV2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct nvjpegPinnedAllocatorV2_t {
    pub pinned_malloc: tPinnedMallocV2,
    pub pinned_free: tPinnedFreeV2,
    pub pinned_ctx: *mut c_void,
}

macro_rules! opaque {
    ($($st:ident => $ptr:ident),* $(,)?) => {$(
        /// Opaque nvJPEG object.
        #[repr(C)]
        pub struct $st {
            _private: [u8; 0],
        }
        /// Handle to the opaque nvJPEG object.
        pub type $ptr = *mut $st;
    )*};
}

opaque!(
    nvjpegHandle => nvjpegHandle_t,
    nvjpegJpegState => nvjpegJpegState_t,
    nvjpegBufferPinned => nvjpegBufferPinned_t,
    nvjpegBufferDevice => nvjpegBufferDevice_t,
    nvjpegJpegStream => nvjpegJpegStream_t,
    nvjpegDecodeParams => nvjpegDecodeParams_t,
    nvjpegJpegDecoder => nvjpegJpegDecoder_t,
);

macro_rules! nvjpeg_table {
    (
        required { $($r:ident($($ra:ty),* $(,)?);)* }
        optional { $($o:ident($($oa:ty),* $(,)?);)* }
    ) => {
        /// The nvJPEG entry points, resolved from one opened `libnvjpeg`. Functions that older
        /// releases lack are `Option`s.
        pub struct NvjpegLib {
            /// Path or name the library was opened from.
            pub path: String,
            $(pub $r: unsafe extern "C" fn($($ra),*) -> nvjpegStatus_t,)*
            $(pub $o: Option<unsafe extern "C" fn($($oa),*) -> nvjpegStatus_t>,)*
            // Keeps the code the pointers above point into mapped; dropped last.
            _lib: libloading::Library,
        }

        impl NvjpegLib {
            /// Resolve every entry point from an opened library.
            ///
            /// # Safety
            /// `lib` must be an nvJPEG library whose symbols have the signatures declared here
            /// (nvJPEG 12 or 13).
            unsafe fn resolve(lib: libloading::Library, path: String) -> Result<Self, String> {
                $(
                    // SAFETY: the symbol's C signature is the one declared in the table
                    // (caller's contract); the pointer outlives `lib` only inside `Self`,
                    // which owns `lib`.
                    let $r = *unsafe { lib.get::<unsafe extern "C" fn($($ra),*) -> nvjpegStatus_t>(
                        concat!(stringify!($r), "\0").as_bytes()) }
                        .map_err(|e| format!("{path} has no {}: {e} (nvJPEG too old?)", stringify!($r)))?;
                )*
                $(
                    // SAFETY: as above.
                    let $o = unsafe { lib.get::<unsafe extern "C" fn($($oa),*) -> nvjpegStatus_t>(
                        concat!(stringify!($o), "\0").as_bytes()) }.ok().map(|s| *s);
                )*
                Ok(Self { path, $($r,)* $($o,)* _lib: lib })
            }
        }
    };
}

nvjpeg_table! {
    required {
        nvjpegGetProperty(libraryPropertyType, *mut c_int);
        nvjpegCreateEx(nvjpegBackend_t, *mut nvjpegDevAllocator_t, *mut nvjpegPinnedAllocator_t, c_uint, *mut nvjpegHandle_t);
        nvjpegDestroy(nvjpegHandle_t);
        nvjpegGetHardwareDecoderInfo(nvjpegHandle_t, *mut c_uint, *mut c_uint);
        nvjpegJpegStateCreate(nvjpegHandle_t, *mut nvjpegJpegState_t);
        nvjpegJpegStateDestroy(nvjpegJpegState_t);
        nvjpegGetImageInfo(nvjpegHandle_t, *const u8, usize, *mut c_int, *mut nvjpegChromaSubsampling_t, *mut c_int, *mut c_int);
        nvjpegDecodeBatchedInitialize(nvjpegHandle_t, nvjpegJpegState_t, c_int, c_int, nvjpegOutputFormat_t);
        nvjpegDecodeBatched(nvjpegHandle_t, nvjpegJpegState_t, *const *const u8, *const usize, *mut nvjpegImage_t, cudaStream_t);
        nvjpegDecodeBatchedSupported(nvjpegHandle_t, nvjpegJpegStream_t, *mut c_int);
        nvjpegDecoderCreate(nvjpegHandle_t, nvjpegBackend_t, *mut nvjpegJpegDecoder_t);
        nvjpegDecoderDestroy(nvjpegJpegDecoder_t);
        nvjpegDecoderJpegSupported(nvjpegJpegDecoder_t, nvjpegJpegStream_t, nvjpegDecodeParams_t, *mut c_int);
        nvjpegDecoderStateCreate(nvjpegHandle_t, nvjpegJpegDecoder_t, *mut nvjpegJpegState_t);
        nvjpegJpegStreamCreate(nvjpegHandle_t, *mut nvjpegJpegStream_t);
        nvjpegJpegStreamDestroy(nvjpegJpegStream_t);
        nvjpegJpegStreamParse(nvjpegHandle_t, *const u8, usize, c_int, c_int, nvjpegJpegStream_t);
        nvjpegJpegStreamParseHeader(nvjpegHandle_t, *const u8, usize, nvjpegJpegStream_t);
        nvjpegJpegStreamGetFrameDimensions(nvjpegJpegStream_t, *mut c_uint, *mut c_uint);
        nvjpegJpegStreamGetComponentsNum(nvjpegJpegStream_t, *mut c_uint);
        nvjpegJpegStreamGetChromaSubsampling(nvjpegJpegStream_t, *mut nvjpegChromaSubsampling_t);
        nvjpegJpegStreamGetJpegEncoding(nvjpegJpegStream_t, *mut nvjpegJpegEncoding_t);
        nvjpegDecodeParamsCreate(nvjpegHandle_t, *mut nvjpegDecodeParams_t);
        nvjpegDecodeParamsDestroy(nvjpegDecodeParams_t);
        nvjpegDecodeParamsSetOutputFormat(nvjpegDecodeParams_t, nvjpegOutputFormat_t);
        nvjpegDecodeParamsSetROI(nvjpegDecodeParams_t, c_int, c_int, c_int, c_int);
        nvjpegDecodeParamsSetAllowCMYK(nvjpegDecodeParams_t, c_int);
        nvjpegBufferPinnedCreate(nvjpegHandle_t, *mut nvjpegPinnedAllocator_t, *mut nvjpegBufferPinned_t);
        nvjpegBufferPinnedDestroy(nvjpegBufferPinned_t);
        nvjpegBufferDeviceCreate(nvjpegHandle_t, *mut nvjpegDevAllocator_t, *mut nvjpegBufferDevice_t);
        nvjpegBufferDeviceDestroy(nvjpegBufferDevice_t);
        nvjpegStateAttachPinnedBuffer(nvjpegJpegState_t, nvjpegBufferPinned_t);
        nvjpegStateAttachDeviceBuffer(nvjpegJpegState_t, nvjpegBufferDevice_t);
        nvjpegDecodeJpegHost(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t, nvjpegDecodeParams_t, nvjpegJpegStream_t);
        nvjpegDecodeJpegTransferToDevice(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t, nvjpegJpegStream_t, cudaStream_t);
        nvjpegDecodeJpegDevice(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t, *mut nvjpegImage_t, cudaStream_t);
    }
    optional {
        nvjpegCreateExV2(nvjpegBackend_t, *mut nvjpegDevAllocatorV2_t, *mut nvjpegPinnedAllocatorV2_t, c_uint, *mut nvjpegHandle_t);
        nvjpegDecodeBatchedSupportedEx(nvjpegHandle_t, nvjpegJpegStream_t, nvjpegDecodeParams_t, *mut c_int);
        nvjpegDecodeBatchedEx(nvjpegHandle_t, nvjpegJpegState_t, *const *const u8, *const usize, *mut nvjpegImage_t, *mut nvjpegDecodeParams_t, cudaStream_t);
        nvjpegDecodeBatchedPreAllocate(nvjpegHandle_t, nvjpegJpegState_t, c_int, c_int, c_int, nvjpegChromaSubsampling_t, nvjpegOutputFormat_t);
        nvjpegBufferPinnedResize(nvjpegBufferPinned_t, usize, cudaStream_t);
        nvjpegBufferDeviceResize(nvjpegBufferDevice_t, usize, cudaStream_t);
        nvjpegBufferPinnedCreateV2(nvjpegHandle_t, *mut nvjpegPinnedAllocatorV2_t, *mut nvjpegBufferPinned_t);
        nvjpegBufferDeviceCreateV2(nvjpegHandle_t, *mut nvjpegDevAllocatorV2_t, *mut nvjpegBufferDevice_t);
    }
}

/// Environment variable naming the libnvjpeg to open (a path), tried first.
pub const NVJPEG_ENV: &str = "STOKE_NVJPEG";

/// Library names tried after [`NVJPEG_ENV`], in order (docs/CONTRACTS.md, "Toolchain facts").
pub const NVJPEG_NAMES: [&str; 3] = ["libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"];

impl NvjpegLib {
    /// The search order: `override_path` (the value of `STOKE_NVJPEG`) when given, then
    /// [`NVJPEG_NAMES`] through the dynamic loader's usual search (`LD_LIBRARY_PATH`, ...).
    pub fn candidates(override_path: Option<OsString>) -> Vec<String> {
        let mut v: Vec<String> = override_path.filter(|p| !p.is_empty()).map(|p| p.to_string_lossy().into_owned()).into_iter().collect();
        v.extend(NVJPEG_NAMES.iter().map(|s| s.to_string()));
        v
    }

    /// Open the first of `candidates` that loads and resolve the table from it. The error
    /// lists every candidate and the loader's last message.
    pub fn open_first(candidates: &[String]) -> Result<Self, GpuError> {
        let mut detail = String::from("no candidates");
        for c in candidates {
            // SAFETY: opening a shared library runs its initialisers; libnvjpeg's only need
            // libc. The names are the nvJPEG library (or the user's explicit choice).
            match unsafe { libloading::Library::new(c) } {
                // SAFETY: a library found under an nvJPEG name has nvJPEG's signatures.
                Ok(lib) => match unsafe { Self::resolve(lib, c.clone()) } {
                    Ok(t) => return Ok(t),
                    Err(e) => detail = e,
                },
                Err(e) => detail = e.to_string(),
            }
        }
        Err(GpuError::NoNvjpeg { searched: candidates.to_vec(), detail })
    }

    /// Open libnvjpeg in the documented search order (`STOKE_NVJPEG`, then
    /// [`NVJPEG_NAMES`]), once per process; later calls return the same table.
    pub fn get() -> Result<&'static NvjpegLib, GpuError> {
        static LIB: OnceLock<Result<NvjpegLib, (Vec<String>, String)>> = OnceLock::new();
        let r = LIB.get_or_init(|| {
            let candidates = Self::candidates(std::env::var_os(NVJPEG_ENV));
            Self::open_first(&candidates).map_err(|e| match e {
                GpuError::NoNvjpeg { searched, detail } => (searched, detail),
                other => (candidates, other.to_string()),
            })
        });
        match r {
            Ok(lib) => Ok(lib),
            Err((searched, detail)) => Err(GpuError::NoNvjpeg { searched: searched.clone(), detail: detail.clone() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// Layouts as the C compiler lays out the 13.0 header's structs on x86_64/aarch64 Linux
    /// (LP64): four pointers then four size_t; function pointers are pointer-sized.
    #[test]
    fn struct_layouts_match_the_c_header() {
        assert_eq!(size_of::<nvjpegImage_t>(), 64);
        assert_eq!(offset_of!(nvjpegImage_t, pitch), 32);
        assert_eq!(align_of::<nvjpegImage_t>(), 8);
        assert_eq!(size_of::<nvjpegDevAllocator_t>(), 16);
        assert_eq!(size_of::<nvjpegPinnedAllocator_t>(), 16);
        assert_eq!(size_of::<nvjpegDevAllocatorV2_t>(), 24);
        assert_eq!(offset_of!(nvjpegDevAllocatorV2_t, dev_ctx), 16);
        assert_eq!(size_of::<nvjpegPinnedAllocatorV2_t>(), 24);
        // C enums are ints.
        assert_eq!(size_of::<nvjpegStatus_t>(), 4);
        assert_eq!(size_of::<nvjpegChromaSubsampling_t>(), 4);
        assert_eq!(size_of::<nvjpegOutputFormat_t>(), 4);
    }

    #[test]
    fn enum_values_match_the_c_header() {
        // Spot checks against nvjpeg.h 13.0 (hand-copied, independent of the declarations).
        assert_eq!(nvjpegStatus_t::NVJPEG_STATUS_INCOMPLETE_BITSTREAM.0, 10);
        assert_eq!(nvjpegChromaSubsampling_t::NVJPEG_CSS_UNKNOWN.0, -1);
        assert_eq!(nvjpegChromaSubsampling_t::NVJPEG_CSS_410V.0, 7);
        assert_eq!(nvjpegOutputFormat_t::NVJPEG_OUTPUT_RGBI.0, 5);
        assert_eq!(nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE.0, 3);
        assert_eq!(nvjpegJpegEncoding_t::NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN.0, 0xc2);
        assert_eq!(NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, 32);
    }

    #[test]
    fn search_order_puts_the_override_first() {
        let c = NvjpegLib::candidates(Some("/opt/x/libnvjpeg.so.13".into()));
        assert_eq!(c, ["/opt/x/libnvjpeg.so.13", "libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"]);
        assert_eq!(NvjpegLib::candidates(Some("".into())).len(), 3);
        assert_eq!(NvjpegLib::candidates(None)[0], "libnvjpeg.so.13");
    }

    #[test]
    fn a_missing_library_is_a_typed_error_listing_the_paths() {
        let missing = "/nonexistent/stoke-test/libnvjpeg.so.13".to_string();
        let other = "/nonexistent/stoke-test/libnvjpeg.so".to_string();
        match NvjpegLib::open_first(&[missing.clone(), other.clone()]) {
            Err(e @ GpuError::NoNvjpeg { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&missing) && msg.contains(&other), "{msg}");
                assert!(msg.contains("STOKE_NVJPEG"), "{msg}");
                let GpuError::NoNvjpeg { searched, detail } = e else { unreachable!() };
                assert_eq!(searched, [missing, other]);
                assert!(!detail.is_empty());
            }
            Err(e) => panic!("wrong error kind: {e}"),
            Ok(_) => panic!("a nonexistent path loaded"),
        }
    }

    #[test]
    fn a_library_that_is_not_nvjpeg_is_rejected_by_name() {
        // libc loads but has no nvJPEG symbols: the error names the missing function.
        let e = NvjpegLib::open_first(&["libc.so.6".to_string()]).expect_err("libc is not nvjpeg");
        let msg = e.to_string();
        assert!(msg.contains("nvjpegGetProperty") && msg.contains("libc.so.6"), "{msg}");
    }
}
