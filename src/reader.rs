//! Persistent reader threads: compressed bytes into reusable buffers.
