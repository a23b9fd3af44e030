//! The decoder itself: handles, states, streams and arenas ([`GpuDecoder::new`]), one batch
//! through routing, the GPU decoders, the canaries and the CPU route ([`GpuDecoder::decode`]).
//!
//! Needs a GPU. Not yet verified on one: written against the nvJPEG 13.0 header and
//! documentation and cudarc 0.19.10 on a machine without one.

use super::batched_hybrid::{chooser, BatchedHybrid, HybridRan, HybridRoute, ShareChooser, SharedChooser};
use super::hardware::EngineLane;
use super::hybrid::{LaneCpu, RouteHelpers};
use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::device::{elapsed_secs, timing_event, Gpu};
use crate::backend::cuda::nvjpeg::safe::{DecodeParams, Decoder, DeviceBuffer, JpegState, JpegStream, NvjpegHandle, PinnedBuffer};
use crate::backend::cuda::nvjpeg::sys::{nvjpegBackend_t, nvjpegOutputFormat_t, NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION};
use crate::backend::GpuStageTimes;
use crate::error::alloc_err;
use crate::error::GpuError;
use crate::error::{cuda_err, driver_err};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};
use std::sync::Arc;

/// The nvJPEG handles' flags for `plan.interpolated` chroma upsampling (module doc).
pub fn nvjpeg_flags(interpolated: bool) -> u32 {
    if interpolated {
        NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
    } else {
        0
    }
}
pub(super) const RGBI: nvjpegOutputFormat_t = nvjpegOutputFormat_t::NVJPEG_OUTPUT_RGBI;

/// Slots per CUDA decoder (state, stream, params, event), used in turn. Each holds nvJPEG
/// pinned and device buffers sized at start-up ([`cuda_slot_bytes`](super::cuda_slot_bytes)).
pub const CUDA_SLOTS: usize = 4;

/// Host threads decoding the CUDA decoders' images of a batch at once, each with its own
/// [`CUDA_SLOTS`]` / CUDA_LANES` slots and CUDA stream. Their host phase (the Huffman decode,
/// on the CPU for the hybrid decoder) holds its thread: on an H200 one thread decoded 738
/// images/s on 1.07 cores, 20 ms of a batch's 15 such images, which the hardware engine's
/// share outlasts only with interpolated upsampling.
pub const CUDA_LANES: usize = 2;

/// Each lane's share of every CUDA decoder's slots.
pub(super) const SLOTS_PER_LANE: usize = CUDA_SLOTS / CUDA_LANES;

pub(super) struct CudaSlot {
    pub(super) state: JpegState,
    pub(super) stream: JpegStream,
    pub(super) params: DecodeParams,
    pub(super) done: CudaEvent,
}

pub(super) struct CudaPath {
    // [GPU-assisted hybrid, hybrid]: the first that supports an image decodes it.
    pub(super) decoders: Vec<(Decoder, Vec<CudaSlot>)>,
    // Each lane's next slot (of its own SLOTS_PER_LANE).
    pub(super) turn: [usize; CUDA_LANES],
}

/// nvJPEG on one device: the hardware engine (when the GPU has one) and the CUDA decoders,
/// on two streams, plus two decode arenas used in turn (the augment of batch n reads one while
/// batch n + 1 decodes into the other).
pub struct GpuDecoder {
    pub(super) gpu: Arc<Gpu>,
    pub(super) plan: DecoderPlan,
    pub(super) hw: Option<HwPath>,
    pub(super) cuda: CudaPath,
    pub(super) hw_stream: Arc<CudaStream>,
    pub(super) cuda_stream: Arc<CudaStream>,
    // The CUDA decoders' other lanes' streams (joined into `cuda_stream` after every batch).
    pub(super) cuda_lane_streams: Vec<Arc<CudaStream>>,
    // Owns the memory `arenas` points into.
    pub(super) _arenas: [CudaSlice<u8>; 2],
    pub(super) arenas: Arc<Arenas>,
    // The arena the next batch not placed ahead takes, and the one the last decode used.
    pub(super) next: usize,
    pub(super) last_arena: usize,
    pub(super) done: CudaEvent,
    // The engine's facts, whichever thread calls it.
    pub(super) hw_info: Option<HwInfo>,
    // With `engine_ahead`: the thread the engine's route moved to (`hw` is then `None`), and
    // its device bitstreams' counters as its last task reported them.
    pub(super) engine: Option<EngineWorker>,
    pub(super) engine_bitstreams: (u64, u64),
    pub(super) stats: DecodeStats,
    // Timing events (hardware start/end on `hw_stream`, CUDA start/end on `cuda_stream`) and
    // the last batch's stage times.
    pub(super) timers: [CudaEvent; 4],
    pub(super) stage_times: GpuStageTimes,
    // Routes the batches `decode` is given unrouted.
    pub(super) classifier: Classifier,
    // Per-batch scratch, reused.
    pub(super) routes: Vec<Result<Classified, SlotError>>,
    // The CPU route's persistent workers (shared with the closure that queues GPU work).
    pub(super) cpu_pool: Arc<CpuPool>,
    // The threads the CUDA route runs on beside the producer's.
    pub(super) helpers: RouteHelpers,
    // The batched GPU-hybrid route, when turned on (`Self::enable_batched_hybrid`), and its
    // share's chooser (shared with the helper placing a batch ahead).
    pub(super) hybrid: Option<HybridRoute>,
    pub(super) chooser: SharedChooser,
    // Why the engine reads host bitstreams although device ones were asked for.
    pub(super) bitstream_refused: Option<String>,
    // The host marks the engine's idle time between batches is measured from.
    pub(super) marks: IdleMarks,
}

/// The hardware engine's facts the decoder reports, kept when its route moves to the engine's
/// thread (`decode::ahead`).
pub(super) struct HwInfo {
    handle: Arc<NvjpegHandle>,
    unit: usize,
    per_call: usize,
    prealloc: (u32, u32),
    bitstream_bytes: Option<u64>,
}

/// What the producer's thread does for the engine's images of a batch: call the engine, or
/// wait for the task queued on the engine's thread.
enum EngineWork<'a> {
    Here(&'a mut HwPath),
    Queued(Pending),
}

/// What queuing a batch's GPU decodes returns: the engine's calls' host wall and CPU seconds,
/// the CUDA lanes' CPU time, and, when the engine was called, the marks of its first call, its
/// last call's return and the CUDA route's join ([`idle_parts`]); with the engine ahead, its
/// thread's idle time before the batch's calls and its device bitstreams' counters.
#[derive(Default)]
struct GpuQueued {
    in_calls: (f64, f64),
    lanes_cpu: LaneCpu,
    marks: Option<[std::time::Instant; 3]>,
    worker: Option<(Option<f64>, (u64, u64))>,
    hybrid: Option<HybridRan>,
}

// SAFETY: every raw nvJPEG/CUDA object inside is owned by this value and used from one thread
// at a time (`&mut self`).
unsafe impl Send for GpuDecoder {}

impl Drop for GpuDecoder {
    fn drop(&mut self) {
        // The arenas are freed stream-ordered on `hw_stream` right after this, but the augment
        // kernels read them on another stream through raw addresses (and a decode that
        // returned early may leave work on `cuda_stream`): wait for all of it first.
        self.arenas.wait_all();
        // The engine's thread ends (its queued tasks done) and its stream is waited for.
        self.engine = None;
        let batched = self.hybrid.as_ref().map(|b| &b.stream);
        let engine_lane = self.hw.as_ref().and_then(|h| h.second.as_ref()).map(|l| &l.stream);
        for s in self.cuda_lane_streams.iter().chain(engine_lane).chain([&self.cuda_stream, &self.hw_stream]).chain(batched) {
            if let Err(e) = s.synchronize() {
                log::error!("waiting for a decode stream before freeing the arenas: {e}");
            }
        }
    }
}

impl GpuDecoder {
    /// Create the handles, states, streams and the two arenas (the only allocations).
    pub fn new(gpu: &Arc<Gpu>, plan: DecoderPlan) -> Result<Self, GpuError> {
        let ctx = gpu.ctx();
        ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        let hw_stream = ctx.new_stream().map_err(driver_err("cuStreamCreate"))?;
        let cuda_stream = ctx.new_stream().map_err(driver_err("cuStreamCreate"))?;
        let cuda_lane_streams =
            (1..CUDA_LANES).map(|_| ctx.new_stream().map_err(driver_err("cuStreamCreate"))).collect::<Result<Vec<_>, _>>()?;
        let ev = || ctx.new_event(None).map_err(driver_err("cuEventCreate"));
        let timer = || timing_event(ctx);

        // Hardware engine: absent on most GPUs (nvJPEG refuses the backend), which is fine.
        // If this nvJPEG refuses interpolated upsampling for the engine, the engine without it
        // beats no engine (tests/gpu_decode.rs measures the difference).
        let flags = nvjpeg_flags(plan.interpolated);
        let engine = |backend| HwPath::open(backend, flags, &plan, &ev);
        // Bitstreams in device memory when asked and this nvJPEG makes the whole route on that
        // variant; else the engine reads host bytes, and why is reported (`bitstreams_mode`).
        let device = (plan.device_bitstream_bytes > 0).then(|| engine(nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE_DEVICE));
        let (hw, device_input, bitstream_refused) = match device {
            Some(Ok(hw)) => (Ok(hw), true, None),
            refused => {
                let why = refused.and_then(Result::err).map(|(_, e)| e);
                if let Some(e) = &why {
                    log::warn!("NVJPEG_BACKEND_HARDWARE_DEVICE: {e}; the hardware engine reads host bitstreams");
                }
                (engine(nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE), false, why)
            }
        };
        let (mut hw, classifier) = match hw {
            Ok((mut hw, classifier)) => {
                if plan.engine_lanes >= 2 {
                    hw.second = Some(EngineLane::new(ctx)?);
                    log::info!("nvJPEG hardware decoder: {} threads calling it at once", plan.engine_lanes);
                }
                (Some(hw), Some(classifier))
            }
            Err((level, e)) => {
                log::log!(level, "{e}; running without it (baseline JPEGs use the CUDA decoders)");
                if plan.engine_lanes >= 2 {
                    log::warn!("gpu_engine_lanes = {} has no effect without the hardware engine", plan.engine_lanes);
                }
                (None, None)
            }
        };

        let handle = NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_DEFAULT, flags)?;
        let slot_bytes = plan.slot_bytes as usize;
        let mut decoders = Vec::new();
        for backend in [nvjpegBackend_t::NVJPEG_BACKEND_GPU_HYBRID, nvjpegBackend_t::NVJPEG_BACKEND_HYBRID] {
            let d = Decoder::new(&handle, backend)?;
            let slot = || -> Result<CudaSlot, GpuError> {
                let mut state = d.new_state()?;
                // Sized now (contract 5): nvJPEG would grow them during decodes otherwise.
                let s = cuda_stream.cu_stream() as _;
                // SAFETY: `cuda_stream` is this context's live stream (made above).
                state.attach_pinned(unsafe { PinnedBuffer::with_size(&handle, slot_bytes, s) }?)?;
                // SAFETY: as above.
                state.attach_device(unsafe { DeviceBuffer::with_size(&handle, slot_bytes, s) }?)?;
                let mut params = DecodeParams::new(&handle)?;
                params.set_output_format(RGBI)?;
                Ok(CudaSlot { state, stream: JpegStream::new(&handle)?, params, done: ev()? })
            };
            let slots = (0..CUDA_SLOTS).map(|_| slot()).collect::<Result<Vec<_>, _>>()?;
            decoders.push((d, slots));
        }

        let bytes = usize::try_from(plan.arena.bytes).map_err(|_| GpuError::OutOfMemory {
            kind: "device",
            bytes: usize::MAX,
            what: format!("a decode arena of {} bytes", plan.arena.bytes),
        })?;
        let alloc = |what: &str| -> Result<CudaSlice<u8>, GpuError> {
            // SAFETY: uninitialised device memory; every byte the augment kernel reads was
            // written by a decode (or the CPU upload) of the same batch first.
            unsafe { hw_stream.alloc::<u8>(bytes) }.map_err(|e| alloc_err("cuMemAlloc", e, bytes, what))
        };
        let arenas = [alloc("decode arena 0")?, alloc("decode arena 1")?];
        if let Some(h) = hw.as_mut().filter(|_| device_input) {
            let n = plan.device_bitstream_bytes as usize;
            // SAFETY: uninitialised device memory; the engine reads only what the copies of
            // the same batch wrote (`DeviceBitstreams::upload`).
            let buf = unsafe { hw_stream.alloc::<u8>(n) }.map_err(|e| alloc_err("cuMemAlloc", e, n, "the engine's device bitstreams"))?;
            let ptr = buf.device_ptr(&hw_stream).0;
            h.bitstreams = Some(DeviceBitstreams { _buf: buf, ptr, bytes: n as u64, copied: ev()?, copies: 0, overflow: 0 });
        }
        let arena_ptr = [arenas[0].device_ptr(&hw_stream).0, arenas[1].device_ptr(&hw_stream).0];
        let shared = Arc::new(Arenas::new(ctx, &hw_stream, arena_ptr, plan.arena.bytes, plan.batch)?);
        hw_stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
        let hw_info = hw.as_ref().map(|h| HwInfo {
            handle: h.handle.clone(),
            unit: h.unit,
            per_call: h.per_call,
            prealloc: h.prealloc,
            bitstream_bytes: h.bitstreams.as_ref().map(|b| b.bytes),
        });
        // The engine a batch ahead: its route moves to a thread of its own.
        let (hw, engine) = match hw {
            Some(h) if plan.engine_ahead => {
                log::info!("nvJPEG hardware decoder: its calls on a thread of their own, a batch ahead (gpu_engine_ahead)");
                (None, Some(EngineWorker::start(gpu, h, shared.clone())?))
            }
            hw => {
                if plan.engine_ahead {
                    log::warn!("gpu_engine_ahead has no effect without the hardware engine");
                }
                (hw, None)
            }
        };
        // Without the engine, a classifier that routes nothing to it.
        let classifier = match classifier {
            Some(c) => c,
            None => Classifier::new(&plan, None)?,
        };
        Ok(Self {
            gpu: gpu.clone(),
            plan,
            hw,
            cuda: CudaPath { decoders, turn: [0; CUDA_LANES] },
            hw_stream,
            cuda_stream,
            cuda_lane_streams,
            _arenas: arenas,
            arenas: shared,
            next: 0,
            last_arena: 0,
            done: ev()?,
            hw_info,
            engine,
            engine_bitstreams: (0, 0),
            stats: DecodeStats::default(),
            timers: [timer()?, timer()?, timer()?, timer()?],
            stage_times: GpuStageTimes::default(),
            classifier,
            routes: Vec::new(),
            cpu_pool: Arc::new(CpuPool::new(plan.cpu_threads)?),
            helpers: RouteHelpers::new()?,
            hybrid: None,
            chooser: SharedChooser::default(),
            bitstream_refused,
            marks: IdleMarks::default(),
        })
    }

    /// Turn on the batched GPU-hybrid route ([`super::batched_hybrid`]) with `share`
    /// (`Off` turns it off). Only with the hardware engine: the route takes a share of the
    /// engine's images. Its buffers are bounded by one arena's bytes (the memory plan's
    /// `hybrid` part).
    ///
    /// With the engine's calls a batch ahead (`gpu_engine_ahead`) the route's calls move to the
    /// engine's thread, which makes a batch's just before the engine's calls of the same batch
    /// (both start as the batch before is done with the engine); the share is taken where the
    /// batch is placed, by the producer or by the helper placing it ahead.
    pub fn enable_batched_hybrid(&mut self, share: crate::config::HybridShare) -> Result<(), GpuError> {
        *chooser(&self.chooser) = None;
        if let Some(old) = self.hybrid.take() {
            if let Some(w) = &self.engine {
                // The engine's thread drops its call after the route's stream ran.
                w.set_hybrid(None)?;
            }
            old.stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
        }
        if share == crate::config::HybridShare::Off || self.hw_info.is_none() {
            return Ok(());
        }
        self.gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        let flags = nvjpeg_flags(self.plan.interpolated);
        let mut route = HybridRoute::new(BatchedHybrid::new(self.gpu.ctx(), flags)?);
        if let Some(w) = &self.engine {
            w.set_hybrid(route.here.take())?;
        }
        self.hybrid = Some(route);
        *chooser(&self.chooser) = Some(ShareChooser::new(share, self.plan.arena.bytes));
        log::info!("batched GPU-hybrid route on: share {share} of the hardware engine's images");
        Ok(())
    }

    /// How many batches stoke made wait for the trainer as the next batch is decoded (the
    /// output ring's [`waiting`](crate::backend::cuda::ring::OutputRing::waiting)): the batched
    /// GPU-hybrid route's `auto` share yields while one does ([`super::batched_hybrid`]).
    pub fn set_waiting_batches(&mut self, n: usize) {
        if let Some(c) = chooser(&self.chooser).as_mut() {
            c.waiting = n;
        }
    }

    /// The backend starts a batch (at `at`): the engine's idle time before the batch's first
    /// call is split at this mark ([`crate::backend::EngineIdle`]'s `outside` and `head`).
    pub fn batch_started(&mut self, at: std::time::Instant) {
        self.marks.start(at);
    }

    /// The backend hands its batch over (at `at`): the seconds since this batch's decode
    /// returned when it called the engine ([`crate::backend::EngineIdle::tail`]), else 0.
    pub fn batch_returned(&mut self, at: std::time::Instant) -> f64 {
        self.marks.hand_over(at)
    }

    /// With the engine's calls on a thread of their own (`gpu_engine_ahead`, the hardware
    /// engine present): what the helper preparing the next batch places and queues it with.
    pub fn ahead_placer(&self) -> Result<Option<AheadPlacer>, GpuError> {
        match &self.engine {
            Some(w) => Ok(Some(AheadPlacer::new(self.arenas.clone(), self.gpu.clone(), w.submitter(), self.chooser.clone())?)),
            None => Ok(None),
        }
    }

    /// The streams other than the decode stream ([`Self::stream`]) that may still read a
    /// batch's bytes when its decode did not get to wait for them (it failed, or it was placed
    /// ahead and never run): the engine's thread's (`gpu_engine_ahead`) and the batched
    /// GPU-hybrid route's. Such a batch is released after them.
    pub fn side_streams(&self) -> Vec<&Arc<CudaStream>> {
        self.engine.as_ref().map(|e| &e.events.stream).into_iter().chain(self.hybrid.as_ref().map(|h| &h.stream)).collect()
    }

    /// The arena the next batch not placed ahead decodes into (a batch placed ahead while it
    /// decodes takes the other).
    pub fn next_arena(&self) -> usize {
        self.next
    }

    /// Another classifier routing as this decoder does, to route a batch on another thread
    /// (its own nvJPEG bitstream handle and params) for [`Self::decode_routed`].
    pub fn new_classifier(&self) -> Result<Classifier, GpuError> {
        Classifier::new(&self.plan, self.hw_info.as_ref().map(|h| &h.handle))
    }

    /// The CPU route, for starting a routed batch's CPU decodes from another thread
    /// ([`CpuRoute::start`], then [`Self::decode_routed`]).
    pub fn cpu_route(&self) -> CpuRoute {
        CpuRoute { pool: self.cpu_pool.clone(), max_pixels: self.plan.max_pixels }
    }

    /// Threads of the CPU route.
    pub fn cpu_threads(&self) -> usize {
        self.plan.cpu_threads
    }

    /// Engines × cores of the hardware decoder, or `None` without one.
    pub fn hardware_width(&self) -> Option<usize> {
        self.hw_info.as_ref().map(|h| h.unit)
    }

    /// The hardware-decode stream (which the CUDA-decode stream is joined into at the end of
    /// every [`Self::decode`]): recording on it covers every read of the staged bytes.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.hw_stream
    }

    /// Counters so far.
    pub fn stats(&self) -> DecodeStats {
        let (copies, overflow) = match self.hw.as_ref().and_then(|h| h.bitstreams.as_ref()) {
            Some(b) => (b.copies, b.overflow),
            None => self.engine_bitstreams,
        };
        DecodeStats { bitstream_copies: copies, bitstream_overflow: overflow, ..self.stats }
    }

    /// Where the hardware engine reads its bitstreams (`gpu_bitstream`): `"device"`,
    /// `"host"`, `"host (device refused: …)"` when nvJPEG would not open
    /// `NVJPEG_BACKEND_HARDWARE_DEVICE`, or `"none (no hardware engine)"`.
    pub fn bitstreams_mode(&self) -> String {
        match (&self.hw_info, &self.bitstream_refused) {
            (None, _) => "none (no hardware engine)".into(),
            (Some(h), _) if h.bitstream_bytes.is_some() => "device".into(),
            (Some(_), Some(e)) => format!("host (device refused: {e})"),
            (Some(_), None) => "host".into(),
        }
    }

    /// The decode parts of the last batch's [`GpuStageTimes`] (`augment` is zero: the
    /// augment kernel is the caller's): host wall for classification and the CPU route (the
    /// longest worker of each CPU pass, plus the upload), CUDA events for the hardware engine
    /// and the CUDA decoders (zero when a route had no image).
    pub fn stage_times(&self) -> GpuStageTimes {
        self.stage_times
    }

    /// Device bytes the decoder allocated itself: the two arenas, the canary arrays, the
    /// hardware engine's pre-allocated buffers as reserved (nvJPEG's own per-state buffers,
    /// which it grows lazily, are not visible from here) and its device bitstreams' buffer.
    pub fn device_bytes(&self) -> u64 {
        let n = self.plan.batch as u64;
        let hw = self
            .hw_info
            .as_ref()
            .map_or(0, |h| 2 * h.per_call as u64 * 3 * h.prealloc.0 as u64 * h.prealloc.1 as u64 + h.bitstream_bytes.unwrap_or(0));
        // The batched GPU-hybrid route keeps a call's buffers within one arena's bytes.
        let batched = self.hybrid.as_ref().map_or(0, |_| self.plan.arena.bytes);
        2 * self.plan.arena.bytes + 2 * n * (std::mem::size_of::<DecodeTarget>() as u64 + 4) + hw + self.slot_buffer_bytes() + batched
    }

    /// What nvJPEG holds and did through stoke's allocators, over the decoder's handles (the
    /// engine's, the CUDA decoders', the batched GPU-hybrid route's): its real bytes beside the
    /// plan's share of [`Self::device_bytes`], and its allocations, which after the first
    /// batches mean memory the plan did not reserve.
    pub fn nvjpeg_memory(&self) -> crate::backend::NvjpegMemoryStats {
        let mut handles: Vec<&Arc<NvjpegHandle>> = Vec::new();
        let batched = self.hybrid.as_ref().map(|b| &b.handle);
        for h in self.hw_info.as_ref().map(|h| &h.handle).into_iter().chain(self.cuda.decoders.first().map(|d| d.0.handle())).chain(batched)
        {
            if !handles.iter().any(|k| Arc::ptr_eq(k, h)) {
                handles.push(h);
            }
        }
        let mut total = crate::backend::NvjpegMemoryStats::default();
        for h in handles {
            total += h.memory_stats();
        }
        total
    }

    /// Pinned host bytes the decoder allocated itself (decode targets and canary results; the
    /// staging ring reports its own: `PinnedStaging::pinned_bytes`).
    pub fn pinned_bytes(&self) -> u64 {
        2 * self.plan.batch as u64 * (std::mem::size_of::<DecodeTarget>() as u64 + 4) + self.slot_buffer_bytes()
    }

    /// Bytes of one kind (pinned, or device) the CUDA decoders' slot buffers were sized to.
    fn slot_buffer_bytes(&self) -> u64 {
        (self.cuda.decoders.len() * CUDA_SLOTS) as u64 * self.plan.slot_bytes
    }

    /// Decode one batch into the next arena. `jobs[i]` is the compressed bytes (alive until
    /// this returns) and the augment parameters of sample `i`; `out[i]` is where its pixels
    /// are, or why no decoder could produce them (for the policy). Returns the arena's device
    /// address. Blocks until the GPU decodes are done (the canaries must be read before
    /// anything is retried on the CPU).
    pub fn decode(&mut self, jobs: &[(&[u8], AugParams)], out: &mut Vec<Result<Decoded, SlotError>>) -> Result<u64, GpuError> {
        self.decode_within(jobs, None, out)
    }

    /// [`Self::decode`] of jobs whose bytes all lie in `span` when it is given (see
    /// [`Self::decode_routed`]).
    pub fn decode_within(
        &mut self,
        jobs: &[(&[u8], AugParams)],
        span: Option<&[u8]>,
        out: &mut Vec<Result<Decoded, SlotError>>,
    ) -> Result<u64, GpuError> {
        let start = std::time::Instant::now();
        let mut routes = std::mem::take(&mut self.routes);
        self.classifier.classify_batch(jobs, &mut routes);
        let routing = start.elapsed().as_secs_f64();
        let r = self.decode_routed(jobs, &routes, None, span, None, out);
        self.routes = routes;
        self.stage_times.classify += routing;
        r
    }

    /// [`Self::decode`] with every job's route already made (`routes[i]` for `jobs[i]`, by
    /// [`Classifier::classify_batch`] of a classifier from [`Self::new_classifier`]: the CUDA
    /// backend routes the next batch while the engine decodes this one) and, in `cpu`, its
    /// CPU-route images' decodes perhaps started already ([`CpuRoute::start`] on the same
    /// jobs and routes; decoded now when it covers other images). `span`: the host bytes
    /// that hold every job's, when one place does (the staged batch): with device
    /// bitstreams (`gpu_bitstream = device`) the engine's images then go over in one copy.
    pub fn decode_routed(
        &mut self,
        jobs: &[(&[u8], AugParams)],
        routes: &[Result<Classified, SlotError>],
        cpu: Option<CpuAhead>,
        span: Option<&[u8]>,
        placed: Option<PlacedAhead>,
        out: &mut Vec<Result<Decoded, SlotError>>,
    ) -> Result<u64, GpuError> {
        let n = jobs.len();
        assert!(n <= self.plan.batch, "batch of {n} over the planned {}", self.plan.batch);
        assert_eq!(routes.len(), n, "one route per job");
        // nvJPEG and the raw copies work on the thread's current context: this device's (one
        // pipeline per device in a process, each on its own thread).
        self.gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        self.stage_times = GpuStageTimes::default();
        out.clear();
        // 1-2. Every image's place and the canaries: done ahead (with the engine's calls
        //      queued), or now. The batched GPU-hybrid route takes its share of the engine's
        //      images first (whole images).
        let (placement, queued) = match placed {
            Some(PlacedAhead { placement, engine }) => {
                self.next = placement.a ^ 1;
                self.stats.engine_queued_ahead += u64::from(engine.is_some());
                (placement, engine)
            }
            None => {
                let a = self.next;
                self.next ^= 1;
                let (moved, yielded) = match chooser(&self.chooser).as_mut() {
                    Some(c) if self.hw_info.is_some() => c.take(jobs, routes, self.plan.arena.bytes),
                    _ => Default::default(),
                };
                let p = Placement { yielded, ..place(&self.arenas, a, &self.gpu, &self.hw_stream, routes, &moved)? };
                let queued = match &self.engine {
                    Some(w) if !p.hw_list.is_empty() || !p.batched_list.is_empty() => Some(w.queue().submit(&p, jobs, span, None)?),
                    _ => None,
                };
                (p, queued)
            }
        };
        let Placement {
            a,
            arena,
            mut cursor,
            out: placed_out,
            hw_list,
            cuda_list,
            cpu_list,
            batched_list,
            gpu_list,
            yielded,
            arena_wait,
            secs,
        } = placement;
        self.stats.gpu_hybrid_yielded += u64::from(yielded);
        self.last_arena = a;
        *out = placed_out;
        if !gpu_list.is_empty() {
            for s in std::iter::once(&self.cuda_stream).chain(&self.cuda_lane_streams) {
                s.wait(&self.arenas.canaries_set[a]).map_err(driver_err("cuStreamWaitEvent"))?;
            }
        }
        self.stage_times.classify = secs;

        // 3-5. CPU route on worker threads while the host enqueues the GPU decodes.
        let mut gpu_failed: Vec<(usize, String)> = Vec::new();
        // The batched GPU-hybrid call first: queued on its stream, it decodes while the engine
        // does (with the engine ahead, the engine's thread makes it with the engine's calls).
        let mut hybrid_ran = None;
        if let Some(b) = self.hybrid.as_mut().and_then(|h| h.here.as_mut()) {
            hybrid_ran = b.decode(a, &self.arenas.canaries_set[a], &batched_list, jobs, arena, out, &mut gpu_failed)?;
        }
        let max_pixels = self.plan.max_pixels;
        let pool = self.cpu_pool.clone();
        // CPU decodes started ahead are this batch's when they cover its CPU-route images.
        let cpu_ahead = cpu.filter(|a| a.list() == cpu_list.as_slice());
        let cpu_now: &[usize] = if cpu_ahead.is_some() { &[] } else { &cpu_list };
        let (gpu_queued, mut cpu_out, mut cpu_secs) =
            pool.decode_while(cpu_now, jobs, out, max_pixels, || -> Result<GpuQueued, GpuError> {
                let GpuDecoder { gpu, hw, cuda, hw_stream, cuda_stream, cuda_lane_streams, arenas, timers, helpers, .. } = &mut *self;
                let canaries_set = &arenas.canaries_set[a];
                let [t0, t1, t2, t3] = &*timers;
                // The CUDA decoders' images, CUDA_LANES threads at once (images dealt in turn), each
                // lane on its stream: their host phase (the Huffman decode runs on the CPU for the
                // hybrid decoder) takes milliseconds per image. The other lanes run on the lane
                // helpers.
                let mut cuda_route = || -> Result<(Vec<(usize, String)>, LaneCpu), GpuError> {
                    if cuda_list.is_empty() {
                        return Ok(Default::default());
                    }
                    gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
                    t2.record(cuda_stream).map_err(driver_err("cuEventRecord"))?;
                    let streams: Vec<&Arc<CudaStream>> = std::iter::once(&*cuda_stream).chain(cuda_lane_streams.iter()).collect();
                    let failed = cuda.decode_lanes(gpu, &helpers.lanes, &streams, &cuda_list, jobs, out, routes, arena);
                    for s in cuda_lane_streams.iter() {
                        cuda_stream.join(s).map_err(driver_err("cuStreamWaitEvent"))?;
                    }
                    t3.record(cuda_stream).map_err(driver_err("cuEventRecord"))?;
                    failed
                };
                // A task queued on the engine's thread is waited for even without engine images
                // (it made the batched GPU-hybrid call).
                let work = match (queued, hw.as_mut()) {
                    (Some(p), _) => Some(EngineWork::Queued(p)),
                    _ if hw_list.is_empty() => None,
                    (None, Some(hw)) => Some(EngineWork::Here(hw)),
                    (None, None) => None,
                };
                let Some(work) = work else {
                    let (failed, lanes_cpu) = cuda_route()?;
                    gpu_failed.extend(failed);
                    return Ok(GpuQueued { lanes_cpu, ..Default::default() });
                };
                // Both routes: the CUDA decoders on their helper thread, so their host phase
                // overlaps the engine's calls instead of following them.
                // With the engine ahead its calls were queued on its thread: wait for them.
                let engine = || match work {
                    EngineWork::Here(hw) => {
                        t0.record(hw_stream).map_err(driver_err("cuEventRecord"))?;
                        let (in_calls, first_call) =
                            hw.decode(hw_stream, canaries_set, &hw_list, jobs, span, arena, out, &mut gpu_failed)?;
                        let engine_end = std::time::Instant::now();
                        t1.record(hw_stream).map_err(driver_err("cuEventRecord"))?;
                        Ok::<_, GpuError>((in_calls, [first_call, engine_end], None, None))
                    }
                    EngineWork::Queued(p) => {
                        let d = p.wait()?;
                        gpu_failed.extend(d.failed);
                        Ok((d.in_calls, [d.first_call, d.engine_end], Some((d.idle_before, d.bitstreams)), d.hybrid))
                    }
                };
                // Both done before returning either way: the CUDA side's work is queued on its
                // stream, which step 6 joins.
                let (cuda_done, hw_done) =
                    if cuda_list.is_empty() { (Ok(Default::default()), engine()) } else { helpers.cuda.beside(cuda_route, engine) };
                let (in_calls, [first_call, engine_end], worker, hybrid) = hw_done?;
                let (failed, lanes_cpu) = cuda_done?;
                gpu_failed.extend(failed);
                Ok(GpuQueued { in_calls, lanes_cpu, marks: Some([first_call, engine_end, std::time::Instant::now()]), worker, hybrid })
            });
        let GpuQueued { in_calls: (hw_host, hw_host_cpu), lanes_cpu, marks: engine_marks, worker, hybrid } = gpu_queued?;
        let hybrid_ran = hybrid_ran.or(hybrid);
        if let Some((_, bitstreams)) = worker {
            self.engine_bitstreams = bitstreams;
            if let (Some([first_call, ..]), Some(started), false) = (engine_marks, self.marks.started(), hw_list.is_empty()) {
                self.stats.engine_began_early += u64::from(first_call < started);
            }
        }
        let t = &mut self.stage_times;
        (t.hw_host, t.hw_host_cpu) = (hw_host, hw_host_cpu);
        (t.cuda_huffman_cpu, t.cuda_queue_cpu, t.cuda_wait_cpu) = (lanes_cpu.huffman, lanes_cpu.queue, lanes_cpu.slot_wait);
        if let Some(a) = cpu_ahead {
            // The CPU route's time is then only what this batch still waited for them.
            (cpu_out, cpu_secs) = a.finish();
        }
        let cpu_done = std::time::Instant::now();

        // 6. Wait for the GPU decodes and read the canaries.
        self.hw_stream.join(&self.cuda_stream).map_err(driver_err("cuStreamWaitEvent"))?;
        if let (Some(e), Some(_)) = (&self.engine, &worker) {
            // The engine's calls (and their colour conversions) ran on its thread's stream.
            self.hw_stream.wait(&e.events.end[a]).map_err(driver_err("cuStreamWaitEvent"))?;
        }
        if let (Some(h), Some(ran)) = (&self.hybrid, hybrid_ran) {
            // This batch's call (the route's stream may hold the next batch's after it).
            self.hw_stream.wait(h.timers.end(ran.a)).map_err(driver_err("cuStreamWaitEvent"))?;
        }
        let mut canaries = self.arenas.canaries(a);
        if !gpu_list.is_empty() {
            canaries.launch(&self.gpu, &self.hw_stream, "stoke_canary_check", arena, gpu_list.len(), true)?;
            canaries.read_back(&self.hw_stream)?;
        }
        self.done.record(&self.hw_stream).map_err(driver_err("cuEventRecord"))?;
        self.done.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        let checked = std::time::Instant::now();
        // Every timer was recorded before `done` on its stream (the CUDA stream is joined into
        // the hardware one): reading them does not block.
        if !hw_list.is_empty() {
            self.stage_times.hw_decode = match (&self.engine, &worker) {
                (Some(e), Some(_)) => elapsed_secs(&e.events.start[a], &e.events.end[a])?,
                _ => elapsed_secs(&self.timers[0], &self.timers[1])?,
            };
        }
        if !cuda_list.is_empty() {
            self.stage_times.cuda_decode = elapsed_secs(&self.timers[2], &self.timers[3])?;
        }
        if let (Some(h), Some(c)) = (&self.hybrid, chooser(&self.chooser).as_mut()) {
            let mpx =
                |l: &[usize]| l.iter().filter_map(|&i| out[i].as_ref().ok()).map(|d| d.stored.0 as f64 * d.stored.1 as f64 / 1e6).sum();
            self.stage_times.hybrid_decode = c.measured((self.stage_times.hw_decode, mpx(&hw_list)), hybrid_ran, &h.timers)?;
        }
        let intact = canaries.intact_host.as_slice().map_err(driver_err("cuEventSynchronize"))?;
        for (k, &i) in gpu_list.iter().enumerate() {
            if intact[k] >= CANARY_MIN_INTACT && !gpu_failed.iter().any(|(j, _)| *j == i) {
                gpu_failed.push((i, format!("nvJPEG reported success but left {} of {CANARIES} canaries unwritten", intact[k])));
            }
        }
        drop(canaries);

        // 7. Retry the GPU failures on the CPU (in parallel), then upload every CPU result.
        let retry_start = std::time::Instant::now();
        let retry: Vec<usize> = gpu_failed.iter().map(|(i, _)| *i).collect();
        let ((), retried, _) = pool.decode_while(&retry, jobs, out, max_pixels, || ());
        self.stats.retried += retry.len() as u64;
        let why_gpu: std::collections::HashMap<usize, String> = gpu_failed.into_iter().collect();
        self.gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        let upload_stream = self.hw_stream.cu_stream();
        let mut uploaded = false;
        for (i, r) in cpu_out.drain(..).chain(retried) {
            // A GPU decode that failed keeps its place in the arena: the retry reuses it.
            let prev = match &out[i] {
                Ok(d) if d.route != Route::Cpu => Some((d.offset, decoded_bytes(d.roi.w, d.roi.h))),
                _ => None,
            };
            // The region this image's augment reads (none when its header was unreadable).
            let asked = match &out[i] {
                Ok(d) if d.roi.w > 0 && d.roi.h > 0 => Some(d.roi),
                _ => None,
            };
            let result = r.map_err(SlotError::from).and_then(|mut img| {
                check_params(&jobs[i].1, (img.width, img.height))?;
                // The CPU decoder adds a margin of an iMCU around the region (and aligns it):
                // keep the region asked for, so that a retried GPU decode fits the place the GPU
                // had. Otherwise a hardware call failed by one bad image sends all of its images
                // here, each needing more than its place, and the arena (sized for the batch)
                // runs out: good images were substituted for it.
                if let Some(a) = asked {
                    img.crop_to(a.x, a.y, a.w, a.h);
                }
                let roi = Roi { x: img.region_x, y: img.region_y, w: img.region_w, h: img.region_h };
                let offset = cursor.place_or_reuse(prev, roi.w, roi.h).ok_or_else(|| arena_full(self.plan.arena.bytes))?;
                let len = 3 * roi.w as usize * roi.h as usize;
                // Stream-ordered on the decode stream, which is synchronised below. Not the
                // synchronous cuMemcpyHtoD: that runs on the legacy stream, which stoke's
                // non-blocking streams do not wait for, and from pageable memory it may return
                // before the DMA lands, so the augment kernel could read stale bytes. From
                // pageable memory the driver stages the bytes before returning, so `img` may
                // be dropped right after.
                // SAFETY: `offset .. offset + len` lies inside arena `a` (placed by the
                // cursor); no GPU work reads or writes it (decodes finished, the augment of
                // this arena's previous batch was waited on above).
                unsafe { cudarc::driver::result::memcpy_htod_async(arena + offset, &img.rgb[..len], upload_stream) }
                    .map_err(|e| SlotError::Device(cuda_err("cuMemcpyHtoDAsync", e).to_string()))?;
                uploaded = true;
                Ok(Decoded { offset, roi, stored: (img.width, img.height), route: Route::Cpu })
            });
            out[i] = result.map_err(|e| match why_gpu.get(&i) {
                Some(g) => SlotError::Retried { gpu: g.clone(), cpu: Box::new(e) },
                None => e,
            });
        }
        if uploaded {
            // decode() returns with every pixel of the arena in place (module doc).
            self.hw_stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
        }
        self.stage_times.cpu_route = cpu_secs + retry_start.elapsed().as_secs_f64();
        for r in out.iter() {
            match r {
                Ok(d) if d.route == Route::Hardware => self.stats.hardware += 1,
                Ok(d) if d.route == Route::Cuda => self.stats.cuda += 1,
                Ok(d) if d.route == Route::GpuHybridBatched => self.stats.gpu_hybrid_batched += 1,
                Ok(_) => self.stats.cpu += 1,
                Err(_) => self.stats.failed += 1,
            }
        }
        match (engine_marks, worker) {
            // The engine on its own thread: its idle time is the thread's, between its tasks
            // (less the batched GPU-hybrid call it made first); a task that made only that
            // call did not call the engine and is not counted, as without the thread.
            (Some(_), Some(_)) if hw_list.is_empty() => {}
            (Some(_), Some((idle_before, _))) => {
                let idle = idle_before.unwrap_or(0.0);
                let hybrid = idle_before.map_or(0.0, |w| hybrid_ran.map_or(0.0, |r| r.host.min(w)));
                self.stage_times.idle = crate::backend::EngineIdle { worker: idle - hybrid, hybrid, batches: 1.0, ..Default::default() };
            }
            (Some([first_call, engine_end, joined]), None) => {
                let hybrid = hybrid_ran.map_or(0.0, |r| r.host);
                self.stage_times.idle = self.marks.decoded(arena_wait, hybrid, [first_call, engine_end, joined, cpu_done, checked]);
            }
            _ => {}
        }
        Ok(arena)
    }

    /// After the augment kernel that reads the arena of the last [`Self::decode`] is enqueued
    /// on `stream`: record that the arena is free once it ran.
    pub fn release_arena(&mut self, stream: &CudaStream) -> Result<(), GpuError> {
        self.arenas.release(self.last_arena, stream)
    }
}
