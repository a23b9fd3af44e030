//! The streaming index: per-shard facts only (sample count, byte size, label range), for shard
//! sets too large to index per sample. Memory is O(number of shards).
//!
//! The facts come from a small sidecar beside the shards, [`SIDECAR`], written by `stoke pack`
//! (local folder or store), when it lists exactly the shards found with the same byte sizes;
//! otherwise from one pass that walks each shard's tar headers (local: positioned reads of the
//! 512-byte headers; in a store: one GET per shard).
//!
//! [`crate::sampler::shards::ShardOrder`] orders an epoch over these counts: a keyed
//! permutation of the shards, a keyed permutation of the samples inside each group of shards
//! held in memory, contiguous equal rank blocks, resume by computing the position.

use super::tar;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The sidecar's file name, beside the shards (as `classes.txt`).
pub const SIDECAR: &str = "stoke-shards.json";

/// What the streaming index knows of one shard.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardFacts {
    /// File or object name (no folder).
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Image samples it holds.
    pub samples: u64,
    /// Smallest and largest label (`[-1, -1]` when unlabeled).
    pub labels: [i64; 2],
    /// Its largest image sample, what the CUDA backend sizes its buffers by in stream mode
    /// (absent in a version 1 sidecar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest: Option<Largest>,
}

/// The largest image sample of a shard, each measure on its own (they may be different samples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Largest {
    /// Compressed bytes.
    pub bytes: u64,
    /// Stored width × height.
    pub pixels: u64,
    /// Stored width.
    pub width: u32,
    /// Stored height.
    pub height: u32,
    /// Image samples whose header did not parse (no size known: sized at the decode guard).
    pub headerless: u64,
}

impl Largest {
    /// The largest of `(bytes, stored width and height or None)` per sample.
    pub fn of(samples: impl IntoIterator<Item = (u64, Option<(u32, u32)>)>) -> Self {
        let mut l = Largest::default();
        for (bytes, dims) in samples {
            l.bytes = l.bytes.max(bytes);
            match dims {
                Some((w, h)) => {
                    l.pixels = l.pixels.max(w as u64 * h as u64);
                    l.width = l.width.max(w);
                    l.height = l.height.max(h);
                }
                None => l.headerless += 1,
            }
        }
        l
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Sidecar {
    format: String,
    version: u32,
    shards: Vec<ShardFacts>,
}

const FORMAT: &str = "stoke-shards";

/// A shard set's per-shard facts, in shard order.
#[derive(Clone, Debug)]
pub struct ShardSet {
    /// Where the shards are: a folder or `scheme://bucket/prefix`.
    pub root: String,
    /// Each shard's path or URL.
    pub paths: Vec<String>,
    /// Each shard's facts.
    pub facts: Vec<ShardFacts>,
    /// True when the facts came from the sidecar (no shard was read).
    pub from_sidecar: bool,
    /// Each shard's version as the store's listing gave it (ETag or modification time; empty
    /// for local shards): what the node cache keys its entries on.
    pub versions: Vec<String>,
    /// Parquet files: each "shard" is a row group ([`super::parquet`]); `None` for tar shards.
    pub parquet: Option<std::sync::Arc<super::parquet::ParquetSet>>,
}

fn name_of(p: &str) -> String {
    p.rsplit('/').next().unwrap_or(p).to_string()
}

/// The facts of one shard from its members.
pub(crate) fn facts_of(shard: &Path, reader: &(impl tar::ReadAt + ?Sized), len: u64) -> Result<ShardFacts> {
    let (entries, _) = tar::scan_members(shard, reader, len, true)?;
    let largest = Largest::of(entries.iter().map(|e| {
        let dims = match &e.header {
            Some(Ok(i)) => Some((i.width, i.height)),
            _ => None,
        };
        (e.len, dims)
    }));
    let lo = entries.iter().map(|e| e.label).min().unwrap_or(-1);
    let hi = entries.iter().map(|e| e.label).max().unwrap_or(-1);
    Ok(ShardFacts {
        name: name_of(&shard.to_string_lossy()),
        bytes: len,
        samples: entries.len() as u64,
        labels: [lo, hi],
        largest: Some(largest),
    })
}

/// The sidecar's text for `facts`.
pub fn sidecar_json(facts: &[ShardFacts]) -> String {
    let version = if facts.iter().all(|f| f.largest.is_some()) { 2 } else { 1 };
    let s = Sidecar { format: FORMAT.into(), version, shards: facts.to_vec() };
    serde_json::to_string(&s).expect("plain data serializes")
}

/// The sidecar's facts when they describe exactly `listed` (name, size) in order.
pub(crate) fn matching(text: &[u8], listed: &[(String, u64)]) -> Option<Vec<ShardFacts>> {
    let s: Sidecar = serde_json::from_slice(text).ok()?;
    let ok = s.format == FORMAT
        && (s.version == 1 || s.version == 2)
        && s.shards.len() == listed.len()
        && s.shards.iter().zip(listed).all(|(f, (path, size))| f.name == name_of(path) && f.bytes == *size);
    (ok && s.shards.iter().all(plausible)).then_some(s.shards)
}

/// Whether a sidecar's facts could be true of a shard of `f.bytes` bytes: every sample takes at
/// least a 512-byte tar header, and its largest sample fits in the shard. Counts beyond that
/// (2^31, 2^63 in a damaged or hand-edited sidecar) would size an epoch's order and the
/// buffers by numbers no shard holds; the shards are read instead, with a warning naming them.
pub(crate) fn plausible(f: &ShardFacts) -> bool {
    let largest = f.largest.unwrap_or_default();
    let why = if f.samples > f.bytes / 512 {
        format!("{} samples, more than its {} bytes can hold (at most {}: one 512-byte header each)", f.samples, f.bytes, f.bytes / 512)
    } else if largest.bytes > f.bytes {
        format!("a largest sample of {} bytes, more than its {} bytes", largest.bytes, f.bytes)
    } else if largest.pixels > largest.width as u64 * largest.height as u64 || largest.headerless > f.samples {
        format!(
            "a largest sample of {} pixels ({} x {}, {} without a header) that cannot be",
            largest.pixels, largest.width, largest.height, largest.headerless
        )
    } else if f.labels[0] < -1 || f.labels[0] > f.labels[1] {
        format!("labels {:?}, not a range of labels (or [-1, -1])", f.labels)
    } else {
        return true;
    };
    log::warn!("{SIDECAR} says shard {} has {why}: ignoring it and reading the shards", f.name);
    false
}

impl ShardSet {
    /// The facts of the shards `path` names (a pattern, one `.tar`, a folder or prefix; local
    /// or in a store), from the sidecar when it matches, else by one pass over the shards.
    pub fn open(path: &Path, threads: usize) -> Result<ShardSet> {
        Self::open_with(path, threads, &super::parquet::Columns::default())
    }

    /// As [`Self::open`]; Parquet files (a `.parquet`, a folder of them, `folder/split-`, or
    /// their URL) become one shard per row group, their columns found or named by `columns`.
    pub fn open_with(path: &Path, threads: usize, columns: &super::parquet::Columns) -> Result<ShardSet> {
        let s = path.to_str().ok_or_else(|| Error::dataset(path, "path is not valid UTF-8"))?;
        if let Some(set) = super::parquet::open_if_parquet(path, columns, threads)? {
            return Ok(Self::of_parquet(set));
        }
        if super::is_remote(s) {
            #[cfg(feature = "remote")]
            return Self::open_remote(s, threads);
            #[cfg(not(feature = "remote"))]
            return Err(Error::dataset(path, "a store URL, but this build of stoke has no remote sources (the `remote` feature)"));
        }
        let shards = tar::shard_paths(path)?;
        if shards.is_empty() {
            return Err(Error::dataset(path, "empty dataset: no .tar shards found"));
        }
        let root =
            if path.is_dir() { path.to_path_buf() } else { path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(".")) };
        let mut listed = Vec::with_capacity(shards.len());
        for p in &shards {
            let md = std::fs::metadata(p).map_err(|e| Error::dataset(p, format!("cannot read shard: {e}")))?;
            listed.push((p.to_string_lossy().into_owned(), md.len()));
        }
        let root_s = root.to_string_lossy().into_owned();
        if let Some(facts) = std::fs::read(root.join(SIDECAR)).ok().and_then(|t| matching(&t, &listed)) {
            return Ok(ShardSet {
                root: root_s,
                paths: listed.into_iter().map(|l| l.0).collect(),
                facts,
                from_sidecar: true,
                versions: Vec::new(),
                parquet: None,
            });
        }
        let results = super::index::parallel_map(shards.len(), threads, None, |i| {
            let f = std::fs::File::open(&shards[i]).map_err(|e| Error::io(&shards[i], e))?;
            facts_of(&shards[i], &f, listed[i].1)
        });
        let facts = results.into_iter().collect::<Result<Vec<_>>>()?;
        Ok(ShardSet {
            root: root_s,
            paths: listed.into_iter().map(|l| l.0).collect(),
            facts,
            from_sidecar: false,
            versions: Vec::new(),
            parquet: None,
        })
    }

    #[cfg(feature = "remote")]
    fn open_remote(url: &str, threads: usize) -> Result<ShardSet> {
        let store = super::remote::Store::for_url(url)?;
        let (root, objects) = store.shards(url)?;
        let versions: Vec<String> = objects.iter().map(|o| o.version.clone()).collect();
        let listed: Vec<(String, u64)> = objects.into_iter().map(|o| (o.url, o.size)).collect();
        if let Some(text) = store.get_if_present(&format!("{root}/{SIDECAR}"))? {
            if let Some(facts) = matching(&text, &listed) {
                return Ok(ShardSet {
                    root,
                    paths: listed.into_iter().map(|l| l.0).collect(),
                    facts,
                    from_sidecar: true,
                    versions,
                    parquet: None,
                });
            }
            log::warn!("{root}/{SIDECAR} does not match the shards found; reading every shard once");
        }
        let results = super::index::parallel_map(listed.len(), threads.max(8), None, |i| {
            let bytes = store.get(&listed[i].0)?;
            facts_of(Path::new(&listed[i].0), &bytes[..], bytes.len() as u64)
        });
        let facts = results.into_iter().collect::<Result<Vec<_>>>()?;
        Ok(ShardSet { root, paths: listed.into_iter().map(|l| l.0).collect(), facts, from_sidecar: false, versions, parquet: None })
    }

    /// One shard per row group of `set`.
    fn of_parquet(set: super::parquet::ParquetSet) -> ShardSet {
        let facts = (0..set.groups.len())
            .map(|g| {
                let gr = &set.groups[g];
                ShardFacts { name: set.group_name(g), bytes: gr.bytes, samples: gr.rows, labels: gr.labels, largest: None }
            })
            .collect();
        let paths = set.groups.iter().map(|g| set.files[g.file as usize].path.clone()).collect();
        ShardSet {
            root: set.root.clone(),
            paths,
            facts,
            from_sidecar: false,
            versions: Vec::new(),
            parquet: Some(std::sync::Arc::new(set)),
        }
    }

    /// Samples per shard, in shard order (what [`crate::sampler::shards::ShardOrder`] takes).
    pub fn counts(&self) -> Vec<u64> {
        self.facts.iter().map(|f| f.samples).collect()
    }

    /// Samples in the set.
    pub fn total(&self) -> u64 {
        self.facts.iter().map(|f| f.samples).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sidecar_is_used_only_when_it_lists_the_same_shards_and_sizes() {
        let facts = vec![
            ShardFacts { name: "a.tar".into(), bytes: 10240, samples: 3, labels: [0, 2], largest: None },
            ShardFacts { name: "b.tar".into(), bytes: 20480, samples: 5, labels: [-1, -1], largest: None },
        ];
        let text = sidecar_json(&facts);
        let listed = |b: u64| vec![("/d/a.tar".to_string(), 10240), ("/d/b.tar".to_string(), b)];
        assert_eq!(matching(text.as_bytes(), &listed(20480)), Some(facts));
        assert_eq!(matching(text.as_bytes(), &listed(20481)), None, "a shard rewritten since");
        assert_eq!(matching(text.as_bytes(), &listed(20480)[..1]), None, "a shard set that changed");
        assert_eq!(matching(b"{not json", &listed(20480)), None);
    }

    #[test]
    fn a_version_2_sidecar_carries_each_shards_largest_sample_and_version_1_still_reads() {
        let largest = Largest::of([(500, Some((640, 480))), (900, Some((300, 200))), (20, None)]);
        assert_eq!(largest, Largest { bytes: 900, pixels: 307_200, width: 640, height: 480, headerless: 1 });
        let facts = vec![ShardFacts { name: "a.tar".into(), bytes: 10240, samples: 3, labels: [0, 2], largest: Some(largest) }];
        let text = sidecar_json(&facts);
        assert!(text.contains("\"version\":2") && text.contains("\"headerless\":1"), "{text}");
        let listed = vec![("/d/a.tar".to_string(), 10240)];
        assert_eq!(matching(text.as_bytes(), &listed), Some(facts.clone()));
        let v1 = r#"{"format":"stoke-shards","version":1,"shards":[{"name":"a.tar","bytes":10240,"samples":3,"labels":[0,2]}]}"#;
        assert_eq!(matching(v1.as_bytes(), &listed).unwrap()[0].largest, None, "a version 1 sidecar: no largest sample");
        let v3 = v1.replace("\"version\":1", "\"version\":3");
        assert_eq!(matching(v3.as_bytes(), &listed), None, "a version this build does not know");
        let more = v1.replace("\"samples\":3", "\"samples\":21");
        assert_eq!(matching(more.as_bytes(), &listed), None, "more samples than 10240 bytes hold (one 512-byte header each)");
    }
}
