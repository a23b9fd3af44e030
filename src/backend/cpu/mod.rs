//! Decode and augment on the CPU: the reference and the fallback.

pub mod decode;
