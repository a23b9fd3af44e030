//! The augment kernels' scratch on the device, beyond the filter tables: AutoAugment's images,
//! histograms and tables, and the blur's images and kernels, each allocated once (at start-up
//! when the recipe has them, else by the first batch that needs them) and checked against every
//! launch's size.

use super::Augmenter;

/// Device scratch of the AutoAugment kernels: two uint8 images per sample, a histogram and
/// three tables per sample (for the batch size and output size of the first batch with ops).
pub(super) struct AutoScratch {
    pub(super) img: cudarc::driver::CudaSlice<u8>,
    pub(super) hist: cudarc::driver::CudaSlice<u32>,
    pub(super) luts: cudarc::driver::CudaSlice<u8>,
    samples: usize,
    pixels: u64,
}

impl AutoScratch {
    /// Bytes of the images (two uint8 RGB per sample), histograms (4 × 256 u32 per sample)
    /// and tables (3 × 256 per sample) for up to `samples` outputs of `pixels` pixels in all.
    pub(super) fn bytes(samples: usize, pixels: u64) -> [u64; 3] {
        let s = samples as u64;
        [2 * pixels * 3, s * 1024 * 4, s * 768]
    }

    /// Device bytes this scratch holds (it may be for more samples than the plan's batch).
    pub(super) fn device_bytes(&self) -> u64 {
        Self::bytes(self.samples, self.pixels).iter().sum()
    }
}

/// Room a launch of `n` images of `out` needs, and whether `(samples, pixels)` holds it.
fn scratch_holds(samples: usize, pixels: u64, n: usize, out: (u32, u32)) -> bool {
    n <= samples && n as u64 * out.0 as u64 * out.1 as u64 <= pixels
}

impl Augmenter {
    pub(super) fn auto_scratch(&self, n: usize, out: (u32, u32)) -> Result<&AutoScratch, crate::error::GpuError> {
        use super::super::device::alloc_err;
        let stream = &self.alloc_stream;
        if self.auto.get().is_none() {
            let samples = self.plan.batch.max(n).max(1);
            let pixels = self.plan.pixels.max(n as u64 * out.0 as u64 * out.1 as u64).max(1);
            let [img_bytes, hist_bytes, lut_bytes] = AutoScratch::bytes(samples, pixels).map(|b| b as usize);
            // SAFETY: written by stoke_auto_base / stoke_auto_step before any read.
            let img = unsafe { stream.alloc::<u8>(img_bytes) }.map_err(|e| alloc_err("cuMemAlloc", e, img_bytes, "AutoAugment images"))?;
            let hist = unsafe { stream.alloc::<u32>(hist_bytes / 4) }
                .map_err(|e| alloc_err("cuMemAlloc", e, hist_bytes, "AutoAugment histograms"))?;
            let luts = unsafe { stream.alloc::<u8>(lut_bytes) }.map_err(|e| alloc_err("cuMemAlloc", e, lut_bytes, "AutoAugment tables"))?;
            let _ = self.auto.set(AutoScratch { img, hist, luts, samples, pixels });
        }
        let a = self.auto.get().expect("set above");
        if !scratch_holds(a.samples, a.pixels, n, out) {
            let message =
                format!("AutoAugment scratch is for {} images of {} pixels in all, the launch has {n} of {out:?}", a.samples, a.pixels);
            return Err(crate::error::GpuError::Cuda { call: "cuLaunchKernel", message });
        }
        Ok(a)
    }
}

/// Passes `stoke_blur_pass` is launched for (`STOKE_BLUR_PASSES`: Pillow's 3 + 3; a GAUSS
/// sample runs 2 and skips the rest).
pub(super) const BLUR_PASSES: i32 = 6;

/// Device scratch of the blur kernels: two uint8 images per sample, an f32 image per sample
/// (torchvision's horizontal pass) and each sample's 1-D kernel.
pub(super) struct BlurScratch {
    pub(super) img: cudarc::driver::CudaSlice<u8>,
    pub(super) hor: cudarc::driver::CudaSlice<f32>,
    pub(super) weights: cudarc::driver::CudaSlice<f32>,
    samples: usize,
    pixels: u64,
    /// `hor` holds an f32 image per sample (else one float: no sample may use torchvision's kernel).
    gauss: bool,
}

impl BlurScratch {
    /// Bytes of the uint8 images, the f32 images (when `gauss`) and the kernels for up to
    /// `samples` outputs of `pixels` pixels in all.
    pub(super) fn bytes(samples: usize, pixels: u64, gauss: bool) -> [u64; 3] {
        let (s, px) = (samples as u64, pixels * 3);
        [2 * px, if gauss { 4 * px } else { 4 }, 4 * s * crate::augment::params::BLUR_KMAX as u64]
    }

    /// Device bytes this scratch holds.
    pub(super) fn device_bytes(&self) -> u64 {
        Self::bytes(self.samples, self.pixels, self.gauss).iter().sum()
    }
}

impl Augmenter {
    /// The blur scratch, allocated on first use for `n` samples of `out` (with the f32 images
    /// when `gauss`); an error naming the sizes when an allocated one is too small.
    pub(super) fn blur_scratch(&self, n: usize, out: (u32, u32), gauss: bool) -> Result<&BlurScratch, crate::error::GpuError> {
        use super::super::device::alloc_err;
        let stream = &self.alloc_stream;
        if self.blur.get().is_none() {
            let samples = self.plan.batch.max(n).max(1);
            let pixels = self.plan.pixels.max(n as u64 * out.0 as u64 * out.1 as u64).max(1);
            let [img_bytes, hor_bytes, w_bytes] = BlurScratch::bytes(samples, pixels, gauss).map(|b| b as usize);
            // SAFETY: written by stoke_blur_base / stoke_blur_weights / stoke_blur_pass before
            // any read, on the producer stream.
            let img = unsafe { stream.alloc::<u8>(img_bytes) }.map_err(|e| alloc_err("cuMemAlloc", e, img_bytes, "blur images"))?;
            // SAFETY: as above.
            let hor =
                unsafe { stream.alloc::<f32>(hor_bytes / 4) }.map_err(|e| alloc_err("cuMemAlloc", e, hor_bytes, "blur f32 images"))?;
            // SAFETY: as above.
            let weights = unsafe { stream.alloc::<f32>(w_bytes / 4) }.map_err(|e| alloc_err("cuMemAlloc", e, w_bytes, "blur kernels"))?;
            let _ = self.blur.set(BlurScratch { img, hor, weights, samples, pixels, gauss });
        }
        let b = self.blur.get().expect("set above");
        if !scratch_holds(b.samples, b.pixels, n, out) || (gauss && !b.gauss) {
            let message = format!(
                "blur scratch is for {} images of {} pixels in all{}, the launch has {n} of {out:?}{}",
                b.samples,
                b.pixels,
                if b.gauss { "" } else { " without torchvision's f32 images" },
                if gauss { " with torchvision's kernel" } else { "" }
            );
            return Err(crate::error::GpuError::Cuda { call: "cuLaunchKernel", message });
        }
        Ok(b)
    }
}
