//! Decode + augment backends: what a backend is given (the batch's samples), what it reports,
//! the one [`Backend`] contract both implement, and the dispatch between them ([`AnyBackend`]).

pub mod cpu;
pub mod cuda;
pub(crate) mod helpers;

use crate::augment::AugParams;
pub use crate::backend::cuda::nvjpeg::memory::NvjpegMemoryStats;
use crate::batch::Batch;
use crate::config::{OnError, PipelineConfig};
use crate::error::{Error, Result, SlotError};
use crate::source::Dataset;
use std::time::Duration;

/// One sample handed to the backend.
#[derive(Clone, Debug)]
pub struct SampleIn<'a> {
    /// Dataset index.
    pub index: usize,
    /// Epoch position.
    pub position: u64,
    /// Class label.
    pub label: i64,
    /// Compressed bytes (empty when `read_error` is set).
    pub bytes: &'a [u8],
    /// Augment parameters drawn for it, one per view (one without `views`).
    pub params: &'a [AugParams],
    /// Why it could not be read, if it could not.
    pub read_error: Option<SlotError>,
}

/// Where the time of one batch went. `decode` and `augment` are summed over the workers
/// (thread time); `wall` is the batch's elapsed time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchTimes {
    /// Time spent decoding, summed over workers.
    pub decode: Duration,
    /// Time spent in the augment math, summed over workers.
    pub augment: Duration,
    /// Elapsed time for the batch.
    pub wall: Duration,
    /// The CUDA backend's stage times (zero on the CPU backend).
    pub gpu: GpuStageTimes,
}

/// One batch for a backend: where it sits in the epoch and its samples. Backends know samples
/// by slot only; keys and locations are the pipeline's (it owns the dataset).
#[derive(Clone, Copy, Debug)]
pub struct BatchInput<'s, 'b> {
    /// Epoch of the batch.
    pub epoch: u64,
    /// Step (batch number) inside the epoch.
    pub step: u64,
    /// The samples, in slot order.
    pub samples: &'s [SampleIn<'b>],
}

/// A decode + augment backend: turns one batch's samples into the batch tensor, reports each
/// slot's status and applies the `on_error` policy's [`SlotPlan`] to the pixels and the
/// per-slot records (docs/CONTRACTS.md, contract 4). The substitute records and the errors that
/// name samples are the pipeline's ([`crate::pipeline::run_batch`]).
pub trait Backend {
    /// Decode and augment `input` into `batch` (whose buffers are reused). A slot that fails is
    /// not an error here: it is in the returned status and plan. When the plan does not deliver
    /// the batch, its pixels are unspecified.
    fn run(&mut self, input: BatchInput<'_, '_>, batch: &mut Batch) -> Result<BatchRun>;

    /// [`Backend::run`], told which batch comes next (`ahead`), so that the backend may
    /// prepare it while this one runs: the CUDA backend stages and routes it while the
    /// hardware engine decodes this one. The next call is expected to be for `ahead`; if it is
    /// not (a new epoch started), what was prepared is dropped, never used. The batch made is
    /// the one `run` makes, bit for bit. By default `ahead` is ignored.
    fn run_ahead(&mut self, input: BatchInput<'_, '_>, ahead: Option<BatchInput<'_, '_>>, batch: &mut Batch) -> Result<BatchRun> {
        let _ = ahead;
        self.run(input, batch)
    }

    /// Whether [`Backend::run_ahead`] uses `ahead` (the pipeline then hands it the reader's
    /// next batch when that is already read).
    fn looks_ahead(&self) -> bool {
        false
    }

    /// CPU worker threads (decode/augment on the CPU backend, CPU-route decodes on CUDA).
    fn threads(&self) -> usize;

    /// Device and pinned host bytes the backend holds (zero on the CPU backend).
    fn held_bytes(&self) -> (u64, u64) {
        (0, 0)
    }

    /// nvJPEG's own memory through stoke's allocators and its allocations (zero on the CPU
    /// backend).
    fn nvjpeg_memory(&self) -> NvjpegMemoryStats {
        NvjpegMemoryStats::default()
    }

    /// Where the readers should put batches' bytes: the CUDA backend's pinned pool, which its
    /// decoders then read in place (no staging copy); the heap by default. A batch whose bytes
    /// lie elsewhere (a caller's own buffers) is still taken.
    fn bytes_source(&self) -> crate::reader::bytes::BytesSource {
        Default::default()
    }

    /// A flag the owner sets when whatever batch is being made will be thrown away (the
    /// pipeline is being dropped): the backend may then skip the samples it has not started,
    /// so that the drop (and a process's exit after Ctrl-C or SIGTERM) does not wait for a
    /// whole batch of large images. By default it is ignored.
    fn set_stop(&mut self, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        let _ = stop;
    }
}

/// The backend a pipeline runs, chosen from the config.
#[allow(clippy::large_enum_variant)]
pub enum AnyBackend {
    /// The CPU backend.
    Cpu(cpu::CpuBackend),
    /// The CUDA backend.
    Cuda(Box<cuda::pipeline::CudaBackend>),
}

impl AnyBackend {
    /// Build the backend `config` asks for (`auto`: CUDA when a usable GPU is there, else the
    /// CPU, with a warning that says why).
    pub fn new(config: &PipelineConfig, dataset: &Dataset) -> Result<Self> {
        Self::choose(config, || cuda::pipeline::CudaBackend::new(config, dataset))
    }

    fn choose(config: &PipelineConfig, cuda: impl FnOnce() -> Result<cuda::pipeline::CudaBackend>) -> Result<Self> {
        use crate::config::BackendKind;
        match config.backend {
            BackendKind::Cpu => Ok(Self::Cpu(cpu::CpuBackend::new(config)?)),
            BackendKind::Cuda => Ok(Self::Cuda(Box::new(cuda()?))),
            BackendKind::Auto => match cuda() {
                Ok(b) => Ok(Self::Cuda(Box::new(b))),
                Err(Error::Gpu(e)) => {
                    log::warn!("backend auto: no usable GPU, using the CPU backend ({e})");
                    Ok(Self::Cpu(cpu::CpuBackend::new(config)?))
                }
                Err(e) => Err(e),
            },
        }
    }

    /// The backend for stream mode over shards with these facts. The CUDA backend sizes its
    /// staging and decode arenas from each shard's largest sample
    /// ([`cuda::pipeline::IndexBounds::from_shards`]); facts without them (a version 1
    /// sidecar) leave only the CPU backend: `cuda` is refused saying so, `auto` takes the CPU
    /// with a warning.
    pub fn for_stream(config: &PipelineConfig, set: &crate::source::shards::ShardSet) -> Result<Self> {
        use crate::config::BackendKind;
        let bounds = cuda::pipeline::IndexBounds::from_shards(&set.facts, config.batch_size, config.max_decoded_pixels);
        match (config.backend, bounds) {
            (BackendKind::Cpu, _) => Ok(Self::Cpu(cpu::CpuBackend::new(config)?)),
            (_, Some(b)) => Self::choose(config, || cuda::pipeline::CudaBackend::for_shards(config, b)),
            // Parquet: the row groups' largest images, measured by reading each row group once
            // per set (saved for the next start), and only when there is a GPU to size
            // buffers for.
            (_, None) if set.parquet.is_some() => Self::choose(config, || {
                drop(cuda::open_for_pipeline(config.device)?);
                let pq = set.parquet.as_ref().expect("checked");
                let mut facts = set.facts.clone();
                for (f, l) in facts.iter_mut().zip(pq.largest_saved(0, None)) {
                    f.largest = Some(l);
                }
                let b = cuda::pipeline::IndexBounds::from_shards(&facts, config.batch_size, config.max_decoded_pixels)
                    .expect("every row group measured");
                cuda::pipeline::CudaBackend::for_shards(config, b)
            }),
            (kind, None) => {
                let why = format!(
                    "the shard facts of {} do not give each shard's largest sample ({} is version 1, from an older stoke pack): the CUDA backend cannot size its buffers; write it again with stoke pack, or delete it to have the facts read from the shards",
                    set.root,
                    crate::source::shards::SIDECAR
                );
                if kind == BackendKind::Cuda {
                    return Err(Error::config(format!("backend cuda in stream mode: {why}")));
                }
                log::warn!("backend auto in stream mode: using the CPU backend: {why}");
                Ok(Self::Cpu(cpu::CpuBackend::new(config)?))
            }
        }
    }

    /// The backend as the common contract.
    pub fn as_backend(&mut self) -> &mut dyn Backend {
        match self {
            Self::Cpu(b) => b,
            Self::Cuda(b) => b.as_mut(),
        }
    }

    /// CPU worker threads.
    pub fn threads(&self) -> usize {
        match self {
            Self::Cpu(b) => b.threads(),
            Self::Cuda(b) => Backend::threads(b.as_ref()),
        }
    }

    /// Device and pinned host bytes held.
    pub fn held_bytes(&self) -> (u64, u64) {
        match self {
            Self::Cpu(b) => b.held_bytes(),
            Self::Cuda(b) => Backend::held_bytes(b.as_ref()),
        }
    }

    /// nvJPEG's own memory and allocations ([`Backend::nvjpeg_memory`]).
    pub fn nvjpeg_memory(&self) -> NvjpegMemoryStats {
        match self {
            Self::Cpu(b) => b.nvjpeg_memory(),
            Self::Cuda(b) => Backend::nvjpeg_memory(b.as_ref()),
        }
    }

    /// The CUDA context of the CUDA backend's device (`None` on the CPU backend).
    pub fn cuda_context(&self) -> Option<std::sync::Arc<cudarc::driver::CudaContext>> {
        match self {
            Self::Cpu(_) => None,
            Self::Cuda(b) => Some(b.gpu().ctx().clone()),
        }
    }
}

/// CPU seconds (user + system) the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): its
/// difference across a call says whether the call computed (or spun) or slept.
pub fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec; this clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Per-batch GPU stage times in seconds (CUDA events where the work runs on a stream, host
/// wall time for host work); all zero on the CPU backend. Sums and differences of them are
/// stage times over several batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct GpuStageTimes {
    /// Host, on the producer's thread: header parse and routing of the batch (when it was not
    /// prepared ahead) and the placing of its images in the decode arena.
    pub classify: f64,
    /// Hardware JPEG engine calls (CUDA events).
    pub hw_decode: f64,
    /// Host seconds spent inside the hardware engine's calls (until each returned): near
    /// `hw_decode` when a call holds the host until the engine is done, small when it only
    /// queues the work.
    pub hw_host: f64,
    /// CPU seconds the calling thread used inside the hardware engine's calls: near
    /// `hw_host` when a call computes or spins while it holds the host, near zero when it
    /// sleeps (`gpu_wait = block`, or a driver that blocks there anyway).
    pub hw_host_cpu: f64,
    /// CUDA (hybrid / GPU-hybrid) decoders (CUDA events).
    pub cuda_decode: f64,
    /// CPU seconds the CUDA decoders' lanes used in nvJPEG's host phase (parse, check,
    /// `nvjpegDecodeJpegHost`: the Huffman decoding for the hybrid decoder), all lanes summed.
    pub cuda_huffman_cpu: f64,
    /// CPU seconds the lanes used queuing the device phase (`nvjpegDecodeJpegTransferToDevice`,
    /// `nvjpegDecodeJpegDevice`): more than a little means nvJPEG waits inside them.
    pub cuda_queue_cpu: f64,
    /// CPU seconds the lanes used waiting for a slot's previous image (near zero when the wait
    /// sleeps or there is none, its wall time when it spins).
    pub cuda_wait_cpu: f64,
    /// The batched GPU-hybrid route's call (CUDA events around it, its host part included;
    /// zero when it is off or took nothing).
    pub hybrid_decode: f64,
    /// CPU route: libjpeg-turbo decode + upload (host wall); for a batch whose CPU decodes
    /// started while the batch before it decoded, only what it still waited for them.
    pub cpu_route: f64,
    /// The fused augment kernel(s) (CUDA events).
    pub augment: f64,
    /// Host, on a thread of its own: staging and routing the next batch while this one
    /// decoded ([`Backend::run_ahead`]; off the producer's path).
    pub ahead: f64,
    /// Batches whose staging and routing were prepared ahead (a count, summed as the times).
    pub ahead_batches: f64,
    /// Batches whose bytes were copied into the staging ring (a count): not in the readers'
    /// pinned pool, which the decoders read in place.
    pub copied_batches: f64,
    /// Where the hardware engine's host-side idle time between batches went ([`EngineIdle`]).
    pub idle: EngineIdle,
}

/// The hardware engine's idle time on the host between two batches (host wall seconds): from
/// the return of a batch's last engine call to the start of the next batch's first, split by
/// what the producer's thread did meanwhile. The engine decodes only inside those calls (they
/// hold the thread until it is done), so this is the engine's time unused by stoke's own
/// sequence, the head room a deeper decode pipeline (the next batch's calls issued on another
/// thread while this one finishes) could win: on an H200 the engine was busy 11.6 ms of a
/// 14.9 ms batch. A batch counts the parts after its own calls (`join` … `tail`) and those
/// before them (`outside`, `head`); a batch without engine images counts none.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct EngineIdle {
    /// After the engine's last call returned: waiting for the CUDA decoders' host phase on
    /// their threads.
    pub join: f64,
    /// Then waiting for the CPU route's decodes.
    pub cpu: f64,
    /// Then the GPU decodes' end and the canary check (stream joins, check kernel, its wait).
    pub check: f64,
    /// Then retries on the CPU and the upload of the CPU route's pixels.
    pub retry: f64,
    /// Then the backend's tail: the policy, descriptors and tables, a ring slot (a trainer
    /// that holds every slot makes this wait), the augment launches, the batch's hand-over.
    pub tail: f64,
    /// Outside the backend, from its return to the next batch's start: the pipeline's
    /// hand-over and, when stoke is ahead, its wait for the trainer.
    pub outside: f64,
    /// The next batch's wait for its decode arena, which the augment of the batch two before
    /// it reads: long when that augment waits on the GPU (for a ring slot the trainer holds,
    /// or behind the trainer's kernels).
    pub arena: f64,
    /// The rest of the next batch's head, up to its first engine call: staging and routing
    /// when not prepared ahead, placing, the canaries and the wait for them (and the device
    /// bitstreams' copy).
    pub head: f64,
    /// With the batched GPU-hybrid share (`gpu_hybrid_share`): the route's call, made on the
    /// engine's calling thread just before the engine's first call of the batch (its host
    /// part: the wait for its previous call, parsing, queuing), carved out of `head` or, with
    /// the engine ahead, out of `worker`.
    pub hybrid: f64,
    /// With the engine's calls on a thread of their own (`gpu_engine_ahead`): that thread's
    /// idle time before the batch's calls, since its previous batch's last call returned (the
    /// other parts are the producer's, no longer between the engine's calls, and not counted).
    pub worker: f64,
    /// Batches that called the engine (a count, summed as the times).
    pub batches: f64,
}

impl EngineIdle {
    /// (name, seconds) of each part, in the producer's order.
    pub fn rows(&self) -> [(&'static str, f64); 10] {
        [
            ("join", self.join),
            ("cpu", self.cpu),
            ("check", self.check),
            ("retry", self.retry),
            ("tail", self.tail),
            ("outside", self.outside),
            ("arena", self.arena),
            ("head", self.head),
            ("hybrid", self.hybrid),
            ("worker", self.worker),
        ]
    }

    /// Every part's seconds summed.
    pub fn total(&self) -> f64 {
        self.rows().iter().map(|r| r.1).sum()
    }

    fn zip(self, o: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        Self {
            join: f(self.join, o.join),
            cpu: f(self.cpu, o.cpu),
            check: f(self.check, o.check),
            retry: f(self.retry, o.retry),
            tail: f(self.tail, o.tail),
            outside: f(self.outside, o.outside),
            arena: f(self.arena, o.arena),
            head: f(self.head, o.head),
            hybrid: f(self.hybrid, o.hybrid),
            worker: f(self.worker, o.worker),
            batches: f(self.batches, o.batches),
        }
    }
}

impl GpuStageTimes {
    /// (name, seconds) of each stage, in pipeline order.
    pub fn rows(&self) -> [(&'static str, f64); 12] {
        [
            ("classify", self.classify),
            ("hw decode", self.hw_decode),
            ("hw in calls", self.hw_host),
            ("hw calls cpu", self.hw_host_cpu),
            ("cuda decode", self.cuda_decode),
            ("cuda huffman cpu", self.cuda_huffman_cpu),
            ("cuda queue cpu", self.cuda_queue_cpu),
            ("cuda wait cpu", self.cuda_wait_cpu),
            ("hybrid batch", self.hybrid_decode),
            ("cpu route", self.cpu_route),
            ("augment", self.augment),
            ("ahead", self.ahead),
        ]
    }

    /// Stage by stage `f(self, o)`.
    fn zip(self, o: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        Self {
            classify: f(self.classify, o.classify),
            hw_decode: f(self.hw_decode, o.hw_decode),
            hw_host: f(self.hw_host, o.hw_host),
            hw_host_cpu: f(self.hw_host_cpu, o.hw_host_cpu),
            cuda_decode: f(self.cuda_decode, o.cuda_decode),
            cuda_huffman_cpu: f(self.cuda_huffman_cpu, o.cuda_huffman_cpu),
            cuda_queue_cpu: f(self.cuda_queue_cpu, o.cuda_queue_cpu),
            cuda_wait_cpu: f(self.cuda_wait_cpu, o.cuda_wait_cpu),
            hybrid_decode: f(self.hybrid_decode, o.hybrid_decode),
            cpu_route: f(self.cpu_route, o.cpu_route),
            augment: f(self.augment, o.augment),
            ahead: f(self.ahead, o.ahead),
            ahead_batches: f(self.ahead_batches, o.ahead_batches),
            copied_batches: f(self.copied_batches, o.copied_batches),
            idle: self.idle.zip(o.idle, &f),
        }
    }
}

impl std::ops::AddAssign for GpuStageTimes {
    fn add_assign(&mut self, o: Self) {
        *self = self.zip(o, |a, b| a + b);
    }
}

impl std::ops::Sub for GpuStageTimes {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        self.zip(o, |a, b| a - b)
    }
}

/// What the `on_error` policy makes of a batch, from each slot's status alone
/// (docs/CONTRACTS.md, contract 4) — a pure function, applied by the backend (which pixels
/// each slot shows) and by the pipeline (the records, the substitutes, the error):
/// - `fail`: the first failed slot (in slot order) makes the batch an error naming its sample;
/// - `skip`: a failed slot `i` shows the next good slot `j` of the batch (cyclic): `j`'s pixels,
///   label, index and params, with a [`Substitute`](crate::batch::Substitute) recorded; a batch with no good slot is an
///   error naming its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotPlan {
    /// Deliver the batch: slot `i` shows the sample of slot `sources[i]` (itself unless replaced).
    Deliver {
        /// The slot whose sample each slot shows.
        sources: Vec<usize>,
    },
    /// `fail`: the batch is an error naming this slot, the first that failed.
    Fail {
        /// The first failed slot.
        slot: usize,
    },
    /// `skip`, but no slot of the batch has an image to substitute.
    NothingGood,
}

impl SlotPlan {
    /// The plan for slots whose status is `status[i]` (`None`: decoded) under `on_error`.
    pub fn new(status: &[Option<SlotError>], on_error: OnError) -> Self {
        let n = status.len();
        let Some(first_bad) = status.iter().position(Option::is_some) else {
            return SlotPlan::Deliver { sources: (0..n).collect() };
        };
        if on_error == OnError::Fail {
            return SlotPlan::Fail { slot: first_bad };
        }
        if status.iter().all(Option::is_some) {
            return SlotPlan::NothingGood;
        }
        // The next good slot after `i`, cyclic (one exists: checked above).
        let next_good = |i: usize| (1..n).map(|d| (i + d) % n).find(|&j| status[j].is_none()).expect("a good slot exists");
        SlotPlan::Deliver { sources: (0..n).map(|i| if status[i].is_some() { next_good(i) } else { i }).collect() }
    }

    /// The slots whose sample each slot shows, when the batch is delivered.
    pub fn sources(&self) -> Option<&[usize]> {
        match self {
            SlotPlan::Deliver { sources } => Some(sources),
            _ => None,
        }
    }
}

/// What a backend reports of one batch: where the time went, each slot's status and the plan
/// it applied to the pixels. The pipeline settles the records from it
/// ([`crate::pipeline::run_batch`]).
#[derive(Clone, Debug)]
pub struct BatchRun {
    /// Where the time went.
    pub times: BatchTimes,
    /// Why each slot failed (`None`: its own image is in the batch).
    pub status: Vec<Option<SlotError>>,
    /// The policy's plan, already applied to the pixels when it delivers.
    pub plan: SlotPlan,
}

/// Fill `batch`'s per-slot records (labels, positions, dataset indices, params) from `samples`
/// as `sources` says: slot `i` takes the label, index and params of `samples[sources[i]]` and
/// keeps its own position. Both backends call it before the pixels are settled (the CUDA
/// backend uploads the labels with the batch).
pub(crate) fn fill_records(samples: &[SampleIn<'_>], sources: &[usize], batch: &mut Batch) {
    debug_assert_eq!(samples.len(), sources.len());
    batch.labels.clear();
    batch.positions.clear();
    batch.indices.clear();
    batch.params.clear();
    batch.substitutes.clear();
    for (s, &j) in samples.iter().zip(sources) {
        let from = &samples[j];
        batch.labels.push(from.label);
        batch.positions.push(s.position);
        batch.indices.push(from.index);
        batch.params.extend_from_slice(from.params);
    }
}

/// Mixup/CutMix a delivered host batch in place and write its soft targets, as `spec` draws
/// for `(seed, batch.epoch, batch.step)`; clears the targets when mixing is off.
pub(crate) fn mix_host_batch(spec: &crate::config::MixupSpec, seed: u64, batch: &mut Batch) -> Result<()> {
    batch.targets.clear();
    batch.num_classes = 0;
    if !spec.enabled() {
        return Ok(());
    }
    let classes = spec.num_classes;
    if let Some(&bad) = batch.labels.iter().find(|&&l| l < 0 || l as usize >= classes) {
        return Err(Error::config(format!("label {bad} is outside the {classes} classes of the mixup soft targets (mixup.num_classes)")));
    }
    let n = batch.labels.len();
    let (h, w) = match batch.layout {
        crate::config::Layout::Nchw => (batch.shape[2], batch.shape[3]),
        crate::config::Layout::Nhwc => (batch.shape[1], batch.shape[2]),
    };
    let mix = spec.draw(seed, batch.epoch, batch.step, n, w as u32, h as u32);
    let (dtype, layout, len) = (batch.dtype, batch.layout, n * batch.sample_bytes());
    if let crate::batch::Images::Host(bytes) = &mut batch.images {
        crate::augment::mixup::apply_host(&mut bytes[..len], dtype, layout, n, w as u32, h as u32, &mix);
    }
    spec.targets(&batch.labels, &mix, classes, &mut batch.targets);
    batch.num_classes = classes;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::AugParams;
    use crate::config::{DType, Layout};

    fn bad(why: &str) -> Option<SlotError> {
        Some(SlotError::Read(why.to_string()))
    }

    #[test]
    fn skip_takes_the_next_good_slot_cyclically() {
        let st = vec![bad("a"), None, bad("b"), bad("c"), None];
        assert_eq!(SlotPlan::new(&st, OnError::Skip), SlotPlan::Deliver { sources: vec![1, 1, 4, 4, 4] });
        let st = vec![None, bad("a"), bad("b")];
        assert_eq!(SlotPlan::new(&st, OnError::Skip), SlotPlan::Deliver { sources: vec![0, 0, 0] }, "wraps around");
        assert_eq!(SlotPlan::new(&[None, None], OnError::Skip), SlotPlan::Deliver { sources: vec![0, 1] });
    }

    #[test]
    fn fail_names_the_first_bad_slot_and_skip_with_nothing_good_is_its_own_plan() {
        let st = vec![None, bad("a"), bad("b")];
        assert_eq!(SlotPlan::new(&st, OnError::Fail), SlotPlan::Fail { slot: 1 });
        assert_eq!(SlotPlan::new(&[None, None], OnError::Fail), SlotPlan::Deliver { sources: vec![0, 1] });
        assert_eq!(SlotPlan::new(&[bad("a"), bad("b")], OnError::Skip), SlotPlan::NothingGood);
        assert_eq!(SlotPlan::new(&[bad("a"), bad("b")], OnError::Fail), SlotPlan::Fail { slot: 0 });
        assert_eq!(SlotPlan::new(&[], OnError::Skip), SlotPlan::Deliver { sources: vec![] });
    }

    #[test]
    fn records_follow_the_sources_and_keep_their_positions() {
        let params: Vec<[AugParams; 2]> =
            (0..4).map(|i| [AugParams { crop_x: i, ..AugParams::default() }, AugParams { crop_y: i, ..AugParams::default() }]).collect();
        let ins: Vec<SampleIn<'_>> = (0..4)
            .map(|i| SampleIn {
                index: 10 + i,
                position: 100 + i as u64,
                label: 1000 + i as i64,
                bytes: &[],
                params: &params[i],
                read_error: None,
            })
            .collect();
        let mut batch = Batch::new_host(DType::F32, Layout::Nchw);
        fill_records(&ins, &[0, 2, 2, 0], &mut batch);
        assert_eq!(batch.labels, vec![1000, 1002, 1002, 1000]);
        assert_eq!(batch.indices, vec![10, 12, 12, 10]);
        assert_eq!(batch.positions, vec![100, 101, 102, 103], "a slot keeps its own position");
        // Every view's params, slot by slot.
        let got: Vec<(i32, i32)> = batch.params.iter().map(|p| (p.crop_x, p.crop_y)).collect();
        assert_eq!(got, vec![(0, 0), (0, 0), (2, 0), (0, 2), (2, 0), (0, 2), (0, 0), (0, 0)]);
    }
}
