//! The kernels' per-element math compiled for the host (`kernels/host/*.cpp`, built by
//! `build.rs`), so the CPU backend and CI run the exact source the GPU runs.

mod ffi {
    extern "C" {
        pub fn stoke_host_f32_to_f16(f: f32) -> u16;
        pub fn stoke_host_f32_to_bf16(f: f32) -> u16;
        pub fn stoke_host_normalize(x255: f32, mean: f32, std: f32) -> f32;
        pub fn stoke_host_params_size() -> usize;
    }
}

/// binary16 bits of `f`, round to nearest even (`stoke_f32_to_f16_bits`).
pub fn f32_to_f16_bits(f: f32) -> u16 {
    // SAFETY: pure function of its argument, no pointers.
    unsafe { ffi::stoke_host_f32_to_f16(f) }
}

/// bfloat16 bits of `f`, round to nearest even (`stoke_f32_to_bf16_bits`).
pub fn f32_to_bf16_bits(f: f32) -> u16 {
    // SAFETY: pure function of its argument, no pointers.
    unsafe { ffi::stoke_host_f32_to_bf16(f) }
}

/// `(x/255 − mean)/std` as the kernels compute it (`stoke_normalize`).
pub fn normalize(x255: f32, mean: f32, std: f32) -> f32 {
    // SAFETY: pure function of its arguments, no pointers.
    unsafe { ffi::stoke_host_normalize(x255, mean, std) }
}

/// `sizeof(StokeAugParams)` as the C++ side sees it.
pub fn params_size() -> usize {
    // SAFETY: no arguments, returns a constant.
    unsafe { ffi::stoke_host_params_size() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_struct_has_the_same_size_on_both_sides() {
        assert_eq!(params_size(), std::mem::size_of::<crate::augment::AugParams>());
    }

    /// Reference: the `half` crate's conversions (an independent implementation), over every
    /// f32 bit pattern on a stride plus the edge cases around rounding ties.
    #[test]
    fn f16_and_bf16_rounding_match_an_independent_implementation() {
        let check = |bits: u32| {
            let f = f32::from_bits(bits);
            let h = half::f16::from_f32(f).to_bits();
            let b = half::bf16::from_f32(f).to_bits();
            if f.is_nan() {
                assert!(half::f16::from_bits(f32_to_f16_bits(f)).is_nan());
                assert!(half::bf16::from_bits(f32_to_bf16_bits(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16_bits(f), h, "f16 of {f:e} ({bits:#x})");
                assert_eq!(f32_to_bf16_bits(f), b, "bf16 of {f:e} ({bits:#x})");
            }
        };
        let mut bits = 0u32;
        while let Some(n) = bits.checked_add(4099) {
            check(bits);
            bits = n;
        }
        for e in 0u32..256 {
            for m in [0u32, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x3000, 0x7fff, 0x8000, 0x8001, 0x18000, 0x7fffff] {
                check((e << 23) | m);
                check(0x8000_0000 | (e << 23) | m);
            }
        }
    }

    #[test]
    fn normalize_matches_the_written_formula() {
        for x in 0..=255u8 {
            let want = (x as f32 / 255.0 - 0.485) / 0.229;
            assert_eq!(normalize(x as f32, 0.485, 0.229).to_bits(), want.to_bits());
        }
    }
}
