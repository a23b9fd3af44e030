//! Decode + augment backends.

pub mod cpu;
pub mod cuda;
