//! Hugging Face Parquet data sets: one `.parquet` file, a folder of them (or the folder's
//! `data/` subfolder, as a Hub repository lays them out), a split chosen by its file prefix
//! (`data/train-` for `data/train-00000-of-00294.parquet`, …), or their URL in a store.
//!
//! # Columns
//! The image column is the feature whose `_type` is `Image` in the file's `huggingface`
//! key-value metadata (`{"info": {"features": {...}}}`), else a column named `image`, else the
//! one named by [`Columns::image`]. It is either HF's `struct<bytes: binary, path: string>`
//! (its `bytes` leaf is read) or a plain binary column. The label column is the `ClassLabel`
//! feature, else a column named `label`, else [`Columns::label`] (int64 or int32); the class
//! names are the `ClassLabel`'s `names`. No label column: the samples are unlabelled (`-1`).
//!
//! # Reads
//! Row groups are the unit of reading. Each file's footer is read once when the set is opened
//! (one ranged read of its last 64 KiB, a second only for a larger footer); a row group is read
//! as the byte ranges of its image (and label) column chunks only, decompressed (snappy, zstd:
//! what HF writes) and decoded by the parquet crate's page and column readers, in memory. What
//! is kept per data set is O(files + row groups): each file's footer and each row group's row
//! count, bytes and label range.
//!
//! A sample is addressed as (file, row group, row); its key is `file stem/row in the file`.
//! Stream mode ([`crate::reader::stream`]) treats each row group as a shard. Per-sample mode
//! reads a sample's row group through a cache of decoded row groups bounded by
//! [`crate::source::IndexOptions::parquet_cache_bytes`] (default [`SAMPLE_CACHE_BYTES`]); a row
//! group larger than that is refused by name, saying to use stream mode.
//!
//! # Bad input
//! A file that is not Parquet, a truncated file or footer, a missing image column, and files
//! that disagree on their columns or class names are errors naming the file when the set is
//! opened. A null image, a null label and a label outside the class names fail their own
//! sample only (the policy substitutes or names it); a column chunk that cannot be read fails
//! its row group's samples. Its pages are checked for what the parquet crate's readers trust
//! (`read::CheckedPages`; each page header's declared size against its bytes before the crate
//! allocates it, `header`), and a panic inside the crate's decoders is the chunk's error too.

mod header;
mod read;

use super::shards::Largest;
use super::{Entry, Listing, Location};
use crate::error::{Error, Result};
use bytes::Bytes;
use parquet::basic::Type as PhysicalType;
use parquet::data_type::ByteArrayType;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData};
use parquet::file::statistics::Statistics;
use read::{column_name, read_column, read_labels, GroupCache};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Decoded row groups per-sample mode keeps at once by default, in bytes of images.
pub const SAMPLE_CACHE_BYTES: u64 = 1 << 30;

/// The tail read first: the footer of an HF file is a few KiB, so one read usually has it.
const TAIL: u64 = 64 << 10;

/// Which columns hold the images and labels; `None`: found from the files (module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// The image column (`struct<bytes, path>` or binary).
    pub image: Option<String>,
    /// The label column (int64 or int32).
    pub label: Option<String>,
}

/// True for a name ending in `.parquet` (any case).
pub fn is_parquet_name(s: &str) -> bool {
    s.len() > 8 && s[s.len() - 8..].eq_ignore_ascii_case(".parquet")
}

/// The `.parquet` files directly in `dir`, sorted, whose names start with `prefix`.
fn parquet_in(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let p = e.map_err(|e| Error::io(dir, e))?.path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if is_parquet_name(&name) && name.starts_with(prefix) && p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// The Parquet files a local `path` names, or `None` when it names none: a `.parquet` file, a
/// folder holding `.parquet` files (or whose `data/` subfolder does), or `folder/prefix` for the
/// files of `folder` whose names start with `prefix` (a split: `data/train-`).
pub(crate) fn local_files(path: &Path) -> Result<Option<Vec<PathBuf>>> {
    let s = path.to_string_lossy();
    if s.contains('{') {
        return Ok(None);
    }
    if path.is_file() {
        return Ok(is_parquet_name(&s).then(|| vec![path.to_path_buf()]));
    }
    if path.is_dir() {
        let here = parquet_in(path, "")?;
        if !here.is_empty() {
            return Ok(Some(here));
        }
        let data = path.join("data");
        let sub = if data.is_dir() { parquet_in(&data, "")? } else { Vec::new() };
        return Ok((!sub.is_empty()).then_some(sub));
    }
    // A prefix: the folder exists, the name does not.
    let (Some(dir), Some(prefix)) = (path.parent(), path.file_name()) else { return Ok(None) };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    if !dir.is_dir() {
        return Ok(None);
    }
    let files = parquet_in(dir, &prefix.to_string_lossy())?;
    Ok((!files.is_empty()).then_some(files))
}

/// True when a store URL names Parquet objects rather than tar shards: one `.parquet`, or (S3,
/// GCS: one LIST) a folder, a repository folder whose `data/` holds them, or a file prefix.
#[cfg(feature = "remote")]
pub(crate) fn remote_is_parquet(url: &str) -> bool {
    if is_parquet_name(url) {
        return true;
    }
    let lower = url.to_ascii_lowercase();
    if url.contains('{') || lower.ends_with(".tar") || lower.starts_with("http") {
        return false;
    }
    super::remote::Store::for_url(url).and_then(|s| remote_objects(&s, url)).is_ok_and(|(_, o)| !o.is_empty())
}

/// The `.parquet` objects `url` names and the folder they are in: `url` itself, the objects
/// directly under `url/` (else under `url/data/`), else those directly in `url`'s folder whose
/// names start with its last part (a split: `…/data/train-`).
#[cfg(feature = "remote")]
fn remote_objects(store: &super::remote::Store, url: &str) -> Result<(String, Vec<super::remote::Object>)> {
    if is_parquet_name(url) {
        return Ok((url[..url.rfind('/').unwrap_or(0)].to_string(), vec![store.head(url)?]));
    }
    let dir = &url[..url.rfind('/').map(|i| i + 1).unwrap_or(url.len())];
    let listed: Vec<_> = store.list(dir)?.into_iter().filter(|o| is_parquet_name(&o.url) && o.url.starts_with(url)).collect();
    let base = url.trim_end_matches('/');
    let under = |sub: &str| -> Vec<super::remote::Object> {
        let d = format!("{base}/{sub}");
        listed.iter().filter(|o| o.url.starts_with(&d) && !o.url[d.len()..].contains('/')).cloned().collect()
    };
    let prefixed: Vec<_> = listed.iter().filter(|o| !o.url[url.len()..].contains('/')).cloned().collect();
    for (root, objects) in
        [(dir.trim_end_matches('/').to_string(), prefixed), (base.to_string(), under("")), (format!("{base}/data"), under("data/"))]
    {
        if !objects.is_empty() {
            return Ok((root, objects));
        }
    }
    Ok((base.to_string(), Vec::new()))
}

/// The Parquet set `path` names (local or in a store), or `None` when it names no Parquet files.
pub fn open_if_parquet(path: &Path, want: &Columns, threads: usize) -> Result<Option<ParquetSet>> {
    let s = path.to_string_lossy();
    if super::is_remote(&s) {
        #[cfg(feature = "remote")]
        if remote_is_parquet(&s) {
            return ParquetSet::open_remote(&s, want, threads).map(Some);
        }
        return Ok(None);
    }
    let Some(files) = local_files(path)? else { return Ok(None) };
    // The folder the files are in (a data set's `data/` when given its repository folder).
    let root = files[0].parent().map(Path::to_path_buf).unwrap_or_default();
    ParquetSet::open_local(&root, &files, want, threads).map(Some)
}

/// Where the files' bytes come from: positioned reads of local files, or ranged GETs.
#[derive(Debug)]
enum Fetch {
    Local,
    #[cfg(feature = "remote")]
    Store(Arc<super::remote::Store>, Option<NodeCache>),
}

/// The node cache a store's column chunks go through (stream mode's `cache_dir`), with each
/// object's version as listed: an entry is keyed by the URL, the byte range and that version.
#[cfg(feature = "remote")]
#[derive(Debug)]
struct NodeCache {
    cache: super::cache::ObjectCache,
    versions: std::collections::HashMap<String, String>,
}

impl Fetch {
    fn range(&self, path: &str, r: Range<u64>) -> Result<Bytes> {
        match self {
            Fetch::Local => {
                let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
                let mut v = vec![0u8; (r.end - r.start) as usize];
                f.read_exact_at(&mut v, r.start).map_err(|e| {
                    Error::dataset(path, format!("cannot read bytes {}..{}: {e} (truncated since the set was opened?)", r.start, r.end))
                })?;
                Ok(v.into())
            }
            #[cfg(feature = "remote")]
            Fetch::Store(s, None) => s.get_range(path, r),
            #[cfg(feature = "remote")]
            Fetch::Store(s, Some(c)) => {
                let version = c.versions.get(path).map(String::as_str).unwrap_or("");
                let key = format!("{path}#bytes={}-{}", r.start, r.end);
                // A ranged GET gives no version to check: the listing's goes with it (a changed
                // object is still named by its length or by the chunk's own decoding).
                c.cache.get(&key, version, r.end - r.start, || Ok((s.get_range(path, r.clone())?, version.to_string())))
            }
        }
    }

    /// Column chunks of a store through the node cache in `dir` (at most `limit` bytes); local
    /// files are read as they are.
    #[cfg(feature = "remote")]
    fn cached(&mut self, dir: &Path, limit: u64, versions: std::collections::HashMap<String, String>) -> Result<()> {
        if let Fetch::Store(_, c) = self {
            *c = Some(NodeCache { cache: super::cache::ObjectCache::open(dir, limit)?, versions });
        }
        Ok(())
    }
}

/// One file: its footer and the columns read.
#[derive(Debug)]
pub struct ParquetFile {
    /// Path or URL.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Its version: the store's listing's (ETag or modification time), or a local file's
    /// modification time in nanoseconds.
    pub version: String,
    meta: Arc<ParquetMetaData>,
    /// Leaf column index of the image bytes.
    image: usize,
    /// Leaf column index of the label.
    label: Option<usize>,
}

/// One row group: a shard in stream mode.
#[derive(Clone, Copy, Debug)]
pub struct Group {
    /// Index into [`ParquetSet::files`].
    pub file: u32,
    /// Row group within the file.
    pub rg: u32,
    /// Its first row's number in the file.
    pub first_row: u64,
    /// Rows (samples).
    pub rows: u64,
    /// Bytes held once it is decoded: the image column chunk's uncompressed size.
    pub bytes: u64,
    /// Smallest and largest label (`[-1, -1]` when unlabelled).
    pub labels: [i64; 2],
}

/// The saved form of [`ParquetSet::largest_saved`].
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedLargest {
    format: String,
    groups: Vec<Largest>,
}

const LARGEST_FORMAT: &str = "stoke-parquet-largest 1";

/// A row group decoded: the images back to back, and each row.
pub(crate) struct Decoded {
    pub data: Vec<u8>,
    pub rows: Vec<Row>,
}

/// One row of a decoded row group.
pub(crate) struct Row {
    pub bytes: Range<usize>,
    pub label: i64,
    /// Why this row is not a sample (null image, null label, label outside the names).
    pub error: Option<Box<str>>,
    /// Its label is null or outside the class names.
    pub bad_label: bool,
}

/// Parquet files opened: footers read, columns found, row groups listed.
#[derive(Debug)]
pub struct ParquetSet {
    /// Where the files are (a folder or a store prefix).
    pub root: String,
    /// The files, in name order.
    pub files: Vec<ParquetFile>,
    /// Every row group, in file order.
    pub groups: Vec<Group>,
    /// Each file's first index into [`Self::groups`].
    first_group: Vec<u32>,
    /// Class names from the `ClassLabel` feature (empty when the files name none).
    pub classes: Vec<String>,
    fetch: Fetch,
    cache: GroupCache,
}

/// The `huggingface` metadata's features: name → `_type` and, for a `ClassLabel`, its names.
fn hf_features(meta: &ParquetMetaData) -> Vec<(String, String, Option<Vec<String>>)> {
    let kv = meta.file_metadata().key_value_metadata();
    let Some(text) = kv.and_then(|kv| kv.iter().find(|k| k.key == "huggingface")).and_then(|k| k.value.as_deref()) else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else { return Vec::new() };
    let Some(features) = v.pointer("/info/features").and_then(|f| f.as_object()) else { return Vec::new() };
    features
        .iter()
        .map(|(name, f)| {
            let ty = f.get("_type").and_then(|t| t.as_str()).unwrap_or("").to_string();
            let names = f.get("names").and_then(|n| n.as_array()).map(|a| a.iter().map(|s| s.as_str().unwrap_or("").to_string()).collect());
            (name.clone(), ty, names)
        })
        .collect()
}

/// The file's columns: image leaf, label leaf, class names.
fn columns(path: &str, meta: &ParquetMetaData, want: &Columns) -> Result<(usize, Option<usize>, Vec<String>)> {
    let schema = meta.file_metadata().schema_descr();
    let leaves: Vec<Vec<String>> = (0..schema.num_columns()).map(|i| schema.column(i).path().parts().to_vec()).collect();
    let top_exists = |n: &str| leaves.iter().any(|p| p[0] == n);
    let listing = || leaves.iter().map(|p| p.join(".")).collect::<Vec<_>>().join(", ");
    let features = hf_features(meta);
    let of_type = |t: &str| features.iter().find(|f| f.1 == t).map(|f| f.0.clone());
    let bad = |m: String| Error::dataset(path, m);
    let image = match (&want.image, of_type("Image")) {
        (Some(n), _) if !top_exists(n) => return Err(bad(format!("no column {n:?} (the image column named); its columns: {}", listing()))),
        (Some(n), _) => n.clone(),
        (None, Some(n)) => n,
        (None, None) if top_exists("image") => "image".to_string(),
        (None, None) => {
            return Err(bad(format!(
                "no image column: no Image feature in its huggingface metadata and no column named \"image\"; its columns: {}; name one with image_column",
                listing()
            )))
        }
    };
    let leaf = leaves
        .iter()
        .position(|p| p.len() == 2 && p[0] == image && p[1] == "bytes")
        .or_else(|| leaves.iter().position(|p| p.len() == 1 && p[0] == image));
    let image_leaf = match leaf {
        Some(i) if schema.column(i).physical_type() == PhysicalType::BYTE_ARRAY && schema.column(i).max_rep_level() == 0 => i,
        _ => {
            return Err(bad(format!(
                "column {image:?} is not an image column: expected struct<bytes: binary, path: string> or binary; its columns: {}",
                listing()
            )))
        }
    };
    let class_label = features.iter().find(|f| f.1 == "ClassLabel");
    let label = match (&want.label, class_label) {
        (Some(n), _) => Some(n.clone()),
        (None, Some(f)) => Some(f.0.clone()),
        (None, None) => top_exists("label").then(|| "label".to_string()),
    };
    let label_leaf = match &label {
        None => None,
        Some(n) => {
            let i = leaves.iter().position(|p| p.len() == 1 && &p[0] == n);
            match i {
                Some(i) if matches!(schema.column(i).physical_type(), PhysicalType::INT64 | PhysicalType::INT32) => Some(i),
                Some(_) => return Err(bad(format!("label column {n:?} is not an integer column (int64 or int32)"))),
                None if want.label.is_some() => {
                    return Err(bad(format!("no column {n:?} (the label column named); its columns: {}", listing())))
                }
                None => return Err(bad(format!("its metadata names {n:?} as the ClassLabel, but it has no such column"))),
            }
        }
    };
    let names = label.and_then(|n| features.iter().find(|f| f.0 == n && f.1 == "ClassLabel").and_then(|f| f.2.clone()));
    Ok((image_leaf, label_leaf, names.unwrap_or_default()))
}

/// Read and parse the footer of the file at `path` of `size` bytes.
fn footer(fetch: &Fetch, path: &str, size: u64) -> Result<ParquetMetaData> {
    let bad = |m: String| Error::dataset(path, m);
    if size < 12 {
        return Err(bad(format!("not a Parquet file: {size} bytes, fewer than the 12 of an empty one (magic, footer length, magic)")));
    }
    let tail_start = size.saturating_sub(TAIL);
    let tail = fetch.range(path, tail_start..size)?;
    if &tail[tail.len() - 4..] != b"PAR1" {
        let head = fetch.range(path, 0..4)?;
        return Err(bad(if &head[..] == b"PAR1" {
            format!("truncated Parquet file: it starts with PAR1 but its last 4 of {size} bytes are not the footer's PAR1")
        } else {
            "not a Parquet file: no PAR1 magic at its start or end".to_string()
        }));
    }
    let n = &tail[tail.len() - 8..tail.len() - 4];
    let len = u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as u64;
    if len + 12 > size {
        return Err(bad(format!("truncated Parquet footer: it says {len} bytes of metadata, but the file has {size} bytes in all")));
    }
    let start = size - 8 - len;
    let bytes =
        if start >= tail_start { tail.slice((start - tail_start) as usize..tail.len() - 8) } else { fetch.range(path, start..size - 8)? };
    ParquetMetaDataReader::decode_metadata(&bytes).map_err(|e| bad(format!("damaged Parquet footer ({len} bytes at byte {start}): {e}")))
}

/// The label range a column chunk's statistics give, when they give one.
fn label_stats(rg: &RowGroupMetaData, col: usize) -> Option<[i64; 2]> {
    match rg.column(col).statistics()? {
        Statistics::Int64(s) => Some([*s.min_opt()?, *s.max_opt()?]),
        Statistics::Int32(s) => Some([*s.min_opt()? as i64, *s.max_opt()? as i64]),
        _ => None,
    }
}

/// One file opened: its footer, columns and class names, and each row group's label range
/// (from the statistics, else by reading the label column chunk).
fn open_file(
    fetch: &Fetch,
    (path, size, version): &(String, u64, String),
    want: &Columns,
) -> Result<(ParquetFile, Vec<String>, Vec<[i64; 2]>)> {
    let (path, size) = (path.as_str(), *size);
    let meta = footer(fetch, path, size)?;
    let (image, label, names) = columns(path, &meta, want)?;
    let mut stats = Vec::with_capacity(meta.num_row_groups());
    for (r, rg) in meta.row_groups().iter().enumerate() {
        // A file cut short under an intact footer: its column chunks run past its end.
        for c in std::iter::once(image).chain(label) {
            let name = || meta.file_metadata().schema_descr().column(c).path().string();
            let Some((start, len)) = read::chunk_range(rg.column(c)) else {
                let why = format!("damaged Parquet footer: row group {r}'s column chunk {} has a negative offset or length", name());
                return Err(Error::dataset(path, why));
            };
            if start.checked_add(len).is_none_or(|end| end > size) {
                let name = name();
                let end = start.saturating_add(len);
                let why = format!(
                    "truncated Parquet file: row group {r}'s column chunk {name} spans bytes {start}..{end}, but the file has {size} bytes"
                );
                return Err(Error::dataset(path, why));
            }
        }
        stats.push(label.and_then(|c| label_stats(rg, c)));
    }
    let file = ParquetFile { path: path.to_string(), size, version: version.clone(), meta: Arc::new(meta), image, label };
    let labels = stats
        .iter()
        .enumerate()
        .map(|(r, s)| match (s, file.label) {
            (Some(range), _) => Ok(*range),
            (None, None) => Ok([-1, -1]),
            (None, Some(c)) => {
                let (_, v) = read_labels(fetch, &file, r as u32, c)?;
                Ok([v.iter().copied().min().unwrap_or(-1), v.iter().copied().max().unwrap_or(-1)])
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((file, names, labels))
}

impl ParquetSet {
    /// Open local files: read each footer (`threads` at once) and list the row groups.
    pub fn open_local(root: &Path, files: &[PathBuf], want: &Columns, threads: usize) -> Result<ParquetSet> {
        let mut listed = Vec::with_capacity(files.len());
        for p in files {
            let md = std::fs::metadata(p).map_err(|e| Error::dataset(p, format!("cannot read: {e}")))?;
            let modified = md.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
            listed.push((p.to_string_lossy().into_owned(), md.len(), modified.to_string()));
        }
        Self::open(root.to_string_lossy().into_owned(), listed, Fetch::Local, want, threads)
    }

    /// Open the `.parquet` objects `url` names (one object, or a prefix: `s3://b/data/train-`).
    #[cfg(feature = "remote")]
    pub fn open_remote(url: &str, want: &Columns, threads: usize) -> Result<ParquetSet> {
        let store = Arc::new(super::remote::Store::for_url(url)?);
        let (root, objects) = remote_objects(&store, url)?;
        if objects.is_empty() {
            return Err(Error::dataset(url, "empty dataset: no .parquet objects found under this prefix"));
        }
        let listed = objects.into_iter().map(|o| (o.url, o.size, o.version)).collect();
        Self::open(root, listed, Fetch::Store(store, None), want, threads)
    }

    /// Read the row groups' column chunks of a store through the node cache in `dir` (stream
    /// mode's `cache_dir`, at most `limit` bytes; `crate::source::cache`): epoch 2 reads local
    /// disk. Local files are read as they are.
    #[cfg(feature = "remote")]
    pub fn with_cache(&mut self, dir: &Path, limit: u64) -> Result<()> {
        let versions = self.files.iter().map(|f| (f.path.clone(), f.version.clone())).collect();
        self.fetch.cached(dir, limit, versions)
    }

    /// What the node cache did (None without one).
    #[cfg(feature = "remote")]
    pub fn cache_stats(&self) -> Option<super::cache::CacheStats> {
        match &self.fetch {
            Fetch::Store(_, Some(c)) => Some(c.cache.stats()),
            _ => None,
        }
    }

    fn open(root: String, listed: Vec<(String, u64, String)>, fetch: Fetch, want: &Columns, threads: usize) -> Result<ParquetSet> {
        if listed.is_empty() {
            return Err(Error::dataset(&root, "empty dataset: no .parquet files found"));
        }
        let threads = if matches!(fetch, Fetch::Local) { threads } else { threads.max(8) };
        let opened = super::index::parallel_map(listed.len(), threads, None, |i| open_file(&fetch, &listed[i], want));
        let mut files = Vec::with_capacity(listed.len());
        let (mut groups, mut first_group) = (Vec::new(), Vec::with_capacity(listed.len()));
        let mut classes: Option<(Vec<String>, bool, String)> = None;
        for (f, r) in opened.into_iter().enumerate() {
            let (file, names, labels): (ParquetFile, Vec<String>, Vec<[i64; 2]>) = r?;
            match &classes {
                None => classes = Some((names, file.label.is_some(), file.path.clone())),
                Some((c, labelled, first)) if *c != names || *labelled != file.label.is_some() => {
                    return Err(Error::dataset(
                        &file.path,
                        format!("its label column or class names differ from those of {first}: a data set's files must agree"),
                    ))
                }
                Some(_) => {}
            }
            first_group.push(groups.len() as u32);
            let mut first_row = 0u64;
            for (r, rg) in file.meta.row_groups().iter().enumerate() {
                let rows = rg.num_rows().max(0) as u64;
                let bytes = rg.column(file.image).uncompressed_size().max(0) as u64;
                groups.push(Group { file: f as u32, rg: r as u32, first_row, rows, bytes, labels: labels[r] });
                first_row += rows;
            }
            files.push(file);
        }
        let classes = classes.map(|c| c.0).unwrap_or_default();
        Ok(ParquetSet { root, files, groups, first_group, classes, fetch, cache: GroupCache::new(SAMPLE_CACHE_BYTES) })
    }

    /// Each row group's largest image (compressed bytes, stored size), by reading every row group
    /// once, `threads` at once. A row group that cannot be read counts its rows as headerless
    /// (sized at the decode guard); it fails by name when its epoch reads it.
    pub fn largest(&self, threads: usize) -> Vec<Largest> {
        self.measure(threads).0
    }

    /// [`Self::largest`], and whether every row group was read.
    fn measure(&self, threads: usize) -> (Vec<Largest>, bool) {
        let read = super::index::parallel_map(self.groups.len(), threads, None, |g| match self.read_group(g) {
            Ok(d) => Some(Largest::of(d.rows.iter().filter(|r| r.error.is_none()).map(|r| {
                let bytes = &d.data[r.bytes.clone()];
                (bytes.len() as u64, crate::codec::parse_info(bytes).ok().map(|i| (i.width, i.height)))
            }))),
            Err(e) => {
                log::warn!("cannot read {} to size the CUDA buffers: {e}", self.group_name(g));
                None
            }
        });
        let all = read.iter().all(Option::is_some);
        let largest = read
            .into_iter()
            .zip(&self.groups)
            .map(|(l, gr)| l.unwrap_or(Largest { bytes: gr.bytes, headerless: gr.rows, ..Default::default() }))
            .collect();
        (largest, all)
    }

    /// What the CUDA backend sizes its buffers by in stream mode: [`Self::largest`], measured
    /// once per set and saved in the index's cache folder (`cache_dir`, else
    /// `$XDG_CACHE_HOME/stoke`, else `~/.cache/stoke`) under a name from every file's path, size
    /// and version and every row group's rows and bytes. A start that finds it reads no row
    /// group; a changed file measures the set again. Nothing in a Parquet footer says an
    /// image's stored width and height, so the first start over a set reads each row group once
    /// (through the node cache when stream mode has one: epoch 1 then reads local disk).
    /// Measures with a row group that could not be read are not saved.
    pub fn largest_saved(&self, threads: usize, cache_dir: Option<&Path>) -> Vec<Largest> {
        let path = super::index::cache_folder(cache_dir).map(|d| d.join(format!("{}.stoke-largest.json", self.fingerprint())));
        if let Some(p) = &path {
            if let Some(saved) = std::fs::read(p).ok().and_then(|b| serde_json::from_slice::<SavedLargest>(&b).ok()) {
                if saved.format == LARGEST_FORMAT && saved.groups.len() == self.groups.len() {
                    log::info!("the row groups' largest images from {}", p.display());
                    return saved.groups;
                }
            }
        }
        log::info!("reading the {} row groups once to size the CUDA buffers by their largest images", self.groups.len());
        let (largest, all) = self.measure(threads);
        if let (Some(p), true) = (&path, all) {
            let text = serde_json::to_vec(&SavedLargest { format: LARGEST_FORMAT.into(), groups: largest.clone() }).expect("plain data");
            let tmp = p.with_extension(format!("tmp{}", std::process::id()));
            let written = p
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|_| std::fs::write(&tmp, text))
                .and_then(|_| std::fs::rename(&tmp, p));
            if let Err(e) = written {
                let _ = std::fs::remove_file(&tmp);
                log::info!("cannot save the row groups' largest images to {}: {e}; the next start measures them again", p.display());
            }
        }
        largest
    }

    /// A name for the set's contents: its folder's last part and a hash of every file's path,
    /// size and version and every row group's rows and image bytes.
    fn fingerprint(&self) -> String {
        use super::index::{fnv, FNV_OFFSET};
        let mut h = FNV_OFFSET;
        for f in &self.files {
            for part in [f.path.as_bytes(), &f.size.to_le_bytes(), f.version.as_bytes(), &[0]] {
                h = fnv(h, part);
            }
        }
        for g in &self.groups {
            h = fnv(fnv(h, &g.rows.to_le_bytes()), &g.bytes.to_le_bytes());
        }
        let name: String = file_name(self.root.trim_end_matches('/'))
            .chars()
            .map(|c| if c.is_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        format!("{name}-{h:016x}")
    }

    /// Keep at most `bytes` of decoded row groups for per-sample reads (module docs).
    pub fn set_cache_limit(&mut self, bytes: u64) {
        self.cache = GroupCache::new(bytes);
    }

    /// The flat index of row group `rg` of file `file`.
    pub fn group_index(&self, file: u32, rg: u32) -> usize {
        self.first_group[file as usize] as usize + rg as usize
    }

    /// A name for row group `g` in messages and facts: `train-00000.parquet[rg 3]`.
    pub fn group_name(&self, g: usize) -> String {
        let gr = &self.groups[g];
        format!("{}[rg {}]", file_name(&self.files[gr.file as usize].path), gr.rg)
    }

    /// The key of row `row` of row group `g`: `file stem/row in the file`.
    pub fn key(&self, g: usize, row: usize) -> String {
        let gr = &self.groups[g];
        format!("{}/{}", stem(&self.files[gr.file as usize].path), gr.first_row + row as u64)
    }

    /// Where row `row` of row group `g` is, for messages.
    pub fn location(&self, g: usize, row: usize) -> String {
        let gr = &self.groups[g];
        format!("{} row group {} row {row}", self.files[gr.file as usize].path, gr.rg)
    }

    /// Read and decode row group `g`: its image column chunk (and label chunk), ranged reads only.
    pub(crate) fn read_group(&self, g: usize) -> Result<Decoded> {
        let gr = self.groups[g];
        let file = &self.files[gr.file as usize];
        let rows = gr.rows as usize;
        let (defs, values, max_def) = read_column::<ByteArrayType>(&self.fetch, file, gr.rg, file.image)?;
        let labels = match file.label {
            None => None,
            Some(c) => Some(read_labels(&self.fetch, file, gr.rg, c)?),
        };
        let total: usize = values.iter().map(|v| v.len()).sum();
        let mut data = Vec::with_capacity(total);
        let mut out = Vec::with_capacity(rows);
        let (mut vi, mut li) = (0, 0);
        let n = self.classes.len() as i64;
        for r in 0..rows {
            let present = max_def == 0 || defs[r] == max_def;
            let mut error = None;
            let start = data.len();
            if present {
                data.extend_from_slice(values[vi].data());
                vi += 1;
            } else {
                error = Some(format!("null image (column {})", column_name(file, file.image)).into_boxed_str());
            }
            let mut bad_label = false;
            let label = match &labels {
                None => -1,
                Some((present, lv)) => {
                    if present[r] {
                        li += 1;
                        let l = lv[li - 1];
                        if l < 0 || (n > 0 && l >= n) {
                            bad_label = true;
                            error.get_or_insert_with(|| format!("label {l} is outside the {n} class names (0..{n})").into_boxed_str());
                        }
                        l
                    } else {
                        bad_label = true;
                        error.get_or_insert_with(|| "null label".into());
                        -1
                    }
                }
            };
            out.push(Row { bytes: start..data.len(), label, error, bad_label });
        }
        Ok(Decoded { data, rows: out })
    }

    /// Append the bytes of row `row` of row group `rg` of file `file` to `buf` (per-sample
    /// mode), decoding the row group into the cache if it is not there.
    pub(crate) fn read_row(
        &self,
        file: u32,
        rg: u32,
        row: u32,
        buf: &mut impl crate::reader::bytes::ByteSink,
    ) -> std::result::Result<(), String> {
        let g = self.group_index(file, rg);
        let d = match self.cache.get(g) {
            Some(d) => d,
            None => {
                let bytes = self.groups[g].bytes;
                let limit = self.cache.limit;
                if bytes > limit {
                    return Err(format!(
                        "its row group holds {bytes} bytes of images, more than per-sample mode's cache of {limit}: read this data set in stream mode (--stream)"
                    ));
                }
                let d = Arc::new(self.read_group(g).map_err(|e| reason(&e))?);
                self.cache.put(g, d.clone(), bytes);
                d
            }
        };
        let r = d.rows.get(row as usize).ok_or_else(|| format!("row {row} is past the row group's {} rows", d.rows.len()))?;
        if let Some(e) = &r.error {
            return Err(e.to_string());
        }
        buf.extend_from_slice(&d.data[r.bytes.clone()]);
        Ok(())
    }
}

/// An error's message without its path (the sample's location names the file).
pub(crate) fn reason(e: &Error) -> String {
    match e {
        Error::Dataset { message, .. } => message.clone(),
        Error::Io { source, .. } => source.to_string(),
        e => e.to_string(),
    }
}

fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn stem(p: &str) -> &str {
    let n = file_name(p);
    if is_parquet_name(n) {
        &n[..n.len() - 8]
    } else {
        n
    }
}

/// List every row of the set for the per-sample index: each row group decoded once
/// (`threads` at once) and each image's header parsed from memory.
pub(crate) fn list(set: &ParquetSet, fingerprint: u64, threads: usize, progress: bool) -> Result<Listing> {
    let pb = super::index::progress(progress, set.groups.len() as u64, "reading row groups");
    let results = super::index::parallel_map(set.groups.len(), threads, Some(&pb), |g| {
        let d = set.read_group(g)?;
        let entries: Vec<Entry> = d
            .rows
            .iter()
            .enumerate()
            .map(|(row, r)| {
                let gr = &set.groups[g];
                let header = match &r.error {
                    Some(e) => Err(e.clone()),
                    None => crate::codec::parse_info(&d.data[r.bytes.clone()]).map_err(|e| e.to_string().into_boxed_str()),
                };
                Entry {
                    key: set.key(g, row),
                    // A null label or one outside the class names: the sample fails by name
                    // when read (its header error says why); the index keeps no such label.
                    label: if r.bad_label { -1 } else { r.label },
                    len: r.bytes.len() as u64,
                    location: Location::Parquet { file: gr.file, rg: gr.rg, row: row as u32 },
                    header: Some(header),
                }
            })
            .collect();
        Ok::<_, Error>(entries)
    });
    pb.finish_and_clear();
    let mut entries = Vec::with_capacity(set.groups.iter().map(|g| g.rows as usize).sum());
    for r in results {
        entries.extend(r?);
    }
    let max_label = entries.iter().map(|e| e.label).max().unwrap_or(-1);
    let mut classes = set.classes.clone();
    for l in classes.len() as i64..=max_label {
        classes.push(l.to_string());
    }
    let shards = set.files.iter().map(|f| PathBuf::from(&f.path)).collect();
    Ok(Listing { root: PathBuf::from(&set.root), classes, ignored: 0, shards, entries, fingerprint })
}
