//! The hardware JPEG engine's part of a batch: batched calls sized by the engine width.

use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::device::Gpu;
use crate::backend::cuda::nvjpeg::safe::{DecodeParams, JpegState};
use crate::backend::cuda::nvjpeg::sys::nvjpegImage_t;
use crate::error::driver_err;
use crate::error::GpuError;
use cudarc::driver::{CudaEvent, CudaStream};

impl HwPath {
    /// The hardware route, in calls of `per_call` images: on `stream` with the two states in
    /// turn, or, with a second thread, calls in turn on this thread (state 0, `stream`) and a
    /// scoped second one (state 1, its own stream, joined into `stream` before returning).
    /// `canaries_set` is the event recorded after the canaries were written. Returns the host
    /// wall seconds from the first call to the return of the last.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode(
        &mut self,
        gpu: &Gpu,
        stream: &CudaStream,
        canaries_set: &CudaEvent,
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        arena: u64,
        out: &[Result<Decoded, SlotError>],
        failed: &mut Vec<(usize, String)>,
    ) -> Result<f64, GpuError> {
        // The engine's batched decode does not wait for work queued on its stream: it writes
        // the outputs when called (torchcodec PR #1634). The canaries were queued on this
        // stream just before; a decode racing them would have its pixels overwritten by a
        // canary (and counted as skipped, or worse, not). The host waits for them first.
        canaries_set.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        // Each call's images and params: contiguous runs of the list.
        let sizes = hw_calls(list.len(), self.unit, self.per_call);
        let mut calls = Vec::with_capacity(sizes.len());
        let mut rest = &mut self.params[..list.len()];
        let mut at = 0;
        for size in sizes {
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(size);
            calls.push(HwCall { idx: &list[at..at + size], params: head });
            rest = tail;
            at += size;
        }
        let t = std::time::Instant::now();
        let [s0, s1] = &mut self.states;
        let [d0, d1] = &self.state_done;
        match &self.second {
            None => {
                let mut lane = [(s0, d0), (s1, d1)];
                for (k, call) in calls.into_iter().enumerate() {
                    let (st, done) = &mut lane[k % 2];
                    call.run(st, done, stream, jobs, arena, out, failed)?;
                }
            }
            Some(second) => {
                // Calls alternate between the threads, each in call order on its own state.
                let (mine, theirs): (Vec<_>, Vec<_>) = calls.into_iter().enumerate().partition(|(k, _)| k % 2 == 0);
                let theirs_failed = std::thread::scope(|sc| {
                    let other = sc.spawn(|| -> Result<Vec<(usize, String)>, GpuError> {
                        gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
                        let mut f = Vec::new();
                        for (_, call) in theirs {
                            call.run(s1, d1, second, jobs, arena, out, &mut f)?;
                        }
                        Ok(f)
                    });
                    let here = mine.into_iter().try_for_each(|(_, call)| call.run(s0, d0, stream, jobs, arena, out, failed));
                    let there = other.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    here.and(there)
                })?;
                failed.extend(theirs_failed);
                stream.join(second).map_err(driver_err("cuStreamWaitEvent"))?;
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }
}

/// One call of the engine: the list's images `idx` with their params.
struct HwCall<'a> {
    idx: &'a [usize],
    params: &'a mut [DecodeParams],
}

impl HwCall<'_> {
    /// Decode the call's images into their arena places on `stream` with `state`, once the
    /// state's previous call is done (`state_done`, recorded again after this one). A failed
    /// call sends every image of it to `failed` (one bad image fails the whole call).
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
    ) -> Result<(), GpuError> {
        state_done.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        let size = self.idx.len();
        let mut images = Vec::with_capacity(size);
        let mut dests = Vec::with_capacity(size);
        for (&i, pr) in self.idx.iter().zip(self.params.iter_mut()) {
            let d = out[i].as_ref().expect("placed");
            pr.set_output_format(RGBI)?;
            let whole = (d.roi.x, d.roi.y, d.roi.w, d.roi.h) == (0, 0, d.stored.0, d.stored.1);
            pr.set_roi((!whole).then_some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)))?;
            images.push(jobs[i].0);
            let mut img = nvjpegImage_t::default();
            img.channel[0] = (arena + d.offset) as *mut u8;
            img.pitch[0] = 3 * d.roi.w as usize;
            dests.push(img);
        }
        let r = st.batched_initialize(size, 1, RGBI).and_then(|()| {
            // SAFETY: `size` inputs (pinned staging bytes alive until decode returns and the
            // done event is waited), `size` destinations inside the arena each sized for its
            // ROI in RGBI, `size` live params; the stream is ours.
            unsafe { st.decode_batched_ex(&images, &mut dests, self.params, stream.cu_stream() as _) }
        });
        state_done.record(stream).map_err(driver_err("cuEventRecord"))?;
        if let Err(e) = r {
            failed.extend(self.idx.iter().map(|&i| (i, format!("hardware decode call failed: {e}"))));
        }
        Ok(())
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
