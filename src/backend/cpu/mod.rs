//! Decode and augment on the CPU: the reference and the fallback.
