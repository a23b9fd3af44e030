//! The kernels' per-element math compiled for the host (`kernels/host/*.cpp`, built by
//! `build.rs`), so the CPU backend and CI run the exact source the GPU runs.

mod ffi {
    use crate::augment::AugParams;

    /// The whole-image augment's signature, once for each build of it (one per ISA).
    macro_rules! whole_image_augment {
        ($($(#[$m:meta])* $name:ident;)*) => {$(
            $(#[$m])*
            #[allow(clippy::too_many_arguments)]
            pub fn $name(
                src: *const u8,
                stored_w: i32,
                stored_h: i32,
                region_x: i32,
                region_y: i32,
                region_w: i32,
                region_h: i32,
                row_stride: i64,
                p: *const AugParams,
                mean: *const f32,
                std: *const f32,
                dtype: u32,
                layout: u32,
                out: *mut u8,
                n: u64,
                scratch: *mut u8,
                scratch_bytes: usize,
            ) -> i32;
        )*};
    }

    extern "C" {
        pub fn stoke_host_f32_to_f16(f: f32) -> u16;
        pub fn stoke_host_f32_to_bf16(f: f32) -> u16;
        pub fn stoke_host_has_f16c() -> i32;
        pub fn stoke_host_f16_run(src: *const f32, dst: *mut u16, n: usize);
        pub fn stoke_host_f16_run_portable(src: *const f32, dst: *mut u16, n: usize);
        pub fn stoke_host_f16_run_f16c(src: *const f32, dst: *mut u16, n: usize) -> i32;
        pub fn stoke_host_bf16_run(src: *const f32, dst: *mut u16, n: usize);
        pub fn stoke_host_normalize_run(src: *const f32, mean: f32, std: f32, dst: *mut f32, n: usize);
        pub fn stoke_host_normalize_f16_run(src: *const f32, mean: f32, std: f32, dst: *mut u16, n: usize, tmp: *mut f32);
        pub fn stoke_host_normalize_bf16_run(src: *const f32, mean: f32, std: f32, dst: *mut u16, n: usize, tmp: *mut f32);
        pub fn stoke_host_normalize(x255: f32, mean: f32, std: f32) -> f32;
        pub fn stoke_host_params_size() -> usize;
        pub fn stoke_host_augment_scratch(p: *const AugParams) -> usize;
        whole_image_augment! {
            stoke_host_augment;
            /// `stoke_host_augment` compiled for AVX2 (kernels/host/augment_host_avx2.cpp).
            #[cfg(target_arch = "x86_64")]
            stoke_host_augment_avx2;
        }
        pub fn stoke_host_orient_to_stored(o: u32, x: i32, y: i32, w: i32, h: i32, sx: *mut i32, sy: *mut i32);
        pub fn stoke_host_axis(
            in_size: i32,
            out_size: i32,
            i: i32,
            filter: u32,
            aa: u32,
            taps: *mut i32,
            weights: *mut f32,
            cap: i32,
        ) -> i32;
        pub fn stoke_host_window_flip(p: *const AugParams, x: i32, y: i32, rx: *mut i32, ry: *mut i32);
        pub fn stoke_host_resized_pixel(src: *const u8, row_stride: i64, p: *const AugParams, rx: i32, ry: i32, out3: *mut f32);
        pub fn stoke_host_sincos_deg(deg: f32, s: *mut f64, c: *mut f64);
        pub fn stoke_host_rotate_src(p: *const AugParams, x: i32, y: i32, fx: *mut f32, fy: *mut f32) -> u32;
        pub fn stoke_host_params_check(p: *const AugParams, stored_w: i32, stored_h: i32) -> i32;
        pub fn stoke_host_out_index(layout: u32, n: u64, c: i32, y: i32, x: i32, h: i32, w: i32) -> u64;
    }
}

use super::spec::OutputSpec;
use super::AugParams;

/// Why a parameter set cannot be applied to an image: the `STOKE_PARAMS_*` codes of
/// `stoke_params_check` and `stoke_host_augment` (kernels/augment_math.cuh), by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ParamsProblem {
    /// EXIF orientation outside 1..=8.
    BadOrientation = 1,
    /// The params were drawn for another image size.
    SourceSize = 2,
    /// The crop box is not inside the oriented image.
    CropOutside = 3,
    /// A zero or negative resize size.
    ResizeEmpty = 4,
    /// The output window is not inside the resized crop.
    WindowOutside = 5,
    /// An unknown filter or rotation interpolation code.
    UnknownInterp = 6,
    /// A NaN or infinite rotation angle.
    AngleNotFinite = 7,
    /// An unknown blur kind, a sigma outside (0, 1024], or an even or too large kernel.
    BadBlur = 8,
    /// The caller's scratch is too small (`stoke_host_augment`; a bug, never input).
    ScratchTooSmall = -1,
    /// The decoded region does not hold the crop box (`stoke_host_augment`).
    RegionMissesCrop = -2,
}

impl ParamsProblem {
    /// The problem a C-side code names (`None` for 0 and unknown codes).
    pub fn from_code(code: i32) -> Option<Self> {
        use ParamsProblem::*;
        [
            BadOrientation,
            SourceSize,
            CropOutside,
            ResizeEmpty,
            WindowOutside,
            UnknownInterp,
            AngleNotFinite,
            BadBlur,
            ScratchTooSmall,
            RegionMissesCrop,
        ]
        .into_iter()
        .find(|p| *p as i32 == code)
    }
}

/// Why a parameter set cannot be applied to an image (`stoke_params_check`'s `code`).
pub fn params_problem(code: i32, p: &AugParams, stored_w: i32, stored_h: i32) -> String {
    use ParamsProblem::*;
    match ParamsProblem::from_code(code) {
        Some(BadOrientation) => format!("exif orientation must be 1..=8, got {}", p.orientation),
        Some(SourceSize) => format!(
            "params are for a {}x{} oriented image but the decoded image is {stored_w}x{stored_h} stored with orientation {}",
            p.src_w, p.src_h, p.orientation
        ),
        Some(CropOutside) => {
            format!("crop box {}x{} at ({}, {}) is not inside the {}x{} image", p.crop_w, p.crop_h, p.crop_x, p.crop_y, p.src_w, p.src_h)
        }
        Some(ResizeEmpty) => format!("resize size must be positive, got {}x{}", p.resize_w, p.resize_h),
        Some(WindowOutside) => format!(
            "output window {}x{} at ({}, {}) is not inside the {}x{} resized crop",
            p.out_w, p.out_h, p.win_x, p.win_y, p.resize_w, p.resize_h
        ),
        Some(UnknownInterp) => format!("unknown filter {} or rotation interpolation {}", p.filter, p.rot_interp),
        Some(AngleNotFinite) => format!("rotation angle must be finite, got {}", p.angle_deg),
        Some(BadBlur) => format!(
            "blur kind {} needs a sigma in (0, {}] and an odd kernel of at most {}, got sigma {} kernel {}",
            p.blur.kind,
            crate::augment::params::BLUR_SIGMA_MAX,
            crate::augment::params::BLUR_KMAX,
            p.blur.sigma,
            p.blur.ksize
        ),
        Some(ScratchTooSmall) => "augment scratch too small (a bug in stoke)".to_string(),
        Some(RegionMissesCrop) => format!(
            "the decoded region does not hold the crop box {}x{} at ({}, {}) (orientation {})",
            p.crop_w, p.crop_h, p.crop_x, p.crop_y, p.orientation
        ),
        None => format!("augment math returned code {code}"),
    }
}

/// `stoke_params_check`: 0 when `p` fits a stored `stored_w × stored_h` image.
pub fn params_check(p: &AugParams, stored_w: i32, stored_h: i32) -> i32 {
    // SAFETY: `p` is a valid reference to a #[repr(C)] struct the C side mirrors (size
    // asserted on both sides); the function only reads it.
    unsafe { ffi::stoke_host_params_check(p, stored_w, stored_h) }
}

/// Reusable scratch memory for [`augment`] (8-byte aligned; grows to the largest need and
/// then stays, so steady state allocates nothing).
#[derive(Default, Debug)]
pub struct Scratch(Vec<u64>);

/// One decoded image (interleaved RGB as stored, before EXIF orientation), or the region of
/// it that holds the crop box.
#[derive(Clone, Copy, Debug)]
pub struct SrcImage<'a> {
    /// Pixels of the region, `row_stride` bytes per row.
    pub rgb: &'a [u8],
    /// Stored width of the whole image.
    pub width: i32,
    /// Stored height of the whole image.
    pub height: i32,
    /// The region `rgb` holds: `(x, y, w, h)` in stored pixels.
    pub region: (i32, i32, i32, i32),
    /// Bytes per row of the region (>= 3·region width).
    pub row_stride: usize,
}

impl<'a> SrcImage<'a> {
    /// A whole image, rows packed.
    pub fn full(rgb: &'a [u8], width: i32, height: i32) -> Self {
        Self { rgb, width, height, region: (0, 0, width, height), row_stride: width.max(0) as usize * 3 }
    }

    fn check(&self) -> Result<(), String> {
        let (x, y, w, h) = self.region;
        if w <= 0 || h <= 0 || x < 0 || y < 0 || x > self.width - w || y > self.height - h {
            return Err(format!("region {w}x{h} at ({x}, {y}) is not inside the {}x{} image", self.width, self.height));
        }
        let need = (h as usize - 1) * self.row_stride + w as usize * 3;
        if self.row_stride < w as usize * 3 || self.rgb.len() < need {
            return Err(format!(
                "decoded buffer holds {} bytes, a {w}x{h} region with row stride {} needs {need}",
                self.rgb.len(),
                self.row_stride
            ));
        }
        Ok(())
    }
}

/// The instruction set the whole-image augment runs on: the same source compiled twice, the
/// same f32 operations in the same order (no FMA contraction in either), so the same bits;
/// only the vector width of the compiler's loops differs (tests/cpu_isa.rs checks it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// The x86-64 baseline (SSE2), or the target's default elsewhere.
    Baseline,
    /// AVX2 (x86-64-v3), where the CPU has it.
    Avx2,
}

impl Isa {
    /// Its name, as `STOKE_CPU_ISA` and `stoke doctor` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            Isa::Avx2 => "avx2",
        }
    }

    /// Whether this CPU can run it.
    pub fn available(self) -> bool {
        match self {
            Isa::Baseline => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 => false,
        }
    }
}

/// The ISA picked for `STOKE_CPU_ISA`'s value on a CPU with (or without) AVX2, and a warning
/// when the value cannot be honoured. Unset or `auto`: the best the CPU has.
pub fn pick_isa(env: Option<&str>, avx2: bool) -> (Isa, Option<String>) {
    let best = if avx2 { Isa::Avx2 } else { Isa::Baseline };
    match env.map(str::trim) {
        None | Some("") | Some("auto") => (best, None),
        Some("baseline") => (Isa::Baseline, None),
        Some("avx2") if avx2 => (Isa::Avx2, None),
        Some("avx2") => (Isa::Baseline, Some("STOKE_CPU_ISA=avx2, but this CPU has no AVX2: the augment runs on the baseline ISA".into())),
        Some(other) => (best, Some(format!("STOKE_CPU_ISA={other:?} is not one of auto, baseline, avx2: using {}", best.name()))),
    }
}

/// The ISA the CPU backend's augment runs on in this process: picked once, from
/// `STOKE_CPU_ISA` (`auto`, `baseline` or `avx2`) and the CPU.
pub fn augment_isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        let (isa, warning) = pick_isa(std::env::var("STOKE_CPU_ISA").ok().as_deref(), Isa::Avx2.available());
        if let Some(w) = warning {
            log::warn!("{w}");
        }
        isa
    })
}

/// Augment `src` with `p` into sample `n` of the batch tensor `out` (the bytes of an
/// `N × 3 × out_h × out_w` tensor of `spec.dtype` in `spec.layout`), through the shared
/// kernel math (`stoke_host_augment`) on [`augment_isa`]. Errors say what does not fit.
pub fn augment(src: SrcImage<'_>, p: &AugParams, spec: &OutputSpec, out: &mut [u8], n: usize, scratch: &mut Scratch) -> Result<(), String> {
    augment_on(augment_isa(), src, p, spec, out, n, scratch)
}

/// [`augment`] on a given ISA (an error if this CPU lacks it): for tests and benches that
/// compare them.
pub fn augment_on(
    isa: Isa,
    src: SrcImage<'_>,
    p: &AugParams,
    spec: &OutputSpec,
    out: &mut [u8],
    n: usize,
    scratch: &mut Scratch,
) -> Result<(), String> {
    if !isa.available() {
        return Err(format!("this CPU cannot run the {} augment", isa.name()));
    }
    let code = params_check(p, src.width, src.height);
    if code != 0 {
        return Err(params_problem(code, p, src.width, src.height));
    }
    src.check()?;
    let sample_bytes = 3 * p.out_w as usize * p.out_h as usize * spec.dtype.size();
    if out.len() < (n + 1) * sample_bytes {
        return Err(format!("output holds {} bytes, sample {n} needs {}", out.len(), (n + 1) * sample_bytes));
    }
    // SAFETY: `p` was checked consistent just above; the C side only reads it.
    let need = unsafe { ffi::stoke_host_augment_scratch(p) };
    let words = need.div_ceil(8);
    if scratch.0.len() < words {
        scratch.0.resize(words, 0);
    }
    let entry = match isa {
        Isa::Baseline => ffi::stoke_host_augment,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => ffi::stoke_host_augment_avx2,
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 => unreachable!("Isa::Avx2 is never available off x86-64"),
    };
    // SAFETY: `src.rgb` covers the whole region (checked above); the math only reads pixels of
    // the crop box, which `params_check` placed inside the image and the C side checks to be
    // inside the region (else it returns −2 without reading); `out` holds sample `n` in full
    // (checked above) and only that sample is written; scratch holds `need` bytes, 8-byte
    // aligned; mean/std point at three f32 each; the AVX2 entry runs only where the CPU has
    // AVX2 (checked above).
    let rc = unsafe {
        entry(
            src.rgb.as_ptr(),
            src.width,
            src.height,
            src.region.0,
            src.region.1,
            src.region.2,
            src.region.3,
            src.row_stride as i64,
            p,
            spec.mean.as_ptr(),
            spec.std.as_ptr(),
            spec.dtype.code(),
            spec.layout.code(),
            out.as_mut_ptr(),
            n as u64,
            scratch.0.as_mut_ptr() as *mut u8,
            scratch.0.len() * 8,
        )
    };
    match rc {
        0 => Ok(()),
        c if c == ParamsProblem::RegionMissesCrop as i32 => {
            Err(format!("{} (decoded region {:?})", params_problem(c, p, src.width, src.height), src.region))
        }
        c => Err(params_problem(c, p, src.width, src.height)),
    }
}

/// Oriented pixel `(x, y)` of an oriented `w × h` image → stored pixel, for EXIF tag `o`.
pub fn orient_to_stored(o: u32, x: i32, y: i32, w: i32, h: i32) -> (i32, i32) {
    let (mut sx, mut sy) = (0, 0);
    // SAFETY: pure function writing two i32 through valid references.
    unsafe { ffi::stoke_host_orient_to_stored(o, x, y, w, h, &mut sx, &mut sy) };
    (sx, sy)
}

/// Resize taps of output index `i` (`in_size` → `out_size`): source indices and weights.
pub fn axis_taps(in_size: i32, out_size: i32, i: i32, filter: u32, antialias: bool) -> (Vec<i32>, Vec<f32>) {
    let mut cap = 16;
    loop {
        let mut taps = vec![0i32; cap];
        let mut w = vec![0f32; cap];
        // SAFETY: both buffers hold `cap` elements and the C side writes at most `cap`.
        let n =
            unsafe { ffi::stoke_host_axis(in_size, out_size, i, filter, antialias as u32, taps.as_mut_ptr(), w.as_mut_ptr(), cap as i32) }
                as usize;
        if n <= cap {
            taps.truncate(n);
            w.truncate(n);
            return (taps, w);
        }
        cap = n;
    }
}

/// Window + flip: pre-rotation output pixel → resized-crop pixel.
pub fn window_flip(p: &AugParams, x: i32, y: i32) -> (i32, i32) {
    let (mut rx, mut ry) = (0, 0);
    // SAFETY: reads `p`, writes two i32 through valid references.
    unsafe { ffi::stoke_host_window_flip(p, x, y, &mut rx, &mut ry) };
    (rx, ry)
}

/// One resized-crop pixel computed per pixel (the GPU kernel's form of the resize).
/// `src` must hold the whole stored image described by `p` (checked).
pub fn resized_pixel(src: SrcImage<'_>, p: &AugParams, rx: i32, ry: i32) -> Result<[f32; 3], String> {
    let code = params_check(p, src.width, src.height);
    if code != 0 {
        return Err(params_problem(code, p, src.width, src.height));
    }
    if rx < 0 || ry < 0 || rx >= p.resize_w || ry >= p.resize_h {
        return Err(format!("pixel ({rx}, {ry}) is outside the {}x{} resized crop", p.resize_w, p.resize_h));
    }
    if src.region != (0, 0, src.width, src.height) {
        return Err("the per-pixel form reads whole images only".into());
    }
    src.check()?;
    let mut out = [0f32; 3];
    // SAFETY: params checked, pixel inside the resized crop so every tap is inside the crop
    // box and so inside the buffer (checked); writes three f32.
    unsafe { ffi::stoke_host_resized_pixel(src.rgb.as_ptr(), src.row_stride as i64, p, rx, ry, out.as_mut_ptr()) };
    Ok(out)
}

/// `sin`, `cos` of an angle in degrees as the kernels compute them.
pub fn sincos_deg(deg: f32) -> (f64, f64) {
    let (mut s, mut c) = (0f64, 0f64);
    // SAFETY: pure function writing two f64 through valid references.
    unsafe { ffi::stoke_host_sincos_deg(deg, &mut s, &mut c) };
    (s, c)
}

/// Rotation of output pixel `(x, y)`: `(kind, fx, fy)` with kind 0 none, 1 exact quarter
/// turn (integer source), 2 affine (continuous source).
pub fn rotate_src(p: &AugParams, x: i32, y: i32) -> (u32, f32, f32) {
    let (mut fx, mut fy) = (0f32, 0f32);
    // SAFETY: reads `p`, writes two f32 through valid references.
    let k = unsafe { ffi::stoke_host_rotate_src(p, x, y, &mut fx, &mut fy) };
    (k, fx, fy)
}

/// Element index of `(n, c, y, x)` in an `N×3×h×w` tensor of `layout`.
pub fn out_index(layout: super::spec::Layout, n: u64, c: i32, y: i32, x: i32, h: i32, w: i32) -> u64 {
    // SAFETY: pure function of its arguments.
    unsafe { ffi::stoke_host_out_index(layout.code(), n, c, y, x, h, w) }
}

/// binary16 bits of `f`, round to nearest even (`stoke_f32_to_f16_bits`).
pub fn f32_to_f16_bits(f: f32) -> u16 {
    // SAFETY: pure function of its argument, no pointers.
    unsafe { ffi::stoke_host_f32_to_f16(f) }
}

/// bfloat16 bits of `f`, round to nearest even (`stoke_f32_to_bf16_bits`).
pub fn f32_to_bf16_bits(f: f32) -> u16 {
    // SAFETY: pure function of its argument, no pointers.
    unsafe { ffi::stoke_host_f32_to_bf16(f) }
}

/// Whether this CPU has the F16C conversion the host's f16 output path uses
/// (checked at run time; the library is built for the baseline ISA).
pub fn has_f16c() -> bool {
    // SAFETY: no arguments; reads CPU feature flags.
    unsafe { ffi::stoke_host_has_f16c() != 0 }
}

/// `dst[i] = f32_to_f16_bits(src[i])` for a run of values, by the fastest form this CPU has
/// (the CPU backend's output path). Panics if `dst` is shorter than `src`.
pub fn f16_run(src: &[f32], dst: &mut [u16]) {
    assert!(dst.len() >= src.len(), "f16 run: {} values into {} slots", src.len(), dst.len());
    // SAFETY: reads `src.len()` f32 and writes as many u16, both inside the slices.
    unsafe { ffi::stoke_host_f16_run(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// [`f16_run`] by its portable branch-free form, whatever the CPU.
pub fn f16_run_portable(src: &[f32], dst: &mut [u16]) {
    assert!(dst.len() >= src.len(), "f16 run: {} values into {} slots", src.len(), dst.len());
    // SAFETY: reads `src.len()` f32 and writes as many u16, both inside the slices.
    unsafe { ffi::stoke_host_f16_run_portable(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// [`f16_run`] by the F16C instruction; `false` (nothing written) when this CPU lacks it.
pub fn f16_run_f16c(src: &[f32], dst: &mut [u16]) -> bool {
    assert!(dst.len() >= src.len(), "f16 run: {} values into {} slots", src.len(), dst.len());
    // SAFETY: reads `src.len()` f32 and writes as many u16, both inside the slices.
    unsafe { ffi::stoke_host_f16_run_f16c(src.as_ptr(), dst.as_mut_ptr(), src.len()) == 0 }
}

/// `dst[i] = f32_to_bf16_bits(src[i])` for a run of values (branch-free form).
pub fn bf16_run(src: &[f32], dst: &mut [u16]) {
    assert!(dst.len() >= src.len(), "bf16 run: {} values into {} slots", src.len(), dst.len());
    // SAFETY: reads `src.len()` f32 and writes as many u16, both inside the slices.
    unsafe { ffi::stoke_host_bf16_run(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// `dst[i] = normalize(src[i], mean, std)` for a run of values (the CPU backend's vectorized
/// form). Panics if `dst` is shorter than `src`.
pub fn normalize_run(src: &[f32], mean: f32, std: f32, dst: &mut [f32]) {
    assert!(dst.len() >= src.len(), "normalize run: {} values into {} slots", src.len(), dst.len());
    // SAFETY: reads `src.len()` f32 and writes as many, both inside the slices.
    unsafe { ffi::stoke_host_normalize_run(src.as_ptr(), mean, std, dst.as_mut_ptr(), src.len()) }
}

/// `dst[i] = f32_to_f16_bits(normalize(src[i], mean, std))` for a run of values (the CPU
/// backend's fused form). Panics if `dst` is shorter than `src`.
pub fn normalize_f16_run(src: &[f32], mean: f32, std: f32, dst: &mut [u16]) {
    assert!(dst.len() >= src.len(), "normalize run: {} values into {} slots", src.len(), dst.len());
    let mut tmp = vec![0f32; src.len()];
    // SAFETY: reads `src.len()` f32, writes as many u16 into `dst` and f32 into `tmp`, all
    // inside their slices.
    unsafe { ffi::stoke_host_normalize_f16_run(src.as_ptr(), mean, std, dst.as_mut_ptr(), src.len(), tmp.as_mut_ptr()) }
}

/// `dst[i] = f32_to_bf16_bits(normalize(src[i], mean, std))` for a run of values (the CPU
/// backend's fused form). Panics if `dst` is shorter than `src`.
pub fn normalize_bf16_run(src: &[f32], mean: f32, std: f32, dst: &mut [u16]) {
    assert!(dst.len() >= src.len(), "normalize run: {} values into {} slots", src.len(), dst.len());
    let mut tmp = vec![0f32; src.len()];
    // SAFETY: reads `src.len()` f32, writes as many u16 into `dst` and f32 into `tmp`, all
    // inside their slices.
    unsafe { ffi::stoke_host_normalize_bf16_run(src.as_ptr(), mean, std, dst.as_mut_ptr(), src.len(), tmp.as_mut_ptr()) }
}

/// `(x/255 − mean)/std` as the kernels compute it (`stoke_normalize`).
pub fn normalize(x255: f32, mean: f32, std: f32) -> f32 {
    // SAFETY: pure function of its arguments, no pointers.
    unsafe { ffi::stoke_host_normalize(x255, mean, std) }
}

/// `sizeof(StokeAugParams)` as the C++ side sees it.
pub fn params_size() -> usize {
    // SAFETY: no arguments, returns a constant.
    unsafe { ffi::stoke_host_params_size() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each named problem is what the C side returns for params broken that way (the enum and
    /// the header's STOKE_PARAMS_* codes agree).
    #[test]
    fn params_problems_match_the_c_codes() {
        let spec = crate::augment::spec::AugmentSpec::train(32);
        let good = crate::augment::params::draw(&spec, 1, 0, 0, 120, 80, 1);
        assert_eq!(params_check(&good, 120, 80), 0);
        let blur = |kind, ksize, sigma| crate::augment::params::BlurParams { kind, ksize, sigma, ..Default::default() };
        let cases: [(ParamsProblem, AugParams); 11] = [
            (ParamsProblem::BadOrientation, AugParams { orientation: 9, ..good }),
            (ParamsProblem::SourceSize, AugParams { src_w: 121, ..good }),
            (ParamsProblem::CropOutside, AugParams { crop_x: 120, ..good }),
            (ParamsProblem::ResizeEmpty, AugParams { resize_w: 0, ..good }),
            (ParamsProblem::WindowOutside, AugParams { win_x: good.resize_w, ..good }),
            (ParamsProblem::UnknownInterp, AugParams { filter: 99, ..good }),
            (ParamsProblem::AngleNotFinite, AugParams { angle_deg: f32::NAN, ..good }),
            (ParamsProblem::BadBlur, AugParams { blur: blur(3, 0, 1.0), ..good }),
            (ParamsProblem::BadBlur, AugParams { blur: blur(1, 4, 1.0), ..good }),
            (ParamsProblem::BadBlur, AugParams { blur: blur(1, 129, 1.0), ..good }),
            (ParamsProblem::BadBlur, AugParams { blur: blur(2, 0, 1e9), ..good }),
        ];
        for (want, p) in cases {
            let code = params_check(&p, 120, 80);
            assert_eq!(ParamsProblem::from_code(code), Some(want), "code {code}");
            assert!(!params_problem(code, &p, 120, 80).contains("returned code"), "{want:?} has its own sentence");
        }
        assert_eq!(ParamsProblem::from_code(0), None);
    }

    #[test]
    fn params_struct_has_the_same_size_on_both_sides() {
        assert_eq!(params_size(), std::mem::size_of::<crate::augment::AugParams>());
    }

    /// Reference: the `half` crate's conversions (an independent implementation), over every
    /// f32 bit pattern on a stride plus the edge cases around rounding ties.
    #[test]
    fn f16_and_bf16_rounding_match_an_independent_implementation() {
        let check = |bits: u32| {
            let f = f32::from_bits(bits);
            let h = half::f16::from_f32(f).to_bits();
            let b = half::bf16::from_f32(f).to_bits();
            if f.is_nan() {
                assert!(half::f16::from_bits(f32_to_f16_bits(f)).is_nan());
                assert!(half::bf16::from_bits(f32_to_bf16_bits(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16_bits(f), h, "f16 of {f:e} ({bits:#x})");
                assert_eq!(f32_to_bf16_bits(f), b, "bf16 of {f:e} ({bits:#x})");
            }
        };
        let mut bits = 0u32;
        while let Some(n) = bits.checked_add(4099) {
            check(bits);
            bits = n;
        }
        for e in 0u32..256 {
            for m in [0u32, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0x18000, 0x7fffff] {
                check((e << 23) | m);
                check(0x8000_0000 | (e << 23) | m);
            }
        }
    }

    /// The sweep of the test above as one list: every f32 bit pattern on a stride of 4099,
    /// the rounding-tie edges of every exponent (so half subnormals, the overflow threshold,
    /// ±0, ±inf and NaNs with assorted payloads are all in), both signs.
    fn sweep() -> Vec<f32> {
        let mut v = Vec::new();
        let mut bits = 0u32;
        while let Some(n) = bits.checked_add(4099) {
            v.push(f32::from_bits(bits));
            bits = n;
        }
        for e in 0u32..256 {
            for m in [0u32, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0x18000, 0x400000, 0x7fffff] {
                v.push(f32::from_bits((e << 23) | m));
                v.push(f32::from_bits(0x8000_0000 | (e << 23) | m));
            }
        }
        // Around the largest finite half (65504), the overflow threshold (65520) and the
        // smallest subnormal / normal halves, densely.
        for centre in [0x477f_e000u32, 0x477f_f000, 0x3380_0000, 0x3300_0000, 0x3880_0000, 0x387f_e000] {
            for d in 0..0x2000u32 {
                for b in [centre.wrapping_sub(d), centre + d] {
                    v.push(f32::from_bits(b));
                    v.push(f32::from_bits(b | 0x8000_0000));
                }
            }
        }
        v
    }

    /// The run forms the CPU backend writes with must give exactly the scalar function's bits
    /// (the device's), NaNs included, and so the `half` crate's value for every non-NaN.
    /// Every start offset and a few lengths exercise the 8-wide body and the tails.
    #[test]
    fn f16_and_bf16_runs_match_the_scalar_functions_bit_for_bit() {
        let v = sweep();
        let want16: Vec<u16> = v.iter().map(|&f| f32_to_f16_bits(f)).collect();
        let want_b: Vec<u16> = v.iter().map(|&f| f32_to_bf16_bits(f)).collect();
        for (i, &f) in v.iter().enumerate() {
            if f.is_nan() {
                assert_eq!(want16[i], (f.to_bits() >> 16) as u16 & 0x8000 | 0x7e00, "f16 nan {:#x}", f.to_bits());
            } else {
                assert_eq!(want16[i], half::f16::from_f32(f).to_bits(), "f16 of {f:e} ({:#x})", f.to_bits());
            }
        }
        let check = |name: &str, got: &[u16], want: &[u16], src: &[f32]| {
            for i in 0..src.len() {
                assert_eq!(got[i], want[i], "{name} of {:e} ({:#x})", src[i], src[i].to_bits());
            }
        };
        let mut got = vec![0u16; v.len()];
        f16_run(&v, &mut got);
        check("f16_run", &got, &want16, &v);
        got.fill(0);
        f16_run_portable(&v, &mut got);
        check("f16_run_portable", &got, &want16, &v);
        got.fill(0);
        if f16_run_f16c(&v, &mut got) {
            check("f16_run_f16c", &got, &want16, &v);
        } else {
            assert!(!has_f16c());
            eprintln!("this CPU has no f16c: the f16c form is not exercised");
        }
        got.fill(0);
        bf16_run(&v, &mut got);
        check("bf16_run", &got, &want_b, &v);
        // Short runs at every alignment: the vector body, the scalar tail, and n = 0.
        for start in 0..9 {
            for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 40] {
                let src = &v[start * 1000..start * 1000 + len];
                let want = &want16[start * 1000..start * 1000 + len];
                let mut out = vec![0xabcdu16; len + 1];
                f16_run(src, &mut out);
                check("f16_run (short)", &out, want, src);
                assert_eq!(out[len], 0xabcd, "f16_run wrote past the end of a {len}-value run");
                if f16_run_f16c(src, &mut out) {
                    check("f16_run_f16c (short)", &out, want, src);
                    assert_eq!(out[len], 0xabcd);
                }
                f16_run_portable(src, &mut out);
                check("f16_run_portable (short)", &out, want, src);
                bf16_run(src, &mut out);
                check("bf16_run (short)", &out, &want_b[start * 1000..start * 1000 + len], src);
                assert_eq!(out[len], 0xabcd);
            }
        }
    }

    /// The run forms of normalize (and normalize + f16 / bf16 cast) give the scalar function's bits:
    /// every 0..255 value and values between them, zero std (±inf and NaN results), odd
    /// lengths for the tails.
    #[test]
    fn normalize_runs_match_the_scalar_function_bit_for_bit() {
        let mut src: Vec<f32> = (0..=255u32).map(|x| x as f32).collect();
        src.extend((0..2000u32).map(|i| i as f32 * 0.1277));
        src.extend([0.0, -0.0, 255.0, 1e-40, f32::NAN, f32::INFINITY]);
        for (mean, std) in [(0.485f32, 0.229f32), (0.456, 0.224), (0.0, 1.0), (0.5, 0.0), (0.0, -0.0), (1.0, 3e-38)] {
            for len in [src.len(), 1, 7, 8, 13, 0] {
                let s = &src[src.len() - len..];
                let mut got = vec![0f32; len + 1];
                normalize_run(s, mean, std, &mut got);
                let mut got16 = vec![0xabcdu16; len + 1];
                normalize_f16_run(s, mean, std, &mut got16);
                for (i, &x) in s.iter().enumerate() {
                    let want = normalize(x, mean, std);
                    assert_eq!(got[i].to_bits(), want.to_bits(), "normalize({x}, {mean}, {std})");
                    assert_eq!(got16[i], f32_to_f16_bits(want), "f16 of normalize({x}, {mean}, {std})");
                }
                assert_eq!(got16[len], 0xabcd, "normalize_f16_run wrote past the end");
                let mut got_b = vec![0xabcdu16; len + 1];
                normalize_bf16_run(s, mean, std, &mut got_b);
                for (i, &x) in s.iter().enumerate() {
                    let want = f32_to_bf16_bits(normalize(x, mean, std));
                    assert_eq!(got_b[i], want, "bf16 of normalize({x}, {mean}, {std})");
                }
                assert_eq!(got_b[len], 0xabcd, "normalize_bf16_run wrote past the end");
            }
        }
    }

    #[test]
    fn normalize_matches_the_written_formula() {
        for x in 0..=255u8 {
            let want = (x as f32 / 255.0 - 0.485) / 0.229;
            assert_eq!(normalize(x as f32, 0.485, 0.229).to_bits(), want.to_bits());
        }
    }
}
