//! nvJPEG decode: which decoder takes each image, how the hardware calls are sized, which
//! region of the image is decoded and where it lands, and the decoder itself
//! ([`GpuDecoder`]).
//!
//! Routing (docs/CONTRACTS.md, contract 4), from the header alone:
//! - baseline 8-bit YCbCr/gray JPEGs that `nvjpegDecodeBatchedSupportedEx` accepts go to
//!   the hardware engine (`NVJPEG_BACKEND_HARDWARE`), in calls sized in multiples of
//!   engines × cores per engine (`nvjpegGetHardwareDecoderInfo`), with the region of interest
//!   when the engine takes it (else the whole image); with `gpu_bitstream = device` it reads
//!   device copies of the bitstreams (`NVJPEG_BACKEND_HARDWARE_DEVICE`, one copy per batch:
//!   [`bitstream_copies`]);
//! - progressive, extended-sequential and what the engine refuses go to the CUDA decoders
//!   (`NVJPEG_BACKEND_GPU_HYBRID`, then `NVJPEG_BACKEND_HYBRID`, whichever
//!   `nvjpegDecoderJpegSupported` accepts) on a second stream, while the engine works;
//! - with `gpu_hybrid_share` on (off by default), a share of the engine's baseline images,
//!   computed from the rates measured in the run, goes to nvJPEG's GPU-assisted hybrid
//!   decoder in one batched call (`batched_hybrid.rs`), whole images, concurrently;
//! - what nvJPEG cannot represent faithfully (CMYK/YCCK and Adobe no-transform RGB, whose
//!   colour conventions are libjpeg-turbo's; 12-bit; lossless; arithmetic; hierarchical; DNL;
//!   odd sampling factors; unreadable headers; streams without an EOI; headers libjpeg-turbo
//!   refuses, `JpegInfo::turbo_refuses`) goes to the CPU decoder
//!   (`backend::cpu::decode::decode_rgb_region`, on worker threads, concurrently);
//! - every GPU decode is checked twice: nvJPEG's status, and canaries written into its
//!   destination before the decode ([`CANARIES`]); a failure is retried on the CPU decoder,
//!   and what the CPU cannot decode either goes to the `skip`/`fail` policy with both reasons.
//!
//! Only the region the augment step reads is decoded ([`decode_roi`]: the crop box plus the
//! filter's reach, grown to the 16-pixel block grid). Every decoded region is interleaved RGB
//! (`NVJPEG_OUTPUT_RGBI`), pitch `3 · width`, at an [`ARENA_ALIGN`]-aligned offset of one of
//! two device arenas used in turn, each sized once ([`ArenaPlan`]).
//!
//! Chroma upsampling (`PipelineConfig::gpu_upsampling`): by default (`nearest`) the handles
//! replicate chroma, nvJPEG's default and the GPU peers' (0.67 levels from libjpeg-turbo on
//! average on an H200, and twice the hardware engine's rate); `smooth` creates them with
//! `NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION` ("fancy" upsampling, libjpeg-turbo's default),
//! so GPU- and CPU-decoded pictures agree to 0.04 levels on an H200.
//!
//! | file | what it holds |
//! |---|---|
//! | `classify.rs` | [`Classifier`]: one image's route and region, on any thread |
//! | `routing.rs` | [`gpu_candidate`], [`route`], [`hw_calls`]: which decoder, from the header |
//! | `roi.rs` | [`decode_roi`]: the stored region a sample's augment reads |
//! | `budget.rs` | [`MemoryPlan`]: arenas and staging cut to the GPU memory budget |
//! | `arena.rs` | [`ArenaPlan`], [`ArenaCursor`]: the two decode arenas |
//! | `canary.rs` | [`CANARIES`], [`DecodeTarget`]: skipped-decode detection |
//! | `plan.rs` | [`DecoderPlan`], [`Decoded`], [`DecodeStats`]: what the decoder is built for and reports |
//! | `decoder.rs` | [`GpuDecoder`]: construction and one batch end to end |
//! | `idle.rs` | the marks the engine's idle time between batches is measured from |
//! | `hardware.rs` | the hardware engine's route (handle, states, params), its batched calls and its bitstreams' device copies |
//! | `hybrid.rs` | the CUDA decoders' decoupled phases |
//! | `batched_hybrid.rs` | a share of the engine's images in one batched GPU-hybrid call (off by default) |
//! | `share.rs` | [`ShareMeter`], [`split`]: that share, from the rates measured in the run |
//! | `cpu_route.rs` | libjpeg-turbo workers for the CPU route and retries |
//! | `ahead.rs` | a batch's place and canaries; the engine's calls a batch ahead on a thread of their own (`gpu_engine_ahead`) |

mod ahead;
mod arena;
mod batched_hybrid;
mod budget;
mod canary;
mod classify;
mod cpu_route;
mod decoder;
mod hardware;
mod hybrid;
mod idle;
mod plan;
mod roi;
mod routing;
mod share;

use crate::error::SlotError;
use ahead::{place, Arenas, EngineWorker, Pending, Placement};
pub use ahead::{AheadPlacer, PlacedAhead};
pub use arena::*;
pub use batched_hybrid::{batched_gpu_hybrid_takes, first_scan_components, YIELD_WHEN_WAITING};
pub use budget::*;
pub use canary::*;
pub use classify::*;
use cpu_route::*;
pub use cpu_route::{CpuAhead, CpuRoute};
pub use decoder::*;
pub use hardware::{bitstream_copies, cuda_slot_bytes, prealloc_dims, BitstreamPlan};
use hardware::{DeviceBitstreams, HwPath};
use idle::IdleMarks;
pub use plan::*;
pub use roi::*;
pub use routing::*;
pub use share::*;

#[cfg(test)]
mod tests;
