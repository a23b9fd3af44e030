//! Sampler properties against a naive reference (PyTorch `DistributedSampler`'s padding and
//! striding applied to an explicitly materialised permutation).

use proptest::prelude::*;
use stoke::sampler::{Sampler, SamplerConfig, Weights};

fn cfg(seed: u64, rank: usize, world: usize, drop_last: bool) -> SamplerConfig {
    SamplerConfig { seed, shuffle: true, rank, world_size: world, drop_last }
}

/// The naive reference: the epoch's whole order as a list, padded or cut, then `[rank::world]`.
fn naive(order: &[usize], rank: usize, world: usize, drop_last: bool) -> Vec<usize> {
    let n = order.len();
    let total = if drop_last { n / world * world } else { n.div_ceil(world) * world };
    let padded: Vec<usize> = (0..total).map(|p| order[p % n]).collect();
    padded.into_iter().skip(rank).step_by(world).collect()
}

fn rank_slice(s: &Sampler, epoch: u64) -> Vec<usize> {
    s.iter(epoch, 0).map(|(_, i)| i).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn ranks_are_disjoint_equal_and_cover(n in 1usize..3000, world in 1usize..17, seed in any::<u64>(), epoch in 0u64..1000, drop_last in any::<bool>()) {
        prop_assume!(world <= n);
        let slices: Vec<Vec<usize>> = (0..world).map(|r| rank_slice(&Sampler::new(n, &cfg(seed, r, world, drop_last)).unwrap(), epoch)).collect();
        let per = if drop_last { n / world } else { n.div_ceil(world) };
        // Equal length.
        for s in &slices { prop_assert_eq!(s.len(), per); }
        // Each dataset index delivered once, plus exactly `total - n` wrap duplicates (pad)
        // or `n - total` left out (drop_last).
        let mut count = vec![0u32; n];
        for s in &slices { for &i in s { count[i] += 1; } }
        let total = per * world;
        if drop_last {
            prop_assert!(count.iter().all(|&c| c <= 1));
            prop_assert_eq!(count.iter().filter(|&&c| c == 0).count(), n - total);
        } else {
            prop_assert!(count.iter().all(|&c| c == 1 || c == 2));
            prop_assert_eq!(count.iter().filter(|&&c| c == 2).count(), total - n);
        }
        // Against the naive reference built from the epoch's materialised order (rank 0 of 1).
        let order = rank_slice(&Sampler::new(n, &cfg(seed, 0, 1, false)).unwrap(), epoch);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        prop_assert_eq!(sorted, (0..n).collect::<Vec<_>>());
        for (r, s) in slices.iter().enumerate() {
            prop_assert_eq!(s, &naive(&order, r, world, drop_last));
        }
        // Identical across runs.
        let again = rank_slice(&Sampler::new(n, &cfg(seed, 0, world, drop_last)).unwrap(), epoch);
        prop_assert_eq!(&again, &slices[0]);
        // Resume: starting at sample k gives the tail.
        let s0 = Sampler::new(n, &cfg(seed, 0, world, drop_last)).unwrap();
        let k = (seed % (per as u64 + 1)) as usize;
        let tail: Vec<usize> = s0.iter(epoch, k as u64).map(|(_, i)| i).collect();
        prop_assert_eq!(&tail[..], &slices[0][k..]);
    }

    #[test]
    fn epochs_differ(n in 10usize..5000, seed in any::<u64>(), epoch in 0u64..1000) {
        let s = Sampler::new(n, &cfg(seed, 0, 1, false)).unwrap();
        prop_assert_ne!(rank_slice(&s, epoch), rank_slice(&s, epoch + 1));
    }

    #[test]
    fn seeds_differ(n in 10usize..5000, seed in 0u64..u64::MAX, epoch in 0u64..1000) {
        let a = Sampler::new(n, &cfg(seed, 0, 1, false)).unwrap();
        let b = Sampler::new(n, &cfg(seed + 1, 0, 1, false)).unwrap();
        prop_assert_ne!(rank_slice(&a, epoch), rank_slice(&b, epoch));
    }
}

#[test]
fn positions_are_global_and_strided() {
    let s = Sampler::new(10, &cfg(1, 2, 4, false)).unwrap();
    let pos: Vec<u64> = s.iter(0, 0).map(|(p, _)| p).collect();
    assert_eq!(pos, [2, 6, 10]);
    assert_eq!((s.len(), s.global_len(), s.steps(2)), (3, 12, 2));
    let s = Sampler::new(10, &cfg(1, 2, 4, true)).unwrap();
    assert_eq!((s.len(), s.global_len()), (2, 8));
}

#[test]
fn shuffle_off_is_dataset_order() {
    let c = SamplerConfig { seed: 5, shuffle: false, rank: 1, world_size: 3, drop_last: false };
    let s = Sampler::new(7, &c).unwrap();
    assert_eq!(rank_slice(&s, 3), [1, 4, 0]);
}

#[test]
fn world_larger_than_the_dataset_is_an_error() {
    let e = Sampler::new(5, &cfg(0, 0, 8, false)).unwrap_err().to_string();
    assert!(e.contains("world size 8 is larger than the epoch (5 samples)"), "{e}");
    let e = Sampler::new(5, &cfg(0, 3, 3, false)).unwrap_err().to_string();
    assert!(e.contains("rank 3 is out of range for world size 3"), "{e}");
    assert!(Sampler::new(0, &cfg(0, 0, 1, false)).unwrap_err().to_string().contains("empty dataset"));
}

#[test]
fn class_balanced_weights() {
    // 900 samples of class 0, 100 of class 1: balanced sampling draws each class about half
    // the time. The draws are a fixed function of the seed, so this cannot flake.
    let labels: Vec<i64> = (0..1000).map(|i| if i < 900 { 0 } else { 1 }).collect();
    let s = Sampler::weighted(&labels, Weights::ClassBalanced, 20_000, &cfg(3, 0, 1, false)).unwrap();
    assert_eq!(s.len(), 20_000);
    let ones = s.iter(0, 0).filter(|&(_, i)| labels[i] == 1).count();
    assert!((9_400..10_600).contains(&ones), "{ones} of 20000 from the minority class");
    // Given weights: a zero weight is never drawn; draws are per position, so ranks agree with
    // the single-rank order at their positions.
    let w: Vec<f64> = (0..10).map(|i| if i == 4 { 0.0 } else { 1.0 }).collect();
    let all = Sampler::weighted(&labels[..10], Weights::Given(w.clone()), 101, &cfg(9, 0, 1, false)).unwrap();
    let order: Vec<usize> = all.iter(2, 0).map(|(_, i)| i).collect();
    assert!(!order.contains(&4));
    let r1 = Sampler::weighted(&labels[..10], Weights::Given(w), 101, &cfg(9, 1, 2, false)).unwrap();
    assert_eq!(r1.len(), 51);
    for (p, i) in r1.iter(2, 0) {
        if (p as usize) < order.len() {
            assert_eq!(i, order[p as usize]);
        }
    }
    let e = Sampler::weighted(&labels[..10], Weights::Given(vec![1.0; 3]), 10, &cfg(0, 0, 1, false)).unwrap_err();
    assert!(e.to_string().contains("3 sample weights given for 10 samples"));
}
