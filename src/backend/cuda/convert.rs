//! Convert a batch of decoded u8 RGB images (HWC, each with its own pointer, size and row
//! stride) into one contiguous normalized batch: `(x/255 − mean)/std` in f32, stored as f32,
//! f16 or bf16 (round to nearest even), in NCHW or NHWC. Useful on its own for pre-decoded
//! inputs, and the first kernel launched through [`super::module`].
//!
//! Images smaller than the batch's `out_w × out_h` are placed at the top left and padded with
//! 0 (in every dtype) to the right and below; an image larger than the batch is an error.
//!
//! The per-pixel math is `stoke_convert_pixel` in `kernels/convert.cuh`; [`convert_u8_batch_host`]
//! runs that same function on the CPU (compiled by build.rs), and the GPU result is compared
//! with it bit for bit (tests/gpu_convert.rs).
//!
//! Not yet verified on a GPU: [`Converter`] was written against cudarc 0.19.10 on a machine
//! without one. The host path is tested here against a plain Rust reference.

use super::device::{alloc_err, Gpu};
use super::module::{grid_2d, launch, BLOCK_2D};
use crate::config::{DType, Layout};
use crate::error::{Error, Result};
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtrMut, DeviceRepr, PushKernelArg, ValidAsZeroBits};
use std::sync::Arc;

/// One source image as the kernel sees it (`StokeConvertSrc` in `kernels/convert.cuh`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ConvertSrc {
    /// Address of pixel (0, 0): device memory for [`Converter`], host memory for the host path.
    pub data: u64,
    /// Width in pixels.
    pub width: i32,
    /// Height in rows.
    pub height: i32,
    /// Bytes from one row to the next (≥ 3·width).
    pub stride: i32,
    /// Keeps the C layout explicit (24 bytes, 8-aligned); always 0.
    pub pad_: i32,
}

/// Per-channel mean and std on the 0..1 scale (`StokeNormalize`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Normalize {
    /// Subtracted after scaling to 0..1.
    pub mean: [f32; 3],
    /// Divided by after subtracting the mean.
    pub std: [f32; 3],
}

// SAFETY: both are #[repr(C)] plain data with the same layout as the kernel's structs
// (asserted on both sides); the kernel reads them by value or through a device pointer.
unsafe impl DeviceRepr for ConvertSrc {}
// SAFETY: as above.
unsafe impl DeviceRepr for Normalize {}
// SAFETY: all-zero bytes are a valid ConvertSrc (integers only).
unsafe impl ValidAsZeroBits for ConvertSrc {}

/// A decoded image in host memory: HWC RGB, `stride` bytes per row.
#[derive(Clone, Copy, Debug)]
pub struct HostImage<'a> {
    /// The pixels; at least `stride·(height−1) + 3·width` bytes.
    pub data: &'a [u8],
    /// Width in pixels.
    pub width: u32,
    /// Height in rows.
    pub height: u32,
    /// Bytes per row.
    pub stride: usize,
}

/// The shape of a convert output: images, size, dtype, layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvertShape {
    /// Output width (every image is padded to it).
    pub out_w: u32,
    /// Output height.
    pub out_h: u32,
    /// Element type.
    pub dtype: DType,
    /// NCHW or NHWC.
    pub layout: Layout,
}

impl ConvertShape {
    /// Bytes of the output for `n` images.
    pub fn bytes(&self, n: usize) -> usize {
        n * 3 * self.out_w as usize * self.out_h as usize * self.dtype.size()
    }
}

fn bad(msg: String) -> Error {
    Error::config(format!("convert: {msg}"))
}

/// Check one image's geometry against the batch; `len` is the bytes available when known.
fn check_image(i: usize, w: u32, h: u32, stride: usize, len: Option<usize>, shape: &ConvertShape) -> Result<ConvertSrc> {
    if w == 0 || h == 0 {
        return Err(bad(format!("image {i} is empty ({w}x{h})")));
    }
    if w > shape.out_w || h > shape.out_h {
        return Err(bad(format!("image {i} is {w}x{h}, larger than the batch's {}x{}", shape.out_w, shape.out_h)));
    }
    if stride < 3 * w as usize || stride > i32::MAX as usize {
        return Err(bad(format!("image {i}: row stride {stride} is not in 3*width ({})..=2^31-1", 3 * w)));
    }
    let need = stride * (h as usize - 1) + 3 * w as usize;
    if let Some(len) = len {
        if len < need {
            return Err(bad(format!("image {i} ({w}x{h}, stride {stride}) needs {need} bytes, got {len}")));
        }
    }
    Ok(ConvertSrc { data: 0, width: w as i32, height: h as i32, stride: stride as i32, pad_: 0 })
}

fn check_shape(shape: &ConvertShape) -> Result<()> {
    if shape.out_w == 0 || shape.out_h == 0 {
        return Err(bad(format!("output size must be at least 1x1, got {}x{}", shape.out_w, shape.out_h)));
    }
    Ok(())
}

mod ffi {
    use super::{ConvertSrc, Normalize};
    extern "C" {
        pub fn stoke_host_convert_u8(
            srcs: *const ConvertSrc,
            n: u32,
            out: *mut u8,
            out_w: u32,
            out_h: u32,
            dtype: u32,
            layout: u32,
            norm: *const Normalize,
        );
        #[cfg_attr(not(test), allow(dead_code))] // the layout test
        pub fn stoke_host_convert_src_size() -> usize;
    }
}

/// The convert kernel's math run on the CPU (the host build of `kernels/convert.cuh`): the
/// output bytes (f32/f16/bf16 little-endian elements) for `images`.
pub fn convert_u8_batch_host(images: &[HostImage<'_>], shape: ConvertShape, norm: &Normalize) -> Result<Vec<u8>> {
    check_shape(&shape)?;
    let srcs = images
        .iter()
        .enumerate()
        .map(|(i, im)| {
            let mut s = check_image(i, im.width, im.height, im.stride, Some(im.data.len()), &shape)?;
            s.data = im.data.as_ptr() as u64;
            Ok(s)
        })
        .collect::<Result<Vec<_>>>()?;
    let n = u32::try_from(images.len()).map_err(|_| bad(format!("{} images is too many", images.len())))?;
    // u32 elements keep the buffer 4-aligned for the f32 stores.
    let mut out = vec![0u32; shape.bytes(images.len()).div_ceil(4)];
    // SAFETY: every src points at a live slice holding the bytes check_image required; `out`
    // holds n·3·out_h·out_w elements of the dtype; `norm` is a valid struct.
    unsafe {
        ffi::stoke_host_convert_u8(
            srcs.as_ptr(),
            n,
            out.as_mut_ptr().cast(),
            shape.out_w,
            shape.out_h,
            shape.dtype.code(),
            shape.layout.code(),
            norm,
        )
    };
    let mut bytes: Vec<u8> = bytemuck::cast_slice(&out).to_vec();
    bytes.truncate(shape.bytes(images.len()));
    Ok(bytes)
}

/// A decoded image in device memory (e.g. an nvJPEG RGBI output plane).
#[derive(Clone, Copy, Debug)]
pub struct DeviceImage {
    /// Device address of pixel (0, 0).
    pub ptr: u64,
    /// Width in pixels.
    pub width: u32,
    /// Height in rows.
    pub height: u32,
    /// Bytes per row.
    pub stride: usize,
}

/// The convert kernel bound to a device, with its descriptor buffer sized once for
/// `max_images` (nothing allocates per batch).
#[derive(Debug)]
pub struct Converter {
    gpu: Arc<Gpu>,
    func: CudaFunction,
    srcs: CudaSlice<ConvertSrc>,
    host_srcs: Vec<ConvertSrc>,
}

/// The kernel's name in `kernels/convert.cu`.
pub const CONVERT_KERNEL: &str = "stoke_convert_u8";

impl Converter {
    /// Look the kernel up and allocate room for `max_images` descriptors.
    pub fn new(gpu: &Arc<Gpu>, max_images: usize) -> Result<Self> {
        let func = gpu.kernels()?.function(CONVERT_KERNEL)?;
        let srcs = gpu
            .stream()
            .alloc_zeros::<ConvertSrc>(max_images.max(1))
            .map_err(|e| alloc_err("cuMemAlloc", e, max_images * 24, "convert descriptors"))?;
        Ok(Self { gpu: gpu.clone(), func, srcs, host_srcs: Vec::with_capacity(max_images) })
    }

    /// Convert `images` into `out` (at least `shape.bytes(images.len())` bytes) on the
    /// device's stream. Asynchronous: synchronise the stream before reading `out` on the host.
    ///
    /// # Safety
    /// Each image's `ptr` addresses `stride·(height−1) + 3·width` readable bytes of device
    /// memory in this context that stay allocated and unchanged until the stream has passed
    /// this launch.
    pub unsafe fn run(&mut self, images: &[DeviceImage], shape: ConvertShape, norm: &Normalize, out: &mut CudaSlice<u8>) -> Result<()> {
        check_shape(&shape)?;
        if images.is_empty() {
            return Ok(());
        }
        if images.len() > self.srcs.len() {
            return Err(bad(format!("{} images exceed the converter's capacity of {}", images.len(), self.srcs.len())));
        }
        if images.len() > 65535 {
            return Err(bad(format!("{} images exceed the grid's z limit of 65535", images.len())));
        }
        if out.len() < shape.bytes(images.len()) {
            return Err(bad(format!("output buffer holds {} bytes, the batch needs {}", out.len(), shape.bytes(images.len()))));
        }
        self.host_srcs.clear();
        for (i, im) in images.iter().enumerate() {
            let mut s = check_image(i, im.width, im.height, im.stride, None, &shape)?;
            s.data = im.ptr;
            self.host_srcs.push(s);
        }
        let stream = self.gpu.stream().clone();
        let n = images.len();
        let mut dst = self.srcs.slice_mut(..n);
        stream.memcpy_htod(&self.host_srcs, &mut dst).map_err(|e| super::device::cuda_err("cuMemcpyHtoDAsync", e))?;
        let (w, h, dtype, layout) = (shape.out_w, shape.out_h, shape.dtype.code(), shape.layout.code());
        let (out_ptr, _guard) = out.device_ptr_mut(&stream);
        let mut b = stream.launch_builder(&self.func);
        // Arguments in kernels/convert.cu order.
        b.arg(&self.srcs).arg(&out_ptr).arg(&w).arg(&h).arg(&dtype).arg(&layout).arg(norm);
        // SAFETY: argument list matches stoke_convert_u8; descriptors were copied for n images
        // on this stream before the launch; `out` holds the whole batch (checked above); the
        // image pointers are the caller's contract.
        unsafe { launch(&mut b, CONVERT_KERNEL, grid_2d(w, h, n as u32, BLOCK_2D)) }?;
        Ok(())
    }
}

/// Convert host images on the GPU in one call: upload, launch, download (for tests and tools;
/// the pipeline uses [`Converter`] on decoded device images).
pub fn convert_u8_batch(gpu: &Arc<Gpu>, images: &[HostImage<'_>], shape: ConvertShape, norm: &Normalize) -> Result<Vec<u8>> {
    check_shape(&shape)?;
    for (i, im) in images.iter().enumerate() {
        check_image(i, im.width, im.height, im.stride, Some(im.data.len()), &shape)?;
    }
    let stream = gpu.stream().clone();
    let dev: Vec<CudaSlice<u8>> = images
        .iter()
        .map(|im| stream.clone_htod(im.data).map_err(|e| alloc_err("cuMemAlloc", e, im.data.len(), "a convert source image")))
        .collect::<std::result::Result<_, _>>()?;
    let bytes = shape.bytes(images.len());
    let mut out = stream.alloc_zeros::<u8>(bytes.max(1)).map_err(|e| alloc_err("cuMemAlloc", e, bytes, "the convert output"))?;
    let mut conv = Converter::new(gpu, images.len())?;
    let guards: Vec<_> = dev.iter().map(|d| cudarc::driver::DevicePtr::device_ptr(d, &stream)).collect();
    let dimages: Vec<DeviceImage> = images
        .iter()
        .zip(&guards)
        .map(|(im, (ptr, _))| DeviceImage { ptr: *ptr, width: im.width, height: im.height, stride: im.stride })
        .collect();
    // SAFETY: each pointer is a live device copy of the host image (same length, checked
    // above), kept alive by `dev` until after the synchronising download below.
    unsafe { conv.run(&dimages, shape, norm, &mut out) }?;
    drop(guards);
    let mut host = stream.clone_dtoh(&out).map_err(|e| super::device::cuda_err("cuMemcpyDtoH", e))?;
    stream.synchronize().map_err(|e| super::device::cuda_err("cuStreamSynchronize", e))?;
    host.truncate(bytes);
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn descriptor_layout_matches_the_c_struct() {
        // SAFETY: returns a constant.
        assert_eq!(unsafe { ffi::stoke_host_convert_src_size() }, std::mem::size_of::<ConvertSrc>());
        assert_eq!(std::mem::size_of::<ConvertSrc>(), 24);
        assert_eq!(std::mem::size_of::<Normalize>(), 24);
    }

    /// Deterministic pseudo-random bytes (xorshift), so every value 0..=255 shows up.
    fn pixels(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2654435761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x >> 24) as u8
            })
            .collect()
    }

    /// The plain reference: written from the definition, not from the kernel's code.
    fn reference(images: &[HostImage<'_>], shape: ConvertShape, norm: &Normalize) -> Vec<u8> {
        let (w, h) = (shape.out_w as usize, shape.out_h as usize);
        let mut vals = vec![0f32; images.len() * 3 * w * h];
        for (n, im) in images.iter().enumerate() {
            for y in 0..h {
                for x in 0..w {
                    for c in 0..3 {
                        let v = if x < im.width as usize && y < im.height as usize {
                            let b = im.data[y * im.stride + 3 * x + c] as f32;
                            (b / 255.0 - norm.mean[c]) / norm.std[c]
                        } else {
                            0.0
                        };
                        let idx = match shape.layout {
                            Layout::Nchw => ((n * 3 + c) * h + y) * w + x,
                            Layout::Nhwc => ((n * h + y) * w + x) * 3 + c,
                        };
                        vals[idx] = v;
                    }
                }
            }
        }
        match shape.dtype {
            DType::F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::F16 => vals.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect(),
            DType::Bf16 => vals.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect(),
        }
    }

    #[test]
    fn host_build_matches_the_reference_bit_for_bit() {
        // Odd sizes, a padded stride, a smaller image padded into the batch, and 1x1.
        let sizes = [(7u32, 5u32, 21usize), (6, 3, 25), (1, 1, 3), (7, 5, 32)];
        let bufs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &(_, h, s))| pixels(s * h as usize, i as u32 + 1)).collect();
        let images: Vec<HostImage> =
            sizes.iter().zip(&bufs).map(|(&(w, h, stride), d)| HostImage { data: d, width: w, height: h, stride }).collect();
        let norms = [
            Normalize { mean: crate::config::IMAGENET_MEAN, std: crate::config::IMAGENET_STD },
            Normalize { mean: [0.0; 3], std: [1.0; 3] },
            Normalize { mean: [0.5, 0.25, 1.0], std: [0.5, 2.0, 0.003] },
        ];
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            for layout in [Layout::Nchw, Layout::Nhwc] {
                for norm in &norms {
                    let shape = ConvertShape { out_w: 7, out_h: 5, dtype, layout };
                    let got = convert_u8_batch_host(&images, shape, norm).unwrap();
                    let want = reference(&images, shape, norm);
                    assert_eq!(got.len(), shape.bytes(images.len()));
                    assert!(
                        got == want,
                        "{dtype:?} {layout:?} {norm:?}: first difference at byte {:?}",
                        got.iter().zip(&want).position(|(a, b)| a != b)
                    );
                }
            }
        }
    }

    #[test]
    fn every_byte_value_converts_as_the_formula_says() {
        let data: Vec<u8> = (0..=255u8).flat_map(|v| [v, 255 - v, v / 3]).collect();
        let im = HostImage { data: &data, width: 256, height: 1, stride: 768 };
        let norm = Normalize { mean: crate::config::IMAGENET_MEAN, std: crate::config::IMAGENET_STD };
        let shape = ConvertShape { out_w: 256, out_h: 1, dtype: DType::F32, layout: Layout::Nhwc };
        let got = convert_u8_batch_host(&[im], shape, &norm).unwrap();
        assert_eq!(got, reference(&[im], shape, &norm));
        // Hand check of one value: (255/255 − 0.485)/0.229 = 2.2489083...
        let v = f32::from_le_bytes(got[255 * 12..255 * 12 + 4].try_into().unwrap());
        assert!((v - 2.248_908_3).abs() < 1e-6, "{v}");
    }

    #[test]
    fn bad_geometry_is_an_error_naming_the_image() {
        let data = vec![0u8; 30];
        let norm = Normalize { mean: [0.0; 3], std: [1.0; 3] };
        let shape = ConvertShape { out_w: 4, out_h: 4, dtype: DType::F16, layout: Layout::Nchw };
        let ok = HostImage { data: &data, width: 2, height: 2, stride: 6 };
        let cases = [
            (HostImage { width: 5, ..ok }, "image 1 is 5x2, larger than the batch's 4x4"),
            (HostImage { stride: 5, ..ok }, "image 1: row stride 5"),
            (HostImage { height: 0, ..ok }, "image 1 is empty"),
            (HostImage { data: &data[..10], height: 3, ..ok }, "image 1 (2x3, stride 6) needs 18 bytes, got 10"),
        ];
        for (bad_im, want) in cases {
            let e = convert_u8_batch_host(&[ok, bad_im], shape, &norm).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = convert_u8_batch_host(&[ok], ConvertShape { out_w: 0, ..shape }, &norm).unwrap_err().to_string();
        assert!(e.contains("at least 1x1, got 0x4"), "{e}");
    }
}
