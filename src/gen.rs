//! Deterministic ImageNet-like JPEG dataset generator (`stoke gen`, `stoke bench`'s default).
