//! `Pipeline`: source → sampler → readers → backend → batches; orderly shutdown on drop.
//!
//! ```no_run
//! # fn main() -> stoke::Result<()> {
//! let mut config = stoke::PipelineConfig::new("/data/imagenet/train");
//! config.backend = stoke::config::BackendKind::Cpu;
//! let mut pipeline = stoke::pipeline::Pipeline::new(config)?;
//! for epoch in 0..2 {
//!     pipeline.start_epoch(epoch, 0);
//!     while let Some(batch) = pipeline.next_batch() {
//!         let batch = batch?;
//!         // ... train on batch.host_bytes(), batch.labels ...
//!         pipeline.recycle(batch); // optional: lets the next batch reuse the buffers
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! A producer thread owns the [`Reader`] and the backend: it decodes and augments batch
//! `n + 1` (up to `prefetch_batches` ahead) while the trainer works on batch `n`, and hands
//! batches over through a bounded channel. Batches come in step order, with the same bytes
//! whatever the thread counts. [`Pipeline::start_epoch`] abandons whatever the producer had
//! made for the previous epoch; dropping the pipeline stops the producer and the readers and
//! waits for them.
//!
//! **The next epoch, made ahead** (`epoch_ahead`, on by default): once an epoch's last batch
//! is read, the readers go on with the first batches of the epoch after it, and once its last
//! batch is made the producer goes on making that epoch's batches, up to `prefetch_batches`,
//! before the trainer asks for it. A `start_epoch` of exactly that epoch from its first batch
//! (the one a training loop asks for next: what `Loader` iterates when nothing else is set)
//! takes them over, so an epoch starts as any batch does instead of reading and decoding its
//! first batch while the trainer waits; any other start (another epoch, a step, a resume state)
//! drops them as a restart drops an abandoned epoch's. Those batches are the same whether made
//! ahead or not (the draws depend on the seed, epoch and position only). Each epoch run has a
//! generation of its own: the producer makes the one ahead while the consumer is still at the
//! epoch before it or has taken it over, and stops as soon as the consumer is anywhere else.

use crate::backend::{AnyBackend, Backend, BatchInput, BatchTimes, SampleIn, SlotPlan};
use crate::batch::{Batch, DecoderCounts, Images};
use crate::config::PipelineConfig;
use crate::error::{Error, Result, SlotError};
use crate::reader::stream::{StreamReader, StreamSource};
use crate::reader::{ReadBatch, Reader, ReaderConfig};
use crate::sampler::rest::{Layout, Rest, Share};
use crate::source::{Dataset, IndexOptions};
use crate::state::{OrderId, ResumeState, VERSION};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod run;
pub use run::{run_batch, run_batch_ahead, run_read_batch, run_read_batch_ahead};
use run::{Producer, Reading};

/// Where the pipeline's time went, summed since it was built.
///
/// `read_wait` is time the backend waited for compressed bytes (readers too slow);
/// `decode` and `augment` are worker thread time (sum over the pool); `backend` is the
/// elapsed time the backend spent on batches; `consumer_wait` is time `next_batch` blocked
/// (the trainer waiting on the pipeline).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Stats {
    /// Batches the backend made (the next epoch's first batches, made ahead, count once made,
    /// whether or not that epoch is then asked for).
    pub batches: u64,
    /// Samples delivered (substitutes included).
    pub images: u64,
    /// Compressed bytes decoded.
    pub bytes: u64,
    /// Samples replaced by a substitute.
    pub substitutes: u64,
    /// Time the backend waited for the readers.
    pub read_wait: Duration,
    /// Decode time, summed over worker threads.
    pub decode: Duration,
    /// Augment time, summed over worker threads.
    pub augment: Duration,
    /// Elapsed backend time.
    pub backend: Duration,
    /// Time callers of `next_batch` waited.
    pub consumer_wait: Duration,
    /// Which decoder decoded how many samples (hardware engine / CUDA decoders / CPU).
    pub decoders: DecoderCounts,
    /// GPU stage times summed over batches (all zero on the CPU backend).
    pub gpu_stages: crate::backend::GpuStageTimes,
    /// Device memory the pipeline's backend holds, bytes (0 on the CPU backend).
    pub device_bytes: u64,
    /// Pinned host memory the pipeline's backend holds, bytes (0 on the CPU backend).
    pub pinned_bytes: u64,
    /// nvJPEG's own device and pinned memory (made through stoke's allocators) and how many
    /// allocations it made; zero on the CPU backend.
    pub nvjpeg: crate::backend::NvjpegMemoryStats,
    /// `transcode_progressive`: the progressive JPEGs rewritten as baseline and kept.
    pub transcoded: crate::reader::transcode::TranscodeStats,
    /// Stream mode: the most bytes of whole shards held at once (read ahead plus in use).
    pub read_ahead_peak: u64,
    /// Stream mode: shards the epochs started with already read (by the previous epoch's read
    /// ahead).
    pub shards_read_ahead: u64,
    /// The slowest batches the backend made (by its elapsed time), slowest first; unused
    /// entries are zero. Where a batch far over the median went: its routes and stage times.
    pub slowest: [SlowBatch; SLOWEST],
}

/// How many of the slowest batches [`Stats::slowest`] keeps.
pub const SLOWEST: usize = 4;

/// One batch of [`Stats::slowest`].
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct SlowBatch {
    /// Epoch of the batch.
    pub epoch: u64,
    /// Step of the batch.
    pub step: u64,
    /// Seconds the backend spent on it.
    pub wall: f64,
    /// Seconds the backend waited for its bytes first.
    pub read_wait: f64,
    /// Which decoder decoded how many of its samples.
    pub decoders: DecoderCounts,
    /// Its GPU stage times (zero on the CPU backend).
    pub gpu: crate::backend::GpuStageTimes,
}

impl Stats {
    /// Keep `b` if it is among the [`SLOWEST`] slowest batches so far.
    fn note_slow(&mut self, b: SlowBatch) {
        if let Some(k) = self.slowest.iter().position(|s| b.wall > s.wall) {
            self.slowest[k..].rotate_right(1);
            self.slowest[k] = b;
        }
    }
}

// A batch is moved through the channel by value once per batch (224 bytes); boxing it would
// allocate per batch.
#[allow(clippy::large_enum_variant)]
enum Item {
    Batch(Result<Batch>),
    End,
}

struct Msg {
    generation: u64,
    item: Item,
}

enum Command {
    Epoch(EpochRun),
}

/// One epoch for the producer to make ([`Command::Epoch`]).
struct EpochRun {
    generation: u64,
    epoch: u64,
    share: Arc<Share>,
    start_step: u64,
    /// A run made ahead of its `start_epoch`: the generation of the run it follows, which
    /// the consumer may still be at (module docs). `None`: the consumer asked for it.
    after: Option<u64>,
}

impl EpochRun {
    /// Whether the consumer (at `at`) still wants this run's batches.
    fn wanted(&self, at: u64) -> bool {
        at == self.generation || Some(at) == self.after
    }
}

struct Shared {
    generation: AtomicU64,
    stats: Mutex<Stats>,
    /// Set by the drop: the batch the producer is making will be thrown away
    /// ([`Backend::set_stop`]), so the drop waits for one sample per worker, not a batch.
    stop: Arc<std::sync::atomic::AtomicBool>,
}

/// The batch iterator; see the module docs.
pub struct Pipeline {
    config: PipelineConfig,
    dataset: Option<Arc<Dataset>>,
    stream: Option<Arc<StreamSource>>,
    steps: u64,
    threads: usize,
    cuda: Option<Arc<cudarc::driver::CudaContext>>,
    shared: Arc<Shared>,
    commands: Option<Sender<Command>>,
    batches: Option<Receiver<Msg>>,
    free: Sender<Batch>,
    producer: Option<JoinHandle<()>>,
    /// The epoch run whose batches `next_batch` delivers.
    generation: u64,
    /// The last generation handed to an epoch run.
    issued: u64,
    /// The epoch run made ahead of its start (its generation and epoch), if one was sent.
    ahead: Option<(u64, u64)>,
    /// Whether the next epoch is made ahead (`PipelineConfig::epoch_ahead`).
    epoch_ahead: bool,
    active: bool,
    /// The order's identity, for resume states.
    order_id: OrderId,
    /// This rank's place in the world.
    layout: Layout,
    /// A fresh epoch's positions.
    whole: Rest,
    /// This rank's share of a fresh epoch.
    whole_share: Arc<Share>,
    /// The epoch running and this rank's share of it (what it started from).
    current: Option<(u64, Arc<Share>)>,
    /// Batches in the current share.
    steps_now: u64,
    /// Batches of the current share handed out so far (from its start step).
    delivered: u64,
    /// The CUDA backend's count of device batches the consumer holds, and the ring's depth.
    device_held: Option<crate::batch::device::HeldGauge>,
}

impl Pipeline {
    /// Open the dataset (building or reusing its index), start the readers and the backend.
    /// With `config.stream` set, the per-shard index and the stream reader instead
    /// ([`crate::reader::stream`]).
    pub fn new(config: PipelineConfig) -> Result<Self> {
        if config.stream.is_some() {
            config.validate()?;
            let source = StreamSource::open_with(&config.dataset, 0, &config.columns())?;
            #[cfg(feature = "remote")]
            let source = match config.stream.as_ref().and_then(|st| st.cache_dir.as_ref().map(|d| (d, st.cache_limit))) {
                Some((dir, limit)) => source.with_cache(dir, limit)?,
                None => source,
            };
            let source = Arc::new(source);
            return Self::with_stream(config, source);
        }
        let dataset = Arc::new(Dataset::open(&config.dataset, &IndexOptions { columns: config.columns(), ..IndexOptions::default() })?);
        Self::with_dataset(config, dataset)
    }

    /// Soft targets over the data set's `classes` unless the config says otherwise.
    fn set_mixup_classes(config: &mut PipelineConfig, classes: usize) -> Result<()> {
        if config.mixup.enabled() && config.mixup.num_classes == 0 {
            config.mixup.num_classes = classes.max(1);
        }
        if config.mixup.enabled() && config.mixup.num_classes < classes {
            return Err(Error::config(format!(
                "mixup num_classes {} is fewer than the dataset's {classes} classes: labels would fall outside the soft targets",
                config.mixup.num_classes,
            )));
        }
        config.validate()
    }

    /// As [`Pipeline::new`] with a dataset that is already open (per-sample index).
    pub fn with_dataset(mut config: PipelineConfig, dataset: Arc<Dataset>) -> Result<Self> {
        if config.stream.is_some() {
            return Err(Error::config("stream mode reads the per-shard facts, not an opened dataset: use Pipeline::new or with_stream"));
        }
        Self::set_mixup_classes(&mut config, dataset.classes().len())?;
        let backend = AnyBackend::new(&config, &dataset)?;
        let reader = Reader::new(dataset.clone(), &config)?;
        let s = reader.sampler();
        let order = (OrderId::per_sample(&dataset, s, config.seed, config.shuffle), s.layout(), s.whole());
        Self::start(config, backend, Reading::Index(Box::new(reader)), Some(dataset), None, order)
    }

    /// As [`Pipeline::new`] in stream mode over shards that are already open.
    pub fn with_stream(mut config: PipelineConfig, source: Arc<StreamSource>) -> Result<Self> {
        let spec = config.stream.clone().unwrap_or_default();
        config.stream = Some(spec.clone());
        Self::set_mixup_classes(&mut config, source.classes())?;
        let backend = AnyBackend::for_stream(&config, &source.set)?;
        let order = crate::sampler::shards::ShardOrderConfig {
            seed: config.seed,
            shuffle: config.shuffle,
            rank: config.rank,
            world_size: config.world_size,
            drop_last: config.drop_last,
            group: spec.group,
        };
        let reader = StreamReader::new(source.clone(), order, &ReaderConfig::from_pipeline(&config), spec.read_ahead_bytes)?;
        let o = reader.order();
        let order = (OrderId::stream(&source.set, config.seed, config.shuffle, spec.group), o.layout(), o.whole());
        Self::start(config, backend, Reading::Stream(Box::new(reader)), None, Some(source), order)
    }

    fn start(
        config: PipelineConfig,
        backend: AnyBackend,
        reader: Reading,
        dataset: Option<Arc<Dataset>>,
        stream: Option<Arc<StreamSource>>,
        (order_id, layout, whole): (OrderId, Layout, Rest),
    ) -> Result<Self> {
        let threads = backend.threads();
        let cuda = backend.cuda_context();
        let steps = reader.steps();
        let whole_share = Arc::new(layout.share(whole.clone())?);
        let epoch_ahead = config.epoch_ahead;
        let shared = Arc::new(Shared { generation: AtomicU64::new(0), stats: Mutex::new(Stats::default()), stop: Default::default() });
        let (mut backend, mut reader) = (backend, reader);
        backend.as_backend().set_stop(shared.stop.clone());
        // The readers put the bytes where the backend reads them (the CUDA backend's pinned
        // pool: its decoders then take them in place).
        reader.set_bytes_source(backend.as_backend().bytes_source());
        let (cmd_tx, cmd_rx) = unbounded();
        let (out_tx, out_rx) = bounded(config.prefetch_batches);
        let (free_tx, free_rx) = unbounded();
        let producer = Producer {
            reader,
            backend,
            dataset: dataset.clone(),
            shared: shared.clone(),
            out: out_tx,
            free: free_rx,
            config: config.clone(),
            queued: Default::default(),
            carried: None,
        };
        let handle = std::thread::Builder::new()
            .name("stoke-pipeline".into())
            .spawn(move || producer.run(cmd_rx))
            .map_err(|e| Error::config(format!("cannot start the pipeline thread: {e}")))?;
        Ok(Self {
            config,
            dataset,
            stream,
            steps,
            threads,
            cuda,
            shared,
            commands: Some(cmd_tx),
            batches: Some(out_rx),
            free: free_tx,
            producer: Some(handle),
            generation: 0,
            issued: 0,
            ahead: None,
            epoch_ahead,
            active: false,
            order_id,
            layout,
            whole,
            whole_share,
            current: None,
            steps_now: 0,
            delivered: 0,
            device_held: None,
        })
    }

    /// The dataset (keys, labels, locations of the samples in a batch's `indices`); `None` in
    /// stream mode, where batches carry their keys ([`Batch::keys`]).
    pub fn dataset(&self) -> Option<&Arc<Dataset>> {
        self.dataset.as_ref()
    }

    /// The key of the sample whose pixels are in `batch`'s `slot`: from the batch in stream
    /// mode, from the dataset otherwise.
    pub fn key(&self, batch: &Batch, slot: usize) -> String {
        match (&self.dataset, batch.keys.get(slot)) {
            (Some(d), _) => d.sample(batch.indices[slot]).key.clone(),
            (None, Some(k)) => k.clone(),
            (None, None) => String::new(),
        }
    }

    /// The shard set in stream mode (`None` otherwise).
    pub fn stream_source(&self) -> Option<&Arc<StreamSource>> {
        self.stream.as_ref()
    }

    /// The configuration it runs.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Batches per epoch for this rank (the last may be partial unless `drop_last`).
    pub fn steps_per_epoch(&self) -> u64 {
        self.steps
    }

    /// Decode/augment worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether batches come from the CUDA backend (device batches); `backend: auto` decides
    /// when the pipeline is built.
    pub fn is_cuda(&self) -> bool {
        self.cuda.is_some()
    }

    /// The CUDA context the device batches live in (`None` on the CPU backend): make the
    /// trainer's own streams in it, and wait on each batch with
    /// [`DeviceImages::wait_on`](crate::batch::DeviceImages::wait_on). Never enqueue work on
    /// stoke's streams.
    pub fn cuda_context(&self) -> Option<&Arc<cudarc::driver::CudaContext>> {
        self.cuda.as_ref()
    }

    /// Start (or restart) `epoch` at batch `start_step`: resume without replaying. Whatever was
    /// made ahead for another epoch is dropped; what was made ahead for this one (the epoch
    /// after the last one started, from its first batch: module docs) is delivered.
    pub fn start_epoch(&mut self, epoch: u64, start_step: u64) {
        self.start_share(epoch, self.whole_share.clone(), start_step);
    }

    /// Whether the epoch after the one started next is made ahead of its `start_epoch`
    /// (module docs; `PipelineConfig::epoch_ahead` sets it first). Turn it off before the
    /// last epoch of a run, so that no batches of an epoch nobody asks for are made.
    pub fn set_epoch_ahead(&mut self, on: bool) {
        self.epoch_ahead = on;
    }

    fn start_share(&mut self, epoch: u64, share: Arc<Share>, start_step: u64) {
        self.steps_now = share.steps(self.config.batch_size);
        self.delivered = start_step.min(self.steps_now);
        self.active = true;
        self.current = Some((epoch, share.clone()));
        let made_ahead = self.ahead.take().filter(|&(_, e)| e == epoch && start_step == 0 && *share == *self.whole_share);
        if let Some((generation, _)) = made_ahead {
            // The producer makes (or has made) it: take its batches over.
            self.generation = generation;
            self.shared.generation.store(generation, Ordering::SeqCst);
        } else {
            self.issued += 1;
            self.generation = self.issued;
            self.shared.generation.store(self.generation, Ordering::SeqCst);
            self.send(EpochRun { generation: self.generation, epoch, share, start_step, after: None });
        }
        if let Some(next) = epoch.checked_add(1).filter(|_| self.epoch_ahead) {
            self.issued += 1;
            self.ahead = Some((self.issued, next));
            let share = self.whole_share.clone();
            self.send(EpochRun { generation: self.issued, epoch: next, share, start_step: 0, after: Some(self.generation) });
        }
    }

    fn send(&self, run: EpochRun) {
        if let Some(c) = &self.commands {
            let _ = c.send(Command::Epoch(run));
        }
    }

    /// Where the current epoch stands after the batches handed out so far, the same on every
    /// rank ([`crate::state`]); before any epoch started, epoch 0 from its start. Save it with
    /// the model; [`Pipeline::resume`] continues from it at any world size.
    pub fn state(&self) -> ResumeState {
        match &self.current {
            Some((epoch, share)) => {
                let rest = share.after(self.delivered * self.config.batch_size as u64);
                self.state_of(*epoch, rest, self.delivered)
            }
            None => self.fresh_state(0),
        }
    }

    /// The state of `epoch` not yet started.
    pub fn fresh_state(&self, epoch: u64) -> ResumeState {
        self.state_of(epoch, self.whole.clone(), 0)
    }

    fn state_of(&self, epoch: u64, rest: Rest, step: u64) -> ResumeState {
        ResumeState {
            version: VERSION,
            epoch,
            order: self.order_id.clone(),
            rest,
            world_size: self.config.world_size,
            batch_size: self.config.batch_size,
            step,
        }
    }

    /// Continue the epoch `state` was saved in, with this pipeline's rank, world size and batch
    /// size: this rank's share of the positions no rank had delivered ([`crate::state`]).
    /// Refused, naming what differs, when the state belongs to another order (seed, shuffle,
    /// sampling, stream group, data set). A state of a complete epoch gives an empty epoch.
    pub fn resume(&mut self, state: &ResumeState) -> Result<()> {
        let share = self.check_state(state)?;
        self.start_share(state.epoch, Arc::new(share), 0);
        Ok(())
    }

    /// What [`Pipeline::resume`] checks, without starting: this rank's share of the state's
    /// rest, or why the state does not belong to this pipeline.
    pub fn check_state(&self, state: &ResumeState) -> Result<Share> {
        if state.version != VERSION {
            return Err(Error::config(format!("the resume state is version {}; this build reads version {VERSION}", state.version)));
        }
        self.order_id.check(&state.order)?;
        // A rest is the epoch's positions not delivered yet, plus the padding positions worlds
        // added (fewer than their size each): more than the epoch has again over is no real
        // state, and its share would be listed position by position.
        let (rest, epoch) = (state.rest.len(), self.whole.len());
        if rest > epoch.saturating_add(epoch.max(1 << 20)) {
            return Err(Error::config(format!(
                "the resume state has {rest} positions left, but this pipeline's epoch has {epoch}: a damaged state"
            )));
        }
        self.layout.share(state.rest.clone())
    }

    /// The rest of an epoch after `step` batches of `batch_size` per rank of a world of
    /// `world_size` that started it fresh (what a version 1 state of the Python loader says).
    pub fn rest_after(&self, world_size: usize, batch_size: usize, step: u64) -> Result<Rest> {
        if batch_size == 0 {
            return Err(Error::config("the saved batch size is 0"));
        }
        let layout = Layout { rank: 0, world_size, ..self.layout };
        let share = layout.share(self.whole.clone())?;
        let steps = share.steps(batch_size);
        if step > steps {
            return Err(Error::config(format!("the saved step {step} is past the epoch's {steps} batches")));
        }
        Ok(share.after(step.saturating_mul(batch_size as u64)))
    }

    /// Batches this rank delivers in the epoch running (a resumed epoch's rest may be shorter
    /// than [`Pipeline::steps_per_epoch`]); 0 before the first start.
    pub fn steps_now(&self) -> u64 {
        self.steps_now
    }

    /// The next batch of the current epoch, in step order; `None` at its end (or before the
    /// first [`Pipeline::start_epoch`]).
    pub fn next_batch(&mut self) -> Option<Result<Batch>> {
        match self.next_batch_unless(None, || Ok::<(), std::convert::Infallible>(())) {
            Ok(next) => next,
            Err(never) => match never {},
        }
    }

    /// [`Pipeline::next_batch`], asking `stop` every `every` while it waits, and returning its
    /// error at once, with the pipeline as it was (the batch it waited for comes with the next
    /// call). For a caller that must stay responsive while the batch is made: the Python
    /// loader checks for signals there, so Ctrl-C interrupts a wait on a slow store or a
    /// stalled producer at once. `every` `None`: wait without asking.
    pub fn next_batch_unless<E>(
        &mut self,
        every: Option<Duration>,
        mut stop: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Option<Result<Batch>>, E> {
        if !self.active {
            return Ok(None);
        }
        if let Some(gauge) = &self.device_held {
            // Every ring slot is in a batch the caller holds: the next batch could only be
            // written after the caller drops one, which it cannot do while it waits here.
            // (At the epoch's end no slot is needed: the end marker comes without one.)
            let (held, depth) = (gauge.held(), gauge.depth());
            if held >= depth && self.delivered < self.steps_now {
                return Ok(Some(Err(Error::HeldBatches { held, depth })));
            }
        }
        let Some(rx) = self.batches.as_ref() else { return Ok(None) };
        let t0 = Instant::now();
        let item = loop {
            let got = match every {
                None => rx.recv().map_err(|_| ()),
                Some(every) => match rx.recv_timeout(every) {
                    Ok(m) => Ok(m),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        if let Err(e) = stop() {
                            self.lock_stats().consumer_wait += t0.elapsed();
                            return Err(e);
                        }
                        continue;
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(()),
                },
            };
            match got {
                Ok(m) if m.generation == self.generation => break m.item,
                Ok(m) => {
                    // A batch of an abandoned epoch: recycled as `recycle` does, which gives
                    // its ring slot back at once. Sent to the queue as it was, it kept the
                    // slot until the producer's next batch drained the queue, while that
                    // producer could be waiting in the ring for that very slot: a hang.
                    if let Item::Batch(Ok(b)) = m.item {
                        self.recycle(b);
                    }
                }
                Err(()) => {
                    self.active = false;
                    return Ok(Some(Err(Error::config("the pipeline thread stopped unexpectedly"))));
                }
            }
        };
        self.lock_stats().consumer_wait += t0.elapsed();
        Ok(match item {
            Item::Batch(mut r) => {
                match &mut r {
                    Ok(b) => {
                        self.delivered += 1;
                        if let Images::Device(d) = &mut b.images {
                            self.device_held = Some(d.hand_out());
                        }
                    }
                    Err(_) => self.active = false,
                }
                Some(r)
            }
            Item::End => {
                self.active = false;
                None
            }
        })
    }

    /// Give a batch back so its buffers are reused (optional; without it each batch is a
    /// fresh allocation).
    ///
    /// A device batch gives its output-ring slot back here, at once (its release is recorded
    /// on the stream last passed to `wait_on`, as when it is dropped): a recycled batch waits
    /// in a queue until the producer makes its next batch, and a producer already waiting for
    /// a ring slot would otherwise wait for the slot that queue holds, forever.
    pub fn recycle(&self, mut batch: Batch) {
        if matches!(batch.images, Images::Device(_)) {
            batch.images = Images::Host(Default::default());
        }
        let _ = self.free.send(batch);
    }

    /// Per-stage times and counts so far.
    pub fn stats(&self) -> Stats {
        *self.lock_stats()
    }

    fn lock_stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.shared.stats.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Abandon the epoch, close the command channel, drain the batch channel (a producer
        // blocked on it wakes), then wait for it; it drops the reader, which joins its threads.
        self.shared.generation.store(u64::MAX, Ordering::SeqCst);
        self.shared.stop.store(true, Ordering::SeqCst);
        self.commands = None;
        // Batches left in the channel may hold every output-ring slot (CUDA backend) while the
        // producer waits for one: dropping the receiver does not drop them (the channel lives
        // while its sender does), so keep taking and dropping them until the producer is done.
        let batches = self.batches.take();
        if let Some(h) = self.producer.take() {
            while !h.is_finished() {
                let taken = batches.as_ref().is_some_and(|rx| {
                    !matches!(rx.recv_timeout(Duration::from_millis(5)), Err(crossbeam_channel::RecvTimeoutError::Disconnected))
                });
                if !taken {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            drop(batches);
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slowest batches are kept slowest first; a faster one than all of them is not kept,
    /// a slower one pushes the fastest out.
    #[test]
    fn the_slowest_batches_are_kept_in_order() {
        let mut s = Stats::default();
        for (step, wall) in [(0u64, 3.0), (1, 1.0), (2, 5.0), (3, 2.0), (4, 0.5), (5, 4.0)] {
            s.note_slow(SlowBatch { step, wall, ..Default::default() });
        }
        assert_eq!(s.slowest.map(|b| (b.step, b.wall)), [(2, 5.0), (5, 4.0), (0, 3.0), (3, 2.0)]);
        let mut few = Stats::default();
        few.note_slow(SlowBatch { step: 7, wall: 1.0, ..Default::default() });
        assert_eq!(few.slowest.map(|b| b.step), [7, 0, 0, 0]);
        assert_eq!(few.slowest[1].wall, 0.0, "unused entries stay zero");
    }
}
