//! Exact, keyed epochs over tar shards, with memory that grows with the number of shards, not
//! samples: the order for data sets too large to index per sample (streamed from object
//! storage), where only per-shard facts (sample count) are known up front.
//!
//! # The order of one epoch
//! 1. The shards are put in a keyed order (a [`Permutation`] of the shard numbers from
//!    `(seed, epoch)`), and cut, in that order, into *groups* of `group` consecutive shards:
//!    the shards a reader holds in memory at once.
//! 2. Inside each group, all its samples are put in a keyed order of their own (one
//!    permutation per group, keyed by `(seed, epoch, group)`), so a batch mixes the samples of
//!    `group` shards rather than of one.
//! 3. The epoch's *stream* is the groups one after the other: `N` positions, every sample of
//!    the data set exactly once.
//! 4. Ranks take contiguous blocks of the stream, padded as PyTorch's `DistributedSampler` pads
//!    (`ceil(N/w)` each, the tail wrapping to the stream's start; `floor(N/w)` with
//!    `drop_last`): rank `r` of `w` takes stream positions `r·L .. (r+1)·L`. Contiguous blocks
//!    (not `DistributedSampler`'s striding) keep each shard's samples on one rank, so a shard
//!    is fetched by one process, or two at a block boundary, instead of by every rank.
//!
//! Every position is computed, not replayed: resuming at `(epoch, step)` is a binary search
//! over the groups' starts (O(log shards)) and two permutation lookups. Memory per epoch is
//! O(shards): the shard order and the groups' starts.
//!
//! # How this differs from the per-sample permutation
//! [`super::Sampler`]'s permutation makes any sample follow any other; here a sample's
//! neighbours in the stream are the samples of the `group` shards its group holds. When shards
//! were written in label order (`stoke pack` of a class-folder data set writes them so), a batch
//! then holds the classes of about `group` shards; a larger `group` costs `group` shards of
//! memory and buys a better mix. `shuffle_quality` in the tests measures it against a full
//! permutation and against a WebDataset-style buffer shuffle.

use super::rest::{Layout, Rest, Split};
use super::{Permutation, STREAM_SHARDS};
use crate::error::{Error, Result};

/// How a [`ShardOrder`] orders its epochs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardOrderConfig {
    /// Base seed of every permutation.
    pub seed: u64,
    /// Off: shards and samples in stored order (still grouped and split by rank).
    pub shuffle: bool,
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Drop the stream's tail that does not divide evenly instead of padding.
    pub drop_last: bool,
    /// Shards held (and mixed) at once; at least 1.
    pub group: usize,
}

impl Default for ShardOrderConfig {
    fn default() -> Self {
        Self { seed: 0, shuffle: true, rank: 0, world_size: 1, drop_last: false, group: 4 }
    }
}

/// Where a stream position's sample is: shard number and index inside that shard (in the
/// shard's stored order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardSample {
    /// Shard number (the order the shards were listed in).
    pub shard: usize,
    /// Index of the sample inside its shard.
    pub index: u64,
}

/// The epoch orders over shards of known sample counts.
#[derive(Clone, Debug)]
pub struct ShardOrder {
    counts: Vec<u64>,
    total: u64,
    per_rank: u64,
    cfg: ShardOrderConfig,
}

impl ShardOrder {
    /// Orders over shards holding `counts[s]` samples each.
    pub fn new(counts: Vec<u64>, cfg: ShardOrderConfig) -> Result<Self> {
        if cfg.world_size == 0 || cfg.rank >= cfg.world_size {
            return Err(Error::config(format!("rank {} is not in 0..world size {}", cfg.rank, cfg.world_size)));
        }
        if cfg.group == 0 {
            return Err(Error::config("shards held at once (group) must be at least 1, got 0"));
        }
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return Err(Error::config(format!("the {} shards hold no sample", counts.len())));
        }
        let w = cfg.world_size as u64;
        if cfg.drop_last && total < w {
            return Err(Error::config(format!(
                "{total} samples cannot give each of {w} ranks one with drop_last; use fewer ranks or padding"
            )));
        }
        let per_rank = if cfg.drop_last { total / w } else { total.div_ceil(w) };
        Ok(Self { counts, total, per_rank, cfg })
    }

    /// The settings it orders by.
    pub fn config(&self) -> &ShardOrderConfig {
        &self.cfg
    }

    /// Samples in the data set (`N`).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Positions this rank delivers per epoch (the same for every rank).
    pub fn len(&self) -> u64 {
        self.per_rank
    }

    /// This rank's place in the world: contiguous blocks ([`super::rest`]).
    pub fn layout(&self) -> Layout {
        Layout { split: Split::Blocks, rank: self.cfg.rank, world_size: self.cfg.world_size, drop_last: self.cfg.drop_last }
    }

    /// A fresh epoch's positions ([`Rest::whole`] of `N`).
    pub fn whole(&self) -> Rest {
        Rest::whole(self.total)
    }

    /// Whether this rank delivers nothing (never: `new` refuses that).
    pub fn is_empty(&self) -> bool {
        self.per_rank == 0
    }

    /// The order of `epoch`: O(shards) to build, O(log shards) per lookup.
    pub fn epoch(&self, epoch: u64) -> ShardEpoch<'_> {
        let n = self.counts.len() as u64;
        let order: Vec<usize> = if self.cfg.shuffle {
            let p = Permutation::keyed(n, self.cfg.seed, epoch, 0, STREAM_SHARDS);
            (0..n).map(|i| p.apply(i) as usize).collect()
        } else {
            (0..self.counts.len()).collect()
        };
        let mut starts = Vec::with_capacity(order.len().div_ceil(self.cfg.group) + 1);
        let mut at = 0u64;
        for chunk in order.chunks(self.cfg.group) {
            starts.push(at);
            at += chunk.iter().map(|&s| self.counts[s]).sum::<u64>();
        }
        starts.push(at);
        ShardEpoch { owner: self, epoch, order, starts }
    }
}

/// One epoch's order (see the module docs).
#[derive(Clone, Debug)]
pub struct ShardEpoch<'a> {
    owner: &'a ShardOrder,
    epoch: u64,
    /// Shards in stream order.
    order: Vec<usize>,
    /// Stream position where each group starts, and `N` last.
    starts: Vec<u64>,
}

impl ShardEpoch<'_> {
    /// The sample at position `i` (`i < len()`) of this rank.
    pub fn at(&self, i: u64) -> ShardSample {
        assert!(i < self.owner.per_rank, "position {i} of a rank holding {}", self.owner.per_rank);
        let g = (self.owner.cfg.rank as u64 * self.owner.per_rank + i) % self.owner.total;
        self.stream(g)
    }

    /// The sample at stream position `g < N` (every rank's shared view).
    pub fn stream(&self, g: u64) -> ShardSample {
        let cfg = &self.owner.cfg;
        // The group holding g: the last start <= g (groups are never empty of positions
        // unless their shards are all empty, which partition_point skips past).
        let k = self.starts.partition_point(|&s| s <= g) - 1;
        let local = g - self.starts[k];
        let size = self.starts[k + 1] - self.starts[k];
        let j = if cfg.shuffle { Permutation::keyed(size, cfg.seed, self.epoch, k as u64 + 1, STREAM_SHARDS).apply(local) } else { local };
        let mut j = j;
        let first = k * cfg.group;
        for &shard in &self.order[first..(first + cfg.group).min(self.order.len())] {
            let c = self.owner.counts[shard];
            if j < c {
                return ShardSample { shard, index: j };
            }
            j -= c;
        }
        unreachable!("position {g} past its group")
    }

    /// The shards this rank reads from its `from`-th position to the end of the epoch, in the
    /// order of their first use there, each with how many of those positions are its: what a
    /// streaming reader fetches, in which order, and when it may drop each.
    pub fn needs(&self, from: u64) -> Vec<(usize, u64)> {
        let o = self.owner;
        let start = o.cfg.rank as u64 * o.per_rank;
        self.needs_in(&[(start + from.min(o.per_rank), start + o.per_rank)])
    }

    /// As [`Self::needs`] for the positions `ranges` lists, in that order (unwrapped: position
    /// `u` is stream position `u mod N`; a rank's share of a resumed epoch,
    /// [`super::rest::Share::ranges_from`]).
    ///
    /// O(shards) plus a walk of the positions of the groups a range cuts, and, in each group a
    /// range covers whole, of the positions up to the first use of the group's last shard (a
    /// few per shard unless a shard is tiny beside its group). `naive_needs` in the tests walks
    /// every position instead.
    pub fn needs_in(&self, ranges: &[(u64, u64)]) -> Vec<(usize, u64)> {
        let o = self.owner;
        let mut out: Vec<(usize, u64)> = Vec::new();
        let mut slot = vec![usize::MAX; o.counts.len()];
        fn record(out: &mut Vec<(usize, u64)>, slot: &mut [usize], s: usize, k: u64) {
            if slot[s] == usize::MAX {
                slot[s] = out.len();
                out.push((s, 0));
            }
            out[slot[s]].1 += k;
        }
        for &(a, b) in ranges {
            let mut u = a;
            while u < b {
                let g = u % o.total;
                let k = self.starts.partition_point(|&s| s <= g) - 1;
                let (start, end) = (self.starts[k], self.starts[k + 1]);
                let take = (end - g).min(b - u);
                let first = k * o.cfg.group;
                let shards = &self.order[first..(first + o.cfg.group).min(self.order.len())];
                if g == start && take == end - start {
                    // The whole group: first uses by walking until every shard of it was seen,
                    // then each shard's full count.
                    let mut unseen = shards.iter().filter(|&&s| o.counts[s] > 0 && slot[s] == usize::MAX).count();
                    let mut p = g;
                    while unseen > 0 {
                        let s = self.stream(p).shard;
                        if slot[s] == usize::MAX {
                            record(&mut out, &mut slot, s, 0);
                            unseen -= 1;
                        }
                        p += 1;
                    }
                    for &s in shards.iter().filter(|&&s| o.counts[s] > 0) {
                        record(&mut out, &mut slot, s, o.counts[s]);
                    }
                } else {
                    for p in g..g + take {
                        record(&mut out, &mut slot, self.stream(p).shard, 1);
                    }
                }
                u += take;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn order(counts: &[u64], rank: usize, world: usize, drop_last: bool, group: usize) -> ShardOrder {
        let cfg = ShardOrderConfig { seed: 11, shuffle: true, rank, world_size: world, drop_last, group };
        ShardOrder::new(counts.to_vec(), cfg).unwrap()
    }

    /// A naive construction of the stream: shards listed in the keyed order, cut into groups,
    /// each group's samples listed and then permuted element by element.
    fn naive_stream(counts: &[u64], seed: u64, epoch: u64, group: usize) -> Vec<ShardSample> {
        let n = counts.len() as u64;
        let p = Permutation::keyed(n, seed, epoch, 0, STREAM_SHARDS);
        let shards: Vec<usize> = (0..n).map(|i| p.apply(i) as usize).collect();
        let mut out = Vec::new();
        for (k, chunk) in shards.chunks(group).enumerate() {
            let listed: Vec<ShardSample> =
                chunk.iter().flat_map(|&s| (0..counts[s]).map(move |i| ShardSample { shard: s, index: i })).collect();
            let q = Permutation::keyed(listed.len() as u64, seed, epoch, k as u64 + 1, STREAM_SHARDS);
            out.extend((0..listed.len() as u64).map(|i| listed[q.apply(i) as usize]));
        }
        out
    }

    #[test]
    fn the_stream_is_the_naive_construction() {
        let counts = [5u64, 0, 17, 3, 9, 1, 12, 8];
        for group in [1, 2, 3, 8, 20] {
            for epoch in 0..3 {
                let o = order(&counts, 0, 1, false, group);
                let e = o.epoch(epoch);
                let got: Vec<_> = (0..o.total()).map(|g| e.stream(g)).collect();
                assert_eq!(got, naive_stream(&counts, 11, epoch, group), "group {group} epoch {epoch}");
            }
        }
    }

    #[test]
    fn every_sample_once_per_epoch_ranks_disjoint_and_equal() {
        let counts: Vec<u64> = (0..23).map(|s| (s * 7 % 13) as u64).collect();
        let total: u64 = counts.iter().sum();
        for world in [1usize, 2, 3, 7, 16] {
            for drop_last in [false, true] {
                let mut seen: HashMap<ShardSample, u32> = HashMap::new();
                let mut lens = Vec::new();
                for rank in 0..world {
                    let o = order(&counts, rank, world, drop_last, 3);
                    let e = o.epoch(4);
                    lens.push(o.len());
                    for i in 0..o.len() {
                        let s = e.at(i);
                        assert!(s.index < counts[s.shard]);
                        *seen.entry(s).or_default() += 1;
                    }
                }
                assert!(lens.iter().all(|&l| l == lens[0]), "equal lengths: {lens:?}");
                let w = world as u64;
                if drop_last {
                    assert_eq!(lens[0], total / w);
                    assert!(seen.values().all(|&c| c == 1), "world {world}: no sample twice with drop_last");
                    assert_eq!(seen.len() as u64, total / w * w);
                } else {
                    assert_eq!(lens[0], total.div_ceil(w));
                    assert_eq!(seen.len() as u64, total, "world {world}: every sample delivered");
                    let twice = seen.values().filter(|&&c| c == 2).count() as u64;
                    assert_eq!(twice, total.div_ceil(w) * w - total, "only the padding repeats");
                    assert!(seen.values().all(|&c| c <= 2));
                }
            }
        }
    }

    #[test]
    fn same_seed_same_order_other_epoch_other_order_and_resume_is_direct() {
        let counts = vec![40u64; 10];
        let a = order(&counts, 1, 3, false, 2);
        let b = order(&counts, 1, 3, false, 2);
        let (ea, eb) = (a.epoch(2), b.epoch(2));
        let run: Vec<_> = (0..a.len()).map(|i| ea.at(i)).collect();
        assert_eq!(run, (0..b.len()).map(|i| eb.at(i)).collect::<Vec<_>>());
        // Resuming at any step computes the same samples as the uninterrupted run.
        for start in [0u64, 1, 17, a.len() - 1] {
            let fresh = b.epoch(2);
            assert_eq!(fresh.at(start), run[start as usize]);
        }
        let other: Vec<_> = (0..a.len()).map(|i| a.epoch(3).at(i)).collect();
        assert_ne!(run, other, "epochs differ");
    }

    /// Walk every position from `from`: shards in first-use order with their position counts.
    fn naive_needs(o: &ShardOrder, e: &ShardEpoch<'_>, from: u64) -> Vec<(usize, u64)> {
        let mut out: Vec<(usize, u64)> = Vec::new();
        for i in from..o.len() {
            let s = e.at(i).shard;
            match out.iter_mut().find(|n| n.0 == s) {
                Some(n) => n.1 += 1,
                None => out.push((s, 1)),
            }
        }
        out
    }

    #[test]
    fn needs_is_the_walk_of_every_position() {
        let counts: Vec<u64> = vec![5, 0, 17, 3, 9, 1, 12, 8, 0, 30, 2, 7];
        for group in [1, 2, 3, 5, 12] {
            for world in [1usize, 2, 3, 5] {
                for drop_last in [false, true] {
                    for rank in 0..world {
                        let o = order(&counts, rank, world, drop_last, group);
                        for epoch in 0..2 {
                            let e = o.epoch(epoch);
                            for from in [0, 1, 7, o.len() / 2, o.len() - 1, o.len(), o.len() + 3] {
                                let want = if from >= o.len() { Vec::new() } else { naive_needs(&o, &e, from) };
                                assert_eq!(
                                    e.needs(from),
                                    want,
                                    "group {group} world {world} rank {rank} drop_last {drop_last} from {from}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn needs_of_a_resumed_share_is_the_walk_of_its_positions() {
        // A world of 4 stops after 9 samples per rank; worlds of 3 and 5 split the rest.
        let counts: Vec<u64> = vec![5, 0, 17, 3, 9, 1, 12, 8, 0, 30, 2, 7];
        for group in [1, 3, 12] {
            let o = order(&counts, 0, 4, false, group);
            let rest = o.layout().share(o.whole()).unwrap().after(9);
            let e = o.epoch(1);
            for world in [3usize, 5] {
                for rank in 0..world {
                    let share = crate::sampler::rest::Layout { rank, world_size: world, ..o.layout() }.share(rest.clone()).unwrap();
                    for from in [0, 4, share.len()] {
                        let mut want: Vec<(usize, u64)> = Vec::new();
                        for i in from..share.len() {
                            let s = e.stream(share.position(i) % o.total()).shard;
                            match want.iter_mut().find(|n| n.0 == s) {
                                Some(n) => n.1 += 1,
                                None => want.push((s, 1)),
                            }
                        }
                        assert_eq!(e.needs_in(&share.ranges_from(from)), want, "group {group} world {world} rank {rank} from {from}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_rank_holds_about_group_shards_at_a_time() {
        // 64 shards of 100 samples, 4 ranks, groups of 4: each rank's block covers 16 shards,
        // and any window of consecutive positions touches shards of at most two groups.
        let counts = vec![100u64; 64];
        for rank in 0..4 {
            let o = order(&counts, rank, 4, false, 4);
            let e = o.epoch(0);
            let fetch: Vec<usize> = e.needs(0).iter().map(|n| n.0).collect();
            assert_eq!(fetch.len(), 16, "rank {rank}: {fetch:?}");
            let mut first_use: Vec<usize> = Vec::new();
            for i in 0..o.len() {
                let s = e.at(i).shard;
                if !first_use.contains(&s) {
                    first_use.push(s);
                }
                // Open shards: first used, not yet finished; at most two groups' worth.
                if i % 50 == 0 {
                    let done = |s: usize| (i + 1..o.len()).all(|j| e.at(j).shard != s);
                    let open = first_use.iter().filter(|&&s| !done(s)).count();
                    assert!(open <= 8, "rank {rank} at {i}: {open} shards open");
                }
            }
            let mut a = first_use.clone();
            let mut b = fetch.clone();
            a.sort();
            b.sort();
            assert_eq!(a, b, "needs lists exactly the shards the rank reads");
        }
    }

    #[test]
    fn bad_rank_world_group_and_empty_sets_are_refused_with_the_values() {
        let cfg = |rank, world_size, group| ShardOrderConfig { rank, world_size, group, ..Default::default() };
        let e = ShardOrder::new(vec![3], cfg(2, 2, 1)).unwrap_err().to_string();
        assert!(e.contains("rank 2") && e.contains("world size 2"), "{e}");
        let e = ShardOrder::new(vec![3], cfg(0, 1, 0)).unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        let e = ShardOrder::new(vec![0, 0], cfg(0, 1, 1)).unwrap_err().to_string();
        assert!(e.contains("2 shards hold no sample"), "{e}");
        let e = ShardOrder::new(vec![2], ShardOrderConfig { drop_last: true, ..cfg(0, 3, 1) }).unwrap_err().to_string();
        assert!(e.contains("2 samples") && e.contains("3 ranks"), "{e}");
    }

    /// Mean share of same-label pairs among the pairs of a batch, over an epoch's batches.
    fn same_label_share(labels: &[u32]) -> f64 {
        let batch = 64;
        let mut sum = 0.0;
        let mut n = 0;
        for b in labels.chunks_exact(batch) {
            let mut c: HashMap<u32, u64> = HashMap::new();
            for &l in b {
                *c.entry(l).or_default() += 1;
            }
            let same: u64 = c.values().map(|&k| k * (k - 1) / 2).sum();
            sum += same as f64 / (batch * (batch - 1) / 2) as f64;
            n += 1;
        }
        sum / n as f64
    }

    /// Shuffle quality on shards written in label order (100 classes × 64 samples, 25 shards
    /// of 256 = 4 classes each): the share of same-label pairs in a batch of 64, against a full
    /// per-sample permutation (ideal ≈ 1/100) and a WebDataset-style buffer shuffle (shards in
    /// keyed order, a 1024-sample buffer, random draws from it). The printed figures are the
    /// ones DESIGN-level docs quote; the asserts pin the ordering of the three.
    #[test]
    fn shuffle_quality_against_full_permutation_and_buffer_shuffle() {
        let (classes, per_class, shard) = (100u32, 64u64, 256u64);
        let total = classes as u64 * per_class;
        let label = |g: u64| (g / per_class) as u32; // stored order is label order
        let counts = vec![shard; (total / shard) as usize];
        let full = {
            let p = Permutation::new(total, 3, 0);
            same_label_share(&(0..total).map(|i| label(p.apply(i))).collect::<Vec<_>>())
        };
        let grouped = |group: usize| {
            let o = ShardOrder::new(counts.clone(), ShardOrderConfig { seed: 3, group, ..Default::default() }).unwrap();
            let e = o.epoch(0);
            same_label_share(&(0..total).map(|g| e.stream(g)).map(|s| label(s.shard as u64 * shard + s.index)).collect::<Vec<_>>())
        };
        let buffer = {
            let p = Permutation::keyed(counts.len() as u64, 3, 0, 0, STREAM_SHARDS);
            let mut rng = crate::augment::params::SampleRng::new(3, 0, 0, 9);
            let mut buf: Vec<u32> = Vec::new();
            let mut out = Vec::new();
            for i in 0..counts.len() as u64 {
                let s = p.apply(i);
                for k in 0..shard {
                    buf.push(label(s * shard + k));
                    if buf.len() >= 1024 {
                        let j = rng.below(buf.len() as u64) as usize;
                        out.push(buf.swap_remove(j));
                    }
                }
            }
            while !buf.is_empty() {
                let j = rng.below(buf.len() as u64) as usize;
                out.push(buf.swap_remove(j));
            }
            same_label_share(&out)
        };
        let (g1, g4, g16) = (grouped(1), grouped(4), grouped(16));
        println!("same-label pair share per batch of 64: full permutation {full:.4}, shard groups of 1 {g1:.4}, 4 {g4:.4}, 16 {g16:.4}, buffer shuffle (1024) {buffer:.4}");
        assert!(full < 0.02, "a full permutation mixes 100 classes: {full}");
        assert!(g16 < g4 && g4 < g1, "larger groups mix better: {g1} {g4} {g16}");
        assert!(g4 < 0.1, "groups of 4 shards (16 classes) leave about 1/16 same-label pairs: {g4}");
        assert!(g16 < 0.03, "groups of 16 shards come close to the full permutation: {g16}");
        assert!(buffer > full, "a buffer shuffle does not reach a full permutation: {buffer}");
    }

    /// What an elastic resume costs in mix: the same-label pair share of the batches each rank
    /// delivers in an epoch run by 4 ranks throughout, against one where 4 ranks deliver 10
    /// batches and 3 ranks then split the rest ([`crate::sampler::rest`]). Same 100-class,
    /// label-ordered shards as above; stream mode in groups of 4, and the per-sample
    /// permutation (strided) for comparison.
    #[test]
    fn shuffle_quality_of_a_resumed_epoch() {
        use crate::sampler::rest::{Layout, Rest, Split};
        let (classes, per_class, shard, batch) = (100u32, 64u64, 256u64, 64u64);
        let total = classes as u64 * per_class;
        let counts = vec![shard; (total / shard) as usize];
        let o = ShardOrder::new(counts, ShardOrderConfig { seed: 3, group: 4, ..Default::default() }).unwrap();
        let e = o.epoch(0);
        let perm = Permutation::new(total, 3, 0);
        let label_of = |split: Split, p: u64| -> u32 {
            let g = p % total;
            let i = match split {
                Split::Blocks => {
                    let s = e.stream(g);
                    s.shard as u64 * shard + s.index
                }
                Split::Strided => perm.apply(g),
            };
            (i / per_class) as u32
        };
        // Each rank's labels in delivery order, batches cut per rank (and per world).
        let batches = |split: Split, worlds: &[(usize, u64)]| -> f64 {
            let mut rest = Rest::whole(total);
            let mut labels = Vec::new();
            for &(w, steps) in worlds {
                let upto = steps.saturating_mul(batch);
                for r in 0..w {
                    let s = Layout { split, rank: r, world_size: w, drop_last: true }.share(rest.clone()).unwrap();
                    let n = upto.min(s.len()) / batch * batch;
                    labels.extend((0..n).map(|i| label_of(split, s.position(i))));
                }
                rest = Layout { split, rank: 0, world_size: w, drop_last: true }.share(rest).unwrap().after(upto);
            }
            same_label_share(&labels)
        };
        let (b4, b43) = (batches(Split::Blocks, &[(4, u64::MAX)]), batches(Split::Blocks, &[(4, 10), (3, u64::MAX)]));
        let (s4, s43) = (batches(Split::Strided, &[(4, u64::MAX)]), batches(Split::Strided, &[(4, 10), (3, u64::MAX)]));
        println!("same-label pair share per batch of 64: stream groups of 4: 4 ranks {b4:.4}, 4 then 3 ranks {b43:.4}; per-sample permutation: 4 ranks {s4:.4}, 4 then 3 ranks {s43:.4}");
        assert!(b43 < b4 * 1.2, "a resumed epoch mixes about as well as an uninterrupted one: {b43} vs {b4}");
        assert!(s43 < 0.02 && s4 < 0.02, "the per-sample permutation still mixes 100 classes: {s4} {s43}");
    }
}
