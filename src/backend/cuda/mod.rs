//! nvJPEG + CUDA kernels.

pub mod decode;
pub mod ring;
pub mod staging;
