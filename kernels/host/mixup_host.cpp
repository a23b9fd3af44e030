// Host build of kernels/mixup.cuh for the CPU backend (src/augment/mixup.rs): the same
// per-element function the CUDA kernel runs, over the pairs of a host batch. Compiled by
// build.rs with -ffp-contract=off.
#include <stddef.h>
#include <stdint.h>
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
    for (int32_t c = 0; c < 3; c++)
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++) stoke_mix_pair_element(out, dtype, layout, n, H, W, mix, i, c, y, x);
}
