//! Epoch permutation, rank sharding, weighted sampling; draws the augment parameters.
