// Mixup / CutMix, the per-element part (timm's `Mixup` with the batch flipped: sample i mixes
// with sample N-1-i). The host draws one StokeMix per sample (src/augment/mixup.rs); this
// header says what each output element becomes, for the CUDA kernel (kernels/mixup.cu) and the
// CPU backend (kernels/host/mixup_host.cpp) alike. Applied after normalize and the cast, in
// place: the pair (i, N-1-i) is read, then both are written, so each side mixes with the
// other's *original* values (timm's `x_orig = x.clone()`).
#pragma once
#include "stoke_common.cuh"

#define STOKE_MIX_NONE 0u   // the sample keeps its pixels
#define STOKE_MIX_BLEND 1u  // mixup: lam·own + (1−lam)·partner
#define STOKE_MIX_BOX 2u    // cutmix: the partner's pixels inside [x0,x1)×[y0,y1)

// Mirror of `MixParams` in src/augment/mixup.rs.
struct StokeMix {
    uint32_t partner;  // the slot mixed in (N-1-i)
    uint32_t kind;     // STOKE_MIX_*
    float lam;         // BLEND: weight of the sample's own pixels
    int32_t x0, y0, x1, y1;  // BOX, output pixels
    uint32_t pad;
};
static_assert(sizeof(StokeMix) == 32, "StokeMix must match MixParams (32 bytes)");

// binary16 bits → f32, exactly (every half is a float).
STOKE_HD float stoke_f16_bits_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        exp = 113u;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp -= 1u;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    return stoke_bits_to_f32(bits);
}

// Element `idx` of `out` (of `dtype`) as f32.
STOKE_HD float stoke_load_value(const void* out, uint32_t dtype, uint64_t idx) {
    if (dtype == STOKE_DTYPE_F16) return stoke_f16_bits_to_f32(((const uint16_t*)out)[idx]);
    if (dtype == STOKE_DTYPE_BF16) return stoke_bits_to_f32((uint32_t)((const uint16_t*)out)[idx] << 16);
    return ((const float*)out)[idx];
}

// What an element at (x, y) of a sample mixed by `m` becomes, from its own value and its
// partner's. Plain f32 operations (both builds forbid FMA contraction).
STOKE_HD float stoke_mix_value(float own, float partner, const StokeMix& m, int32_t x, int32_t y) {
    if (m.kind == STOKE_MIX_BLEND) return own * m.lam + partner * (1.0f - m.lam);
    if (m.kind == STOKE_MIX_BOX && x >= m.x0 && x < m.x1 && y >= m.y0 && y < m.y1) return partner;
    return own;
}

// Element (c, y, x) of the pair (i, N-1-i), i < N/2: both read, then both written.
STOKE_HD void stoke_mix_pair_element(void* out, uint32_t dtype, uint32_t layout, uint32_t n, int32_t H, int32_t W,
                                     const StokeMix* mix, uint32_t i, int32_t c, int32_t y, int32_t x) {
    const uint32_t j = n - 1u - i;
    const uint64_t a = stoke_out_index(layout, i, c, y, x, H, W);
    const uint64_t b = stoke_out_index(layout, j, c, y, x, H, W);
    const float va = stoke_load_value(out, dtype, a);
    const float vb = stoke_load_value(out, dtype, b);
    if (mix[i].kind != STOKE_MIX_NONE) stoke_store_value(out, dtype, a, stoke_mix_value(va, vb, mix[i], x, y));
    if (mix[j].kind != STOKE_MIX_NONE) stoke_store_value(out, dtype, b, stoke_mix_value(vb, va, mix[j], x, y));
}
