//! Persistent reader threads: compressed bytes of whole batches into reusable buffers.
//!
//! `reader_threads` threads start with the [`Reader`] and live until it is dropped (they are
//! not restarted per epoch). Work is handed out one batch per job; a batch's samples are read
//! in order into one contiguous buffer ([`ReadBatch::data`]), so the backend sees one slice per
//! batch; the buffer's memory is the backend's when it lends some ([`bytes`]: the CUDA
//! backend's pinned pool, which its decoders read in place). At most `max(prefetch_batches, reader_threads)`
//! batches are in flight (issued but not yet returned by [`Reader::next_batch`]) so that every
//! thread has work while memory stays bounded. Results are delivered strictly in step order
//! whatever the thread count, so the output does not depend on it.
//!
//! Every sample's [`AugParams`] are drawn here from `(seed, epoch, position)` and the index's
//! header facts (`1×1`, orientation 1 when the header is unreadable): backends never draw.
//!
//! A sample that cannot be read (a file deleted mid-epoch, an I/O error) is reported by key and
//! location: under [`OnError::Skip`] as [`ReadSample::error`] with empty bytes (the backend
//! substitutes), under [`OnError::Fail`] as an `Err` for its batch. A thread that panics
//! reports an error for its batch instead of leaving the consumer waiting.
//!
//! With `cache_bytes > 0`, compressed bytes are kept in RAM up to that budget as they are read
//! (so the first epoch fills the cache and later epochs read from it).
//!
//! With `transcode_progressive`, progressive JPEGs are delivered rewritten
//! as baseline ([`transcode`]), kept in RAM under their own budget (or in the cache above, when
//! it holds them): the same pixels, decoded faster, and by the GPU's hardware engine.
//!
//! [`stream::StreamReader`] is the other reader, for stream mode
//! ([`crate::config::StreamSpec`]): no per-sample index, whole shards read ahead, the same
//! [`ReadBatch`] out.

use crate::augment::params::AugParams;
use crate::augment::views::draw_views;
use crate::config::PipelineConfig;
use crate::config::{specs_at, AugmentSpec, OnError, ResolutionSchedule, Sampling, WeightSource};
use crate::error::{Error, Result};
use crate::sampler::rest::Share;
use crate::sampler::{Sampler, SamplerConfig, Weights};
use crate::source::Dataset;
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

pub mod bytes;
pub mod stream;
pub mod transcode;

use bytes::{ByteSink, BytesSource, HostBytes};
use transcode::Transcoder;

/// One sample of a [`ReadBatch`].
#[derive(Debug)]
pub struct ReadSample {
    /// Dataset index.
    pub index: usize,
    /// Position in the epoch's global order (see [`crate::sampler`]).
    pub position: u64,
    /// Where its compressed bytes are in [`ReadBatch::data`] (empty on error).
    pub bytes: Range<usize>,
    /// Augment parameters drawn for it, one per view.
    pub params: Vec<AugParams>,
    /// Class label (`-1` unlabeled, or unknown when it could not be read).
    pub label: i64,
    /// Why it could not be read (policy `skip` only); the bytes are then empty.
    pub error: Option<Error>,
}

/// The compressed bytes of one batch, in the rank's delivery order.
#[derive(Debug, Default)]
pub struct ReadBatch {
    /// Epoch.
    pub epoch: u64,
    /// Step within the epoch (batch number for this rank).
    pub step: u64,
    /// All samples' bytes, back to back (in a backend's pooled memory, each sample at its
    /// pool's alignment: [`bytes`]).
    pub data: HostBytes,
    /// The samples, in order.
    pub samples: Vec<ReadSample>,
    /// Key and location of each sample, in order: filled by the stream reader (there is no
    /// per-sample index to name them from); empty from [`Reader`].
    pub names: Vec<(String, String)>,
}

impl ReadBatch {
    /// An empty batch whose bytes go into `data`.
    pub fn with_bytes(data: HostBytes) -> Self {
        Self { data, ..Self::default() }
    }
}

struct Shared {
    dataset: Arc<Dataset>,
    sampler: Sampler,
    specs: Vec<AugmentSpec>,
    resolution: Option<ResolutionSchedule>,
    seed: u64,
    batch_size: usize,
    on_error: OnError,
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    store_in_flight: usize,
    /// The oldest generation still wanted, raised by every `start` and on drop: jobs of an
    /// older generation stop early (the next epoch's, read ahead, are newer than the current).
    floor: AtomicU64,
    cache: Vec<OnceLock<Box<[u8]>>>,
    cache_budget: u64,
    cache_used: AtomicU64,
    /// `transcode_progressive`: progressive JPEGs rewritten as baseline.
    transcoder: Option<Transcoder>,
    /// `gpu_engine_gray`: gray JPEGs declaring other sampling declared 1×1.
    gray_1x1: bool,
}

struct Job {
    generation: u64,
    epoch: u64,
    share: Arc<Share>,
    step: u64,
    batch: ReadBatch,
}

struct Done {
    generation: u64,
    step: u64,
    result: Result<ReadBatch>,
}

/// A sample's bytes held in RAM: the cache's, or its baseline rewrite's.
enum Held<'a> {
    Cache(&'a [u8]),
    Kept(Arc<[u8]>),
}

impl Held<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Held::Cache(b) => b,
            Held::Kept(b) => b,
        }
    }
}

/// Reads batches of compressed bytes with persistent threads; see the module docs.
pub struct Reader {
    shared: Arc<Shared>,
    jobs: Option<Sender<Job>>,
    results: Receiver<Done>,
    threads: Vec<JoinHandle<()>>,
    free: Vec<ReadBatch>,
    // Where new batches' buffers come from (a backend's pinned pool, or the heap).
    bytes: BytesSource,
    window: u64,
    /// The last generation handed to a segment (each segment has its own).
    generation: u64,
    /// The epoch being delivered.
    current: Option<Segment>,
    /// The epoch announced to come next ([`Reader::then`]): read once `current` is all
    /// issued, within the same window, and taken over by a `start` of exactly it.
    next: Option<Segment>,
    active: bool,
}

/// One epoch (a share of it, from a step) as the reader issues and delivers its batches.
struct Segment {
    generation: u64,
    epoch: u64,
    share: Arc<Share>,
    /// Step of the first batch (a resumed epoch's).
    start_step: u64,
    steps: u64,
    next_issue: u64,
    next_deliver: u64,
    pending: BTreeMap<u64, Result<ReadBatch>>,
}

impl Segment {
    fn new(generation: u64, epoch: u64, share: Arc<Share>, start_step: u64, batch_size: usize) -> Self {
        let steps = share.steps(batch_size);
        let start_step = start_step.min(steps);
        Self { generation, epoch, share, start_step, steps, next_issue: start_step, next_deliver: start_step, pending: BTreeMap::new() }
    }

    /// Batches issued and not delivered yet.
    fn in_flight(&self) -> u64 {
        self.next_issue - self.next_deliver
    }

    /// Whether a `start` of `epoch` with `share` from `start_step` asks for this segment's
    /// batches from where it stands (nothing of it delivered, or only what the caller holds).
    fn is(&self, epoch: u64, share: &Share, start_step: u64) -> bool {
        self.epoch == epoch && self.start_step == start_step && *self.share == *share
    }

    /// The buffers of the batches read and not delivered, for reuse.
    fn drain_into(self, free: &mut Vec<ReadBatch>) {
        free.extend(self.pending.into_values().filter_map(Result::ok));
    }
}

impl Shared {
    fn read_job(&self, job: &mut Job) -> Result<bool> {
        let b = &mut job.batch;
        b.epoch = job.epoch;
        b.step = job.step;
        b.data.clear();
        b.samples.clear();
        let order = self.sampler.epoch(job.epoch);
        let first = job.step * self.batch_size as u64;
        let last = (first + self.batch_size as u64).min(job.share.len());
        // (position, dataset index, bytes held in RAM) of the batch's samples.
        let items: Vec<(u64, usize, Option<Held<'_>>)> = (first..last)
            .map(|i| {
                let position = job.share.position(i);
                let index = order.index(position);
                let cached = self.cache.get(index).and_then(OnceLock::get).map(|b| Held::Cache(&b[..]));
                let held = cached.or_else(|| self.transcoder.as_ref().and_then(|t| t.kept(index)).map(Held::Kept));
                (position, index, held)
            })
            .collect();
        // In a store, the samples not cached are fetched together, `store_in_flight` at once.
        #[cfg(feature = "remote")]
        let mut fetched = {
            let need: Vec<usize> = items.iter().filter(|it| it.2.is_none()).map(|it| it.1).collect();
            if need.is_empty() {
                None
            } else {
                self.dataset.read_remote(&need, self.store_in_flight).map(Vec::into_iter)
            }
        };
        // The views at this epoch's size (a resolution schedule's).
        let specs = specs_at(&self.specs, self.resolution.as_ref(), job.epoch);
        for (position, index, cached) in items {
            if job.generation < self.floor.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let meta = self.dataset.sample(index);
            let (w, h, o) = match meta.info {
                Some(info) => (info.width as i32, info.height as i32, info.orientation as u32),
                None => (1, 1, 1),
            };
            let mut params = Vec::with_capacity(specs.len());
            draw_views(&specs, self.seed, job.epoch, position, w, h, o, &mut params);
            b.data.start_sample();
            let append = |b: &mut ReadBatch, bytes: &[u8]| {
                let start = b.data.len();
                b.data.extend_from_slice(bytes);
                start..b.data.len()
            };
            let read = match &cached {
                Some(held) => Ok(append(b, held.bytes())),
                #[cfg(feature = "remote")]
                None if fetched.is_some() => match fetched.as_mut().and_then(Iterator::next).expect("one per sample not cached") {
                    Ok(bytes) => Ok(append(b, &bytes)),
                    Err(e) => Err(e),
                },
                None => self.dataset.read_append(index, &mut b.data),
            };
            match read {
                Ok(mut range) => {
                    if cached.is_none() {
                        range = self.keep(index, &mut b.data, range);
                    }
                    b.samples.push(ReadSample { index, position, bytes: range, params, label: meta.label, error: None });
                }
                Err(e) => match self.on_error {
                    OnError::Fail => return Err(e),
                    OnError::Skip => {
                        let at = b.data.len();
                        b.samples.push(ReadSample {
                            index,
                            position,
                            bytes: at..at,
                            params: params.clone(),
                            label: meta.label,
                            error: Some(e),
                        });
                    }
                },
            }
        }
        Ok(true)
    }

    /// Sample `index` was read from its source into `data[range]`: rewrite it as baseline
    /// (`transcode_progressive`), keep it in RAM where a budget has room, and return where its
    /// bytes now are.
    fn keep(&self, index: usize, data: &mut HostBytes, range: Range<usize>) -> Range<usize> {
        // A gray JPEG declaring 2×2 sampling is declared 1×1 (`gpu_engine_gray`): the index
        // says which samples have one component, so colour ones cost nothing here.
        let gray = self.gray_1x1 && self.dataset.sample(index).info.is_some_and(|i| i.components == 1);
        let Some(mut baseline) = self.transcoder.as_ref().and_then(|t| t.rewrite(index, &data[range.clone()])) else {
            if gray {
                crate::codec::jpeg::declare_gray_1x1(&mut data[range.clone()]);
            }
            self.maybe_cache(index, &data[range.clone()]);
            return range;
        };
        if gray {
            crate::codec::jpeg::declare_gray_1x1(&mut baseline);
        }
        data.truncate(range.start);
        data.extend_from_slice(&baseline);
        if !self.maybe_cache(index, &baseline) {
            self.transcoder.as_ref().expect("rewritten by it").keep(index, &baseline);
        }
        range.start..data.len()
    }

    /// Keep `bytes` as sample `index`'s in the RAM cache if it is on and has room; whether it
    /// holds them now.
    fn maybe_cache(&self, index: usize, bytes: &[u8]) -> bool {
        let Some(slot) = self.cache.get(index) else { return false };
        if slot.get().is_some() {
            return true;
        }
        let n = bytes.len() as u64;
        let used = self.cache_used.fetch_add(n, Ordering::Relaxed);
        if used + n > self.cache_budget || slot.set(bytes.into()).is_err() {
            self.cache_used.fetch_sub(n, Ordering::Relaxed);
            return slot.get().is_some();
        }
        true
    }
}

fn worker(shared: Arc<Shared>, jobs: Receiver<Job>, results: Sender<Done>) {
    while let Ok(mut job) = jobs.recv() {
        let (generation, epoch, step) = (job.generation, job.epoch, job.step);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.read_job(&mut job)));
        let result = match outcome {
            Ok(Ok(true)) => Ok(job.batch),
            Ok(Ok(false)) => continue, // superseded by a newer epoch; the buffer is dropped
            Ok(Err(e)) => Err(e),
            Err(panic) => {
                let msg = crate::error::panic_message(&*panic);
                Err(Error::dataset(shared.dataset.path(), format!("reader thread panicked on epoch {epoch} step {step}: {msg}")))
            }
        };
        if results.send(Done { generation, step, result }).is_err() {
            return;
        }
    }
}

/// What the readers need of a pipeline config, derived from it as the sampler's settings are
/// ([`SamplerConfig::from_pipeline`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ReaderConfig {
    /// The augmentation of each view (one without `views`), whose parameters are drawn per
    /// sample.
    pub specs: Vec<AugmentSpec>,
    /// Each epoch's output size, over the specs' (`None`: the specs' size throughout).
    pub resolution: Option<ResolutionSchedule>,
    /// Base seed of the draws.
    pub seed: u64,
    /// Samples per batch.
    pub batch_size: usize,
    /// What a sample that cannot be read becomes.
    pub on_error: OnError,
    /// Reader threads.
    pub threads: usize,
    /// Batches read ahead.
    pub prefetch_batches: usize,
    /// RAM budget for caching compressed bytes (0 = off).
    pub cache_bytes: u64,
    /// Progressive JPEGs rewritten as baseline ([`transcode`]).
    pub transcode_progressive: bool,
    /// RAM for the rewritten bytes kept (those not in the cache).
    pub transcode_cache_bytes: u64,
    /// The decoded-size guard: larger images are not rewritten.
    pub max_decoded_pixels: u64,
    /// Gray JPEGs declaring a sampling other than 1×1 are declared 1×1, the same picture
    /// ([`crate::codec::jpeg::declare_gray_1x1`]; the config's `gpu_engine_gray`, so the
    /// hardware engine may take them).
    pub gray_1x1: bool,
    /// Ranged GETs in flight at once per reader thread, for a data set in a store.
    pub store_in_flight: usize,
}

impl ReaderConfig {
    /// The reader settings of a (validated) pipeline config.
    pub fn from_pipeline(c: &PipelineConfig) -> Self {
        Self {
            specs: c.view_specs(),
            resolution: c.resolution,
            seed: c.seed,
            batch_size: c.batch_size,
            on_error: c.on_error,
            threads: c.reader_threads,
            prefetch_batches: c.prefetch_batches,
            cache_bytes: c.cache_bytes,
            transcode_progressive: c.transcode_progressive,
            transcode_cache_bytes: c.transcode_cache_bytes,
            max_decoded_pixels: c.max_decoded_pixels,
            gray_1x1: c.gpu_engine_gray,
            store_in_flight: c.store_in_flight,
        }
    }
}

impl Reader {
    /// Start the reader threads for `dataset` with `config`'s sampler settings (see
    /// [`Reader::sampler_for`]), batch size, threads, prefetch, cache and bad-sample policy.
    pub fn new(dataset: Arc<Dataset>, config: &PipelineConfig) -> Result<Reader> {
        config.validate()?;
        let sampler = Self::sampler_for(&dataset, config)?;
        Self::with_sampler(dataset, &ReaderConfig::from_pipeline(config), sampler)
    }

    /// The sampler `config.sampling` asks for on `dataset`: an exact permutation per epoch
    /// ([`Sampling::Epoch`]) or [`Sampler::weighted`]. Per-class weights must have one entry
    /// per class of the dataset (`dataset.classes()`), and every label must be one of them;
    /// errors name the dataset and the numbers (the sampler's own errors too).
    pub fn sampler_for(dataset: &Dataset, config: &PipelineConfig) -> Result<Sampler> {
        let cfg = SamplerConfig::from_pipeline(config);
        let bad = |m: String| Error::dataset(dataset.path(), m);
        let Sampling::Weighted { weights, epoch_length } = &config.sampling else {
            return Sampler::new(dataset.len(), &cfg).map_err(|e| bad(e.to_string()));
        };
        let labels: Vec<i64> = dataset.samples().iter().map(|m| m.label).collect();
        let weights = match weights {
            WeightSource::ClassBalanced => Weights::ClassBalanced,
            WeightSource::PerClass(w) => {
                let classes = dataset.classes().len();
                if w.len() != classes {
                    return Err(bad(format!("{} class weights given but the dataset has {classes} classes", w.len())));
                }
                let mut counts = vec![0u64; classes];
                for m in dataset.samples() {
                    match usize::try_from(m.label).ok().filter(|&l| l < classes) {
                        Some(l) => counts[l] += 1,
                        None => {
                            return Err(bad(format!(
                                "sample {}: label {} has no class weight (labels must be 0..{classes})",
                                m.key, m.label
                            )))
                        }
                    }
                }
                Weights::Given(labels.iter().map(|&l| w[l as usize] / counts[l as usize] as f64).collect())
            }
        };
        let len = epoch_length.unwrap_or(dataset.len() as u64);
        Sampler::weighted(&labels, weights, len, &cfg).map_err(|e| bad(e.to_string()))
    }

    /// As [`Reader::new`] with a sampler built by the caller (weighted sampling, say).
    pub fn with_sampler(dataset: Arc<Dataset>, config: &ReaderConfig, sampler: Sampler) -> Result<Reader> {
        if config.batch_size == 0 || config.threads == 0 {
            return Err(Error::config(format!(
                "a reader needs a batch size and thread count of at least 1, got {} and {}",
                config.batch_size, config.threads
            )));
        }
        if sampler.dataset_len() != dataset.len() as u64 {
            return Err(Error::config(format!(
                "the sampler was built for {} samples but the dataset has {}",
                sampler.dataset_len(),
                dataset.len()
            )));
        }
        let cache = if config.cache_bytes > 0 { (0..dataset.len()).map(|_| OnceLock::new()).collect() } else { Vec::new() };
        let transcoder =
            config.transcode_progressive.then(|| Transcoder::new(dataset.len(), config.max_decoded_pixels, config.transcode_cache_bytes));
        let shared = Arc::new(Shared {
            dataset,
            sampler,
            specs: config.specs.clone(),
            resolution: config.resolution,
            seed: config.seed,
            batch_size: config.batch_size,
            on_error: config.on_error,
            store_in_flight: config.store_in_flight,
            floor: AtomicU64::new(0),
            cache,
            cache_budget: config.cache_bytes,
            cache_used: AtomicU64::new(0),
            transcoder,
            gray_1x1: config.gray_1x1,
        });
        let (job_tx, job_rx) = unbounded::<Job>();
        let (res_tx, res_rx) = unbounded::<Done>();
        let mut threads = Vec::with_capacity(config.threads);
        for t in 0..config.threads {
            let (s, j, r) = (shared.clone(), job_rx.clone(), res_tx.clone());
            let h = std::thread::Builder::new()
                .name(format!("stoke-reader-{t}"))
                .spawn(move || worker(s, j, r))
                .map_err(|e| Error::config(format!("cannot start reader thread {t}: {e}")))?;
            threads.push(h);
        }
        Ok(Reader {
            shared,
            jobs: Some(job_tx),
            results: res_rx,
            threads,
            free: Vec::new(),
            bytes: BytesSource::default(),
            window: config.prefetch_batches.max(config.threads) as u64,
            generation: 0,
            current: None,
            next: None,
            active: false,
        })
    }

    /// The sampler (epoch length, positions).
    pub fn sampler(&self) -> &Sampler {
        &self.shared.sampler
    }

    /// Batches per epoch for this rank (the last may be partial).
    pub fn steps(&self) -> u64 {
        self.shared.sampler.steps(self.shared.batch_size)
    }

    /// What `transcode_progressive` rewrote and keeps (zero when it is off).
    pub fn transcoded(&self) -> transcode::TranscodeStats {
        self.shared.transcoder.as_ref().map(Transcoder::stats).unwrap_or_default()
    }

    /// Bytes held by the RAM cache.
    pub fn cache_used(&self) -> u64 {
        self.shared.cache_used.load(Ordering::Relaxed)
    }

    /// Begin `epoch` at batch `start_step` (resume without replaying). Abandons whatever was
    /// in flight for the previous epoch.
    pub fn start_epoch(&mut self, epoch: u64, start_step: u64) {
        let whole = self.shared.sampler.layout().share(self.shared.sampler.whole()).expect("the sampler checked its layout");
        self.start(epoch, Arc::new(whole), start_step);
    }

    /// Begin `epoch` with this rank's `share` of the rest of it ([`crate::sampler::rest`]), at
    /// its batch `start_step`. Abandons whatever was in flight, unless this is the epoch
    /// announced by [`Self::then`]: its batches read ahead are kept and delivered (returns
    /// `true`, and the batch [`Self::try_next_epoch_first`] handed out counts as delivered).
    pub fn start(&mut self, epoch: u64, share: Arc<Share>, start_step: u64) -> bool {
        let old = self.current.take();
        let next = self.next.take();
        let continued = next.as_ref().is_some_and(|n| n.is(epoch, &share, start_step));
        let seg = match next {
            Some(n) if continued => n,
            other => {
                if let Some(n) = other {
                    n.drain_into(&mut self.free);
                }
                self.generation += 1;
                Segment::new(self.generation, epoch, share, start_step, self.shared.batch_size)
            }
        };
        if let Some(o) = old {
            o.drain_into(&mut self.free);
        }
        self.shared.floor.store(seg.generation, Ordering::Relaxed);
        self.current = Some(seg);
        self.active = true;
        self.top_up();
        continued
    }

    /// Announce the epoch that comes after the current one (`epoch`, this rank's `share` of
    /// it, from its first batch): once every batch of the current epoch is issued, its first
    /// batches are read within the same window, so the epoch starts with its bytes read (the
    /// pipeline makes the next epoch ahead). A `start` of anything else drops them.
    pub fn then(&mut self, epoch: u64, share: Arc<Share>) {
        if self.current.is_none() {
            return;
        }
        if let Some(n) = self.next.take() {
            n.drain_into(&mut self.free);
        }
        self.generation += 1;
        self.next = Some(Segment::new(self.generation, epoch, share, 0, self.shared.batch_size));
        self.top_up();
    }

    fn top_up(&mut self) {
        let Some(jobs) = &self.jobs else { return };
        let Some(cur) = self.current.as_mut() else { return };
        let mut in_flight = cur.in_flight() + self.next.as_ref().map_or(0, Segment::in_flight);
        let segments = std::iter::once(cur).chain(self.next.as_mut());
        for seg in segments {
            while seg.next_issue < seg.steps && in_flight < self.window {
                let batch = self.free.pop().unwrap_or_else(|| ReadBatch::with_bytes(self.bytes.new_bytes()));
                let job = Job { generation: seg.generation, epoch: seg.epoch, share: seg.share.clone(), step: seg.next_issue, batch };
                if jobs.send(job).is_err() {
                    return;
                }
                seg.next_issue += 1;
                in_flight += 1;
            }
            if seg.next_issue < seg.steps {
                // The next epoch's batches only after every batch of this one.
                return;
            }
        }
    }

    /// The next batch of the epoch, in order; `None` at the end of the epoch (or before
    /// [`Reader::start_epoch`]).
    pub fn next_batch(&mut self) -> Option<Result<ReadBatch>> {
        self.take(true)
    }

    /// [`Self::next_batch`] if it is already read, without waiting; `None` when it is not
    /// (or the epoch is over: the next [`Self::next_batch`] says which).
    pub fn try_next_batch(&mut self) -> Option<Result<ReadBatch>> {
        self.take(false)
    }

    /// The next batch in step order; `wait`: block for the readers (and end the epoch when
    /// it is over), else return `None` when it is not read yet.
    fn take(&mut self, wait: bool) -> Option<Result<ReadBatch>> {
        let over = self.current.as_ref().is_none_or(|c| c.next_deliver >= c.steps);
        if !self.active || over {
            if wait {
                self.active = false;
            }
            return None;
        }
        loop {
            let cur = self.current.as_mut().expect("checked above");
            if let Some(r) = cur.pending.remove(&cur.next_deliver) {
                cur.next_deliver += 1;
                self.top_up();
                return Some(r);
            }
            let done = if wait {
                match self.results.recv() {
                    Ok(d) => d,
                    Err(_) => {
                        self.active = false;
                        return Some(Err(Error::dataset(self.shared.dataset.path(), "all reader threads have stopped")));
                    }
                }
            } else {
                // Nothing read yet, or the readers are gone (the waiting call reports that).
                self.results.try_recv().ok()?
            };
            self.file(done);
        }
    }

    /// Put a finished job with its segment's batches, or its buffer back when nobody wants it.
    fn file(&mut self, done: Done) {
        let seg = self.current.iter_mut().chain(self.next.as_mut()).find(|s| s.generation == done.generation);
        match (seg, done.result) {
            (Some(seg), result) => {
                seg.pending.insert(done.step, result);
            }
            (None, Ok(b)) => self.free.push(b),
            (None, Err(_)) => {}
        }
    }

    /// The first batch of the epoch announced by [`Self::then`], once the current epoch is
    /// all delivered and that batch is read (never waits): the pipeline hands it to the
    /// backend with the current epoch's last batch, to be prepared ahead. A `start` of that
    /// epoch then continues after it; any other start leaves it the caller's to recycle.
    pub fn try_next_epoch_first(&mut self) -> Option<Result<ReadBatch>> {
        let cur = self.current.as_ref()?;
        if cur.next_deliver < cur.steps || self.next.as_ref()?.next_deliver > 0 {
            return None;
        }
        while let Ok(done) = self.results.try_recv() {
            self.file(done);
        }
        let next = self.next.as_mut()?;
        let r = next.pending.remove(&0)?;
        next.next_deliver = 1;
        self.top_up();
        Some(r)
    }

    /// Take new batches' buffers from `bytes` (a backend's pinned pool: [`bytes::HostMemory`]);
    /// the buffers kept for reuse until now are dropped, so every batch read from here on is
    /// in it (unless the pool has none to give). Call it before the first epoch starts.
    pub fn set_bytes_source(&mut self, bytes: BytesSource) {
        self.free.clear();
        self.bytes = bytes;
    }

    /// Give a batch's buffers back for reuse.
    pub fn recycle(&mut self, batch: ReadBatch) {
        if self.free.len() < self.window as usize + 2 {
            self.free.push(batch);
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // Stop in-flight jobs early, close the job queue, and wait for every thread.
        self.shared.floor.store(u64::MAX, Ordering::Relaxed);
        self.jobs = None;
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}
