// Shared by every kernel and compiled for the host too (kernels/host/*.cpp), so CI runs the
// exact source the GPU runs. Nothing here may depend on CUDA headers: under a host compiler
// STOKE_HD expands to nothing.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define STOKE_HD __host__ __device__ __forceinline__
#else
// A host build may define it first: kernels/host/augment_host_avx2.cpp makes these functions
// `static inline`, so its AVX2 copies cannot stand in for the baseline build's at link time.
#ifndef STOKE_HD
#define STOKE_HD inline
#endif
#include <stdint.h>
#include <string.h>
#endif

#if defined(__CUDACC_RTC__)
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#elif defined(__CUDACC__)
#include <stddef.h>
#include <stdint.h>
#endif

// Output element types and layouts (DType::code / Layout::code in src/config.rs).
#define STOKE_DTYPE_F32 0u
#define STOKE_DTYPE_F16 1u
#define STOKE_DTYPE_BF16 2u
#define STOKE_DTYPE_U8 3u  // unnormalized 0..255, round half to even (mean/std not applied)
#define STOKE_LAYOUT_NCHW 0u
#define STOKE_LAYOUT_NHWC 1u

STOKE_HD uint32_t stoke_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

// The binary32 whose bits are `u` (the inverse of stoke_f32_bits).
STOKE_HD float stoke_bits_to_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

// IEEE binary16 from binary32, round to nearest even (what __float2half_rn does), written out
// so the host and the device give the same bits by construction.
STOKE_HD uint16_t stoke_f32_to_f16_bits(float f) {
    uint32_t x = stoke_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {  // inf or nan
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    }
    if (ax >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
        return (uint16_t)(sign | 0x7c00u);
    }
    if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
        if (ax < 0x33000000u) return (uint16_t)sign;  // < 2^-25 rounds to 0
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;  // 14..24
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r += 1u;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u;  // rebias exponent 127 → 15 (in place, shifted by 13)
    uint32_t low = r & 0x1fffu;
    r >>= 13;
    if (low > 0x1000u || (low == 0x1000u && (r & 1u))) r += 1u;
    return (uint16_t)(sign | r);
}

// bfloat16 from binary32, round to nearest even; NaN stays NaN.
STOKE_HD uint16_t stoke_f32_to_bf16_bits(float f) {
    uint32_t x = stoke_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    uint32_t lsb = (x >> 16) & 1u;
    return (uint16_t)((x + 0x7fffu + lsb) >> 16);
}

// Normalize one channel value on the 0..255 scale: (x/255 − mean)/std in fp32, written as
// separate IEEE operations (no fused multiply-add) so host and device agree bit for bit.
// `mean` is on the 0..1 scale; the division by std is a true division.
STOKE_HD float stoke_normalize(float x255, float mean, float std) {
    float x = x255 / 255.0f;
    return (x - mean) / std;
}

// Element index of (sample n, channel c, row y, column x) in an N×3×H×W (NCHW) or N×H×W×3
// (NHWC) tensor. The one definition both kernel families use.
STOKE_HD uint64_t stoke_out_index(uint32_t layout, uint64_t n, int32_t c, int32_t y, int32_t x, int32_t H, int32_t W) {
    if (layout == STOKE_LAYOUT_NHWC) return ((n * (uint64_t)H + (uint64_t)y) * (uint64_t)W + (uint64_t)x) * 3u + (uint64_t)c;
    return ((n * 3u + (uint64_t)c) * (uint64_t)H + (uint64_t)y) * (uint64_t)W + (uint64_t)x;
}

// Store an f32 value as `dtype` at element `idx` of `out` (round to nearest even for f16/bf16).
STOKE_HD void stoke_store_value(void* out, uint32_t dtype, uint64_t idx, float v) {
    if (dtype == STOKE_DTYPE_F16) {
        ((uint16_t*)out)[idx] = stoke_f32_to_f16_bits(v);
    } else if (dtype == STOKE_DTYPE_BF16) {
        ((uint16_t*)out)[idx] = stoke_f32_to_bf16_bits(v);
    } else if (dtype == STOKE_DTYPE_U8) {  // a byte, clamped (callers store 0..255 values through stoke_store)
        ((uint8_t*)out)[idx] = v <= 0.0f ? (uint8_t)0 : (v >= 255.0f ? (uint8_t)255 : (uint8_t)(v + 0.5f));
    } else {
        ((float*)out)[idx] = v;
    }
}
