//! Which stored region of an image a sample reads: one definition for both backends.
//!
//! The augment parameters describe the *oriented* image (EXIF orientation applied); a
//! decoder works on the *stored* one. [`stored_box`] maps an oriented rectangle to its stored
//! bounding box through the orientation map the kernels use (`augment_math.cuh`,
//! host-compiled: [`host::orient_to_stored`]); [`crop_region`] is the stored box of the crop,
//! which the CPU backend decodes; the CUDA decoder narrows it to the resize filter's reach
//! and the JPEG block grid (`backend::cuda::decode::decode_roi`) through the same map.

use super::host;
use super::params::{oriented_size, AugParams};

/// Stored bounding box `(x0, y0, x1, y1)` (exclusive ends) of the oriented rectangle
/// `[x0, x1) × [y0, y1)` of an image whose oriented size is `ow × oh`, under EXIF orientation
/// `o`. The rectangle must be non-empty and inside the image.
pub fn stored_box(o: u32, (x0, y0, x1, y1): (i32, i32, i32, i32), ow: i32, oh: i32) -> (i32, i32, i32, i32) {
    let a = host::orient_to_stored(o, x0, y0, ow, oh);
    let b = host::orient_to_stored(o, x1 - 1, y1 - 1, ow, oh);
    (a.0.min(b.0), a.1.min(b.1), a.0.max(b.0) + 1, a.1.max(b.1) + 1)
}

/// The stored region `(x, y, w, h)` that `p`'s crop box covers, or `None` for the whole image
/// (the crop covers it, or the params name no crop or an unknown orientation).
pub fn crop_region(p: &AugParams) -> Option<(u32, u32, u32, u32)> {
    if !(p.crop_w > 0 && p.crop_h > 0 && (1..=8).contains(&p.orientation)) {
        return None;
    }
    let (sw, sh) = oriented_size(p.src_w, p.src_h, p.orientation);
    let (x0, y0, x1, y1) = stored_box(p.orientation, (p.crop_x, p.crop_y, p.crop_x + p.crop_w, p.crop_y + p.crop_h), p.src_w, p.src_h);
    let full = x0 == 0 && y0 == 0 && x1 == sw && y1 == sh;
    (!full && x0 >= 0 && y0 >= 0).then_some((x0 as u32, y0 as u32, (x1 - x0) as u32, (y1 - y0) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive reference: map every pixel of the oriented rectangle and take the extremes.
    fn naive_box(o: u32, r: (i32, i32, i32, i32), ow: i32, oh: i32) -> (i32, i32, i32, i32) {
        let (mut b0, mut b1) = ((i32::MAX, i32::MAX), (i32::MIN, i32::MIN));
        for y in r.1..r.3 {
            for x in r.0..r.2 {
                let s = host::orient_to_stored(o, x, y, ow, oh);
                b0 = (b0.0.min(s.0), b0.1.min(s.1));
                b1 = (b1.0.max(s.0 + 1), b1.1.max(s.1 + 1));
            }
        }
        (b0.0, b0.1, b1.0, b1.1)
    }

    #[test]
    fn stored_box_is_the_bounding_box_of_every_mapped_pixel() {
        let (ow, oh) = (9, 6);
        for o in 1..=8 {
            for r in [(0, 0, 9, 6), (2, 1, 5, 4), (8, 5, 9, 6), (0, 3, 1, 6), (3, 0, 9, 2)] {
                assert_eq!(stored_box(o, r, ow, oh), naive_box(o, r, ow, oh), "orientation {o}, rect {r:?}");
            }
        }
    }
}
