//! nvJPEG decode planning: which decoder takes each image, how the hardware calls are
//! sized, which region of the image is decoded, and where it lands in the device arena.
//!
//! Routing (DESIGN.md "performance model", contract 4):
//! - baseline 8-bit YCbCr/gray JPEGs that `nvjpegDecodeBatchedSupported(Ex)` accepts go to
//!   the hardware engine (`NVJPEG_BACKEND_HARDWARE`), in calls sized in multiples of
//!   engines × cores per engine (`nvjpegGetHardwareDecoderInfo`);
//! - progressive, extended-sequential and the subsamplings the engine refuses go to the CUDA
//!   decoder (`NVJPEG_BACKEND_GPU_HYBRID`) on a second stream, concurrently;
//! - what nvJPEG cannot represent faithfully (CMYK/YCCK and Adobe no-transform RGB, whose
//!   colour conventions are libjpeg-turbo's; 12-bit; lossless; arithmetic; odd sampling
//!   factors) and every image a GPU decoder failed on go to the CPU decoder
//!   (`backend::cpu::decode::decode_rgb`), then to the `skip`/`fail` policy.
//!
//! Every decoded image is interleaved RGB (`NVJPEG_OUTPUT_RGBI`), pitch `3 · width`, at a
//! [`ARENA_ALIGN`]-aligned offset of one device arena sized once ([`ArenaPlan`]).
//!
//! Chroma upsampling: the handles are created with
//! `NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION` ("fancy" upsampling, libjpeg-turbo's default),
//! so GPU- and CPU-decoded pictures agree to the corpus tolerance (mean abs diff < 2).

use crate::augment::params::{AugParams, FILTER_BICUBIC};

/// Offset alignment of every decoded image in the arena (the CUDA allocation granularity;
/// nvJPEG's hardware engine writes whole 256-byte lines most efficiently).
pub const ARENA_ALIGN: u64 = 256;

/// JPEG coding process, from the SOF marker (`nvjpegJpegEncoding_t` values where nvJPEG
/// names them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// SOF0.
    Baseline,
    /// SOF1 (Huffman).
    Extended,
    /// SOF2 (Huffman).
    Progressive,
    /// SOF3.
    Lossless,
    /// SOF9–SOF11 and anything else nvJPEG does not parse.
    Other,
}

/// Chroma layout of a 3-component image (`nvjpegChromaSubsampling_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Css {
    /// 4:4:4.
    S444,
    /// 4:2:2.
    S422,
    /// 4:2:0.
    S420,
    /// 4:4:0.
    S440,
    /// 4:1:1.
    S411,
    /// 4:1:0.
    S410,
    /// 4:1:0 vertical.
    S410V,
    /// One component.
    Gray,
    /// Sampling factors nvJPEG has no name for.
    Unknown,
}

impl Css {
    /// From the raw `nvjpegChromaSubsampling_t`.
    pub fn from_nvjpeg(v: i32) -> Self {
        match v {
            0 => Css::S444,
            1 => Css::S422,
            2 => Css::S420,
            3 => Css::S440,
            4 => Css::S411,
            5 => Css::S410,
            6 => Css::Gray,
            7 => Css::S410V,
            _ => Css::Unknown,
        }
    }
}

/// What the header says, as far as routing cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamFacts {
    /// Coding process.
    pub coding: Coding,
    /// Bits per sample.
    pub precision: u32,
    /// Number of components (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK).
    pub components: u32,
    /// Chroma layout.
    pub css: Css,
    /// Adobe APP14 transform flag when present (0 = RGB/CMYK stored as is).
    pub adobe_transform: Option<u8>,
    /// Stored width.
    pub width: u32,
    /// Stored height.
    pub height: u32,
}

/// Which decoder takes an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// nvJPEG's hardware engine, batched.
    Hardware,
    /// nvJPEG's CUDA (GPU-assisted hybrid) decoder, on its own stream.
    Cuda,
    /// The CPU decoder.
    Cpu,
}

/// Why an image is rejected before any decoder sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Header dimensions over the decoded-size guard.
    TooLarge {
        /// Stored width.
        width: u32,
        /// Stored height.
        height: u32,
        /// The guard.
        max_pixels: u64,
    },
    /// A zero dimension in the header.
    Empty,
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reject::TooLarge { width, height, max_pixels } => write!(
                f,
                "image is {width}x{height} = {} pixels, over the decoded-size guard of {max_pixels} pixels",
                *width as u64 * *height as u64
            ),
            Reject::Empty => write!(f, "image header has a zero dimension"),
        }
    }
}

/// Pick the decoder for one image.
///
/// `facts` is `None` when nvJPEG could not parse the header (the CPU decoder is more
/// tolerant and produces the error message when it fails too). `hw_supported` is nvJPEG's
/// answer from `nvjpegDecodeBatchedSupportedEx` (`None` when there is no hardware engine).
pub fn route(facts: Option<&StreamFacts>, hw_supported: Option<bool>, max_pixels: u64) -> Result<Route, Reject> {
    let Some(f) = facts else { return Ok(Route::Cpu) };
    if f.width == 0 || f.height == 0 {
        return Err(Reject::Empty);
    }
    if f.width as u64 * f.height as u64 > max_pixels {
        return Err(Reject::TooLarge { width: f.width, height: f.height, max_pixels });
    }
    let colour_ok = match f.components {
        1 => true,
        // Adobe transform 0 on 3 components is RGB stored as is: nvJPEG would convert it as
        // YCbCr.
        3 => f.adobe_transform != Some(0),
        _ => false, // CMYK / YCCK: libjpeg-turbo's inverted-CMYK convention lives on the CPU
    };
    let gpu_css = matches!(f.css, Css::S444 | Css::S422 | Css::S420 | Css::S440 | Css::S411 | Css::S410 | Css::Gray);
    if !colour_ok || f.precision != 8 || !gpu_css {
        return Ok(Route::Cpu);
    }
    match f.coding {
        Coding::Baseline => {
            // The engine takes single-scan baseline without 4:1:1/4:1:0 (nvjpeg.h), and we
            // trust its own check over ours.
            let engine_css = !matches!(f.css, Css::S411 | Css::S410);
            if hw_supported == Some(true) && engine_css {
                Ok(Route::Hardware)
            } else {
                Ok(Route::Cuda)
            }
        }
        Coding::Extended | Coding::Progressive => Ok(Route::Cuda),
        Coding::Lossless | Coding::Other => Ok(Route::Cpu),
    }
}

/// Sizes of the hardware-engine calls for `n` images: the engine has `unit` = engines ×
/// cores-per-engine decode slots, so every call but the last takes `per_call` images (a
/// multiple of `unit`, at most `max_per_call` rounded down to one, at least `unit`) and the
/// last takes the rest. Fewer, fuller calls keep every core busy; more than one call lets
/// the host parse call `i + 1` while the engine decodes call `i`.
pub fn hw_calls(n: usize, unit: usize, max_per_call: usize) -> Vec<usize> {
    let unit = unit.max(1);
    let per_call = (max_per_call / unit).max(1) * unit;
    let mut v = vec![per_call; n / per_call];
    if n % per_call != 0 {
        v.push(n % per_call);
    }
    v
}

/// A region of an image, in pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roi {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width.
    pub w: u32,
    /// Height.
    pub h: u32,
}

/// Stored coordinates of oriented pixel `(x, y)` of an image stored as `sw × sh` under EXIF
/// orientation `o` (the oriented image is `sh × sw` for 5..=8).
pub fn oriented_to_stored(x: u32, y: u32, sw: u32, sh: u32, o: u32) -> (u32, u32) {
    match o {
        2 => (sw - 1 - x, y),
        3 => (sw - 1 - x, sh - 1 - y),
        4 => (x, sh - 1 - y),
        5 => (y, x),
        6 => (y, sh - 1 - x),
        7 => (sw - 1 - y, sh - 1 - x),
        8 => (sw - 1 - y, x),
        _ => (x, y),
    }
}

/// Source span `[lo, hi)` along one axis that output indices `[first, first + n)` of a
/// resize from `in_size` to `out_size` can touch, a superset of Pillow's
/// `precompute_coeffs` taps (antialiased) and of the two taps of plain bilinear/bicubic.
fn tap_span(in_size: u32, out_size: u32, first: u32, n: u32, filter: u32, antialias: bool) -> (u32, u32) {
    let scale = in_size as f64 / out_size as f64;
    let a = if filter == FILTER_BICUBIC { 2.0 } else { 1.0 };
    let fs = if antialias { scale.max(1.0) } else { 1.0 };
    let support = a * fs;
    let c0 = (first as f64 + 0.5) * scale;
    let c1 = ((first + n) as f64 - 0.5) * scale;
    // One extra pixel each side covers int() truncation and the plain filters' -0.5 shift.
    let lo = (c0 - support - 1.0).floor().max(0.0) as u32;
    let hi = ((c1 + support + 1.0).ceil() as u32).min(in_size);
    (lo.min(hi.saturating_sub(1)), hi)
}

/// Round a span outward to multiples of `mcu` (the JPEG block grid), clamped to `size`.
fn to_grid(lo: u32, hi: u32, mcu: u32, size: u32) -> (u32, u32) {
    let lo = lo / mcu * mcu;
    let hi = hi.div_ceil(mcu).saturating_mul(mcu).min(size);
    (lo, hi)
}

/// The part of the stored image that the augment step reads for `p`, in stored coordinates,
/// grown to the `mcu` grid (16 covers every subsampling). Decoding only this region is the
/// crop-before-decode of random-resized crop. The whole image when nothing can be saved.
pub fn decode_roi(p: &AugParams, stored_w: u32, stored_h: u32, mcu: u32) -> Roi {
    let aa = p.antialias != 0;
    let (x0, x1) = tap_span(p.crop_w as u32, p.resize_w as u32, p.win_x.max(0) as u32, p.out_w as u32, p.filter, aa);
    let (y0, y1) = tap_span(p.crop_h as u32, p.resize_h as u32, p.win_y.max(0) as u32, p.out_h as u32, p.filter, aa);
    let (ox0, oy0) = (p.crop_x as u32 + x0, p.crop_y as u32 + y0);
    let (ox1, oy1) = (p.crop_x as u32 + x1 - 1, p.crop_y as u32 + y1 - 1); // inclusive
    let (ax, ay) = oriented_to_stored(ox0, oy0, stored_w, stored_h, p.orientation);
    let (bx, by) = oriented_to_stored(ox1, oy1, stored_w, stored_h, p.orientation);
    let (sx0, sx1) = to_grid(ax.min(bx), ax.max(bx) + 1, mcu, stored_w);
    let (sy0, sy1) = to_grid(ay.min(by), ay.max(by) + 1, mcu, stored_h);
    Roi { x: sx0, y: sy0, w: sx1 - sx0, h: sy1 - sy0 }
}

/// The device arena for one batch's decoded images, sized once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaPlan {
    /// Bytes of the arena.
    pub bytes: u64,
}

/// Decoded bytes of a `w × h` RGB image, aligned.
pub fn decoded_bytes(w: u32, h: u32) -> u64 {
    (w as u64 * h as u64 * 3).next_multiple_of(ARENA_ALIGN)
}

impl ArenaPlan {
    /// Room for the `batch` largest images of the index (`pixels`: stored `w·h` per sample,
    /// already capped by the decoded-size guard), so any batch fits whole even without ROI
    /// decode.
    pub fn new(pixels: impl IntoIterator<Item = u64>, batch: usize, max_pixels: u64) -> Self {
        let sizes = pixels.into_iter().map(|p| (p.min(max_pixels) * 3).next_multiple_of(ARENA_ALIGN));
        Self { bytes: super::staging::largest_k_sum(sizes, batch, ARENA_ALIGN).max(ARENA_ALIGN) }
    }
}

/// Bump allocation of a batch's decoded images inside the arena. An image that does not fit
/// (its header disagrees with the index) gets `None` and goes to the policy, never to a
/// bigger allocation.
#[derive(Clone, Debug)]
pub struct ArenaCursor {
    capacity: u64,
    used: u64,
}

impl ArenaCursor {
    /// An empty arena of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self { capacity, used: 0 }
    }

    /// Offset for a `w × h` RGB image, or `None` when it does not fit.
    pub fn place(&mut self, w: u32, h: u32) -> Option<u64> {
        let n = decoded_bytes(w, h);
        let end = self.used.checked_add(n)?;
        (end <= self.capacity).then(|| std::mem::replace(&mut self.used, end))
    }

    /// Start a new batch.
    pub fn reset(&mut self) {
        self.used = 0;
    }
}

/// Canary pixels written into every GPU decode destination before the decode and checked
/// after it (`stoke_canary_set` / `stoke_canary_check` in `kernels/augment.cu`): a decoder,
/// the hardware engine in particular, can report success for an image it skipped. The
/// `CANARIES` pixels are spread over every row band and column band of the region, each with
/// its own three-byte value; an image counts as not written when at least
/// `CANARY_MIN_INTACT` of them survive. A decoded pixel equals a given canary with
/// probability about 2^-24, so a false alarm (which only costs a CPU re-decode) happens about
/// once in 500 000 images; a skipped or partly written image keeps canaries.
pub const CANARIES: u32 = 32;
/// See [`CANARIES`].
pub const CANARY_MIN_INTACT: u32 = 1;

/// Where one GPU decode writes, for the canary kernels. Mirrored by `StokeDecodeTarget` in
/// `kernels/augment.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DecodeTarget {
    /// Arena byte offset of the decoded region.
    pub offset: u64,
    /// Decoded width (the ROI's).
    pub width: u32,
    /// Decoded height.
    pub height: u32,
    /// Bytes per row (`3 · width`).
    pub pitch: u32,
    /// Zero.
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<DecodeTarget>() == 24);

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(coding: Coding, css: Css, components: u32) -> StreamFacts {
        StreamFacts { coding, precision: 8, components, css, adobe_transform: None, width: 500, height: 375 }
    }

    #[test]
    fn routing_table() {
        let g = 100_000_000;
        use Coding::*;
        // (facts, hw answer, expected)
        let cases = [
            (facts(Baseline, Css::S420, 3), Some(true), Route::Hardware),
            (facts(Baseline, Css::S420, 3), Some(false), Route::Cuda), // engine refused
            (facts(Baseline, Css::S420, 3), None, Route::Cuda),        // no engine on this GPU
            (facts(Baseline, Css::Gray, 1), Some(true), Route::Hardware),
            (facts(Baseline, Css::S411, 3), Some(true), Route::Cuda), // engine lacks 4:1:1
            (facts(Baseline, Css::S410, 3), Some(true), Route::Cuda),
            (facts(Progressive, Css::S420, 3), Some(true), Route::Cuda),
            (facts(Extended, Css::S444, 3), None, Route::Cuda),
            (facts(Lossless, Css::S444, 3), None, Route::Cpu),
            (facts(Other, Css::S420, 3), None, Route::Cpu), // arithmetic coding
            (facts(Baseline, Css::Unknown, 3), Some(true), Route::Cpu), // odd sampling factors
            (facts(Baseline, Css::S410V, 3), Some(true), Route::Cpu),
            (facts(Baseline, Css::S444, 4), Some(true), Route::Cpu), // CMYK
        ];
        for (f, hw, want) in cases {
            assert_eq!(route(Some(&f), hw, g), Ok(want), "{f:?} hw={hw:?}");
        }
        let mut rgb = facts(Baseline, Css::S444, 3);
        rgb.adobe_transform = Some(0);
        assert_eq!(route(Some(&rgb), Some(true), g), Ok(Route::Cpu));
        rgb.adobe_transform = Some(1);
        assert_eq!(route(Some(&rgb), Some(true), g), Ok(Route::Hardware));
        let mut p12 = facts(Baseline, Css::S420, 3);
        p12.precision = 12;
        assert_eq!(route(Some(&p12), Some(true), g), Ok(Route::Cpu));
        assert_eq!(route(None, None, g), Ok(Route::Cpu));
    }

    #[test]
    fn routing_rejects_bombs_and_empty_headers_before_any_decoder() {
        let mut f = facts(Coding::Baseline, Css::S420, 3);
        (f.width, f.height) = (64250, 64250);
        let e = route(Some(&f), Some(true), 100_000_000).unwrap_err();
        assert_eq!(e, Reject::TooLarge { width: 64250, height: 64250, max_pixels: 100_000_000 });
        assert!(e.to_string().contains("64250x64250 = 4128062500 pixels"), "{e}");
        f.width = 0;
        assert_eq!(route(Some(&f), Some(true), 100), Err(Reject::Empty));
    }

    #[test]
    fn hw_calls_are_multiples_of_the_engine_width() {
        // Shapes like A100 (5 decode cores) and H100 (7 NVJPG engines).
        assert_eq!(hw_calls(0, 5, 64), Vec::<usize>::new());
        assert_eq!(hw_calls(256, 5, 64), [vec![60; 4], vec![16]].concat());
        assert_eq!(hw_calls(256, 7, 256), vec![252, 4]);
        assert_eq!(hw_calls(3, 7, 256), vec![3]);
        assert_eq!(hw_calls(20, 8, 4), vec![8, 8, 4]); // cap below one unit: one unit per call
        for (n, unit, cap) in [(1000usize, 6usize, 100usize), (17, 1, 1), (255, 16, 64)] {
            let v = hw_calls(n, unit, cap);
            assert_eq!(v.iter().sum::<usize>(), n);
            assert!(v[..v.len() - 1].iter().all(|&c| c % unit == 0 && c == v[0]));
        }
    }

    /// Naive orientation: build the oriented picture by explicit flips/transposes of a stored
    /// grid of ids and compare with the point map.
    #[test]
    fn orientation_point_map_matches_explicit_transforms() {
        let (sw, sh) = (5u32, 3u32);
        let stored: Vec<Vec<u32>> = (0..sh).map(|y| (0..sw).map(|x| y * sw + x).collect()).collect();
        let flip_h = |g: &Vec<Vec<u32>>| g.iter().map(|r| r.iter().rev().copied().collect()).collect::<Vec<Vec<u32>>>();
        let flip_v = |g: &Vec<Vec<u32>>| g.iter().rev().cloned().collect::<Vec<Vec<u32>>>();
        let transpose = |g: &Vec<Vec<u32>>| {
            (0..g[0].len()).map(|x| (0..g.len()).map(|y| g[y][x]).collect()).collect::<Vec<Vec<u32>>>()
        };
        let oriented = |o: u32| match o {
            1 => stored.clone(),
            2 => flip_h(&stored),
            3 => flip_v(&flip_h(&stored)),
            4 => flip_v(&stored),
            5 => transpose(&stored),
            6 => flip_h(&transpose(&stored)), // rotate 90° clockwise
            7 => flip_v(&flip_h(&transpose(&stored))),
            8 => flip_v(&transpose(&stored)), // rotate 90° counter-clockwise
            _ => unreachable!(),
        };
        for o in 1..=8 {
            let g = oriented(o);
            for (y, row) in g.iter().enumerate() {
                for (x, &id) in row.iter().enumerate() {
                    let (px, py) = oriented_to_stored(x as u32, y as u32, sw, sh, o);
                    assert_eq!(py * sw + px, id, "orientation {o} at ({x},{y})");
                }
            }
        }
    }

    /// Naive taps (Pillow `precompute_coeffs` bounds for the antialiased case, the two/four
    /// neighbours for the plain case) must lie inside [`tap_span`].
    fn naive_taps(in_size: u32, out_size: u32, i: u32, filter: u32, antialias: bool) -> (u32, u32) {
        let scale = in_size as f64 / out_size as f64;
        let a = if filter == FILTER_BICUBIC { 2.0 } else { 1.0 };
        let c = (i as f64 + 0.5) * scale;
        if antialias {
            let support = a * scale.max(1.0);
            let lo = ((c - support + 0.5) as i64).max(0) as u32;
            let hi = ((c + support + 0.5) as i64).min(in_size as i64) as u32;
            (lo, hi)
        } else {
            let x = c - 0.5;
            let lo = (x.floor() as i64 - (a as i64 - 1)).clamp(0, in_size as i64 - 1) as u32;
            let hi = (x.floor() as i64 + a as i64 + 1).clamp(1, in_size as i64) as u32;
            (lo, hi)
        }
    }

    #[test]
    fn roi_contains_every_tap_for_every_orientation() {
        let mut rng = crate::augment::params::SampleRng::new(3, 0, 0, 9);
        for _ in 0..4000 {
            let sw = 1 + rng.below(700) as u32;
            let sh = 1 + rng.below(700) as u32;
            let o = 1 + rng.below(8) as u32;
            let (w, h) = if o >= 5 { (sh, sw) } else { (sw, sh) };
            let cw = 1 + rng.below(w as u64) as u32;
            let ch = 1 + rng.below(h as u64) as u32;
            let cx = rng.below((w - cw + 1) as u64) as u32;
            let cy = rng.below((h - ch + 1) as u64) as u32;
            let rw = 1 + rng.below(400) as u32;
            let rh = 1 + rng.below(400) as u32;
            let ow = 1 + rng.below(rw as u64) as u32;
            let oh = 1 + rng.below(rh as u64) as u32;
            let wx = rng.below((rw - ow + 1) as u64) as u32;
            let wy = rng.below((rh - oh + 1) as u64) as u32;
            let filter = rng.below(2) as u32;
            let aa = rng.below(2) == 1;
            let p = AugParams {
                src_w: w as i32,
                src_h: h as i32,
                crop_x: cx as i32,
                crop_y: cy as i32,
                crop_w: cw as i32,
                crop_h: ch as i32,
                resize_w: rw as i32,
                resize_h: rh as i32,
                win_x: wx as i32,
                win_y: wy as i32,
                out_w: ow as i32,
                out_h: oh as i32,
                orientation: o,
                filter,
                antialias: aa as u32,
                ..Default::default()
            };
            let roi = decode_roi(&p, sw, sh, 16);
            assert!(roi.x + roi.w <= sw && roi.y + roi.h <= sh && roi.w > 0 && roi.h > 0, "{roi:?} in {sw}x{sh}");
            assert!(roi.x % 16 == 0 && roi.y % 16 == 0);
            for (ox, oy) in [(wx, wy), (wx + ow - 1, wy + oh - 1), (wx, wy + oh - 1), (wx + ow - 1, wy)] {
                let (x0, x1) = naive_taps(cw, rw, ox, filter, aa);
                let (y0, y1) = naive_taps(ch, rh, oy, filter, aa);
                for (tx, ty) in [(x0, y0), (x1 - 1, y1 - 1), (x0, y1 - 1), (x1 - 1, y0)] {
                    let (sx, sy) = oriented_to_stored(cx + tx, cy + ty, sw, sh, o);
                    assert!(
                        sx >= roi.x && sx < roi.x + roi.w && sy >= roi.y && sy < roi.y + roi.h,
                        "tap ({sx},{sy}) outside {roi:?} for {p:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn roi_of_a_small_crop_is_small() {
        // 500x375, a 100x80 crop resized to 224: the region is the crop plus a filter margin
        // on the 16-pixel grid, far less than the image.
        let p = AugParams {
            src_w: 500,
            src_h: 375,
            crop_x: 200,
            crop_y: 100,
            crop_w: 100,
            crop_h: 80,
            resize_w: 224,
            resize_h: 224,
            out_w: 224,
            out_h: 224,
            orientation: 1,
            antialias: 1,
            ..Default::default()
        };
        let r = decode_roi(&p, 500, 375, 16);
        assert_eq!(r, Roi { x: 192, y: 96, w: 112, h: 96 });
    }

    #[test]
    fn arena_fits_any_batch_of_the_index_and_refuses_overflow() {
        let pixels = [500u64 * 375, 375 * 500, 64 * 64, 1000 * 1000, 1];
        let plan = ArenaPlan::new(pixels, 2, u64::MAX);
        assert_eq!(plan.bytes, decoded_bytes(1000, 1000) + decoded_bytes(500, 375));
        let mut c = ArenaCursor::new(plan.bytes);
        assert_eq!(c.place(1000, 1000), Some(0));
        assert_eq!(c.place(375, 500), Some(decoded_bytes(1000, 1000)));
        assert_eq!(c.place(1, 1), None, "full");
        c.reset();
        assert_eq!(c.place(1, 1), Some(0));
        assert_eq!(c.place(1, 1), Some(ARENA_ALIGN));
        // The guard caps what the index can ask for.
        assert_eq!(ArenaPlan::new([u64::MAX / 8], 1, 100).bytes, ARENA_ALIGN * 2);
    }
}
