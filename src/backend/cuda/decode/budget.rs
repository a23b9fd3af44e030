//! GPU memory by a budget, not by the dataset's largest images.
//!
//! Unbudgeted, each of the two decode arenas holds the `batch` largest decoded images of the
//! index and each staging slot the `batch` largest files: a dataset of 12-megapixel photos at
//! batch 256 would take ~18 GiB of device memory for the arenas alone. [`MemoryPlan::fit`]
//! caps what the decoder holds at a stated budget (`PipelineConfig::gpu_memory_budget`):
//!
//! - pinned host: the staging ring ([`StagingPlan::total_bytes`]) gets at most
//!   [`STAGING_SHARE`] of the budget (compressed bytes are about a tenth of decoded ones);
//! - device: the rest is split over [`DEVICE_PARTS_PER_ARENA`] arena-sized parts (the two
//!   arenas used in turn, plus the hardware engine's two pre-allocated states, which
//!   [`super::prealloc_dims`] caps at one arena each) and the CUDA decoders' slot buffers
//!   ([`SLOT_BUFFERS`] device and as many pinned, each sized by [`super::cuda_slot_bytes`]
//!   for the index's largest image), cut in the same proportion.
//!
//! With the batched GPU-hybrid route on ([`super::batched_hybrid`]), one more arena-sized
//! device part (nvJPEG's buffers for that call, which the route keeps within one arena's
//! bytes) and one more staging slot of pinned memory (its copy of the call's bitstreams). With
//! the hardware engine's bitstreams in device memory (`gpu_bitstream = device`), one staging
//! slot of device memory (the buffer they are copied into).
//!
//! A plan that already fits is returned unchanged, so a dataset of ImageNet-sized images
//! never meets the budget. With a budget in force, only each sample's crop region is decoded
//! (`decode_roi`), which is what a random-resized crop of a large photo needs.
//!
//! A budget the user states covers everything the backend allocates: the parts fixed by the
//! batch, output size and recipe ([`FixedBytes`]: the output ring and the augment scratch,
//! AutoAugment's uint8 images included) come off it first and the decoder gets the rest
//! ([`decoder_budget`]); a budget below the fixed parts plus the decoder's minimum is refused.
//! The default budget is the decoder's default plus the fixed parts.

use super::ArenaPlan;
use super::ARENA_ALIGN;
use crate::backend::cuda::staging::{StagingPlan, STAGING_ALIGN};

/// Largest share of the budget the pinned staging ring takes (1/`STAGING_SHARE`).
pub const STAGING_SHARE: u64 = 8;
/// Device parts the size of one arena: two arenas and the hardware engine's two states.
pub const DEVICE_PARTS_PER_ARENA: u64 = 4;
/// nvJPEG buffers of each kind (pinned, device) the CUDA decoders hold: one per slot of each
/// of the two decoders.
pub const SLOT_BUFFERS: u64 = 2 * super::CUDA_SLOTS as u64;

/// The decoder's parts beyond the plain routes, each with memory of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderExtras {
    /// The batched GPU-hybrid route is on (`gpu_hybrid_share`).
    pub hybrid: bool,
    /// The hardware engine reads device copies of its bitstreams (`gpu_bitstream = device`).
    pub device_bitstreams: bool,
}

/// Staging and arenas sized to a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// The pinned staging ring.
    pub staging: StagingPlan,
    /// One of the two decode arenas.
    pub arena: ArenaPlan,
    /// Bytes of each CUDA-decoder slot buffer (pinned and device alike).
    pub slot: u64,
    /// The parts whose buffers are counted besides.
    pub extras: DecoderExtras,
}

impl MemoryPlan {
    /// `staging`, `arena` and the slot buffers' `slot` bytes (from the index) cut down, where
    /// needed, so that [`Self::device_bytes`] + [`Self::pinned_bytes`] ≤ `budget`, with the
    /// buffers of `extras` counted.
    pub fn fit(staging: StagingPlan, arena: ArenaPlan, slot: u64, budget: u64, extras: DecoderExtras) -> Self {
        let unchanged = Self { staging, arena, slot, extras };
        if unchanged.device_bytes() + unchanged.pinned_bytes() <= budget {
            return unchanged;
        }
        let slots = staging.slots.max(1) as u64;
        let slot_cap = (budget / STAGING_SHARE / slots) / STAGING_ALIGN * STAGING_ALIGN;
        let slot_bytes = staging.slot_bytes.min(slot_cap).max(STAGING_ALIGN);
        let staging = StagingPlan { slot_bytes, slots: staging.slots };
        // What follows the staging slot's size: its pinned ring, the hybrid route's pinned
        // slot, the device bitstreams' buffer.
        let by_staging = Self { staging, arena: ArenaPlan { bytes: 0 }, slot: 0, extras };
        let left = budget.saturating_sub(by_staging.device_bytes() + by_staging.pinned_bytes());
        // The arenas and the slot buffers in the same proportion.
        let want = device_parts(extras.hybrid) * arena.bytes + 2 * SLOT_BUFFERS * slot;
        let scale = |x: u64| (x as u128 * left as u128 / want.max(1) as u128) as u64;
        let arena = ArenaPlan { bytes: (scale(arena.bytes) / ARENA_ALIGN * ARENA_ALIGN).max(ARENA_ALIGN) };
        Self { staging, arena, slot: scale(slot), extras }
    }

    /// Device bytes the decoder holds at most under this plan (arenas, the hardware engine's
    /// reserved buffers, the CUDA decoders' slot buffers and, with device bitstreams, their
    /// buffer).
    pub fn device_bytes(&self) -> u64 {
        device_parts(self.extras.hybrid) * self.arena.bytes + SLOT_BUFFERS * self.slot + self.device_bitstream_bytes()
    }

    /// Pinned host bytes: the staging ring, the CUDA decoders' slot buffers and, with the
    /// batched GPU-hybrid route, one more staging slot.
    pub fn pinned_bytes(&self) -> u64 {
        self.staging.total_bytes() + SLOT_BUFFERS * self.slot + if self.extras.hybrid { self.staging.slot_bytes } else { 0 }
    }

    /// Bytes of the device buffer the engine's bitstreams are copied into: one staging slot
    /// (the most one batch's compressed bytes take) with device bitstreams, else 0.
    pub fn device_bitstream_bytes(&self) -> u64 {
        if self.extras.device_bitstreams {
            self.staging.slot_bytes
        } else {
            0
        }
    }
}

/// Arena-sized device parts: [`DEVICE_PARTS_PER_ARENA`], one more with the batched GPU-hybrid
/// route.
pub fn device_parts(hybrid: bool) -> u64 {
    DEVICE_PARTS_PER_ARENA + u64::from(hybrid)
}

/// What the backend holds besides the decoder, fixed by the batch, the output size and dtype
/// and the recipe: the budget cannot shrink these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedBytes {
    /// The output ring's slots (images, labels or targets, launch data) on the device.
    pub ring_device: u64,
    /// The ring slots' launch data in pinned host memory.
    pub ring_pinned: u64,
    /// The augment scratch: filter tables, contrast sums, AutoAugment's images and tables.
    pub augment_device: u64,
}

impl FixedBytes {
    /// Device + pinned bytes of the fixed parts.
    pub fn total(&self) -> u64 {
        self.ring_device + self.ring_pinned + self.augment_device
    }
}

/// The decoder's share of the memory budget: with no budget stated (`stated == 0`), the
/// decoder's default for `batch` ([`crate::config::default_gpu_memory_budget`]); else the
/// stated budget less `fixed`, which must leave at least
/// [`crate::config::MIN_GPU_MEMORY_BUDGET`] — otherwise an error that names what takes it.
pub fn decoder_budget(stated: u64, batch: usize, fixed: &FixedBytes) -> Result<u64, String> {
    use crate::config::{default_gpu_memory_budget, MIN_GPU_MEMORY_BUDGET};
    if stated == 0 {
        return Ok(default_gpu_memory_budget(batch));
    }
    match stated.checked_sub(fixed.total()) {
        Some(left) if left >= MIN_GPU_MEMORY_BUDGET => Ok(left),
        _ => Err(format!(
            "gpu_memory_budget {stated} bytes does not cover the fixed parts plus the decoder's minimum: output ring {} + {} pinned, augment scratch {} (batch {batch}, output size and recipe), decoder at least {MIN_GPU_MEMORY_BUDGET}; give at least {} or a smaller batch or output size",
            fixed.ring_device,
            fixed.ring_pinned,
            fixed.augment_device,
            fixed.total() + MIN_GPU_MEMORY_BUDGET
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::default_gpu_memory_budget;

    #[test]
    fn a_stated_budget_covers_the_fixed_parts_and_the_default_adds_them() {
        let fixed = FixedBytes { ring_device: 4 * 77_000_000, ring_pinned: 4 * 100_000, augment_device: 2 * 77_000_000 };
        // No budget stated: the decoder's default, the fixed parts on top (unchanged behaviour).
        assert_eq!(decoder_budget(0, 256, &fixed), Ok(default_gpu_memory_budget(256)));
        // A stated budget: the decoder gets what the fixed parts leave.
        let stated = 2u64 << 30;
        assert_eq!(decoder_budget(stated, 256, &fixed), Ok(stated - fixed.total()));
        // Too small for the fixed parts plus the decoder's minimum: refused, naming the parts.
        let min = fixed.total() + crate::config::MIN_GPU_MEMORY_BUDGET;
        assert_eq!(decoder_budget(min, 256, &fixed), Ok(crate::config::MIN_GPU_MEMORY_BUDGET));
        let e = decoder_budget(min - 1, 256, &fixed).unwrap_err();
        assert!(
            e.contains("output ring 308000000") && e.contains("augment scratch 154000000") && e.contains(&format!("at least {min}")),
            "{e}"
        );
        assert!(decoder_budget(1 << 20, 256, &fixed).is_err());
    }

    /// `n` samples of `(file bytes, w, h)` → the unbudgeted plan, as the pipeline builds it.
    fn index_plan(samples: &[(u64, u32, u32)], batch: usize) -> (StagingPlan, ArenaPlan, u64) {
        let staging = StagingPlan::new(samples.iter().map(|s| s.0), batch, 2);
        let arena = ArenaPlan::new(samples.iter().map(|&(_, w, h)| w as u64 * h as u64), batch, 100_000_000);
        let most = samples.iter().map(|&(_, w, h)| w as u64 * h as u64).max().unwrap_or(1);
        (staging, arena, super::super::cuda_slot_bytes(most))
    }

    #[test]
    fn an_index_of_large_photos_is_held_to_the_budget() {
        // 12-megapixel phone photos of about 4 MB, and a few 50-megapixel panoramas.
        let mut samples: Vec<(u64, u32, u32)> = (0..5000).map(|i| (3_500_000 + i * 100, 4000, 3000)).collect();
        samples.extend((0..10).map(|_| (20_000_000u64, 10000, 5000)));
        for batch in [32usize, 256, 1024] {
            let (staging, arena, slot) = index_plan(&samples, batch);
            let naive = MemoryPlan { staging, arena, slot, extras: DecoderExtras::default() };
            let budget = default_gpu_memory_budget(batch);
            assert!(naive.device_bytes() + naive.pinned_bytes() > budget, "the index must need more than the budget");
            let p = MemoryPlan::fit(staging, arena, slot, budget, DecoderExtras::default());
            assert!(p.device_bytes() + p.pinned_bytes() <= budget, "batch {batch}: {p:?} over {budget}");
            assert!(p.staging.total_bytes() <= budget / STAGING_SHARE);
            // What is left is used: the arenas and slot buffers take the budget the staging
            // does not, cut in the index's proportion.
            assert!(p.device_bytes() + p.pinned_bytes() + DEVICE_PARTS_PER_ARENA * ARENA_ALIGN + 2 * STAGING_ALIGN > budget - budget / 64);
            let (ka, ks) = (p.arena.bytes as f64 / arena.bytes as f64, p.slot as f64 / slot as f64);
            assert!(ks < 1.0 && (ka - ks).abs() < 0.01 + ARENA_ALIGN as f64 / arena.bytes as f64, "{p:?}: arena x{ka}, slots x{ks}");
            assert_eq!((p.staging.slots, p.arena.bytes % ARENA_ALIGN, p.staging.slot_bytes % STAGING_ALIGN), (2, 0, 0));
        }
        // A bigger budget than the index needs changes nothing.
        let (staging, arena, slot) = index_plan(&samples, 64);
        assert_eq!(
            MemoryPlan::fit(staging, arena, slot, u64::MAX, DecoderExtras::default()),
            MemoryPlan { staging, arena, slot, extras: DecoderExtras::default() }
        );
    }

    #[test]
    fn an_imagenet_sized_index_never_meets_the_default_budget() {
        let samples: Vec<(u64, u32, u32)> = (0..20_000).map(|i| (110_000 + (i % 97) * 1000, 500 + (i % 13) as u32, 375)).collect();
        for batch in [1usize, 64, 256] {
            let (staging, arena, slot) = index_plan(&samples, batch);
            let p = MemoryPlan::fit(staging, arena, slot, default_gpu_memory_budget(batch), DecoderExtras::default());
            assert_eq!(p, MemoryPlan { staging, arena, slot, extras: DecoderExtras::default() }, "batch {batch}");
        }
    }

    #[test]
    fn the_batched_gpu_hybrid_route_is_held_to_the_same_budget() {
        let samples: Vec<(u64, u32, u32)> = (0..5000).map(|i| (3_500_000 + i * 100, 4000, 3000)).collect();
        let (staging, arena, slot) = index_plan(&samples, 256);
        let budget = default_gpu_memory_budget(256);
        let off = MemoryPlan::fit(staging, arena, slot, budget, DecoderExtras::default());
        let on = MemoryPlan::fit(staging, arena, slot, budget, DecoderExtras { hybrid: true, ..Default::default() });
        assert!(on.device_bytes() + on.pinned_bytes() <= budget, "{on:?} over {budget}");
        // Its part comes out of the arenas: smaller ones than without it.
        assert!(on.arena.bytes < off.arena.bytes && on.device_bytes() == 5 * on.arena.bytes + SLOT_BUFFERS * on.slot);
        assert_eq!(on.pinned_bytes(), on.staging.total_bytes() + on.staging.slot_bytes + SLOT_BUFFERS * on.slot);
    }

    #[test]
    fn device_bitstreams_take_one_staging_slot_of_device_memory_within_the_budget() {
        let samples: Vec<(u64, u32, u32)> = (0..5000).map(|i| (3_500_000 + i * 100, 4000, 3000)).collect();
        let (staging, arena, slot) = index_plan(&samples, 256);
        let budget = default_gpu_memory_budget(256);
        let device = DecoderExtras { device_bitstreams: true, ..Default::default() };
        let off = MemoryPlan::fit(staging, arena, slot, budget, DecoderExtras::default());
        let on = MemoryPlan::fit(staging, arena, slot, budget, device);
        assert!(on.device_bytes() + on.pinned_bytes() <= budget, "{on:?} over {budget}");
        assert_eq!(on.device_bitstream_bytes(), on.staging.slot_bytes);
        assert_eq!(on.device_bytes(), 4 * on.arena.bytes + SLOT_BUFFERS * on.slot + on.staging.slot_bytes);
        // Its buffer comes out of the arenas; the pinned side is as without it.
        assert!(on.arena.bytes < off.arena.bytes, "{on:?} against {off:?}");
        assert_eq!((on.staging, on.pinned_bytes() - SLOT_BUFFERS * on.slot), (off.staging, off.staging.total_bytes()));
        assert_eq!(off.device_bitstream_bytes(), 0);
        // An index that fits the budget keeps its plan, the buffer counted.
        let small: Vec<(u64, u32, u32)> = (0..2000).map(|i| (110_000 + i, 500, 375)).collect();
        let (staging, arena, slot) = index_plan(&small, 256);
        let p = MemoryPlan::fit(staging, arena, slot, budget, device);
        assert_eq!((p.staging, p.arena, p.slot), (staging, arena, slot));
        assert_eq!(p.device_bytes(), 4 * arena.bytes + SLOT_BUFFERS * slot + staging.slot_bytes);
    }

    #[test]
    fn a_tiny_budget_still_leaves_one_aligned_unit_each() {
        let (staging, arena, slot) = index_plan(&[(5_000_000, 8000, 6000)], 1);
        let p = MemoryPlan::fit(staging, arena, slot, 0, DecoderExtras::default());
        assert_eq!((p.staging.slot_bytes, p.arena.bytes), (STAGING_ALIGN, ARENA_ALIGN));
    }
}
