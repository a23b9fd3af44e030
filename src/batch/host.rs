//! [`HostImages`]: a host batch's tensor, held as a vector of its element type.

use crate::config::DType;
use half::{bf16, f16};

/// The images of a host batch: one vector of the batch's element type, so that a framework
/// tensor can take the vector itself (candle's `Tensor::from_vec`; `Batch::take_candle` with
/// the `candle` feature) instead of copying it, and the bytes are aligned for that type.
/// Everything else reads and writes it as little-endian bytes ([`HostImages::bytes`], or
/// through `Deref<Target = [u8]>`).
#[derive(Clone, Debug, PartialEq)]
pub enum HostImages {
    /// `DType::U8`.
    U8(Vec<u8>),
    /// `DType::F16`.
    F16(Vec<f16>),
    /// `DType::Bf16`.
    Bf16(Vec<bf16>),
    /// `DType::F32`.
    F32(Vec<f32>),
}

impl Default for HostImages {
    fn default() -> Self {
        Self::U8(Vec::new())
    }
}

impl HostImages {
    /// An empty buffer of `dtype`.
    pub fn new(dtype: DType) -> Self {
        match dtype {
            DType::U8 => Self::U8(Vec::new()),
            DType::F16 => Self::F16(Vec::new()),
            DType::Bf16 => Self::Bf16(Vec::new()),
            DType::F32 => Self::F32(Vec::new()),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Self::U8(_) => DType::U8,
            Self::F16(_) => DType::F16,
            Self::Bf16(_) => DType::Bf16,
            Self::F32(_) => DType::F32,
        }
    }

    /// Make it `bytes` long (a whole number of `dtype` elements), as `dtype`: the allocation is
    /// kept when the type is unchanged (new elements are zero), replaced otherwise.
    pub fn resize(&mut self, dtype: DType, bytes: usize) {
        assert_eq!(bytes % dtype.size(), 0, "{bytes} bytes is not a whole number of {dtype:?} elements");
        if self.dtype() != dtype {
            *self = Self::new(dtype);
        }
        let n = bytes / dtype.size();
        if self.is_empty() {
            // A new vector (the first batch, or one whose vector a tensor took): zeroed by the
            // allocator, which for a batch-sized vector is fresh pages from the kernel, not a
            // pass over the memory that the backend then overwrites (measured in
            // benches/candle_handoff.rs).
            *self = match dtype {
                DType::U8 => Self::U8(vec![0u8; n]),
                DType::F16 => Self::F16(bytemuck::allocation::cast_vec(vec![0u16; n])),
                DType::Bf16 => Self::Bf16(bytemuck::allocation::cast_vec(vec![0u16; n])),
                DType::F32 => Self::F32(vec![0f32; n]),
            };
            huge_pages(self.bytes());
            return;
        }
        match self {
            Self::U8(v) => v.resize(n, 0),
            Self::F16(v) => v.resize(n, f16::ZERO),
            Self::Bf16(v) => v.resize(n, bf16::ZERO),
            Self::F32(v) => v.resize(n, 0.0),
        }
    }

    /// The tensor's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::U8(v) => v,
            Self::F16(v) => bytemuck::cast_slice(v),
            Self::Bf16(v) => bytemuck::cast_slice(v),
            Self::F32(v) => bytemuck::cast_slice(v),
        }
    }

    /// The tensor's bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Self::U8(v) => v,
            Self::F16(v) => bytemuck::cast_slice_mut(v),
            Self::Bf16(v) => bytemuck::cast_slice_mut(v),
            Self::F32(v) => bytemuck::cast_slice_mut(v),
        }
    }
}

/// Ask for transparent huge pages over `mem` (a new, untouched vector), so that the backend's
/// first writes take one fault per 2 MiB instead of one per 4 KiB. Only the whole 2 MiB pages
/// inside it; nothing for small vectors; a kernel that says no changes nothing.
#[cfg(target_os = "linux")]
fn huge_pages(mem: &[u8]) {
    const HUGE: usize = 2 << 20;
    let (start, end) = ((mem.as_ptr() as usize).next_multiple_of(HUGE), (mem.as_ptr() as usize + mem.len()) & !(HUGE - 1));
    if end > start {
        // SAFETY: advice on whole pages of memory this vector owns; it does not change the
        // contents (MADV_HUGEPAGE only marks the range as eligible).
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn huge_pages(_: &[u8]) {}

impl std::ops::Deref for HostImages {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::ops::DerefMut for HostImages {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.bytes_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytes_are_the_elements_little_endian_and_aligned_for_them() {
        let mut h = HostImages::new(DType::F32);
        h.resize(DType::F32, 8);
        h.bytes_mut()[..4].copy_from_slice(&1.5f32.to_le_bytes());
        assert_eq!(h, HostImages::F32(vec![1.5, 0.0]));
        assert_eq!(h.as_ptr() as usize % 4, 0);
        let mut g = HostImages::default();
        g.resize(DType::F16, 4);
        g[2..].copy_from_slice(&f16::from_f32(-2.0).to_le_bytes());
        assert_eq!(g, HostImages::F16(vec![f16::ZERO, f16::from_f32(-2.0)]));
    }

    #[test]
    fn resizing_keeps_the_allocation_for_the_same_type_and_replaces_it_for_another() {
        let mut h = HostImages::new(DType::Bf16);
        h.resize(DType::Bf16, 1 << 12);
        let p = h.as_ptr();
        h.resize(DType::Bf16, 1 << 10);
        assert_eq!((h.as_ptr(), h.len()), (p, 1 << 10));
        h.resize(DType::U8, 3);
        assert_eq!(h, HostImages::U8(vec![0; 3]));
    }

    #[test]
    #[should_panic(expected = "not a whole number")]
    fn a_partial_element_is_refused() {
        HostImages::default().resize(DType::F32, 6);
    }
}
