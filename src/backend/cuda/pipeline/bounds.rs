//! The sizes the CUDA backend's buffers are planned from, derived from the index (or stream
//! mode's per-shard facts) once, at build time: a staging slot, the readers' pooled buffer, a
//! decode arena, the largest image.

use super::super::decode::ArenaPlan;
use super::super::staging::StagingPlan;
use crate::source::shards::{Largest, ShardFacts};

/// Sizes derived from the index once, at build time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexBounds {
    /// Sum of the `batch` largest compressed files (one staging slot).
    pub staging: StagingPlan,
    /// Bytes of a readers' pooled buffer ([`typical_batch`]): a typical batch with room to
    /// spare, at most a staging slot.
    pub typical_batch: u64,
    /// Bytes of one decode arena (the `batch` largest decoded images, capped by the guard).
    pub arena: ArenaPlan,
    /// Largest stored width and largest stored height (of any samples: for the hardware
    /// engine's pre-allocation, which is scaled to an arena anyway).
    pub max_dims: (u32, u32),
    /// Most stored pixels of one image whose header was read, capped at the guard: the CUDA
    /// decoders' slot buffers are sized from it. Not `max_dims`' product: a 4000 × 600
    /// panorama beside a 600 × 4000 portrait would size them for a 4000 × 4000 image nobody
    /// has, and a budget would then cut the arenas to pay for it.
    pub max_image_pixels: u64,
    /// Longest stored side.
    pub max_side: u32,
}

impl IndexBounds {
    /// Bounds for batches of `batch` over stream mode's per-shard facts: each shard counted as
    /// `min(samples, batch)` copies of its largest sample (in bytes, and in pixels; its samples
    /// without a readable header at the guard `max_pixels`), so a batch of any of its samples
    /// fits. `None` when a shard's facts do not say its largest sample (a version 1 sidecar).
    pub fn from_shards(facts: &[ShardFacts], batch: usize, max_pixels: u64) -> Option<Self> {
        let shards: Vec<(u64, Largest)> = facts.iter().map(|f| f.largest.map(|l| (f.samples, l))).collect::<Option<_>>()?;
        let k = |n: u64| n.min(batch as u64) as usize;
        let bytes = shards.iter().flat_map(|&(n, l)| std::iter::repeat_n(l.bytes, k(n)));
        let staging = StagingPlan::new(bytes, batch, 2);
        let (total, count) = facts.iter().fold((0u64, 0u64), |(b, n), f| (b + f.bytes, n + f.samples));
        let largest = shards.iter().map(|(_, l)| l.bytes).max().unwrap_or(0);
        let pixels = shards.iter().flat_map(|&(n, l)| {
            let headerless = l.headerless.min(n);
            std::iter::repeat_n(l.pixels, k(n - headerless)).chain(std::iter::repeat_n(max_pixels, k(headerless)))
        });
        let (mw, mh) = shards.iter().fold((1u32, 1u32), |(w, h), (_, l)| (w.max(l.width), h.max(l.height)));
        let most = shards.iter().map(|(_, l)| l.pixels).max().unwrap_or(0).clamp(1, max_pixels.max(1));
        Some(Self {
            staging,
            typical_batch: typical_batch(total, count, largest, batch, staging.slot_bytes),
            arena: ArenaPlan::new(pixels, batch, max_pixels),
            max_dims: (mw, mh),
            max_side: mw.max(mh),
            max_image_pixels: most,
        })
    }

    /// Bounds for batches of `batch` over `(compressed bytes, stored w, stored h)` per sample
    /// (`w = h = 0` when the header could not be read: the CPU decoder's guard then bounds it
    /// by `max_pixels`).
    pub fn new(samples: impl Iterator<Item = (u64, u32, u32)> + Clone, batch: usize, max_pixels: u64) -> Self {
        let staging = StagingPlan::new(samples.clone().map(|s| s.0), batch, 2);
        let (total, count, largest) = samples.clone().fold((0u64, 0u64, 0u64), |(t, n, m), s| (t + s.0, n + 1, m.max(s.0)));
        let typical_batch = typical_batch(total, count, largest, batch, staging.slot_bytes);
        let pixels = samples.clone().map(|(_, w, h)| if w == 0 || h == 0 { max_pixels } else { w as u64 * h as u64 });
        let arena = ArenaPlan::new(pixels, batch, max_pixels);
        let (mut mw, mut mh, mut most) = (1u32, 1u32, 1u64);
        for (_, w, h) in samples {
            mw = mw.max(w);
            mh = mh.max(h);
            most = most.max(w as u64 * h as u64);
        }
        Self { staging, typical_batch, arena, max_dims: (mw, mh), max_side: mw.max(mh), max_image_pixels: most.min(max_pixels.max(1)) }
    }
}

/// Bytes of a readers' pooled buffer for batches of `batch` from samples of `total` bytes in
/// `count` files, the largest `largest`: twice a mean batch, or the largest file when that is
/// more (small batches of a skewed set), plus each sample's alignment; never more than a
/// staging slot (`slot`, the exact worst case). Not the worst case itself: on ImageNet the 256
/// largest files sum to many times a typical batch, and the readers hold several buffers; a
/// batch that outgrows its buffer is copied into the staging ring instead (one in millions at
/// batch 256: a batch's total is a sum of 256 draws).
pub fn typical_batch(total: u64, count: u64, largest: u64, batch: usize, slot: u64) -> u64 {
    let mean_batch = (total / count.max(1)).saturating_mul(batch as u64);
    let want = mean_batch.saturating_mul(2).max(largest).saturating_add(batch as u64 * super::super::staging::STAGING_ALIGN);
    want.min(slot).max(super::super::staging::STAGING_ALIGN)
}

#[cfg(test)]
mod tests {
    use super::super::super::decode::{cuda_slot_bytes, DecoderExtras, MemoryPlan};
    use super::*;

    #[test]
    fn index_bounds_cover_every_batch() {
        // (bytes, w, h); one sample with an unreadable header counts as the guard.
        let s = [(1000u64, 500u32, 375u32), (9000, 4000, 3000), (10, 0, 0), (500, 375, 500)];
        let b = IndexBounds::new(s.iter().copied(), 2, 1_000_000);
        assert_eq!(b.staging.slot_bytes, 9024 + 1024);
        assert_eq!(b.arena.bytes, 2 * 3_000_000u64.next_multiple_of(256), "two guard-capped images");
        assert_eq!(b.max_dims, (4000, 3000));
        assert_eq!(b.max_side, 4000);
        assert_eq!(b.max_image_pixels, 1_000_000, "the 12-megapixel image at the guard");
    }

    /// A panorama and a portrait beside ImageNet-sized photos: the slot buffers are sized for
    /// the larger of the two (2.4 megapixels), not for a 4000 × 4000 image made of the widest
    /// and the tallest, so the default budget leaves the arenas as the index made them.
    #[test]
    fn one_wide_and_one_tall_image_do_not_make_a_square_one() {
        let mut s: Vec<(u64, u32, u32)> = (0..5000).map(|i| (110_000 + (i % 97) * 1000, 500, 375)).collect();
        s.extend([(900_000, 4000, 600), (900_000, 600, 4000)]);
        let b = IndexBounds::new(s.iter().copied(), 256, crate::config::DEFAULT_MAX_DECODED_PIXELS);
        assert_eq!((b.max_dims, b.max_image_pixels), ((4000, 4000), 2_400_000));
        let budget = crate::config::default_gpu_memory_budget(256);
        let plan = MemoryPlan::fit(b.staging, b.arena, cuda_slot_bytes(b.max_image_pixels), budget, DecoderExtras::default());
        assert_eq!((plan.arena, plan.staging), (b.arena, b.staging), "nothing cut");
        // What the phantom square asked for: over the budget, so the arenas were cut.
        let square = MemoryPlan::fit(b.staging, b.arena, 6 * 4000 * 4000, budget, DecoderExtras::default());
        assert!(square.arena.bytes < b.arena.bytes * 3 / 4, "{square:?} against {:?}", b.arena);
    }

    /// The per-shard bounds cover what the per-sample bounds of the same samples cover.
    #[test]
    fn shard_bounds_cover_the_per_sample_bounds() {
        use crate::source::shards::{Largest, ShardFacts};
        // Two shards of (bytes, w, h) samples; one header unreadable in the second.
        let shards: [&[(u64, u32, u32)]; 2] = [&[(1000, 500, 375), (9000, 400, 300), (700, 640, 480)], &[(10, 0, 0), (500, 375, 500)]];
        let facts: Vec<ShardFacts> = shards
            .iter()
            .enumerate()
            .map(|(i, s)| ShardFacts {
                name: format!("{i}.tar"),
                bytes: 0,
                samples: s.len() as u64,
                labels: [-1, -1],
                largest: Some(Largest::of(s.iter().map(|&(b, w, h)| (b, (w > 0).then_some((w, h)))))),
            })
            .collect();
        for batch in [1, 2, 3, 5] {
            let per_sample = IndexBounds::new(shards.iter().flat_map(|s| s.iter().copied()), batch, 1_000_000);
            let per_shard = IndexBounds::from_shards(&facts, batch, 1_000_000).unwrap();
            assert!(per_shard.staging.slot_bytes >= per_sample.staging.slot_bytes, "batch {batch}");
            assert!(per_shard.arena.bytes >= per_sample.arena.bytes, "batch {batch}");
            assert_eq!(
                (per_shard.max_dims, per_shard.max_side, per_shard.max_image_pixels),
                (per_sample.max_dims, per_sample.max_side, per_sample.max_image_pixels)
            );
        }
        // Batch 2: the largest shard counted twice at its largest (9000 bytes, 640 × 480).
        let b = IndexBounds::from_shards(&facts, 2, 1_000_000).unwrap();
        assert_eq!(b.staging.slot_bytes, 2 * 9024);
        assert_eq!(b.arena.bytes, 3_000_000u64.next_multiple_of(256) + 921_600, "the headerless sample at the guard, then 640 × 480");
        let mut old = facts.clone();
        old[1].largest = None;
        assert!(IndexBounds::from_shards(&old, 2, 1_000_000).is_none(), "a version 1 sidecar says nothing of sizes");
    }
}
