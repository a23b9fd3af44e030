//! One function per nvJPEG call: the raw call through the [`NvjpegLib`] table, its status turned
//! into a [`GpuError::Nvjpeg`] that names the call and says what the status means.
//!
//! These are still `unsafe` where the caller must vouch for handles and pointers; the owning
//! types in [`super::safe`] make those guarantees once.

use super::sys::*;
use crate::error::GpuError;
use std::ffi::{c_int, c_uint};
use std::mem::MaybeUninit;

/// What an `nvjpegStatus_t` means, as a sentence a user can act on.
pub fn status_sentence(status: nvjpegStatus_t) -> &'static str {
    match status {
        nvjpegStatus_t::NVJPEG_STATUS_SUCCESS => "success",
        nvjpegStatus_t::NVJPEG_STATUS_NOT_INITIALIZED => "the nvJPEG handle was not initialised",
        nvjpegStatus_t::NVJPEG_STATUS_INVALID_PARAMETER => "an argument was invalid (null pointer, bad size or unsupported value)",
        nvjpegStatus_t::NVJPEG_STATUS_BAD_JPEG => "the bytes are not a valid JPEG stream (corrupt or not a JPEG)",
        nvjpegStatus_t::NVJPEG_STATUS_JPEG_NOT_SUPPORTED => "this JPEG is not supported by nvJPEG (coding mode, precision or sampling)",
        nvjpegStatus_t::NVJPEG_STATUS_ALLOCATOR_FAILURE => "nvJPEG could not allocate memory (device or pinned host memory exhausted)",
        nvjpegStatus_t::NVJPEG_STATUS_EXECUTION_FAILED => "the decode failed on the GPU (a CUDA error inside nvJPEG, or no usable GPU)",
        nvjpegStatus_t::NVJPEG_STATUS_ARCH_MISMATCH => {
            "this GPU does not support the requested nvJPEG feature (e.g. no hardware JPEG decoder)"
        }
        nvjpegStatus_t::NVJPEG_STATUS_INTERNAL_ERROR => "nvJPEG hit an internal error",
        nvjpegStatus_t::NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED => "the chosen nvJPEG backend does not implement this call",
        nvjpegStatus_t::NVJPEG_STATUS_INCOMPLETE_BITSTREAM => "the JPEG stream is truncated (bitstream incomplete)",
        _ => "unknown nvJPEG status",
    }
}

/// `Ok(())` on success, else [`GpuError::Nvjpeg`] naming `call`.
pub fn check(call: &'static str, status: nvjpegStatus_t) -> Result<(), GpuError> {
    if status == nvjpegStatus_t::NVJPEG_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(GpuError::Nvjpeg { call, status: status.0, message: status_sentence(status).to_string() })
    }
}

/// The library's version `(major, minor, patch)` ([nvjpegGetProperty]). Needs no GPU.
///
/// [nvjpegGetProperty]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpeggetproperty
pub fn get_version(lib: &NvjpegLib) -> Result<(i32, i32, i32), GpuError> {
    let mut v = [0 as c_int; 3];
    for (slot, t) in
        v.iter_mut().zip([libraryPropertyType::MAJOR_VERSION, libraryPropertyType::MINOR_VERSION, libraryPropertyType::PATCH_LEVEL])
    {
        // SAFETY: `slot` is a valid out pointer for one int.
        check("nvjpegGetProperty", unsafe { (lib.nvjpegGetProperty)(t, slot) })?;
    }
    Ok((v[0], v[1], v[2]))
}

/// Create a library handle with the default allocators ([nvjpegCreateEx]).
///
/// [nvjpegCreateEx]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegcreateex
pub fn create_ex(lib: &NvjpegLib, backend: nvjpegBackend_t, flags: c_uint) -> Result<nvjpegHandle_t, GpuError> {
    let mut h = MaybeUninit::uninit();
    // SAFETY: null allocators select nvJPEG's defaults; `h` is a valid out pointer.
    check("nvjpegCreateEx", unsafe { (lib.nvjpegCreateEx)(backend, std::ptr::null_mut(), std::ptr::null_mut(), flags, h.as_mut_ptr()) })?;
    // SAFETY: written on success.
    Ok(unsafe { h.assume_init() })
}

/// [nvjpegDestroy].
///
/// # Safety
/// `h` is a live handle and nothing created from it is used afterwards.
///
/// [nvjpegDestroy]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdestroy
pub unsafe fn destroy(lib: &NvjpegLib, h: nvjpegHandle_t) -> Result<(), GpuError> {
    // SAFETY: caller's contract.
    check("nvjpegDestroy", unsafe { (lib.nvjpegDestroy)(h) })
}

/// `(engines, cores per engine)` of the hardware JPEG decoder ([nvjpegGetHardwareDecoderInfo]).
///
/// # Safety
/// `h` is a live handle.
///
/// [nvjpegGetHardwareDecoderInfo]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpeggethardwaredecoderinfo
pub unsafe fn hardware_decoder_info(lib: &NvjpegLib, h: nvjpegHandle_t) -> Result<(u32, u32), GpuError> {
    let (mut e, mut c) = (0, 0);
    // SAFETY: caller's contract; out pointers valid.
    check("nvjpegGetHardwareDecoderInfo", unsafe { (lib.nvjpegGetHardwareDecoderInfo)(h, &mut e, &mut c) })?;
    Ok((e, c))
}

/// Image facts from the header: `(components, subsampling, widths[4], heights[4])`
/// ([nvjpegGetImageInfo]).
///
/// # Safety
/// `h` is a live handle.
///
/// [nvjpegGetImageInfo]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpeggetimageinfo
pub unsafe fn get_image_info(
    lib: &NvjpegLib,
    h: nvjpegHandle_t,
    data: &[u8],
) -> Result<(i32, nvjpegChromaSubsampling_t, [i32; 4], [i32; 4]), GpuError> {
    let (mut n, mut css, mut w, mut ht) = (0, nvjpegChromaSubsampling_t::NVJPEG_CSS_UNKNOWN, [0; 4], [0; 4]);
    // SAFETY: caller's contract for `h`; `data` is valid for its length; the width/height
    // arrays hold NVJPEG_MAX_COMPONENT entries as the API requires.
    check("nvjpegGetImageInfo", unsafe {
        (lib.nvjpegGetImageInfo)(h, data.as_ptr(), data.len(), &mut n, &mut css, w.as_mut_ptr(), ht.as_mut_ptr())
    })?;
    Ok((n, css, w, ht))
}

/// Declares a `create`-style wrapper: out-parameter handle from `(args...)`.
macro_rules! create_fn {
    ($(#[$m:meta])* $name:ident, $call:ident, $out:ty, ($($a:ident: $t:ty),*)) => {
        $(#[$m])*
        ///
        /// # Safety
        /// Handle arguments are live.
        pub unsafe fn $name(lib: &NvjpegLib, $($a: $t),*) -> Result<$out, GpuError> {
            let mut out = MaybeUninit::<$out>::uninit();
            // SAFETY: caller's contract for the handles; `out` is a valid out pointer.
            check(stringify!($call), unsafe { (lib.$call)($($a,)* out.as_mut_ptr()) })?;
            // SAFETY: written on success.
            Ok(unsafe { out.assume_init() })
        }
    };
}

/// Declares a wrapper whose arguments pass straight through.
macro_rules! plain_fn {
    ($(#[$m:meta])* $name:ident, $call:ident, ($($a:ident: $t:ty),*)) => {
        $(#[$m])*
        ///
        /// # Safety
        /// Handle arguments are live; pointers are valid as nvJPEG documents for this call.
        pub unsafe fn $name(lib: &NvjpegLib, $($a: $t),*) -> Result<(), GpuError> {
            // SAFETY: caller's contract.
            check(stringify!($call), unsafe { (lib.$call)($($a),*) })
        }
    };
}

create_fn!(
    /// [nvjpegJpegStateCreate](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstatecreate).
    jpeg_state_create, nvjpegJpegStateCreate, nvjpegJpegState_t, (h: nvjpegHandle_t));
plain_fn!(
    /// [nvjpegJpegStateDestroy](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstatedestroy).
    jpeg_state_destroy, nvjpegJpegStateDestroy, (s: nvjpegJpegState_t));
plain_fn!(
    /// [nvjpegDecodeBatchedInitialize](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedinitialize).
    decode_batched_initialize, nvjpegDecodeBatchedInitialize,
    (h: nvjpegHandle_t, s: nvjpegJpegState_t, batch_size: c_int, max_cpu_threads: c_int, fmt: nvjpegOutputFormat_t));
plain_fn!(
    /// [nvjpegDecodeBatched](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatched):
    /// `data`/`lengths`/`destinations` hold the batch size given at initialisation.
    decode_batched, nvjpegDecodeBatched,
    (h: nvjpegHandle_t, s: nvjpegJpegState_t, data: *const *const u8, lengths: *const usize,
     destinations: *mut nvjpegImage_t, stream: cudaStream_t));
create_fn!(
    /// [nvjpegDecodeBatchedSupported](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedsupported):
    /// 0 means supported.
    decode_batched_supported, nvjpegDecodeBatchedSupported, c_int, (h: nvjpegHandle_t, stream: nvjpegJpegStream_t));
create_fn!(
    /// [nvjpegDecoderCreate](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodercreate).
    decoder_create, nvjpegDecoderCreate, nvjpegJpegDecoder_t, (h: nvjpegHandle_t, backend: nvjpegBackend_t));
plain_fn!(
    /// [nvjpegDecoderDestroy](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecoderdestroy).
    decoder_destroy, nvjpegDecoderDestroy, (d: nvjpegJpegDecoder_t));
create_fn!(
    /// [nvjpegDecoderJpegSupported](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecoderjpegsupported):
    /// 0 means supported.
    decoder_jpeg_supported, nvjpegDecoderJpegSupported, c_int,
    (d: nvjpegJpegDecoder_t, stream: nvjpegJpegStream_t, params: nvjpegDecodeParams_t));
create_fn!(
    /// [nvjpegDecoderStateCreate](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecoderstatecreate).
    decoder_state_create, nvjpegDecoderStateCreate, nvjpegJpegState_t, (h: nvjpegHandle_t, d: nvjpegJpegDecoder_t));
create_fn!(
    /// [nvjpegJpegStreamCreate](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamcreate).
    jpeg_stream_create, nvjpegJpegStreamCreate, nvjpegJpegStream_t, (h: nvjpegHandle_t));
plain_fn!(
    /// [nvjpegJpegStreamDestroy](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamdestroy).
    jpeg_stream_destroy, nvjpegJpegStreamDestroy, (s: nvjpegJpegStream_t));
plain_fn!(
    /// [nvjpegJpegStreamParse](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamparse).
    jpeg_stream_parse, nvjpegJpegStreamParse,
    (h: nvjpegHandle_t, data: *const u8, len: usize, save_metadata: c_int, save_stream: c_int, s: nvjpegJpegStream_t));
plain_fn!(
    /// [nvjpegJpegStreamParseHeader](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamparseheader).
    jpeg_stream_parse_header, nvjpegJpegStreamParseHeader,
    (h: nvjpegHandle_t, data: *const u8, len: usize, s: nvjpegJpegStream_t));
create_fn!(
    /// [nvjpegJpegStreamGetComponentsNum](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamgetcomponentsnum).
    jpeg_stream_components, nvjpegJpegStreamGetComponentsNum, c_uint, (s: nvjpegJpegStream_t));
create_fn!(
    /// [nvjpegJpegStreamGetChromaSubsampling](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamgetchromasubsampling).
    jpeg_stream_subsampling, nvjpegJpegStreamGetChromaSubsampling, nvjpegChromaSubsampling_t, (s: nvjpegJpegStream_t));
create_fn!(
    /// [nvjpegJpegStreamGetJpegEncoding](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamgetjpegencoding).
    jpeg_stream_encoding, nvjpegJpegStreamGetJpegEncoding, nvjpegJpegEncoding_t, (s: nvjpegJpegStream_t));
create_fn!(
    /// [nvjpegDecodeParamsCreate](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamscreate).
    decode_params_create, nvjpegDecodeParamsCreate, nvjpegDecodeParams_t, (h: nvjpegHandle_t));
plain_fn!(
    /// [nvjpegDecodeParamsDestroy](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamsdestroy).
    decode_params_destroy, nvjpegDecodeParamsDestroy, (p: nvjpegDecodeParams_t));
plain_fn!(
    /// [nvjpegDecodeParamsSetOutputFormat](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamssetoutputformat).
    decode_params_set_output_format, nvjpegDecodeParamsSetOutputFormat, (p: nvjpegDecodeParams_t, fmt: nvjpegOutputFormat_t));
plain_fn!(
    /// [nvjpegDecodeParamsSetROI](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamssetroi):
    /// `(0, 0, -1, -1)` decodes the whole image.
    decode_params_set_roi, nvjpegDecodeParamsSetROI, (p: nvjpegDecodeParams_t, x: c_int, y: c_int, w: c_int, h: c_int));
plain_fn!(
    /// [nvjpegDecodeParamsSetAllowCMYK](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamssetallowcmyk).
    decode_params_set_allow_cmyk, nvjpegDecodeParamsSetAllowCMYK, (p: nvjpegDecodeParams_t, allow: c_int));
create_fn!(
    /// [nvjpegBufferPinnedCreate](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinnedcreate)
    /// (null allocator: nvJPEG's default).
    buffer_pinned_create, nvjpegBufferPinnedCreate, nvjpegBufferPinned_t,
    (h: nvjpegHandle_t, alloc: *mut nvjpegPinnedAllocator_t));
plain_fn!(
    /// [nvjpegBufferPinnedDestroy](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinneddestroy).
    buffer_pinned_destroy, nvjpegBufferPinnedDestroy, (b: nvjpegBufferPinned_t));
create_fn!(
    /// [nvjpegBufferDeviceCreate](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdevicecreate)
    /// (null allocator: nvJPEG's default).
    buffer_device_create, nvjpegBufferDeviceCreate, nvjpegBufferDevice_t,
    (h: nvjpegHandle_t, alloc: *mut nvjpegDevAllocator_t));
plain_fn!(
    /// [nvjpegBufferDeviceDestroy](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdevicedestroy).
    buffer_device_destroy, nvjpegBufferDeviceDestroy, (b: nvjpegBufferDevice_t));
plain_fn!(
    /// [nvjpegStateAttachPinnedBuffer](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegstateattachpinnedbuffer).
    state_attach_pinned_buffer, nvjpegStateAttachPinnedBuffer, (s: nvjpegJpegState_t, b: nvjpegBufferPinned_t));
plain_fn!(
    /// [nvjpegStateAttachDeviceBuffer](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegstateattachdevicebuffer).
    state_attach_device_buffer, nvjpegStateAttachDeviceBuffer, (s: nvjpegJpegState_t, b: nvjpegBufferDevice_t));
plain_fn!(
    /// [nvjpegDecodeJpegHost](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodejpeghost):
    /// the CPU phase of the decoupled decode.
    decode_jpeg_host, nvjpegDecodeJpegHost,
    (h: nvjpegHandle_t, d: nvjpegJpegDecoder_t, s: nvjpegJpegState_t, p: nvjpegDecodeParams_t, js: nvjpegJpegStream_t));
plain_fn!(
    /// [nvjpegDecodeJpegTransferToDevice](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodejpegtransfertodevice).
    decode_jpeg_transfer_to_device, nvjpegDecodeJpegTransferToDevice,
    (h: nvjpegHandle_t, d: nvjpegJpegDecoder_t, s: nvjpegJpegState_t, js: nvjpegJpegStream_t, stream: cudaStream_t));
plain_fn!(
    /// [nvjpegDecodeJpegDevice](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodejpegdevice).
    decode_jpeg_device, nvjpegDecodeJpegDevice,
    (h: nvjpegHandle_t, d: nvjpegJpegDecoder_t, s: nvjpegJpegState_t, dst: *mut nvjpegImage_t, stream: cudaStream_t));

/// `(width, height)` of the frame ([nvjpegJpegStreamGetFrameDimensions]).
///
/// # Safety
/// `s` is a live, parsed stream.
///
/// [nvjpegJpegStreamGetFrameDimensions]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamgetframedimensions
pub unsafe fn jpeg_stream_frame_dimensions(lib: &NvjpegLib, s: nvjpegJpegStream_t) -> Result<(u32, u32), GpuError> {
    let (mut w, mut h) = (0, 0);
    // SAFETY: caller's contract; out pointers valid.
    check("nvjpegJpegStreamGetFrameDimensions", unsafe { (lib.nvjpegJpegStreamGetFrameDimensions)(s, &mut w, &mut h) })?;
    Ok((w, h))
}

/// The name of an optional entry point the loaded library lacks, as an error.
fn missing(lib: &NvjpegLib, call: &'static str) -> GpuError {
    GpuError::Nvjpeg {
        call,
        status: nvjpegStatus_t::NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED.0,
        message: format!("{} does not export {call} (nvJPEG older than 12)", lib.path),
    }
}

/// [nvjpegDecodeBatchedSupportedEx](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedsupportedex):
/// 0 means the hardware batched decoder takes this stream with these params.
///
/// # Safety
/// Handles are live; `s` is parsed.
pub unsafe fn decode_batched_supported_ex(
    lib: &NvjpegLib,
    h: nvjpegHandle_t,
    s: nvjpegJpegStream_t,
    p: nvjpegDecodeParams_t,
) -> Result<c_int, GpuError> {
    let f = lib.nvjpegDecodeBatchedSupportedEx.ok_or_else(|| missing(lib, "nvjpegDecodeBatchedSupportedEx"))?;
    let mut out = 0;
    // SAFETY: caller's contract; out pointer valid.
    check("nvjpegDecodeBatchedSupportedEx", unsafe { f(h, s, p, &mut out) })?;
    Ok(out)
}

/// [nvjpegBufferPinnedResize](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinnedresize):
/// grow a pinned buffer to at least `size` bytes now, so a decode does not allocate.
///
/// # Safety
/// `b` is live and not in use by a decode.
pub unsafe fn buffer_pinned_resize(lib: &NvjpegLib, b: nvjpegBufferPinned_t, size: usize, stream: cudaStream_t) -> Result<(), GpuError> {
    let f = lib.nvjpegBufferPinnedResize.ok_or_else(|| missing(lib, "nvjpegBufferPinnedResize"))?;
    // SAFETY: caller's contract.
    check("nvjpegBufferPinnedResize", unsafe { f(b, size, stream) })
}

/// [nvjpegBufferDeviceResize](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdeviceresize):
/// grow a device buffer to at least `size` bytes now.
///
/// # Safety
/// `b` is live and not in use by a decode.
pub unsafe fn buffer_device_resize(lib: &NvjpegLib, b: nvjpegBufferDevice_t, size: usize, stream: cudaStream_t) -> Result<(), GpuError> {
    let f = lib.nvjpegBufferDeviceResize.ok_or_else(|| missing(lib, "nvjpegBufferDeviceResize"))?;
    // SAFETY: caller's contract.
    check("nvjpegBufferDeviceResize", unsafe { f(b, size, stream) })
}

/// [nvjpegDecodeBatchedEx](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedex):
/// batched decode with per-image params (ROI).
///
/// # Safety
/// Handles are live; the arrays hold the batch size given at initialisation; destinations
/// point at device memory large enough for each image.
#[allow(clippy::too_many_arguments)]
pub unsafe fn decode_batched_ex(
    lib: &NvjpegLib,
    h: nvjpegHandle_t,
    s: nvjpegJpegState_t,
    data: *const *const u8,
    lengths: *const usize,
    destinations: *mut nvjpegImage_t,
    params: *mut nvjpegDecodeParams_t,
    stream: cudaStream_t,
) -> Result<(), GpuError> {
    let f = lib.nvjpegDecodeBatchedEx.ok_or_else(|| missing(lib, "nvjpegDecodeBatchedEx"))?;
    // SAFETY: caller's contract.
    check("nvjpegDecodeBatchedEx", unsafe { f(h, s, data, lengths, destinations, params, stream) })
}

/// [nvjpegDecodeBatchedPreAllocate](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedpreallocate):
/// reserve the hardware decoder's memory for `batch` images up to `width × height` up front.
///
/// # Safety
/// Handles are live.
#[allow(clippy::too_many_arguments)]
pub unsafe fn decode_batched_pre_allocate(
    lib: &NvjpegLib,
    h: nvjpegHandle_t,
    s: nvjpegJpegState_t,
    batch: c_int,
    width: c_int,
    height: c_int,
    css: nvjpegChromaSubsampling_t,
    fmt: nvjpegOutputFormat_t,
) -> Result<(), GpuError> {
    let f = lib.nvjpegDecodeBatchedPreAllocate.ok_or_else(|| missing(lib, "nvjpegDecodeBatchedPreAllocate"))?;
    // SAFETY: caller's contract.
    check("nvjpegDecodeBatchedPreAllocate", unsafe { f(h, s, batch, width, height, css, fmt) })
}

/// [nvjpegCreateExV2](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegcreateexv2): a
/// library handle whose device and pinned memory comes from the given allocators.
///
/// # Safety
/// The allocators' functions and contexts stay valid until the handle and everything made from
/// it are destroyed.
pub unsafe fn create_ex_v2(
    lib: &NvjpegLib,
    backend: nvjpegBackend_t,
    dev: &mut nvjpegDevAllocatorV2_t,
    pinned: &mut nvjpegPinnedAllocatorV2_t,
    flags: c_uint,
) -> Result<nvjpegHandle_t, GpuError> {
    let f = lib.nvjpegCreateExV2.ok_or_else(|| missing(lib, "nvjpegCreateExV2"))?;
    let mut h = MaybeUninit::uninit();
    // SAFETY: the allocators are valid structs (the caller's contract for what they point to);
    // `h` is a valid out pointer.
    check("nvjpegCreateExV2", unsafe { f(backend, dev, pinned, flags, h.as_mut_ptr()) })?;
    // SAFETY: written on success.
    Ok(unsafe { h.assume_init() })
}

/// A buffer made with a caller's allocator by `f`, an optional V2 create call named `call`.
///
/// # Safety
/// `h` is live; the allocator's functions and context stay valid until the buffer is destroyed.
unsafe fn buffer_create_v2<A, T>(
    lib: &NvjpegLib,
    call: &'static str,
    f: Option<unsafe extern "C" fn(nvjpegHandle_t, *mut A, *mut T) -> nvjpegStatus_t>,
    h: nvjpegHandle_t,
    alloc: &mut A,
) -> Result<T, GpuError> {
    let f = f.ok_or_else(|| missing(lib, call))?;
    let mut out = MaybeUninit::uninit();
    // SAFETY: caller's contract; `out` is a valid out pointer.
    check(call, unsafe { f(h, alloc, out.as_mut_ptr()) })?;
    // SAFETY: written on success.
    Ok(unsafe { out.assume_init() })
}

/// [nvjpegBufferPinnedCreateV2](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinnedcreatev2).
///
/// # Safety
/// `h` is live; the allocator's functions and context stay valid until the buffer is destroyed.
pub unsafe fn buffer_pinned_create_v2(
    lib: &NvjpegLib,
    h: nvjpegHandle_t,
    alloc: &mut nvjpegPinnedAllocatorV2_t,
) -> Result<nvjpegBufferPinned_t, GpuError> {
    // SAFETY: the caller's contract.
    unsafe { buffer_create_v2(lib, "nvjpegBufferPinnedCreateV2", lib.nvjpegBufferPinnedCreateV2, h, alloc) }
}

/// [nvjpegBufferDeviceCreateV2](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdevicecreatev2).
///
/// # Safety
/// `h` is live; the allocator's functions and context stay valid until the buffer is destroyed.
pub unsafe fn buffer_device_create_v2(
    lib: &NvjpegLib,
    h: nvjpegHandle_t,
    alloc: &mut nvjpegDevAllocatorV2_t,
) -> Result<nvjpegBufferDevice_t, GpuError> {
    // SAFETY: the caller's contract.
    unsafe { buffer_create_v2(lib, "nvjpegBufferDeviceCreateV2", lib.nvjpegBufferDeviceCreateV2, h, alloc) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_own_sentence() {
        let mut seen = std::collections::HashSet::new();
        for s in 0..=10 {
            let text = status_sentence(nvjpegStatus_t(s));
            assert!(text != "unknown nvJPEG status", "status {s}");
            assert!(seen.insert(text), "status {s} shares its sentence");
        }
        assert_eq!(status_sentence(nvjpegStatus_t(77)), "unknown nvJPEG status");
    }

    #[test]
    fn failures_name_the_call_and_the_status() {
        assert!(check("nvjpegDecode", nvjpegStatus_t::NVJPEG_STATUS_SUCCESS).is_ok());
        let e = check("nvjpegDecodeJpegHost", nvjpegStatus_t::NVJPEG_STATUS_BAD_JPEG).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("nvjpegDecodeJpegHost") && msg.contains("not a valid JPEG") && msg.contains("status 3"), "{msg}");
    }
}
