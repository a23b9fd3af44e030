//! The CUDA decoders' part of a batch (GPU-assisted hybrid, then hybrid): one image at a
//! time per lane through the decoupled phases, [`CUDA_LANES`] lanes on threads of their own,
//! each with `SLOTS_PER_LANE` of every decoder's slots used in turn: the host waits for an image's
//! decode only when its slot comes round again.

use super::*;
use crate::backend::cuda::nvjpeg::safe::Decoder;
use crate::backend::cuda::nvjpeg::sys::nvjpegImage_t;
use crate::error::driver_err;
use crate::error::GpuError;
use cudarc::driver::CudaStream;

/// One lane of the CUDA decoders: every decoder with this lane's slots (disjoint from the
/// other lanes'), and the lane's turn. nvJPEG's thread-safety rules ask for a state, a
/// bitstream and buffers per thread: each slot has its own; the decoders are shared.
pub(super) struct CudaLane<'a> {
    decoders: Vec<(&'a Decoder, &'a mut [CudaSlot])>,
    turn: &'a mut usize,
}

impl CudaPath {
    /// The [`CUDA_LANES`] lanes, each with its share of every decoder's slots.
    pub(super) fn lanes(&mut self) -> Vec<CudaLane<'_>> {
        let mut lanes: Vec<CudaLane<'_>> = self.turn.iter_mut().map(|turn| CudaLane { decoders: Vec::new(), turn }).collect();
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
        for (dec, slots) in self.decoders.iter_mut().skip(skip) {
            let slot = &mut slots[turn];
            slot.done.synchronize().map_err(driver_err("cuEventSynchronize"))?;
            slot.stream.parse(bytes)?;
            let whole = (d.roi.x, d.roi.y, d.roi.w, d.roi.h) == (0, 0, d.stored.0, d.stored.1);
            slot.params.set_roi((!whole).then_some((d.roi.x, d.roi.y, d.roi.w, d.roi.h)))?;
            if !dec.supports(&slot.stream, &slot.params)? {
                continue;
            }
            let mut img = nvjpegImage_t::default();
            img.channel[0] = (arena + d.offset) as *mut u8;
            img.pitch[0] = 3 * d.roi.w as usize;
            dec.decode_host(&mut slot.state, &slot.params, &slot.stream)?;
            // SAFETY: our stream; the state's pinned and device buffers are this slot's, and
            // the slot's previous copy finished (`done` was waited on above).
            let queued = unsafe { dec.transfer_to_device(&mut slot.state, &slot.stream, stream) };
            // SAFETY: our stream; `img` points inside the arena at a region sized for this
            // ROI in RGBI, which stays allocated (the decoder owns the arenas).
            let decoded = queued.and_then(|()| unsafe { dec.decode_device(&mut slot.state, &mut img, stream) });
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
