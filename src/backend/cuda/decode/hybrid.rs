//! The CUDA decoders' part of a batch (GPU-assisted hybrid, then hybrid): one image at a
//! time per lane through the decoupled phases, [`CUDA_LANES`] lanes on threads of their own,
//! each with `SLOTS_PER_LANE` of every decoder's slots used in turn: the host waits for an image's
//! decode only when its slot comes round again.

use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::device::Gpu;
use crate::backend::cuda::nvjpeg::safe::Decoder;
use crate::backend::cuda::nvjpeg::sys::nvjpegImage_t;
use crate::backend::helpers::{Helpers, Job};
use crate::error::driver_err;
use crate::error::GpuError;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// The CUDA route's threads, started with the decoder ([`Helpers`]: no thread is made per
/// batch): `cuda` runs the route (its first lane) while the producer's thread calls the
/// hardware engine, `lanes` the route's other lanes.
pub(super) struct RouteHelpers {
    pub(super) cuda: Helpers,
    pub(super) lanes: Helpers,
}

impl RouteHelpers {
    pub(super) fn new() -> Result<Self, GpuError> {
        let start =
            |name, n| Helpers::new(name, n).map_err(|message| GpuError::Cuda { call: "starting the CUDA route's threads", message });
        Ok(Self { cuda: start("stoke-gpu-cuda", 1)?, lanes: start("stoke-gpu-lane", CUDA_LANES - 1)? })
    }
}

/// One lane of the CUDA decoders: every decoder with this lane's slots (disjoint from the
/// other lanes'), and the lane's turn. nvJPEG's thread-safety rules ask for a state, a
/// bitstream and buffers per thread: each slot has its own; the decoders are shared.
pub(super) struct CudaLane<'a> {
    decoders: Vec<(&'a Decoder, &'a mut [CudaSlot])>,
    turn: &'a mut usize,
    /// Where the lane's thread spent its CPU time in this batch.
    pub(super) cpu: LaneCpu,
}

/// CPU seconds (the thread's clock, [`crate::backend::thread_cpu_secs`]) a lane spent in each
/// part of its images' decodes: whether the CUDA route's host cores go to the Huffman decoding
/// (work), to queuing the device phase, or to waiting for a slot (spinning or asleep).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LaneCpu {
    /// nvJPEG's host phase: the stream parse, the decoder's check and `nvjpegDecodeJpegHost`
    /// (the Huffman decoding, on the host for the hybrid decoder).
    pub huffman: f64,
    /// `nvjpegDecodeJpegTransferToDevice` and `nvjpegDecodeJpegDevice` (queued on the stream).
    pub queue: f64,
    /// Waiting for a slot's previous image (its copy out of the slot's pinned buffer).
    pub slot_wait: f64,
}

impl std::ops::AddAssign for LaneCpu {
    fn add_assign(&mut self, o: Self) {
        (self.huffman, self.queue, self.slot_wait) = (self.huffman + o.huffman, self.queue + o.queue, self.slot_wait + o.slot_wait);
    }
}

impl CudaPath {
    /// Decode `list` (the batch's CUDA-route images, dealt to the lanes in turn), lane `l` on
    /// `streams[l]`: the first lane on the calling thread, the others on `helpers` when they have
    /// images. The images that failed, with why, and the lanes' CPU time summed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode_lanes(
        &mut self,
        gpu: &Gpu,
        helpers: &Helpers,
        streams: &[&Arc<CudaStream>],
        list: &[usize],
        jobs: &[(&[u8], AugParams)],
        out: &[Result<Decoded, SlotError>],
        routes: &[Result<Classified, SlotError>],
        arena: u64,
    ) -> Result<(Vec<(usize, String)>, LaneCpu), GpuError> {
        let lane_list = |l: usize| list.iter().copied().skip(l).step_by(CUDA_LANES);
        let run_lane = |mut lane: CudaLane<'_>, l: usize| -> Result<(Vec<(usize, String)>, LaneCpu), GpuError> {
            gpu.ctx().bind_to_thread().map_err(driver_err("cuCtxSetCurrent"))?;
            let mut failed = Vec::new();
            for i in lane_list(l) {
                let d = *out[i].as_ref().expect("placed above");
                let gpu_hybrid = matches!(routes[i], Ok((_, _, _, true)));
                if let Err(e) = lane.decode(streams[l], jobs[i].0, &d, arena, gpu_hybrid) {
                    failed.push((i, e.to_string()));
                }
            }
            Ok((failed, lane.cpu))
        };
        let mut lanes = self.lanes().into_iter().enumerate();
        let (_, first) = lanes.next().expect("at least one lane");
        let others: Vec<Job<'_, _>> = lanes
            .filter(|(l, _)| lane_list(*l).next().is_some())
            .map(|(l, lane)| Box::new(move || run_lane(lane, l)) as Job<'_, _>)
            .collect();
        let (theirs, mine) = helpers.many_beside(others, || run_lane(first, 0));
        std::iter::once(mine).chain(theirs).try_fold((Vec::new(), LaneCpu::default()), |(mut f, mut c), r| {
            let (lf, lc) = r?;
            f.extend(lf);
            c += lc;
            Ok((f, c))
        })
    }

    /// The [`CUDA_LANES`] lanes, each with its share of every decoder's slots.
    fn lanes(&mut self) -> Vec<CudaLane<'_>> {
        let mut lanes: Vec<CudaLane<'_>> =
            self.turn.iter_mut().map(|turn| CudaLane { decoders: Vec::new(), turn, cpu: LaneCpu::default() }).collect();
        for (dec, slots) in &mut self.decoders {
            for (lane, chunk) in lanes.iter_mut().zip(slots.chunks_mut(SLOTS_PER_LANE)) {
                lane.decoders.push((&*dec, chunk));
            }
        }
        lanes
    }
}

impl CudaLane<'_> {
    /// One image through the CUDA decoders' decoupled phases on `cuda_stream` (this lane's):
    /// the GPU-assisted hybrid decoder first when `gpu_hybrid` ([`gpu_hybrid_first`]), else
    /// the hybrid decoder alone.
    pub(super) fn decode(
        &mut self,
        cuda_stream: &CudaStream,
        bytes: &[u8],
        d: &Decoded,
        arena: u64,
        gpu_hybrid: bool,
    ) -> Result<(), GpuError> {
        let turn = *self.turn;
        *self.turn = (turn + 1) % SLOTS_PER_LANE;
        let stream = cuda_stream.cu_stream() as _;
        let skip = usize::from(!gpu_hybrid && self.decoders.len() > 1);
        let mut clock = crate::backend::thread_cpu_secs();
        // The CPU time since the last lap, added to `part`.
        let mut lap = |part: &mut f64| {
            let now = crate::backend::thread_cpu_secs();
            *part += now - clock;
            clock = now;
        };
        let cpu = &mut self.cpu;
        for (dec, slots) in self.decoders.iter_mut().skip(skip) {
            let slot = &mut slots[turn];
            let waited = slot.done.synchronize().map_err(driver_err("cuEventSynchronize"));
            lap(&mut cpu.slot_wait);
            waited?;
            slot.stream.parse(bytes)?;
            let whole = (d.roi.x, d.roi.y, d.roi.w, d.roi.h) == (0, 0, d.stored.0, d.stored.1);
            slot.params.set_roi((!whole).then_some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)))?;
            if !dec.supports(&slot.stream, &slot.params)? {
                lap(&mut cpu.huffman);
                continue;
            }
            let mut img = nvjpegImage_t::default();
            img.channel[0] = (arena + d.offset) as *mut u8;
            img.pitch[0] = 3 * d.roi.w as usize;
            let host = dec.decode_host(&mut slot.state, &slot.params, &slot.stream);
            lap(&mut cpu.huffman);
            host?;
            // SAFETY: our stream; the state's pinned and device buffers are this slot's, and
            // the slot's previous copy finished (`done` was waited on above).
            let queued = unsafe { dec.transfer_to_device(&mut slot.state, &slot.stream, stream) };
            // SAFETY: our stream; `img` points inside the arena at a region sized for this
            // ROI in RGBI, which stays allocated (the decoder owns the arenas).
            let decoded = queued.and_then(|()| unsafe { dec.decode_device(&mut slot.state, &mut img, stream) });
            lap(&mut cpu.queue);
            // Record whatever the decode said: once the async copy out of this slot's pinned
            // buffer is queued, the next use of the slot must wait for it, or the host rewrites
            // the buffer while the DMA may still read it.
            crate::backend::cuda::record_guard(&slot.done, cuda_stream, "a CUDA decoder's pinned buffer")?;
            decoded?;
            return Ok(());
        }
        Err(GpuError::Nvjpeg { call: "nvjpegDecoderJpegSupported", status: 4, message: "no CUDA decoder takes this image".into() })
    }
}
