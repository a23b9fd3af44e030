//! Progressive JPEGs rewritten once as baseline JPEGs and kept in RAM
//! (`transcode_progressive`).
//!
//! nvJPEG's hardware engine takes baseline JPEGs only: a progressive one goes to its CUDA
//! decoders, whose Huffman decoding runs on the host (on an H100, about 1.5 ms of a core per
//! photo), and libjpeg-turbo decodes one 1.5–2× slower than its baseline form. The rewrite
//! ([`to_baseline`]: libjpeg-turbo's lossless transform) keeps the DCT coefficients, and each
//! one is decoded beside the stored file and used only when libjpeg-turbo gives both the same
//! pixels; it costs about 4 ms of a reader thread per photo on this project's 2-core VM
//! (`cargo bench --bench cpu_stages -- transcode`), once per image while its bytes fit the
//! budget.
//!
//! A rewrite longer than [`room`] of the stored bytes is not delivered, so that the buffers the
//! CUDA backend sizes from the index hold it.
//!
//! Whether a sample is rewritten depends on its bytes and the decoded-size guard only, never on
//! the budget or the timing: an image past the budget is rewritten again at each read, so the
//! same seed and config give the same batches however full the budget is
//! (docs/CONTRACTS.md contract 1).

use crate::backend::cpu::decode::to_baseline;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// What a sample's stored bytes were found to be.
const UNSEEN: u8 = 0;
/// Delivered as stored (not progressive, or libjpeg-turbo warned on it, or its rewrite would
/// not keep its pixels or fit its room).
const STORED: u8 = 1;
/// Rewritten as baseline (kept, or rewritten at each read past the budget).
const REWRITTEN: u8 = 2;

/// The most bytes a rewrite of `stored` compressed bytes may have: a quarter more, and 1 KiB
/// (the standard tables beside a small progressive file's optimized ones). A longer rewrite is
/// not delivered (the stored bytes are), so buffers sized by the index can hold it: the CUDA
/// backend sizes its staging by this for the samples [`rewritten`] says are rewritten. Over the
/// corpus's progressive files the rewrites are 0.83–1.23 × the stored size.
pub fn room(stored: u64) -> u64 {
    stored + stored / 4 + 1024
}

/// Whether a sample whose header facts are `info` is rewritten under `transcode_progressive`
/// (the index's facts: its bytes and the guard decide the rest).
pub fn rewritten(info: Option<&crate::codec::ImageInfo>) -> bool {
    info.and_then(|i| i.jpeg.as_ref()).is_some_and(crate::backend::cpu::decode::transcodable)
}

/// Counts of the rewrites, for stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TranscodeStats {
    /// Rewrites made (each image once while the budget holds it, at each read past it).
    pub rewrites: u64,
    /// Images whose baseline bytes are kept.
    pub kept: u64,
    /// Bytes kept.
    pub kept_bytes: u64,
    /// Rewrites of images the budget could not keep (each costs a rewrite per epoch).
    pub again: u64,
}

/// The kept rewrites by sample, and their bytes in all.
type Kept = (HashMap<usize, Arc<[u8]>>, u64);

/// The rewritten samples of one data set, shared by the reader threads.
pub(crate) struct Transcoder {
    max_pixels: u64,
    budget: u64,
    seen: Vec<AtomicU8>,
    /// The kept bytes by sample, and their sum.
    kept: Mutex<Kept>,
    rewrites: AtomicU64,
    again: AtomicU64,
    warned: AtomicBool,
}

impl Transcoder {
    /// For `samples` samples, images over `max_pixels` left as stored, `budget` bytes kept.
    pub fn new(samples: usize, max_pixels: u64, budget: u64) -> Self {
        Self {
            max_pixels,
            budget,
            seen: (0..samples).map(|_| AtomicU8::new(UNSEEN)).collect(),
            kept: Mutex::new((HashMap::new(), 0)),
            rewrites: AtomicU64::new(0),
            again: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        }
    }

    /// Sample `i`'s kept baseline bytes.
    pub fn kept(&self, i: usize) -> Option<Arc<[u8]>> {
        if self.seen.get(i)?.load(Ordering::Relaxed) != REWRITTEN {
            return None;
        }
        self.lock().0.get(&i).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sample `i`'s stored bytes as they are to be delivered: `Some` with the baseline form
    /// when it is one to rewrite, `None` to deliver them as they are.
    pub fn rewrite(&self, i: usize, stored: &[u8]) -> Option<Vec<u8>> {
        let seen = self.seen.get(i)?;
        if seen.load(Ordering::Relaxed) == STORED {
            return None;
        }
        let Some(baseline) = to_baseline(stored, self.max_pixels).filter(|b| b.len() as u64 <= room(stored.len() as u64)) else {
            seen.store(STORED, Ordering::Relaxed);
            return None;
        };
        self.rewrites.fetch_add(1, Ordering::Relaxed);
        if seen.swap(REWRITTEN, Ordering::Relaxed) == REWRITTEN {
            // Rewritten before and not kept: past the budget.
            self.again.fetch_add(1, Ordering::Relaxed);
        }
        Some(baseline)
    }

    /// Keep sample `i`'s baseline bytes if the budget has room; false when it has not (the
    /// first time, a warning says what that costs).
    pub fn keep(&self, i: usize, baseline: &[u8]) -> bool {
        let n = baseline.len() as u64;
        let mut kept = self.lock();
        if kept.0.contains_key(&i) {
            // Two reads of it at once (an epoch read ahead beside the current one).
            return true;
        }
        if kept.1 + n > self.budget {
            drop(kept);
            if !self.warned.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "transcode_progressive: the progressive JPEGs rewritten as baseline pass transcode_cache_bytes ({} MiB); \
                     those past it are rewritten again at every read, more CPU than decoding them as stored: raise it",
                    self.budget >> 20
                );
            }
            return false;
        }
        kept.0.insert(i, baseline.into());
        kept.1 += n;
        true
    }

    /// What was rewritten and kept so far.
    pub fn stats(&self) -> TranscodeStats {
        let (kept, kept_bytes) = {
            let k = self.lock();
            (k.0.len() as u64, k.1)
        };
        TranscodeStats { rewrites: self.rewrites.load(Ordering::Relaxed), kept, kept_bytes, again: self.again.load(Ordering::Relaxed) }
    }
}
