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

use super::spec::AugmentSpec;
use bytemuck::{Pod, Zeroable};

// The kernels' codes, defined beside the enums that name them.
pub use super::spec::{FILTER_BICUBIC, FILTER_BILINEAR, ROT_BILINEAR, ROT_NEAREST};

/// Everything a backend needs to produce one output sample from its decoded pixels.
///
/// Mirrored by `StokeAugParams` in `kernels/stoke_params.cuh`. Change both or neither.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable, serde::Serialize)]
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
}

const _: () = assert!(std::mem::size_of::<AugParams>() == 88);
const _: () = assert!(std::mem::offset_of!(AugParams, orientation) == 48);
const _: () = assert!(std::mem::offset_of!(AugParams, angle_deg) == 72);
const _: () = assert!(std::mem::offset_of!(AugParams, fill) == 76);

/// A counter-based random stream keyed by `(seed, epoch, sample, stream)`.
///
/// SplitMix64 over a keyed counter: cheap, stateless between samples, stable across crate
/// versions (unlike `rand`'s `StdRng`, whose algorithm may change), so a seed means the same
/// pictures in every release and on every thread count.
#[derive(Clone, Debug)]
pub struct SampleRng {
    state: u64,
}

#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SampleRng {
    /// The stream for one sample of one epoch. `stream` separates independent uses
    /// (augment parameters, substitutes, weighted sampling) of the same sample.
    pub fn new(seed: u64, epoch: u64, sample: u64, stream: u64) -> Self {
        let k = mix64(seed ^ 0x5354_4f4b_4500_0001);
        let k = mix64(k ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let k = mix64(k ^ sample.wrapping_mul(0xd1b5_4a32_d192_ed03));
        let k = mix64(k ^ stream.wrapping_mul(0x8cb9_2ba7_2f3d_8dd7));
        Self { state: k }
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    #[inline]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi)`.
    #[inline]
    pub fn uniform_in(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Uniform integer in `[0, n)` without modulo bias (Lemire's method). `n > 0`.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// True with probability `p`.
    #[inline]
    pub fn bernoulli(&mut self, p: f64) -> bool {
        p > 0.0 && self.uniform() < p
    }
}

/// `SampleRng` is a [`rand`] generator too (`rand::Rng` through this impl), so a user's own
/// extra augmentations can use rand's distributions on the same keyed, reproducible stream.
impl rand::TryRng for SampleRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok((self.next_u64() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(self.next_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes()[..chunk.len()]);
        }
        Ok(())
    }
}

/// Stream id for augment parameters (see [`SampleRng::new`]).
pub const STREAM_AUGMENT: u64 = 1;

/// Python's `round` (half to even) for a non-negative finite `x`, as torchvision's crop uses.
pub fn round_half_even(x: f64) -> i64 {
    let r = x.round(); // half away from zero
    if (x - x.trunc()).abs() == 0.5 && (r as i64) % 2 != 0 {
        (r - x.signum()) as i64
    } else {
        r as i64
    }
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
