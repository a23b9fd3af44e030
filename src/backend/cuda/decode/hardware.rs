//! The hardware JPEG engine's part of a batch: batched calls sized by the engine width.

use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::nvjpeg::sys::nvjpegImage_t;
use crate::error::driver_err;
use crate::error::GpuError;
use cudarc::driver::{CudaEvent, CudaStream};

impl HwPath {
    /// The hardware route, in calls of `per_call` images on `stream`, two states in turn.
    /// `canaries_set` is the event recorded after the canaries were written. Returns the host
    /// seconds spent inside the engine's calls: wall time, and this thread's CPU time.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode(
        &mut self,
        stream: &CudaStream,
        canaries_set: &CudaEvent,
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        arena: u64,
        out: &[Result<Decoded, SlotError>],
        failed: &mut Vec<(usize, String)>,
    ) -> Result<(f64, f64), GpuError> {
        // The engine's batched decode does not wait for work queued on its stream: it writes
        // the outputs when called (torchcodec PR #1634). The canaries were queued on this
        // stream just before; a decode racing them would have its pixels overwritten by a
        // canary (and counted as skipped, or worse, not). The host waits for them first.
        canaries_set.synchronize().map_err(driver_err("cuEventSynchronize"))?;
        let hw = self;
        let mut at = 0;
        let (mut in_calls, mut in_calls_cpu) = (0f64, 0f64);
        for (call, size) in hw_calls(list.len(), hw.unit, hw.per_call).into_iter().enumerate() {
            let idx = &list[at..at + size];
            at += size;
            let s = call % 2;
            hw.state_done[s].synchronize().map_err(driver_err("cuEventSynchronize"))?;
            let mut images = Vec::with_capacity(size);
            let mut dests = Vec::with_capacity(size);
            for (k, &i) in idx.iter().enumerate() {
                let d = out[i].as_ref().expect("placed");
                let pr = &mut hw.params[at - size + k];
                pr.set_output_format(RGBI)?;
                let whole = (d.roi.x, d.roi.y, d.roi.w, d.roi.h) == (0, 0, d.stored.0, d.stored.1);
                pr.set_roi((!whole).then_some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)))?;
                images.push(jobs[i].0);
                let mut img = nvjpegImage_t::default();
                img.channel[0] = (arena + d.offset) as *mut u8;
                img.pitch[0] = 3 * d.roi.w as usize;
                dests.push(img);
            }
            let st = &mut hw.states[s];
            let (t, cpu) = (std::time::Instant::now(), crate::backend::thread_cpu_secs());
            let r = st.batched_initialize(size, 1, RGBI).and_then(|()| {
                // SAFETY: `size` inputs (pinned staging bytes alive until decode returns and
                // the done event is waited), `size` destinations inside the arena each sized
                // for its ROI in RGBI, `size` live params; the stream is ours.
                unsafe { st.decode_batched_ex(&images, &mut dests, &hw.params[at - size..at], stream.cu_stream() as _) }
            });
            in_calls += t.elapsed().as_secs_f64();
            in_calls_cpu += crate::backend::thread_cpu_secs() - cpu;
            crate::backend::cuda::record_guard(&hw.state_done[s], stream, "a hardware decode state")?;
            if let Err(e) = r {
                // One bad image fails the whole call: every image of it goes to the CPU.
                failed.extend(idx.iter().map(|&i| (i, format!("hardware decode call failed: {e}"))));
            }
        }
        Ok((in_calls, in_calls_cpu))
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
