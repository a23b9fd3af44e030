//! The two device arenas the decoded images land in: their size and the per-batch bump
//! allocation inside them.

/// Offset alignment of every decoded image in the arena (the CUDA allocation granularity;
/// nvJPEG's hardware engine writes whole 256-byte lines most efficiently).
pub const ARENA_ALIGN: u64 = 256;

/// The device arena for one batch's decoded images, sized once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaPlan {
    /// Bytes of the arena.
    pub bytes: u64,
}

/// Decoded bytes of a `w × h` RGB image, aligned.
pub fn decoded_bytes(w: u32, h: u32) -> u64 {
    (w as u64 * h as u64 * 3).next_multiple_of(ARENA_ALIGN)
}

impl ArenaPlan {
    /// Room for the `batch` largest images of the index (`pixels`: stored `w·h` per sample,
    /// already capped by the decoded-size guard), so any batch fits whole even without ROI
    /// decode.
    pub fn new(pixels: impl IntoIterator<Item = u64>, batch: usize, max_pixels: u64) -> Self {
        let sizes = pixels.into_iter().map(|p| (p.min(max_pixels) * 3).next_multiple_of(ARENA_ALIGN));
        Self { bytes: crate::backend::cuda::staging::largest_k_sum(sizes, batch, ARENA_ALIGN).max(ARENA_ALIGN) }
    }
}

/// Bump allocation of a batch's decoded images inside the arena. An image that does not fit
/// (its header disagrees with the index) gets `None` and goes to the policy, never to a
/// bigger allocation.
#[derive(Clone, Debug)]
pub struct ArenaCursor {
    capacity: u64,
    used: u64,
}

impl ArenaCursor {
    /// An empty arena of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        Self { capacity, used: 0 }
    }

    /// Offset for a `w × h` RGB image, or `None` when it does not fit.
    pub fn place(&mut self, w: u32, h: u32) -> Option<u64> {
        let n = decoded_bytes(w, h);
        let end = self.used.checked_add(n)?;
        (end <= self.capacity).then(|| std::mem::replace(&mut self.used, end))
    }

    /// Offset for a `w × h` RGB image that may take over `prev` (offset and bytes of a place
    /// given earlier in this batch, to an image whose GPU decode failed): the same place when
    /// the image fits in it, else [`Self::place`]. Retrying on the CPU must not need more
    /// room than the batch was sized for: the arena holds one place per image, and one bad
    /// image fails a whole hardware call, whose images are all retried.
    pub fn place_or_reuse(&mut self, prev: Option<(u64, u64)>, w: u32, h: u32) -> Option<u64> {
        match prev {
            Some((offset, bytes)) if decoded_bytes(w, h) <= bytes => Some(offset),
            _ => self.place(w, h),
        }
    }

    /// Start a new batch.
    pub fn reset(&mut self) {
        self.used = 0;
    }
}

pub(super) fn arena_full(bytes: u64) -> crate::error::SlotError {
    crate::error::SlotError::Capacity(format!(
        "the batch's decoded images do not fit the {bytes}-byte decode arena sized from the index (did files change since indexing?)"
    ))
}
