//! `stoke tune [DATASET]`: sweep the knobs that set throughput, print the table, pick the
//! smallest configuration within 5 % of the best, and write it as a JSON config file that
//! `stoke bench --config FILE` (and `PipelineConfig::merge_json_file`) accept.
//!
//! On the CPU backend the sweep is the decode/augment thread count (1, 2, 4, … up to the
//! cores, and the core count itself). "Smallest" orders candidates by the resources they take
//! (threads first, then reader threads, then prefetch depth), so a user gets the cheapest
//! configuration that is as good as the best within measurement noise — the seed's advice
//! ("pick the smallest within 5 % of the best") as one command.

use serde_json::{json, Map, Value};

/// One configuration to try: the config fields it sets, and its cost (compared
/// lexicographically; smaller is cheaper).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Pipeline config fields, as written to the output file.
    pub fields: Map<String, Value>,
    /// Resources it takes, most important first.
    pub cost: Vec<u64>,
}

/// The index of the cheapest trial whose throughput is within `tolerance` (0.05 = 5 %) of the
/// best; `None` when there is no trial with a positive throughput.
pub fn pick_smallest_within(trials: &[(Candidate, f64)], tolerance: f64) -> Option<usize> {
    let best = trials.iter().map(|t| t.1).fold(0.0f64, f64::max);
    if best <= 0.0 {
        return None;
    }
    trials
        .iter()
        .enumerate()
        .filter(|(_, t)| t.1 >= (1.0 - tolerance) * best)
        .min_by(|a, b| a.1 .0.cost.cmp(&b.1 .0.cost))
        .map(|(i, _)| i)
}

/// 1, 2, 4, … below `cores`, then `cores` itself.
pub fn thread_counts(cores: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |t| Some(t * 2)).take_while(|&t| t < cores).collect();
    v.push(cores.max(1));
    v
}

/// The CPU sweep: thread counts, with the given reader threads and prefetch.
pub fn cpu_candidates(cores: usize, reader_threads: usize, prefetch: usize) -> Vec<Candidate> {
    thread_counts(cores)
        .into_iter()
        .map(|t| {
            let fields = json!({"cpu_threads": t, "reader_threads": reader_threads, "prefetch_batches": prefetch});
            Candidate {
                fields: fields.as_object().expect("object").clone(),
                cost: vec![t as u64, reader_threads as u64, prefetch as u64],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(cost: &[u64]) -> Candidate {
        Candidate { fields: Map::new(), cost: cost.to_vec() }
    }

    #[test]
    fn picks_the_cheapest_within_five_percent() {
        let t = vec![(cand(&[1]), 100.0), (cand(&[2]), 190.0), (cand(&[4]), 200.0), (cand(&[8]), 199.0)];
        // 190 >= 0.95 * 200: two threads are enough.
        assert_eq!(pick_smallest_within(&t, 0.05), Some(1));
        // With 1 % tolerance only 4 and 8 qualify; 4 is cheaper.
        assert_eq!(pick_smallest_within(&t, 0.01), Some(2));
        // Order of the list does not matter, only cost.
        let mut r = t.clone();
        r.reverse();
        assert_eq!(r[pick_smallest_within(&r, 0.05).unwrap()].0.cost, vec![2]);
        assert_eq!(pick_smallest_within(&[], 0.05), None);
        assert_eq!(pick_smallest_within(&[(cand(&[1]), 0.0)], 0.05), None);
        // Cost compares lexicographically: fewer threads beat fewer readers.
        let t = vec![(cand(&[2, 1]), 100.0), (cand(&[1, 4]), 99.0)];
        assert_eq!(pick_smallest_within(&t, 0.05), Some(1));
    }

    #[test]
    fn thread_sweep_is_powers_of_two_then_the_cores() {
        assert_eq!(thread_counts(1), vec![1]);
        assert_eq!(thread_counts(2), vec![1, 2]);
        assert_eq!(thread_counts(12), vec![1, 2, 4, 8, 12]);
        assert_eq!(thread_counts(16), vec![1, 2, 4, 8, 16]);
        let c = cpu_candidates(4, 2, 3);
        assert_eq!(c.len(), 3);
        assert_eq!(c[2].fields["cpu_threads"], 4);
        assert_eq!(c[2].fields["reader_threads"], 2);
        assert_eq!(c[2].cost, vec![4, 2, 3]);
    }
}

/// Options of `stoke tune`.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> stoke::Result<()> {
    let _ = (pick_smallest_within(&[], 0.05), cpu_candidates(1, 1, 1));
    Err(stoke::Error::config("`stoke tune` is not built yet (it needs stoke::pipeline)"))
}
