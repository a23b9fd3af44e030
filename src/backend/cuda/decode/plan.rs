//! The decoder's plan and what it reports: the sizes and switches it is built for
//! ([`DecoderPlan`]), where each decoded image lies ([`Decoded`]) and its counters
//! ([`DecodeStats`]).

use super::*;
use crate::augment::params::AugParams;
use crate::backend::cuda::augment::SampleDesc;
use crate::config::GpuDecoders;

/// Sizes the decoder is built for, from the config and the index.
#[derive(Clone, Copy, Debug)]
pub struct DecoderPlan {
    /// Samples per batch.
    pub batch: usize,
    /// Bytes of each of the two decode arenas.
    pub arena: ArenaPlan,
    /// The decoded-size guard.
    pub max_pixels: u64,
    /// Largest stored width and height in the index (hardware pre-allocation).
    pub max_dims: (u32, u32),
    /// Bytes of each CUDA-decoder slot's pinned and device buffer
    /// ([`cuda_slot_bytes`](super::cuda_slot_bytes), or less under a budget).
    pub slot_bytes: u64,
    /// Most images per hardware call (rounded to the engine width).
    pub hw_max_per_call: usize,
    /// Threads decoding on the CPU (fallback route and retries).
    pub cpu_threads: usize,
    /// Use the hardware engine (off: its images go to the CUDA decoders). For measuring the
    /// decoders one at a time; the pipeline turns both on.
    pub use_hardware: bool,
    /// Use the CUDA decoders (off: their images go to the CPU).
    pub use_cuda: bool,
    /// Interpolated ("smooth") chroma upsampling instead of replication (the config's
    /// `gpu_upsampling`); regions then get [`super::widen_for_upsampling`]'s margin.
    pub interpolated: bool,
    /// Bytes of the device buffer the hardware engine's bitstreams are copied into
    /// (`gpu_bitstream = device`: a staging slot's size); 0: the engine reads host bytes.
    pub device_bitstream_bytes: u64,
    /// Ask the hardware engine for baseline gray JPEGs sampled 1×1 too (the config's
    /// `gpu_engine_gray`; [`super::engine_gray_candidate`]); off: they go to the CUDA decoders.
    pub engine_gray: bool,
    /// Threads calling the hardware engine at once, 1 or 2 (the config's `gpu_engine_lanes`):
    /// with 2 a batch's engine calls alternate between the producer's thread and a second
    /// one, each with its own state and stream.
    pub engine_lanes: usize,
    /// Make the hardware engine's calls on a thread of their own, a batch ahead (the config's
    /// `gpu_engine_ahead`; `decode::ahead`): the helper preparing the next batch places it
    /// and queues its calls, which the engine starts as the current batch's return.
    pub engine_ahead: bool,
}

impl DecoderPlan {
    /// `(use_hardware, use_cuda)` for the config's `gpu_decoders`: `all` both; `hw` the
    /// hardware engine alone (what it refuses goes to the CPU route); `cuda` never the engine.
    pub fn switches(decoders: GpuDecoders) -> (bool, bool) {
        match decoders {
            GpuDecoders::All => (true, true),
            GpuDecoders::Hw => (true, false),
            GpuDecoders::Cuda => (false, true),
        }
    }
}

/// Where one sample's pixels are, after [`GpuDecoder::decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Byte offset of the decoded region in the arena.
    pub offset: u64,
    /// The decoded region, in stored coordinates.
    pub roi: Roi,
    /// Stored size of the whole image.
    pub stored: (u32, u32),
    /// Which decoder produced it (after retries).
    pub route: Route,
}

impl Decoded {
    /// The augment kernel's descriptor fields for this image under `p` (table fields are
    /// filled by [`crate::backend::cuda::augment::TableLayout::add`]).
    pub fn desc(&self, p: &AugParams) -> SampleDesc {
        let (base, step_x, step_y) = crate::backend::cuda::augment::oriented_steps(
            self.offset,
            3 * self.roi.w as u64,
            (self.roi.x, self.roi.y),
            self.stored,
            (p.crop_x, p.crop_y),
            p.orientation,
        );
        SampleDesc { base, step_x, step_y, ..Default::default() }
    }
}

/// Counters for `stoke bench` and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Images the hardware engine decoded.
    pub hardware: u64,
    /// Images the CUDA decoders decoded.
    pub cuda: u64,
    /// Images the batched GPU-hybrid route decoded (a share of the engine's).
    pub gpu_hybrid_batched: u64,
    /// Batches in which that route's `auto` share yielded to the trainer (a batch was waiting
    /// for it: [`GpuDecoder::set_waiting_batches`]).
    pub gpu_hybrid_yielded: u64,
    /// Images routed to the CPU decoder.
    pub cpu: u64,
    /// GPU decodes that failed or were not written (canaries) and went to the CPU.
    pub retried: u64,
    /// Images no decoder could decode (left to the policy).
    pub failed: u64,
    /// Host-to-device copies of the engine's bitstreams (`gpu_bitstream = device`: one per
    /// batch when its bytes lie in one place).
    pub bitstream_copies: u64,
    /// Engine images that found no room in that device buffer (decoded on the CPU).
    pub bitstream_overflow: u64,
    /// With the engine ahead (`gpu_engine_ahead`): batches whose engine calls were queued on
    /// the engine's thread while the batch before them decoded.
    pub engine_queued_ahead: u64,
    /// Of those, the batches whose calls began before the backend started the batch (the
    /// engine at work while the producer finished the one before).
    pub engine_began_early: u64,
}
