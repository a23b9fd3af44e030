//! Augment parameters (drawn once per sample) and the per-pixel math shared with the kernels.

pub mod host;
pub mod params;

pub use params::AugParams;
