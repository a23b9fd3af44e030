//! The batched GPU-hybrid route: a share of the hardware engine's images decoded beside it by
//! nvJPEG's GPU-assisted hybrid backend (`NVJPEG_BACKEND_GPU_HYBRID`) in one
//! `nvjpegDecodeBatched` call on a stream of its own (issue 40: the engine is the ceiling).
//!
//! What nvJPEG documents, and what this route does with it:
//! - nvjpeg.h, `NVJPEG_BACKEND_GPU_HYBRID`: "nvjpegDecodeBatched will use GPU decoding for
//!   baseline JPEG bitstreams with interleaved scan when batch size is bigger than 100". So
//!   only baseline 3-component images whose first scan holds every component
//!   ([`batched_gpu_hybrid_takes`]) are moved here, and a measured share is 0 or at least
//!   [`GPU_HUFFMAN_MIN_CALL`] images ([`super::share`]). Progressive, extended, grayscale (one
//!   component: a non-interleaved scan), CMYK and everything the engine does not take never
//!   come here: only images routed to the engine are candidates.
//! - `nvjpegDecodeBatchedEx` (a region per image) "is supported only by following backends -
//!   NVJPEG_BACKEND_HARDWARE and NVJPEG_BACKEND_LOSSLESS_JPEG" (nvJPEG docs): this route calls
//!   `nvjpegDecodeBatched` and decodes **whole images**, so each takes its whole decoded size
//!   in the arena; images are moved only while the arena holds them.
//! - `nvjpegDecodeBatched` "is asynchronous with respect to the host. All GPU tasks for this
//!   function will be submitted to the provided stream": the stream waits for the canaries;
//!   the host does not. `nvjpegDecodeBatchedInitialize`: "Any currently running batched
//!   decoding should be finished before calling this function" — the host waits for the last
//!   call's event first; "if the size of the batch changes, or if the batch decoding fails,
//!   then call nvjpegDecodeBatchedInitialize() again" — it is called before every call.
//! - `nvjpegDecodeBatchedPreAllocate` is "a No Op for other backends" than the hardware one:
//!   nvJPEG sizes this route's buffers itself, on the first calls, and keeps them. The route
//!   bounds them: the coefficients of its images ([`coefficient_bytes`])
//!   plus their bitstreams stay within one arena's bytes, which the memory plan counts
//!   ([`super::MemoryPlan`], `hybrid`).
//!
//! **Yielding to the trainer** (issue 40, items 2 and 4): with `auto`, while a batch stoke made
//! waits for the trainer ([`YIELD_WHEN_WAITING`]; the backend says how many before each batch,
//! `GpuDecoder::set_waiting_batches`), the route takes nothing and its SMs stay the model's:
//! the engine alone outruns a GPU-bound trainer (on the H100, 16k images/s against ResNet-50's
//! 3.7k). It takes its share again once the trainer catches up, probing first when it has been
//! idle [`super::share::PROBE_EVERY`] batches. A pinned share never yields: the user fixed it.
//! Which route decodes an image is timing-dependent with `auto` either way (the measured rates
//! decide too); on a GPU the route's IDCT and the engine's may differ by rounding
//! (tests/gpu_decode.rs bounds it).
//!
//! One bad image fails the whole call (as the engine's): all of its images are retried on the
//! CPU, and the meter backs off ([`ShareMeter::route_ran`]). The call is made just before the
//! engine's calls of the same batch, on the thread that makes them: the producer's, or with
//! `gpu_engine_ahead` the engine's own ([`super::ahead`]), where a batch placed ahead took its
//! share as it was placed ([`ShareChooser`], shared with the helper placing it: the meter then
//! lags one batch). Its host part (parsing) delays the engine's calls by that much, which the
//! route's measured time includes; the route's one nvJPEG state waits for its last call before
//! the next (`nvjpegDecodeBatchedInitialize`), so with the engine ahead a route still decoding
//! the batch before holds the engine's start on the next by that much.
//!
//! Runs on the simulated device (sim/: which images, call semantics, buffers); not
//! GPU-verified: no figure of its rate exists yet (BENCHMARKS.md, GPU run plan).

use super::share::{split, ShareMeter, GPU_HUFFMAN_MIN_CALL};
use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::device::{elapsed_secs, timing_event};
use crate::backend::cuda::nvjpeg::safe::{JpegState, NvjpegHandle};
use crate::backend::cuda::nvjpeg::sys::{nvjpegBackend_t, nvjpegImage_t};
use crate::codec::jpeg::{Coding, JpegInfo, Subsampling};
use crate::config::HybridShare;
use crate::error::{driver_err, GpuError};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream};
use std::sync::Arc;

/// Batches made and waiting for the trainer from which the `auto` share yields (module doc):
/// one waiting batch means the trainer, not the decode, sets the pace for now.
pub const YIELD_WHEN_WAITING: usize = 1;

/// Whether nvJPEG's GPU-hybrid batched decode does this image's Huffman decoding on the GPU
/// (module doc): baseline, 8-bit, three components, known sampling, and a first scan
/// (`first_scan`: its component count) that interleaves all three.
pub fn batched_gpu_hybrid_takes(info: &JpegInfo, first_scan: Option<u8>) -> bool {
    info.coding == Coding::Baseline
        && info.precision == 8
        && info.components == 3
        && !matches!(info.subsampling, Subsampling::Other)
        && first_scan == Some(3)
}

/// The component count of a JPEG's first scan (its SOS segment's `Ns`), walking the marker
/// segments from SOI; `None` when the walk fails before one.
pub fn first_scan_components(bytes: &[u8]) -> Option<u8> {
    if bytes.get(..2)? != [0xFF, 0xD8] {
        return None;
    }
    let mut i = 2;
    while i + 4 < bytes.len() {
        if bytes[i] != 0xFF {
            return None;
        }
        match bytes[i + 1] {
            0xFF => i += 1,
            0xDA => return Some(bytes[i + 4]),
            _ => i += 2 + u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]) as usize,
        }
    }
    None
}

/// Bytes of an image's DCT coefficients: 2 a sample, chroma at its subsampled resolution
/// (what nvJPEG's buffers hold between the Huffman and the IDCT pass; nvJPEG does not
/// document its exact sizes, the stand-in models them so).
pub fn coefficient_bytes(info: &JpegInfo) -> u64 {
    let (w, h) = (info.width as u64, info.height as u64);
    let chroma = match info.subsampling {
        Subsampling::S420 => w.div_ceil(2) * h.div_ceil(2),
        Subsampling::S422 => w.div_ceil(2) * h,
        Subsampling::S440 => w * h.div_ceil(2),
        Subsampling::S411 => w.div_ceil(4) * h,
        Subsampling::S410 => w.div_ceil(4) * h.div_ceil(2),
        _ => w * h,
    };
    2 * (w * h + 2 * chroma)
}

/// How many of a batch's engine images the route takes, and the meter that decides it: one
/// per decoder, shared with the helper that places the next batch when the engine's calls run
/// a batch ahead ([`SharedChooser`]), so a batch placed ahead takes its share as it is placed.
pub(super) struct ShareChooser {
    share: HybridShare,
    meter: ShareMeter,
    max_bytes: u64,
    // Batches waiting for the trainer (`GpuDecoder::set_waiting_batches`).
    pub(super) waiting: usize,
}

/// The decoder's [`ShareChooser`], `None` while the route is off; the helper placing the next
/// batch ahead holds a clone.
pub(super) type SharedChooser = Arc<std::sync::Mutex<Option<ShareChooser>>>;

/// Lock a [`SharedChooser`] (a panic elsewhere leaves its meter usable).
pub(super) fn chooser(c: &SharedChooser) -> std::sync::MutexGuard<'_, Option<ShareChooser>> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

impl ShareChooser {
    /// A chooser for `share`; `max_bytes` bounds a call's coefficients plus bitstreams (one
    /// arena).
    pub(super) fn new(share: HybridShare, max_bytes: u64) -> Self {
        Self { share, meter: ShareMeter::default(), max_bytes, waiting: 0 }
    }

    /// The images of a routed batch this route takes from the engine (slot indices): among the
    /// engine's images that [`batched_gpu_hybrid_takes`], from the last slot back, while the
    /// arena (`arena_bytes`) holds every image of the batch (the CPU route's too) with these
    /// ones whole and the call's buffers stay within `max_bytes`; as many as the share says
    /// (`auto`: none while a batch waits for the trainer, module doc) — and whether it yielded
    /// so, which the batch carries (it is counted when the batch decodes: a batch placed
    /// ahead takes its share while the one before it decodes).
    pub(super) fn take(
        &mut self,
        jobs: &[(&[u8], AugParams)],
        routes: &[Result<Classified, SlotError>],
        arena_bytes: u64,
    ) -> (Vec<usize>, bool) {
        if self.share == HybridShare::Auto && self.waiting >= YIELD_WHEN_WAITING {
            self.meter.route_idle();
            return (Vec::new(), true);
        }
        // Every image the arena will hold: the GPU routes' regions, and the CPU route's, placed
        // after the GPU decodes.
        let mut placed = 0u64;
        let mut engine_mpx = 0f64;
        let mut engine = Vec::new();
        for (i, r) in routes.iter().enumerate() {
            match r {
                Err(_) => {}
                Ok((Route::Cpu, roi, ..)) => placed += cpu_route_bytes(jobs[i].0, roi),
                Ok((route, roi, stored, _)) => {
                    placed += decoded_bytes(roi.w, roi.h);
                    if *route == Route::Hardware {
                        engine_mpx += stored.0 as f64 * stored.1 as f64 / 1e6;
                        engine.push(i);
                    }
                }
            }
        }
        let mut room = arena_bytes.saturating_sub(placed);
        let mut buffers = 0u64;
        let mut candidates = Vec::new();
        let mut mpx = Vec::new();
        for &i in engine.iter().rev() {
            let Ok((_, roi, (w, h), _)) = &routes[i] else { continue };
            let bytes = jobs[i].0;
            let info = crate::codec::jpeg::parse(bytes).ok().filter(|info| batched_gpu_hybrid_takes(info, first_scan_components(bytes)));
            let Some(info) = info else { continue };
            let grow = decoded_bytes(*w, *h) - decoded_bytes(roi.w, roi.h);
            let need = coefficient_bytes(&info) + bytes.len() as u64;
            if grow > room || buffers + need > self.max_bytes {
                continue;
            }
            room -= grow;
            buffers += need;
            candidates.push(i);
            mpx.push(*w as f64 * *h as f64 / 1e6);
        }
        let k = match self.share {
            HybridShare::Off => 0,
            HybridShare::Pinned(f) => ((f * engine.len() as f64).round() as usize).min(candidates.len()),
            HybridShare::Auto => split(&mpx, engine_mpx, self.meter.costs(), GPU_HUFFMAN_MIN_CALL, self.meter.probe_due()),
        };
        if k == 0 {
            self.meter.route_idle();
        }
        candidates.truncate(k);
        (candidates, false)
    }

    /// After a batch's decodes finished: feed the meter with the engine's `(seconds, stored
    /// megapixels)` and the route's call (`ran`, timed by `timers`). Returns the route's
    /// seconds (CUDA events; 0 when it did not run or failed).
    pub(super) fn measured(&mut self, engine: (f64, f64), ran: Option<HybridRan>, timers: &HybridTimers) -> Result<f64, GpuError> {
        self.meter.engine_ran(engine.0, engine.1);
        let Some(ran) = ran else { return Ok(0.0) };
        let secs = if ran.ok { timers.secs(ran.a)? } else { 0.0 };
        self.meter.route_ran(secs, ran.mpx, ran.ok);
        Ok(secs)
    }
}

/// A batch's call of the route: the arena it decoded into, its images' stored megapixels,
/// whether nvJPEG accepted it, and the host seconds the call took on its thread (the wait for
/// the previous call, parsing, queuing: [`crate::backend::EngineIdle::hybrid`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct HybridRan {
    pub(super) a: usize,
    mpx: f64,
    ok: bool,
    pub(super) host: f64,
}

/// Timing events around the route's call, one pair per arena (recorded on the route's stream;
/// the second is also what the decode stream waits for): the batch placed ahead may be called
/// while the batch before it is measured.
pub(super) struct HybridTimers([[CudaEvent; 2]; 2]);

impl HybridTimers {
    /// The event recorded after arena `a`'s call.
    pub(super) fn end(&self, a: usize) -> &CudaEvent {
        &self.0[a][1]
    }

    fn secs(&self, a: usize) -> Result<f64, GpuError> {
        elapsed_secs(&self.0[a][0], &self.0[a][1])
    }
}

/// The route's nvJPEG objects and its stream. It is called on one thread at a time: the
/// producer's, or, with the engine's calls a batch ahead, the engine's thread, which calls it
/// just before the engine's calls of the same batch ([`super::ahead`]).
pub(super) struct BatchedHybrid {
    state: JpegState,
    pub(super) stream: Arc<CudaStream>,
    pub(super) timers: Arc<HybridTimers>,
    // The event after the last call (waited before the next nvjpegDecodeBatchedInitialize).
    idle: CudaEvent,
}

impl BatchedHybrid {
    /// The route's nvJPEG handle.
    pub(super) fn handle(&self) -> &Arc<NvjpegHandle> {
        self.state.handle()
    }

    /// A GPU-hybrid handle (`flags`: the decoder's upsampling), a state and a stream.
    pub(super) fn new(ctx: &Arc<CudaContext>, flags: u32) -> Result<Self, GpuError> {
        let handle = NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_GPU_HYBRID, flags)?;
        let ev = || ctx.new_event(None).map_err(driver_err("cuEventCreate"));
        let timers = [[timing_event(ctx)?, timing_event(ctx)?], [timing_event(ctx)?, timing_event(ctx)?]];
        Ok(Self {
            state: JpegState::new(&handle)?,
            stream: ctx.new_stream().map_err(driver_err("cuStreamCreate"))?,
            timers: Arc::new(HybridTimers(timers)),
            idle: ev()?,
        })
    }

    /// Queue the call for `list` (placed whole in arena `a`, at `arena`) on the route's
    /// stream, after the canaries (`canaries_set`); `None` when `list` is empty. A refused call
    /// sends every image of it to `failed`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode(
        &mut self,
        a: usize,
        canaries_set: &CudaEvent,
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        arena: u64,
        out: &[Result<Decoded, SlotError>],
        failed: &mut Vec<(usize, String)>,
    ) -> Result<Option<HybridRan>, GpuError> {
        if list.is_empty() {
            return Ok(None);
        }
        let t = std::time::Instant::now();
        // nvJPEG: any running batched decoding must finish before nvjpegDecodeBatchedInitialize.
        self.idle.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        self.stream.wait(canaries_set).map_err(driver_err("cuStreamWaitEvent"))?;
        let mut images = Vec::with_capacity(list.len());
        let mut dests = Vec::with_capacity(list.len());
        let mut mpx = 0f64;
        for &i in list {
            let d = out[i].as_ref().expect("placed");
            images.push(jobs[i].0);
            let mut img = nvjpegImage_t::default();
            img.channel[0] = (arena + d.offset) as *mut u8;
            img.pitch[0] = 3 * d.roi.w as usize;
            dests.push(img);
            mpx += d.stored.0 as f64 * d.stored.1 as f64 / 1e6;
        }
        let [start, end] = &self.timers.0[a];
        start.record(&self.stream).map_err(driver_err("cuEventRecord"))?;
        let stream = self.stream.cu_stream() as _;
        let st = &mut self.state;
        let r = st.batched_initialize(list.len(), 1, RGBI).and_then(|()| {
            // SAFETY: one input and one destination per image; each destination is the whole
            // image's RGBI region inside the arena (placed whole by the decoder); the staged
            // bytes stay alive and unchanged until the decode stream has waited for this call's
            // `end` event (before its `done` event), or, when the batch fails first, until the
            // route's stream has run (`GpuDecoder::side_streams`); our stream.
            unsafe { st.decode_batched(&images, &mut dests, stream) }
        });
        // The state's guard whatever became of the timer: the next call's initialize waits on it.
        let ended = end.record(&self.stream).map_err(driver_err("cuEventRecord"));
        crate::backend::cuda::record_guard(&self.idle, &self.stream, "the batched GPU-hybrid state")?;
        ended?;
        if let Err(e) = &r {
            failed.extend(list.iter().map(|&i| (i, format!("batched GPU-hybrid decode call failed: {e}"))));
        }
        Ok(Some(HybridRan { a, mpx, ok: r.is_ok(), host: t.elapsed().as_secs_f64() }))
    }
}

/// The route as the decoder holds it: its call (`None` once moved to the engine's thread, with
/// `gpu_engine_ahead`), and what the producer needs of it wherever it is called.
pub(super) struct HybridRoute {
    pub(super) here: Option<BatchedHybrid>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) timers: Arc<HybridTimers>,
    pub(super) handle: Arc<NvjpegHandle>,
}

impl HybridRoute {
    pub(super) fn new(b: BatchedHybrid) -> Self {
        Self { stream: b.stream.clone(), timers: b.timers.clone(), handle: b.handle().clone(), here: Some(b) }
    }
}

/// Arena bytes a CPU-route image takes once decoded: the region it was routed with (the decoder
/// crops its decode to it), or, for an image routed without one (a PNG or WebP, or a header
/// stoke's JPEG parser refused: decoded whole), the whole image its header announces (0 when
/// no header says).
fn cpu_route_bytes(bytes: &[u8], roi: &Roi) -> u64 {
    if roi.w > 0 && roi.h > 0 {
        return decoded_bytes(roi.w, roi.h);
    }
    crate::codec::parse_info(bytes).map_or(0, |f| decoded_bytes(f.width, f.height))
}
