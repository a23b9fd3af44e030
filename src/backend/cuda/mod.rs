//! nvJPEG + CUDA kernels.

pub mod augment;
pub mod decode;
pub mod ring;
pub mod staging;
