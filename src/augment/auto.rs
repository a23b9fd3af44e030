//! AutoAugment-family policies: timm's RandAugment (`rand-m9-mstd0.5-inc1`) and AutoAugment
//! (`original`, `originalr`) config strings, and torchvision's TrivialAugmentWide
//! (`trivialaugment`), drawn per sample into [`AutoParams`] for the kernels' op chain
//! (`kernels/auto_math.cuh`).
//!
//! What each policy draws, per sample, from its own stream (`STREAM_AUTO`):
//! - **RandAugment** (timm `RandAugment` + `AugmentOp`): `n` ops chosen uniformly with
//!   replacement from the 15-op set (the `inc1` set when `inc1`); each fires with probability
//!   `p` (default 0.5); its magnitude is `m`, or `N(m, mstd)` (uniform on `[0, m]` when
//!   `mstd > 100`), clipped to `[0, mmax]` (default 10); timm's level → argument functions,
//!   with a random sign for rotate/shear/translate (and the `*Increasing` enhance ops).
//! - **AutoAugment** (`original`: the AutoAugment paper's ImageNet policy; `originalr`: the same
//!   with the increasing posterize): one of the 25 sub-policies uniformly, then its two ops,
//!   each with its own probability and magnitude (plus `mstd` noise when given).
//! - **torchvision RandAugment** (`randaugment-n2-m9`: `num_ops`, `magnitude`): `n` ops
//!   uniformly with replacement from torchvision's 14, each applied, at magnitude bin `m` of 31
//!   with a random sign for the signed ops (torchvision's ranges: shear 0.3, translate 150/331
//!   of the size, rotate 30°, enhance 0.9, posterize 8..4 bits).
//! - **TrivialAugmentWide** (torchvision's op set and magnitude bins): one op uniformly from
//!   14 (Identity included), one of 31 magnitude bins uniformly, a random sign for the signed
//!   ops. The ops are Pillow's, as torchvision applies them to PIL images; the geometric ops use
//!   the training interpolation and timm's mean fill (torchvision's defaults are nearest and
//!   black; see the module docs of [`crate::augment`]).
//!
//! Geometric ops resample with the training interpolation (bilinear or bicubic; drawn per op
//! when it is `random`, as timm does) and fill with timm's `img_mean`: the normalization mean
//! as uint8.

use super::params::{AutoOp, AutoParams, SampleRng, AUTO_MAX};
use crate::error::{Error, Result};

/// Stream id for AutoAugment-family draws.
pub const STREAM_AUTO: u64 = 9;

/// The ops as the kernels number them (`STOKE_AUTO_*` in `kernels/auto_math.cuh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum AutoOpCode {
    /// No change (TrivialAugmentWide only).
    Identity = 0,
    /// `ImageOps.autocontrast`.
    AutoContrast = 1,
    /// `ImageOps.equalize`.
    Equalize = 2,
    /// `ImageOps.invert`.
    Invert = 3,
    /// `Image.rotate(degrees)`.
    Rotate = 4,
    /// `ImageOps.posterize(bits)`.
    Posterize = 5,
    /// `ImageOps.solarize(threshold)`.
    Solarize = 6,
    /// timm's `solarize_add(add, thresh = 128)`.
    SolarizeAdd = 7,
    /// `ImageEnhance.Color(factor)`.
    Color = 8,
    /// `ImageEnhance.Contrast(factor)`.
    Contrast = 9,
    /// `ImageEnhance.Brightness(factor)`.
    Brightness = 10,
    /// `ImageEnhance.Sharpness(factor)`.
    Sharpness = 11,
    /// Affine `(1, f, 0, 0, 1, 0)`.
    ShearX = 12,
    /// Affine `(1, 0, 0, f, 1, 0)`.
    ShearY = 13,
    /// Affine `(1, 0, px, 0, 1, 0)`.
    TranslateX = 14,
    /// Affine `(1, 0, 0, 0, 1, px)`.
    TranslateY = 15,
}

impl AutoOpCode {
    const ALL: [AutoOpCode; 16] = [
        Self::Identity,
        Self::AutoContrast,
        Self::Equalize,
        Self::Invert,
        Self::Rotate,
        Self::Posterize,
        Self::Solarize,
        Self::SolarizeAdd,
        Self::Color,
        Self::Contrast,
        Self::Brightness,
        Self::Sharpness,
        Self::ShearX,
        Self::ShearY,
        Self::TranslateX,
        Self::TranslateY,
    ];

    /// The kernel code.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The op of a kernel code.
    pub fn from_code(c: u32) -> Option<Self> {
        Self::ALL.get(c as usize).copied()
    }

    /// timm's name of the op (`dump`, `preview`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Identity => "Identity",
            Self::AutoContrast => "AutoContrast",
            Self::Equalize => "Equalize",
            Self::Invert => "Invert",
            Self::Rotate => "Rotate",
            Self::Posterize => "Posterize",
            Self::Solarize => "Solarize",
            Self::SolarizeAdd => "SolarizeAdd",
            Self::Color => "Color",
            Self::Contrast => "Contrast",
            Self::Brightness => "Brightness",
            Self::Sharpness => "Sharpness",
            Self::ShearX => "ShearX",
            Self::ShearY => "ShearY",
            Self::TranslateX => "TranslateX",
            Self::TranslateY => "TranslateY",
        }
    }

    /// Does the op resample the image (and so take an interpolation and the fill)?
    pub fn is_geometric(self) -> bool {
        matches!(self, Self::Rotate | Self::ShearX | Self::ShearY | Self::TranslateX | Self::TranslateY)
    }
}

/// timm's op names with their level → argument rule (`LEVEL_TO_ARG`); each variant is the op
/// of the same name in timm's `auto_augment.py`.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimmOp {
    AutoContrast,
    Equalize,
    Invert,
    Rotate,
    Posterize,
    PosterizeIncreasing,
    PosterizeOriginal,
    Solarize,
    SolarizeIncreasing,
    SolarizeAdd,
    Color,
    ColorIncreasing,
    Contrast,
    ContrastIncreasing,
    Brightness,
    BrightnessIncreasing,
    Sharpness,
    SharpnessIncreasing,
    ShearX,
    ShearY,
    TranslateXRel,
    TranslateYRel,
}

/// timm's `_RAND_TRANSFORMS`.
pub const RAND_OPS: [TimmOp; 15] = {
    use TimmOp::*;
    [
        AutoContrast,
        Equalize,
        Invert,
        Rotate,
        Posterize,
        Solarize,
        SolarizeAdd,
        Color,
        Contrast,
        Brightness,
        Sharpness,
        ShearX,
        ShearY,
        TranslateXRel,
        TranslateYRel,
    ]
};

/// timm's `_RAND_INCREASING_TRANSFORMS` (`inc1`).
pub const RAND_INCREASING_OPS: [TimmOp; 15] = {
    use TimmOp::*;
    [
        AutoContrast,
        Equalize,
        Invert,
        Rotate,
        PosterizeIncreasing,
        SolarizeIncreasing,
        SolarizeAdd,
        ColorIncreasing,
        ContrastIncreasing,
        BrightnessIncreasing,
        SharpnessIncreasing,
        ShearX,
        ShearY,
        TranslateXRel,
        TranslateYRel,
    ]
};

/// One step of an AutoAugment sub-policy: op, probability, magnitude level (0..10).
pub type PolicyStep = (TimmOp, f64, f64);

/// The AutoAugment paper's ImageNet policy (Cubuk et al. 2019, appendix), 25 sub-policies of
/// two steps, magnitudes on the 0..10 scale; posterize in the paper's "keep 4..8 bits" form.
pub const ORIGINAL_POLICY: [[PolicyStep; 2]; 25] = {
    use TimmOp::*;
    [
        [(PosterizeOriginal, 0.4, 8.0), (Rotate, 0.6, 9.0)],
        [(Solarize, 0.6, 5.0), (AutoContrast, 0.6, 5.0)],
        [(Equalize, 0.8, 8.0), (Equalize, 0.6, 3.0)],
        [(PosterizeOriginal, 0.6, 7.0), (PosterizeOriginal, 0.6, 6.0)],
        [(Equalize, 0.4, 7.0), (Solarize, 0.2, 4.0)],
        [(Equalize, 0.4, 4.0), (Rotate, 0.8, 8.0)],
        [(Solarize, 0.6, 3.0), (Equalize, 0.6, 7.0)],
        [(PosterizeOriginal, 0.8, 5.0), (Equalize, 1.0, 2.0)],
        [(Rotate, 0.2, 3.0), (Solarize, 0.6, 8.0)],
        [(Equalize, 0.6, 8.0), (PosterizeOriginal, 0.4, 6.0)],
        [(Rotate, 0.8, 8.0), (Color, 0.4, 0.0)],
        [(Rotate, 0.4, 9.0), (Equalize, 0.6, 2.0)],
        [(Equalize, 0.0, 7.0), (Equalize, 0.8, 8.0)],
        [(Invert, 0.6, 4.0), (Equalize, 1.0, 8.0)],
        [(Color, 0.6, 4.0), (Contrast, 1.0, 8.0)],
        [(Rotate, 0.8, 8.0), (Color, 1.0, 2.0)],
        [(Color, 0.8, 8.0), (Solarize, 0.8, 7.0)],
        [(Sharpness, 0.4, 7.0), (Invert, 0.6, 8.0)],
        [(ShearX, 0.6, 5.0), (Equalize, 1.0, 9.0)],
        [(Color, 0.4, 0.0), (Equalize, 0.6, 3.0)],
        [(Equalize, 0.4, 7.0), (Solarize, 0.2, 4.0)],
        [(Solarize, 0.6, 5.0), (AutoContrast, 0.6, 5.0)],
        [(Invert, 0.6, 4.0), (Equalize, 1.0, 8.0)],
        [(Color, 0.6, 4.0), (Contrast, 1.0, 8.0)],
        [(Equalize, 0.8, 8.0), (Equalize, 0.6, 3.0)],
    ]
};

/// Which policy draws the ops.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AutoPolicy {
    /// timm RandAugment: `n` ops of `ops`, each firing with probability `p`, magnitude `m`.
    Rand {
        /// Ops per sample (timm `n`, default 2).
        n: u32,
        /// Magnitude level (timm `m`, default 10).
        m: f64,
        /// Probability each chosen op fires (timm `p`, default 0.5).
        p: f64,
        /// The `inc1` op set.
        increasing: bool,
    },
    /// AutoAugment ImageNet policy (`increasing`: `originalr`).
    Original {
        /// Posterize as `PosterizeIncreasing` (timm's `originalr`).
        increasing: bool,
    },
    /// torchvision TrivialAugmentWide.
    TrivialWide,
    /// torchvision `RandAugment(num_ops, magnitude)`: `n` ops uniformly with replacement from
    /// its 14 (Identity included), each always applied, at magnitude bin `m` of 31.
    TorchvisionRand {
        /// `num_ops`.
        n: u32,
        /// `magnitude`, a bin index 0..=30.
        m: u32,
    },
}

/// A parsed `--aa` string with the hyper-parameters timm derives from the rest of the recipe.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AutoAugmentSpec {
    /// The string as given.
    pub config: String,
    /// The policy.
    pub policy: AutoPolicy,
    /// Magnitude noise: 0 none, `f64::INFINITY` uniform on `[0, m]` (timm `mstd`).
    pub magnitude_std: f64,
    /// Upper clip of the magnitude (timm `mmax`, default 10).
    pub magnitude_max: f64,
    /// Fill of the geometric ops (timm `img_mean`: the normalization mean as uint8).
    pub fill: [u8; 3],
    /// Fraction of the width/height the relative translations reach (timm 0.45).
    pub translate_pct: f64,
}

impl AutoAugmentSpec {
    /// Parse timm's `--aa` strings (`rand-m9-mstd0.5-inc1`, `rand-m7-n3-p1-mmax12`, `original`,
    /// `originalr-mstd0.5`) and `trivialaugment`; `mean` is the normalization mean (0..1) the
    /// fill is made from.
    pub fn parse(config: &str, mean: [f32; 3]) -> Result<Self> {
        let bad = |m: String| Error::config(format!("--aa {config:?}: {m}"));
        let fill = mean.map(|v| (255.0 * v as f64).round_ties_even().clamp(0.0, 255.0) as u8);
        let mut spec = AutoAugmentSpec {
            config: config.to_string(),
            policy: AutoPolicy::TrivialWide,
            magnitude_std: 0.0,
            magnitude_max: 10.0,
            fill,
            translate_pct: 0.45,
        };
        let mut parts = config.split('-');
        let head = parts.next().unwrap_or("");
        let number = |key: &str, v: &str| -> Result<f64> {
            v.parse::<f64>().ok().filter(|x| x.is_finite() || key == "mstd").ok_or_else(|| bad(format!("{key} needs a number, got {v:?}")))
        };
        match head {
            "trivialaugment" | "ta_wide" | "trivialaugmentwide" => {
                if let Some(extra) = parts.next() {
                    return Err(bad(format!("trivialaugment takes no options, got {extra:?}")));
                }
                return Ok(spec);
            }
            "rand" => {
                let (mut n, mut m, mut p, mut increasing) = (2u32, 10.0, 0.5, false);
                for part in parts {
                    let split = part.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(part.len());
                    let (key, val) = part.split_at(split);
                    match key {
                        "m" => m = number(key, val)?,
                        "n" => {
                            n = val.parse().map_err(|_| bad(format!("n needs a whole number, got {val:?}")))?;
                            if !(1..=AUTO_MAX as u32).contains(&n) {
                                return Err(bad(format!("n must be 1..={AUTO_MAX} ops per image, got {n}")));
                            }
                        }
                        "p" => {
                            p = number(key, val)?;
                            if !(0.0..=1.0).contains(&p) {
                                return Err(bad(format!("p must be in [0, 1], got {p}")));
                            }
                        }
                        "mstd" => spec.magnitude_std = number(key, val)?,
                        "mmax" => spec.magnitude_max = number(key, val)?,
                        "inc" => increasing = number(key, val)? != 0.0,
                        _ if key.starts_with('t') => {
                            return Err(bad(format!("transform set {:?} is not supported (only timm's default and inc1 sets)", &part[1..])))
                        }
                        _ => return Err(bad(format!("unknown section {part:?} (known: m, n, p, mstd, mmax, inc)"))),
                    }
                }
                if !(0.0..=100.0).contains(&m) {
                    return Err(bad(format!("m must be in [0, 100], got {m}")));
                }
                spec.policy = AutoPolicy::Rand { n, m, p, increasing };
            }
            "original" | "originalr" => {
                for part in parts {
                    match part.strip_prefix("mstd") {
                        Some(v) => spec.magnitude_std = number("mstd", v)?,
                        None => return Err(bad(format!("unknown section {part:?} (AutoAugment takes mstd)"))),
                    }
                }
                spec.policy = AutoPolicy::Original { increasing: head == "originalr" };
            }
            "randaugment" => {
                let (mut n, mut m) = (2u32, 9u32);
                for part in parts {
                    let whole = |v: &str| v.parse::<u32>().map_err(|_| bad(format!("{part:?} needs a whole number")));
                    if let Some(v) = part.strip_prefix('n') {
                        n = whole(v)?;
                    } else if let Some(v) = part.strip_prefix('m') {
                        m = whole(v)?;
                    } else {
                        return Err(bad(format!("unknown section {part:?} (torchvision's RandAugment takes n (num_ops) and m (magnitude))")));
                    }
                }
                if !(1..=AUTO_MAX as u32).contains(&n) {
                    return Err(bad(format!("n must be 1..={AUTO_MAX} ops per image, got {n}")));
                }
                if m > 30 {
                    return Err(bad(format!("m is a magnitude bin 0..=30, got {m}")));
                }
                spec.policy = AutoPolicy::TorchvisionRand { n, m };
            }
            "v0" | "v0r" | "3a" => {
                return Err(bad(format!("timm's {head:?} policy is not supported (use original, originalr, rand-… or trivialaugment)")))
            }
            "augmix" => return Err(bad("AugMix is not supported (it mixes several augmented copies of an image)".into())),
            _ => {
                return Err(bad(
                    "expected rand-… (timm RandAugment), original[-mstdX], originalr[-mstdX], trivialaugment or randaugment[-nN-mM] (torchvision)".into(),
                ))
            }
        }
        if spec.magnitude_std.is_nan() || spec.magnitude_std < 0.0 {
            return Err(bad(format!("mstd must be >= 0, got {}", spec.magnitude_std)));
        }
        if spec.magnitude_std > 100.0 {
            spec.magnitude_std = f64::INFINITY;
        }
        if spec.magnitude_max.is_nan() || spec.magnitude_max <= 0.0 {
            return Err(bad(format!("mmax must be above 0, got {}", spec.magnitude_max)));
        }
        Ok(spec)
    }

    /// Draw the ops of one sample whose AutoAugment input is `out_w` wide and `out_h` high.
    /// `bicubic`: the training interpolation (`None`: random per geometric op).
    pub fn draw(&self, rng: &mut SampleRng, out_w: i32, out_h: i32, bicubic: Option<bool>) -> AutoParams {
        let mut a = AutoParams { fill: [self.fill[0], self.fill[1], self.fill[2], 0], ..AutoParams::default() };
        let push = |a: &mut AutoParams, op: AutoOpCode, arg: f64, applied: bool, rng: &mut SampleRng| {
            let cubic = match bicubic {
                Some(b) => b,
                None => rng.below(2) == 1,
            };
            let k = a.count as usize;
            if k < AUTO_MAX {
                let mut flags = if applied { AUTO_APPLIED } else { 0 };
                if op.is_geometric() && cubic {
                    flags |= AUTO_BICUBIC;
                }
                a.ops[k] = AutoOp { op: op.code(), flags, arg: arg as f32 };
                a.count += 1;
            }
        };
        match &self.policy {
            AutoPolicy::Rand { n, m, p, increasing } => {
                let ops: &[TimmOp] = if *increasing { &RAND_INCREASING_OPS } else { &RAND_OPS };
                let chosen: Vec<TimmOp> = (0..*n).map(|_| ops[rng.below(ops.len() as u64) as usize]).collect();
                for op in chosen {
                    let fires = rng.uniform() <= *p;
                    let level = self.magnitude(rng, *m);
                    let (code, arg) = self.level_to_arg(op, level, rng, out_w, out_h);
                    push(&mut a, code, arg, fires, rng);
                }
            }
            AutoPolicy::Original { increasing } => {
                let sub = &ORIGINAL_POLICY[rng.below(ORIGINAL_POLICY.len() as u64) as usize];
                for &(op, prob, m) in sub {
                    let op = if *increasing && op == TimmOp::PosterizeOriginal { TimmOp::PosterizeIncreasing } else { op };
                    let fires = rng.uniform() <= prob;
                    let level = self.magnitude(rng, m);
                    let (code, arg) = self.level_to_arg(op, level, rng, out_w, out_h);
                    push(&mut a, code, arg, fires, rng);
                }
            }
            AutoPolicy::TrivialWide => {
                let (code, arg) = trivial_wide(rng.below(14) as usize, rng.below(31) as usize, rng.below(2) == 1);
                push(&mut a, code, arg, true, rng);
            }
            AutoPolicy::TorchvisionRand { n, m } => {
                for _ in 0..*n {
                    let op = rng.below(14) as usize;
                    let (code, arg) = torchvision_op(false, op, *m as usize, rng.below(2) == 1, out_w, out_h);
                    push(&mut a, code, arg, true, rng);
                }
            }
        }
        a
    }

    /// timm `AugmentOp`'s magnitude: `m`, or with noise, clipped to `[0, mmax]`.
    fn magnitude(&self, rng: &mut SampleRng, m: f64) -> f64 {
        let noisy = if self.magnitude_std == f64::INFINITY {
            rng.uniform_in(0.0, m)
        } else if self.magnitude_std > 0.0 {
            m + self.magnitude_std * rng.normal()
        } else {
            rng.normal(); // drawn either way: the stream does not depend on mstd being on
            m
        };
        noisy.clamp(0.0, self.magnitude_max)
    }

    /// timm's `LEVEL_TO_ARG` for one op at `level` (0..10 scale; the random sign drawn here).
    fn level_to_arg(&self, op: TimmOp, level: f64, rng: &mut SampleRng, out_w: i32, out_h: i32) -> (AutoOpCode, f64) {
        use AutoOpCode as K;
        let negate = rng.uniform() > 0.5;
        let signed = |v: f64| if negate { -v } else { v };
        let l = level / 10.0;
        let enhance = l * 1.8 + 0.1;
        let enhance_inc = (1.0 + signed(l * 0.9)).max(0.1);
        match op {
            TimmOp::AutoContrast => (K::AutoContrast, 0.0),
            TimmOp::Equalize => (K::Equalize, 0.0),
            TimmOp::Invert => (K::Invert, 0.0),
            TimmOp::Rotate => (K::Rotate, signed(l * 30.0)),
            TimmOp::Posterize => (K::Posterize, (l * 4.0).trunc()),
            TimmOp::PosterizeIncreasing => (K::Posterize, 4.0 - (l * 4.0).trunc()),
            TimmOp::PosterizeOriginal => (K::Posterize, (l * 4.0).trunc() + 4.0),
            TimmOp::Solarize => (K::Solarize, (l * 256.0).trunc().min(256.0)),
            TimmOp::SolarizeIncreasing => (K::Solarize, 256.0 - (l * 256.0).trunc().min(256.0)),
            TimmOp::SolarizeAdd => (K::SolarizeAdd, (l * 110.0).trunc().min(128.0)),
            TimmOp::Color => (K::Color, enhance),
            TimmOp::ColorIncreasing => (K::Color, enhance_inc),
            TimmOp::Contrast => (K::Contrast, enhance),
            TimmOp::ContrastIncreasing => (K::Contrast, enhance_inc),
            TimmOp::Brightness => (K::Brightness, enhance),
            TimmOp::BrightnessIncreasing => (K::Brightness, enhance_inc),
            TimmOp::Sharpness => (K::Sharpness, enhance),
            TimmOp::SharpnessIncreasing => (K::Sharpness, enhance_inc),
            TimmOp::ShearX => (K::ShearX, signed(l * 0.3)),
            TimmOp::ShearY => (K::ShearY, signed(l * 0.3)),
            TimmOp::TranslateXRel => (K::TranslateX, signed(l * self.translate_pct) * out_w as f64),
            TimmOp::TranslateYRel => (K::TranslateY, signed(l * self.translate_pct) * out_h as f64),
        }
    }
}

/// torchvision TrivialAugmentWide's op `op` (0..14) at magnitude bin `bin` (0..31), negated
/// when `negate` and the op is signed: the kernel op and its Pillow argument.
pub fn trivial_wide(op: usize, bin: usize, negate: bool) -> (AutoOpCode, f64) {
    torchvision_op(true, op, bin, negate, 0, 0)
}

/// Op `op` (0..14, torchvision's `_augmentation_space` order) of TrivialAugmentWide (`wide`) or
/// RandAugment at magnitude bin `bin` of 31, on a `w × h` image (RandAugment's translation
/// range is 150/331 of the size), negated when `negate` and the op is signed.
pub fn torchvision_op(wide: bool, op: usize, bin: usize, negate: bool, w: i32, h: i32) -> (AutoOpCode, f64) {
    use AutoOpCode as K;
    // torch.linspace(lo, hi, 31) in f32: lo + (hi − lo)·i/30 (the bins are what torch gives to
    // within an f32 ulp).
    let lin = |lo: f64, hi: f64| ((lo + (hi - lo) * bin as f64 / 30.0) as f32) as f64;
    let signed = |v: f64| if negate { -v } else { v };
    let (shear, rotate, enhance, posterize) = if wide { (0.99, 135.0, 0.99, 6.0) } else { (0.3, 30.0, 0.9, 4.0) };
    let (tx, ty) = if wide { (32.0, 32.0) } else { (150.0 / 331.0 * w as f64, 150.0 / 331.0 * h as f64) };
    match op {
        0 => (K::Identity, 0.0),
        1 => (K::ShearX, signed(lin(0.0, shear))),
        2 => (K::ShearY, signed(lin(0.0, shear))),
        3 => (K::TranslateX, signed(lin(0.0, tx).trunc())),
        4 => (K::TranslateY, signed(lin(0.0, ty).trunc())),
        5 => (K::Rotate, signed(lin(0.0, rotate))),
        6 => (K::Brightness, 1.0 + signed(lin(0.0, enhance))),
        7 => (K::Color, 1.0 + signed(lin(0.0, enhance))),
        8 => (K::Contrast, 1.0 + signed(lin(0.0, enhance))),
        9 => (K::Sharpness, 1.0 + signed(lin(0.0, enhance))),
        10 => (K::Posterize, 8.0 - (bin as f64 / (30.0 / posterize)).round_ties_even()),
        11 => (K::Solarize, lin(255.0, 0.0)),
        12 => (K::AutoContrast, 0.0),
        _ => (K::Equalize, 0.0),
    }
}

/// The kernel-side flags (`STOKE_AUTO_APPLIED`, `STOKE_AUTO_BICUBIC`).
pub use super::params::{AUTO_APPLIED, AUTO_BICUBIC};
