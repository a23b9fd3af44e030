//! Epoch order: an exact permutation per epoch, rank shards, weighted sampling.
//!
//! # Positions
//! Every epoch has a *global order* of `global_len()` positions, shared by all ranks:
//! position `p` holds dataset index `perm(p mod N)`, where `perm` is the epoch's permutation
//! (dataset order when shuffling is off). With padding (the default, as PyTorch's
//! `DistributedSampler`) the global order is `ceil(N/w)·w` long and its tail wraps around to the
//! start of the permutation; with `drop_last` it is `floor(N/w)·w` long. Rank `r` of `w` takes
//! positions `r, r + w, r + 2w, …` (PyTorch's `indices[rank::world]`), so all ranks get the same
//! number of samples and, apart from the wrap padding, never the same sample.
//!
//! A delivered sample's `position` is what its augment parameters are drawn from
//! ([`crate::augment::params::draw`]), so the pictures do not depend on the rank layout's
//! bookkeeping, the thread count or the timing.
//!
//! # The permutation
//! A keyed Feistel network over the smallest even-bit power of two `≥ N` (6 rounds, SplitMix64
//! round function, keys from `(seed, epoch)`), restricted to `0..N` by cycle walking. It is a
//! bijection for any `N`, takes O(1) memory and O(1) expected time per lookup, so any position
//! of any epoch can be computed directly: resuming at `(epoch, step)` replays nothing.
//!
//! # Weighted sampling
//! With weights (given per sample, or class-balanced `1/count(label)`), each position draws a
//! dataset index with replacement from `(seed, epoch, position)` with Vose's alias method; the
//! epoch length is configurable.

use crate::augment::params::SampleRng;
use crate::config::PipelineConfig;
use crate::error::{Error, Result};

/// [`SampleRng`] stream for the permutation keys (augment parameters use stream 1).
pub const STREAM_PERMUTE: u64 = 2;
/// [`SampleRng`] stream for weighted draws.
pub const STREAM_WEIGHTED: u64 = 3;
/// [`SampleRng`] stream for the shard order's permutations ([`shards`]).
pub const STREAM_SHARDS: u64 = 4;

pub mod rest;
pub mod shards;

use rest::{Layout, Rest, Split};

const ROUNDS: usize = 6;

#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A keyed bijection of `0..n`, computed per element (no table).
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    mask: u64,
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `0..n` for `(seed, epoch)`.
    pub fn new(n: u64, seed: u64, epoch: u64) -> Self {
        Self::keyed(n, seed, epoch, 0, STREAM_PERMUTE)
    }

    /// One of a family of independent permutations for `(seed, epoch)`: member `index` of
    /// key stream `stream` (the shard order uses one for the shards and one per group).
    pub fn keyed(n: u64, seed: u64, epoch: u64, index: u64, stream: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut rng = SampleRng::new(seed, epoch, index, stream);
        let keys = std::array::from_fn(|_| rng.next_u64());
        Self { n, half_bits, mask: (1u64 << half_bits) - 1, keys }
    }

    #[inline]
    fn round_trip(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> self.half_bits, x & self.mask);
        for k in self.keys {
            let f = mix64(r ^ k) & self.mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    /// The image of `i` (`i < n`). Cycle walking: the Feistel network permutes the whole
    /// power-of-two domain, so following it from `i` reaches an element `< n` again.
    #[inline]
    pub fn apply(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = i;
        loop {
            x = self.round_trip(x);
            if x < self.n {
                return x;
            }
        }
    }
}

/// FNV-1a, 64 bits: a fingerprint that is the same on every machine and Rust version (for
/// resume states; not a defence against collisions made on purpose).
#[derive(Clone, Copy, Debug)]
pub struct Fnv(u64);

impl Fnv {
    /// The empty hash.
    pub fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    /// Hash `bytes` in.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv {
    fn default() -> Self {
        Self::new()
    }
}

/// Vose's alias table: O(1) draws from a discrete distribution.
#[derive(Clone, Debug)]
struct Alias {
    prob: Vec<f64>,
    alias: Vec<u32>,
}

impl Alias {
    fn new(weights: &[f64]) -> Result<Self> {
        let n = weights.len();
        if let Some((i, w)) = weights.iter().enumerate().find(|(_, w)| !(w.is_finite() && **w >= 0.0)) {
            return Err(Error::config(format!("sample weight {i} must be finite and >= 0, got {w}")));
        }
        let total: f64 = weights.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            return Err(Error::config(format!("sample weights must have a positive finite sum, got {total}")));
        }
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| scaled[i] < 1.0);
        let mut prob = vec![1.0; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            prob[s] = scaled[s];
            alias[s] = l as u32;
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Leftovers (rounding) keep probability 1.
        Ok(Self { prob, alias })
    }

    fn draw(&self, rng: &mut SampleRng) -> usize {
        let i = rng.below(self.prob.len() as u64) as usize;
        if rng.uniform() < self.prob[i] {
            i
        } else {
            self.alias[i] as usize
        }
    }
}

/// How a sampler orders an epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Seed of the permutation and the weighted draws.
    pub seed: u64,
    /// Shuffle every epoch (off: dataset order).
    pub shuffle: bool,
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Drop the tail (`floor(N/w)` per rank) instead of padding by wrapping (`ceil(N/w)`).
    pub drop_last: bool,
}

impl SamplerConfig {
    /// The sampler settings of a pipeline config.
    pub fn from_pipeline(c: &PipelineConfig) -> Self {
        Self { seed: c.seed, shuffle: c.shuffle, rank: c.rank, world_size: c.world_size, drop_last: c.drop_last }
    }
}

/// Sampling weights for [`Sampler::weighted`].
#[derive(Clone, Debug, PartialEq)]
pub enum Weights {
    /// `1 / count(label)` per sample: every class equally likely.
    ClassBalanced,
    /// One weight per sample.
    Given(Vec<f64>),
}

#[derive(Clone, Debug)]
enum Mode {
    /// An exact permutation (built per epoch by [`Sampler::epoch`]) or dataset order.
    Permute,
    Weighted(Alias),
}

/// The order one rank delivers an epoch in. See the module docs for positions.
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    /// Samples in the dataset.
    n: u64,
    /// Positions in one epoch before padding/dropping (N, or the weighted epoch length).
    epoch_len: u64,
    per_rank: u64,
    mode: Mode,
}

impl Sampler {
    fn check(n: u64, epoch_len: u64, cfg: &SamplerConfig) -> Result<u64> {
        if n == 0 {
            return Err(Error::config("cannot sample an empty dataset"));
        }
        if cfg.world_size == 0 {
            return Err(Error::config("world size must be at least 1"));
        }
        if cfg.rank >= cfg.world_size {
            return Err(Error::config(format!("rank {} is out of range for world size {}", cfg.rank, cfg.world_size)));
        }
        let w = cfg.world_size as u64;
        if w > epoch_len {
            return Err(Error::config(format!(
                "world size {w} is larger than the epoch ({epoch_len} samples): every rank needs at least one sample"
            )));
        }
        Ok(if cfg.drop_last { epoch_len / w } else { epoch_len.div_ceil(w) })
    }

    /// An exact permutation per epoch of a dataset of `n` samples.
    pub fn new(n: usize, cfg: &SamplerConfig) -> Result<Self> {
        let n = n as u64;
        let per_rank = Self::check(n, n, cfg)?;
        Ok(Self { cfg: cfg.clone(), n, epoch_len: n, per_rank, mode: Mode::Permute })
    }

    /// Weighted sampling with replacement: `epoch_len` draws per epoch (before rank padding).
    /// `labels` is needed for [`Weights::ClassBalanced`].
    pub fn weighted(labels: &[i64], weights: Weights, epoch_len: u64, cfg: &SamplerConfig) -> Result<Self> {
        let w = match weights {
            Weights::Given(w) => {
                if w.len() != labels.len() {
                    return Err(Error::config(format!("{} sample weights given for {} samples", w.len(), labels.len())));
                }
                w
            }
            Weights::ClassBalanced => {
                let mut counts = std::collections::HashMap::new();
                for l in labels {
                    *counts.entry(*l).or_insert(0u64) += 1;
                }
                labels.iter().map(|l| 1.0 / counts[l] as f64).collect()
            }
        };
        let n = labels.len() as u64;
        if epoch_len == 0 {
            return Err(Error::config("weighted epoch length must be at least 1"));
        }
        let per_rank = Self::check(n, epoch_len, cfg)?;
        Ok(Self { cfg: cfg.clone(), n, epoch_len, per_rank, mode: Mode::Weighted(Alias::new(&w)?) })
    }

    /// Samples this rank delivers per epoch (the same for every rank).
    pub fn len(&self) -> u64 {
        self.per_rank
    }

    /// Never true (an empty dataset is refused).
    pub fn is_empty(&self) -> bool {
        self.per_rank == 0
    }

    /// Positions in an epoch's global order (all ranks).
    pub fn global_len(&self) -> u64 {
        self.per_rank * self.cfg.world_size as u64
    }

    /// Positions per epoch before rank padding/dropping: N, or the weighted epoch length.
    pub fn epoch_len(&self) -> u64 {
        self.epoch_len
    }

    /// Dataset size.
    pub fn dataset_len(&self) -> u64 {
        self.n
    }

    /// The config.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Batches per epoch for this rank (the last may be partial).
    pub fn steps(&self, batch_size: usize) -> u64 {
        self.per_rank.div_ceil(batch_size.max(1) as u64)
    }

    /// The global position of this rank's `i`-th sample of an epoch.
    pub fn position(&self, i: u64) -> u64 {
        self.cfg.rank as u64 + i * self.cfg.world_size as u64
    }

    /// This rank's place in the world: strided ([`rest`]).
    pub fn layout(&self) -> Layout {
        Layout { split: Split::Strided, rank: self.cfg.rank, world_size: self.cfg.world_size, drop_last: self.cfg.drop_last }
    }

    /// A fresh epoch's positions ([`Rest::whole`] of the epoch length).
    pub fn whole(&self) -> Rest {
        Rest::whole(self.epoch_len)
    }

    /// What decides the order besides the seed and the dataset's keys: `permutation`,
    /// `dataset order`, or the weighted sampling's table and epoch length (a state saved under
    /// one is refused under another).
    pub fn describe(&self) -> String {
        match &self.mode {
            Mode::Permute if self.cfg.shuffle => "permutation".into(),
            Mode::Permute => "dataset order".into(),
            Mode::Weighted(a) => {
                let mut h = crate::sampler::Fnv::new();
                for (p, i) in a.prob.iter().zip(&a.alias) {
                    h.write(&p.to_bits().to_le_bytes());
                    h.write(&i.to_le_bytes());
                }
                format!("weighted {:016x}, {} draws per epoch", h.finish(), self.epoch_len)
            }
        }
    }

    /// The resolved order of one epoch (the permutation's keys drawn once).
    pub fn epoch(&self, epoch: u64) -> EpochOrder<'_> {
        let perm = match &self.mode {
            Mode::Permute if self.cfg.shuffle && self.n > 1 => Some(Permutation::new(self.n, self.cfg.seed, epoch)),
            _ => None,
        };
        EpochOrder { s: self, epoch, perm }
    }

    /// `(position, dataset index)` of this rank's samples of `epoch`, from its `start`-th.
    pub fn iter(&self, epoch: u64, start: u64) -> impl Iterator<Item = (u64, usize)> + '_ {
        let e = self.epoch(epoch);
        (start.min(self.per_rank)..self.per_rank).map(move |i| {
            let p = self.position(i);
            (p, e.index(p))
        })
    }
}

/// One epoch's order, ready for lookups.
#[derive(Clone, Debug)]
pub struct EpochOrder<'a> {
    s: &'a Sampler,
    epoch: u64,
    perm: Option<Permutation>,
}

impl EpochOrder<'_> {
    /// Dataset index at global `position`.
    pub fn index(&self, position: u64) -> usize {
        match &self.s.mode {
            Mode::Weighted(alias) => {
                let mut rng = SampleRng::new(self.s.cfg.seed, self.epoch, position, STREAM_WEIGHTED);
                alias.draw(&mut rng)
            }
            Mode::Permute => {
                let p = position % self.s.n;
                match &self.perm {
                    Some(perm) => perm.apply(p) as usize,
                    None => p as usize,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_bijection_for_every_small_n() {
        for n in 1..=300u64 {
            for seed in 0..3 {
                let p = Permutation::new(n, seed, 7);
                let mut seen = vec![false; n as usize];
                for i in 0..n {
                    let j = p.apply(i) as usize;
                    assert!(!seen[j], "n {n} seed {seed}: {j} twice");
                    seen[j] = true;
                }
            }
        }
    }

    #[test]
    fn permutation_spreads_every_element_evenly() {
        // Where element i lands, over many seeds, is close to uniform (a weak keying or a
        // round function that ignores the key would pile up). Fixed seeds: deterministic.
        for n in [3u64, 10, 1000] {
            let bins = n.min(10);
            for i in [0, n / 2, n - 1] {
                let mut counts = vec![0u32; bins as usize];
                let seeds = 20_000;
                for seed in 0..seeds {
                    counts[(Permutation::new(n, seed, 0).apply(i) * bins / n) as usize] += 1;
                }
                let expect = seeds as f64 / bins as f64;
                for c in &counts {
                    assert!((*c as f64 - expect).abs() < 0.08 * expect, "n {n} element {i}: {counts:?}");
                }
            }
        }
    }

    #[test]
    fn alias_matches_weights() {
        let w = [1.0, 0.0, 3.0, 6.0];
        let a = Alias::new(&w).unwrap();
        let mut counts = [0u32; 4];
        let mut rng = SampleRng::new(1, 2, 3, 4);
        let draws = 200_000;
        for _ in 0..draws {
            counts[a.draw(&mut rng)] += 1;
        }
        assert_eq!(counts[1], 0);
        for (c, w) in counts.iter().zip(w) {
            // ±1% absolute: 5 sigma at these sizes; the stream is fixed, so this is deterministic.
            assert!((*c as f64 / draws as f64 - w / 10.0).abs() < 0.01, "{counts:?}");
        }
        assert!(Alias::new(&[0.0, 0.0]).unwrap_err().to_string().contains("positive finite sum"));
        assert!(Alias::new(&[1.0, f64::NAN]).unwrap_err().to_string().contains("weight 1"));
    }
}
