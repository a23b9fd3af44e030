//! `Batch`: the output tensor (host or device), labels, shape, dtype, layout.
