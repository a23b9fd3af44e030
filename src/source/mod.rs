//! Dataset sources and the header index: where every sample's compressed bytes live, its label,
//! and what its image header says.
//!
//! | source | path given to [`Dataset::open`] | key of a sample |
//! |---|---|---|
//! | folder (see below) | a folder with one subfolder per class (ImageFolder) | path relative to the folder |
//! | file list | a text file of `relative/path label` lines | the path as listed |
//! | tar shards | `train-{0000..0127}.tar`, one `.tar`, or a folder of `.tar` files | `shard/member key` |
//! | Parquet (Hugging Face) | one `.parquet`, a folder of them (or its `data/`), or `folder/split-` | `file stem/row` |
//!
//! Opening a dataset loads its saved index when the source is unchanged, or builds it (a
//! parallel pass over the headers) and saves it; see `index.rs`.
//!
//! # Folder
//! torchvision's ImageFolder convention: classes sorted by name get labels `0..C`; image files
//! (`.jpg`, `.jpeg`, `.png`, `.webp` in any case, at any depth) are samples; other files are ignored and counted.

#[cfg(feature = "remote")]
pub mod cache;
mod folder;
pub(crate) mod index;
mod list;
pub mod parquet;
#[cfg(feature = "remote")]
pub mod remote;
pub mod shards;
pub mod tar;

/// The URL schemes of data sets in object storage.
const REMOTE_SCHEMES: [&str; 4] = ["s3://", "gs://", "http://", "https://"];

/// True when `s` names objects in a store (`s3://`, `gs://`, `http://`, `https://`) rather
/// than local paths.
pub fn is_remote(s: &str) -> bool {
    REMOTE_SCHEMES.iter().any(|p| s.len() > p.len() && s[..p.len()].eq_ignore_ascii_case(p))
}

pub use crate::codec::jpeg::{Coding, HeaderError, JpegInfo, Subsampling};
pub use crate::codec::{ImageFormat, ImageInfo};

/// File extensions (lowercase) of the files and tar members that are samples. The name only
/// selects candidates: the format is sniffed from the bytes, so a PNG named `.JPEG` is read
/// as the PNG it is.
pub const IMAGE_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// True for one of [`IMAGE_EXTENSIONS`], in any case.
pub(crate) fn is_image_extension(ext: &str) -> bool {
    IMAGE_EXTENSIONS.iter().any(|e| ext.eq_ignore_ascii_case(e))
}

use crate::error::{Error, Result};
use crate::reader::bytes::ByteSink;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Which kind of source a dataset is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// ImageFolder layout.
    Folder = 0,
    /// A file list.
    List = 1,
    /// Tar shards.
    Tar = 2,
    /// Parquet files (Hugging Face datasets).
    Parquet = 3,
}

/// Where a sample's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Its own file: the dataset root joined with the key.
    File,
    /// Inside a shard, from `offset` for [`SampleMeta::len`] bytes.
    Tar {
        /// Index into [`Dataset::shards`].
        shard: u32,
        /// Byte offset of the member's data in the shard.
        offset: u64,
    },
    /// A row of a Parquet file: its image is in the row group's image column chunk.
    Parquet {
        /// Index into [`Dataset::shards`] (the files).
        file: u32,
        /// Row group in the file.
        rg: u32,
        /// Row in the row group.
        row: u32,
    },
}

/// One sample as the index records it.
#[derive(Clone, Debug)]
pub struct SampleMeta {
    /// Stable key: path relative to the root (folder, list) or `shard/key` (tar).
    pub key: String,
    /// Class label (`-1` for unlabeled tar samples).
    pub label: i64,
    /// Compressed size in bytes, as indexed.
    pub len: u64,
    /// Where the bytes are.
    pub location: Location,
    /// The image header facts; `None` when the header could not be parsed.
    pub info: Option<ImageInfo>,
    /// Why the header could not be parsed (no supported format, truncated, malformed).
    pub header_error: Option<Box<str>>,
}

/// How [`Dataset::open`] indexes.
#[derive(Clone, Debug)]
pub struct IndexOptions {
    /// Threads for the header pass (0 = all cores).
    pub threads: usize,
    /// Show a progress bar on stderr when it is a terminal.
    pub progress: bool,
    /// Rebuild the index even when a saved one matches.
    pub rebuild: bool,
    /// Save the index (beside the dataset, else in the cache folder).
    pub save: bool,
    /// Cache folder instead of `$XDG_CACHE_HOME/stoke` / `~/.cache/stoke`.
    pub cache_dir: Option<PathBuf>,
    /// When set, labels must be below this; a label at or above it is an error.
    pub num_classes: Option<usize>,
    /// Parquet: the image and label columns (`None`: found from the files' metadata).
    pub columns: parquet::Columns,
    /// Parquet, per-sample reads: bytes of decoded row groups kept (a row group larger than
    /// this is refused, saying to use stream mode).
    pub parquet_cache_bytes: u64,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            threads: 0,
            progress: false,
            rebuild: false,
            save: true,
            cache_dir: None,
            num_classes: None,
            columns: Default::default(),
            parquet_cache_bytes: parquet::SAMPLE_CACHE_BYTES,
        }
    }
}

/// What a source lists before the header pass.
pub(crate) struct Entry {
    pub key: String,
    pub label: i64,
    pub len: u64,
    pub location: Location,
    /// The header facts when the listing already parsed them (shards read whole from a
    /// store): the header pass then reads nothing.
    pub header: Option<Header>,
}

/// A parsed header, or why it could not be parsed.
pub(crate) type Header = std::result::Result<ImageInfo, Box<str>>;

/// A listed source.
pub(crate) struct Listing {
    pub root: PathBuf,
    pub classes: Vec<String>,
    pub ignored: u64,
    pub shards: Vec<PathBuf>,
    pub entries: Vec<Entry>,
    pub fingerprint: u64,
}

/// Shards kept open at once; beyond this, a read opens and closes its shard.
const MAX_OPEN_SHARDS: usize = 512;

/// An opened, indexed dataset. Cheap to share across threads (`Arc<Dataset>`).
#[derive(Debug)]
pub struct Dataset {
    path: PathBuf,
    root: PathBuf,
    kind: SourceKind,
    classes: Vec<String>,
    ignored: u64,
    shards: Vec<PathBuf>,
    shard_files: Vec<OnceLock<File>>,
    open_shards: AtomicUsize,
    samples: Vec<SampleMeta>,
    index_path: Option<PathBuf>,
    index_origin: IndexOrigin,
    /// Where remote shards are read from.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    store: Option<StoreRef>,
    /// Parquet: the files' footers and the cache of decoded row groups.
    parquet: Option<std::sync::Arc<parquet::ParquetSet>>,
}

/// Decide what kind of source `path` is.
fn detect(path: &Path) -> Result<SourceKind> {
    let s = path.to_string_lossy();
    if s.contains('{') {
        return Ok(SourceKind::Tar);
    }
    if parquet::local_files(path)?.is_some() {
        return Ok(SourceKind::Parquet);
    }
    let md = std::fs::metadata(path).map_err(|e| {
        let what =
            if e.kind() == std::io::ErrorKind::NotFound { "no such file or folder".to_string() } else { format!("cannot read: {e}") };
        Error::dataset(path, what)
    })?;
    if md.is_file() {
        let is_tar = path.extension().is_some_and(|x| x.eq_ignore_ascii_case("tar"));
        return Ok(if is_tar { SourceKind::Tar } else { SourceKind::List });
    }
    let has_classes = !folder::class_dirs(path)?.is_empty();
    let has_tars = !tar::shard_paths(path)?.is_empty();
    match (has_classes, has_tars) {
        (true, true) => Err(Error::dataset(path, "holds both class folders and .tar shards; point at one or the other")),
        (true, false) => Ok(SourceKind::Folder),
        (false, true) => Ok(SourceKind::Tar),
        (false, false) => Err(Error::dataset(
            path,
            "no class folders: expected one subfolder per class holding image files (.jpg/.jpeg/.png; ImageFolder layout), or .tar shards",
        )),
    }
}

/// Where a data set's index came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexOrigin {
    /// Built now (every sample's header read).
    Built,
    /// A saved index file, beside the data or in the cache folder.
    Saved,
    /// The index another process wrote beside the shards in the store ([`Dataset::publish_index`]).
    Store,
}

/// The index's object name beside shards in a store, written by [`Dataset::publish_index`]
/// (`stoke index URL`, `stoke pack` to a store).
pub const STORE_INDEX: &str = ".stoke-index";

/// Load a current index from `candidates`, else one `fetch` finds current (the one beside shards
/// in a store), else build one with `build` (and save it), holding a lock beside it so that
/// ranks started together (torchrun) fetch or build it once while the others wait and then load
/// it. Returns the index, where it is, and where it came from.
fn load_or_build(
    kind: SourceKind,
    candidates: &[PathBuf],
    fingerprint: u64,
    opts: &IndexOptions,
    mut fetch: Option<impl FnMut() -> Option<index::Saved>>,
    mut build: impl FnMut() -> Result<Listing>,
) -> Result<(index::Saved, Option<PathBuf>, IndexOrigin)> {
    let mut may_load = !opts.rebuild;
    let mut waited = false;
    loop {
        if may_load {
            if let Some((s, p)) = index::load(candidates, fingerprint).filter(|(s, _)| s.kind == kind) {
                return Ok((s, Some(p), IndexOrigin::Saved));
            }
        }
        let lock = if opts.save { index::BuildLock::acquire(candidates) } else { index::Lock::Unavailable };
        let guard = match lock {
            index::Lock::Busy(lock_path) => {
                if !waited {
                    log::warn!("another process is indexing this dataset (lock {}); waiting", lock_path.display());
                    waited = true;
                }
                std::thread::sleep(index::LOCK_POLL);
                may_load = true;
                continue;
            }
            index::Lock::Acquired(g) => {
                // Another process may have saved the index between our load and our lock.
                if !opts.rebuild || waited {
                    if let Some((s, p)) = index::load(candidates, fingerprint).filter(|(s, _)| s.kind == kind) {
                        return Ok((s, Some(p), IndexOrigin::Saved));
                    }
                }
                Some(g)
            }
            index::Lock::Unavailable => None,
        };
        if let Some(s) = fetch.as_mut().filter(|_| !opts.rebuild).and_then(|f| f()) {
            let p = if opts.save { index::save(candidates, fingerprint, &s) } else { None };
            drop(guard);
            return Ok((s, p, IndexOrigin::Store));
        }
        let l = build()?;
        let samples = index::build(&l.root, &l.shards, l.entries, opts.threads, opts.progress)?;
        let saved = index::Saved { kind, classes: l.classes, ignored: l.ignored, shards: l.shards, samples };
        let p = if opts.save { index::save(candidates, fingerprint, &saved) } else { None };
        drop(guard);
        return Ok((saved, p, IndexOrigin::Built));
    }
}

/// The store a data set's shards are read from (none for local files).
#[cfg(feature = "remote")]
type StoreRef = std::sync::Arc<remote::Store>;
/// Without the `remote` feature there is no store.
#[cfg(not(feature = "remote"))]
type StoreRef = std::convert::Infallible;

impl Dataset {
    /// Open a folder, file list, tar pattern or folder of tars; load the saved index when the
    /// source is unchanged, else build and save it. Errors name the path and what was wrong.
    pub fn open(path: &Path, opts: &IndexOptions) -> Result<Dataset> {
        if is_remote(&path.to_string_lossy()) {
            #[cfg(feature = "remote")]
            if parquet::remote_is_parquet(&path.to_string_lossy()) {
                return Self::open_parquet(path, opts);
            }
            #[cfg(feature = "remote")]
            return Self::open_remote(path, opts);
            #[cfg(not(feature = "remote"))]
            return Err(Error::dataset(path, "a store URL, but this build of stoke has no remote sources (the `remote` feature)"));
        }
        let kind = detect(path)?;
        if kind == SourceKind::Parquet {
            return Self::open_parquet(path, opts);
        }
        // List the source (folder, list) or just fingerprint it (tar: its headers are read only
        // when the index has to be rebuilt).
        let (root, fingerprint, listing, shards) = match kind {
            SourceKind::Folder => {
                let l = folder::list(path, opts.threads)?;
                (l.root.clone(), l.fingerprint, Some(l), Vec::new())
            }
            SourceKind::List => {
                let l = list::list(path)?;
                (l.root.clone(), l.fingerprint, Some(l), Vec::new())
            }
            SourceKind::Parquet => unreachable!("opened above"),
            SourceKind::Tar => {
                let shards = tar::shard_paths(path)?;
                let root = if path.is_dir() {
                    path.to_path_buf()
                } else {
                    match path.parent() {
                        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                        _ => PathBuf::from("."),
                    }
                };
                if shards.is_empty() {
                    return Err(Error::dataset(path, "empty dataset: no .tar shards found"));
                }
                (root, tar::fingerprint(&shards)?, None, shards)
            }
        };
        let mut candidates = vec![index::beside_path(kind, path, &root)];
        candidates.extend(index::cache_path(opts.cache_dir.as_deref(), path));
        let mut listing = listing;
        let mut shards = Some(shards);
        let build = || match listing.take() {
            Some(l) => Ok(l),
            None => tar::list(&root, shards.take().unwrap_or_default(), fingerprint, opts.threads, opts.progress),
        };
        let (saved, index_path, origin) = load_or_build(kind, &candidates, fingerprint, opts, None::<fn() -> Option<index::Saved>>, build)?;
        Self::from_saved(path, root, saved, index_path, origin, opts, None)
    }

    /// Open tar shards in a store (`s3://…`, `gs://…`, `http(s)://…`): a brace pattern, one
    /// `.tar`, or a prefix whose `.tar` objects are the shards. The index is the cache folder's
    /// when it is current, else the one written beside the shards ([`STORE_INDEX`], one GET)
    /// when it is current, else built by reading each shard once; it is kept in the cache
    /// folder. The store is written to only by [`Dataset::publish_index`].
    #[cfg(feature = "remote")]
    fn open_remote(path: &Path, opts: &IndexOptions) -> Result<Dataset> {
        let url = path.to_str().ok_or_else(|| Error::dataset(path, "URL is not valid UTF-8"))?;
        let store = std::sync::Arc::new(remote::Store::for_url(url)?);
        let (root, objects) = store.shards(url)?;
        let mut fp = index::Fingerprint::new(SourceKind::Tar);
        for o in &objects {
            fp.add_str(&o.url);
            fp.add_bytes(&o.size.to_le_bytes());
            fp.add_str(&o.version);
        }
        let fingerprint = fp.finish();
        let candidates: Vec<PathBuf> = index::cache_path_for_url(opts.cache_dir.as_deref(), url).into_iter().collect();
        // The index another node wrote beside the shards (`publish_index`): one GET.
        let published = format!("{root}/{STORE_INDEX}");
        let fetch = || match store.get_if_present(&published) {
            Ok(Some(bytes)) => {
                let s = index::decode(&bytes, fingerprint).filter(|s| s.kind == SourceKind::Tar);
                match &s {
                    Some(_) => log::info!("index read from {published}"),
                    None => log::warn!(
                        "{published} does not describe these shards (one was added, removed or rewritten since it was written, or another set was indexed): indexing them here; `stoke index {url}` writes a current one"
                    ),
                }
                s
            }
            Ok(None) => None,
            Err(e) => {
                log::warn!("cannot read {published} ({e}): indexing the shards here");
                None
            }
        };
        let root = PathBuf::from(root);
        let mut shards = Some(objects.into_iter().map(|o| PathBuf::from(o.url)).collect::<Vec<_>>());
        let build = || tar::list_remote(&store, &root, shards.take().unwrap_or_default(), fingerprint, opts.threads, opts.progress);
        let (saved, index_path, origin) = load_or_build(SourceKind::Tar, &candidates, fingerprint, opts, Some(fetch), build)?;
        Self::from_saved(path, root, saved, index_path, origin, opts, Some(store))
    }

    /// Open Parquet files (module [`parquet`]): footers read, the per-sample index loaded when
    /// the files are unchanged, else built by decoding each row group once.
    fn open_parquet(path: &Path, opts: &IndexOptions) -> Result<Dataset> {
        let mut set =
            parquet::open_if_parquet(path, &opts.columns, opts.threads)?.ok_or_else(|| Error::dataset(path, "no .parquet files found"))?;
        set.set_cache_limit(opts.parquet_cache_bytes);
        let mut fp = index::Fingerprint::new(SourceKind::Parquet);
        for f in &set.files {
            fp.add_str(&f.path);
            fp.add_bytes(&f.size.to_le_bytes());
            if !is_remote(&f.path) {
                let md = std::fs::metadata(&f.path).map_err(|e| Error::io(&f.path, e))?;
                fp.add_file(&f.path, &md);
            }
        }
        fp.add_str(opts.columns.image.as_deref().unwrap_or("\0"));
        fp.add_str(opts.columns.label.as_deref().unwrap_or("\0"));
        let fingerprint = fp.finish();
        let root = PathBuf::from(&set.root);
        let mut candidates = Vec::new();
        if !is_remote(&set.root) {
            candidates.push(index::beside_path(SourceKind::Parquet, path, &root));
            candidates.extend(index::cache_path(opts.cache_dir.as_deref(), path));
        } else {
            // (A store URL opens only with the `remote` feature: open_if_parquet refuses it.)
            #[cfg(feature = "remote")]
            candidates.extend(index::cache_path_for_url(opts.cache_dir.as_deref(), &path.to_string_lossy()));
        }
        let build = || parquet::list(&set, fingerprint, opts.threads, opts.progress);
        let (saved, index_path, origin) =
            load_or_build(SourceKind::Parquet, &candidates, fingerprint, opts, None::<fn() -> Option<index::Saved>>, build)?;
        let mut d = Self::from_saved(path, root, saved, index_path, origin, opts, None)?;
        d.parquet = Some(std::sync::Arc::new(set));
        Ok(d)
    }

    fn from_saved(
        path: &Path,
        root: PathBuf,
        saved: index::Saved,
        index_path: Option<PathBuf>,
        index_origin: IndexOrigin,
        opts: &IndexOptions,
        store: Option<StoreRef>,
    ) -> Result<Dataset> {
        if let Some(n) = opts.num_classes {
            if let Some(m) = saved.samples.iter().find(|m| m.label >= n as i64) {
                return Err(Error::dataset(
                    path,
                    format!("sample {}: label {} is out of range for {n} classes (labels must be 0..{n})", m.key, m.label),
                ));
            }
        }
        let shard_files = saved.shards.iter().map(|_| OnceLock::new()).collect();
        Ok(Dataset {
            path: path.to_path_buf(),
            root,
            kind: saved.kind,
            classes: saved.classes,
            ignored: saved.ignored,
            shards: saved.shards,
            shard_files,
            open_shards: AtomicUsize::new(0),
            samples: saved.samples,
            index_path,
            index_origin,
            store,
            parquet: None,
        })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// True when there are no samples (never, for an opened dataset).
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Sample `i`'s index record.
    pub fn sample(&self, i: usize) -> &SampleMeta {
        &self.samples[i]
    }

    /// All samples, in dataset order.
    pub fn samples(&self) -> &[SampleMeta] {
        &self.samples
    }

    /// The path the dataset was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder keys are relative to (folder, list) or the shards' folder (tar).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Source kind.
    pub fn kind(&self) -> SourceKind {
        self.kind
    }

    /// Class names in label order (folder: the subfolder names; list/tar: the label numbers,
    /// or `classes.txt` beside packed shards).
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// Files (or tar members) that are not image samples (see [`IMAGE_EXTENSIONS`]).
    pub fn ignored(&self) -> u64 {
        self.ignored
    }

    /// The tar shards (empty for folders and lists).
    pub fn shards(&self) -> &[PathBuf] {
        &self.shards
    }

    /// Where the index was loaded from or saved to (`None` when it could not be saved).
    pub fn index_path(&self) -> Option<&Path> {
        self.index_path.as_deref()
    }

    /// True when the saved index was reused rather than rebuilt.
    pub fn index_reused(&self) -> bool {
        self.index_origin != IndexOrigin::Built
    }

    /// Where the index came from.
    pub fn index_origin(&self) -> IndexOrigin {
        self.index_origin
    }

    /// Write this data set's index beside its shards in the store
    /// (`{root}/`[`STORE_INDEX`]): every node that opens the same shards then reads that one
    /// object instead of every shard (checked against the shards' sizes and versions, as the
    /// local index is). Returns the object's URL. Errors for local data (its index is already
    /// beside it) and when the index could not be kept locally.
    #[cfg(feature = "remote")]
    pub fn publish_index(&self) -> Result<String> {
        let store = self.store.as_ref().ok_or_else(|| Error::dataset(&self.path, "not in a store: its index is kept beside it already"))?;
        let p = self
            .index_path
            .as_ref()
            .ok_or_else(|| Error::dataset(&self.path, "the index could not be saved locally, so there is nothing to write to the store"))?;
        let bytes = std::fs::read(p).map_err(|e| Error::io(p, e))?;
        let url = format!("{}/{STORE_INDEX}", self.root.display());
        store.put(&url, bytes.into())?;
        Ok(url)
    }

    /// Where sample `i`'s bytes are, for messages: `path/to/file.jpg` or
    /// `train-0004.tar at byte 99120`.
    pub fn location(&self, i: usize) -> String {
        let m = &self.samples[i];
        match m.location {
            Location::File => self.root.join(&m.key).display().to_string(),
            Location::Tar { shard, offset } => format!("{} at byte {offset}", self.shards[shard as usize].display()),
            Location::Parquet { file, rg, row } => format!("{} row group {rg} row {row}", self.shards[file as usize].display()),
        }
    }

    /// Run `f` on shard `s`'s open file (opened once and kept, up to [`MAX_OPEN_SHARDS`]).
    fn with_shard<T>(&self, s: usize, f: impl FnOnce(&File) -> std::io::Result<T>) -> std::io::Result<T> {
        if let Some(file) = self.shard_files[s].get() {
            return f(file);
        }
        let file = File::open(&self.shards[s])?;
        if self.open_shards.fetch_add(1, Ordering::Relaxed) >= MAX_OPEN_SHARDS {
            self.open_shards.fetch_sub(1, Ordering::Relaxed);
            return f(&file);
        }
        match self.shard_files[s].set(file) {
            Ok(()) => f(self.shard_files[s].get().expect("just set")),
            Err(file) => {
                self.open_shards.fetch_sub(1, Ordering::Relaxed);
                f(&file)
            }
        }
    }

    /// Samples `indices`' compressed bytes read from the store, `in_flight` ranged GETs at once
    /// (a batch's samples concurrently); `None` when the data set is not in a store (read those
    /// with [`Self::read_append`]). Each error names its sample's key and location, as
    /// `read_append`'s do.
    #[cfg(feature = "remote")]
    pub fn read_remote(&self, indices: &[usize], in_flight: usize) -> Option<Vec<Result<bytes::Bytes>>> {
        let store = self.store.as_ref().filter(|_| self.parquet.is_none())?;
        let urls: Vec<std::borrow::Cow<'_, str>> = self.shards.iter().map(|p| p.to_string_lossy()).collect();
        let reqs: Vec<(&str, Range<u64>)> = indices
            .iter()
            .map(|&i| {
                let m = &self.samples[i];
                match m.location {
                    Location::Tar { shard, offset } => (&*urls[shard as usize], offset..offset + m.len),
                    Location::File | Location::Parquet { .. } => unreachable!("a data set in a store read by ranges is tar shards"),
                }
            })
            .collect();
        let got = store.get_ranges(&reqs, in_flight);
        Some(
            got.into_iter()
                .zip(indices)
                .map(|(r, &i)| r.map_err(|e| Error::sample(&self.samples[i].key, self.location(i), store_reason(e))))
                .collect(),
        )
    }

    /// Append sample `i`'s compressed bytes to `buf` (positioned reads; nothing else is
    /// touched) and return where they landed. Errors name the sample's key and location.
    pub fn read_append(&self, i: usize, buf: &mut impl ByteSink) -> Result<Range<usize>> {
        let m = &self.samples[i];
        let start = buf.len();
        let fail = |what: String| Error::sample(&m.key, self.location(i), what);
        match m.location {
            Location::Parquet { file, rg, row } => {
                let set = self.parquet.as_ref().expect("a Parquet data set keeps its files open");
                set.read_row(file, rg, row, buf).map_err(|why| {
                    buf.truncate(start);
                    fail(why)
                })?;
            }
            Location::File => {
                let path = self.root.join(&m.key);
                let f = File::open(&path).map_err(|e| fail(format!("cannot open: {e}")))?;
                // Sized by the indexed length, read to the file's end as it is now.
                if let Err(e) = buf.append_file(&f, usize::try_from(m.len).unwrap_or(usize::MAX)) {
                    buf.truncate(start);
                    return Err(fail(format!("cannot read: {e}")));
                }
            }
            #[cfg(feature = "remote")]
            Location::Tar { shard, offset } if self.store.is_some() => {
                let store = self.store.as_ref().expect("checked");
                let url = self.shards[shard as usize].to_string_lossy();
                let bytes = store.get_range(&url, offset..offset + m.len).map_err(|e| fail(store_reason(e)))?;
                buf.extend_from_slice(&bytes);
            }
            Location::Tar { shard, offset } => {
                let len = m.len as usize;
                if let Err(e) = buf.try_reserve_more(len) {
                    return Err(fail(format!(
                        "the index says {len} bytes, more than memory can hold ({e}): a damaged index? `stoke index --rebuild` rebuilds it"
                    )));
                }
                // Read into the buffer's memory as it is (no zeroing first; nothing is appended
                // on an error).
                let r = self.with_shard(shard as usize, |f| buf.append_read_at(f, offset, len));
                if let Err(e) = r {
                    buf.truncate(start);
                    return Err(fail(format!("cannot read {len} bytes: {e}")));
                }
            }
        }
        Ok(start..buf.len())
    }

    /// The store the shards are read from, when they are remote.
    #[cfg(feature = "remote")]
    pub fn store(&self) -> Option<&std::sync::Arc<remote::Store>> {
        self.store.as_ref()
    }

    /// Replace `buf`'s contents with sample `i`'s compressed bytes (buffer reused).
    pub fn read_bytes(&self, i: usize, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        self.read_append(i, buf).map(|_| ())
    }
}

/// A store error's message without the object's URL (the sample's location names the shard).
#[cfg(feature = "remote")]
fn store_reason(e: Error) -> String {
    match e {
        Error::Dataset { message, .. } => message,
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_are_recognised_by_scheme() {
        for u in ["s3://b/x.tar", "S3://b/x", "gs://b/p/", "https://h/a.tar", "http://127.0.0.1:9/a"] {
            assert!(is_remote(u), "{u}");
        }
        for u in ["/data/x.tar", "s3:/b", "s3://", "data/s3://x", "file:///x"] {
            assert!(!is_remote(u), "{u}");
        }
    }
}
