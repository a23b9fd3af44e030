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
//! CPU, and the meter backs off ([`ShareMeter::route_ran`]). The call is made on the
//! producer's thread before the engine's calls: its host part (parsing) delays them by that
//! much, which the route's measured time includes.
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

/// The route's nvJPEG objects, its stream, and its meter.
pub(super) struct BatchedHybrid {
    state: JpegState,
    pub(super) stream: Arc<CudaStream>,
    // Timing events around the call, and the event after it (waited before the next
    // nvjpegDecodeBatchedInitialize).
    timers: [CudaEvent; 2],
    idle: CudaEvent,
    share: HybridShare,
    meter: ShareMeter,
    // This batch's call: its stored megapixels and whether nvJPEG accepted it.
    ran: Option<(f64, bool)>,
    max_bytes: u64,
    // Batches waiting for the trainer before this one (`GpuDecoder::set_waiting_batches`).
    pub(super) waiting: usize,
    // Batches in which the `auto` share yielded to the trainer.
    pub(super) yielded: u64,
}

impl BatchedHybrid {
    /// The route's nvJPEG handle.
    pub(super) fn handle(&self) -> &Arc<NvjpegHandle> {
        self.state.handle()
    }

    /// A GPU-hybrid handle (`flags`: the decoder's upsampling), a state and a stream;
    /// `max_bytes` bounds a call's coefficients plus bitstreams (one arena).
    pub(super) fn new(ctx: &Arc<CudaContext>, flags: u32, share: HybridShare, max_bytes: u64) -> Result<Self, GpuError> {
        let handle = NvjpegHandle::new(nvjpegBackend_t::NVJPEG_BACKEND_GPU_HYBRID, flags)?;
        let ev = || ctx.new_event(None).map_err(driver_err("cuEventCreate"));
        Ok(Self {
            state: JpegState::new(&handle)?,
            stream: ctx.new_stream().map_err(driver_err("cuStreamCreate"))?,
            timers: [timing_event(ctx)?, timing_event(ctx)?],
            idle: ev()?,
            share,
            meter: ShareMeter::default(),
            ran: None,
            max_bytes,
            waiting: 0,
            yielded: 0,
        })
    }

    /// The images of a routed batch this route takes from the engine (slot indices): among the
    /// engine's images that [`batched_gpu_hybrid_takes`], from the last slot back, while the
    /// arena (`arena_bytes`) holds every image of the batch (the CPU route's too) with these
    /// ones whole and the call's buffers stay within `max_bytes`; as many as the share says
    /// (`auto`: none while a batch waits for the trainer, module doc).
    pub(super) fn take(&mut self, jobs: &[(&[u8], AugParams)], routes: &[Result<Classified, SlotError>], arena_bytes: u64) -> Vec<usize> {
        if self.share == HybridShare::Auto && self.waiting >= YIELD_WHEN_WAITING {
            self.yielded += 1;
            self.meter.route_idle();
            return Vec::new();
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
        candidates
    }

    /// Queue the call for `list` (placed whole in the arena at `arena`) on the route's stream,
    /// after the canaries (`canaries_set`). A refused call sends every image of it to `failed`.
    pub(super) fn decode(
        &mut self,
        canaries_set: &CudaEvent,
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        arena: u64,
        out: &[Result<Decoded, SlotError>],
        failed: &mut Vec<(usize, String)>,
    ) -> Result<(), GpuError> {
        self.ran = None;
        if list.is_empty() {
            return Ok(());
        }
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
        self.timers[0].record(&self.stream).map_err(driver_err("cuEventRecord"))?;
        let stream = self.stream.cu_stream() as _;
        let st = &mut self.state;
        let r = st.batched_initialize(list.len(), 1, RGBI).and_then(|()| {
            // SAFETY: one input and one destination per image; each destination is the whole
            // image's RGBI region inside the arena (placed whole by the decoder); the staged
            // bytes stay alive and unchanged until `decode_routed` has waited for this stream
            // (joined into the decode stream before its `done` event); our stream.
            unsafe { st.decode_batched(&images, &mut dests, stream) }
        });
        self.timers[1].record(&self.stream).map_err(driver_err("cuEventRecord"))?;
        crate::backend::cuda::record_guard(&self.idle, &self.stream, "the batched GPU-hybrid state")?;
        if let Err(e) = &r {
            failed.extend(list.iter().map(|&i| (i, format!("batched GPU-hybrid decode call failed: {e}"))));
        }
        self.ran = Some((mpx, r.is_ok()));
        Ok(())
    }

    /// After the batch's decodes finished: feed the meter with the engine's `(seconds, stored
    /// megapixels)` and the route's call. Returns the route's seconds (CUDA events; 0 when it
    /// did not run or failed).
    pub(super) fn measured(&mut self, engine: (f64, f64)) -> Result<f64, GpuError> {
        self.meter.engine_ran(engine.0, engine.1);
        let Some((mpx, ok)) = self.ran.take() else { return Ok(0.0) };
        let secs = if ok { elapsed_secs(&self.timers[0], &self.timers[1])? } else { 0.0 };
        self.meter.route_ran(secs, mpx, ok);
        Ok(secs)
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
