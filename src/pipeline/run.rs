//! The producer thread's side of [`super::Pipeline`]: the readers it owns, its command loop,
//! and the glue from a read batch to the backend's inputs (`run_read_batch*`, `run_batch*`).

use super::*;

/// The per-sample readers or the stream reader.
pub(super) enum Reading {
    Index(Box<Reader>),
    Stream(Box<StreamReader>),
}

impl Reading {
    pub(super) fn steps(&self) -> u64 {
        match self {
            Reading::Index(r) => r.steps(),
            Reading::Stream(r) => r.steps(),
        }
    }

    /// Start an epoch; `true` when the readers continue the one announced by [`Self::then`].
    fn start(&mut self, epoch: u64, share: Arc<Share>, start_step: u64) -> Result<bool> {
        match self {
            Reading::Index(r) => Ok(r.start(epoch, share, start_step)),
            Reading::Stream(r) => r.start(epoch, share, start_step).map(|()| false),
        }
    }

    /// The epoch after the current one (the stream reader reads its first shards ahead by
    /// its own budget already).
    fn then(&mut self, epoch: u64, share: Arc<Share>) {
        match self {
            Reading::Index(r) => r.then(epoch, share),
            Reading::Stream(_) => {}
        }
    }

    fn try_next_epoch_first(&mut self) -> Option<Result<ReadBatch>> {
        match self {
            Reading::Index(r) => r.try_next_epoch_first(),
            Reading::Stream(_) => None,
        }
    }

    pub(super) fn set_bytes_source(&mut self, bytes: crate::reader::bytes::BytesSource) {
        match self {
            Reading::Index(r) => r.set_bytes_source(bytes),
            Reading::Stream(r) => r.set_bytes_source(bytes),
        }
    }

    fn next_batch(&mut self) -> Option<Result<ReadBatch>> {
        match self {
            Reading::Index(r) => r.next_batch(),
            Reading::Stream(r) => r.next_batch(),
        }
    }

    fn try_next_batch(&mut self) -> Option<Result<ReadBatch>> {
        match self {
            Reading::Index(r) => r.try_next_batch(),
            Reading::Stream(r) => r.try_next_batch(),
        }
    }

    fn recycle(&mut self, b: ReadBatch) {
        match self {
            Reading::Index(r) => r.recycle(b),
            Reading::Stream(r) => r.recycle(b),
        }
    }

    fn peak_held(&self) -> u64 {
        match self {
            Reading::Index(_) => 0,
            Reading::Stream(r) => r.peak_held(),
        }
    }

    fn transcoded(&self) -> crate::reader::transcode::TranscodeStats {
        match self {
            Reading::Index(r) => r.transcoded(),
            Reading::Stream(_) => Default::default(),
        }
    }

    fn shards_read_ahead(&self) -> u64 {
        match self {
            Reading::Index(_) => 0,
            Reading::Stream(r) => r.shards_read_ahead(),
        }
    }
}

pub(super) struct Producer {
    pub(super) reader: Reading,
    pub(super) backend: AnyBackend,
    pub(super) dataset: Option<Arc<Dataset>>,
    pub(super) shared: Arc<Shared>,
    pub(super) out: Sender<Msg>,
    pub(super) free: Receiver<Batch>,
    pub(super) config: PipelineConfig,
    /// Commands received while an epoch ran, in order.
    pub(super) queued: std::collections::VecDeque<EpochRun>,
    /// The first batch of the epoch made ahead, read and handed to the backend with the
    /// last batch of the epoch before it (`Backend::run_ahead`): that epoch's first batch.
    pub(super) carried: Option<Result<ReadBatch>>,
}

impl Producer {
    pub(super) fn run(mut self, commands: Receiver<Command>) {
        loop {
            let run = match self.queued.pop_front() {
                Some(r) => r,
                None => match commands.recv() {
                    Ok(Command::Epoch(r)) => r,
                    Err(_) => return,
                },
            };
            // A run made ahead that the consumer has gone past: nothing to make.
            if !run.wanted(self.at()) {
                continue;
            }
            if !self.epoch(&run, &commands) {
                return;
            }
        }
    }

    /// The generation the consumer is at.
    fn at(&self) -> u64 {
        self.shared.generation.load(Ordering::SeqCst)
    }

    /// Take the commands sent so far; announce to the readers the epoch made ahead after
    /// `run`, once its command is here.
    fn poll(&mut self, run: &EpochRun, commands: &Receiver<Command>, announced: &mut bool) {
        while let Ok(Command::Epoch(r)) = commands.try_recv() {
            self.queued.push_back(r);
        }
        if !*announced {
            if let Some(next) = self.queued.iter().find(|r| r.after == Some(run.generation)) {
                self.reader.then(next.epoch, next.share.clone());
                *announced = true;
            }
        }
    }

    /// Run one epoch; false when the consumer is gone.
    fn epoch(&mut self, run: &EpochRun, commands: &Receiver<Command>) -> bool {
        let (generation, epoch, start_step) = (run.generation, run.epoch, run.start_step);
        let carried = self.carried.take();
        let continued = match self.reader.start(epoch, run.share.clone(), start_step) {
            Ok(c) => c,
            Err(e) => return self.out.send(Msg { generation, item: Item::Batch(Err(e)) }).is_ok(),
        };
        // The readers' next epoch's first batch, taken with the last batch before: this
        // epoch's first when the readers continue it (they count it as delivered).
        let mut ahead: Option<Result<ReadBatch>> = match carried {
            Some(c) if continued => Some(c),
            Some(Ok(b)) => {
                self.reader.recycle(b);
                None
            }
            _ => None,
        };
        let mut announced = false;
        let looks_ahead = self.backend.as_backend().looks_ahead();
        loop {
            self.poll(run, commands, &mut announced);
            if !run.wanted(self.at()) {
                // Superseded by a newer start_epoch (or shutting down).
                if let Some(Ok(b)) = ahead.take() {
                    self.reader.recycle(b);
                }
                return true;
            }
            let t0 = Instant::now();
            let Some(read) = ahead.take().or_else(|| self.reader.next_batch()) else { break };
            let read_wait = t0.elapsed();
            let item = match read {
                Ok(rb) => {
                    if looks_ahead {
                        ahead = self.reader.try_next_batch();
                        if ahead.is_none() && announced {
                            // This epoch's last batch: the next epoch's first, when it is read.
                            self.carried = self.reader.try_next_epoch_first();
                        }
                    }
                    let carried = self.carried.take();
                    let r = self.process(&rb, ahead.as_ref().or(carried.as_ref()).and_then(|a| a.as_ref().ok()));
                    self.carried = carried;
                    self.reader.recycle(rb);
                    r.map(|(batch, times, bytes)| {
                        let mut s = self.shared.stats.lock().unwrap_or_else(|p| p.into_inner());
                        s.batches += 1;
                        s.images += batch.len() as u64;
                        s.bytes += bytes;
                        s.substitutes += batch.substitutes.len() as u64;
                        s.decoders += batch.decoders;
                        s.read_wait += read_wait;
                        s.decode += times.decode;
                        s.augment += times.augment;
                        s.backend += times.wall;
                        s.gpu_stages += times.gpu;
                        s.note_slow(SlowBatch {
                            epoch: batch.epoch,
                            step: batch.step,
                            wall: times.wall.as_secs_f64(),
                            read_wait: read_wait.as_secs_f64(),
                            decoders: batch.decoders,
                            gpu: times.gpu,
                        });
                        (s.device_bytes, s.pinned_bytes) = self.backend.held_bytes();
                        s.nvjpeg = self.backend.nvjpeg_memory();
                        s.read_ahead_peak = self.reader.peak_held();
                        s.shards_read_ahead = self.reader.shards_read_ahead();
                        s.transcoded = self.reader.transcoded();
                        batch
                    })
                }
                Err(e) => Err(e),
            };
            let failed = item.is_err();
            if self.out.send(Msg { generation, item: Item::Batch(item) }).is_err() {
                return false;
            }
            if failed {
                return true;
            }
        }
        self.out.send(Msg { generation, item: Item::End }).is_ok()
    }

    fn process(&mut self, rb: &ReadBatch, ahead: Option<&ReadBatch>) -> Result<(Batch, BatchTimes, u64)> {
        let bytes = rb.samples.iter().map(|s| s.bytes.len() as u64).sum();
        let mut batch = self.free.try_recv().unwrap_or_else(|_| Batch::new_host(self.config.output.dtype, self.config.output.layout));
        let times = run_read_batch_ahead(self.backend.as_backend(), rb, ahead, self.dataset.as_deref(), &mut batch)?;
        Ok((batch, times, bytes))
    }
}

/// Run `backend` on a reader's batch: labels and read failures as the reader reported them,
/// keys and locations from `dataset` (from the batch's own names in stream mode, `None`; they
/// are then also put in [`Batch::keys`]). The one place a [`ReadBatch`] becomes a
/// backend's input: the pipeline's producer and the tests both call it.
pub fn run_read_batch(backend: &mut dyn Backend, rb: &ReadBatch, dataset: Option<&Dataset>, batch: &mut Batch) -> Result<BatchTimes> {
    run_read_batch_ahead(backend, rb, None, dataset, batch)
}

/// [`run_read_batch`], telling the backend which batch comes next (`ahead`, the reader's next
/// batch when it is already read: [`Backend::run_ahead`]).
pub fn run_read_batch_ahead(
    backend: &mut dyn Backend,
    rb: &ReadBatch,
    ahead: Option<&ReadBatch>,
    dataset: Option<&Dataset>,
    batch: &mut Batch,
) -> Result<BatchTimes> {
    // One small vector per batch (it borrows the batch's bytes); nothing per sample.
    let samples = sample_inputs(rb);
    let next = ahead.map(sample_inputs);
    let next = next.as_deref().zip(ahead).map(|(samples, rb)| BatchInput { epoch: rb.epoch, step: rb.step, samples });
    let name = |i: usize| match dataset {
        Some(d) => {
            let idx = rb.samples[i].index;
            (d.sample(idx).key.clone(), d.location(idx))
        }
        None => rb.names[i].clone(),
    };
    let times = run_batch_ahead(backend, BatchInput { epoch: rb.epoch, step: rb.step, samples: &samples }, next, &name, batch)?;
    batch.keys.clear();
    if dataset.is_none() {
        // Each slot's key: the sample whose pixels it holds (a substitute's source).
        for &idx in &batch.indices {
            let i = rb.samples.iter().position(|s| s.index == idx).unwrap_or(0);
            batch.keys.push(rb.names[i].0.clone());
        }
    }
    Ok(times)
}

/// The backend's view of a reader's batch: labels, bytes, params, and read failures as the
/// reader reported them (the reason only: the pipeline adds the key and location).
fn sample_inputs(rb: &ReadBatch) -> Vec<SampleIn<'_>> {
    rb.samples
        .iter()
        .map(|s| SampleIn {
            index: s.index,
            position: s.position,
            label: s.label,
            bytes: &rb.data[s.bytes.clone()],
            params: &s.params,
            read_error: s.error.as_ref().map(|e| {
                SlotError::Read(match e {
                    Error::Sample { message, .. } => message.clone(),
                    e => e.to_string(),
                })
            }),
        })
        .collect()
}

/// At most this many failed samples are spelled out (location and reason) in the error of a
/// batch with nothing good; the rest are counted by kind.
const NOTHING_GOOD_LISTED: usize = 8;

/// The message of a batch in which no sample could be read or decoded (under `skip`): how many
/// failed of each kind, then each of the first [`NOTHING_GOOD_LISTED`] samples' location and
/// reason — a batch of different failures shows all of them, not the first alone.
fn nothing_good_message(status: &[Option<crate::error::SlotError>], name: &dyn Fn(usize) -> (String, String)) -> String {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for e in status.iter().flatten() {
        match kinds.iter_mut().find(|(k, _)| *k == e.kind()) {
            Some((_, n)) => *n += 1,
            None => kinds.push((e.kind(), 1)),
        }
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let failed: Vec<(usize, &crate::error::SlotError)> = status.iter().enumerate().filter_map(|(i, e)| Some((i, e.as_ref()?))).collect();
    let mut listed: Vec<String> = failed
        .iter()
        .take(NOTHING_GOOD_LISTED)
        .map(|(i, e)| {
            let (key, location) = name(*i);
            format!("{key} ({location}): {e}")
        })
        .collect();
    if failed.len() > NOTHING_GOOD_LISTED {
        listed.push(format!("and {} more", failed.len() - NOTHING_GOOD_LISTED));
    }
    format!("no sample of the batch could be read or decoded, nothing to substitute ({}): {}", counts.join(", "), listed.join("; "))
}

/// Run `backend` on `input` and settle the batch's records from what it reports: under the
/// policy's [`SlotPlan`], a replaced slot gets a [`Substitute`](crate::batch::Substitute) record
/// naming both samples, and a batch the plan does not deliver is an [`Error::Sample`] naming
/// the failed sample (`fail`) or every key (`skip` with nothing good). `name(i)` is slot `i`'s
/// key and location.
pub fn run_batch(
    backend: &mut dyn Backend,
    input: BatchInput<'_, '_>,
    name: &dyn Fn(usize) -> (String, String),
    batch: &mut Batch,
) -> Result<BatchTimes> {
    run_batch_ahead(backend, input, None, name, batch)
}

/// [`run_batch`] through [`Backend::run_ahead`]: the backend may prepare `ahead`, the batch
/// that comes next, while it runs `input`.
pub fn run_batch_ahead(
    backend: &mut dyn Backend,
    input: BatchInput<'_, '_>,
    ahead: Option<BatchInput<'_, '_>>,
    name: &dyn Fn(usize) -> (String, String),
    batch: &mut Batch,
) -> Result<BatchTimes> {
    let run = backend.run_ahead(input, ahead, batch)?;
    let samples = input.samples;
    match &run.plan {
        SlotPlan::Fail { slot } => {
            let (key, location) = name(*slot);
            let why = run.status[*slot].as_ref().map(ToString::to_string).unwrap_or_default();
            Err(Error::sample(key, location, why))
        }
        SlotPlan::NothingGood => {
            let keys: Vec<String> = (0..samples.len()).map(|i| name(i).0).collect();
            Err(Error::sample(
                keys.join(", "),
                format!("epoch {} step {}", input.epoch, input.step),
                nothing_good_message(&run.status, name),
            ))
        }
        SlotPlan::Deliver { sources } => {
            batch.substitutes.clear();
            for (i, st) in run.status.iter().enumerate() {
                let Some(error) = st else { continue };
                let j = sources[i];
                let (key, location) = name(i);
                batch.substitutes.push(crate::batch::Substitute {
                    slot: i,
                    position: samples[i].position,
                    index: samples[i].index,
                    key,
                    location,
                    reason: error.to_string(),
                    error: error.clone(),
                    replaced_by: samples[j].index,
                    replaced_by_key: name(j).0,
                });
            }
            Ok(run.times)
        }
    }
}
