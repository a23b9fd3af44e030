//! Region-of-interest geometry: which part of the stored image a sample's augment reads.

use crate::augment::params::{oriented_size, AugParams, FILTER_BICUBIC};

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
/// orientation `o` (the oriented image is `sh × sw` for 5..=8): the kernels' own map
/// (`augment_math.cuh`, host-compiled).
pub fn oriented_to_stored(x: u32, y: u32, sw: u32, sh: u32, o: u32) -> (u32, u32) {
    let (ow, oh) = oriented_size(sw as i32, sh as i32, o);
    let (sx, sy) = crate::augment::host::orient_to_stored(o, x as i32, y as i32, ow, oh);
    (sx as u32, sy as u32)
}

/// Source span `[lo, hi)` along one axis that output indices `[first, first + n)` of a
/// resize from `in_size` to `out_size` can touch, a superset of Pillow's
/// `precompute_coeffs` taps (antialiased) and of the two taps of plain bilinear/bicubic.
pub(super) fn tap_span(in_size: u32, out_size: u32, first: u32, n: u32, filter: u32, antialias: bool) -> (u32, u32) {
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
pub(super) fn to_grid(lo: u32, hi: u32, mcu: u32, size: u32) -> (u32, u32) {
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
    let o = if (1..=8).contains(&p.orientation) { p.orientation } else { 1 };
    let (ow, oh) = oriented_size(stored_w as i32, stored_h as i32, o);
    let r = (ox0 as i32, oy0 as i32, ox1 as i32 + 1, oy1 as i32 + 1);
    let (ax, ay, bx, by) = crate::augment::region::stored_box(o, r, ow, oh);
    let (sx0, sx1) = to_grid(ax as u32, bx as u32, mcu, stored_w);
    let (sy0, sy1) = to_grid(ay as u32, by as u32, mcu, stored_h);
    Roi { x: sx0, y: sy0, w: sx1 - sx0, h: sy1 - sy0 }
}

/// `roi` grown by one `mcu` block on every side that is not an image edge, clamped to the
/// stored `w × h`.
///
/// With `gpu_upsampling = smooth` the GPU decoders upsample chroma with interpolation
/// (`NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION`), which reads the chroma samples on both sides
/// of every output pixel (replicated chroma reads none outside its block: no margin then).
/// nvJPEG 13.0 mishandles the boundary of a region decoded that way (fixed in 13.3, per its
/// release notes), and [`decode_roi`]'s filter reach can leave as little as one pixel between
/// the taps and the region's edge. A whole block of margin puts every pixel the augment reads at least one
/// block away from a region edge that is not also the image's, so the faulty edge pixels are
/// never read. Widening costs at most two blocks per axis; decoding whole images instead
/// would undo region decode, which is what keeps large photos within the GPU memory budget.
pub fn widen_for_upsampling(roi: Roi, stored: (u32, u32), mcu: u32) -> Roi {
    let x0 = roi.x.saturating_sub(mcu);
    let y0 = roi.y.saturating_sub(mcu);
    let x1 = (roi.x + roi.w).saturating_add(mcu).min(stored.0);
    let y1 = (roi.y + roi.h).saturating_add(mcu).min(stored.1);
    Roi { x: x0, y: y0, w: x1 - x0, h: y1 - y0 }
}
