//! Owning nvJPEG types: each frees its object on `Drop`, and each child keeps the library handle
//! it was created from alive (`Arc<NvjpegHandle>`), so destruction order is always right.
//!
//! What stays `unsafe`: calls that write device memory through raw `nvjpegImage_t` pointers
//! (the caller vouches for the allocation) and calls that take a raw CUDA stream.
//!
//! Not yet verified on a GPU: everything beyond loading the library and
//! [`NvjpegHandle::library_version`] was written against the nvJPEG 13.0 documentation on a
//! machine without one.

use super::memory::{NvjpegMemory, NvjpegMemoryStats};
use super::result;
use super::sys::*;
use crate::error::GpuError;
use std::ffi::c_int;
use std::sync::Arc;

/// The loaded library plus one nvJPEG library handle (`nvjpegHandle_t`), made by
/// [nvjpegCreateEx] and freed by [nvjpegDestroy].
///
/// [nvjpegCreateEx]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegcreateex
/// [nvjpegDestroy]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdestroy
#[derive(Debug)]
pub struct NvjpegHandle {
    lib: &'static NvjpegLib,
    raw: nvjpegHandle_t,
    // The allocators nvJPEG was given (`None`: nvJPEG's defaults); dropped after the handle is
    // destroyed, and held by every buffer through the handle.
    memory: Option<Arc<NvjpegMemory>>,
}

// SAFETY: nvJPEG documents the library handle as thread safe; it is only freed in Drop.
unsafe impl Send for NvjpegHandle {}
// SAFETY: as above: concurrent calls on one handle are allowed by nvJPEG.
unsafe impl Sync for NvjpegHandle {}

impl std::fmt::Debug for NvjpegLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvjpegLib").field("path", &self.path).finish_non_exhaustive()
    }
}

impl NvjpegHandle {
    /// Open libnvjpeg (search order in [`NvjpegLib::get`]) and create a handle for `backend`
    /// with `flags` (`NVJPEG_FLAGS_*`) whose memory nvJPEG makes through stoke's counting
    /// allocators ([`super::memory`]); with nvJPEG's defaults where this nvJPEG lacks the V2
    /// calls or refuses the allocators. Needs a GPU.
    pub fn new(backend: nvjpegBackend_t, flags: u32) -> Result<Arc<Self>, GpuError> {
        let lib = NvjpegLib::get()?;
        let mut refused = None;
        let v2 = lib.nvjpegCreateExV2.is_some() && lib.nvjpegBufferPinnedCreateV2.is_some() && lib.nvjpegBufferDeviceCreateV2.is_some();
        if v2 && !super::memory::defaults_asked() {
            let memory = NvjpegMemory::new();
            let (mut dev, mut pinned) = (memory.device_allocator(), memory.pinned_allocator());
            // SAFETY: the allocators' context is `memory`, which the handle holds until after
            // nvjpegDestroy (and every buffer made with it holds the handle).
            match unsafe { result::create_ex_v2(lib, backend, &mut dev, &mut pinned, flags) } {
                Ok(raw) => return Ok(Arc::new(Self { lib, raw, memory: Some(memory) })),
                Err(e) => refused = Some(e),
            }
        }
        let raw = result::create_ex(lib, backend, flags)?;
        if let Some(e) = refused {
            log::info!("nvJPEG refused stoke's allocators for {backend:?} ({e}): its memory there is not counted");
        }
        Ok(Arc::new(Self { lib, raw, memory: None }))
    }

    /// What nvJPEG holds and did through this handle's allocators (`uncounted_handles` 1 when
    /// it has nvJPEG's defaults).
    pub fn memory_stats(&self) -> NvjpegMemoryStats {
        self.memory.as_ref().map_or(NvjpegMemoryStats { uncounted_handles: 1, ..Default::default() }, |m| m.stats())
    }

    /// The version of the loaded library, `(major, minor, patch)`: works without a GPU.
    pub fn library_version() -> Result<(i32, i32, i32), GpuError> {
        result::get_version(NvjpegLib::get()?)
    }

    /// The loaded library's function table.
    pub fn lib(&self) -> &'static NvjpegLib {
        self.lib
    }

    /// The raw handle, for calls this layer does not wrap.
    pub fn raw(&self) -> nvjpegHandle_t {
        self.raw
    }

    /// `(engines, cores per engine)` of the hardware JPEG decoder
    /// ([nvjpegGetHardwareDecoderInfo]); meaningful for a handle made with
    /// `NVJPEG_BACKEND_HARDWARE`.
    ///
    /// [nvjpegGetHardwareDecoderInfo]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpeggethardwaredecoderinfo
    pub fn hardware_decoder_info(&self) -> Result<(u32, u32), GpuError> {
        // SAFETY: `raw` is live while `self` is.
        unsafe { result::hardware_decoder_info(self.lib, self.raw) }
    }

    /// Components, chroma subsampling and per-component sizes from the header
    /// ([nvjpegGetImageInfo]).
    ///
    /// [nvjpegGetImageInfo]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpeggetimageinfo
    pub fn image_info(&self, data: &[u8]) -> Result<(i32, nvjpegChromaSubsampling_t, [i32; 4], [i32; 4]), GpuError> {
        // SAFETY: `raw` is live while `self` is.
        unsafe { result::get_image_info(self.lib, self.raw, data) }
    }
}

impl Drop for NvjpegHandle {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc of this handle, so none outlives it.
        if let Err(e) = unsafe { result::destroy(self.lib, self.raw) } {
            log::warn!("{e}");
        }
    }
}

/// Declares an owning wrapper of a raw nvJPEG object freed by `$destroy`.
macro_rules! owned {
    ($(#[$m:meta])* $vis:vis $name:ident, $raw:ty, $destroy:path) => {
        $(#[$m])*
        #[derive(Debug)]
        $vis struct $name {
            handle: Arc<NvjpegHandle>,
            raw: $raw,
        }

        // SAFETY: the object is used from one thread at a time (&mut for state-changing
        // calls); nvJPEG objects are not tied to the creating thread.
        unsafe impl Send for $name {}

        impl $name {
            /// The raw object, for calls this layer does not wrap.
            #[allow(dead_code)]
            $vis fn raw(&self) -> $raw {
                self.raw
            }

            /// The library handle it was made from.
            #[allow(dead_code)]
            $vis fn handle(&self) -> &Arc<NvjpegHandle> {
                &self.handle
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: `raw` was created from `handle`, which is still alive, and is freed
                // exactly once.
                if let Err(e) = unsafe { $destroy(self.handle.lib, self.raw) } {
                    log::warn!("{e}");
                }
            }
        }
    };
}

owned!(
    /// A decoder for one backend (`nvjpegJpegDecoder_t`): [nvjpegDecoderCreate] /
    /// [nvjpegDecoderDestroy].
    ///
    /// [nvjpegDecoderCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodercreate
    /// [nvjpegDecoderDestroy]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecoderdestroy
    pub Decoder, nvjpegJpegDecoder_t, result::decoder_destroy);
owned!(
    /// Decode state (`nvjpegJpegState_t`), from [nvjpegJpegStateCreate] or
    /// [nvjpegDecoderStateCreate], freed by [nvjpegJpegStateDestroy]. Keeps attached buffers
    /// alive.
    ///
    /// [nvjpegJpegStateCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstatecreate
    /// [nvjpegDecoderStateCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecoderstatecreate
    /// [nvjpegJpegStateDestroy]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstatedestroy
    StateInner, nvjpegJpegState_t, result::jpeg_state_destroy);
owned!(
    /// A parsed JPEG bitstream (`nvjpegJpegStream_t`): [nvjpegJpegStreamCreate] /
    /// [nvjpegJpegStreamDestroy].
    ///
    /// [nvjpegJpegStreamCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamcreate
    /// [nvjpegJpegStreamDestroy]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamdestroy
    pub JpegStream, nvjpegJpegStream_t, result::jpeg_stream_destroy);
owned!(
    /// Decode parameters (`nvjpegDecodeParams_t`): [nvjpegDecodeParamsCreate] /
    /// [nvjpegDecodeParamsDestroy].
    ///
    /// [nvjpegDecodeParamsCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamscreate
    /// [nvjpegDecodeParamsDestroy]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamsdestroy
    pub DecodeParams, nvjpegDecodeParams_t, result::decode_params_destroy);
owned!(
    /// A pinned host buffer for the decoupled decode (`nvjpegBufferPinned_t`):
    /// [nvjpegBufferPinnedCreate] / [nvjpegBufferPinnedDestroy].
    ///
    /// [nvjpegBufferPinnedCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinnedcreate
    /// [nvjpegBufferPinnedDestroy]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinneddestroy
    pub PinnedBuffer, nvjpegBufferPinned_t, result::buffer_pinned_destroy);
owned!(
    /// A device buffer for the decoupled decode (`nvjpegBufferDevice_t`):
    /// [nvjpegBufferDeviceCreate] / [nvjpegBufferDeviceDestroy].
    ///
    /// [nvjpegBufferDeviceCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdevicecreate
    /// [nvjpegBufferDeviceDestroy]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdevicedestroy
    pub DeviceBuffer, nvjpegBufferDevice_t, result::buffer_device_destroy);

// SAFETY: a buffer is only ever used through its raw handle, passed to nvJPEG by a JpegState
// that owns it mutably; nothing reachable through &PinnedBuffer / &DeviceBuffer mutates it.
unsafe impl Sync for PinnedBuffer {}
// SAFETY: as above.
unsafe impl Sync for DeviceBuffer {}

/// A decode state plus the buffers attached to it (dropped after the state).
#[derive(Debug)]
pub struct JpegState {
    inner: StateInner,
    pinned: Option<Arc<PinnedBuffer>>,
    device: Option<Arc<DeviceBuffer>>,
}

impl JpegState {
    /// A state for the simple and batched APIs ([nvjpegJpegStateCreate]).
    ///
    /// [nvjpegJpegStateCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstatecreate
    pub fn new(handle: &Arc<NvjpegHandle>) -> Result<Self, GpuError> {
        // SAFETY: the handle is live.
        let raw = unsafe { result::jpeg_state_create(handle.lib, handle.raw) }?;
        Ok(Self { inner: StateInner { handle: handle.clone(), raw }, pinned: None, device: None })
    }

    /// The raw state.
    pub fn raw(&self) -> nvjpegJpegState_t {
        self.inner.raw
    }

    /// The library handle it was made from.
    pub fn handle(&self) -> &Arc<NvjpegHandle> {
        &self.inner.handle
    }

    /// Attach a pinned buffer ([nvjpegStateAttachPinnedBuffer]); the state keeps it alive.
    ///
    /// [nvjpegStateAttachPinnedBuffer]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegstateattachpinnedbuffer
    pub fn attach_pinned(&mut self, buf: Arc<PinnedBuffer>) -> Result<(), GpuError> {
        // SAFETY: both objects are live; the state holds `buf` from now on.
        unsafe { result::state_attach_pinned_buffer(self.inner.handle.lib, self.inner.raw, buf.raw) }?;
        self.pinned = Some(buf);
        Ok(())
    }

    /// Attach a device buffer ([nvjpegStateAttachDeviceBuffer]); the state keeps it alive.
    ///
    /// [nvjpegStateAttachDeviceBuffer]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegstateattachdevicebuffer
    pub fn attach_device(&mut self, buf: Arc<DeviceBuffer>) -> Result<(), GpuError> {
        // SAFETY: both objects are live; the state holds `buf` from now on.
        unsafe { result::state_attach_device_buffer(self.inner.handle.lib, self.inner.raw, buf.raw) }?;
        self.device = Some(buf);
        Ok(())
    }

    /// Prepare the batched decoder ([nvjpegDecodeBatchedInitialize]) for `batch_size` images
    /// written in `format`.
    ///
    /// [nvjpegDecodeBatchedInitialize]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedinitialize
    pub fn batched_initialize(&mut self, batch_size: usize, max_cpu_threads: usize, format: nvjpegOutputFormat_t) -> Result<(), GpuError> {
        let h = &self.inner.handle;
        // SAFETY: handle and state are live and belong together.
        unsafe { result::decode_batched_initialize(h.lib, h.raw, self.inner.raw, to_int(batch_size)?, to_int(max_cpu_threads)?, format) }
    }

    /// Reserve hardware-decoder memory for `batch` images up to `w × h`
    /// ([nvjpegDecodeBatchedPreAllocate]) so nothing allocates after warm-up.
    ///
    /// [nvjpegDecodeBatchedPreAllocate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedpreallocate
    pub fn batched_pre_allocate(
        &mut self,
        batch: usize,
        w: u32,
        h: u32,
        css: nvjpegChromaSubsampling_t,
        format: nvjpegOutputFormat_t,
    ) -> Result<(), GpuError> {
        let hd = &self.inner.handle;
        // SAFETY: handle and state are live and belong together.
        unsafe {
            result::decode_batched_pre_allocate(
                hd.lib,
                hd.raw,
                self.inner.raw,
                to_int(batch)?,
                to_int(w as usize)?,
                to_int(h as usize)?,
                css,
                format,
            )
        }
    }

    /// Decode a batch ([nvjpegDecodeBatched]) on `stream`.
    ///
    /// [nvjpegDecodeBatched]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatched
    ///
    /// # Safety
    /// `images` and `destinations` have the length given to [`Self::batched_initialize`]; each
    /// destination points at device memory for the whole image in the initialised format;
    /// the bytes stay alive and unchanged until the stream has passed this decode; `stream`
    /// belongs to the current context.
    pub unsafe fn decode_batched(
        &mut self,
        images: &[&[u8]],
        destinations: &mut [nvjpegImage_t],
        stream: cudaStream_t,
    ) -> Result<(), GpuError> {
        if images.len() != destinations.len() {
            return Err(GpuError::Nvjpeg {
                call: "nvjpegDecodeBatched",
                status: nvjpegStatus_t::NVJPEG_STATUS_INVALID_PARAMETER.0,
                message: format!("{} images but {} destinations", images.len(), destinations.len()),
            });
        }
        let ptrs: Vec<*const u8> = images.iter().map(|b| b.as_ptr()).collect();
        let lens: Vec<usize> = images.iter().map(|b| b.len()).collect();
        let h = &self.inner.handle;
        // SAFETY: caller's contract; the pointer/length arrays live across the call.
        unsafe { result::decode_batched(h.lib, h.raw, self.inner.raw, ptrs.as_ptr(), lens.as_ptr(), destinations.as_mut_ptr(), stream) }
    }

    /// Decode a batch with per-image parameters, e.g. a region of interest each
    /// ([nvjpegDecodeBatchedEx]), on `stream`.
    ///
    /// [nvjpegDecodeBatchedEx]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedex
    ///
    /// # Safety
    /// As [`Self::decode_batched`], except that each destination needs room only for what
    /// `params[i]` asks (its region) in the initialised format, and that a
    /// [`Bitstream::Device`] input (for a handle of `NVJPEG_BACKEND_HARDWARE_DEVICE` only) is
    /// `len` written bytes of live device memory of the current context, unchanged until the
    /// decode returns.
    pub unsafe fn decode_batched_ex(
        &mut self,
        images: &[Bitstream<'_>],
        destinations: &mut [nvjpegImage_t],
        params: &[DecodeParams],
        stream: cudaStream_t,
    ) -> Result<(), GpuError> {
        if images.len() != destinations.len() || images.len() != params.len() {
            return Err(GpuError::Nvjpeg {
                call: "nvjpegDecodeBatchedEx",
                status: nvjpegStatus_t::NVJPEG_STATUS_INVALID_PARAMETER.0,
                message: format!("{} images, {} destinations and {} params", images.len(), destinations.len(), params.len()),
            });
        }
        let (ptrs, lens): (Vec<*const u8>, Vec<usize>) = images.iter().map(Bitstream::raw).unzip();
        let mut raw_params: Vec<nvjpegDecodeParams_t> = params.iter().map(|p| p.raw).collect();
        let h = &self.inner.handle;
        // SAFETY: caller's contract; the pointer, length and params arrays live across the
        // call, and every params object is live (borrowed).
        unsafe {
            result::decode_batched_ex(
                h.lib,
                h.raw,
                self.inner.raw,
                ptrs.as_ptr(),
                lens.as_ptr(),
                destinations.as_mut_ptr(),
                raw_params.as_mut_ptr(),
                stream,
            )
        }
    }
}

/// One input of a batched decode: bytes in host memory, or `len` bytes at a device address
/// (what a handle of `NVJPEG_BACKEND_HARDWARE_DEVICE` reads: "supports input bitstream on
/// device memory", nvJPEG docs).
#[derive(Clone, Copy, Debug)]
pub enum Bitstream<'a> {
    /// In host memory (pinned for the hardware engine's DMA, or pageable).
    Host(&'a [u8]),
    /// `len` bytes of device memory at `ptr`; never read on the host.
    Device {
        /// Device address.
        ptr: u64,
        /// Bytes.
        len: usize,
    },
}

impl Bitstream<'_> {
    /// The pointer and length nvJPEG takes.
    fn raw(&self) -> (*const u8, usize) {
        match *self {
            Bitstream::Host(b) => (b.as_ptr(), b.len()),
            Bitstream::Device { ptr, len } => (ptr as *const u8, len),
        }
    }
}

fn to_int(v: usize) -> Result<c_int, GpuError> {
    c_int::try_from(v).map_err(|_| GpuError::Nvjpeg {
        call: "argument",
        status: nvjpegStatus_t::NVJPEG_STATUS_INVALID_PARAMETER.0,
        message: format!("value {v} does not fit a C int"),
    })
}

// SAFETY: nvJPEG's thread-safety section asks for a bitstream (`nvjpegJpegStream_t`), a state
// and buffers of each thread's own; a decoder (`nvjpegJpegDecoder_t`) is not among them, and
// every call here that takes one takes it by `&self` beside a state or bitstream passed `&mut`
// or owned per thread (the CUDA backend's lanes: decode/hybrid.rs).
unsafe impl Sync for Decoder {}

impl Decoder {
    /// A decoder for `backend` ([nvjpegDecoderCreate]).
    ///
    /// [nvjpegDecoderCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodercreate
    pub fn new(handle: &Arc<NvjpegHandle>, backend: nvjpegBackend_t) -> Result<Self, GpuError> {
        // SAFETY: the handle is live.
        let raw = unsafe { result::decoder_create(handle.lib, handle.raw, backend) }?;
        Ok(Self { handle: handle.clone(), raw })
    }

    /// A state for this decoder ([nvjpegDecoderStateCreate]).
    ///
    /// [nvjpegDecoderStateCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecoderstatecreate
    pub fn new_state(&self) -> Result<JpegState, GpuError> {
        // SAFETY: handle and decoder are live.
        let raw = unsafe { result::decoder_state_create(self.handle.lib, self.handle.raw, self.raw) }?;
        Ok(JpegState { inner: StateInner { handle: self.handle.clone(), raw }, pinned: None, device: None })
    }

    /// Whether this decoder takes `stream` with `params` ([nvjpegDecoderJpegSupported]).
    ///
    /// [nvjpegDecoderJpegSupported]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecoderjpegsupported
    pub fn supports(&self, stream: &JpegStream, params: &DecodeParams) -> Result<bool, GpuError> {
        // SAFETY: all objects are live; 0 means supported.
        Ok(unsafe { result::decoder_jpeg_supported(self.handle.lib, self.raw, stream.raw, params.raw) }? == 0)
    }

    /// CPU phase of the decoupled decode ([nvjpegDecodeJpegHost]).
    ///
    /// [nvjpegDecodeJpegHost]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodejpeghost
    pub fn decode_host(&self, state: &mut JpegState, params: &DecodeParams, stream: &JpegStream) -> Result<(), GpuError> {
        // SAFETY: all objects are live; the state was made for this decoder by the caller's
        // construction (nvJPEG reports a mismatch as a status).
        unsafe { result::decode_jpeg_host(self.handle.lib, self.handle.raw, self.raw, state.raw(), params.raw, stream.raw) }
    }

    /// Copy phase ([nvjpegDecodeJpegTransferToDevice]) on `cuda_stream`.
    ///
    /// # Safety
    /// `cuda_stream` is a live stream of the current context.
    ///
    /// [nvjpegDecodeJpegTransferToDevice]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodejpegtransfertodevice
    pub unsafe fn transfer_to_device(&self, state: &mut JpegState, stream: &JpegStream, cuda_stream: cudaStream_t) -> Result<(), GpuError> {
        // SAFETY: objects live; caller's contract for the stream.
        unsafe { result::decode_jpeg_transfer_to_device(self.handle.lib, self.handle.raw, self.raw, state.raw(), stream.raw, cuda_stream) }
    }

    /// GPU phase ([nvjpegDecodeJpegDevice]) writing `dst` on `cuda_stream`.
    ///
    /// # Safety
    /// `dst` points at device memory large enough for the image in the params' output format
    /// and stays allocated until the stream has passed this call.
    ///
    /// [nvjpegDecodeJpegDevice]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodejpegdevice
    pub unsafe fn decode_device(&self, state: &mut JpegState, dst: &mut nvjpegImage_t, cuda_stream: cudaStream_t) -> Result<(), GpuError> {
        // SAFETY: objects live; caller's contract for dst and the stream.
        unsafe { result::decode_jpeg_device(self.handle.lib, self.handle.raw, self.raw, state.raw(), dst, cuda_stream) }
    }
}

/// Header facts read by [`JpegStream::parse_header`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    /// Frame width.
    pub width: u32,
    /// Frame height.
    pub height: u32,
    /// Number of components.
    pub components: u32,
    /// Chroma subsampling.
    pub subsampling: nvjpegChromaSubsampling_t,
    /// SOF coding.
    pub encoding: nvjpegJpegEncoding_t,
}

impl JpegStream {
    /// An empty stream object ([nvjpegJpegStreamCreate]).
    ///
    /// [nvjpegJpegStreamCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamcreate
    pub fn new(handle: &Arc<NvjpegHandle>) -> Result<Self, GpuError> {
        // SAFETY: the handle is live.
        let raw = unsafe { result::jpeg_stream_create(handle.lib, handle.raw) }?;
        Ok(Self { handle: handle.clone(), raw })
    }

    /// Parse the whole bitstream for decoding ([nvjpegJpegStreamParse] with
    /// `save_stream = 1`: nvJPEG keeps its own copy of the bytes, so `data` may be reused as
    /// soon as this returns).
    ///
    /// [nvjpegJpegStreamParse]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamparse
    pub fn parse(&mut self, data: &[u8]) -> Result<(), GpuError> {
        // SAFETY: handle/stream live; data valid for its length. save_stream = 1 makes nvJPEG
        // copy the bytes, so no lifetime ties the stream to `data`.
        unsafe { result::jpeg_stream_parse(self.handle.lib, self.handle.raw, data.as_ptr(), data.len(), 0, 1, self.raw) }
    }

    /// Parse only the header ([nvjpegJpegStreamParseHeader]) and report what it says.
    ///
    /// [nvjpegJpegStreamParseHeader]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegjpegstreamparseheader
    pub fn parse_header(&mut self, data: &[u8]) -> Result<StreamInfo, GpuError> {
        // SAFETY: handle/stream live; data valid for its length.
        unsafe { result::jpeg_stream_parse_header(self.handle.lib, self.handle.raw, data.as_ptr(), data.len(), self.raw) }?;
        self.info()
    }

    /// Facts of the last parsed stream (frame dimensions, components, subsampling, encoding).
    pub fn info(&self) -> Result<StreamInfo, GpuError> {
        let lib = self.handle.lib;
        // SAFETY: the stream is live and was parsed (nvJPEG reports otherwise as a status).
        unsafe {
            let (width, height) = result::jpeg_stream_frame_dimensions(lib, self.raw)?;
            Ok(StreamInfo {
                width,
                height,
                components: result::jpeg_stream_components(lib, self.raw)?,
                subsampling: result::jpeg_stream_subsampling(lib, self.raw)?,
                encoding: result::jpeg_stream_encoding(lib, self.raw)?,
            })
        }
    }

    /// Whether the batched (hardware) decoder takes this stream ([nvjpegDecodeBatchedSupported],
    /// or the `Ex` form with `params` when given and available).
    ///
    /// [nvjpegDecodeBatchedSupported]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodebatchedsupported
    pub fn batched_supported(&self, params: Option<&DecodeParams>) -> Result<bool, GpuError> {
        let h = &self.handle;
        // SAFETY: handle, stream and params are live; 0 means supported.
        let r = unsafe {
            match params {
                Some(p) if h.lib.nvjpegDecodeBatchedSupportedEx.is_some() => {
                    result::decode_batched_supported_ex(h.lib, h.raw, self.raw, p.raw)?
                }
                _ => result::decode_batched_supported(h.lib, h.raw, self.raw)?,
            }
        };
        Ok(r == 0)
    }
}

impl DecodeParams {
    /// Default decode parameters ([nvjpegDecodeParamsCreate]).
    ///
    /// [nvjpegDecodeParamsCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamscreate
    pub fn new(handle: &Arc<NvjpegHandle>) -> Result<Self, GpuError> {
        // SAFETY: the handle is live.
        let raw = unsafe { result::decode_params_create(handle.lib, handle.raw) }?;
        Ok(Self { handle: handle.clone(), raw })
    }

    /// [nvjpegDecodeParamsSetOutputFormat](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamssetoutputformat).
    pub fn set_output_format(&mut self, format: nvjpegOutputFormat_t) -> Result<(), GpuError> {
        // SAFETY: params live.
        unsafe { result::decode_params_set_output_format(self.handle.lib, self.raw, format) }
    }

    /// Decode only `w × h` at `(x, y)`; `None` decodes everything
    /// ([nvjpegDecodeParamsSetROI](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamssetroi)).
    pub fn set_roi(&mut self, roi: Option<(u32, u32, u32, u32)>) -> Result<(), GpuError> {
        let (x, y, w, h) = match roi {
            Some((x, y, w, h)) => (to_int(x as usize)?, to_int(y as usize)?, to_int(w as usize)?, to_int(h as usize)?),
            None => (0, 0, -1, -1),
        };
        // SAFETY: params live.
        unsafe { result::decode_params_set_roi(self.handle.lib, self.raw, x, y, w, h) }
    }

    /// Let nvJPEG decode CMYK/YCCK to RGB
    /// ([nvjpegDecodeParamsSetAllowCMYK](https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegdecodeparamssetallowcmyk)).
    pub fn set_allow_cmyk(&mut self, allow: bool) -> Result<(), GpuError> {
        // SAFETY: params live.
        unsafe { result::decode_params_set_allow_cmyk(self.handle.lib, self.raw, allow as c_int) }
    }
}

impl PinnedBuffer {
    /// A pinned buffer with the handle's allocator ([nvjpegBufferPinnedCreateV2]; nvJPEG's
    /// default through [nvjpegBufferPinnedCreate] where the handle has it).
    ///
    /// [nvjpegBufferPinnedCreateV2]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinnedcreatev2
    /// [nvjpegBufferPinnedCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinnedcreate
    pub fn new(handle: &Arc<NvjpegHandle>) -> Result<Arc<Self>, GpuError> {
        Ok(Arc::new(Self { handle: handle.clone(), raw: Self::create(handle)? }))
    }

    /// The raw buffer, with the handle's allocator when it has stoke's.
    fn create(handle: &Arc<NvjpegHandle>) -> Result<nvjpegBufferPinned_t, GpuError> {
        match &handle.memory {
            // SAFETY: the handle is live; the allocator's context is the handle's memory, which
            // the buffer holds through the handle.
            Some(m) => unsafe { result::buffer_pinned_create_v2(handle.lib, handle.raw, &mut m.pinned_allocator()) },
            // SAFETY: the handle is live; null selects the default allocator.
            None => unsafe { result::buffer_pinned_create(handle.lib, handle.raw, std::ptr::null_mut()) },
        }
    }

    /// A pinned buffer of at least `bytes` from the start ([nvjpegBufferPinnedResize]), so
    /// decodes that fit it allocate nothing.
    ///
    /// [nvjpegBufferPinnedResize]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferpinnedresize
    ///
    /// # Safety
    /// `stream` is a live stream of the current context (nvJPEG may use it for the resize).
    pub unsafe fn with_size(handle: &Arc<NvjpegHandle>, bytes: usize, stream: cudaStream_t) -> Result<Arc<Self>, GpuError> {
        let b = Self { handle: handle.clone(), raw: Self::create(handle)? };
        // SAFETY: the buffer was just made and no decode uses it yet; `stream` is live (the
        // caller's contract).
        unsafe { result::buffer_pinned_resize(handle.lib, b.raw, bytes, stream) }?;
        Ok(Arc::new(b))
    }
}

impl DeviceBuffer {
    /// A device buffer with the handle's allocator ([nvjpegBufferDeviceCreateV2]; nvJPEG's
    /// default through [nvjpegBufferDeviceCreate] where the handle has it).
    ///
    /// [nvjpegBufferDeviceCreateV2]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdevicecreatev2
    /// [nvjpegBufferDeviceCreate]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdevicecreate
    pub fn new(handle: &Arc<NvjpegHandle>) -> Result<Arc<Self>, GpuError> {
        Ok(Arc::new(Self { handle: handle.clone(), raw: Self::create(handle)? }))
    }

    /// The raw buffer, with the handle's allocator when it has stoke's.
    fn create(handle: &Arc<NvjpegHandle>) -> Result<nvjpegBufferDevice_t, GpuError> {
        match &handle.memory {
            // SAFETY: as PinnedBuffer::create.
            Some(m) => unsafe { result::buffer_device_create_v2(handle.lib, handle.raw, &mut m.device_allocator()) },
            // SAFETY: the handle is live; null selects the default allocator.
            None => unsafe { result::buffer_device_create(handle.lib, handle.raw, std::ptr::null_mut()) },
        }
    }

    /// A device buffer of at least `bytes` from the start ([nvjpegBufferDeviceResize]).
    ///
    /// [nvjpegBufferDeviceResize]: https://docs.nvidia.com/cuda/nvjpeg/index.html#nvjpegbufferdeviceresize
    ///
    /// # Safety
    /// `stream` is a live stream of the current context (nvJPEG may use it for the resize).
    pub unsafe fn with_size(handle: &Arc<NvjpegHandle>, bytes: usize, stream: cudaStream_t) -> Result<Arc<Self>, GpuError> {
        let b = Self { handle: handle.clone(), raw: Self::create(handle)? };
        // SAFETY: the buffer was just made and no decode uses it yet; `stream` is live (the
        // caller's contract).
        unsafe { result::buffer_device_resize(handle.lib, b.raw, bytes, stream) }?;
        Ok(Arc::new(b))
    }
}
