//! Host side of the fused augment kernel (`kernels/augment.cu`): the per-sample descriptor,
//! the filter-table scratch, and the launch geometry.
//!
//! Two launches per batch, both on the producer stream:
//! 1. `stoke_augment_tables`: one thread per (sample, axis, window index) computes that
//!    output column's (row's) filter taps — `xmin`, `count` and the normalised f32 weights of
//!    the shared math (`kernels/augment_math.cuh`) — into the table scratch. Tables are
//!    computed once per sample rather than once per block, and serve the rotated case, whose
//!    output tiles touch arbitrary window positions.
//! 2. `stoke_augment`: one thread per output pixel (blocks of 32 × 8, `grid.z` = sample)
//!    maps the pixel back through rotation, flip and window to a resized-image position,
//!    accumulates `Σ_ky wy · (Σ_kx wx · src)` in exactly the CPU backend's order, normalizes,
//!    casts and writes its three output elements once, in the final dtype and layout.
//!
//! Orientation costs nothing per tap: EXIF orientation is an affine map of pixel indices,
//! so every sample carries the byte offset of its oriented crop origin and the (signed)
//! byte steps of one oriented pixel right and down in the decoded buffer ([`SampleDesc`]).

use crate::augment::params::{AugParams, FILTER_BICUBIC};
use bytemuck::{Pod, Zeroable};

/// Per-sample launch descriptor. Mirrored by `StokeSampleDesc` in `kernels/augment.cu`
/// (both sides assert the size).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct SampleDesc {
    /// Byte offset, from the arena start, of oriented crop pixel (0, 0). May lie outside the
    /// decoded region (ROI decode); only taps, which lie inside, are dereferenced.
    pub base: i64,
    /// Bytes from an oriented pixel to its right neighbour.
    pub step_x: i64,
    /// Bytes from an oriented pixel to the one below.
    pub step_y: i64,
    /// Index of the first x-axis span of this sample in the span table.
    pub span_x: u32,
    /// Index of the first y-axis span.
    pub span_y: u32,
    /// Index of the first x-axis weight in the weight table.
    pub weight_x: u32,
    /// Index of the first y-axis weight.
    pub weight_y: u32,
    /// Weights per x-axis span (the table stride: the most taps any column can have).
    pub ktaps_x: u32,
    /// Weights per y-axis span.
    pub ktaps_y: u32,
}

const _: () = assert!(std::mem::size_of::<SampleDesc>() == 48);

/// The most taps one output index can have resizing `in_size` to `out_size`: Pillow's
/// `ksize = ceil(support) · 2 + 1`, with `support = a · max(scale, 1)` when antialiasing and
/// `a` otherwise (a = 1 bilinear, 2 bicubic).
pub fn max_taps(in_size: u32, out_size: u32, filter: u32, antialias: bool) -> u32 {
    let a = if filter == FILTER_BICUBIC { 2.0 } else { 1.0 };
    let scale = in_size as f64 / out_size.max(1) as f64;
    let support = if antialias { a * scale.max(1.0) } else { a };
    support.ceil() as u32 * 2 + 1
}

/// `(base, step_x, step_y)` for a decoded region of a `sw × sh` stored image: the region
/// starts at stored `(roi_x, roi_y)`, is interleaved RGB with `pitch` bytes per row and lies
/// at `offset` in the arena; the oriented crop origin is `(crop_x, crop_y)` under EXIF
/// orientation `o`.
#[allow(clippy::too_many_arguments)]
pub fn oriented_steps(
    offset: u64,
    pitch: u64,
    roi: (u32, u32),
    stored: (u32, u32),
    crop: (i32, i32),
    o: u32,
) -> (i64, i64, i64) {
    let (sw, sh) = (stored.0 as i64, stored.1 as i64);
    let (p, c) = (pitch as i64, 3i64);
    // Stored (sx, sy) of oriented (ox, oy) is affine: sx = ax + bx·ox + cx·oy, likewise sy
    // (the cases of `decode::oriented_to_stored`).
    let (ax, bx, cx, ay, by, cy) = match o {
        2 => (sw - 1, -1, 0, 0, 0, 1),
        3 => (sw - 1, -1, 0, sh - 1, 0, -1),
        4 => (0, 1, 0, sh - 1, 0, -1),
        5 => (0, 0, 1, 0, 1, 0),
        6 => (0, 0, 1, sh - 1, -1, 0),
        7 => (sw - 1, 0, -1, sh - 1, -1, 0),
        8 => (sw - 1, 0, -1, 0, 1, 0),
        _ => (0, 1, 0, 0, 0, 1),
    };
    let step_x = bx * c + by * p;
    let step_y = cx * c + cy * p;
    let (ox, oy) = (crop.0 as i64, crop.1 as i64);
    let sx = ax + bx * ox + cx * oy - roi.0 as i64;
    let sy = ay + by * ox + cy * oy - roi.1 as i64;
    (offset as i64 + sy * p + sx * c, step_x, step_y)
}

/// Filter-table layout for one batch, filled in sample order.
#[derive(Clone, Debug, Default)]
pub struct TableLayout {
    /// Spans (`int2 {xmin, count}`) used so far.
    pub spans: u32,
    /// Weights (`f32`) used so far.
    pub weights: u32,
}

impl TableLayout {
    /// Reserve the tables of one sample and fill the table fields of its descriptor.
    pub fn add(&mut self, p: &AugParams, d: &mut SampleDesc) {
        let aa = p.antialias != 0;
        d.ktaps_x = max_taps(p.crop_w as u32, p.resize_w as u32, p.filter, aa);
        d.ktaps_y = max_taps(p.crop_h as u32, p.resize_h as u32, p.filter, aa);
        d.span_x = self.spans;
        d.span_y = self.spans + p.out_w as u32;
        self.spans += (p.out_w + p.out_h) as u32;
        d.weight_x = self.weights;
        d.weight_y = self.weights + p.out_w as u32 * d.ktaps_x;
        self.weights += p.out_w as u32 * d.ktaps_x + p.out_h as u32 * d.ktaps_y;
    }
}

/// The table scratch, sized once from the config and the index: room for `batch` samples of
/// `out_w × out_h` whose crops are at most `max_side` pixels on a side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TablePlan {
    /// Spans capacity.
    pub spans: u32,
    /// Weights capacity.
    pub weights: u32,
}

impl TablePlan {
    /// Worst case over every sample the index allows. `max_side` is the longest side of
    /// any indexed image (capped by the decoded-size guard); `resize_min` the smallest size
    /// the crop is resized to on either axis (the output size for random-resized crop, the
    /// shorter side for resize + center crop).
    pub fn new(batch: usize, out: (u32, u32), max_side: u32, resize_min: u32, filter: u32, antialias: bool) -> Self {
        let k = max_taps(max_side, resize_min.max(1), filter, antialias);
        let spans = batch as u64 * (out.0 + out.1) as u64;
        let weights = spans * k as u64;
        Self { spans: spans.min(u32::MAX as u64) as u32, weights: weights.min(u32::MAX as u64) as u32 }
    }

    /// Whether `l` fits.
    pub fn fits(&self, l: &TableLayout) -> bool {
        l.spans <= self.spans && l.weights <= self.weights
    }
}

/// Threads per block of `stoke_augment` along x (one warp: coalesced rows).
pub const BLOCK_X: u32 = 32;
/// Threads per block along y.
pub const BLOCK_Y: u32 = 8;
/// Threads per block of `stoke_augment_tables`.
pub const TABLE_BLOCK: u32 = 128;

/// Grid of `stoke_augment` for `batch` samples of `out_w × out_h`.
pub fn augment_grid(batch: usize, out_w: u32, out_h: u32) -> (u32, u32, u32) {
    (out_w.div_ceil(BLOCK_X), out_h.div_ceil(BLOCK_Y), batch as u32)
}

/// Grid of `stoke_augment_tables`: one thread per span of the whole batch.
pub fn tables_grid(total_spans: u32) -> u32 {
    total_spans.div_ceil(TABLE_BLOCK).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::decode::oriented_to_stored;

    /// Every oriented pixel of a region addressed through (base, step_x, step_y) lands on the
    /// byte the point map names, for every orientation, region and crop.
    #[test]
    fn oriented_steps_match_the_point_map() {
        let mut rng = crate::augment::params::SampleRng::new(1, 1, 1, 1);
        for _ in 0..3000 {
            let sw = 1 + rng.below(40) as u32;
            let sh = 1 + rng.below(40) as u32;
            let o = 1 + rng.below(8) as u32;
            let rx = rng.below(sw as u64) as u32;
            let ry = rng.below(sh as u64) as u32;
            let rw = 1 + rng.below((sw - rx) as u64) as u32;
            let rh = 1 + rng.below((sh - ry) as u64) as u32;
            let pitch = rw as u64 * 3 + rng.below(5) * 64;
            let offset = rng.below(4) * 256;
            let (w, h) = if o >= 5 { (sh, sw) } else { (sw, sh) };
            let (cx, cy) = (rng.below(w as u64) as i32, rng.below(h as u64) as i32);
            let (base, step_x, step_y) = oriented_steps(offset, pitch, (rx, ry), (sw, sh), (cx, cy), o);
            for oy in cy as u32..h {
                for ox in cx as u32..w {
                    let (sx, sy) = oriented_to_stored(ox, oy, sw, sh, o);
                    if sx < rx || sx >= rx + rw || sy < ry || sy >= ry + rh {
                        continue; // outside the decoded region: never dereferenced
                    }
                    let want = offset as i64 + (sy - ry) as i64 * pitch as i64 + (sx - rx) as i64 * 3;
                    let got = base + (ox as i64 - cx as i64) * step_x + (oy as i64 - cy as i64) * step_y;
                    assert_eq!(got, want, "o={o} stored {sw}x{sh} roi ({rx},{ry}) {rw}x{rh} pixel ({ox},{oy})");
                }
            }
        }
    }

    #[test]
    fn max_taps_matches_pillow_ksize() {
        // Pillow: support = filter_support * max(scale, 1); ksize = ceil(support) * 2 + 1.
        assert_eq!(max_taps(500, 224, 0, true), 7); // scale 2.23 → support 2.23 → 3·2+1
        assert_eq!(max_taps(500, 224, 1, true), 11); // bicubic: 4.46 → 5·2+1
        assert_eq!(max_taps(100, 224, 0, true), 3); // upscale: support 1
        assert_eq!(max_taps(100, 224, 1, true), 5);
        assert_eq!(max_taps(5000, 224, 0, false), 3); // no antialias: fixed support
        assert_eq!(max_taps(224, 224, 0, true), 3);
    }

    #[test]
    fn table_layout_packs_samples_and_fits_its_plan() {
        let p = |cw: i32, ch: i32| AugParams {
            crop_w: cw,
            crop_h: ch,
            resize_w: 224,
            resize_h: 224,
            out_w: 224,
            out_h: 224,
            antialias: 1,
            ..Default::default()
        };
        let mut l = TableLayout::default();
        let mut d0 = SampleDesc::default();
        let mut d1 = SampleDesc::default();
        l.add(&p(500, 375), &mut d0);
        l.add(&p(100, 80), &mut d1);
        assert_eq!((d0.span_x, d0.span_y, d1.span_x, d1.span_y), (0, 224, 448, 672));
        assert_eq!((d0.ktaps_x, d0.ktaps_y), (7, 5));
        assert_eq!(d0.weight_y, 224 * 7);
        assert_eq!(d1.weight_x, 224 * 7 + 224 * 5);
        assert_eq!(l.spans, 896);
        let plan = TablePlan::new(2, (224, 224), 500, 224, 0, true);
        assert!(plan.fits(&l));
        assert!(!TablePlan::new(1, (224, 224), 500, 224, 0, true).fits(&l));
    }

    #[test]
    fn grids_cover_the_output() {
        assert_eq!(augment_grid(256, 224, 224), (7, 28, 256));
        assert_eq!(augment_grid(1, 1, 1), (1, 1, 1));
        assert_eq!(augment_grid(3, 33, 9), (2, 2, 3));
        assert_eq!(tables_grid(0), 1);
        assert_eq!(tables_grid(256 * 448), 896);
    }
}
