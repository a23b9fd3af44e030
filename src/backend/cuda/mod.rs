//! nvJPEG + CUDA kernels.

pub mod ring;
pub mod staging;
