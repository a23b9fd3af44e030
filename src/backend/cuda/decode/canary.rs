//! Canaries: pixels written into every GPU decode destination before the decode and checked
//! after it.

/// Canary pixels written into every GPU decode destination before the decode and checked
/// after it (`stoke_canary_set` / `stoke_canary_check` in `kernels/canary.cu`): a decoder,
/// the hardware engine in particular, can report success for an image it skipped. The
/// `CANARIES` pixels are spread over every row band and column band of the region, each with
/// its own three-byte value; an image counts as not written when at least
/// `CANARY_MIN_INTACT` of them survive. A decoded pixel equals a given canary with
/// probability about 2^-24, so a false alarm (which only costs a CPU re-decode) happens about
/// once in 500 000 images; a skipped or partly written image keeps canaries.
pub const CANARIES: u32 = 32;
/// See [`CANARIES`].
pub const CANARY_MIN_INTACT: u32 = 1;

/// Where one GPU decode writes, for the canary kernels. Mirrored by `StokeDecodeTarget` in
/// `kernels/canary.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DecodeTarget {
    /// Arena byte offset of the decoded region.
    pub offset: u64,
    /// Decoded width (the ROI's).
    pub width: u32,
    /// Decoded height.
    pub height: u32,
    /// Bytes per row (`3 · width`).
    pub pitch: u32,
    /// Zero.
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<DecodeTarget>() == 24);

pub(super) mod canary_ffi {
    extern "C" {
        pub fn stoke_host_canary_at(t: *const super::DecodeTarget, k: u32, v: *mut u8) -> u64;
        #[cfg(test)]
        pub fn stoke_host_canaries() -> u32;
    }
}

/// Arena offset and bytes of canary `k` of `t`, as the canary kernels compute them (their
/// code, host-compiled).
pub fn canary_at(t: &DecodeTarget, k: u32) -> (u64, [u8; 3]) {
    let mut v = [0u8; 3];
    // SAFETY: reads `t`, writes three bytes into `v`.
    let off = unsafe { canary_ffi::stoke_host_canary_at(t, k, v.as_mut_ptr()) };
    (off, v)
}

// SAFETY: #[repr(C)] plain integers, the layout `StokeDecodeTarget` asserts on the C side.
unsafe impl cudarc::driver::DeviceRepr for DecodeTarget {}
// SAFETY: all-zero bytes are a valid DecodeTarget (integers only).
unsafe impl cudarc::driver::ValidAsZeroBits for DecodeTarget {}
