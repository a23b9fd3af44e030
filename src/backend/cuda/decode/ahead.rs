//! The two decode arenas' shared part ([`Arenas`]), a batch's place in one of them
//! ([`place`]: steps 1 and 2 of [`GpuDecoder::decode_routed`]), and the hardware engine run a
//! batch ahead on a thread of its own ([`EngineWorker`], `gpu_engine_ahead`, off by default).
//!
//! The engine decodes only inside its calls, which hold the calling thread until it is done.
//! Without the worker the producer makes them, so the engine idles from a batch's last call to
//! the next batch's first, while the producer finishes the batch (the CUDA decoders' join, the
//! canary check, the CPU route's upload, the augment launch) and the pipeline hands it over: on
//! an H200 the engine was busy 11.6 ms of a 14.9 ms batch ([`crate::backend::EngineIdle`]
//! measures where the rest goes). With the worker the engine's calls of a batch are a task on
//! the `stoke-gpu-engine` thread, queued as soon as the batch is placed: the helper that
//! prepares the next batch places it in the other arena, writes its canaries and queues its
//! engine task, so the engine starts on it the moment the current batch's calls return, while
//! the producer still finishes the current batch. The producer waits for a batch's task (its
//! failures, its times) where it made the calls before; everything after the calls (the check,
//! retries, uploads, the augment) is as without it.
//!
//! # Invariants
//! - A batch's place is in arena `a`, chosen by the producer in batch order (the batch running
//!   and the one prepared ahead use different arenas), written only after the augment that read
//!   it last is done ([`Arenas::wait_free`]); each arena has its own canary buffers and
//!   "canaries written" event, so a batch placed ahead does not touch the running batch's.
//! - The worker owns the engine's route (its handle's states and params: nvJPEG's one thread
//!   per state) and its own stream; its tasks run in the order queued.
//! - A task reads the batch's bytes (and, with device bitstreams, copies them) until its result
//!   is received: [`Pending`] waits for it when dropped unreceived, and a batch's bytes are
//!   released (a staging slot) or given back to the readers (a pooled buffer, held by the task:
//!   [`crate::backend::cuda::staging::pool::PoolHold`]) only after.
//! - The producer's stream waits for the task's end event before the canary check, so the
//!   check and everything after it see the engine's pixels.

use super::batched_hybrid::{chooser, BatchedHybrid, HybridRan, SharedChooser};
use super::hardware::HwPath;
use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::device::{timing_event, Gpu};
use crate::backend::cuda::module::launch;
use crate::backend::cuda::staging::pool::PoolHold;
use crate::error::{alloc_err, driver_err, GpuError, SlotError};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PinnedHostSlice, PushKernelArg};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// One arena's canary buffers: the targets (host and device) and the check's results.
pub(super) struct CanaryBufs {
    targets_host: PinnedHostSlice<DecodeTarget>,
    targets_dev: CudaSlice<DecodeTarget>,
    pub(super) intact_host: PinnedHostSlice<u32>,
    intact_dev: CudaSlice<u32>,
}

impl CanaryBufs {
    fn new(ctx: &Arc<cudarc::driver::CudaContext>, stream: &Arc<CudaStream>, n: usize) -> Result<Self, GpuError> {
        // SAFETY (both pinned buffers): plain data, written by the host (targets) or by a copy
        // (intact) before being read. `intact` is read on the host: flags 0, not
        // write-combined (docs/CONTRACTS.md, "Toolchain facts").
        let targets_host = unsafe { ctx.alloc_pinned::<DecodeTarget>(n) }.map_err(driver_err("cuMemHostAlloc"))?;
        let intact_host = unsafe { ctx.alloc_pinned_with_flags::<u32>(n, 0) }.map_err(driver_err("cuMemHostAlloc"))?;
        // SAFETY: small device arrays written before they are read (upload / check kernel).
        let targets_dev = unsafe { stream.alloc::<DecodeTarget>(n) }.map_err(|e| alloc_err("cuMemAlloc", e, n * 24, "decode targets"))?;
        let intact_dev = unsafe { stream.alloc::<u32>(n) }.map_err(|e| alloc_err("cuMemAlloc", e, n * 4, "canary results"))?;
        Ok(Self { targets_host, targets_dev, intact_host, intact_dev })
    }

    /// Launch the canary kernel `name` over the first `count` targets of `arena` on `stream`
    /// (`check`: the check, which writes how many canaries of each stayed intact).
    pub(super) fn launch(
        &self,
        gpu: &Gpu,
        stream: &CudaStream,
        name: &'static str,
        arena: u64,
        count: usize,
        check: bool,
    ) -> Result<(), GpuError> {
        let f = gpu.kernels()?.function(name)?;
        let mut b = stream.launch_builder(&f);
        let (targets, _t) = self.targets_dev.device_ptr(stream);
        let (intact, _i) = self.intact_dev.device_ptr(stream);
        b.arg(&arena).arg(&targets);
        if check {
            b.arg(&intact);
        }
        let cfg = LaunchConfig { grid_dim: (count as u32, 1, 1), block_dim: (CANARIES, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: (arena, targets[, intact]) is the kernels' parameter list; every target lies
        // inside the arena (placed by the cursor) and `count` targets were uploaded.
        unsafe { launch(&mut b, name, cfg) }
    }

    /// Queue the check's results' copy to the host on `stream`.
    pub(super) fn read_back(&mut self, stream: &Arc<CudaStream>) -> Result<(), GpuError> {
        stream.memcpy_dtoh(&self.intact_dev, &mut self.intact_host).map_err(driver_err("cuMemcpyDtoHAsync"))
    }
}

/// The two decode arenas, as the producer and the helper placing a batch ahead share them:
/// their addresses and size, the guard of the augment that read each last, and each one's
/// canary buffers and "canaries written" event (module invariants).
pub(super) struct Arenas {
    pub(super) ptr: [u64; 2],
    pub(super) bytes: u64,
    free: [CudaEvent; 2],
    used: [AtomicBool; 2],
    canaries: [Mutex<CanaryBufs>; 2],
    pub(super) canaries_set: [CudaEvent; 2],
}

impl Arenas {
    /// The arenas at `ptr` of `bytes` each, with canary buffers for `batch` images each.
    pub(super) fn new(
        ctx: &Arc<cudarc::driver::CudaContext>,
        stream: &Arc<CudaStream>,
        ptr: [u64; 2],
        bytes: u64,
        batch: usize,
    ) -> Result<Self, GpuError> {
        let ev = || ctx.new_event(None).map_err(driver_err("cuEventCreate"));
        Ok(Self {
            ptr,
            bytes,
            free: [ev()?, ev()?],
            used: [AtomicBool::new(false), AtomicBool::new(false)],
            canaries: [Mutex::new(CanaryBufs::new(ctx, stream, batch)?), Mutex::new(CanaryBufs::new(ctx, stream, batch)?)],
            canaries_set: [ev()?, ev()?],
        })
    }

    /// Arena `a`'s canary buffers (the batch placed in it and its check use them in turn).
    pub(super) fn canaries(&self, a: usize) -> MutexGuard<'_, CanaryBufs> {
        self.canaries[a].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for the augment that read arena `a` last (the batch two before the one placed in
    /// it); the seconds waited.
    pub(super) fn wait_free(&self, a: usize) -> Result<f64, GpuError> {
        let t = Instant::now();
        if self.used[a].load(Ordering::Acquire) {
            self.free[a].synchronize().map_err(driver_err("cuEventSynchronize"))?;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// The augment reading arena `a` is enqueued on `stream`: the arena is free once it ran.
    pub(super) fn release(&self, a: usize, stream: &CudaStream) -> Result<(), GpuError> {
        crate::backend::cuda::record_guard(&self.free[a], stream, "a decode arena")?;
        self.used[a].store(true, Ordering::Release);
        Ok(())
    }

    /// Wait for the last reader of both arenas (before they are freed).
    pub(super) fn wait_all(&self) {
        for a in 0..2 {
            if self.used[a].load(Ordering::Acquire) {
                if let Err(e) = self.free[a].synchronize() {
                    log::error!("waiting for the augment reading decode arena {a} before freeing it: {e}");
                }
            }
        }
    }
}

/// A batch placed in arena `a` with its canaries written ([`place`]): where each image goes,
/// which decoder takes it, and the cursor the CPU route's images are placed with after.
pub(super) struct Placement {
    pub(super) a: usize,
    pub(super) arena: u64,
    pub(super) cursor: ArenaCursor,
    pub(super) out: Vec<Result<Decoded, SlotError>>,
    pub(super) hw_list: Vec<usize>,
    pub(super) cuda_list: Vec<usize>,
    pub(super) cpu_list: Vec<usize>,
    pub(super) batched_list: Vec<usize>,
    pub(super) gpu_list: Vec<usize>,
    // The batched GPU-hybrid route's `auto` share yielded this batch to the trainer.
    pub(super) yielded: bool,
    // Seconds waited for the arena, then spent placing and writing the canaries.
    pub(super) arena_wait: f64,
    pub(super) secs: f64,
}

/// Steps 1 and 2 of a batch: wait for arena `a`, give every image its place (ROI-sized for the
/// GPU decoders; whole for the batched GPU-hybrid route's share, `moved`), and write the
/// canaries into every GPU destination on `stream`, recording `canaries_set[a]` after them.
pub(super) fn place(
    arenas: &Arenas,
    a: usize,
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    routes: &[Result<Classified, SlotError>],
    moved: &[usize],
) -> Result<Placement, GpuError> {
    let arena_wait = arenas.wait_free(a)?;
    let t = Instant::now();
    let arena = arenas.ptr[a];
    let mut cursor = ArenaCursor::new(arenas.bytes);
    let (mut hw_list, mut cuda_list, mut cpu_list, mut batched_list) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let out = routes
        .iter()
        .enumerate()
        .map(|(i, r)| match r {
            Err(e) => Err(e.clone()),
            // Placed once decoded: the CPU decoder widens the region to its iMCU grid.
            Ok((Route::Cpu, roi, stored, _)) => {
                cpu_list.push(i);
                Ok(Decoded { offset: 0, roi: *roi, stored: *stored, route: Route::Cpu })
            }
            Ok((route, roi, stored, _)) => {
                let (route, roi) = match moved.contains(&i) {
                    true => (Route::GpuHybridBatched, Roi { x: 0, y: 0, w: stored.0, h: stored.1 }),
                    false => (*route, *roi),
                };
                match cursor.place(roi.w, roi.h) {
                    None => Err(arena_full(arenas.bytes)),
                    Some(offset) => {
                        match route {
                            Route::Hardware => hw_list.push(i),
                            Route::GpuHybridBatched => batched_list.push(i),
                            _ => cuda_list.push(i),
                        }
                        Ok(Decoded { offset, roi, stored: *stored, route })
                    }
                }
            }
        })
        .collect::<Vec<_>>();
    let gpu_list: Vec<usize> = hw_list.iter().chain(&cuda_list).chain(&batched_list).copied().collect();
    if !gpu_list.is_empty() {
        let mut bufs = arenas.canaries(a);
        let CanaryBufs { targets_host, targets_dev, .. } = &mut *bufs;
        let targets = targets_host.as_mut_slice().map_err(driver_err("cuEventSynchronize"))?;
        for (k, &i) in gpu_list.iter().enumerate() {
            let d = out[i].as_ref().expect("placed above");
            targets[k] = DecodeTarget { offset: d.offset, width: d.roi.w, height: d.roi.h, pitch: 3 * d.roi.w, pad: 0 };
        }
        stream.memcpy_htod(&*targets_host, targets_dev).map_err(driver_err("cuMemcpyHtoDAsync"))?;
        bufs.launch(gpu, stream, "stoke_canary_set", arena, gpu_list.len(), false)?;
        arenas.canaries_set[a].record(stream).map_err(driver_err("cuEventRecord"))?;
    }
    Ok(Placement {
        a,
        arena,
        cursor,
        out,
        hw_list,
        cuda_list,
        cpu_list,
        batched_list,
        gpu_list,
        yielded: false,
        arena_wait,
        secs: t.elapsed().as_secs_f64(),
    })
}

/// A batch placed and its engine calls queued ahead ([`AheadPlacer::place_and_queue`]), for
/// [`GpuDecoder::decode_routed`].
pub struct PlacedAhead {
    pub(super) placement: Placement,
    pub(super) engine: Option<Pending>,
}

impl PlacedAhead {
    /// The arena the batch was placed in.
    pub fn arena(&self) -> usize {
        self.placement.a
    }

    /// Whether its engine calls were queued (it has engine images).
    pub fn queued(&self) -> bool {
        self.engine.is_some()
    }
}

/// What a batch's engine task did: the images whose calls failed (with why), the host seconds
/// inside the calls (wall, CPU), when its first call began and its last returned, the worker's
/// idle time before it (since the last call of the previous task that called the engine
/// returned; `None` for the first, and for a task without engine images),
/// the device bitstreams' counters so far, and the batched GPU-hybrid call it made first.
pub(super) struct EngineDone {
    pub(super) failed: Vec<(usize, String)>,
    pub(super) in_calls: (f64, f64),
    pub(super) first_call: Instant,
    pub(super) engine_end: Instant,
    pub(super) idle_before: Option<f64>,
    pub(super) bitstreams: (u64, u64),
    pub(super) hybrid: Option<HybridRan>,
}

/// A queued engine task's result, to wait for. Dropped unreceived, it waits anyway: the task
/// reads its batch's bytes until it is done (module invariants).
pub(super) struct Pending {
    rx: Option<crossbeam_channel::Receiver<Result<EngineDone, GpuError>>>,
}

impl Pending {
    /// The task's result, once it is done.
    pub(super) fn wait(mut self) -> Result<EngineDone, GpuError> {
        let rx = self.rx.take().expect("a pending task is waited for once");
        rx.recv().unwrap_or_else(|_| Err(worker_gone()))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            if let Ok(Err(e)) = rx.recv() {
                log::warn!("an engine task for a batch that was not run failed: {e}");
            }
        }
    }
}

fn worker_gone() -> GpuError {
    GpuError::Cuda {
        call: "the hardware engine's thread",
        message: "it ended before the batch's engine calls were made (see its panic above)".into(),
    }
}

/// A byte range a task reads (an address and length): alive until the task is done, which its
/// [`Pending`] guarantees.
#[derive(Clone, Copy)]
struct Raw(usize, usize);

impl Raw {
    fn of(s: &[u8]) -> Self {
        Raw(s.as_ptr() as usize, s.len())
    }

    /// SAFETY: the range is alive and unchanged for `'a` (the task's [`Pending`] is not yet
    /// received, and whoever holds it keeps the bytes).
    unsafe fn get<'a>(self) -> &'a [u8] {
        match self.1 {
            0 => &[],
            // SAFETY: as the function's contract.
            n => unsafe { std::slice::from_raw_parts(self.0 as *const u8, n) },
        }
    }
}

struct Task {
    a: usize,
    arena: u64,
    list: Vec<usize>,
    // The batched GPU-hybrid route's share of the batch (`gpu_hybrid_share`).
    batched: Vec<usize>,
    bytes: Vec<Raw>,
    span: Option<Raw>,
    out: Vec<Result<Decoded, SlotError>>,
    // Kept until the calls are done (a pooled buffer's hold), then dropped by the worker.
    hold: Option<PoolHold>,
    reply: crossbeam_channel::Sender<Result<EngineDone, GpuError>>,
}

/// The engine's route, moved to its thread. SAFETY of `Send`: the worker thread is the only
/// one that uses it after the move (nvJPEG asks for one thread per state and params; the
/// handle is thread-safe).
struct SentHw(HwPath);
// SAFETY: see the struct's doc.
unsafe impl Send for SentHw {}

/// The batched GPU-hybrid route's call, moved to the engine's thread. SAFETY of `Send`: as
/// [`SentHw`] (its state is used by the worker thread alone after the move).
pub(super) struct SentHybrid(BatchedHybrid);
// SAFETY: see the struct's doc.
unsafe impl Send for SentHybrid {}

/// The per-arena timing events of the worker's tasks (start, end: recorded on its stream
/// around the calls; the producer's stream waits for the end before the canary check).
pub(super) struct TaskEvents {
    pub(super) stream: Arc<CudaStream>,
    pub(super) start: [CudaEvent; 2],
    pub(super) end: [CudaEvent; 2],
}

/// The `stoke-gpu-engine` thread that makes the hardware engine's calls, a batch's at a time
/// in the order queued (module docs).
pub(super) struct EngineWorker {
    submitter: EngineSubmitter,
    thread: Option<std::thread::JoinHandle<()>>,
    pub(super) events: Arc<TaskEvents>,
}

enum Msg {
    Task(Box<Task>),
    // The batched GPU-hybrid route's call from now on (`None`: the route is off).
    Hybrid(Option<SentHybrid>),
    // The worker's end (its owner's drop): senders may outlive it (a helper's submitter).
    Stop,
}

impl EngineWorker {
    /// Start the thread with the engine's route `hw` (its own stream), for `arenas`.
    pub(super) fn start(gpu: &Arc<Gpu>, hw: HwPath, arenas: Arc<Arenas>) -> Result<Self, GpuError> {
        let ctx = gpu.ctx().clone();
        let stream = ctx.new_stream().map_err(driver_err("cuStreamCreate"))?;
        let events = Arc::new(TaskEvents {
            stream,
            start: [timing_event(&ctx)?, timing_event(&ctx)?],
            end: [timing_event(&ctx)?, timing_event(&ctx)?],
        });
        // Two tasks at most are queued (the batch running and the one prepared ahead).
        let (tx, rx) = crossbeam_channel::bounded::<Msg>(2);
        let mut hw = SentHw(hw);
        let ev = events.clone();
        let thread = std::thread::Builder::new()
            .name("stoke-gpu-engine".into())
            .spawn(move || {
                // Current from the start: what the thread drops at its end (the engine's route,
                // the GPU-hybrid route's state) frees through the driver, tasks or not.
                if let Err(e) = ctx.bind_to_thread() {
                    log::error!("making the device's context current on the hardware engine's thread: {e}");
                }
                let hw = &mut hw.0;
                let mut hybrid: Option<BatchedHybrid> = None;
                let mut last_end: Option<Instant> = None;
                // A route's call dropped only after its stream ran (its state's buffers).
                let retire = |h: Option<BatchedHybrid>| {
                    if let Some(Err(e)) = h.map(|h| h.stream.synchronize()) {
                        log::error!("waiting for the batched GPU-hybrid route's stream before dropping it: {e}");
                    }
                };
                for msg in rx {
                    let task = match msg {
                        Msg::Task(task) => task,
                        Msg::Hybrid(h) => {
                            retire(std::mem::replace(&mut hybrid, h.map(|h| h.0)));
                            continue;
                        }
                        Msg::Stop => break,
                    };
                    let mut r = run_task(&ctx, hw, hybrid.as_mut(), &arenas, &ev, &task, last_end);
                    // A task without engine images (only the GPU-hybrid share's call) leaves the
                    // engine idle on: the next call's idle time runs from the last call's end.
                    if let (Ok(d), false) = (&r, task.list.is_empty()) {
                        last_end = Some(d.engine_end);
                    }
                    // The engine's and the route's reads of a pooled buffer are stream-ordered:
                    // its guard goes after them before the hold ends (a batch never run is
                    // refilled then).
                    if let Some(h) = &task.hold {
                        let streams: Vec<&CudaStream> = std::iter::once(&*ev.stream).chain(hybrid.as_ref().map(|b| &*b.stream)).collect();
                        if let Err(e) = h.guard_after(&streams) {
                            for s in &streams {
                                if let Err(w) = s.synchronize() {
                                    log::error!("guarding a pooled batch after the engine's reads ({e}), then waiting for them: {w}");
                                }
                            }
                            r = r.and(Err(e));
                        }
                    }
                    drop(task.hold);
                    let _ = task.reply.send(r);
                }
                retire(hybrid);
            })
            .map_err(|e| GpuError::Cuda { call: "starting the hardware engine's thread", message: e.to_string() })?;
        Ok(Self { submitter: EngineSubmitter { tasks: tx }, thread: Some(thread), events })
    }

    /// Where the producer queues the engine calls of a batch it placed itself.
    pub(super) fn queue(&self) -> &EngineSubmitter {
        &self.submitter
    }

    /// A sender of tasks for the helper that places the next batch (it queues what it placed).
    pub(super) fn submitter(&self) -> EngineSubmitter {
        self.submitter.clone()
    }

    /// The batched GPU-hybrid route's call for the tasks queued from now on (`None`: off; the
    /// call it replaces is dropped after its stream ran).
    pub(super) fn set_hybrid(&self, h: Option<BatchedHybrid>) -> Result<(), GpuError> {
        self.submitter.tasks.send(Msg::Hybrid(h.map(SentHybrid))).map_err(|_| worker_gone())
    }
}

impl Drop for EngineWorker {
    fn drop(&mut self) {
        // Ends the thread's loop once the tasks queued before are done.
        let _ = self.submitter.tasks.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the hardware engine's thread panicked");
            }
        }
        if let Err(e) = self.events.stream.synchronize() {
            log::error!("waiting for the hardware engine's stream: {e}");
        }
    }
}

/// The engine thread's queue ([`EngineWorker::queue`]; a clone for the helper preparing the
/// next batch, [`EngineWorker::submitter`]).
#[derive(Clone)]
pub(super) struct EngineSubmitter {
    tasks: crossbeam_channel::Sender<Msg>,
}

impl EngineSubmitter {
    /// Queue the engine calls of the batch placed at `p` (its jobs' bytes `jobs`, all in `span`
    /// when one place holds them; `hold` kept until the calls are done). The bytes must stay
    /// alive and unchanged until the returned [`Pending`] is received or dropped.
    pub(super) fn submit(
        &self,
        p: &Placement,
        jobs: &[(&[u8], AugParams)],
        span: Option<&[u8]>,
        hold: Option<PoolHold>,
    ) -> Result<Pending, GpuError> {
        let (reply, rx) = crossbeam_channel::bounded(1);
        let task = Task {
            a: p.a,
            arena: p.arena,
            list: p.hw_list.clone(),
            batched: p.batched_list.clone(),
            bytes: jobs.iter().map(|j| Raw::of(j.0)).collect(),
            span: span.map(Raw::of),
            out: p.out.clone(),
            hold,
            reply,
        };
        self.tasks.send(Msg::Task(Box::new(task))).map_err(|_| worker_gone())?;
        Ok(Pending { rx: Some(rx) })
    }
}

fn run_task(
    ctx: &Arc<cudarc::driver::CudaContext>,
    hw: &mut HwPath,
    hybrid: Option<&mut BatchedHybrid>,
    arenas: &Arenas,
    ev: &TaskEvents,
    task: &Task,
    last_end: Option<Instant>,
) -> Result<EngineDone, GpuError> {
    ctx.bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
    // SAFETY: the task's bytes stay alive and unchanged until its reply is received
    // (`EngineSubmitter::submit`'s contract, kept by `Pending`).
    let jobs: Vec<(&[u8], AugParams)> = task.bytes.iter().map(|r| (unsafe { r.get() }, AugParams::default())).collect();
    // SAFETY: as above.
    let span = task.span.map(|r| unsafe { r.get() });
    let mut failed = Vec::new();
    let canaries_set = &arenas.canaries_set[task.a];
    // The batched GPU-hybrid share first, as the producer makes it without the worker: queued
    // on its stream, it decodes while the engine does.
    let hybrid = match hybrid {
        _ if task.batched.is_empty() => None,
        Some(h) => h.decode(task.a, canaries_set, &task.batched, &jobs, task.arena, &task.out, &mut failed)?,
        None => {
            let why = "the batched GPU-hybrid route was turned off before its call";
            failed.extend(task.batched.iter().map(|&i| (i, why.to_string())));
            None
        }
    };
    ev.start[task.a].record(&ev.stream).map_err(driver_err("cuEventRecord"))?;
    let (in_calls, first_call) = match task.list.is_empty() {
        // Only the route's share (a pinned share of 1).
        true => ((0.0, 0.0), Instant::now()),
        false => hw.decode(&ev.stream, canaries_set, &task.list, &jobs, span, task.arena, &task.out, &mut failed)?,
    };
    let engine_end = Instant::now();
    ev.end[task.a].record(&ev.stream).map_err(driver_err("cuEventRecord"))?;
    let bitstreams = hw.bitstreams.as_ref().map_or((0, 0), |b| (b.copies, b.overflow));
    let idle_before = match task.list.is_empty() {
        true => None,
        false => last_end.map(|e| first_call.saturating_duration_since(e).as_secs_f64()),
    };
    Ok(EngineDone { failed, in_calls, first_call, engine_end, idle_before, bitstreams, hybrid })
}

/// What the helper preparing the next batch needs to place it and queue its engine calls
/// ([`GpuDecoder::ahead_placer`]; `gpu_engine_ahead` only): the arenas, the device, a stream
/// of its own for the canaries, the engine thread's queue, and the batched GPU-hybrid share's
/// chooser (the batch's share is taken as it is placed).
pub struct AheadPlacer {
    arenas: Arc<Arenas>,
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    engine: EngineSubmitter,
    chooser: SharedChooser,
}

impl AheadPlacer {
    pub(super) fn new(arenas: Arc<Arenas>, gpu: Arc<Gpu>, engine: EngineSubmitter, chooser: SharedChooser) -> Result<Self, GpuError> {
        let stream = gpu.ctx().new_stream().map_err(driver_err("cuStreamCreate"))?;
        Ok(Self { arenas, gpu, stream, engine, chooser })
    }

    /// Place the batch routed `routes` (jobs `jobs`, all in `span` when one place holds them)
    /// in arena `a` — not the arena of the batch decoding now —, write its canaries, and queue
    /// its engine calls (`hold` kept until they are done). The jobs' bytes must stay alive and
    /// unchanged until the result's engine task is received or dropped.
    pub fn place_and_queue(
        &self,
        a: usize,
        routes: &[Result<Classified, SlotError>],
        jobs: &[(&[u8], AugParams)],
        span: Option<&[u8]>,
        hold: Option<PoolHold>,
    ) -> Result<PlacedAhead, GpuError> {
        self.gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
        // The batched GPU-hybrid route's share, from the meter as the batches before left it.
        let (moved, yielded) = chooser(&self.chooser).as_mut().map_or_else(Default::default, |c| c.take(jobs, routes, self.arenas.bytes));
        let placed = place(&self.arenas, a, &self.gpu, &self.stream, routes, &moved).and_then(|mut placement| {
            placement.yielded = yielded;
            let engine = match placement.hw_list.is_empty() && placement.batched_list.is_empty() {
                true => None,
                false => Some(self.engine.submit(&placement, jobs, span, hold)?),
            };
            Ok(PlacedAhead { placement, engine })
        });
        if placed.is_err() {
            // What was queued before the failure (the canaries, perhaps without the event that
            // says so) must not run on into the arena the batch then takes when it runs.
            self.settle();
        }
        placed
    }

    /// Wait for everything queued on the placer's stream: a batch placed ahead and dropped
    /// unrun leaves its canaries there, which nothing else waits for when it had no engine
    /// images (the engine's thread waits for them before its calls).
    pub fn settle(&self) {
        if let Err(e) = self.stream.synchronize() {
            log::error!("waiting for the stream that wrote a batch's canaries ahead: {e}; waiting for the device instead");
            if let Err(e) = self.gpu.ctx().bind_to_thread().and_then(|()| self.gpu.ctx().synchronize()) {
                log::error!("waiting for the device: {e}");
            }
        }
    }
}

impl Drop for AheadPlacer {
    fn drop(&mut self) {
        self.settle();
    }
}
