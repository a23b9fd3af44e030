//! The saved index: one pass over the samples that records each one's location, label and JPEG
//! header facts, saved so the next start skips it.
//!
//! The pass is parallel and reads only a prefix of each sample (8 KiB; 256 KiB or the whole
//! sample only when the header runs longer: big EXIF/ICC segments, a DNL height after the scan).
//!
//! Where it lives: beside the dataset (`ROOT/.stoke-index`, `LIST.stoke-index`,
//! `SHARDS/.stoke-index`), or, when that cannot be written, in `$XDG_CACHE_HOME/stoke` (or
//! `~/.cache/stoke`) under a name derived from the dataset's absolute path. It is reused when
//! its fingerprint matches the source's: the sizes and modification times of every file (folder,
//! list: plus the list's text) or every shard. Anything else (missing, stale, a different
//! version, corrupt) rebuilds it.
//!
//! The file format is private and versioned: magic `STOKEIX\0`, version, fingerprint, then
//! the dataset (classes, ignored count, shards, samples), then an FNV-1a checksum of all of it.

use super::{Entry, Location, SampleMeta, SourceKind};
use crate::codec::jpeg::{Coding, HeaderError, JpegInfo, Subsampling};
use crate::codec::{ImageFormat, ImageInfo};
use crate::error::{Error, Result};
#[cfg(feature = "cli")]
pub(crate) use indicatif::ProgressBar;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

const MAGIC: &[u8; 8] = b"STOKEIX\0";
/// 2: samples in any sniffed format (PNG besides JPEG).
const VERSION: u32 = 2;
/// Prefix lengths tried in turn to find a header: almost every JPEG's header fits in the first;
/// big EXIF thumbnails or ICC profiles need the second; a DNL height needs the whole file.
pub(crate) const HEADER_READS: [usize; 2] = [8 << 10, 256 << 10];

pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

pub(crate) fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// A running FNV-1a hash of what identifies a source's contents.
pub(crate) struct Fingerprint(u64);

impl Fingerprint {
    pub(crate) fn new(kind: SourceKind) -> Self {
        Fingerprint(fnv(FNV_OFFSET, &[kind as u8, VERSION as u8]))
    }
    pub(crate) fn add_bytes(&mut self, b: &[u8]) {
        self.0 = fnv(self.0, &(b.len() as u64).to_le_bytes());
        self.0 = fnv(self.0, b);
    }
    pub(crate) fn add_str(&mut self, s: &str) {
        self.add_bytes(s.as_bytes());
    }
    /// A file by its key, size and modification time.
    pub(crate) fn add_file(&mut self, key: &str, md: &fs::Metadata) {
        use std::os::unix::fs::MetadataExt;
        self.add_str(key);
        self.0 = fnv(self.0, &md.len().to_le_bytes());
        self.0 = fnv(self.0, &md.mtime().to_le_bytes());
        self.0 = fnv(self.0, &md.mtime_nsec().to_le_bytes());
    }
    pub(crate) fn finish(self) -> u64 {
        self.0
    }
}

/// Without the `cli` feature (a library build): a progress bar that draws nothing.
#[cfg(not(feature = "cli"))]
pub(crate) struct ProgressBar;

#[cfg(not(feature = "cli"))]
impl ProgressBar {
    pub(crate) fn inc(&self, _delta: u64) {}
    pub(crate) fn finish_and_clear(&self) {}
}

/// Without the `cli` feature: nothing is drawn.
#[cfg(not(feature = "cli"))]
pub(crate) fn progress(_enabled: bool, _len: u64, _what: &str) -> ProgressBar {
    ProgressBar
}

/// A progress bar on stderr when `enabled` and stderr is a terminal (hidden otherwise).
#[cfg(feature = "cli")]
pub(crate) fn progress(enabled: bool, len: u64, what: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    use indicatif::{ProgressDrawTarget, ProgressStyle};
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{msg} {wide_bar} {pos}/{len} [{elapsed_precise} < {eta_precise}] {per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}

/// `f(i)` for `i in 0..n` on `threads` threads (0 = all cores), results in index order.
pub(crate) fn parallel_map<T: Send>(n: usize, threads: usize, pb: Option<&ProgressBar>, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    parallel_map_with(n, threads, pb, || (), |_, i| f(i))
}

/// As [`parallel_map`] with per-thread scratch state made by `init`.
pub(crate) fn parallel_map_with<S, T: Send>(
    n: usize,
    threads: usize,
    pb: Option<&ProgressBar>,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize) -> T + Sync,
) -> Vec<T> {
    let threads = if threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { threads };
    let threads = threads.min(n.max(1));
    const CHUNK: usize = 64;
    if threads == 1 {
        // On the caller's thread: one thread's work needs none spawned (nor its exit, which
        // raced LeakSanitizer's check after an input of the parquet fuzz target).
        let mut state = init();
        let mut out = Vec::with_capacity(n);
        for start in (0..n).step_by(CHUNK) {
            let end = (start + CHUNK).min(n);
            out.extend((start..end).map(|i| f(&mut state, i)));
            if let Some(pb) = pb {
                pb.inc((end - start) as u64);
            }
        }
        return out;
    }
    let next = AtomicUsize::new(0);
    let parts: Mutex<Vec<(usize, Vec<T>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut state = init();
                loop {
                    let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                    if start >= n {
                        break;
                    }
                    let end = (start + CHUNK).min(n);
                    let out: Vec<T> = (start..end).map(|i| f(&mut state, i)).collect();
                    if let Some(pb) = pb {
                        pb.inc((end - start) as u64);
                    }
                    parts.lock().unwrap_or_else(|e| e.into_inner()).push((start, out));
                }
            });
        }
    });
    let mut parts = parts.into_inner().unwrap_or_else(|e| e.into_inner());
    parts.sort_by_key(|p| p.0);
    parts.into_iter().flat_map(|p| p.1).collect()
}

/// Read `[offset, offset + len)` of `file` into `buf` (cleared first); short files give fewer bytes.
pub(crate) fn read_range(file: &File, offset: u64, len: usize, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    buf.resize(len, 0);
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(())
}

/// Parse a sample's header from its bytes, reading longer prefixes only while the parser
/// runs out of bytes. `read(len, buf)` fills `buf` with up to `len` bytes from the sample's start.
pub(crate) fn header_of(
    total: u64,
    buf: &mut Vec<u8>,
    mut read: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
) -> std::io::Result<std::result::Result<ImageInfo, HeaderError>> {
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    let mut step = 0;
    loop {
        let len = HEADER_READS.get(step).copied().unwrap_or(total).min(total);
        read(len, buf)?;
        let r = crate::codec::parse_info(buf);
        // Stop unless the parser ran out of bytes and there are more to read.
        if !matches!(r, Err(HeaderError::Truncated { .. })) || buf.len() < len || len == total {
            return Ok(r);
        }
        step += 1;
    }
}

/// Where the index goes beside the dataset.
pub(crate) fn beside_path(kind: SourceKind, given: &Path, root: &Path) -> PathBuf {
    match kind {
        SourceKind::Folder => root.join(".stoke-index"),
        SourceKind::List => {
            let mut s = given.as_os_str().to_owned();
            s.push(".stoke-index");
            PathBuf::from(s)
        }
        SourceKind::Tar | SourceKind::Parquet => {
            if given.is_dir() {
                root.join(".stoke-index")
            } else {
                // A pattern or a single shard: name it after the pattern, beside the shards.
                let name = given.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let clean: String =
                    name.chars().map(|c| if c.is_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect();
                root.join(format!(".{clean}.stoke-index"))
            }
        }
    }
}

/// The cache folder: `cache_dir`, else `$XDG_CACHE_HOME/stoke`, else `~/.cache/stoke`.
pub(crate) fn cache_folder(cache_dir: Option<&Path>) -> Option<PathBuf> {
    Some(match cache_dir {
        Some(d) => d.to_path_buf(),
        None => match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
            Some(x) => PathBuf::from(x).join("stoke"),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".cache").join("stoke"),
        },
    })
}

/// The index file in the cache folder for a local data set, named from its absolute path.
pub(crate) fn cache_path(cache_dir: Option<&Path>, given: &Path) -> Option<PathBuf> {
    let dir = cache_folder(cache_dir)?;
    let abs = std::path::absolute(given).unwrap_or_else(|_| given.to_path_buf());
    let h = fnv(FNV_OFFSET, abs.as_os_str().as_encoded_bytes());
    let name = abs.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let clean: String = name.chars().map(|c| if c.is_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect();
    Some(dir.join(format!("{clean}-{h:016x}.stoke-index")))
}

/// What a saved index holds.
pub(crate) struct Saved {
    pub kind: SourceKind,
    pub classes: Vec<String>,
    pub ignored: u64,
    pub shards: Vec<PathBuf>,
    pub samples: Vec<SampleMeta>,
}

struct W(Vec<u8>);
impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
}

struct R<'a> {
    b: &'a [u8],
    at: usize,
}
impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn str(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

/// Formats of samples stored without JPEG facts, by their index in the file.
const FORMATS: [ImageFormat; 3] = [ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::WebP];

const CODINGS: [Coding; 8] = [
    Coding::Baseline,
    Coding::Extended,
    Coding::Progressive,
    Coding::Lossless,
    Coding::ArithmeticSequential,
    Coding::ArithmeticProgressive,
    Coding::ArithmeticLossless,
    Coding::Hierarchical,
];
const SUBSAMPLINGS: [Subsampling; 8] = [
    Subsampling::Gray,
    Subsampling::S444,
    Subsampling::S422,
    Subsampling::S420,
    Subsampling::S440,
    Subsampling::S411,
    Subsampling::S410,
    Subsampling::Other,
];
const KINDS: [SourceKind; 4] = [SourceKind::Folder, SourceKind::List, SourceKind::Tar, SourceKind::Parquet];

pub(crate) fn encode(fingerprint: u64, s: &Saved) -> Vec<u8> {
    let mut w = W(Vec::with_capacity(64 + s.samples.len() * 64));
    w.0.extend_from_slice(MAGIC);
    w.u32(VERSION);
    w.u64(fingerprint);
    w.u8(s.kind as u8);
    w.u32(s.classes.len() as u32);
    for c in &s.classes {
        w.str(c);
    }
    w.u64(s.ignored);
    w.u32(s.shards.len() as u32);
    for p in &s.shards {
        w.str(&p.to_string_lossy());
    }
    w.u64(s.samples.len() as u64);
    for m in &s.samples {
        w.str(&m.key);
        w.u64(m.label as u64);
        w.u64(m.len);
        match m.location {
            Location::File => w.u8(0),
            Location::Tar { shard, offset } => {
                w.u8(1);
                w.u32(shard);
                w.u64(offset);
            }
            Location::Parquet { file, rg, row } => {
                w.u8(2);
                w.u32(file);
                w.u32(rg);
                w.u32(row);
            }
        }
        match (&m.info, &m.header_error) {
            (Some(ImageInfo { jpeg: None, format, width, height, components, orientation }), _) => {
                w.u8(3);
                w.u8(FORMATS.iter().position(|f| f == format).unwrap_or(0) as u8);
                w.u32(*width);
                w.u32(*height);
                w.u8(*components);
                w.u8(*orientation);
            }
            (Some(ImageInfo { jpeg: Some(i), .. }), _) => {
                w.u8(1);
                w.u32(i.width);
                w.u32(i.height);
                w.u8(i.components);
                w.u8(i.precision);
                w.u8(i.sof);
                w.u8(CODINGS.iter().position(|c| *c == i.coding).unwrap_or(0) as u8);
                for (h, v) in i.sampling {
                    w.u8(h << 4 | v);
                }
                w.u8(SUBSAMPLINGS.iter().position(|c| *c == i.subsampling).unwrap_or(7) as u8);
                w.u16(i.adobe_transform.map(|t| t as u16).unwrap_or(0x100));
                w.u8(i.orientation);
                w.u8(i.jfif as u8 | (i.icc as u8) << 1 | (i.dnl as u8) << 2 | (i.turbo_refuses as u8) << 3);
                w.u16(i.restart_interval);
            }
            (None, Some(e)) => {
                w.u8(2);
                w.str(e);
            }
            (None, None) => w.u8(0),
        }
    }
    let sum = fnv(FNV_OFFSET, &w.0);
    w.u64(sum);
    w.0
}

/// `body` (a saved index without its last 8 bytes) with the checksum appended: what the fuzz
/// target feeds [`decode`], since a fuzzer cannot find a matching FNV-1a by itself.
pub(crate) fn with_checksum(body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    b.extend_from_slice(&fnv(FNV_OFFSET, body).to_le_bytes());
    b
}

/// The fingerprint field of a saved index's bytes (0 when too short).
pub(crate) fn fingerprint_field(b: &[u8]) -> u64 {
    b.get(12..20).map_or(0, |f| u64::from_le_bytes(f.try_into().expect("8 bytes")))
}

pub(crate) fn decode(b: &[u8], fingerprint: u64) -> Option<Saved> {
    if b.len() < 8 + 8 || &b[..8] != MAGIC {
        return None;
    }
    let (body, sum) = b.split_at(b.len() - 8);
    if fnv(FNV_OFFSET, body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut r = R { b: body, at: 8 };
    if r.u32()? != VERSION || r.u64()? != fingerprint {
        return None;
    }
    let kind = *KINDS.get(r.u8()? as usize)?;
    // Counts are bounded by the bytes that could hold them before anything is reserved: a
    // count of 2^31 or 2^63 in a damaged (or hostile) file is a rebuild, not an allocation.
    let nc = r.u32()? as usize;
    let mut classes = Vec::with_capacity(nc.min(body.len() / 4));
    for _ in 0..nc {
        classes.push(r.str()?);
    }
    let ignored = r.u64()?;
    let ns = r.u32()? as usize;
    let mut shards = Vec::with_capacity(ns.min(body.len() / 4));
    for _ in 0..ns {
        shards.push(PathBuf::from(r.str()?));
    }
    let n = r.u64()? as usize;
    let mut samples = Vec::with_capacity(n.min(body.len() / 16));
    for _ in 0..n {
        let key = r.str()?;
        let label = r.u64()? as i64;
        let len = r.u64()?;
        let location = match r.u8()? {
            0 => Location::File,
            1 => Location::Tar { shard: r.u32()?, offset: r.u64()? },
            2 => Location::Parquet { file: r.u32()?, rg: r.u32()?, row: r.u32()? },
            _ => return None,
        };
        let (info, header_error) = match r.u8()? {
            0 => (None, None),
            1 => {
                let width = r.u32()?;
                let height = r.u32()?;
                let components = r.u8()?;
                let precision = r.u8()?;
                let sof = r.u8()?;
                let coding = *CODINGS.get(r.u8()? as usize)?;
                let mut sampling = [(0, 0); 4];
                for s in &mut sampling {
                    let hv = r.u8()?;
                    *s = (hv >> 4, hv & 15);
                }
                let subsampling = *SUBSAMPLINGS.get(r.u8()? as usize)?;
                let adobe = r.u16()?;
                let orientation = r.u8()?;
                let flags = r.u8()?;
                let restart_interval = r.u16()?;
                let info = JpegInfo {
                    width,
                    height,
                    components,
                    precision,
                    sof,
                    coding,
                    sampling,
                    subsampling,
                    adobe_transform: (adobe < 0x100).then_some(adobe as u8),
                    orientation,
                    jfif: flags & 1 != 0,
                    icc: flags & 2 != 0,
                    restart_interval,
                    dnl: flags & 4 != 0,
                    turbo_refuses: flags & 8 != 0,
                };
                (Some(ImageInfo::from(info)), None)
            }
            2 => (None, Some(r.str()?.into_boxed_str())),
            3 => {
                let format = *FORMATS.get(r.u8()? as usize)?;
                let info = ImageInfo { format, width: r.u32()?, height: r.u32()?, components: r.u8()?, orientation: r.u8()?, jpeg: None };
                (Some(info), None)
            }
            _ => return None,
        };
        // What readers index and add with: a shard in the list, a byte range that ends before
        // 2^64, a label of a listed class (−1: an unlabelled tar sample).
        let fits = match location {
            Location::File => kind != SourceKind::Tar && kind != SourceKind::Parquet,
            Location::Parquet { file, .. } => kind == SourceKind::Parquet && (file as usize) < shards.len(),
            Location::Tar { shard, offset } => {
                kind == SourceKind::Tar && (shard as usize) < shards.len() && offset.checked_add(len).is_some()
            }
        };
        if !fits || label < -1 || label >= classes.len() as i64 {
            return None;
        }
        samples.push(SampleMeta { key, label, len, location, info, header_error });
    }
    (r.at == body.len()).then_some(Saved { kind, classes, ignored, shards, samples })
}

/// Load a saved index if one of `paths` holds one for this fingerprint.
pub(crate) fn load(paths: &[PathBuf], fingerprint: u64) -> Option<(Saved, PathBuf)> {
    for p in paths {
        let Ok(mut f) = File::open(p) else { continue };
        let mut b = Vec::new();
        if f.read_to_end(&mut b).is_err() {
            continue;
        }
        match decode(&b, fingerprint) {
            Some(s) => return Some((s, p.clone())),
            None => log::info!("index {} is stale or unreadable; rebuilding", p.display()),
        }
    }
    None
}

/// Save to the first of `paths` that can be written (atomically: temp file + rename).
pub(crate) fn save(paths: &[PathBuf], fingerprint: u64, s: &Saved) -> Option<PathBuf> {
    let bytes = encode(fingerprint, s);
    for p in paths {
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        let attempt = (|| -> std::io::Result<()> {
            if let Some(dir) = p.parent() {
                fs::create_dir_all(dir)?;
            }
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            // A full disk may show only here (NFS, some FUSE stores): never rename a file that
            // did not reach the disk whole.
            f.sync_all()?;
            fs::rename(&tmp, p)
        })();
        match attempt {
            Ok(()) => return Some(p.clone()),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                log::info!("cannot write the index to {}: {e}", p.display());
            }
        }
    }
    log::warn!("the dataset index could not be saved anywhere; it will be rebuilt next time");
    None
}

/// Parse every entry's header in parallel. An unreadable sample is an error naming it.
pub(crate) fn build(root: &Path, shards: &[PathBuf], entries: Vec<Entry>, threads: usize, show_progress: bool) -> Result<Vec<SampleMeta>> {
    // Shards read whole from a store were parsed as they were listed: nothing to open.
    let parsed = entries.iter().all(|e| e.header.is_some());
    let shard_files: Vec<File> =
        if parsed { Vec::new() } else { shards.iter().map(|p| File::open(p).map_err(|e| Error::io(p, e))).collect::<Result<_>>()? };
    let pb = progress(show_progress, entries.len() as u64, "indexing");
    let results = parallel_map_with(entries.len(), threads, Some(&pb), Vec::new, |buf, i| {
        let e = &entries[i];
        if let Some(h) = &e.header {
            return Ok(h.clone().map_err(HeaderText));
        }
        match e.location {
            Location::File => {
                let path = root.join(&e.key);
                let f = File::open(&path).map_err(|err| Error::dataset(&path, format!("cannot read: {err}")))?;
                header_of(e.len, buf, |n, b| read_range(&f, 0, n, b))
                    .map(|r| r.map_err(HeaderText::from))
                    .map_err(|err| Error::dataset(&path, format!("cannot read: {err}")))
            }
            Location::Tar { shard, offset } => {
                let f = &shard_files[shard as usize];
                header_of(e.len, buf, |n, b| read_range(f, offset, n, b))
                    .map(|r| r.map_err(HeaderText::from))
                    .map_err(|err| Error::dataset(&shards[shard as usize], format!("cannot read sample {} at byte {offset}: {err}", e.key)))
            }
            Location::Parquet { .. } => unreachable!("Parquet rows are listed with their headers parsed"),
        }
    });
    pb.finish_and_clear();
    let mut out = Vec::with_capacity(entries.len());
    for (e, r) in entries.into_iter().zip(results) {
        let (info, header_error) = match r? {
            Ok(i) => (Some(i), None),
            Err(h) => (None, Some(h.to_string().into_boxed_str())),
        };
        out.push(SampleMeta { key: e.key, label: e.label, len: e.len, location: e.location, info, header_error });
    }
    Ok(out)
}

/// Why a header could not be parsed, as the index keeps it.
struct HeaderText(Box<str>);

impl From<HeaderError> for HeaderText {
    fn from(h: HeaderError) -> Self {
        HeaderText(h.to_string().into_boxed_str())
    }
}

impl std::fmt::Display for HeaderText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The index file in the cache folder for a data set in a store, named from its URL.
#[cfg(feature = "remote")]
pub(crate) fn cache_path_for_url(cache_dir: Option<&Path>, url: &str) -> Option<PathBuf> {
    let dir = cache_folder(cache_dir)?;
    let h = fnv(FNV_OFFSET, url.as_bytes());
    let name = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
    let clean: String = name.chars().map(|c| if c.is_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect();
    Some(dir.join(format!("{clean}-{h:016x}.stoke-index")))
}

/// How often a process waiting for another one's index build looks again.
pub(crate) const LOCK_POLL: Duration = Duration::from_millis(250);
/// The builder touches its lock this often...
const LOCK_HEARTBEAT: Duration = Duration::from_secs(5);
/// ...so a lock untouched for this long belongs to a process that died; it is taken over.
const LOCK_STALE: Duration = Duration::from_secs(60);

/// The outcome of trying to take the build lock.
pub(crate) enum Lock {
    /// We build; the guard removes the lock when dropped.
    Acquired(BuildLock),
    /// Another live process is building; wait and load its index.
    Busy(PathBuf),
    /// No lock can be created anywhere (read-only everywhere): build without one.
    Unavailable,
}

/// A lock file `<index>.lock`, kept fresh by a heartbeat thread while the index is built.
pub(crate) struct BuildLock {
    path: PathBuf,
    /// Dropped to stop the heartbeat thread at once (it waits on the other end).
    stop: Option<std::sync::mpsc::Sender<()>>,
    beat: Option<std::thread::JoinHandle<()>>,
}

impl BuildLock {
    /// Try the lock beside each index location in turn.
    pub(crate) fn acquire(index_paths: &[PathBuf]) -> Lock {
        for p in index_paths {
            let mut lock = p.as_os_str().to_owned();
            lock.push(".lock");
            let lock = PathBuf::from(lock);
            if let Some(dir) = lock.parent() {
                let _ = fs::create_dir_all(dir);
            }
            match fs::OpenOptions::new().write(true).create_new(true).open(&lock) {
                Ok(mut f) => {
                    let _ = writeln!(f, "{}", std::process::id());
                    let (stop, stopped) = std::sync::mpsc::channel::<()>();
                    let path = lock.clone();
                    let beat = std::thread::spawn(move || {
                        // Touch the lock every LOCK_HEARTBEAT until the guard is dropped.
                        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(LOCK_HEARTBEAT) {
                            if let Ok(f) = File::options().write(true).open(&path) {
                                let _ = f.set_modified(SystemTime::now());
                            }
                        }
                    });
                    return Lock::Acquired(BuildLock { path: lock, stop: Some(stop), beat: Some(beat) });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = fs::metadata(&lock).and_then(|m| m.modified()).ok().and_then(|m| m.elapsed().ok());
                    if age.is_some_and(|a| a > LOCK_STALE) {
                        log::warn!("removing stale index lock {} (untouched for {:?})", lock.display(), age.unwrap_or_default());
                        let _ = fs::remove_file(&lock);
                    }
                    return Lock::Busy(lock);
                }
                Err(_) => continue, // not writable here: try the next location
            }
        }
        Lock::Unavailable
    }
}

impl Drop for BuildLock {
    fn drop(&mut self) {
        self.stop = None;
        if let Some(h) = self.beat.take() {
            let _ = h.join();
        }
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod parallel_map_tests {
    use super::parallel_map;

    #[test]
    fn results_come_in_index_order_at_every_thread_count_and_one_thread_is_the_callers() {
        let caller = std::thread::current().id();
        for n in [0, 1, 63, 64, 65, 300] {
            for threads in [0, 1, 2, 3] {
                let got = parallel_map(n, threads, None, |i| (i * 7, std::thread::current().id()));
                assert_eq!(
                    got.iter().map(|g| g.0).collect::<Vec<_>>(),
                    (0..n).map(|i| i * 7).collect::<Vec<_>>(),
                    "n {n}, threads {threads}"
                );
                if threads == 1 || n == 1 {
                    assert!(got.iter().all(|g| g.1 == caller), "n {n}, threads {threads}: one thread's work on the caller's");
                }
            }
        }
    }
}
