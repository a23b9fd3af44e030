// Host build of kernels/mixup.cuh for the CPU backend (src/augment/mixup.rs): the same
// per-element function the CUDA kernel runs, over the pairs of a host batch. Compiled by
// build.rs with -ffp-contract=off.
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "../mixup.cuh"

// The pair (i, N-1-i), i < N/2: it touches only its two samples, so pairs may run at once
// (src/augment/mixup.rs spreads them over threads).
extern "C" void stoke_host_mixup(void* out, const StokeMix* mix, uint32_t dtype, uint32_t layout, uint32_t n, int32_t H, int32_t W,
                                 uint32_t i) {
    if (i >= n / 2u) return;
    const StokeMix& mi = mix[i];
    const StokeMix& mj = mix[n - 1u - i];
    if (mi.kind == STOKE_MIX_NONE && mj.kind == STOKE_MIX_NONE) return;
    if (dtype == STOKE_DTYPE_F32 && mi.kind != STOKE_MIX_BOX && mj.kind != STOKE_MIX_BOX) {
        // Blends only, in f32: what an element becomes does not depend on where it is, so
        // each sample is one flat run of 3·H·W floats, in either layout. The same operations
        // as stoke_mix_value (1 − lam is the same float for every element), in loops the
        // compiler vectorizes.
        const size_t len = (size_t)3 * (size_t)H * (size_t)W;
        float* a = (float*)out + (size_t)i * len;
        float* b = (float*)out + (size_t)(n - 1u - i) * len;
        const float li = mi.lam, ri = 1.0f - mi.lam, lj = mj.lam, rj = 1.0f - mj.lam;
        if (mi.kind == STOKE_MIX_BLEND && mj.kind == STOKE_MIX_BLEND) {
            for (size_t k = 0; k < len; k++) {
                const float va = a[k], vb = b[k];
                a[k] = va * li + vb * ri;
                b[k] = vb * lj + va * rj;
            }
        } else if (mi.kind == STOKE_MIX_BLEND) {
            for (size_t k = 0; k < len; k++) a[k] = a[k] * li + b[k] * ri;
        } else {
            for (size_t k = 0; k < len; k++) b[k] = b[k] * lj + a[k] * rj;
        }
        return;
    }
    if (mi.kind != STOKE_MIX_BLEND && mj.kind != STOKE_MIX_BLEND) {
        // CutMix (a box, or nothing, on each side): an element inside a box becomes its
        // partner's value unchanged, which in every dtype is its partner's bytes (a stored
        // value loads and stores back as the same bits), and nothing outside a box changes:
        // only the boxes' rows are visited, a run of bytes per row and channel plane, the
        // elements both boxes hold swapped.
        const size_t es = dtype == STOKE_DTYPE_F32 ? 4u : (dtype == STOKE_DTYPE_U8 ? 1u : 2u);
        const uint32_t j = n - 1u - i;
        const int nhwc = layout == STOKE_LAYOUT_NHWC;
        const size_t px = nhwc ? 3u * es : es;  // bytes of one x position in a row run
        uint8_t* base = (uint8_t*)out;
        for (int32_t y = 0; y < H; y++) {
            // This row's x range of each box ([0, 0) where the box misses the row).
            const int ri = mi.kind == STOKE_MIX_BOX && y >= mi.y0 && y < mi.y1 && mi.x1 > mi.x0;
            const int rj = mj.kind == STOKE_MIX_BOX && y >= mj.y0 && y < mj.y1 && mj.x1 > mj.x0;
            if (!ri && !rj) continue;
            const int32_t ai0 = ri ? mi.x0 : 0, ai1 = ri ? mi.x1 : 0, bj0 = rj ? mj.x0 : 0, bj1 = rj ? mj.x1 : 0;
            const int32_t lo = !rj ? ai0 : (!ri ? bj0 : (ai0 < bj0 ? ai0 : bj0));
            const int32_t hi = !rj ? ai1 : (!ri ? bj1 : (ai1 > bj1 ? ai1 : bj1));
            for (int32_t c = 0; c < (nhwc ? 1 : 3); c++) {
                uint8_t* ra = base + stoke_out_index(layout, i, c, y, 0, H, W) * es;
                uint8_t* rb = base + stoke_out_index(layout, j, c, y, 0, H, W) * es;
                for (int32_t x = lo; x < hi; x++) {
                    const int ta = x >= ai0 && x < ai1, tb = x >= bj0 && x < bj1;
                    uint8_t* ea = ra + (size_t)x * px;
                    uint8_t* eb = rb + (size_t)x * px;
                    uint8_t t[12];
                    if (ta && tb) {
                        memcpy(t, ea, px);
                        memcpy(ea, eb, px);
                        memcpy(eb, t, px);
                    } else if (ta) {
                        memcpy(ea, eb, px);
                    } else if (tb) {
                        memcpy(eb, ea, px);
                    }
                }
            }
        }
        return;
    }
    for (int32_t c = 0; c < 3; c++)
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++) stoke_mix_pair_element(out, dtype, layout, n, H, W, mix, i, c, y, x);
}
