// Host build of kernels/mixup.cuh for the CPU backend (src/augment/mixup.rs): the same
// per-element function the CUDA kernel runs, over the pairs of a host batch. Compiled by
// build.rs with -ffp-contract=off.
#include <stddef.h>
#include <stdint.h>
#include "../mixup.cuh"

// The pairs (i, N-1-i) for i in [first, last) of the N/2: each touches only its two samples,
// so disjoint ranges may run at once (src/augment/mixup.rs spreads them over threads).
extern "C" void stoke_host_mixup(void* out, const StokeMix* mix, uint32_t dtype, uint32_t layout, uint32_t n, int32_t H, int32_t W,
                                 uint32_t first, uint32_t last) {
    for (uint32_t i = first; i < last && i < n / 2u; i++) {
        if (mix[i].kind == STOKE_MIX_NONE && mix[n - 1u - i].kind == STOKE_MIX_NONE) continue;
        for (int32_t c = 0; c < 3; c++)
            for (int32_t y = 0; y < H; y++)
                for (int32_t x = 0; x < W; x++) stoke_mix_pair_element(out, dtype, layout, n, H, W, mix, i, c, y, x);
    }
}
