//! The per-sample augment parameters (docs/CONTRACTS.md, contract 1) and how they are drawn.
//!
//! Every random choice for a sample is made here, once, from `(seed, epoch, global sample
//! index)` alone. Backends never draw random numbers: they read an [`AugParams`] and apply it.
//! The struct is `#[repr(C)]` and mirrored field for field by `struct StokeAugParams` in
//! `kernels/stoke_params.cuh`; both sides assert its size and offsets at compile time.
//!
//! Geometry, in the order it is applied (output pixel → source coordinate is the inverse):
//! 1. EXIF orientation (`orientation`, 1 = as stored) turns the stored image into the
//!    *oriented* image of size `src_w × src_h`. Every box below is in oriented coordinates.
//! 2. The crop box `crop_x, crop_y, crop_w, crop_h` (integers, inside the oriented image) is
//!    resized to `resize_w × resize_h` (bilinear or bicubic, antialiased when downscaling).
//! 3. The output window `out_w × out_h` starts at `win_x, win_y` inside that resized image
//!    (train: the window is the whole resized crop; eval: Resize(shorter) then CenterCrop).
//! 4. Horizontal flip, then vertical flip, of the window.
//! 5. Rotation by `angle_deg` (counter-clockwise, about the window's centre, size kept,
//!    `fill` outside), as torchvision's `rotate(expand=False)`.
//! 6. Normalize `(x/255 − mean)/std` and cast (per batch, see [`super::spec::OutputSpec`]).

use super::spec::{AugmentSpec, EraseMode};
use bytemuck::{Pod, Zeroable};
use serde::Serialize;

// The kernels' codes, defined beside the enums that name them.
pub use super::spec::{FILTER_BICUBIC, FILTER_BILINEAR, ROT_BILINEAR, ROT_NEAREST};

mod rng;
pub use rng::SampleRng;

/// Everything a backend needs to produce one output sample from its decoded pixels.
///
/// Mirrored by `StokeAugParams` in `kernels/stoke_params.cuh`. Change both or neither.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable, Serialize)]
pub struct AugParams {
    /// Oriented source width (after EXIF orientation), in pixels.
    pub src_w: i32,
    /// Oriented source height, in pixels.
    pub src_h: i32,
    /// Left edge of the crop box in the oriented image.
    pub crop_x: i32,
    /// Top edge of the crop box.
    pub crop_y: i32,
    /// Crop box width (> 0, `crop_x + crop_w <= src_w`).
    pub crop_w: i32,
    /// Crop box height (> 0, `crop_y + crop_h <= src_h`).
    pub crop_h: i32,
    /// Width the crop box is resized to.
    pub resize_w: i32,
    /// Height the crop box is resized to.
    pub resize_h: i32,
    /// Left edge of the output window inside the resized crop.
    pub win_x: i32,
    /// Top edge of the output window inside the resized crop.
    pub win_y: i32,
    /// Output width.
    pub out_w: i32,
    /// Output height.
    pub out_h: i32,
    /// EXIF orientation 1..=8 to apply to the stored image (1 = none).
    pub orientation: u32,
    /// [`FILTER_BILINEAR`] or [`FILTER_BICUBIC`].
    pub filter: u32,
    /// 1: antialias when downscaling (torchvision `antialias=True`), 0: plain interpolation.
    pub antialias: u32,
    /// 1: mirror the window left↔right.
    pub flip_h: u32,
    /// 1: mirror the window top↔bottom.
    pub flip_v: u32,
    /// [`ROT_NEAREST`] or [`ROT_BILINEAR`].
    pub rot_interp: u32,
    /// Rotation angle in degrees, counter-clockwise; 0 = no rotation.
    pub angle_deg: f32,
    /// Fill value (0..255 scale, per RGB channel) for pixels rotated in from outside.
    pub fill: [f32; 3],
    /// ColorJitter and RandomGrayscale, after the geometry.
    pub color: ColorParams,
    /// RandomErasing, after normalize.
    pub erase: EraseParams,
    /// 1: RandomAffine drew `affine_m`, which then replaces `angle_deg` in the rotation stage.
    pub affine: u32,
    /// torchvision's inverse affine matrix (`_get_inverse_affine_matrix` with centre (0, 0)):
    /// output pixel, centred → pre-rotation pixel, centred: `(m0·x + m1·y) + m2`, `(m3·x + m4·y) + m5`.
    pub affine_m: [f32; 6],
    /// AutoAugment-family ops (RandAugment, AutoAugment, TrivialAugmentWide), after the
    /// geometry on the uint8 image, before the color steps.
    pub aa: AutoParams,
    /// GaussianBlur (torchvision's or Pillow's) and RandomSolarize, after the color steps,
    /// before normalize.
    pub blur: BlurParams,
}

const _: () = assert!(std::mem::size_of::<AugParams>() == 344);
const _: () = assert!(std::mem::offset_of!(AugParams, blur) == 324);
const _: () = assert!(std::mem::size_of::<BlurParams>() == 20);
const _: () = assert!(std::mem::offset_of!(AugParams, aa) == 268);
const _: () = assert!(std::mem::size_of::<AutoParams>() == 56);
const _: () = assert!(std::mem::offset_of!(AugParams, affine) == 240);
const _: () = assert!(std::mem::offset_of!(AugParams, orientation) == 48);
const _: () = assert!(std::mem::offset_of!(AugParams, angle_deg) == 72);
const _: () = assert!(std::mem::offset_of!(AugParams, fill) == 76);
const _: () = assert!(std::mem::offset_of!(AugParams, color) == 88);
const _: () = assert!(std::mem::offset_of!(AugParams, erase) == 112);
const _: () = assert!(std::mem::size_of::<ColorParams>() == 24);
const _: () = assert!(std::mem::size_of::<EraseParams>() == 128);
const _: () = assert!(std::mem::offset_of!(EraseParams, boxes) == 16);
const _: () = assert!(std::mem::offset_of!(EraseParams, colors) == 80);

impl AugParams {
    /// The drawn parameters in one readable line (what `stoke preview` prints per tile):
    /// crop and resize, flips, filter, rotation or affine matrix, the color steps in their
    /// order with their factors, grayscale, and the erasing boxes.
    pub fn summary(&self) -> String {
        let mut parts =
            vec![format!("crop {}x{}+{}+{} -> {}x{}", self.crop_w, self.crop_h, self.crop_x, self.crop_y, self.resize_w, self.resize_h)];
        if self.flip_h != 0 {
            parts.push("hflip".into());
        }
        if self.flip_v != 0 {
            parts.push("vflip".into());
        }
        parts.push(if self.filter == FILTER_BICUBIC { "bicubic" } else { "bilinear" }.into());
        if self.affine != 0 {
            let m = self.affine_m.map(|v| format!("{v:.3}"));
            parts.push(format!("affine [{}]", m.join(" ")));
        } else if self.angle_deg != 0.0 {
            parts.push(format!("rotate {:.2} deg", self.angle_deg));
        }
        for op in self.aa.drawn() {
            parts.push(op.describe());
        }
        for op in self.color.ops() {
            let v = match op {
                ColorOp::Brightness => self.color.brightness,
                ColorOp::Contrast => self.color.contrast,
                ColorOp::Saturation => self.color.saturation,
                ColorOp::Hue => self.color.hue,
            };
            parts.push(format!("{} {v:.3}", op.name()));
        }
        if self.color.grayscale != 0 {
            parts.push("grayscale".into());
        }
        match self.blur.kind {
            BLUR_GAUSS => parts.push(format!("blur k{} sigma {:.3}", self.blur.ksize, self.blur.sigma)),
            BLUR_PIL => parts.push(format!("pil blur radius {:.3}", self.blur.sigma)),
            _ => {}
        }
        if self.blur.solarize != 0 {
            parts.push(format!("solarize {}", self.blur.threshold));
        }
        let n = (self.erase.count as usize).min(ERASE_MAX);
        if n > 0 {
            let boxes: Vec<String> = self.erase.boxes[..n].iter().map(|b| format!("{}x{}+{}+{}", b[2], b[3], b[0], b[1])).collect();
            parts.push(format!("erase {} {}", EraseMode::from_code(self.erase.mode).name(), boxes.join(" ")));
        }
        parts.join(", ")
    }
}

/// ColorJitter's steps as the kernels number them (`STOKE_COLOR_*`), in torchvision's
/// `fn_idx` numbering plus one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorOp {
    /// `adjust_brightness`.
    Brightness = 1,
    /// `adjust_contrast` (around the image's mean grayscale).
    Contrast = 2,
    /// `adjust_saturation`.
    Saturation = 3,
    /// `adjust_hue`.
    Hue = 4,
}

impl ColorOp {
    /// torchvision's name of the step.
    pub fn name(self) -> &'static str {
        match self {
            ColorOp::Brightness => "brightness",
            ColorOp::Contrast => "contrast",
            ColorOp::Saturation => "saturation",
            ColorOp::Hue => "hue",
        }
    }
    fn from_code(c: u32) -> Option<Self> {
        [ColorOp::Brightness, ColorOp::Contrast, ColorOp::Saturation, ColorOp::Hue].into_iter().find(|o| *o as u32 == c)
    }
}

/// The drawn ColorJitter and RandomGrayscale of one sample (mirrored by `StokeColorParams`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct ColorParams {
    /// The steps to apply, one [`ColorOp`] code per 4 bits, lowest first; 0 ends the list.
    pub order: u32,
    /// Brightness factor.
    pub brightness: f32,
    /// Contrast factor.
    pub contrast: f32,
    /// Saturation factor.
    pub saturation: f32,
    /// Hue shift in turns, `[-0.5, 0.5]`.
    pub hue: f32,
    /// 1: RandomGrayscale fired (after the jitter).
    pub grayscale: u32,
}

impl ColorParams {
    /// The steps in the order they are applied.
    pub fn ops(&self) -> Vec<ColorOp> {
        (0..4).map_while(|i| ColorOp::from_code((self.order >> (4 * i)) & 0xf)).collect()
    }

    /// Pack `ops` (at most 4) into [`ColorParams::order`].
    pub fn pack(ops: &[ColorOp]) -> u32 {
        ops.iter().take(4).enumerate().fold(0, |acc, (i, op)| acc | ((*op as u32) << (4 * i)))
    }

    /// Whether any color step runs.
    pub fn is_active(&self) -> bool {
        self.order != 0 || self.grayscale != 0
    }
}

/// Readable form for `dump`: the steps by name in their order, each factor only when its
/// step runs.
impl serde::Serialize for ColorParams {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let ops = self.ops();
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("order", &ops.iter().map(|o| o.name()).collect::<Vec<_>>())?;
        for op in &ops {
            let v = match op {
                ColorOp::Brightness => self.brightness,
                ColorOp::Contrast => self.contrast,
                ColorOp::Saturation => self.saturation,
                ColorOp::Hue => self.hue,
            };
            m.serialize_entry(op.name(), &v)?;
        }
        m.serialize_entry("grayscale", &(self.grayscale != 0))?;
        m.end()
    }
}

/// Most AutoAugment-family ops per sample (`STOKE_AUTO_MAX`).
pub const AUTO_MAX: usize = 4;
/// [`AutoOp::flags`]: the op fired (timm's per-op probability).
pub const AUTO_APPLIED: u32 = 1;
/// [`AutoOp::flags`]: a geometric op resamples with Pillow's bicubic filter (else bilinear).
pub const AUTO_BICUBIC: u32 = 2;

/// One drawn AutoAugment-family op (mirrored by `StokeAutoOp`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct AutoOp {
    /// [`super::auto::AutoOpCode`] code.
    pub op: u32,
    /// [`AUTO_APPLIED`] | [`AUTO_BICUBIC`].
    pub flags: u32,
    /// The op's argument as timm passes it to Pillow: enhance factor, degrees, threshold,
    /// bits, added value or pixels.
    pub arg: f32,
}

/// The drawn AutoAugment-family ops of one sample, in order (mirrored by `StokeAutoParams`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct AutoParams {
    /// Ops drawn, `0..=AUTO_MAX`.
    pub count: u32,
    /// RGB fill of the geometric ops (timm's `img_mean`); the fourth byte is unused.
    pub fill: [u8; 4],
    /// The ops in the order they run.
    pub ops: [AutoOp; AUTO_MAX],
}

impl AutoParams {
    /// The drawn ops in order (fired or not).
    pub fn drawn(&self) -> &[AutoOp] {
        &self.ops[..(self.count as usize).min(AUTO_MAX)]
    }

    /// Does some op change the image?
    pub fn is_active(&self) -> bool {
        self.drawn().iter().any(|o| o.flags & AUTO_APPLIED != 0 && o.op != 0)
    }
}

impl AutoOp {
    /// timm's name of the op.
    pub fn name(&self) -> &'static str {
        super::auto::AutoOpCode::from_code(self.op).map_or("unknown", |c| c.name())
    }

    fn is_geometric(&self) -> bool {
        super::auto::AutoOpCode::from_code(self.op).is_some_and(|c| c.is_geometric())
    }

    /// The op in one readable phrase: `Rotate -12.3 bicubic`, `Equalize`, `Posterize 3 (skipped)`.
    pub fn describe(&self) -> String {
        let mut s = self.name().to_string();
        if !matches!(self.op, 0..=3) {
            s += &if self.arg.fract() == 0.0 { format!(" {}", self.arg) } else { format!(" {:.3}", self.arg) };
        }
        if self.is_geometric() {
            s += if self.flags & AUTO_BICUBIC != 0 { " bicubic" } else { " bilinear" };
        }
        if self.flags & AUTO_APPLIED == 0 {
            s += " (skipped)";
        }
        s
    }
}

/// Readable form for `dump`: each drawn op by timm's name with its argument, whether it fired,
/// and the interpolation of the geometric ones.
impl serde::Serialize for AutoParams {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Op<'a>(&'a AutoOp);
        impl serde::Serialize for Op<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let o = self.0;
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("op", o.name())?;
                if !matches!(o.op, 0..=3) {
                    m.serialize_entry("arg", &o.arg)?;
                }
                m.serialize_entry("applied", &(o.flags & AUTO_APPLIED != 0))?;
                if o.is_geometric() {
                    m.serialize_entry("interpolation", if o.flags & AUTO_BICUBIC != 0 { "bicubic" } else { "bilinear" })?;
                }
                m.end()
            }
        }
        struct Ops<'a>(&'a [AutoOp]);
        impl serde::Serialize for Ops<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut q = s.serialize_seq(Some(self.0.len()))?;
                for o in self.0 {
                    q.serialize_element(&Op(o))?;
                }
                q.end()
            }
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("ops", &Ops(self.drawn()))?;
        if self.drawn().iter().any(|o| o.is_geometric()) {
            m.serialize_entry("fill", &self.fill[..3])?;
        }
        m.end()
    }
}

/// [`BlurParams::kind`]: no blur (`STOKE_BLUR_NONE`).
pub const BLUR_NONE: u32 = 0;
/// [`BlurParams::kind`]: torchvision's `GaussianBlur(ksize, sigma)` (`STOKE_BLUR_GAUSS`).
pub const BLUR_GAUSS: u32 = 1;
/// [`BlurParams::kind`]: Pillow's `ImageFilter.GaussianBlur(radius)` (`STOKE_BLUR_PIL`).
pub const BLUR_PIL: u32 = 2;
/// Largest GaussianBlur kernel size (`STOKE_BLUR_KMAX`).
pub const BLUR_KMAX: u32 = 127;
/// Largest blur sigma or radius (`STOKE_BLUR_SIGMA_MAX`: bounds the width of a Pillow box).
pub const BLUR_SIGMA_MAX: f32 = 1024.0;

/// The drawn blur and solarize of one sample (mirrored by `StokeBlurParams`): what
/// `kernels/blur_math.cuh` applies after the color steps.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable, Serialize)]
pub struct BlurParams {
    /// [`BLUR_NONE`], [`BLUR_GAUSS`] or [`BLUR_PIL`]; NONE also when the probability did not fire.
    pub kind: u32,
    /// [`BLUR_GAUSS`]: the odd kernel size.
    pub ksize: u32,
    /// [`BLUR_GAUSS`]: the drawn sigma; [`BLUR_PIL`]: the drawn radius.
    pub sigma: f32,
    /// 1: RandomSolarize fired.
    pub solarize: u32,
    /// Solarize threshold on the 0..255 scale: values `>=` it become `255 − v`.
    pub threshold: f32,
}

impl BlurParams {
    /// Does the sample need the blur passes (a neighbourhood pass over its whole image)?
    pub fn blurs(&self) -> bool {
        self.kind != BLUR_NONE
    }

    /// Does it change the image at all (blur or solarize)?
    pub fn is_active(&self) -> bool {
        self.blurs() || self.solarize != 0
    }
}

/// Stream id for GaussianBlur and RandomSolarize draws.
pub const STREAM_BLUR: u64 = 10;

/// The blur and solarize of one sample (one view): with probability `blur.prob` a blur with
/// sigma (radius) uniform on the spec's range, drawn as f32 like torchvision's
/// `torch.empty(1).uniform_(lo, hi)` (DINO's `random.uniform` in double reaches Pillow as a C
/// float: the same value); then with probability `solarize.prob` a solarize. The three draws
/// (blur fires, sigma, solarize fires) are made whether or not they are used, so turning one on
/// does not move the other. The specs are passed in, not read from an [`AugmentSpec`], so that
/// each view of a multi-view recipe can give its own (DINO: blur 1.0 / 0.1 / 0.5, solarize 0 /
/// 0.2 / 0); `stream` separates those views' draws.
pub fn draw_blur(
    blur: Option<&super::spec::BlurSpec>,
    solarize: Option<&super::spec::SolarizeSpec>,
    seed: u64,
    epoch: u64,
    sample: u64,
    stream: u64,
) -> BlurParams {
    let mut b = BlurParams::default();
    if blur.is_none() && solarize.is_none() {
        return b;
    }
    let mut rng = SampleRng::new(seed, epoch, sample, stream);
    let fires = rng.uniform();
    let u = rng.uniform();
    let sol = rng.uniform();
    if let Some(s) = blur {
        let (lo, hi) = s.sigma;
        if fires < s.prob {
            b.sigma = (lo as f64 + (hi as f64 - lo as f64) * u) as f32;
            match s.kernel {
                Some(k) => (b.kind, b.ksize) = (BLUR_GAUSS, k),
                None => b.kind = BLUR_PIL,
            }
        }
    }
    if let Some(s) = solarize {
        b.threshold = s.threshold;
        b.solarize = (sol < s.prob) as u32;
    }
    b
}

/// Most RandomErasing boxes per sample (`STOKE_ERASE_MAX`).
pub const ERASE_MAX: usize = 4;

/// The drawn RandomErasing of one sample (mirrored by `StokeEraseParams`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct EraseParams {
    /// Boxes in use, `0..=ERASE_MAX`.
    pub count: u32,
    /// [`EraseMode`] code.
    pub mode: u32,
    /// Low half of the key of the per-element normal draws (`pixel` mode).
    pub key_lo: u32,
    /// High half of that key.
    pub key_hi: u32,
    /// `x, y, w, h` of each box in output pixels; later boxes are drawn over earlier ones.
    pub boxes: [[i32; 4]; ERASE_MAX],
    /// `rand` mode: each box's value per channel, on the normalized scale.
    pub colors: [[f32; 3]; ERASE_MAX],
}

/// Readable form for `dump`: the mode and the boxes (with their colors in `rand` mode).
impl serde::Serialize for EraseParams {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let n = (self.count as usize).min(ERASE_MAX);
        let mode = EraseMode::from_code(self.mode);
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("mode", mode.name())?;
        m.serialize_entry("boxes", &self.boxes[..n])?;
        if mode == EraseMode::Rand {
            m.serialize_entry("colors", &self.colors[..n])?;
        }
        m.end()
    }
}

/// Stream id for augment parameters (see [`SampleRng::new`]).
pub const STREAM_AUGMENT: u64 = 1;
/// Stream id for ColorJitter and RandomGrayscale draws.
pub const STREAM_COLOR: u64 = 5;
/// Stream id for RandomErasing draws.
pub const STREAM_ERASE: u64 = 6;
/// Stream id for the per-sample resize filter (`--train-interpolation random`).
pub const STREAM_FILTER: u64 = 7;
/// Stream id for RandomAffine draws.
pub const STREAM_AFFINE: u64 = 8;

/// torchvision's `ColorJitter.get_params` and `RandomGrayscale` for one sample: whether the
/// jitter runs (its probability), a uniform permutation of the four steps, then the four
/// factors in torchvision's order (brightness, contrast, saturation, hue), each drawn whether
/// or not its step runs so that turning one on does not move the others; then grayscale.
pub fn draw_color(spec: &AugmentSpec, seed: u64, epoch: u64, sample: u64) -> ColorParams {
    let mut c = ColorParams::default();
    if spec.color_jitter.is_none() && spec.grayscale_p <= 0.0 {
        return c;
    }
    let mut rng = SampleRng::new(seed, epoch, sample, STREAM_COLOR);
    let runs = rng.uniform();
    let mut order = [ColorOp::Brightness, ColorOp::Contrast, ColorOp::Saturation, ColorOp::Hue];
    for i in (1..4).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let mut factor = |r: Option<(f32, f32)>| -> Option<f32> {
        let u = rng.uniform();
        r.map(|(lo, hi)| (lo as f64 + (hi as f64 - lo as f64) * u) as f32)
    };
    if let Some(j) = &spec.color_jitter {
        let (b, ct, s, h) = (factor(j.brightness), factor(j.contrast), factor(j.saturation), factor(j.hue));
        if runs < j.prob {
            let on: Vec<ColorOp> = order
                .into_iter()
                .filter(|op| match op {
                    ColorOp::Brightness => b.is_some(),
                    ColorOp::Contrast => ct.is_some(),
                    ColorOp::Saturation => s.is_some(),
                    ColorOp::Hue => h.is_some(),
                })
                .collect();
            c.order = ColorParams::pack(&on);
            (c.brightness, c.contrast, c.saturation, c.hue) = (b.unwrap_or(1.0), ct.unwrap_or(1.0), s.unwrap_or(1.0), h.unwrap_or(0.0));
        }
    } else {
        for _ in 0..4 {
            rng.uniform();
        }
    }
    c.grayscale = rng.bernoulli(spec.grayscale_p) as u32;
    c
}

/// timm's `RandomErasing._erase` for one `out_w × out_h` sample: erased with probability
/// `prob`; a count in `[min_count, max_count]`; per box up to 10 tries of an area
/// `U(area) · W·H / count` and a log-uniform aspect, kept when `w < W and h < H` at a uniform
/// position; `rand` mode draws one normal per box and channel, `pixel` mode a key for the
/// kernels' per-element normals.
pub fn draw_erase(spec: &AugmentSpec, seed: u64, epoch: u64, sample: u64, out_w: i32, out_h: i32) -> EraseParams {
    let mut e = EraseParams::default();
    let Some(es) = &spec.erasing else { return e };
    let mut rng = SampleRng::new(seed, epoch, sample, STREAM_ERASE);
    e.mode = es.mode.code();
    let key = rng.next_u64();
    (e.key_lo, e.key_hi) = (key as u32, (key >> 32) as u32);
    if rng.uniform() >= es.prob {
        return e;
    }
    let count =
        if es.min_count == es.max_count { es.min_count } else { es.min_count + rng.below((es.max_count - es.min_count + 1) as u64) as u32 };
    let area = out_w as f64 * out_h as f64;
    let (la, lb) = (es.aspect.0.ln(), es.aspect.1.ln());
    let mut n = 0;
    for _ in 0..count.min(ERASE_MAX as u32) {
        for _ in 0..10 {
            let target = rng.uniform_in(es.area.0, es.area.1) * area / count as f64;
            let aspect = rng.uniform_in(la, lb).exp();
            let h = round_half_even((target * aspect).sqrt());
            let w = round_half_even((target / aspect).sqrt());
            if w < out_w as i64 && h < out_h as i64 {
                let top = rng.below((out_h as i64 - h + 1) as u64) as i32;
                let left = rng.below((out_w as i64 - w + 1) as u64) as i32;
                e.boxes[n] = [left, top, w as i32, h as i32];
                if es.mode == EraseMode::Rand {
                    for c in 0..3 {
                        e.colors[n][c] = rng.normal() as f32;
                    }
                }
                n += 1;
                break;
            }
        }
    }
    e.count = n as u32;
    e
}

/// Python's `round` (half to even) of a finite `x`, as torchvision's crop and RandomAffine's
/// translation use it.
pub fn round_half_even(x: f64) -> i64 {
    x.round_ties_even() as i64
}

/// The RandomResizedCrop box `(x, y, w, h)` for an oriented `width × height` image, exactly
/// as torchvision's `RandomResizedCrop.get_params` (docs/CONTRACTS.md, "Semantics"): up to 10 tries, then the
/// centred fallback.
pub fn random_resized_crop_box(rng: &mut SampleRng, width: i32, height: i32, scale: (f64, f64), ratio: (f64, f64)) -> (i32, i32, i32, i32) {
    let (wf, hf) = (width as f64, height as f64);
    let area = wf * hf;
    let (log_r0, log_r1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * rng.uniform_in(scale.0, scale.1);
        let ar = rng.uniform_in(log_r0, log_r1).exp();
        let w = round_half_even((target * ar).sqrt());
        let h = round_half_even((target / ar).sqrt());
        if w > 0 && w <= width as i64 && h > 0 && h <= height as i64 {
            let y = rng.below((height as i64 - h + 1) as u64) as i32;
            let x = rng.below((width as i64 - w + 1) as u64) as i32;
            return (x, y, w as i32, h as i32);
        }
    }
    let in_ratio = wf / hf;
    let (w, h) = if in_ratio < ratio.0 {
        (width as i64, round_half_even(wf / ratio.0))
    } else if in_ratio > ratio.1 {
        (round_half_even(hf * ratio.1), height as i64)
    } else {
        (width as i64, height as i64)
    };
    let (w, h) = (w.clamp(1, width as i64) as i32, h.clamp(1, height as i64) as i32);
    ((width - w) / 2, (height - h) / 2, w, h)
}

/// Resize so the shorter side becomes `short` (torchvision `Resize(int)`): the longer side is
/// `int(short · long / shorter)`. Returns `(w, h)`.
pub fn resize_shorter(width: i32, height: i32, short: i32) -> (i32, i32) {
    if width <= height {
        let h = (short as i64 * height as i64 / width as i64) as i32;
        (short, h)
    } else {
        let w = (short as i64 * width as i64 / height as i64) as i32;
        (w, short)
    }
}

/// torchvision `CenterCrop` offset: `int(round((in − out) / 2))` (Python round, half to even).
pub fn center_offset(input: i32, output: i32) -> i32 {
    round_half_even((input - output) as f64 / 2.0) as i32
}

/// Oriented size of a stored `w × h` image under EXIF orientation `o` (5..=8 swap axes).
pub fn oriented_size(w: i32, h: i32, orientation: u32) -> (i32, i32) {
    if (5..=8).contains(&orientation) {
        (h, w)
    } else {
        (w, h)
    }
}

/// Draw the parameters of global sample `sample` of `epoch` for a stored image of
/// `stored_w × stored_h` with EXIF `orientation` (1 when unknown or disabled by the spec).
///
/// Deterministic: a pure function of its arguments.
pub fn draw(spec: &AugmentSpec, seed: u64, epoch: u64, sample: u64, stored_w: i32, stored_h: i32, orientation: u32) -> AugParams {
    let orientation = if spec.apply_exif && (1..=8).contains(&orientation) { orientation } else { 1 };
    let (w, h) = oriented_size(stored_w.max(1), stored_h.max(1), orientation);
    let mut rng = SampleRng::new(seed, epoch, sample, STREAM_AUGMENT);
    let (out_w, out_h) = (spec.size.0 as i32, spec.size.1 as i32);
    let mut p = AugParams {
        src_w: w,
        src_h: h,
        crop_x: 0,
        crop_y: 0,
        crop_w: w,
        crop_h: h,
        resize_w: out_w,
        resize_h: out_h,
        win_x: 0,
        win_y: 0,
        out_w,
        out_h,
        orientation,
        filter: spec.filter.code(),
        antialias: spec.antialias as u32,
        flip_h: 0,
        flip_v: 0,
        rot_interp: spec.rotate_interp.code(),
        angle_deg: 0.0,
        fill: spec.fill,
        color: ColorParams::default(),
        erase: EraseParams::default(),
        affine: 0,
        affine_m: [0.0; 6],
        aa: AutoParams::default(),
        blur: BlurParams::default(),
    };
    match spec.crop {
        super::spec::CropMode::RandomResized { scale, ratio } => {
            let (x, y, cw, ch) = random_resized_crop_box(&mut rng, w, h, scale, ratio);
            (p.crop_x, p.crop_y, p.crop_w, p.crop_h) = (x, y, cw, ch);
        }
        super::spec::CropMode::ResizeCenter { shorter } => {
            let (rw, rh) = resize_shorter(w, h, shorter as i32);
            p.resize_w = rw;
            p.resize_h = rh;
            p.win_x = center_offset(rw, out_w);
            p.win_y = center_offset(rh, out_h);
        }
        super::spec::CropMode::Resize => {}
    }
    // Draws happen in a fixed order, each whether or not it is used, so that turning one
    // augmentation on does not change the draws of the others.
    let flip_h = rng.bernoulli(spec.hflip_p);
    let flip_v = rng.bernoulli(spec.vflip_p);
    let angle = rng.uniform_in(spec.rotate_deg.0 as f64, spec.rotate_deg.1 as f64);
    p.flip_h = flip_h as u32;
    p.flip_v = flip_v as u32;
    p.angle_deg = if spec.rotate_deg.0 == spec.rotate_deg.1 { spec.rotate_deg.0 } else { angle as f32 };
    if spec.random_filter {
        let mut frng = SampleRng::new(seed, epoch, sample, STREAM_FILTER);
        p.filter = if frng.below(2) == 0 { FILTER_BILINEAR } else { FILTER_BICUBIC };
    }
    if let Some(a) = &spec.affine {
        let mut arng = SampleRng::new(seed, epoch, sample, STREAM_AFFINE);
        p.affine = 1;
        p.affine_m = a.draw(&mut arng, out_w, out_h).inverse_matrix();
    }
    if let Some(aa) = &spec.auto_augment {
        let mut arng = SampleRng::new(seed, epoch, sample, super::auto::STREAM_AUTO);
        let bicubic = if spec.random_filter { None } else { Some(spec.filter == super::spec::Filter::Bicubic) };
        p.aa = aa.draw(&mut arng, out_w, out_h, bicubic);
    }
    p.color = draw_color(spec, seed, epoch, sample);
    p.erase = draw_erase(spec, seed, epoch, sample, out_w, out_h);
    p.blur = draw_blur(spec.blur.as_ref(), spec.solarize.as_ref(), seed, epoch, sample, STREAM_BLUR);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_round_is_half_to_even() {
        assert_eq!(round_half_even(0.5), 0);
        assert_eq!(round_half_even(1.5), 2);
        assert_eq!(round_half_even(2.5), 2);
        assert_eq!(round_half_even(2.4999), 2);
        assert_eq!(round_half_even(3.5000001), 4);
    }

    #[test]
    fn resize_shorter_matches_torchvision() {
        // torchvision: Resize(256) on 500x375 → (341, 256): int(256*500/375) = 341.
        assert_eq!(resize_shorter(500, 375, 256), (341, 256));
        assert_eq!(resize_shorter(375, 500, 256), (256, 341));
        assert_eq!(resize_shorter(256, 256, 256), (256, 256));
    }

    #[test]
    fn center_offset_rounds_half_to_even() {
        // (341 - 224) / 2 = 58.5 → 58 (Python round).
        assert_eq!(center_offset(341, 224), 58);
        assert_eq!(center_offset(256, 224), 16);
        assert_eq!(center_offset(227, 224), 2); // 1.5 → 2
    }

    #[test]
    fn rrc_box_always_inside_and_area_in_range() {
        for s in 0..2000u64 {
            let mut rng = SampleRng::new(7, 0, s, STREAM_AUGMENT);
            let (w, h) = (1 + (s % 700) as i32, 1 + (s * 7 % 900) as i32);
            let (x, y, cw, ch) = random_resized_crop_box(&mut rng, w, h, (0.08, 1.0), (0.75, 4.0 / 3.0));
            assert!(cw > 0 && ch > 0 && x >= 0 && y >= 0 && x + cw <= w && y + ch <= h, "{w}x{h}: {x},{y},{cw},{ch}");
        }
    }

    #[test]
    fn works_as_a_rand_generator() {
        use rand::{Rng, RngExt};
        let base = SampleRng::new(3, 1, 4, 1);
        // rand's view of the stream is the stream itself.
        let (mut a, mut b) = (base.clone(), base.clone());
        for _ in 0..16 {
            assert_eq!(Rng::next_u64(&mut a), b.next_u64());
        }
        let (mut a, mut b) = (base.clone(), base.clone());
        let mut bytes = [0u8; 13];
        a.fill_bytes(&mut bytes);
        let (w0, w1) = (b.next_u64().to_le_bytes(), b.next_u64().to_le_bytes());
        assert_eq!(&bytes[..8], &w0);
        assert_eq!(&bytes[8..], &w1[..5]);
        // rand's distributions work on it and stay in range.
        let mut a = base.clone();
        for _ in 0..1000 {
            let v = a.random_range(10..17u32);
            assert!((10..17).contains(&v));
        }
    }

    #[test]
    fn below_is_unbiased_enough_and_in_range() {
        let mut rng = SampleRng::new(1, 2, 3, 4);
        let mut counts = [0u32; 3];
        for _ in 0..30_000 {
            counts[rng.below(3) as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
    }
}
