//! Moved to [`crate::codec::jpeg`]; kept as a re-export while the other modules move over.

pub use crate::codec::jpeg::*;
