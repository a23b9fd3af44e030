//! Augment parameters (drawn once per sample) and the per-pixel math shared with the kernels.
//!
//! - [`params`]: the `#[repr(C)]` [`AugParams`] and [`params::draw`], the only place random
//!   numbers are drawn (docs/CONTRACTS.md, contract 1).
//! - [`host`]: the host build of `kernels/augment_math.cuh`, the one definition of every output
//!   pixel (docs/CONTRACTS.md, contract 2): the CPU backend calls it, the CUDA kernel includes it.
//!
//! # What an output pixel means
//!
//! Geometry in this order: EXIF orientation → crop → resize → window → flip → rotate, then
//! normalize `(x/255 − mean)/std` and the cast (round to nearest even for f16/bf16). Each step
//! follows torchvision/Pillow (docs/CONTRACTS.md, "Semantics"); the differences, all measured by the
//! tests, are:
//!
//! | where | torchvision (PIL path) | stoke | effect |
//! |---|---|---|---|
//! | resize | two integer passes, uint8 after each | f32 from the decoded bytes to the cast, clamped to 0..255 | ≤ 1 level (bilinear, bicubic ≤ 1.5 on the golden fixtures); eval preset on 308 corpus photos: per-image mean ≤ 0.34 |
//! | after resize | the image is uint8 again before flip/rotate/normalize | no intermediate rounding | same as above |
//! | EXIF orientation | not applied by `PIL.Image.open` | applied (turn off with `apply_exif = false` / `--no-exif`) | what a person sees when opening the photo |
//! | random draws | `torch.rand` / `torch.randint` | SplitMix64 keyed by (seed, epoch, position) | same distributions, different samples; reproducible whatever the thread count |
//! | rotate (bilinear) | torchvision v2's mask blend `(v − fill)·mask + fill` | the same | — |
//!
//! Decoding (libjpeg-turbo with smooth chroma upsampling and the accurate integer IDCT) gives
//! Pillow's pixels bit for bit on every 8-bit file of the development corpus.

#[doc(hidden)] // internals: see the crate docs
pub mod host;
pub mod mixup;
pub mod params;
pub(crate) mod region;

pub mod spec;

pub use params::AugParams;
