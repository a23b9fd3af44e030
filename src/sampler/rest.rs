//! The rest of an epoch, and how a world of any size splits it: what elastic resume rests on.
//!
//! # Positions
//! An epoch's deliveries are numbered by *positions*, what augment parameters are drawn from
//! ([`super`]). Position `u` holds the sample the epoch's order puts at `u mod N` (the
//! per-sample permutation: `perm(u mod N)`; weighted sampling: a draw keyed by `u`; stream mode:
//! stream position `u mod N`), so a position at or past `N` is padding: another copy of a
//! sample, with augment parameters of its own.
//!
//! # The rest
//! A [`Rest`] is the set of positions an epoch still has to deliver, as ascending disjoint
//! ranges, and the first position number no delivery or padding of the epoch has used
//! (`next_pad`). A fresh epoch's rest is `0..N` with `next_pad = N`.
//!
//! # A world's share
//! `W` ranks split a rest of `R` positions in its *virtual order* (the ranges one after the
//! other, then fresh padding positions `next_pad, next_pad + 1, …`), each taking `L` of them:
//! `ceil(R/W)` (padding, as PyTorch's `DistributedSampler` pads) or `floor(R/W)` (`drop_last`).
//! - [`Split::Strided`] (per-sample mode): rank `r` takes virtual indices `r, r + W, r + 2W, …`
//!   (`DistributedSampler`'s `indices[rank::W]`).
//! - [`Split::Blocks`] (stream mode): rank `r` takes `r·L .. (r+1)·L`, so a shard's samples stay
//!   on one rank (two at a block boundary).
//!
//! For a fresh epoch this is exactly the order the ranks have always delivered: rank `r`'s
//! `i`-th sample is at position `r + i·W` (strided) or `r·L + i` (blocks).
//!
//! # Progress, the same on every rank
//! When every rank has delivered the first `d` samples of its share, the rest of the epoch is
//! [`Share::after`]`(d)`: what no rank has delivered, computed by each rank alone from the share
//! and `d`, so every rank saves the same state and any one of them serves all. A world of
//! another size `W'` (with another batch size, if it likes) splits that rest again. Across the
//! worlds, every position of the epoch is then delivered exactly once: each sample once, plus
//! padding of at most `W − 1` positions per split (none with `drop_last`, which instead leaves
//! up to `W − 1` positions of that split undelivered). Splitting the rest again with the same
//! `W` gives each rank the positions it would have delivered without the interruption, so a
//! resume at the same world size continues bit for bit.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The largest `next_pad` a rest may have (2^62): position arithmetic stays far from overflow.
pub const MAX_POSITION: u64 = 1 << 62;

/// The positions an epoch still has to deliver (module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rest {
    /// Undelivered positions: ascending, disjoint, non-empty half-open ranges `[start, end)`
    /// (`remaining` in a resume state's JSON).
    #[serde(rename = "remaining")]
    pub ranges: Vec<(u64, u64)>,
    /// The first position number not used by any delivery or padding of the epoch.
    pub next_pad: u64,
}

impl Rest {
    /// A fresh epoch of `n` positions.
    pub fn whole(n: u64) -> Self {
        Self { ranges: if n > 0 { vec![(0, n)] } else { Vec::new() }, next_pad: n }
    }

    /// Positions left.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(a, b)| b - a).sum()
    }

    /// Whether the epoch is complete.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// That the ranges are ascending, disjoint and non-empty, and below `next_pad` (a rest read
    /// from a file is checked before it is used).
    pub fn check(&self) -> Result<()> {
        // Padding positions are next_pad + k: far below 2^64, so no sum of them overflows.
        if self.next_pad > MAX_POSITION {
            return Err(Error::config(format!(
                "the epoch's next_pad {} is beyond {MAX_POSITION}: no epoch has that many positions",
                self.next_pad
            )));
        }
        let mut at = 0u64;
        for (k, &(a, b)) in self.ranges.iter().enumerate() {
            if a >= b || (k > 0 && a <= at) || b > self.next_pad {
                return Err(Error::config(format!(
                    "the epoch's remaining positions are not ascending, disjoint ranges below next_pad {}: range {k} is [{a}, {b})",
                    self.next_pad
                )));
            }
            at = b;
        }
        Ok(())
    }
}

/// How a world splits a rest (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Rank `r` takes every `W`-th virtual index from `r` (per-sample mode).
    Strided,
    /// Rank `r` takes the `r`-th contiguous block (stream mode).
    Blocks,
}

/// One rank's place in a world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// How the world splits the rest.
    pub split: Split,
    /// This rank, `0..world_size`.
    pub rank: usize,
    /// Ranks in the world.
    pub world_size: usize,
    /// Each rank takes `floor(R/W)` (the tail is not delivered) instead of `ceil(R/W)`.
    pub drop_last: bool,
}

impl Layout {
    /// This rank's share of `rest`.
    pub fn share(&self, rest: Rest) -> Result<Share> {
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(Error::config(format!("rank {} is not in 0..world size {}", self.rank, self.world_size)));
        }
        rest.check()?;
        let mut ends = Vec::with_capacity(rest.ranges.len());
        let mut total = 0u64;
        for (a, b) in &rest.ranges {
            total += b - a;
            ends.push(total);
        }
        let w = self.world_size as u64;
        let per_rank = if self.drop_last { total / w } else { total.div_ceil(w) };
        Ok(Share { rest, layout: *self, ends, total, per_rank })
    }
}

/// One rank's share of a [`Rest`] (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    rest: Rest,
    layout: Layout,
    /// Virtual index just past each range.
    ends: Vec<u64>,
    /// Positions in the rest (`R`).
    total: u64,
    /// Positions each rank takes (`L`).
    per_rank: u64,
}

impl Share {
    /// Positions this rank delivers (the same for every rank).
    pub fn len(&self) -> u64 {
        self.per_rank
    }

    /// Whether this rank delivers nothing (the rest is empty, or all dropped).
    pub fn is_empty(&self) -> bool {
        self.per_rank == 0
    }

    /// The rest it splits.
    pub fn rest(&self) -> &Rest {
        &self.rest
    }

    /// The rank and world it is for.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Batches of `batch_size` this rank delivers (the last may be partial).
    pub fn steps(&self, batch_size: usize) -> u64 {
        self.per_rank.div_ceil(batch_size.max(1) as u64)
    }

    fn virtual_index(&self, rank: u64, i: u64) -> u64 {
        match self.layout.split {
            Split::Strided => rank + i * self.layout.world_size as u64,
            Split::Blocks => rank * self.per_rank + i,
        }
    }

    fn locate(&self, v: u64) -> u64 {
        if v >= self.total {
            return self.rest.next_pad + (v - self.total);
        }
        let k = self.ends.partition_point(|&e| e <= v);
        let before = if k == 0 { 0 } else { self.ends[k - 1] };
        self.rest.ranges[k].0 + (v - before)
    }

    /// The position of this rank's `i`-th sample (`i < len()`).
    pub fn position(&self, i: u64) -> u64 {
        debug_assert!(i < self.per_rank);
        self.locate(self.virtual_index(self.layout.rank as u64, i))
    }

    /// The positions of virtual indices `a..b`, appended to `out` as ranges (merging with the
    /// last one where they touch).
    fn push_virtual(&self, a: u64, b: u64, out: &mut Vec<(u64, u64)>) {
        let mut push = |s: u64, e: u64| match out.last_mut() {
            Some(last) if last.1 == s => last.1 = e,
            _ if s < e => out.push((s, e)),
            _ => {}
        };
        let mut v = a;
        while v < b.min(self.total) {
            let k = self.ends.partition_point(|&e| e <= v);
            let before = if k == 0 { 0 } else { self.ends[k - 1] };
            let take = (self.ends[k] - v).min(b - v);
            let s = self.rest.ranges[k].0 + (v - before);
            push(s, s + take);
            v += take;
        }
        if b > self.total {
            let from = a.max(self.total) - self.total;
            push(self.rest.next_pad + from, self.rest.next_pad + (b - self.total));
        }
    }

    /// This rank's positions from its `i`-th sample to the end of its share, as ranges in
    /// delivery order: one or a few for [`Split::Blocks`] (what a shard reader plans its
    /// fetches from); one per position for [`Split::Strided`].
    pub fn ranges_from(&self, i: u64) -> Vec<(u64, u64)> {
        let r = self.layout.rank as u64;
        let mut out = Vec::new();
        match self.layout.split {
            Split::Blocks => self.push_virtual(r * self.per_rank + i.min(self.per_rank), (r + 1) * self.per_rank, &mut out),
            Split::Strided => {
                for j in i..self.per_rank {
                    let v = self.virtual_index(r, j);
                    self.push_virtual(v, v + 1, &mut out);
                }
            }
        }
        out
    }

    /// The rest of the epoch once every rank of the world has delivered its first `delivered`
    /// samples of this share (all of them when `delivered >= len()`).
    pub fn after(&self, delivered: u64) -> Rest {
        let l = self.per_rank;
        let d = delivered.min(l);
        let w = self.layout.world_size as u64;
        let mut ranges = Vec::new();
        match self.layout.split {
            Split::Strided => self.push_virtual(d * w, w * l, &mut ranges),
            Split::Blocks => {
                for r in 0..w {
                    self.push_virtual(r * l + d, (r + 1) * l, &mut ranges);
                }
            }
        }
        Rest { ranges, next_pad: self.rest.next_pad + (w * l).saturating_sub(self.total) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn layout(split: Split, rank: usize, world_size: usize, drop_last: bool) -> Layout {
        Layout { split, rank, world_size, drop_last }
    }

    /// Every rank's positions of `rest` under `world`, from each rank's `from`-th sample.
    fn deliver(rest: &Rest, split: Split, world: usize, drop_last: bool, from: u64, upto: u64) -> Vec<u64> {
        let mut out = Vec::new();
        for r in 0..world {
            let s = layout(split, r, world, drop_last).share(rest.clone()).unwrap();
            for i in from..upto.min(s.len()) {
                out.push(s.position(i));
            }
        }
        out
    }

    #[test]
    fn a_fresh_epoch_is_the_order_ranks_have_always_delivered() {
        for (n, w) in [(10u64, 3usize), (12, 4), (7, 7), (5, 2)] {
            for drop_last in [false, true] {
                let per = if drop_last { n / w as u64 } else { n.div_ceil(w as u64) };
                for r in 0..w {
                    let strided = layout(Split::Strided, r, w, drop_last).share(Rest::whole(n)).unwrap();
                    let blocks = layout(Split::Blocks, r, w, drop_last).share(Rest::whole(n)).unwrap();
                    assert_eq!((strided.len(), blocks.len()), (per, per));
                    for i in 0..per {
                        assert_eq!(strided.position(i), r as u64 + i * w as u64);
                        assert_eq!(blocks.position(i), r as u64 * per + i);
                    }
                }
            }
        }
    }

    /// Runs an epoch of `n` through worlds `worlds[k]` with per-rank batch sizes `batches[k]`,
    /// each for `steps[k]` batches (the last world to the end), and checks that every position
    /// `< n` is delivered exactly once and that the padding is within its bound.
    fn elastic(n: u64, split: Split, drop_last: bool, worlds: &[(usize, u64, u64)]) {
        let mut rest = Rest::whole(n);
        let mut seen: HashMap<u64, u32> = HashMap::new();
        let mut pad_bound = 0u64;
        for (k, &(w, batch, steps)) in worlds.iter().enumerate() {
            let last = k + 1 == worlds.len();
            let upto = if last { u64::MAX } else { steps * batch };
            for p in deliver(&rest, split, w, drop_last, 0, upto) {
                *seen.entry(p).or_default() += 1;
            }
            let s = layout(split, 0, w, drop_last).share(rest.clone()).unwrap();
            // The same on every rank.
            for r in 1..w {
                assert_eq!(layout(split, r, w, drop_last).share(rest.clone()).unwrap().after(upto), s.after(upto));
            }
            pad_bound += w as u64 - 1;
            rest = s.after(upto);
            rest.check().unwrap();
        }
        assert!(rest.is_empty(), "the last world finishes the epoch: {rest:?}");
        assert!(seen.values().all(|&c| c == 1), "no position twice");
        let real = seen.keys().filter(|&&p| p < n).count() as u64;
        let pads = seen.keys().filter(|&&p| p >= n).count() as u64;
        if drop_last {
            assert_eq!(pads, 0);
            assert!(n - real <= pad_bound, "dropped {} of {n}", n - real);
        } else {
            assert_eq!(real, n, "every sample exactly once");
            assert!(pads <= pad_bound, "{pads} padded positions, bound {pad_bound}");
        }
    }

    #[test]
    fn every_position_once_across_world_size_changes() {
        for split in [Split::Strided, Split::Blocks] {
            for drop_last in [false, true] {
                for n in [1000u64, 997, 64] {
                    elastic(n, split, drop_last, &[(4, 10, 7), (3, 10, 0)]);
                    elastic(n, split, drop_last, &[(4, 10, 7), (3, 16, 5), (5, 3, 0)]);
                    elastic(n, split, drop_last, &[(2, 8, 3), (5, 8, 0)]);
                    elastic(n, split, drop_last, &[(8, 4, 1), (1, 32, 0)]);
                    elastic(n, split, drop_last, &[(8, 4, 1000), (3, 32, 0)]);
                }
            }
        }
        // More ranks than positions left: padding only, still exact.
        elastic(10, Split::Blocks, false, &[(3, 2, 1), (16, 1, 0)]);
        elastic(10, Split::Strided, false, &[(3, 2, 1), (16, 1, 0)]);
    }

    #[test]
    fn the_same_world_continues_bit_for_bit_whatever_the_batch_size() {
        for split in [Split::Strided, Split::Blocks] {
            for drop_last in [false, true] {
                for (n, w) in [(1000u64, 4usize), (997, 3), (31, 8)] {
                    let whole = Rest::whole(n);
                    for d in [0u64, 1, 5, 40] {
                        let rest = layout(split, 0, w, drop_last).share(whole.clone()).unwrap().after(d);
                        for r in 0..w {
                            let a = layout(split, r, w, drop_last).share(whole.clone()).unwrap();
                            let b = layout(split, r, w, drop_last).share(rest.clone()).unwrap();
                            assert_eq!(b.len(), a.len().saturating_sub(d));
                            for i in 0..b.len() {
                                assert_eq!(b.position(i), a.position(d + i), "{split:?} n {n} w {w} d {d} rank {r} i {i}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ranges_from_lists_the_same_positions_as_position() {
        let rest = layout(Split::Blocks, 0, 4, false).share(Rest::whole(1001)).unwrap().after(37);
        for split in [Split::Strided, Split::Blocks] {
            for r in 0..3 {
                let s = layout(split, r, 3, false).share(rest.clone()).unwrap();
                for from in [0, 5, s.len()] {
                    let listed: Vec<u64> = s.ranges_from(from).iter().flat_map(|&(a, b)| a..b).collect();
                    let direct: Vec<u64> = (from..s.len()).map(|i| s.position(i)).collect();
                    assert_eq!(listed, direct);
                }
                if split == Split::Blocks {
                    assert!(s.ranges_from(0).len() <= 4 + 1, "a block is a few ranges");
                }
            }
        }
    }

    #[test]
    fn a_bad_rest_or_rank_is_refused() {
        let l = layout(Split::Strided, 0, 2, false);
        for bad in [
            Rest { ranges: vec![(5, 3)], next_pad: 10 },
            Rest { ranges: vec![(0, 4), (3, 6)], next_pad: 10 },
            Rest { ranges: vec![(0, 4), (4, 6)], next_pad: 10 },
            Rest { ranges: vec![(0, 4)], next_pad: 3 },
        ] {
            assert!(l.share(bad).unwrap_err().to_string().contains("not ascending"));
        }
        let e = layout(Split::Blocks, 3, 3, false).share(Rest::whole(5)).unwrap_err().to_string();
        assert!(e.contains("rank 3") && e.contains("world size 3"), "{e}");
        let empty = l.share(Rest::whole(0)).unwrap();
        assert!(empty.is_empty() && empty.after(3).is_empty());
    }
}
