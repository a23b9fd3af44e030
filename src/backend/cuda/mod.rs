//! nvJPEG + CUDA kernels.
