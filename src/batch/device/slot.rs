//! Byte layout of one output slot of the CUDA backend's ring ([`SlotLayout`]): the images of
//! every view, then the labels and the batch's launch data.

use crate::augment::AugParams;
use crate::config::{DType, Layout};

/// Alignment of the labels inside a slot (and of every slot): 256 bytes, the CUDA
/// allocation granularity that vectorised consumers assume.
pub const SLOT_ALIGN: usize = 256;

/// Byte layout of one output slot: the images tensor, then the labels, then the batch's launch
/// data (augment parameters and sample descriptors the kernels read). Everything after the
/// images is the slot's *tail*, uploaded in one copy per batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotLayout {
    /// `[batch, 3, h, w]` or `[batch, h, w, 3]`: the first view's (the only one without
    /// `views`; the images hold every view of every sample, [`crate::augment::views`]).
    pub shape: [usize; 4],
    /// Views per sample: the params and descriptors arrays hold `batch · views` entries.
    pub views: usize,
    /// Element type of the images.
    pub dtype: DType,
    /// Layout of the images.
    pub layout: Layout,
    /// Bytes of the images tensor.
    pub image_bytes: usize,
    /// Offset of the `i64` labels (aligned to [`SLOT_ALIGN`]); the tail starts here.
    pub labels_offset: usize,
    /// Offset of the [`AugParams`] array.
    pub params_offset: usize,
    /// Offset of the kernel descriptor array.
    pub descs_offset: usize,
    /// Offset of the Mixup/CutMix parameters (one `MixParams` per sample; empty when off).
    pub mix_offset: usize,
    /// Offset of the `f32` soft targets `[batch, classes]` (empty when off).
    pub targets_offset: usize,
    /// Columns of the soft targets (0: Mixup/CutMix off).
    pub classes: usize,
    /// Bytes of one slot.
    pub slot_bytes: usize,
}

impl SlotLayout {
    /// Layout for batches of `batch` images of `out_w × out_h`, with `desc_bytes` of kernel
    /// descriptor per sample and soft targets of `classes` columns (0: none).
    #[cfg(test)]
    pub fn new(batch: usize, out_w: usize, out_h: usize, dtype: DType, layout: Layout, desc_bytes: usize, classes: usize) -> Self {
        let one = [crate::augment::views::GroupShape { count: 1, width: out_w, height: out_h }];
        Self::for_views(batch, &one, dtype, layout, desc_bytes, classes)
    }

    /// Layout for batches of `batch` samples of the views of `groups` (each view of each
    /// sample has its params and a descriptor of `desc_bytes`).
    pub fn for_views(
        batch: usize,
        groups: &[crate::augment::views::GroupShape],
        dtype: DType,
        layout: Layout,
        desc_bytes: usize,
        classes: usize,
    ) -> Self {
        let first = groups.first().copied().unwrap_or_default();
        let shape = match layout {
            Layout::Nchw => [batch, 3, first.height, first.width],
            Layout::Nhwc => [batch, first.height, first.width, 3],
        };
        let views: usize = groups.iter().map(|g| g.count).sum::<usize>().max(1);
        let image_bytes = batch * groups.iter().map(|g| g.count * g.sample_elements()).sum::<usize>() * dtype.size();
        let labels_offset = image_bytes.next_multiple_of(SLOT_ALIGN);
        let params_offset = (labels_offset + batch * 8).next_multiple_of(SLOT_ALIGN);
        let descs_offset = (params_offset + batch * views * std::mem::size_of::<AugParams>()).next_multiple_of(SLOT_ALIGN);
        let mix_bytes = if classes > 0 { batch * std::mem::size_of::<crate::augment::mixup::MixParams>() } else { 0 };
        let mix_offset = (descs_offset + batch * views * desc_bytes).next_multiple_of(SLOT_ALIGN);
        let targets_offset = (mix_offset + mix_bytes).next_multiple_of(SLOT_ALIGN);
        let slot_bytes = (targets_offset + batch * classes * 4).next_multiple_of(SLOT_ALIGN);
        Self {
            shape,
            views,
            dtype,
            layout,
            image_bytes,
            labels_offset,
            params_offset,
            descs_offset,
            mix_offset,
            targets_offset,
            classes,
            slot_bytes,
        }
    }

    /// Bytes of the tail (labels, params, descriptors, mix parameters, soft targets).
    pub fn tail_bytes(&self) -> usize {
        self.slot_bytes - self.labels_offset
    }

    /// Elements in the images tensor.
    #[cfg(test)]
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Samples per batch.
    pub fn batch(&self) -> usize {
        self.shape[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_layout_table() {
        // 256 × 3 × 224 × 224 f16 = 77_070_336 bytes (a multiple of 256), labels right after.
        let l = SlotLayout::new(256, 224, 224, DType::F16, Layout::Nchw, 48, 0);
        assert_eq!(l.shape, [256, 3, 224, 224]);
        assert_eq!(l.image_bytes, 77_070_336);
        assert_eq!(l.labels_offset, 77_070_336);
        assert_eq!(l.params_offset, 77_070_336 + 2048);
        let pb = std::mem::size_of::<crate::augment::AugParams>(); // 268
        assert_eq!(l.descs_offset, 77_070_336 + 2048 + 256 * pb);
        assert_eq!(l.slot_bytes, 77_070_336 + 2048 + 256 * pb + 256 * 48);
        assert_eq!(l.tail_bytes(), 2048 + 256 * pb + 256 * 48);
        // Odd sizes: labels aligned, slot aligned, nothing overlaps.
        let l = SlotLayout::new(3, 7, 5, DType::F32, Layout::Nhwc, 48, 0);
        assert_eq!(l.shape, [3, 5, 7, 3]);
        assert_eq!(l.image_bytes, 3 * 5 * 7 * 3 * 4);
        assert_eq!(l.labels_offset, 1280);
        assert_eq!(l.params_offset, 1536);
        let params3 = (3 * pb).div_ceil(256) * 256; // 3 × 268 = 804 → 1024
        assert_eq!(l.descs_offset, 1536 + params3);
        assert_eq!(l.slot_bytes, 1536 + params3 + 256);
        assert_eq!(l.elements(), 315);
        for (b, w, h) in [(1, 1, 1), (5, 33, 17), (64, 224, 224)] {
            for dt in [DType::F32, DType::F16, DType::Bf16] {
                let l = SlotLayout::new(b, w, h, dt, Layout::Nchw, 48, 0);
                assert!(l.labels_offset >= l.image_bytes && l.labels_offset % SLOT_ALIGN == 0);
                assert!(l.params_offset >= l.labels_offset + 8 * b && l.params_offset % SLOT_ALIGN == 0);
                assert!(l.descs_offset >= l.params_offset + 88 * b && l.descs_offset % SLOT_ALIGN == 0);
                assert!(l.slot_bytes >= l.descs_offset + 48 * b && l.slot_bytes % SLOT_ALIGN == 0);
            }
        }
    }

    #[test]
    fn a_views_slot_holds_every_view_then_params_and_descriptors_per_view() {
        use crate::augment::views::GroupShape;
        let groups = [GroupShape { count: 2, width: 224, height: 224 }, GroupShape { count: 8, width: 96, height: 96 }];
        let l = SlotLayout::for_views(4, &groups, DType::F16, Layout::Nchw, 48, 0);
        let pb = std::mem::size_of::<crate::augment::AugParams>();
        assert_eq!((l.shape, l.views), ([4, 3, 224, 224], 10));
        assert_eq!(l.image_bytes, 4 * (2 * 3 * 224 * 224 + 8 * 3 * 96 * 96) * 2);
        assert_eq!(l.params_offset, (l.labels_offset + 32).next_multiple_of(256));
        assert_eq!(l.descs_offset, (l.params_offset + 40 * pb).next_multiple_of(256));
        assert_eq!(l.slot_bytes, (l.descs_offset + 40 * 48).next_multiple_of(256));
        // One group of one view is the single-view layout.
        let one = [GroupShape { count: 1, width: 7, height: 5 }];
        assert_eq!(
            SlotLayout::for_views(3, &one, DType::F32, Layout::Nhwc, 48, 0),
            SlotLayout::new(3, 7, 5, DType::F32, Layout::Nhwc, 48, 0)
        );
    }
}
