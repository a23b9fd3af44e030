// Host build of kernels/augment.cu: its per-pixel functions (STOKE_HD) compiled by build.rs
// with -ffp-contract=off, the __global__ wrappers left out. stoke_host_gpu_augment runs the
// two augment kernels' work sequentially, (sample, axis, index) then (sample, pixel), so CI can
// check the GPU path's own code against the CPU backend bit for bit (tests/gpu_kernel_host.rs).
#include <stddef.h>
#include <stdint.h>
#include "../augment.cu"
#include "../canary.cuh"

extern "C" {

// What stoke_augment_tables + stoke_recipe_stats + stoke_augment(_rotate|_recipe) compute for
// `n` samples: tables into counts/offs/weights (laid out by the descriptors), the contrast sums
// (recipe), then every output element into `out`.
void stoke_host_gpu_augment(const uint8_t* arena, const StokeAugParams* params, const StokeSampleDesc* descs,
                            uint32_t n, int32_t* counts, int32_t* offs, float* weights, void* out, uint32_t dtype,
                            uint32_t layout, const float* mean, const float* std, int rotate, int recipe) {
    StokeNormalize norm;
    for (int c = 0; c < 3; c++) {
        norm.mean[c] = mean[c];
        norm.std[c] = std[c];
    }
    for (uint32_t s = 0; s < n; s++) {
        const int32_t len = params[s].out_w > params[s].out_h ? params[s].out_w : params[s].out_h;
        for (uint32_t axis = 0; axis < 2; axis++) {
            for (int32_t i = 0; i < len; i++) stoke_table_entry(params + s, descs + s, axis, i, counts, offs, weights);
        }
    }
    const StokeTables t = {counts, offs, weights};
    for (uint32_t s = 0; s < n; s++) {
        const StokeAugParams& p = params[s];
        StokeRotation sr;
        stoke_rotation_init(params + s, &sr);
        float contrast_mean = 0.0f;
        if (recipe && stoke_color_needs_mean(&p.color)) {
            uint64_t sum = 0;
            for (int32_t y = 0; y < p.out_h; y++)
                for (int32_t x = 0; x < p.out_w; x++) sum += stoke_contrast_pixel(arena, p, descs[s], sr, t, x, y);
            contrast_mean = stoke_contrast_mean(sum, (uint64_t)p.out_w * (uint64_t)p.out_h);
        }
        for (int32_t y = 0; y < p.out_h; y++) {
            for (int32_t x = 0; x < p.out_w; x++) {
                if (recipe) {
                    stoke_augment_pixel<true, true>(arena, p, descs[s], sr, t, s, x, y, out, dtype, layout, norm,
                                                    contrast_mean);
                } else if (rotate) {
                    stoke_augment_pixel<true, false>(arena, p, descs[s], sr, t, s, x, y, out, dtype, layout, norm, 0.0f);
                } else {
                    stoke_augment_pixel<false, false>(arena, p, descs[s], sr, t, s, x, y, out, dtype, layout, norm, 0.0f);
                }
            }
        }
    }
}

// Where canary k of target t goes (byte offset in the arena) and its three bytes.
uint64_t stoke_host_canary_at(const StokeDecodeTarget* t, uint32_t k, uint8_t* v) { return stoke_canary_at(*t, k, v); }
uint32_t stoke_host_canaries(void) { return STOKE_CANARIES; }

size_t stoke_host_sample_desc_size(void) { return sizeof(StokeSampleDesc); }
size_t stoke_host_decode_target_size(void) { return sizeof(StokeDecodeTarget); }

}  // extern "C"
