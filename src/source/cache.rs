//! A node-local cache of objects read from a store (`cache_dir` + `cache_limit`): each object a
//! file, one download per object per node however many processes (the ranks of a node) read
//! it, kept across restarts, least-recently-used objects evicted to stay within the limit.
//!
//! # Invariants
//! - **An entry is whole or absent.** It is written to a temporary name in the same folder
//!   and renamed into place (atomic on one file system), so a reader never sees a partly
//!   written file, whatever process died where. Temporary files of dead writers are removed by
//!   the next eviction pass that finds them older than an hour.
//! - **An entry is the object as listed.** Its name is a hash of the object's URL and of the
//!   version (ETag or modification time) the listing gave, and its length is checked against
//!   the listed size before it is served: an object changed in the store gets a new entry,
//!   never an old one; a fetch whose version or size differ from the listing's is refused by
//!   name (the data set changed under a run).
//! - **One download per object per node.** A process holds an exclusive `flock` on one of 256
//!   lock files (by the entry's hash) while it looks for the entry and, if absent, fetches and
//!   writes it; the others wait for it and then read the file. `flock` goes with its process,
//!   so a rank that dies mid-download leaves no stale lock (MosaicML Streaming's stale shared
//!   files and lock hangs, its issues #332, #417, #689). Lock files are never removed, so no
//!   two processes can hold "the" lock of one entry through two different files.
//! - **Never above the limit.** Room is made before an entry is renamed into place, under one
//!   folder-wide lock, by removing the least recently used entries (a hit refreshes an entry's
//!   modification time); an object larger than the whole limit is served without being cached.
//!   Nothing ever waits for room, so a full cache cannot hang a reader. A reader that has
//!   opened an entry keeps reading it if another process removes it (Unix semantics).
//! - **The cache is an optimisation.** A folder that cannot be written (or a full disk) makes
//!   the cache step aside with one warning naming the folder; the object is still served from
//!   the store.

use crate::error::{Error, Result};
use bytes::Bytes;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Suffix of a complete entry.
const ENTRY: &str = "obj";
/// Lock files, one per hash prefix byte.
const LOCKS: usize = 256;
/// A temporary file older than this is a dead writer's.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// What the cache did, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Objects served from the cache folder.
    pub hits: u64,
    /// Objects fetched from the store (and written to the cache when they fit).
    pub fetches: u64,
    /// Entries removed to make room.
    pub evictions: u64,
    /// Entries found with the wrong length (removed and fetched again).
    pub bad_entries: u64,
}

/// The cache folder of one node.
#[derive(Debug)]
pub struct ObjectCache {
    dir: PathBuf,
    limit: u64,
    disabled: AtomicBool,
    hits: AtomicU64,
    fetches: AtomicU64,
    evictions: AtomicU64,
    bad_entries: AtomicU64,
}

/// 64-bit FNV-1a from `seed`: a stable hash (std's hasher may change between Rust versions,
/// and entries outlive the process).
fn fnv1a(seed: u64, parts: &[&[u8]]) -> u64 {
    let mut h = seed;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator no byte sequence can fake across parts.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The entry name of `url` at `version`: 128 bits of two FNV-1a hashes.
fn entry_key(url: &str, version: &str) -> String {
    let parts: [&[u8]; 2] = [url.as_bytes(), version.as_bytes()];
    format!("{:016x}{:016x}", fnv1a(0xcbf2_9ce4_8422_2325, &parts), fnv1a(0x8422_2325_cbf2_9ce4, &parts))
}

/// An exclusive `flock` on a file, released when dropped (or when the process ends).
struct Flock(File);

impl Flock {
    fn exclusive(path: &Path) -> std::io::Result<Flock> {
        let f = OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        loop {
            // SAFETY: a valid open descriptor; flock has no memory effects.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Flock(f));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for Flock {
    fn drop(&mut self) {
        // SAFETY: as above; closing the file would release it too.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl ObjectCache {
    /// The cache in `dir` (created when missing) holding at most `limit` bytes of entries.
    /// A folder that cannot be created or written is a named error here, before any epoch.
    pub fn open(dir: &Path, limit: u64) -> Result<ObjectCache> {
        let bad = |m: String| Error::config(format!("cache_dir {}: {m}", dir.display()));
        if limit == 0 {
            return Err(bad("cache_limit is 0: give the bytes the cache may hold, or no cache_dir".into()));
        }
        std::fs::create_dir_all(dir.join("locks")).map_err(|e| bad(format!("cannot create the folder: {e}")))?;
        let probe = dir.join(format!(".probe.{}", std::process::id()));
        std::fs::write(&probe, b"stoke").map_err(|e| bad(format!("not writable: {e}")))?;
        let _ = std::fs::remove_file(&probe);
        Ok(ObjectCache {
            dir: dir.to_path_buf(),
            limit,
            disabled: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            fetches: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            bad_entries: AtomicU64::new(0),
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What the cache did so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            fetches: self.fetches.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            bad_entries: self.bad_entries.load(Ordering::Relaxed),
        }
    }

    /// Bytes of complete entries in the folder now.
    pub fn used(&self) -> u64 {
        self.entries().iter().map(|e| e.1).sum()
    }

    fn entry_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.{ENTRY}"))
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        let stripe = usize::from_str_radix(&key[..2], 16).unwrap_or(0) % LOCKS;
        self.dir.join("locks").join(format!("{stripe:02x}.lock"))
    }

    /// Complete entries: (path, length, last use).
    fn entries(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        rd.flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == ENTRY))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((e.path(), m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
            })
            .collect()
    }

    /// The object `url` as listed (`version`, `size`): from the cache folder when an entry is
    /// there, else from `fetch` (which returns the bytes and the version the store gave with
    /// them), then kept when it fits. One process of the node fetches; the others wait for it.
    pub fn get(&self, url: &str, version: &str, size: u64, fetch: impl FnOnce() -> Result<(Bytes, String)>) -> Result<Bytes> {
        if self.disabled.load(Ordering::Relaxed) {
            return self.fetched(url, version, size, fetch);
        }
        let key = entry_key(url, version);
        let path = self.entry_path(&key);
        let _lock = match Flock::exclusive(&self.lock_path(&key)) {
            Ok(l) => l,
            Err(e) => {
                self.step_aside(&format!("cannot lock {}: {e}", self.lock_path(&key).display()));
                return self.fetched(url, version, size, fetch);
            }
        };
        match std::fs::read(&path) {
            Ok(v) if v.len() as u64 == size => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                // The last use, for the least-recently-used order.
                if let Ok(f) = File::options().write(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                return Ok(Bytes::from(v));
            }
            Ok(v) => {
                log::warn!("cache entry {} for {url} holds {} bytes, the store lists {size}: fetching it again", path.display(), v.len());
                self.bad_entries.fetch_add(1, Ordering::Relaxed);
                let _ = std::fs::remove_file(&path);
            }
            Err(_) => {}
        }
        let bytes = self.fetched(url, version, size, fetch)?;
        if size <= self.limit {
            if let Err(e) = self.insert(&key, &bytes) {
                self.step_aside(&e);
            }
        } else {
            log::debug!("{url}: {size} bytes, more than cache_limit {}: not cached", self.limit);
        }
        Ok(bytes)
    }

    /// Fetch and check against the listing.
    fn fetched(&self, url: &str, version: &str, size: u64, fetch: impl FnOnce() -> Result<(Bytes, String)>) -> Result<Bytes> {
        let (bytes, got) = fetch()?;
        self.fetches.fetch_add(1, Ordering::Relaxed);
        if !got.is_empty() && !version.is_empty() && got != version {
            return Err(Error::dataset(
                Path::new(url),
                format!(
                    "changed in the store since it was listed (version {version:?} listed, {got:?} read): the data set changed under this run; start again to list it anew"
                ),
            ));
        }
        if bytes.len() as u64 != size {
            return Err(Error::dataset(
                Path::new(url),
                format!("the store returned {} bytes, its listing says {size}: the object changed since it was listed", bytes.len()),
            ));
        }
        Ok(bytes)
    }

    /// Write `bytes` as entry `key`: a temporary file, room made under the folder's lock, the
    /// rename. Err: why the cache cannot be used (then it steps aside).
    fn insert(&self, key: &str, bytes: &[u8]) -> std::result::Result<(), String> {
        let tmp = self.dir.join(format!(".{key}.tmp.{}.{:?}", std::process::id(), std::thread::current().id()));
        let written = (|| -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_data()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("cannot write {}: {e}", tmp.display()));
        }
        let folder = Flock::exclusive(&self.dir.join("locks").join("folder.lock")).map_err(|e| {
            // The written copy goes too: a whole shard left behind until a cleanup pass.
            let _ = std::fs::remove_file(&tmp);
            format!("cannot lock the folder: {e}")
        })?;
        self.make_room(bytes.len() as u64);
        let r = std::fs::rename(&tmp, self.entry_path(key));
        drop(folder);
        r.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot rename {} into place: {e}", tmp.display())
        })
    }

    /// Remove least recently used entries until `incoming` more bytes fit; also dead writers'
    /// temporary files. Called under the folder's lock.
    fn make_room(&self, incoming: u64) {
        let mut entries = self.entries();
        let mut used: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort_by_key(|e| e.2);
        for (path, len, _) in entries {
            if used + incoming <= self.limit {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                used -= len;
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            let now = SystemTime::now();
            for e in rd.flatten() {
                let name = e.file_name();
                let old =
                    e.metadata().and_then(|m| m.modified()).ok().and_then(|t| now.duration_since(t).ok()).is_some_and(|a| a > STALE_TMP);
                if name.to_string_lossy().contains(".tmp.") && old {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }

    fn step_aside(&self, why: &str) {
        if !self.disabled.swap(true, Ordering::Relaxed) {
            log::warn!("cache_dir {}: {why}; reading from the store without the cache from now on", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(n: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; n])
    }

    #[test]
    fn a_second_read_is_a_hit_with_the_same_bytes_and_survives_a_new_cache_object() {
        let d = tempfile::tempdir().unwrap();
        let c = ObjectCache::open(d.path(), 1 << 20).unwrap();
        let a = c.get("s3://b/a.tar", "e1", 1000, || Ok((obj(1000, 7), "e1".into()))).unwrap();
        let b = c.get("s3://b/a.tar", "e1", 1000, || panic!("fetched twice")).unwrap();
        assert_eq!((a, c.stats().hits, c.stats().fetches), (b, 1, 1));
        // A restart: a new cache over the same folder finds it.
        let c2 = ObjectCache::open(d.path(), 1 << 20).unwrap();
        assert_eq!(c2.get("s3://b/a.tar", "e1", 1000, || panic!("not reused after a restart")).unwrap(), obj(1000, 7));
    }

    /// A cache whose folder lock cannot be taken steps aside and keeps no copy of the object it
    /// was writing (a whole shard otherwise, until a cleanup pass found it an hour old).
    #[test]
    fn a_folder_lock_that_cannot_be_taken_leaves_no_written_copy() {
        let d = tempfile::tempdir().unwrap();
        let c = ObjectCache::open(d.path(), 1 << 20).unwrap();
        let lock = d.path().join("locks").join("folder.lock");
        let _ = std::fs::remove_file(&lock);
        std::fs::create_dir_all(&lock).unwrap(); // a folder where the lock file goes: open fails
        let e = c.insert("k", &obj(1000, 3)).unwrap_err();
        assert!(e.contains("cannot lock the folder"), "{e}");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.iter().all(|n| !n.to_string_lossy().contains(".tmp.")), "{left:?}");
        // Through `get`: the object still comes from the store, the cache steps aside.
        assert_eq!(c.get("s3://b/x.tar", "e1", 1000, || Ok((obj(1000, 5), "e1".into()))).unwrap(), obj(1000, 5));
    }

    #[test]
    fn a_changed_object_gets_a_new_entry_and_a_wrong_length_entry_is_fetched_again() {
        let d = tempfile::tempdir().unwrap();
        let c = ObjectCache::open(d.path(), 1 << 20).unwrap();
        c.get("s3://b/a.tar", "e1", 10, || Ok((obj(10, 1), "e1".into()))).unwrap();
        // Listed now at version e2: the e1 entry is not served.
        let v2 = c.get("s3://b/a.tar", "e2", 10, || Ok((obj(10, 2), "e2".into()))).unwrap();
        assert_eq!(v2, obj(10, 2));
        // An entry cut short (as by hand, or a bad disk): refetched, never served.
        let key = entry_key("s3://b/a.tar", "e2");
        std::fs::write(c.entry_path(&key), b"short").unwrap();
        assert_eq!(c.get("s3://b/a.tar", "e2", 10, || Ok((obj(10, 2), "e2".into()))).unwrap(), obj(10, 2));
        assert_eq!(c.stats().bad_entries, 1);
    }

    #[test]
    fn a_version_or_size_other_than_listed_is_a_named_error_and_nothing_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let c = ObjectCache::open(d.path(), 1 << 20).unwrap();
        let e = c.get("s3://b/a.tar", "e1", 10, || Ok((obj(10, 1), "e9".into()))).unwrap_err().to_string();
        assert!(e.contains("s3://b/a.tar") && e.contains("changed in the store since it was listed"), "{e}");
        let e = c.get("s3://b/a.tar", "e1", 10, || Ok((obj(12, 1), "e1".into()))).unwrap_err().to_string();
        assert!(e.contains("returned 12 bytes") && e.contains("listing says 10"), "{e}");
        assert_eq!(c.used(), 0);
    }

    #[test]
    fn least_recently_used_entries_go_and_the_folder_never_exceeds_the_limit() {
        let d = tempfile::tempdir().unwrap();
        let c = ObjectCache::open(d.path(), 3000).unwrap();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            c.get(&format!("s3://b/{name}"), "v", 1000, || Ok((obj(1000, i as u8), "v".into()))).unwrap();
            // Distinct modification times, so the order of use is unambiguous.
            std::thread::sleep(Duration::from_millis(20));
        }
        // `a` used again: `b` is now the least recently used.
        c.get("s3://b/a", "v", 1000, || panic!("a was evicted")).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        c.get("s3://b/d", "v", 1000, || Ok((obj(1000, 9), "v".into()))).unwrap();
        assert!(c.used() <= 3000, "{} bytes in a 3000-byte cache", c.used());
        assert_eq!(c.stats().evictions, 1);
        c.get("s3://b/a", "v", 1000, || panic!("a was evicted instead of b")).unwrap();
        let mut refetched = false;
        c.get("s3://b/b", "v", 1000, || {
            refetched = true;
            Ok((obj(1000, 1), "v".into()))
        })
        .unwrap();
        assert!(refetched, "b should have been the one evicted");
        // Larger than the whole limit: served, not kept.
        let big = c.get("s3://b/big", "v", 5000, || Ok((obj(5000, 3), "v".into()))).unwrap();
        assert_eq!(big.len(), 5000);
        assert!(c.used() <= 3000);
    }

    #[test]
    fn an_unwritable_folder_is_a_named_error_at_open_and_a_zero_limit_too() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let e = ObjectCache::open(&file.join("cache"), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("cache_dir") && e.contains("a-file"), "{e}");
        let e = ObjectCache::open(d.path(), 0).unwrap_err().to_string();
        assert!(e.contains("cache_limit is 0"), "{e}");
    }

    #[test]
    fn many_threads_asking_for_one_object_fetch_it_once() {
        let d = tempfile::tempdir().unwrap();
        let c = std::sync::Arc::new(ObjectCache::open(d.path(), 1 << 20).unwrap());
        let fetches = std::sync::Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (c, f) = (c.clone(), fetches.clone());
                std::thread::spawn(move || {
                    c.get("s3://b/one", "v", 4096, || {
                        f.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        Ok((obj(4096, 5), "v".into()))
                    })
                    .unwrap()
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), obj(4096, 5));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1, "one download for all");
    }

    /// Processes (the ranks of a node) asking for one object at once: one download. The test
    /// runs itself again as the children (`STOKE_CACHE_CHILD`).
    #[test]
    fn processes_asking_for_one_object_at_once_download_it_once() {
        const NAME: &str = "source::cache::tests::processes_asking_for_one_object_at_once_download_it_once";
        if let Ok(dir) = std::env::var("STOKE_CACHE_CHILD") {
            let dir = PathBuf::from(dir);
            let c = ObjectCache::open(&dir.join("cache"), 1 << 20).unwrap();
            let got = c
                .get("s3://b/shared.tar", "v1", 8192, || {
                    let mut log = OpenOptions::new().create(true).append(true).open(dir.join("fetches")).unwrap();
                    writeln!(log, "{}", std::process::id()).unwrap();
                    std::thread::sleep(Duration::from_millis(300));
                    Ok((obj(8192, 4), "v1".into()))
                })
                .unwrap();
            assert_eq!(got, obj(8192, 4));
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..4)
            .map(|_| {
                std::process::Command::new(&exe)
                    .args(["--exact", NAME, "--test-threads=1"])
                    .env("STOKE_CACHE_CHILD", d.path())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut ch in children {
            assert!(ch.wait().unwrap().success(), "a child failed");
        }
        let fetches = std::fs::read_to_string(d.path().join("fetches")).unwrap();
        assert_eq!(fetches.lines().count(), 1, "downloads by process: {fetches}");
    }
}
