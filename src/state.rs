//! Resume states: where an epoch stands, the same on every rank, resumable at any world size.
//!
//! A [`ResumeState`] names the order it belongs to ([`OrderId`]: seed, shuffle, sampling,
//! stream mode's group, the data set's size and keys) and the positions of the epoch no rank
//! has delivered yet ([`Rest`], `sampler::rest`). Every rank of a world computes the same state
//! at the same step, so one rank's checkpoint serves all. A pipeline loads it at any world size
//! and batch size: the rest is split over the new world, and across the worlds every sample of
//! the epoch is delivered exactly once (plus `DistributedSampler`-style padding: at most
//! `W − 1` positions per world that splits it). At the world size that saved it, the next
//! batches are bit-identical to the uninterrupted run's.
//!
//! As JSON (what `Pipeline::state` / Python's `state_dict()` give, and `stoke plan --resume`
//! reads):
//!
//! ```json
//! {"version": 2, "epoch": 3, "seed": 0, "shuffle": true, "sampling": "permutation",
//!  "stream_group": 0, "samples": 1281167, "dataset": "fnv1a64:4c0e…",
//!  "remaining": [[196608, 1281168]], "next_pad": 1281168,
//!  "world_size": 8, "batch_size": 256, "step": 96}
//! ```
//!
//! `world_size`, `batch_size` and `step` (batches each rank delivered of its share) say who
//! saved it; the resume does not need them.

use crate::error::{Error, Result};
use crate::sampler::rest::Rest;
use crate::sampler::{Fnv, Sampler};
use crate::source::shards::ShardSet;
use crate::source::Dataset;
use serde::{Deserialize, Serialize};

/// The resume state format this build writes and reads.
pub const VERSION: u32 = 2;

/// What an epoch order depends on besides the world: a state saved under one order is refused
/// under another, naming what differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderId {
    /// Seed of the permutations and draws.
    pub seed: u64,
    /// Whether epochs are shuffled.
    pub shuffle: bool,
    /// `permutation`, `dataset order`, the weighted sampling's table and length, or `shards`.
    pub sampling: String,
    /// Stream mode's shards per group (0: the per-sample order).
    pub stream_group: u64,
    /// Samples in the data set.
    pub samples: u64,
    /// Fingerprint of the data set's order-relevant facts: its keys in index order (per-sample
    /// mode) or its shards' names and sample counts (stream mode). Not file sizes or times: a
    /// copy of the data set on another node has the same fingerprint.
    pub dataset: String,
}

impl OrderId {
    /// The per-sample order of `sampler` over `dataset`.
    pub fn per_sample(dataset: &Dataset, sampler: &Sampler, seed: u64, shuffle: bool) -> Self {
        let mut h = Fnv::new();
        for m in dataset.samples() {
            h.write(m.key.as_bytes());
            h.write(&[0xff]);
        }
        Self {
            seed,
            shuffle,
            sampling: sampler.describe(),
            stream_group: 0,
            samples: dataset.len() as u64,
            dataset: format!("fnv1a64:{:016x}", h.finish()),
        }
    }

    /// Stream mode's order over `set` in groups of `group` shards.
    pub fn stream(set: &ShardSet, seed: u64, shuffle: bool, group: usize) -> Self {
        let mut h = Fnv::new();
        for f in &set.facts {
            h.write(f.name.as_bytes());
            h.write(&[0xff]);
            h.write(&f.samples.to_le_bytes());
        }
        Self {
            seed,
            shuffle,
            sampling: "shards".into(),
            stream_group: group as u64,
            samples: set.total(),
            dataset: format!("fnv1a64:{:016x}", h.finish()),
        }
    }

    /// Refuse a state saved under another order, naming the first thing that differs.
    pub fn check(&self, saved: &OrderId) -> Result<()> {
        let differs = |what: &str, theirs: String, mine: String| {
            Err(Error::config(format!(
                "the resume state was saved with {what} {theirs}, this pipeline has {what} {mine}: its epoch order would differ"
            )))
        };
        if saved.seed != self.seed {
            return differs("seed", saved.seed.to_string(), self.seed.to_string());
        }
        if saved.shuffle != self.shuffle {
            return differs("shuffle", saved.shuffle.to_string(), self.shuffle.to_string());
        }
        if saved.stream_group != self.stream_group {
            return differs("stream_group (0: not streaming)", saved.stream_group.to_string(), self.stream_group.to_string());
        }
        if saved.sampling != self.sampling {
            return differs("sampling", format!("{:?}", saved.sampling), format!("{:?}", self.sampling));
        }
        if saved.samples != self.samples || saved.dataset != self.dataset {
            return Err(Error::config(format!(
                "the resume state was saved on another data set ({} samples, keys {}), this pipeline has {} samples, keys {}",
                saved.samples, saved.dataset, self.samples, self.dataset
            )));
        }
        Ok(())
    }
}

/// Where an epoch stands (module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeState {
    /// [`VERSION`].
    pub version: u32,
    /// The epoch.
    pub epoch: u64,
    /// The order it belongs to.
    #[serde(flatten)]
    pub order: OrderId,
    /// Positions of the epoch not delivered yet (`remaining`, `next_pad` in JSON).
    #[serde(flatten)]
    pub rest: Rest,
    /// World size of the run that saved it (not needed to resume).
    pub world_size: usize,
    /// Batch size per rank of the run that saved it (not needed to resume).
    pub batch_size: usize,
    /// Batches each rank had delivered of its share when it was saved (not needed to resume).
    pub step: u64,
}

impl ResumeState {
    /// Read a state from JSON: the errors say what is missing or malformed.
    pub fn from_json(text: &str) -> Result<Self> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| Error::config(format!("the resume state is not JSON: {e}")))?;
        match v.get("version").and_then(|v| v.as_u64()) {
            Some(2) => {}
            Some(1) if v.get("remaining").is_none() => {
                return Err(Error::config(
                    "the resume state is version 1 (no remaining positions): load it through the Python loader, which converts it, or save it again",
                ))
            }
            Some(n) => return Err(Error::config(format!("the resume state is version {n}; this build reads version {VERSION}"))),
            None => return Err(Error::config("the resume state has no version: it is not a stoke resume state")),
        }
        if let Some((field, n)) = negative(&v, String::new()) {
            return Err(Error::config(format!("the resume state's {field} is {n}: positions, counts and sizes are never negative")));
        }
        let s: ResumeState = serde_json::from_value(v).map_err(|e| Error::config(format!("the resume state is malformed: {e}")))?;
        s.rest.check()?;
        Ok(s)
    }

    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a resume state serialises")
    }
}

/// The first negative number in `v` and where it is (`epoch`, `remaining[2][0]`): serde's own
/// error for it says which type it wanted but not which field, the state's fields being
/// flattened.
fn negative(v: &serde_json::Value, at: String) -> Option<(String, String)> {
    match v {
        serde_json::Value::Number(n) if n.as_f64().is_some_and(|x| x < 0.0) => Some((at, n.to_string())),
        serde_json::Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| negative(x, format!("{at}[{i}]"))),
        serde_json::Value::Object(o) => {
            o.iter().find_map(|(k, x)| negative(x, if at.is_empty() { k.clone() } else { format!("{at}.{k}") }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ResumeState {
        ResumeState {
            version: VERSION,
            epoch: 3,
            order: OrderId {
                seed: 7,
                shuffle: true,
                sampling: "permutation".into(),
                stream_group: 0,
                samples: 100,
                dataset: "fnv1a64:0123456789abcdef".into(),
            },
            rest: Rest { ranges: vec![(40, 100), (120, 130)], next_pad: 130 },
            world_size: 4,
            batch_size: 8,
            step: 2,
        }
    }

    #[test]
    fn json_round_trip_and_field_names() {
        let s = state();
        let j = s.to_json();
        assert!(j.contains("\"remaining\":[[40,100],[120,130]]") && j.contains("\"next_pad\":130"), "{j}");
        assert_eq!(ResumeState::from_json(&j).unwrap(), s);
    }

    #[test]
    fn malformed_states_are_refused_saying_why() {
        let e = |t: &str| ResumeState::from_json(t).unwrap_err().to_string();
        assert!(e("{").contains("not JSON"));
        assert!(e("{}").contains("no version"));
        assert!(e(r#"{"version": 9}"#).contains("version 9"));
        assert!(e(r#"{"version": 1, "epoch": 0, "step": 2}"#).contains("version 1"));
        assert!(e(r#"{"version": 2, "epoch": 0}"#).contains("malformed"));
        let mut bad = state();
        bad.rest.ranges = vec![(50, 40)];
        assert!(e(&bad.to_json()).contains("not ascending"));
    }

    #[test]
    fn another_order_is_refused_by_name() {
        let mine = state().order;
        let with = |f: &dyn Fn(&mut OrderId)| {
            let mut o = mine.clone();
            f(&mut o);
            mine.check(&o).unwrap_err().to_string()
        };
        assert!(with(&|o| o.seed = 8).contains("seed 8"));
        assert!(with(&|o| o.shuffle = false).contains("shuffle false"));
        assert!(with(&|o| o.stream_group = 4).contains("stream_group"));
        assert!(with(&|o| o.sampling = "dataset order".into()).contains("sampling"));
        assert!(with(&|o| o.samples = 99).contains("another data set"));
        assert!(with(&|o| o.dataset = "fnv1a64:1".into()).contains("another data set"));
        mine.check(&mine).unwrap();
    }
}
