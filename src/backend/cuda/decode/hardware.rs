//! The hardware JPEG engine's part of a batch: batched calls sized by the engine width.

use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::nvjpeg::safe::{Bitstream, DecodeParams, JpegState, NvjpegHandle};
use crate::backend::cuda::nvjpeg::sys::{nvjpegBackend_t, nvjpegImage_t};
use crate::error::driver_err;
use crate::error::GpuError;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream};
use std::sync::Arc;

/// The hardware engine's route of a [`GpuDecoder`]: its handle, two batched-decode states
/// used in turn, the per-image params and, with `gpu_bitstream = device`, the bitstreams'
/// device buffer.
pub(super) struct HwPath {
    // The engine's handle (its states and params hold it too; classifiers are made on it).
    pub(super) handle: Arc<NvjpegHandle>,
    pub(super) params: Vec<DecodeParams>,
    // Two states used in turn, each guarded by the event recorded after its last call.
    pub(super) states: [JpegState; 2],
    pub(super) state_done: [CudaEvent; 2],
    pub(super) unit: usize,
    pub(super) per_call: usize,
    // Image size the engine's buffers were reserved for (per call slot, per state).
    pub(super) prealloc: (u32, u32),
    // The bitstreams' device buffer when the handle reads device memory
    // (`NVJPEG_BACKEND_HARDWARE_DEVICE`); `None`: it reads the host bytes.
    pub(super) bitstreams: Option<DeviceBitstreams>,
    // The second thread calling the engine, with the second state (`gpu_engine_lanes = 2`);
    // `None`: one thread uses both states in turn.
    pub(super) second: Option<EngineLane>,
}

impl HwPath {
    /// The engine's route on `backend` (with `flags`, or without interpolated upsampling if
    /// this nvJPEG refuses it: the engine without it beats no engine) and the classifier that
    /// asks it (a parse stream of its own on the engine's handle). `Err` says why there is
    /// none, and how loudly (logged by the caller: a GPU without the engine is normal, one whose
    /// engine fails is not).
    pub(super) fn open(
        backend: nvjpegBackend_t,
        flags: u32,
        plan: &DecoderPlan,
        ev: &dyn Fn() -> Result<CudaEvent, GpuError>,
    ) -> Result<(HwPath, Classifier), (log::Level, String)> {
        use log::Level::{Info, Warn};
        let handle = NvjpegHandle::new(backend, flags)
            .or_else(|e| {
                if flags == 0 {
                    return Err(e);
                }
                NvjpegHandle::new(backend, 0).inspect(|_| {
                    log::warn!("nvJPEG hardware decoder refused interpolated upsampling ({e}); using its default");
                })
            })
            .map_err(|e| (Info, format!("no nvJPEG hardware decoder on this GPU ({e})")))?;
        match handle.hardware_decoder_info() {
            // A VM or MIG slice can open the handle yet not report (or reach) the engine: run
            // without it rather than fail the backend.
            Err(e) => Err((Warn, format!("nvJPEG hardware decoder opened but its engine info failed ({e})"))),
            // nvJPEG documents 0 engines as "hardware decoder not available" (a GPU whose engine
            // is absent or taken, a MIG slice without one): no hardware route.
            Ok((engines, cores)) if engines == 0 || cores == 0 => {
                Err((Info, format!("nvJPEG hardware decoder reports {engines} engine(s) x {cores} core(s): not available")))
            }
            // Anything the engine's route needs that cannot be made (its states, params, parse
            // stream) drops that route; the CUDA decoders and the CPU take its images.
            Ok((engines, cores)) => HwPath::new(handle, plan, engines, cores, ev)
                .and_then(|hw| Classifier::new(plan, Some(&hw.handle)).map(|c| (hw, c)))
                .map_err(|e| (Warn, format!("nvJPEG hardware decoder: setting up its route failed ({e})"))),
        }
    }

    /// The engine's route: `engines × cores` images a unit, two states pre-allocated for a
    /// call of the plan's size, one params object per batch slot, a parse stream.
    pub(super) fn new(
        handle: Arc<NvjpegHandle>,
        plan: &DecoderPlan,
        engines: u32,
        cores: u32,
        ev: &dyn Fn() -> Result<CudaEvent, GpuError>,
    ) -> Result<Self, GpuError> {
        let unit = (engines as usize * cores as usize).max(1);
        let per_call = hw_calls(plan.batch, unit, plan.hw_max_per_call.max(unit))[0];
        let mut states = [JpegState::new(&handle)?, JpegState::new(&handle)?];
        let (pw, ph) = prealloc_dims(plan.max_dims, per_call, plan.arena.bytes);
        for st in &mut states {
            // Reserve the engine's buffers up front so steady state allocates nothing;
            // nvJPEG grows them itself for a larger image, so a refusal is not fatal.
            if let Err(e) = st.batched_pre_allocate(
                per_call,
                pw,
                ph,
                crate::backend::cuda::nvjpeg::sys::nvjpegChromaSubsampling_t::NVJPEG_CSS_444,
                RGBI,
            ) {
                log::warn!("nvJPEG hardware pre-allocation for {per_call} images of {pw}x{ph} failed: {e}");
            }
        }
        let params = (0..plan.batch).map(|_| DecodeParams::new(&handle)).collect::<Result<Vec<_>, _>>()?;
        let state_done = [ev()?, ev()?];
        log::info!("nvJPEG hardware decoder: {engines} engine(s) x {cores} core(s); {per_call} images per call");
        Ok(HwPath { handle, params, states, state_done, unit, per_call, prealloc: (pw, ph), bitstreams: None, second: None })
    }
}

/// The engine's bitstreams in device memory (`gpu_bitstream = device`,
/// `NVJPEG_BACKEND_HARDWARE_DEVICE`): before its calls, the engine's images' bytes are copied
/// into one device buffer sized like a staging slot. The engine reads them when called (as it
/// writes its outputs then), so the copies are waited for on the host first. The buffer is
/// written again only by the next batch's copies, queued after this batch's decode returned
/// (`GpuDecoder::decode_routed` waits for every decode of a batch before it returns).
pub(super) struct DeviceBitstreams {
    // Owns the memory `ptr` points into.
    pub(super) _buf: CudaSlice<u8>,
    pub(super) ptr: u64,
    pub(super) bytes: u64,
    // Recorded after the copies of a batch, waited for before its first call.
    pub(super) copied: CudaEvent,
    // Host-to-device copies made, and images that found no room (decoded on the CPU).
    pub(super) copies: u64,
    pub(super) overflow: u64,
}

/// Where a batch's bitstreams go in the device buffer, and the copies that put them there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BitstreamPlan {
    /// Each image's device offset (`None`: no room, the image is decoded on the CPU).
    pub at: Vec<Option<u64>>,
    /// The copies, as `(host address, device offset, length)`.
    pub copies: Vec<(usize, u64, usize)>,
}

/// Where each of a batch's bitstreams goes in a device buffer of `capacity` bytes, and the
/// copies that put them there: `images[k]` is `(host address, length)` of the k-th engine
/// image; `span`, the host range `(address, length)` that holds every image of the batch when
/// one place does (a staging slot, a reader's pinned buffer).
///
/// With a span that holds them all and whose covering range fits, one copy of that range (the
/// images' own bytes and what lies between them in the same place); otherwise the images one
/// after another, a copy per run of images adjacent in host memory.
pub fn bitstream_copies(images: &[(usize, usize)], span: Option<(usize, usize)>, capacity: u64) -> BitstreamPlan {
    let placed = images.iter().filter(|im| im.1 > 0);
    let lo = placed.clone().map(|im| im.0).min();
    let hi = placed.map(|im| im.0 + im.1).max();
    if let (Some(lo), Some(hi), Some((s, n))) = (lo, hi, span) {
        let inside = images.iter().all(|im| im.1 == 0 || (im.0 >= s && im.0 + im.1 <= s + n));
        if inside && (hi - lo) as u64 <= capacity {
            let at = images.iter().map(|im| Some(if im.1 == 0 { 0 } else { (im.0 - lo) as u64 })).collect();
            return BitstreamPlan { at, copies: vec![(lo, 0, hi - lo)] };
        }
    }
    let mut at = Vec::with_capacity(images.len());
    let mut copies: Vec<(usize, u64, usize)> = Vec::new();
    let mut used = 0u64;
    for &(p, len) in images {
        if used + len as u64 > capacity {
            at.push(None);
            continue;
        }
        at.push(Some(used));
        if len > 0 {
            match copies.last_mut() {
                // Adjacent in host memory and placed right after it: one copy.
                Some(c) if c.0 + c.2 == p && c.1 + c.2 as u64 == used => c.2 += len,
                _ => copies.push((p, used, len)),
            }
        }
        used += len as u64;
    }
    BitstreamPlan { at, copies }
}

impl DeviceBitstreams {
    /// Queue the copies of `list`'s bitstreams on `stream` and record [`Self::copied`]; each
    /// image's device address (`None`: no room).
    fn upload(
        &mut self,
        stream: &CudaStream,
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        span: Option<&[u8]>,
    ) -> Result<Vec<Option<u64>>, GpuError> {
        let images: Vec<(usize, usize)> = list.iter().map(|&i| (jobs[i].0.as_ptr() as usize, jobs[i].0.len())).collect();
        let BitstreamPlan { at, copies } = bitstream_copies(&images, span.map(|s| (s.as_ptr() as usize, s.len())), self.bytes);
        for &(host, offset, len) in &copies {
            // SAFETY: `host .. host + len` lies inside the batch's bytes (one image's, a run of
            // adjacent images', or the span that holds them all), written and alive until the
            // decode returns.
            let bytes = unsafe { std::slice::from_raw_parts(host as *const u8, len) };
            // SAFETY: `offset + len` ≤ the buffer's bytes (`bitstream_copies`); nothing reads
            // the buffer now (the last batch's decodes returned); the host bytes stay unchanged
            // until the copy is waited for, before the engine's first call.
            unsafe { cudarc::driver::result::memcpy_htod_async(self.ptr + offset, bytes, stream.cu_stream()) }
                .map_err(driver_err("cuMemcpyHtoDAsync"))?;
        }
        self.copied.record(stream).map_err(driver_err("cuEventRecord"))?;
        self.copies += copies.len() as u64;
        self.overflow += at.iter().filter(|a| a.is_none()).count() as u64;
        Ok(at.into_iter().map(|a| a.map(|o| self.ptr + o)).collect())
    }
}

impl HwPath {
    /// The hardware route, in calls of `per_call` images on `stream`, two states in turn —
    /// or, with a second lane ([`EngineLane`]), the calls alternating between this thread and
    /// the lane's. `canaries_set` is the event recorded after the canaries were written;
    /// `span`, the host bytes that hold every job's when one place does (see
    /// [`bitstream_copies`]). Returns the host seconds spent inside the engine's calls: wall
    /// time (from the first call to the last one's return, with two lanes), and the CPU time of
    /// the threads calling; and when the first call began (after the waits for the canaries and
    /// the bitstreams: the engine's idle time on the host ends there, [`crate::backend::EngineIdle`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode(
        &mut self,
        stream: &CudaStream,
        canaries_set: &CudaEvent,
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        span: Option<&[u8]>,
        arena: u64,
        out: &[Result<Decoded, SlotError>],
        failed: &mut Vec<(usize, String)>,
    ) -> Result<((f64, f64), std::time::Instant), GpuError> {
        // Bitstreams in device memory: copied in first (queued after the canaries).
        let on_device = match self.bitstreams.as_mut() {
            Some(b) => Some(b.upload(stream, list, jobs, span)?),
            None => None,
        };
        // The engine's batched decode does not wait for work queued on its stream: it writes
        // the outputs when called (torchcodec PR #1634). The canaries were queued on this
        // stream just before; a decode racing them would have its pixels overwritten by a
        // canary (and counted as skipped, or worse, not). The host waits for them first, and
        // for the bitstreams' copies (read at the call too).
        canaries_set.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        if let Some(b) = &self.bitstreams {
            b.copied.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        }
        let first_call = std::time::Instant::now();
        // What the engine takes: with device bitstreams, the images that found room.
        let (list, device_at): (Vec<usize>, Vec<Option<u64>>) = match on_device {
            None => (list.to_vec(), vec![None; list.len()]),
            Some(at) => {
                let bytes = self.bitstreams.as_ref().map_or(0, |b| b.bytes);
                let mut kept = (Vec::new(), Vec::new());
                for (&i, a) in list.iter().zip(at) {
                    match a {
                        Some(a) => {
                            kept.0.push(i);
                            kept.1.push(Some(a));
                        }
                        None => failed.push((
                            i,
                            format!("no room in the {bytes}-byte device buffer of the engine's bitstreams (gpu_bitstream = device)"),
                        )),
                    }
                }
                kept
            }
        };
        // Each call's images (and device bitstreams) and params: contiguous runs of the list.
        let hw = self;
        let mut calls = Vec::new();
        let mut params = &mut hw.params[..list.len()];
        let mut at = 0;
        for size in hw_calls(list.len(), hw.unit, hw.per_call) {
            let (head, tail) = std::mem::take(&mut params).split_at_mut(size);
            calls.push(EngineCall { idx: &list[at..at + size], device: &device_at[at..at + size], params: head });
            params = tail;
            at += size;
        }
        let [s0, s1] = &mut hw.states;
        let [d0, d1] = &hw.state_done;
        let Some(lane) = &hw.second else {
            // One thread: the calls in order, the two states in turn.
            let mut turn = [(s0, d0), (s1, d1)];
            let (mut in_calls, mut in_calls_cpu) = (0f64, 0f64);
            for (k, call) in calls.into_iter().enumerate() {
                let (st, done) = &mut turn[k % 2];
                let (wall, cpu) = call.run(st, done, stream, jobs, arena, out, failed)?;
                in_calls += wall;
                in_calls_cpu += cpu;
            }
            return Ok(((in_calls, in_calls_cpu), first_call));
        };
        // Two lanes (`gpu_engine_lanes = 2`): call k on lane k % 2 with state k % 2 — the state
        // one thread would use for it —, lane 1 on its own thread and stream, which this stream
        // joins before returning. Its stream is ordered after the canaries and the bitstreams'
        // copies as this one is (the host waited for both above; the waits say so to the device).
        lane.stream.wait(canaries_set).map_err(driver_err("cuStreamWaitEvent"))?;
        if let Some(b) = &hw.bitstreams {
            lane.stream.wait(&b.copied).map_err(driver_err("cuStreamWaitEvent"))?;
        }
        let (mine, theirs): (Vec<_>, Vec<_>) = calls.into_iter().enumerate().partition(|(k, _)| k % 2 == 0);
        let start = (std::time::Instant::now(), failed.len());
        let lane_stream = &*lane.stream;
        let (there, here) = lane.helper.beside(
            move || -> Result<(Vec<(usize, String)>, f64), GpuError> {
                lane_stream.context().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
                let (mut lane_failed, mut cpu) = (Vec::new(), 0f64);
                for (_, call) in theirs {
                    cpu += call.run(s1, d1, lane_stream, jobs, arena, out, &mut lane_failed)?.1;
                }
                Ok((lane_failed, cpu))
            },
            || {
                mine.into_iter()
                    .try_fold(0f64, |cpu, (_, call)| Ok::<_, GpuError>(cpu + call.run(s0, d0, stream, jobs, arena, out, failed)?.1))
            },
        );
        // The stream joins the lane's whatever failed: its queued work is then covered by
        // everything recorded on this stream after (the staged bytes' release, the arena's use).
        let joined = stream.join(lane_stream).map_err(driver_err("cuStreamWaitEvent"));
        let (lane_failed, lane_cpu) = there?;
        let here_cpu = here?;
        joined?;
        // The failed images in list order, as one thread would have found them.
        failed.extend(lane_failed);
        failed[start.1..].sort_by_key(|(i, _)| *i);
        Ok(((start.0.elapsed().as_secs_f64(), here_cpu + lane_cpu), first_call))
    }
}

/// The second thread calling the engine (`gpu_engine_lanes = 2`): its helper thread and its
/// stream; it uses the route's second state.
pub(super) struct EngineLane {
    pub(super) stream: Arc<CudaStream>,
    pub(super) helper: crate::backend::helpers::Helpers,
}

impl EngineLane {
    /// The lane's stream on `ctx` and its thread, named `stoke-gpu-hw` (`stoke bench`'s
    /// cores by thread group count it apart from the producer's).
    pub(super) fn new(ctx: &Arc<cudarc::driver::CudaContext>) -> Result<Self, GpuError> {
        let stream = ctx.new_stream().map_err(driver_err("cuStreamCreate"))?;
        let helper = crate::backend::helpers::Helpers::new("stoke-gpu-hw", 1)
            .map_err(|message| GpuError::Cuda { call: "starting the hardware engine's second thread", message })?;
        Ok(Self { stream, helper })
    }
}

/// One call of the engine: the list's images `idx` (each with its device bitstream, if any)
/// and their params.
struct EngineCall<'a> {
    idx: &'a [usize],
    device: &'a [Option<u64>],
    params: &'a mut [DecodeParams],
}

impl EngineCall<'_> {
    /// Decode the call's images into their arena places with `st` on `stream`, once the
    /// state's previous call is done (`state_done`, recorded again after this one). A failed
    /// call sends every image of it to `failed` (one bad image fails the whole call). Returns
    /// the host seconds inside the call: wall time, and this thread's CPU time.
    #[allow(clippy::too_many_arguments)]
    fn run(
        self,
        st: &mut JpegState,
        state_done: &CudaEvent,
        stream: &CudaStream,
        jobs: &[(&[u8], AugParams)],
        arena: u64,
        out: &[Result<Decoded, SlotError>],
        failed: &mut Vec<(usize, String)>,
    ) -> Result<(f64, f64), GpuError> {
        state_done.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        let size = self.idx.len();
        let mut images = Vec::with_capacity(size);
        let mut dests = Vec::with_capacity(size);
        for ((&i, device), pr) in self.idx.iter().zip(self.device).zip(self.params.iter_mut()) {
            let d = out[i].as_ref().expect("placed");
            pr.set_output_format(RGBI)?;
            let whole = (d.roi.x, d.roi.y, d.roi.w, d.roi.h) == (0, 0, d.stored.0, d.stored.1);
            pr.set_roi((!whole).then_some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)))?;
            images.push(match *device {
                Some(ptr) => Bitstream::Device { ptr, len: jobs[i].0.len() },
                None => Bitstream::Host(jobs[i].0),
            });
            let mut img = nvjpegImage_t::default();
            img.channel[0] = (arena + d.offset) as *mut u8;
            img.pitch[0] = 3 * d.roi.w as usize;
            dests.push(img);
        }
        let (t, cpu) = (std::time::Instant::now(), crate::backend::thread_cpu_secs());
        let r = st.batched_initialize(size, 1, RGBI).and_then(|()| {
            // SAFETY: `size` inputs (pinned staging bytes alive until decode returns and the
            // done event is waited, or their copies in the device buffer, written and waited
            // for before the first call), `size` destinations inside the arena each sized for
            // its ROI in RGBI (disjoint from every other call's), `size` live params; the
            // stream is ours.
            unsafe { st.decode_batched_ex(&images, &mut dests, self.params, stream.cu_stream() as _) }
        });
        let spent = (t.elapsed().as_secs_f64(), crate::backend::thread_cpu_secs() - cpu);
        crate::backend::cuda::record_guard(state_done, stream, "a hardware decode state")?;
        if let Err(e) = r {
            // One bad image fails the whole call: every image of it goes to the CPU.
            failed.extend(self.idx.iter().map(|&i| (i, format!("hardware decode call failed: {e}"))));
        }
        Ok(spent)
    }
}

/// Image size the hardware decoder's buffers are reserved for: the index's largest, scaled
/// down (aspect kept) so `per_call` such images take no more than one decode arena — one huge
/// image in the index must not reserve gigabytes per call slot.
pub fn prealloc_dims(max_dims: (u32, u32), per_call: usize, arena_bytes: u64) -> (u32, u32) {
    let (w, h) = (max_dims.0.max(1) as f64, max_dims.1.max(1) as f64);
    let budget = arena_bytes as f64 / (3.0 * per_call.max(1) as f64);
    let k = (budget / (w * h)).sqrt().min(1.0);
    (((w * k) as u32).max(1), ((h * k) as u32).max(1))
}

/// Bytes each CUDA-decoder slot's nvJPEG buffers (one pinned, one device) are sized to at
/// start-up, so decodes allocate nothing (contract 5): the DCT coefficients of the index's
/// largest image (`pixels`, stored), 2 bytes per sample of 3 full-resolution components
/// (4:4:4, the worst case).
/// A memory budget may cut it ([`super::MemoryPlan::fit`]); an image whose coefficients then
/// need more makes nvJPEG grow that slot's buffers during the decode, as it does unasked:
/// bounded by this figure per buffer.
pub fn cuda_slot_bytes(pixels: u64) -> u64 {
    6 * pixels
}
