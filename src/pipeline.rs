//! `Pipeline`: source → sampler → readers → backend → batches; orderly shutdown on drop.
