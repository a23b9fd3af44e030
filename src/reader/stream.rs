//! The streaming reader: whole tar shards read ahead within a byte budget, samples cut out of
//! them in the order [`ShardOrder`] gives, for shard sets too large to index per sample.
//!
//! # What it holds
//! Only per-shard facts ([`ShardSet`]: name, bytes, sample count; memory O(shards)) and, per
//! epoch, the shards in the order this rank first needs them and how many of each shard's
//! samples it still has to deliver (O(shards)). No per-sample index is built.
//!
//! # Reads
//! A shard is read whole: one `read` of a local file, one GET of an object in a store (its
//! timeouts and retries are the store's, `source::remote`). `reader_threads` fetch threads
//! take the shards in first-need order. Its bytes are parsed as a tar in memory (members,
//! `.cls` labels) and checked against the facts (same byte size, same sample count). One more
//! thread cuts the epoch's batches out of the shards in memory, `prefetch_batches` ahead of
//! the consumer, into [`ReadBatch`]es as [`super::Reader`] makes them.
//!
//! # The byte budget (`read_ahead_bytes`)
//! A shard counts against the budget from when its read starts until this rank has delivered
//! its last sample of the epoch; then it is dropped. The next shard (in first-need order) is
//! read ahead only while it fits in the budget beside the shards held, or when nothing is
//! held. A shard the next batch is waiting for is read even when it does not fit: a group's
//! samples are mixed, so the shards of a group are all in use at once, and stalling on them
//! would deadlock. So the bytes held are at most `max(read_ahead_bytes, the bytes of the shards
//! in use at one point of the epoch)` (in use: first sample delivered, last one not yet); with
//! a budget of at least a group's shards (the default 1 GiB is four 256 MB shards) that is the
//! budget. Give it two groups' worth to read the next group while the current one is cut.
//!
//! # Epochs that do not start cold
//! Once every shard of the epoch is read or being read, the fetch threads go on to the shards
//! the next epoch reads first (its fresh start on this rank, in first-need order), each only
//! while it fits in the budget beside the shards held, never past it: as the epoch's last
//! shards are released, the next epoch's first group is read. When that epoch starts (the one
//! after, from its first batch), its feed begins with them; any other start drops them. A shard
//! that fails to read ahead is read again, and named, by its own epoch.
//!
//! # Samples
//! Sample `index` in shard `s` of the epoch's order becomes a [`ReadSample`] with dataset index
//! `first[s] + index` (the index the per-sample index gives the same sample: shards in listed
//! order, image members in stored order), position: its place in the rank's share
//! ([`crate::sampler::rest`]; `rank · len + i` in a fresh epoch, the rank's block of the
//! stream, as `stoke plan --stream --positions` prints), its label from its `.cls` member, and
//! augment parameters drawn from its header as the per-sample reader draws them.
//!
//! # Parquet
//! A Parquet set ([`crate::source::parquet`]) is read the same way with each row group as a
//! shard: its image (and label) column chunks are read by range and decoded, the images laid
//! back to back in memory; its bytes against the budget are the image chunk's uncompressed
//! size, and a row group larger than the whole budget is refused when the reader is made. A
//! row with a null image, a null label or a label outside the class names fails that sample
//! alone, as a sample that cannot be decoded does.
//!
//! # Failures
//! A shard that cannot be read or parsed, or that no longer matches its facts, fails each of
//! its samples: under [`OnError::Skip`] each is a read error naming the shard and why (the
//! backend substitutes it); under [`OnError::Fail`] the batch is an error naming the shard.

use super::bytes::{ByteSink, BytesSource};
use super::{ReadBatch, ReadSample, ReaderConfig};
use crate::augment::views::draw_views;
use crate::config::OnError;
use crate::error::{Error, Result};
use crate::sampler::rest::Share;
use crate::sampler::shards::{ShardOrder, ShardOrderConfig};
use crate::source::parquet::Columns;
use crate::source::shards::ShardSet;
use crate::source::tar;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// A shard set opened for streaming: its facts and where its bytes are read from.
#[derive(Debug)]
pub struct StreamSource {
    /// Per-shard facts.
    pub set: ShardSet,
    /// Dataset index of each shard's first sample (prefix sums of the counts).
    first: Vec<u64>,
    #[cfg(feature = "remote")]
    store: Option<crate::source::remote::Store>,
    /// The node cache of a store's shards (`cache_dir`), when one is set.
    #[cfg(feature = "remote")]
    cache: Option<crate::source::cache::ObjectCache>,
}

/// Member of a shard in memory: key (`stem/key`, as the per-sample index keys it), label,
/// where its bytes are.
struct Member {
    key: String,
    label: i64,
    offset: usize,
    len: usize,
    /// Where it is, for messages: `shard at byte n`, or `file row group r row i`.
    location: String,
    /// Why it is not a sample (Parquet: a null image or label, a label outside the names).
    error: Option<Box<str>>,
}

/// A shard read whole and parsed.
struct Loaded {
    bytes: Blob,
    members: Vec<Member>,
}

enum Blob {
    Local(Vec<u8>),
    #[cfg(feature = "remote")]
    Remote(bytes::Bytes),
}

impl Blob {
    fn as_slice(&self) -> &[u8] {
        match self {
            Blob::Local(v) => v,
            #[cfg(feature = "remote")]
            Blob::Remote(b) => b,
        }
    }
}

impl StreamSource {
    /// The facts of the shards `path` names (local or in a store; see [`ShardSet::open`]).
    pub fn open(path: &Path, threads: usize) -> Result<Self> {
        Self::open_with(path, threads, &Columns::default())
    }

    /// As [`Self::open`], Parquet columns found or named by `columns`.
    pub fn open_with(path: &Path, threads: usize, columns: &Columns) -> Result<Self> {
        let set = ShardSet::open_with(path, threads, columns)?;
        // Labels on all samples or none, as the per-sample index requires.
        let labelled = set.facts.iter().position(|f| f.labels[1] >= 0);
        let unlabelled = set.facts.iter().position(|f| f.samples > 0 && f.labels[0] < 0).filter(|_| set.parquet.is_none());
        if let (Some(a), Some(b)) = (labelled, unlabelled) {
            return Err(Error::dataset(
                &set.paths[b],
                format!("holds samples without a .cls label while {} has labelled ones", set.facts[a].name),
            ));
        }
        let mut first = Vec::with_capacity(set.facts.len());
        let mut at = 0u64;
        for f in &set.facts {
            first.push(at);
            at += f.samples;
        }
        #[cfg(feature = "remote")]
        let store = match set.paths.first() {
            Some(p) if crate::source::is_remote(p) => Some(crate::source::remote::Store::for_url(p)?),
            _ => None,
        };
        Ok(Self {
            set,
            first,
            #[cfg(feature = "remote")]
            store,
            #[cfg(feature = "remote")]
            cache: None,
        })
    }

    /// Keep the shards read from a store in the node cache in `dir`, at most `limit` bytes
    /// (`crate::source::cache`). Local shards are read as they are: the cache is for stores.
    #[cfg(feature = "remote")]
    pub fn with_cache(mut self, dir: &Path, limit: u64) -> Result<Self> {
        if let Some(pq) = &mut self.set.parquet {
            // Parquet: each row group's column chunks, through the same cache.
            let Some(pq) = std::sync::Arc::get_mut(pq) else {
                return Err(Error::config("cache_dir: the Parquet set is already in use; set the cache before the pipeline starts"));
            };
            pq.with_cache(dir, limit)?;
            return Ok(self);
        }
        if self.store.is_some() {
            self.cache = Some(crate::source::cache::ObjectCache::open(dir, limit)?);
        }
        Ok(self)
    }

    /// What the node cache did (None without one).
    #[cfg(feature = "remote")]
    pub fn cache_stats(&self) -> Option<crate::source::cache::CacheStats> {
        match &self.set.parquet {
            Some(pq) => pq.cache_stats(),
            None => self.cache.as_ref().map(|c| c.stats()),
        }
    }

    /// Samples in the set.
    pub fn len(&self) -> u64 {
        self.set.total()
    }

    /// Never true: an empty set is refused when the order is built.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Classes: one past the largest label of any shard (0 when unlabeled).
    pub fn classes(&self) -> usize {
        if let Some(names) = self.set.parquet.as_ref().map(|p| p.classes.len()).filter(|&n| n > 0) {
            return names;
        }
        self.set.facts.iter().map(|f| f.labels[1] + 1).max().unwrap_or(0).max(0) as usize
    }

    /// Dataset index of sample `index` of shard `shard`.
    pub fn index_of(&self, shard: usize, index: u64) -> usize {
        (self.first[shard] + index) as usize
    }

    /// Read shard `s` whole and parse it; errors name the shard.
    fn load(&self, s: usize) -> Result<Loaded> {
        if let Some(pq) = &self.set.parquet {
            let d = pq.read_group(s)?;
            let members = d
                .rows
                .into_iter()
                .enumerate()
                .map(|(i, r)| Member {
                    key: pq.key(s, i),
                    label: r.label,
                    offset: r.bytes.start,
                    len: r.bytes.len(),
                    location: pq.location(s, i),
                    error: r.error,
                })
                .collect();
            return Ok(Loaded { bytes: Blob::Local(d.data), members });
        }
        let path = &self.set.paths[s];
        let facts = &self.set.facts[s];
        #[cfg(feature = "remote")]
        let bytes = match (&self.store, &self.cache) {
            (Some(store), Some(cache)) => {
                let version = self.set.versions.get(s).map(String::as_str).unwrap_or("");
                Blob::Remote(cache.get(path, version, facts.bytes, || store.get_with_version(path))?)
            }
            (Some(store), None) => Blob::Remote(store.get(path)?),
            (None, _) => Blob::Local(std::fs::read(path).map_err(|e| Error::io(path, e))?),
        };
        #[cfg(not(feature = "remote"))]
        let bytes = Blob::Local(std::fs::read(path).map_err(|e| Error::io(path, e))?);
        let b = bytes.as_slice();
        if b.len() as u64 != facts.bytes {
            return Err(Error::dataset(
                path,
                format!(
                    "read {} bytes, but the shard's facts say {}: it was truncated or rewritten since the shard set was opened",
                    b.len(),
                    facts.bytes
                ),
            ));
        }
        let (entries, _) = tar::scan_members(Path::new(path), b, b.len() as u64, false)?;
        if let Some(e) = entries.iter().find(|e| e.label < 0 && facts.labels[1] >= 0) {
            return Err(Error::dataset(path, format!("sample {} has no .cls label, but the shard's facts say it is labelled", e.key)));
        }
        if entries.len() as u64 != facts.samples {
            return Err(Error::dataset(path, format!("holds {} samples, but its facts say {}", entries.len(), facts.samples)));
        }
        let stem = tar::shard_stem(Path::new(path));
        let members = entries
            .into_iter()
            .map(|e| {
                let offset = match e.location {
                    crate::source::Location::Tar { offset, .. } => offset as usize,
                    crate::source::Location::File | crate::source::Location::Parquet { .. } => {
                        unreachable!("tar members are located in their shard")
                    }
                };
                Member {
                    key: format!("{stem}/{}", e.key),
                    label: e.label,
                    offset,
                    len: e.len as usize,
                    location: format!("{path} at byte {offset}"),
                    error: None,
                }
            })
            .collect();
        Ok(Loaded { bytes, members })
    }
}

/// What the fetch threads and the consumer share for one epoch.
struct FeedState {
    /// First-need index of the next shard to read.
    next: usize,
    /// Bytes of the shards read or being read and not yet released.
    held: u64,
    /// First-need index the consumer is waiting for.
    waiting: Option<usize>,
    /// Read shards not yet taken by the consumer, by first-need index.
    ready: Vec<Option<std::result::Result<Arc<Loaded>, String>>>,
    /// The next epoch's first-need index of the next shard to read ahead (once every shard of
    /// this epoch is read or being read).
    ahead_next: usize,
    /// The next epoch's shards read ahead, by its first-need index.
    ahead: Vec<Option<Arc<Loaded>>>,
    cancelled: bool,
}

struct Feed {
    state: Arc<(Mutex<FeedState>, Condvar)>,
    threads: Vec<JoinHandle<()>>,
}

fn lock(s: &Mutex<FeedState>) -> MutexGuard<'_, FeedState> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shards an epoch reads, in first-need order: this epoch's, and the next one's (read ahead
/// within the budget once this epoch's are all read).
struct Needs {
    now: Vec<usize>,
    next: Vec<usize>,
}

impl Feed {
    /// Fetch threads for `needs`, the first shards of `needs.now` already read (`carried`,
    /// read ahead by the previous epoch's feed; their bytes count as held).
    fn start(
        source: Arc<StreamSource>,
        needs: Arc<Needs>,
        carried: Vec<Arc<Loaded>>,
        budget: u64,
        threads: usize,
        peak: Arc<Mutex<u64>>,
    ) -> Result<Feed> {
        // At their listed sizes, as every shard is counted when read and released: a Parquet
        // row group's listed size (its image column's) is more than its images' bytes.
        let held = needs.now[..carried.len()].iter().map(|&s| source.set.facts[s].bytes).sum();
        let next = carried.len();
        let mut ready: Vec<_> = carried.into_iter().map(|l| Some(Ok(l))).collect();
        ready.resize_with(needs.now.len(), || None);
        let ahead = (0..needs.next.len()).map(|_| None).collect();
        let state =
            Arc::new((Mutex::new(FeedState { next, held, waiting: None, ready, ahead_next: 0, ahead, cancelled: false }), Condvar::new()));
        // The feed first: should a thread fail to start, dropping it cancels and joins the ones
        // already reading (they would otherwise fill the budget and wait forever).
        let mut feed = Feed { state, threads: Vec::with_capacity(threads) };
        for t in 0..threads.min(needs.now.len() + needs.next.len()).max(1) {
            let (st, src, needs, peak) = (feed.state.clone(), source.clone(), needs.clone(), peak.clone());
            let h = std::thread::Builder::new()
                .name(format!("stoke-stream-{t}"))
                .spawn(move || fetch(&st, &src, &needs, budget, &peak))
                .map_err(|e| Error::config(format!("cannot start stream reader thread {t}: {e}")))?;
            feed.threads.push(h);
        }
        Ok(feed)
    }

    /// The next epoch's shards read ahead so far that begin `need` (the first-need order of
    /// the epoch starting now), up to the first one not (yet, or successfully) read: what a feed
    /// for that epoch starts with.
    fn take_ahead(&self, need: &[usize], needs: &Needs) -> Vec<Arc<Loaded>> {
        let mut st = lock(&self.state.0);
        let mut out = Vec::new();
        for (k, slot) in st.ahead.iter_mut().enumerate() {
            match (need.get(k), needs.next.get(k), slot.take()) {
                (Some(a), Some(b), Some(l)) if a == b => out.push(l),
                _ => break,
            }
        }
        out
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        lock(&self.state.0).cancelled = true;
        self.state.1.notify_all();
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

/// One fetch thread: reserve the next shard in first-need order when the budget allows (or
/// the consumer waits for it), read it, hand it over. Once every shard of the epoch is read or
/// being read, the next epoch's first shards, only while they fit in the budget beside the
/// shards held (so that the next epoch does not start cold: its first batch finds them read).
fn fetch(state: &(Mutex<FeedState>, Condvar), source: &StreamSource, needs: &Needs, budget: u64, peak: &Mutex<u64>) {
    let (m, cv) = state;
    loop {
        let (ahead, k, shard) = {
            let mut st = lock(m);
            let (ahead, k) = loop {
                if st.cancelled {
                    return;
                }
                if st.next < needs.now.len() {
                    let size = source.set.facts[needs.now[st.next]].bytes;
                    if st.held == 0 || st.held + size <= budget || st.waiting.is_some_and(|w| w >= st.next) {
                        st.next += 1;
                        break (false, st.next - 1);
                    }
                } else if st.ahead_next < needs.next.len() {
                    if st.held + source.set.facts[needs.next[st.ahead_next]].bytes <= budget {
                        st.ahead_next += 1;
                        break (true, st.ahead_next - 1);
                    }
                } else {
                    return;
                }
                st = cv.wait(st).unwrap_or_else(|p| p.into_inner());
            };
            let shard = if ahead { needs.next[k] } else { needs.now[k] };
            st.held += source.set.facts[shard].bytes;
            let mut p = peak.lock().unwrap_or_else(|p| p.into_inner());
            *p = (*p).max(st.held);
            (ahead, k, shard)
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| source.load(shard)));
        let r = match r {
            Ok(Ok(l)) => Ok(Arc::new(l)),
            // The message without the path: the consumer's errors name the shard themselves.
            Ok(Err(Error::Dataset { message, .. })) => Err(message),
            Ok(Err(Error::Io { source, .. })) => Err(source.to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the stream reader thread panicked reading it".to_string()),
        };
        let mut st = lock(m);
        if st.cancelled {
            return;
        }
        match (ahead, r) {
            (false, r) => st.ready[k] = Some(r),
            (true, Ok(l)) => st.ahead[k] = Some(l),
            // A shard that failed to read ahead is read again (and named) by its own epoch.
            (true, Err(_)) => st.held -= source.set.facts[shard].bytes,
        }
        cv.notify_all();
    }
}

/// One epoch's plan for this rank (O(shards)).
struct EpochPlan {
    epoch: u64,
    /// Shard → first-need index (`usize::MAX`: not needed).
    need_of: Vec<usize>,
    /// Samples still to deliver, per first-need index.
    remaining: Vec<u64>,
    /// Taken from the feed, per first-need index, until released.
    open: Vec<Option<std::result::Result<Arc<Loaded>, String>>>,
    /// The feed's state (the feed itself lives in the [`EpochRun`], so that it goes on reading
    /// the next epoch's first shards after this epoch's last batch).
    state: Arc<(Mutex<FeedState>, Condvar)>,
}

/// The thread that cuts an epoch's batches out of the shards, `prefetch_batches` ahead of
/// the consumer (so the pipeline's producer only runs the backend, as with [`super::Reader`]).
struct Assembler {
    source: Arc<StreamSource>,
    order: Arc<ShardOrder>,
    share: Arc<Share>,
    cfg: ReaderConfig,
    plan: EpochPlan,
    step: u64,
    steps: u64,
}

impl Assembler {
    fn run(mut self, out: Sender<Result<ReadBatch>>, free: Receiver<ReadBatch>, bytes: BytesSource) {
        let state = self.plan.state.clone();
        while self.step < self.steps && !lock(&state.0).cancelled {
            let b = free.try_recv().unwrap_or_else(|_| ReadBatch::with_bytes(bytes.new_bytes()));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.batch(b)));
            let r = r.unwrap_or_else(|_| {
                Err(Error::dataset(
                    &self.source.set.root,
                    format!("the stream reader panicked on epoch {} step {}", self.plan.epoch, self.step),
                ))
            });
            let failed = r.is_err();
            if out.send(r).is_err() || failed {
                return; // the consumer is gone, or the epoch ends at a failed batch
            }
            self.step += 1;
        }
    }

    /// Batch `self.step` into `b`'s buffers.
    fn batch(&mut self, mut b: ReadBatch) -> Result<ReadBatch> {
        let plan = &mut self.plan;
        (b.epoch, b.step) = (plan.epoch, self.step);
        b.data.clear();
        b.samples.clear();
        b.names.clear();
        let e = self.order.epoch(plan.epoch);
        // The views at this epoch's size (a resolution schedule's).
        let specs = crate::config::specs_at(&self.cfg.specs, self.cfg.resolution.as_ref(), plan.epoch);
        let first = self.step * self.cfg.batch_size as u64;
        for i in first..(first + self.cfg.batch_size as u64).min(self.share.len()) {
            let position = self.share.position(i);
            let at = e.stream(position % self.order.total());
            let j = plan.need_of[at.shard];
            let index = self.source.index_of(at.shard, at.index);
            let path = &self.source.set.paths[at.shard];
            let (cfg, epoch) = (&self.cfg, plan.epoch);
            let views = |w, h, o| {
                let mut params = Vec::with_capacity(specs.len());
                draw_views(&specs, cfg.seed, epoch, position, w, h, o, &mut params);
                params
            };
            match take(plan, j) {
                Ok(l) if l.members[at.index as usize].error.is_some() => {
                    let m = &l.members[at.index as usize];
                    let err = Error::sample(&m.key, &m.location, m.error.as_deref().unwrap_or_default());
                    if self.cfg.on_error == OnError::Fail {
                        return Err(err);
                    }
                    let params = views(1, 1, 1);
                    let at_end = b.data.len();
                    b.samples.push(ReadSample { index, position, bytes: at_end..at_end, params, label: m.label, error: Some(err) });
                    b.names.push((m.key.clone(), m.location.clone()));
                }
                Ok(l) => {
                    let m = &l.members[at.index as usize];
                    let bytes = &l.bytes.as_slice()[m.offset..m.offset + m.len];
                    let info = crate::codec::parse_info(bytes).ok();
                    let (w, h, o) = match &info {
                        Some(info) => (info.width as i32, info.height as i32, info.orientation as u32),
                        None => (1, 1, 1),
                    };
                    let params = views(w, h, o);
                    b.data.start_sample();
                    let start = b.data.len();
                    b.data.extend_from_slice(bytes);
                    if self.cfg.gray_1x1 && info.as_ref().is_some_and(|i| i.components == 1) {
                        crate::codec::jpeg::declare_gray_1x1(&mut b.data[start..]);
                    }
                    b.samples.push(ReadSample { index, position, bytes: start..b.data.len(), params, label: m.label, error: None });
                    b.names.push((m.key.clone(), m.location.clone()));
                }
                Err(why) => {
                    let err = Error::dataset(path, why);
                    if self.cfg.on_error == OnError::Fail {
                        return Err(err);
                    }
                    let params = views(1, 1, 1);
                    let at_end = b.data.len();
                    b.samples.push(ReadSample { index, position, bytes: at_end..at_end, params, label: -1, error: Some(err) });
                    b.names.push((format!("{}#{}", self.source.set.facts[at.shard].name, at.index), path.clone()));
                }
            }
            plan.remaining[j] -= 1;
            if plan.remaining[j] == 0 {
                plan.open[j] = None;
                let (m, cv) = &*plan.state;
                lock(m).held -= self.source.set.facts[at.shard].bytes;
                cv.notify_all();
            }
        }
        Ok(b)
    }
}

/// One epoch in flight: the assembler thread and its channels.
struct EpochRun {
    batches: Option<Receiver<Result<ReadBatch>>>,
    free: Sender<ReadBatch>,
    state: Arc<(Mutex<FeedState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    /// The fetch threads: dropped (stopped) after the batch thread.
    feed: Feed,
    needs: Arc<Needs>,
}

impl Drop for EpochRun {
    fn drop(&mut self) {
        // Wake the assembler wherever it waits (a shard: cancelled; a full channel: closed),
        // then wait for it; the feed (a field, dropped after this) then joins the fetch threads.
        lock(&self.state.0).cancelled = true;
        self.state.1.notify_all();
        self.batches = None;
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

/// Batches of compressed bytes read by whole shards; see the module docs.
pub struct StreamReader {
    source: Arc<StreamSource>,
    order: Arc<ShardOrder>,
    cfg: ReaderConfig,
    budget: u64,
    peak: Arc<Mutex<u64>>,
    carried: u64,
    run: Option<EpochRun>,
    // Batches given back for reuse, kept from epoch to epoch (a pooled buffer is pinned
    // memory: made once, not per epoch), and where new ones come from.
    free: (Sender<ReadBatch>, Receiver<ReadBatch>),
    bytes: BytesSource,
}

impl StreamReader {
    /// A reader over `source` ordered by `order`, with `config`'s batch size, threads (fetch
    /// threads), prefetch (batches cut ahead), draws and policy, holding at most
    /// `read_ahead_bytes` of shards (module docs).
    pub fn new(source: Arc<StreamSource>, order: ShardOrderConfig, config: &ReaderConfig, read_ahead_bytes: u64) -> Result<Self> {
        if config.batch_size == 0 || config.threads == 0 || read_ahead_bytes == 0 {
            return Err(Error::config(format!(
                "a stream reader needs a batch size, thread count and read-ahead of at least 1, got {}, {} and {}",
                config.batch_size, config.threads, read_ahead_bytes
            )));
        }
        if source.set.parquet.is_some() {
            if let Some(s) = source.set.facts.iter().position(|f| f.bytes > read_ahead_bytes) {
                return Err(Error::dataset(
                    &source.set.paths[s],
                    format!(
                        "{} holds {} bytes of images, more than read_ahead_bytes ({read_ahead_bytes}): raise read_ahead_bytes, or rewrite the files with smaller row groups",
                        source.set.facts[s].name, source.set.facts[s].bytes
                    ),
                ));
            }
        }
        let order = ShardOrder::new(source.set.counts(), order).map_err(|e| Error::dataset(&source.set.root, e.to_string()))?;
        Ok(Self {
            source,
            order: Arc::new(order),
            cfg: config.clone(),
            budget: read_ahead_bytes,
            peak: Arc::new(Mutex::new(0)),
            carried: 0,
            run: None,
            free: unbounded(),
            bytes: BytesSource::default(),
        })
    }

    /// Take new batches' buffers from `bytes`, as [`super::Reader::set_bytes_source`].
    pub fn set_bytes_source(&mut self, bytes: BytesSource) {
        while self.free.1.try_recv().is_ok() {}
        self.bytes = bytes;
    }

    /// The epoch order.
    pub fn order(&self) -> &ShardOrder {
        &self.order
    }

    /// The shard set.
    pub fn source(&self) -> &Arc<StreamSource> {
        &self.source
    }

    /// Batches per epoch for this rank (the last may be partial).
    pub fn steps(&self) -> u64 {
        self.order.len().div_ceil(self.cfg.batch_size as u64)
    }

    /// Bytes of shards held now (read or being read, and not yet released: read ahead plus in
    /// use), each at its listed size; 0 before the first epoch.
    pub fn held(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| lock(&r.state.0).held)
    }

    /// The most bytes of shards held at once so far (read ahead plus in use).
    pub fn peak_held(&self) -> u64 {
        *self.peak.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Shards the epochs started so far began with already read (read ahead while the epoch
    /// before them ended).
    pub fn shards_read_ahead(&self) -> u64 {
        self.carried
    }

    /// Shards of the next epoch read ahead so far by the epoch running.
    pub fn next_epoch_ready(&self) -> usize {
        self.run.as_ref().map_or(0, |r| lock(&r.state.0).ahead.iter().filter(|a| a.is_some()).count())
    }

    /// Begin `epoch` at batch `start_step`, abandoning the epoch in flight: the shards the rank
    /// needs from there, in first-need order with their sample counts, are computed
    /// ([`crate::sampler::shards::ShardEpoch::needs`]: no sample is read, no position replayed),
    /// then the fetch threads and the batch thread start.
    pub fn start_epoch(&mut self, epoch: u64, start_step: u64) -> Result<()> {
        let whole = self.order.layout().share(self.order.whole())?;
        self.start(epoch, Arc::new(whole), start_step)
    }

    /// Begin `epoch` with this rank's `share` of the rest of it ([`crate::sampler::rest`]), at
    /// its batch `start_step`, as [`Self::start_epoch`] does for a whole epoch.
    pub fn start(&mut self, epoch: u64, share: Arc<Share>, start_step: u64) -> Result<()> {
        let steps = share.steps(self.cfg.batch_size);
        let step = start_step.min(steps);
        let needs = self.order.epoch(epoch).needs_in(&share.ranges_from(step * self.cfg.batch_size as u64));
        let mut need_of = vec![usize::MAX; self.source.set.facts.len()];
        for (j, &(s, _)) in needs.iter().enumerate() {
            need_of[s] = j;
        }
        let (need, remaining): (Vec<usize>, Vec<u64>) = needs.into_iter().unzip();
        // The shards the previous epoch's feed read ahead for this one, if it starts as that
        // feed expected (the epoch after, from its start), then that feed stops.
        let carried = match self.run.take() {
            Some(run) => run.feed.take_ahead(&need, &run.needs),
            None => Vec::new(),
        };
        self.carried += carried.len() as u64;
        // What the epoch after this one reads first, should it start fresh after this one.
        let whole = self.order.layout().share(self.order.whole())?;
        let next = self.order.epoch(epoch + 1).needs_in(&whole.ranges_from(0)).into_iter().map(|(s, _)| s).collect();
        let open = (0..need.len()).map(|_| None).collect();
        let needs = Arc::new(Needs { now: need, next });
        let feed = Feed::start(self.source.clone(), needs.clone(), carried, self.budget, self.cfg.threads, self.peak.clone())?;
        let state = feed.state.clone();
        let plan = EpochPlan { epoch, need_of, remaining, open, state: state.clone() };
        let a = Assembler { source: self.source.clone(), order: self.order.clone(), share, cfg: self.cfg.clone(), plan, step, steps };
        let (tx, rx) = bounded(self.cfg.prefetch_batches.max(1));
        let (free_tx, free_rx, bytes) = (self.free.0.clone(), self.free.1.clone(), self.bytes.clone());
        let thread = std::thread::Builder::new()
            .name("stoke-stream-batches".into())
            .spawn(move || a.run(tx, free_rx, bytes))
            .map_err(|e| Error::config(format!("cannot start the stream reader's batch thread: {e}")))?;
        self.run = Some(EpochRun { batches: Some(rx), free: free_tx, state, thread: Some(thread), feed, needs });
        Ok(())
    }

    /// The next batch of the epoch; `None` at its end, after a failed batch, or before
    /// [`Self::start_epoch`].
    pub fn next_batch(&mut self) -> Option<Result<ReadBatch>> {
        self.run.as_ref()?.batches.as_ref()?.recv().ok()
    }

    /// [`Self::next_batch`] if it is already made, without waiting; `None` when it is not (or
    /// the epoch is over: the next [`Self::next_batch`] says which).
    pub fn try_next_batch(&mut self) -> Option<Result<ReadBatch>> {
        self.run.as_ref()?.batches.as_ref()?.try_recv().ok()
    }

    /// Give a batch's buffers back for reuse.
    pub fn recycle(&mut self, batch: ReadBatch) {
        if let Some(run) = &self.run {
            let _ = run.free.send(batch);
        }
    }
}

/// Shard `j` (first-need index) of the plan, waiting for the fetch threads if it is not read
/// yet; kept in the plan until its last sample is delivered. An abandoned epoch gives an error.
fn take(plan: &mut EpochPlan, j: usize) -> std::result::Result<Arc<Loaded>, String> {
    if plan.open[j].is_none() {
        let (m, cv) = &*plan.state;
        let mut st = lock(m);
        while st.ready[j].is_none() {
            if st.cancelled {
                return Err("the epoch was abandoned".into());
            }
            st.waiting = Some(j);
            cv.notify_all();
            st = cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.waiting = None;
        plan.open[j] = st.ready[j].take();
    }
    plan.open[j].clone().expect("taken above")
}
