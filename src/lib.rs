//! stoke keeps a training GPU fed.
//!
//! The CPU only reads compressed JPEG bytes; nvJPEG decodes them on the GPU; one fused CUDA
//! kernel per batch does crop, resize, flip, rotate, normalize and the cast; batches land in a
//! ring of device slots guarded by events. A CPU backend with the same semantics runs
//! everywhere else and is the reference the GPU path is tested against.
//!
//! # Stages, in the order data flows
//!
//! | stage | module | what it does |
//! |---|---|---|
//! | source, index | [`source`] | folder / file list / tar shards → samples with key, location, label, image header facts |
//! | codec | [`codec`] | image format by magic bytes; JPEG header parser; PNG decode |
//! | sampler | `sampler` | exact per-epoch permutation, rank shards, weights; draws augment params |
//! | augment params + math | [`augment`] | the `#[repr(C)]` per-sample parameters and the one definition of the per-pixel math |
//! | readers | `reader` | persistent threads reading compressed bytes into reusable buffers; `reader::stream`: whole tar shards read ahead within a byte budget (stream mode, per-shard index only) |
//! | backends | [`backend`] | decode + augment: [`backend::cpu`] everywhere, [`backend::cuda`] on NVIDIA GPUs |
//! | pipeline | [`pipeline`] | ties the stages together: an iterator of batches |
//! | resume state | [`state`] | where an epoch stands, the same on every rank; resumes at any world size |
//! | batch | [`batch`] | what the trainer receives |
//!
//! Contracts every stage leans on are in `docs/CONTRACTS.md`; [`config::PipelineConfig`] holds every
//! knob and bound.
//!
//! # What is public
//!
//! A trainer needs the root re-exports ([`Pipeline`], [`PipelineConfig`], [`Batch`], [`Images`],
//! [`DeviceImages`], [`Stats`], [`Error`]) and the modules this documentation shows. The
//! machinery under them — the reader threads and the sampler, the host-compiled augment math,
//! libjpeg-turbo's wrapper, and the CUDA backend's nvJPEG bindings, decoder, kernels and
//! device handle — is public only so that stoke's own command-line tool, tests and benchmarks
//! can reach it: it is hidden from this documentation, carries no stability promise, and what
//! nothing outside the library uses is `pub(crate)` (the output ring, pinned staging, CUDA
//! error helpers, the stored-region math).

#![warn(missing_docs)]

pub mod augment;
pub mod backend;
pub mod batch;
pub mod codec;
pub mod config;
pub mod error;
#[doc(hidden)] // the fuzz targets' entries (fuzz/): not a stable API
pub mod fuzzing;
#[cfg(feature = "gen")]
pub mod gen;
pub mod pipeline;
#[doc(hidden)] // internals: see the crate docs
pub mod reader;
#[doc(hidden)] // internals: see the crate docs
pub mod sampler;
pub mod source;
pub mod state;

// The trainer's surface: build a pipeline from a config, take batches, read their tensors.
pub use augment::AugParams;
pub use batch::{Batch, DeviceImages, Images, Substitute};
pub use config::PipelineConfig;
pub use error::{Error, GpuError, Result};
pub use pipeline::{Pipeline, Stats};
pub use state::ResumeState;
