//! What the augmentation and the output tensor are: the spec the per-sample parameters are drawn
//! from ([`super::params::draw`]) and the output the math writes. The math depends on this and on
//! nothing of the pipeline; `config` re-exports it as part of [`crate::PipelineConfig`].

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The kernels' `STOKE_FILTER_BILINEAR`: bilinear resize.
pub const FILTER_BILINEAR: u32 = 0;
/// The kernels' `STOKE_FILTER_BICUBIC`: bicubic (a = −0.5 when antialiased, as Pillow/torchvision).
pub const FILTER_BICUBIC: u32 = 1;
/// The kernels' `STOKE_ROT_NEAREST`: nearest rotation sampling (torchvision's default for `rotate`).
pub const ROT_NEAREST: u32 = 0;
/// The kernels' `STOKE_ROT_BILINEAR`: bilinear rotation sampling.
pub const ROT_BILINEAR: u32 = 1;

/// Resize filter (the kernels' `STOKE_FILTER_*`). Config files say `"bilinear"`/`"bicubic"`;
/// the numeric codes older configs hold (0, 1) are still read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Filter {
    /// Triangle filter (torchvision's bilinear; antialiased when downscaling).
    #[default]
    Bilinear,
    /// Cubic convolution, a = −0.5 antialiased (Pillow/torchvision).
    Bicubic,
}

impl Filter {
    /// The kernels' code.
    pub fn code(self) -> u32 {
        match self {
            Filter::Bilinear => FILTER_BILINEAR,
            Filter::Bicubic => FILTER_BICUBIC,
        }
    }
}

/// Rotation sampling (the kernels' `STOKE_ROT_*`). Config files say `"nearest"`/`"bilinear"`;
/// the numeric codes (0, 1) are still read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum RotateInterp {
    /// Nearest source pixel (torchvision's default for rotate).
    #[default]
    Nearest,
    /// Bilinear.
    Bilinear,
}

impl RotateInterp {
    /// The kernels' code.
    pub fn code(self) -> u32 {
        match self {
            RotateInterp::Nearest => ROT_NEAREST,
            RotateInterp::Bilinear => ROT_BILINEAR,
        }
    }
}

/// A name or a legacy numeric code, as config files hold them.
#[derive(Deserialize)]
#[serde(untagged)]
enum NameOrCode {
    Name(String),
    Code(u32),
}

fn from_name_or_code<'de, D: serde::Deserializer<'de>, T>(d: D, what: &str, names: &[(&str, u32, T)]) -> std::result::Result<T, D::Error>
where
    T: Copy,
{
    let v = NameOrCode::deserialize(d)?;
    names
        .iter()
        .find(|(n, c, _)| match &v {
            NameOrCode::Name(s) => s == n,
            NameOrCode::Code(x) => x == c,
        })
        .map(|e| e.2)
        .ok_or_else(|| {
            let got = match v {
                NameOrCode::Name(s) => format!("{s:?}"),
                NameOrCode::Code(c) => c.to_string(),
            };
            let want: Vec<String> = names.iter().map(|(n, c, _)| format!("{n:?} ({c})")).collect();
            serde::de::Error::custom(format!("{what} must be one of {}, got {got}", want.join(", ")))
        })
}

impl<'de> Deserialize<'de> for Filter {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        from_name_or_code(d, "filter", &[("bilinear", FILTER_BILINEAR, Filter::Bilinear), ("bicubic", FILTER_BICUBIC, Filter::Bicubic)])
    }
}

impl<'de> Deserialize<'de> for RotateInterp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        from_name_or_code(
            d,
            "rotate_interp",
            &[("nearest", ROT_NEAREST, RotateInterp::Nearest), ("bilinear", ROT_BILINEAR, RotateInterp::Bilinear)],
        )
    }
}

/// RandomErasing fill (timm's `remode`; the kernels' `STOKE_ERASE_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum EraseMode {
    /// Zeros on the normalized scale (the dataset's mean color).
    #[default]
    Const,
    /// One standard-normal value per box and channel.
    Rand,
    /// One standard-normal value per erased element.
    Pixel,
}

impl EraseMode {
    /// The kernels' code.
    pub fn code(self) -> u32 {
        self as u32
    }
    /// The mode of a kernel code (unknown codes read as `Const`).
    pub fn from_code(c: u32) -> Self {
        match c {
            1 => EraseMode::Rand,
            2 => EraseMode::Pixel,
            _ => EraseMode::Const,
        }
    }
    /// timm's name.
    pub fn name(self) -> &'static str {
        match self {
            EraseMode::Const => "const",
            EraseMode::Rand => "rand",
            EraseMode::Pixel => "pixel",
        }
    }
}

/// torchvision's `ColorJitter(brightness, contrast, saturation, hue)` as factor ranges, applied
/// with probability `prob` (timm's `--color-jitter-prob`; 1 = always). A `None` range is a step
/// torchvision skips (its value was 0). The order of the four steps is drawn per sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColorJitterSpec {
    /// Brightness factor range.
    pub brightness: Option<(f32, f32)>,
    /// Contrast factor range.
    pub contrast: Option<(f32, f32)>,
    /// Saturation factor range.
    pub saturation: Option<(f32, f32)>,
    /// Hue shift range in turns, within `[-0.5, 0.5]`.
    pub hue: Option<(f32, f32)>,
    /// Probability the jitter runs at all.
    #[serde(default = "one")]
    pub prob: f64,
}

fn one() -> f64 {
    1.0
}

impl ColorJitterSpec {
    /// `ColorJitter(brightness, contrast, saturation, hue)` with torchvision's single-value
    /// meaning: `v` → `[max(0, 1 − v), 1 + v]` for the first three, `h` → `[−h, h]`; a value
    /// of 0 skips the step. Errors name the bad value.
    pub fn from_values(brightness: f64, contrast: f64, saturation: f64, hue: f64) -> Result<Self> {
        let factor = |name: &str, v: f64| -> Result<Option<(f32, f32)>> {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::config(format!("color jitter {name} must be a finite value >= 0, got {v}")));
            }
            Ok((v > 0.0).then(|| ((1.0 - v).max(0.0) as f32, (1.0 + v) as f32)))
        };
        if !(hue.is_finite() && (0.0..=0.5).contains(&hue)) {
            return Err(Error::config(format!("color jitter hue must be in [0, 0.5], got {hue}")));
        }
        Ok(Self {
            brightness: factor("brightness", brightness)?,
            contrast: factor("contrast", contrast)?,
            saturation: factor("saturation", saturation)?,
            hue: (hue > 0.0).then_some((-hue as f32, hue as f32)),
            prob: 1.0,
        })
    }

    /// timm's `--color-jitter`: one value for brightness, contrast and saturation, or three
    /// or four values (the fourth is hue).
    pub fn from_timm(values: &[f64]) -> Result<Self> {
        match values {
            [v] => Self::from_values(*v, *v, *v, 0.0),
            [b, c, s] => Self::from_values(*b, *c, *s, 0.0),
            [b, c, s, h] => Self::from_values(*b, *c, *s, *h),
            _ => Err(Error::config(format!("color jitter takes 1, 3 or 4 values, got {}", values.len()))),
        }
    }

    fn validate(&self) -> Result<()> {
        for (name, r) in [("brightness", self.brightness), ("contrast", self.contrast), ("saturation", self.saturation)] {
            if let Some((lo, hi)) = r {
                if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi) {
                    return Err(Error::config(format!("color jitter {name} range must satisfy 0 <= min <= max, got ({lo}, {hi})")));
                }
            }
        }
        if let Some((lo, hi)) = self.hue {
            if !(-0.5 <= lo && lo <= hi && hi <= 0.5) {
                return Err(Error::config(format!("color jitter hue range must satisfy -0.5 <= min <= max <= 0.5, got ({lo}, {hi})")));
            }
        }
        if !(0.0..=1.0).contains(&self.prob) {
            return Err(Error::config(format!("color jitter probability must be in [0, 1], got {}", self.prob)));
        }
        Ok(())
    }
}

/// timm's `RandomErasing(probability, min_area, max_area, min_aspect, mode, min_count,
/// max_count)`, applied to the normalized image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EraseSpec {
    /// Probability a sample is erased at all (timm `--reprob`).
    pub prob: f64,
    /// Fill (timm `--remode`).
    pub mode: EraseMode,
    /// Fewest boxes (timm: 1).
    pub min_count: u32,
    /// Most boxes (timm `--recount`), at most 4.
    pub max_count: u32,
    /// Box area as a fraction of the image, `(min, max)` (timm: 0.02, 1/3), divided among the boxes.
    pub area: (f64, f64),
    /// Box aspect ratio range, drawn log-uniformly (timm: 0.3, 1/0.3).
    pub aspect: (f64, f64),
}

impl EraseSpec {
    /// timm's defaults with `reprob`, `remode` and `recount`.
    pub fn timm(prob: f64, mode: EraseMode, count: u32) -> Self {
        Self { prob, mode, min_count: 1, max_count: count, area: (0.02, 1.0 / 3.0), aspect: (0.3, 1.0 / 0.3) }
    }

    fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::config(msg));
        if !(0.0..=1.0).contains(&self.prob) {
            return bad(format!("erasing probability (reprob) must be in [0, 1], got {}", self.prob));
        }
        if !(1 <= self.min_count && self.min_count <= self.max_count && self.max_count as usize <= crate::augment::params::ERASE_MAX) {
            return bad(format!(
                "erasing count (recount) must satisfy 1 <= min <= max <= {}, got {}..={}",
                crate::augment::params::ERASE_MAX,
                self.min_count,
                self.max_count
            ));
        }
        if !(self.area.0 > 0.0 && self.area.0 <= self.area.1 && self.area.1 <= 1.0) {
            return bad(format!("erasing area must satisfy 0 < min <= max <= 1, got {:?}", self.area));
        }
        if !(self.aspect.0 > 0.0 && self.aspect.0 <= self.aspect.1 && self.aspect.1.is_finite()) {
            return bad(format!("erasing aspect must satisfy 0 < min <= max, got {:?}", self.aspect));
        }
        Ok(())
    }
}

/// torchvision's `RandomAffine(degrees, translate, scale, shear)` on the output window (after
/// the crop, resize and flips), with `rotate_interp` and `fill` as its interpolation and fill.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AffineSpec {
    /// Rotation range in degrees, clockwise as torchvision's `affine` (`(min, max)`).
    pub degrees: (f64, f64),
    /// Largest translation as a fraction of the width and height (`None`: none).
    pub translate: Option<(f64, f64)>,
    /// Scale range (`None`: 1).
    pub scale: Option<(f64, f64)>,
    /// Shear ranges in degrees: x `(min, max)`, and y when given (`None`: none).
    pub shear: Option<ShearRanges>,
}

/// RandomAffine's shear: the x range in degrees, and the y range when given.
pub type ShearRanges = ((f64, f64), Option<(f64, f64)>);

/// One sample's RandomAffine draw (torchvision's `RandomAffine.get_params`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AffineDraw {
    /// Degrees, clockwise.
    pub angle: f64,
    /// Integer pixel translation `(tx, ty)`.
    pub translate: (i64, i64),
    /// Scale.
    pub scale: f64,
    /// Shear in degrees `(x, y)`.
    pub shear: (f64, f64),
}

impl AffineSpec {
    /// Draw in torchvision's order: angle, translation (each rounded half to even), scale,
    /// shear x, shear y; for an `out_w × out_h` output.
    pub fn draw(&self, rng: &mut crate::augment::params::SampleRng, out_w: i32, out_h: i32) -> AffineDraw {
        let angle = rng.uniform_in(self.degrees.0, self.degrees.1);
        let translate = match self.translate {
            Some((fx, fy)) => {
                let (mx, my) = (fx * out_w as f64, fy * out_h as f64);
                let tx = crate::augment::params::round_half_even(rng.uniform_in(-mx, mx));
                let ty = crate::augment::params::round_half_even(rng.uniform_in(-my, my));
                (tx, ty)
            }
            None => (0, 0),
        };
        let scale = self.scale.map_or(1.0, |(a, b)| rng.uniform_in(a, b));
        let shear = match self.shear {
            Some((x, y)) => (rng.uniform_in(x.0, x.1), y.map_or(0.0, |y| rng.uniform_in(y.0, y.1))),
            None => (0.0, 0.0),
        };
        AffineDraw { angle, translate, scale, shear }
    }

    fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::config(msg));
        let (a, b) = self.degrees;
        if !(a.is_finite() && b.is_finite() && a <= b) {
            return bad(format!("affine degrees must be finite with min <= max, got {:?}", self.degrees));
        }
        if let Some((x, y)) = self.translate {
            if !((0.0..=1.0).contains(&x) && (0.0..=1.0).contains(&y)) {
                return bad(format!("affine translate must be fractions in [0, 1], got ({x}, {y})"));
            }
        }
        if let Some((a, b)) = self.scale {
            if !(a > 0.0 && a <= b && b.is_finite()) {
                return bad(format!("affine scale must satisfy 0 < min <= max, got ({a}, {b})"));
            }
        }
        if let Some((x, y)) = self.shear {
            for r in std::iter::once(x).chain(y) {
                if !(r.0.is_finite() && r.1.is_finite() && r.0 <= r.1 && r.0 > -90.0 && r.1 < 90.0) {
                    return bad(format!("affine shear must be within (-90, 90) degrees with min <= max, got {r:?}"));
                }
            }
        }
        Ok(())
    }
}

impl AffineDraw {
    /// torchvision's `_get_inverse_affine_matrix(center=(0, 0), angle, translate, scale, shear)`
    /// in f64, rounded to f32 as torchvision's float theta.
    pub fn inverse_matrix(&self) -> [f32; 6] {
        let (rot, sx, sy) = (self.angle.to_radians(), self.shear.0.to_radians(), self.shear.1.to_radians());
        let (tx, ty) = (self.translate.0 as f64, self.translate.1 as f64);
        let a = (rot - sy).cos() / sy.cos();
        let b = -(rot - sy).cos() * sx.tan() / sy.cos() - rot.sin();
        let c = (rot - sy).sin() / sy.cos();
        let d = -(rot - sy).sin() * sx.tan() / sy.cos() + rot.cos();
        let mut m = [d, -b, 0.0, -c, a, 0.0].map(|v| v / self.scale);
        m[2] += m[0] * -tx + m[1] * -ty;
        m[5] += m[3] * -tx + m[4] * -ty;
        m.map(|v| v as f32)
    }
}

/// How the crop/resize step is chosen per sample.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum CropMode {
    /// torchvision `RandomResizedCrop(size, scale, ratio)`.
    RandomResized {
        /// Fraction of the image area, `(min, max)`.
        scale: (f64, f64),
        /// Aspect ratio range `(min, max)`, drawn log-uniformly.
        ratio: (f64, f64),
    },
    /// `Resize(shorter)` then `CenterCrop(size)` (the eval preset uses `⌊size / crop_ratio⌋`,
    /// 224/256 by default).
    ResizeCenter {
        /// Target length of the shorter side.
        shorter: u32,
    },
    /// Plain `Resize((h, w))` of the whole image to the output size.
    Resize,
}

/// The augmentation applied to every sample. The random parts are drawn per sample by
/// [`crate::augment::params::draw`]; the rest is fixed here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AugmentSpec {
    /// Output `(width, height)`.
    pub size: (u32, u32),
    /// Crop/resize step.
    pub crop: CropMode,
    /// Resize filter.
    pub filter: Filter,
    /// Antialias when downscaling (torchvision's default for tensors since 0.17).
    pub antialias: bool,
    /// Probability of a horizontal flip.
    pub hflip_p: f64,
    /// Probability of a vertical flip.
    pub vflip_p: f64,
    /// Rotation angle range in degrees `(min, max)`; `(0, 0)` = no rotation.
    pub rotate_deg: (f32, f32),
    /// Rotation sampling.
    pub rotate_interp: RotateInterp,
    /// Fill for pixels rotated in from outside, 0..255 per channel.
    pub fill: [f32; 3],
    /// Apply EXIF orientation before any geometry.
    pub apply_exif: bool,
    /// Draw the resize filter per sample, bilinear or bicubic (timm's
    /// `--train-interpolation random`); `filter` is then unused.
    #[serde(default)]
    pub random_filter: bool,
    /// ColorJitter after the geometry (`None`: off).
    #[serde(default)]
    pub color_jitter: Option<ColorJitterSpec>,
    /// RandomGrayscale probability, after the jitter.
    #[serde(default)]
    pub grayscale_p: f64,
    /// RandomErasing after normalize (`None`: off).
    #[serde(default)]
    pub erasing: Option<EraseSpec>,
    /// RandomAffine on the output window, in place of `rotate_deg` (`None`: off).
    #[serde(default)]
    pub affine: Option<AffineSpec>,
    /// RandAugment / AutoAugment / TrivialAugmentWide after the geometry (`None`: off).
    #[serde(default)]
    pub auto_augment: Option<super::auto::AutoAugmentSpec>,
    /// GaussianBlur after the color steps (`None`: off).
    #[serde(default)]
    pub blur: Option<BlurSpec>,
    /// RandomSolarize after the blur (`None`: off).
    #[serde(default)]
    pub solarize: Option<SolarizeSpec>,
}

/// GaussianBlur, applied with probability `prob` after the color steps: torchvision's
/// `GaussianBlur(kernel, sigma)` when `kernel` is given, else Pillow's
/// `ImageFilter.GaussianBlur(radius)` with the radius drawn from `sigma` (DINO's
/// `GaussianBlur(p, radius_min, radius_max)`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlurSpec {
    /// Probability the blur runs (torchvision's `GaussianBlur` always runs: 1).
    pub prob: f64,
    /// torchvision's odd `kernel_size` (one value for both axes); `None`: Pillow's form.
    pub kernel: Option<u32>,
    /// Range sigma (Pillow: the radius) is drawn uniformly from, `0 < lo <= hi <= 1024`.
    pub sigma: (f32, f32),
}

/// torchvision's default sigma range of `GaussianBlur`, and DINO's radius range.
pub const BLUR_SIGMA_DEFAULT: (f32, f32) = (0.1, 2.0);

impl BlurSpec {
    /// Check the values; errors name the option and show the value.
    pub fn validate(&self, size: (u32, u32)) -> Result<()> {
        let bad = |msg: String| Err(Error::config(msg));
        if !(0.0..=1.0).contains(&self.prob) {
            return bad(format!("blur_prob must be in [0, 1], got {}", self.prob));
        }
        let (lo, hi) = self.sigma;
        if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && lo <= hi && hi <= super::params::BLUR_SIGMA_MAX) {
            return bad(format!("blur_sigma must satisfy 0 < min <= max <= {}, got ({lo}, {hi})", super::params::BLUR_SIGMA_MAX));
        }
        if let Some(k) = self.kernel {
            if k % 2 == 0 || k > super::params::BLUR_KMAX {
                return bad(format!("blur_kernel must be odd and 1..={}, got {k}", super::params::BLUR_KMAX));
            }
            let side = size.0.min(size.1);
            if k / 2 >= side {
                return bad(format!("blur_kernel {k} needs reflect padding of {} < the output's shorter side {side}", k / 2));
            }
        }
        Ok(())
    }
}

/// RandomSolarize(threshold, p): with probability `prob`, every value `>= threshold` (0..255
/// scale) becomes `255 − value`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SolarizeSpec {
    /// Probability the solarize runs.
    pub prob: f64,
    /// Threshold on the 0..255 scale (DINO and `ImageOps.solarize`: 128).
    pub threshold: f32,
}

/// DINO's solarize threshold (`ImageOps.solarize`'s default).
pub const SOLARIZE_THRESHOLD_DEFAULT: f32 = 128.0;

impl SolarizeSpec {
    /// Check the values; errors name the option and show the value.
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.prob) {
            return Err(Error::config(format!("solarize_prob must be in [0, 1], got {}", self.prob)));
        }
        if !(self.threshold.is_finite() && (0.0..=255.0).contains(&self.threshold)) {
            return Err(Error::config(format!("solarize_threshold must be in [0, 255], got {}", self.threshold)));
        }
        Ok(())
    }
}

/// The eval preset's centre-crop ratio by default: the crop is 224/256 of the resized shorter
/// side (FFCV's `DEFAULT_CROP_RATIO`, timm's `crop_pct` 0.875, torchvision's Resize(256) +
/// CenterCrop(224)).
pub const DEFAULT_CROP_RATIO: f64 = 224.0 / 256.0;

/// Longest resized shorter side the centre crop takes (a crop ratio near 0 would resize a
/// 224 crop's image to millions of pixels a side).
pub const MAX_RESIZE_SHORTER: u32 = 65536;

/// Check a centre-crop ratio: in (0, 1] (1: the crop is the whole shorter side), and not so
/// small that `size / crop_ratio` passes [`MAX_RESIZE_SHORTER`]. `name` is the option's name.
pub fn check_crop_ratio(crop_ratio: f64, size: u32, name: &str) -> Result<()> {
    if !(crop_ratio > 0.0 && crop_ratio <= 1.0) {
        return Err(Error::config(format!("{name} must be in (0, 1] (the crop's share of the resized shorter side), got {crop_ratio}")));
    }
    let shorter = (size as f64 / crop_ratio).floor();
    if shorter > MAX_RESIZE_SHORTER as f64 {
        return Err(Error::config(format!(
            "{name} {crop_ratio} resizes the shorter side to {shorter} for a {size} crop: at most {MAX_RESIZE_SHORTER}"
        )));
    }
    Ok(())
}

/// ImageNet channel means (RGB), on the 0..1 scale.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviations (RGB), on the 0..1 scale.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

impl AugmentSpec {
    /// `train`: RandomResizedCrop(size, (0.08, 1), (3/4, 4/3)) + horizontal flip p = 0.5.
    pub fn train(size: u32) -> Self {
        Self {
            size: (size, size),
            crop: CropMode::RandomResized { scale: (0.08, 1.0), ratio: (3.0 / 4.0, 4.0 / 3.0) },
            filter: Filter::Bilinear,
            antialias: true,
            hflip_p: 0.5,
            vflip_p: 0.0,
            rotate_deg: (0.0, 0.0),
            rotate_interp: RotateInterp::Nearest,
            fill: [0.0; 3],
            apply_exif: true,
            random_filter: false,
            color_jitter: None,
            grayscale_p: 0.0,
            erasing: None,
            affine: None,
            auto_augment: None,
            blur: None,
            solarize: None,
        }
    }

    /// `eval`: Resize(shorter = ⌊size / (224/256)⌋) + CenterCrop(size): [`AugmentSpec::eval_cropped`]
    /// at [`DEFAULT_CROP_RATIO`].
    pub fn eval(size: u32) -> Self {
        Self::eval_cropped(size, DEFAULT_CROP_RATIO)
    }

    /// The eval preset with centre-crop ratio `crop_ratio` (FFCV's `ratio`, timm's `crop_pct`):
    /// Resize(shorter = ⌊size / crop_ratio⌋, as timm's `floor(img_size / crop_pct)`) +
    /// CenterCrop(size). A ratio outside (0, 1] is caught by [`check_crop_ratio`]; here it
    /// saturates.
    pub fn eval_cropped(size: u32, crop_ratio: f64) -> Self {
        let shorter = (size as f64 / crop_ratio).floor().clamp(0.0, u32::MAX as f64) as u32;
        Self { crop: CropMode::ResizeCenter { shorter }, hflip_p: 0.0, ..Self::train(size) }
    }

    /// Set RandomResizedCrop's `scale` and/or `ratio` range (each when given). `false`, and
    /// nothing changed, when the crop step is not RandomResizedCrop and a range was given.
    pub fn set_rrc_ranges(&mut self, scale: Option<(f64, f64)>, ratio: Option<(f64, f64)>) -> bool {
        if scale.is_none() && ratio.is_none() {
            return true;
        }
        let CropMode::RandomResized { scale: s, ratio: r } = &mut self.crop else { return false };
        *s = scale.unwrap_or(*s);
        *r = ratio.unwrap_or(*r);
        true
    }

    /// Check the spec; errors say which field and what was wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::config(msg));
        if self.size.0 == 0 || self.size.1 == 0 || self.size.0 > 8192 || self.size.1 > 8192 {
            return bad(format!("output size must be 1..=8192 on each side, got {}x{}", self.size.0, self.size.1));
        }
        if let CropMode::RandomResized { scale, ratio } = self.crop {
            if !(scale.0 > 0.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
                return bad(format!("crop scale must satisfy 0 < min <= max <= 1, got {scale:?}"));
            }
            if !(ratio.0 > 0.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
                return bad(format!("crop ratio must satisfy 0 < min <= max, got {ratio:?}"));
            }
        }
        if let CropMode::ResizeCenter { shorter } = self.crop {
            if shorter < self.size.0.min(self.size.1) {
                return bad(format!("resize shorter side {shorter} is smaller than the center crop {}x{}", self.size.0, self.size.1));
            }
            if shorter > MAX_RESIZE_SHORTER {
                return bad(format!("resize shorter side {shorter} is more than {MAX_RESIZE_SHORTER}"));
            }
        }
        for (name, p) in [("hflip", self.hflip_p), ("vflip", self.vflip_p)] {
            if !(0.0..=1.0).contains(&p) {
                return bad(format!("{name} probability must be in [0, 1], got {p}"));
            }
        }
        let (lo, hi) = self.rotate_deg;
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return bad(format!("rotation range must be finite with min <= max, got {:?}", self.rotate_deg));
        }
        if !(0.0..=1.0).contains(&self.grayscale_p) {
            return bad(format!("grayscale probability must be in [0, 1], got {}", self.grayscale_p));
        }
        if let Some(j) = &self.color_jitter {
            j.validate()?;
        }
        if let Some(e) = &self.erasing {
            e.validate()?;
        }
        if let Some(b) = &self.blur {
            b.validate(self.size)?;
        }
        if let Some(s) = &self.solarize {
            s.validate()?;
        }
        if let Some(a) = &self.affine {
            if self.rotate_deg != (0.0, 0.0) {
                return bad("RandomAffine and a rotation range are both set; give the rotation as the affine's degrees".into());
            }
            a.validate()?;
        }
        Ok(())
    }
}

/// Element type of the output batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16, round to nearest even from the f32 value.
    F16,
    /// bfloat16, round to nearest even from the f32 value.
    Bf16,
    /// uint8 on the 0..255 scale, rounded half to even, *not* normalized (mean/std are not
    /// applied): timm's fast path, which normalizes on the GPU.
    U8,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::U8 => 1,
        }
    }
    /// Code shared with the kernels (`STOKE_DTYPE_*` in `kernels/stoke_params.cuh`).
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// Memory layout of the output batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `[N, C, H, W]`.
    Nchw,
    /// `[N, H, W, C]`.
    Nhwc,
}

impl Layout {
    /// Code shared with the kernels (`STOKE_LAYOUT_*`).
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// What the output tensor looks like, fixed per pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    /// Element type.
    pub dtype: DType,
    /// Memory layout.
    pub layout: Layout,
    /// Per-channel mean on the 0..1 scale.
    pub mean: [f32; 3],
    /// Per-channel standard deviation on the 0..1 scale.
    pub std: [f32; 3],
}

impl Default for OutputSpec {
    fn default() -> Self {
        Self { dtype: DType::F32, layout: Layout::Nchw, mean: IMAGENET_MEAN, std: IMAGENET_STD }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_and_rotation_read_names_and_the_old_codes_and_name_what_is_wrong() {
        assert_eq!(serde_json::from_str::<Filter>("\"bicubic\"").unwrap(), Filter::Bicubic);
        assert_eq!(serde_json::from_str::<Filter>("1").unwrap(), Filter::Bicubic);
        assert_eq!(serde_json::from_str::<Filter>("0").unwrap(), Filter::Bilinear);
        assert_eq!(serde_json::from_str::<RotateInterp>("\"bilinear\"").unwrap(), RotateInterp::Bilinear);
        assert_eq!(serde_json::from_str::<RotateInterp>("0").unwrap(), RotateInterp::Nearest);
        assert_eq!(serde_json::to_string(&Filter::Bicubic).unwrap(), "\"bicubic\"");
        let e = serde_json::from_str::<Filter>("\"lanczos\"").unwrap_err().to_string();
        assert!(e.contains("filter must be one of") && e.contains("\"lanczos\""), "{e}");
        let e = serde_json::from_str::<RotateInterp>("7").unwrap_err().to_string();
        assert!(e.contains("rotate_interp") && e.contains("got 7"), "{e}");
        // A whole spec as `stoke tune` writes it, and as older versions wrote it.
        let mut spec = AugmentSpec::train(224);
        spec.filter = Filter::Bicubic;
        let text = serde_json::to_string(&spec).unwrap();
        assert!(text.contains("\"filter\":\"bicubic\""), "{text}");
        assert_eq!(serde_json::from_str::<AugmentSpec>(&text).unwrap(), spec);
        let old = text.replace("\"filter\":\"bicubic\"", "\"filter\":1").replace("\"rotate_interp\":\"nearest\"", "\"rotate_interp\":0");
        assert_eq!(serde_json::from_str::<AugmentSpec>(&old).unwrap(), spec);
        // The codes are the kernels'.
        assert_eq!((Filter::Bilinear.code(), Filter::Bicubic.code()), (FILTER_BILINEAR, FILTER_BICUBIC));
        assert_eq!((RotateInterp::Nearest.code(), RotateInterp::Bilinear.code()), (ROT_NEAREST, ROT_BILINEAR));
    }
}
