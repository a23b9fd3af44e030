// Host build of kernels/augment.cu: its per-pixel functions (STOKE_HD) compiled by build.rs
// with -ffp-contract=off, the __global__ wrappers left out. stoke_host_gpu_augment runs the
// two augment kernels' work sequentially, (sample, axis, index) then (sample, pixel), so CI can
// check the GPU path's own code against the CPU backend bit for bit (tests/gpu_kernel_host.rs).
#include <stddef.h>
#include <stdint.h>
#include <vector>
#include "../augment.cu"
#include "../canary.cuh"

extern "C" {

// What stoke_augment_tables + stoke_recipe_stats + [stoke_blur_*] + stoke_augment(_rotate|_recipe)
// compute for `n` samples: tables into counts/offs/weights (laid out by the descriptors), the
// contrast sums (recipe), the blur passes (recipe samples that blur), then every output element
// into `out`.
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
    StokeTables t = {counts, offs, weights, nullptr, 0u, nullptr, 0u};
    // The AutoAugment kernels' work (stoke_auto_base, then per op slot stoke_auto_hist,
    // stoke_auto_tables, stoke_auto_step), sample by sample, pixel by pixel.
    std::vector<uint8_t> auto_img;
    int any_auto = 0;
    for (uint32_t s = 0; s < n && recipe; s++) any_auto |= stoke_auto_active(&params[s].aa);
    if (any_auto) {
        const int32_t W = params[0].out_w, H = params[0].out_h;
        auto_img.assign(2 * (size_t)n * (size_t)W * (size_t)H * 3u, 0);
        std::vector<uint32_t> hist(STOKE_AUTO_BINS);
        std::vector<uint8_t> lut(768);
        for (uint32_t s = 0; s < n; s++) {
            const StokeAugParams& p = params[s];
            if (!stoke_auto_active(&p.aa)) continue;
            StokeRotation sr;
            stoke_rotation_init(params + s, &sr);
            uint8_t* base = auto_img.data() + stoke_auto_offset(n, s, 0, W, H);
            for (int32_t y = 0; y < H; y++)
                for (int32_t x = 0; x < W; x++) {
                    float v[3];
                    stoke_geometry_pixel<true>(arena, p, descs[s], sr, t, x, y, v);
                    for (int c = 0; c < 3; c++) base[((size_t)y * W + x) * 3 + c] = stoke_to_u8(v[c]);
                }
            for (int k = 0; k < STOKE_AUTO_MAX; k++) {
                if (!stoke_auto_runs(&p.aa, k)) continue;
                const StokeAutoOp* o = &p.aa.ops[k];
                const int src = stoke_auto_before(&p.aa, k) & 1;
                const uint8_t* in = auto_img.data() + stoke_auto_offset(n, s, src, W, H);
                uint8_t* out_img = auto_img.data() + stoke_auto_offset(n, s, src ^ 1, W, H);
                for (auto& h : hist) h = 0u;
                if (stoke_auto_needs_hist(o->op)) {
                    for (size_t q = 0; q < (size_t)W * H; q++) {
                        uint32_t bins[3];
                        const int nb = stoke_auto_hist_bins(o->op, in + 3 * q, bins);
                        for (int i = 0; i < nb; i++) hist[bins[i]]++;
                    }
                }
                if (stoke_auto_is_table(o->op))
                    for (int c = 0; c < 3; c++) stoke_auto_table(o, hist.data(), (uint64_t)W * H, c, lut.data() + 256 * c);
                StokeAutoGeom g;
                stoke_auto_prepare(o, W, H, &g);
                for (int32_t y = 0; y < H; y++)
                    for (int32_t x = 0; x < W; x++)
                        stoke_auto_pixel(o, &g, p.aa.fill, lut.data(), in, W, H, x, y, out_img + ((size_t)y * W + x) * 3);
            }
        }
        t.auto_img = auto_img.data();
        t.auto_n = n;
    }
    // The blur kernels' images (stoke_blur_base, stoke_blur_pass), filled per sample below.
    std::vector<uint8_t> blur_img;
    std::vector<float> blur_hor;
    int any_blur = 0;
    for (uint32_t s = 0; s < n && recipe; s++) any_blur |= stoke_blur_active(&params[s].blur);
    if (any_blur) {
        const size_t px = (size_t)params[0].out_w * (size_t)params[0].out_h * 3u;
        blur_img.assign(2 * (size_t)n * px, 0);
        blur_hor.assign(px, 0.0f);
        t.blur_img = blur_img.data();
        t.blur_n = n;
    }
    for (uint32_t s = 0; s < n; s++) {
        const StokeAugParams& p = params[s];
        StokeRotation sr;
        stoke_rotation_init(params + s, &sr);
        float contrast_mean = 0.0f;
        if (recipe && stoke_color_needs_mean(&p.color)) {
            uint64_t sum = 0;
            for (int32_t y = 0; y < p.out_h; y++)
                for (int32_t x = 0; x < p.out_w; x++) sum += stoke_contrast_pixel(arena, p, descs[s], sr, t, s, x, y);
            contrast_mean = stoke_contrast_mean(sum, (uint64_t)p.out_w * (uint64_t)p.out_h);
        }
        if (any_blur && stoke_blur_active(&p.blur)) {
            const int32_t W = p.out_w, H = p.out_h;
            uint8_t* img[2] = {blur_img.data() + stoke_auto_offset(n, s, 0, W, H),
                               blur_img.data() + stoke_auto_offset(n, s, 1, W, H)};
            StokeTables tb = t;
            tb.blur_img = nullptr;
            for (int32_t y = 0; y < H; y++)
                for (int32_t x = 0; x < W; x++) {
                    float v[3];
                    stoke_recipe_color<true>(arena, p, descs[s], sr, tb, s, x, y, contrast_mean, v);
                    for (int c = 0; c < 3; c++) img[0][((size_t)y * W + x) * 3 + c] = stoke_to_u8(v[c]);
                }
            float w[STOKE_BLUR_KMAX];
            if (p.blur.kind == STOKE_BLUR_GAUSS) stoke_gauss_weights(p.blur.ksize, p.blur.sigma, w);
            const StokePilBox box = stoke_pil_box(p.blur.sigma);
            for (int pass = 0; pass < stoke_blur_passes(p.blur.kind); pass++) {
                const int src = stoke_blur_src(p.blur.kind, pass);
                for (int32_t y = 0; y < H; y++)
                    for (int32_t x = 0; x < W; x++)
                        stoke_blur_pass_pixel(&p.blur, pass, w, box, img[src], img[src ^ 1], blur_hor.data(), W, H, x, y);
            }
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
