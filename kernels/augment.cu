// The fused augment of a batch (the decode canaries are kernels/canary.cu).
//
// Per batch, on the producer stream:
//   stoke_augment_tables  one thread per (sample, axis, window index): that column's (row's)
//                         filter taps from the shared math, as byte offsets + weights;
//   stoke_recipe_stats    (batches where some sample draws ColorJitter's contrast step) one
//                         thread per output pixel: the geometry and the color steps drawn
//                         before contrast, the pixel's grayscale added into its sample's
//                         integer sum (recipe_math.cuh);
//   stoke_augment(_rotate|_recipe) one thread per output pixel: rotation → flip/window →
//                         resize (Σ_ky wy·(Σ_kx wx·src), the CPU backend's order) → clamp →
//                         [recipe: color steps] → [recipe: solarize] → normalize → [recipe:
//                         erasing] → cast, three output elements written once each;
//   stoke_blur_base/_weights/_pass (batches where some sample blurs, after stoke_recipe_stats and
//                         before the recipe kernel): the color result as uint8, then the blur
//                         passes over whole images (blur_math.cuh); the recipe kernel reads
//                         the blurred bytes in place of its color result.
//
// All per-pixel math is augment_math.cuh's and recipe_math.cuh's (shared with the CPU backend). The accumulations
// here are the same sequence of IEEE f32 operations as stoke_resized_pixel / stoke_host_augment,
// written with __fmul_rn/__fadd_rn so they are never contracted into FMA even without
// -fmad=false (the build passes it anyway, for the math in the header). The per-pixel
// functions are STOKE_HD: kernels/host/gpu_augment_host.cpp compiles this file for the host
// (the __global__ parts are device-only) and CI checks its output against the CPU backend bit
// for bit (tests/gpu_kernel_host.rs).
#include "augment_math.cuh"
#include "recipe_math.cuh"
#include "auto_math.cuh"
#include "blur_math.cuh"

// Per-channel mean and std on the 0..1 scale, by value. Mirrored by `Normalize` in
// src/backend/cuda/augment.rs (24 bytes).
struct StokeNormalize {
    float mean[3];
    float std[3];
};
static_assert(sizeof(StokeNormalize) == 24, "StokeNormalize must match Normalize (24 bytes)");

// Mirror of `SampleDesc` in src/backend/cuda/augment.rs.
struct StokeSampleDesc {
    int64_t base;     // arena byte offset of oriented crop pixel (0, 0) (may be outside the ROI)
    int64_t step_x;   // bytes per oriented pixel to the right
    int64_t step_y;   // bytes per oriented pixel down
    uint32_t span_x;  // first x span (window column 0) in `counts`
    uint32_t span_y;  // first y span
    uint32_t weight_x;  // first x tap in `offs` / `weights` (stride ktaps_x per span)
    uint32_t weight_y;  // first y tap (stride ktaps_y per span)
    uint32_t ktaps_x;
    uint32_t ktaps_y;
};
static_assert(sizeof(StokeSampleDesc) == 48, "StokeSampleDesc must match SampleDesc (48 bytes)");


// Device: the IEEE intrinsics (never contracted) and read-only loads. Host (the CI build in
// kernels/host/gpu_augment_host.cpp, compiled with -ffp-contract=off): plain operations, the
// same IEEE single-precision results.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define STOKE_FADD(a, b) __fadd_rn((a), (b))
#define STOKE_FMUL(a, b) __fmul_rn((a), (b))
#define STOKE_LDG(p) __ldg(p)
#else
#define STOKE_FADD(a, b) ((a) + (b))
#define STOKE_FMUL(a, b) ((a) * (b))
#define STOKE_LDG(p) (*(p))
#endif

// ---------------------------------------------------------------------------------------
// Filter tables
// ---------------------------------------------------------------------------------------

// Table entry of window index i on `axis` (0 = x, 1 = y) of one sample: the tap count, and
// per tap the byte offset `tap · step` (int32: the backend refuses guards over 715 M pixels,
// so 3 · w · h < 2^31) and the normalised weight.
STOKE_HD void stoke_table_entry(const StokeAugParams* p, const StokeSampleDesc* d, uint32_t axis, int32_t i,
                                int32_t* counts, int32_t* offs, float* weights) {
    StokeAxis ax;
    uint32_t span, first, k_max;
    int64_t step;
    if (axis == 0) {
        if (i >= p->out_w) return;
        stoke_axis_init(p->crop_w, p->resize_w, p->win_x + i, p->filter, p->antialias, &ax);
        span = d->span_x + (uint32_t)i;
        k_max = d->ktaps_x;
        first = d->weight_x + (uint32_t)i * k_max;
        step = d->step_x;
    } else {
        if (i >= p->out_h) return;
        stoke_axis_init(p->crop_h, p->resize_h, p->win_y + i, p->filter, p->antialias, &ax);
        span = d->span_y + (uint32_t)i;
        k_max = d->ktaps_y;
        first = d->weight_y + (uint32_t)i * k_max;
        step = d->step_y;
    }
    // The host sizes k_max as Pillow's ksize bound, which count never exceeds; the min only
    // keeps a broken invariant from writing outside this span.
    const int32_t count = ax.count < (int32_t)k_max ? ax.count : (int32_t)k_max;
    counts[span] = count;
    for (int32_t k = 0; k < count; k++) {
        offs[first + k] = (int32_t)((int64_t)stoke_axis_tap(&ax, k) * step);
        weights[first + k] = stoke_axis_weight(&ax, k);
    }
}

// ---------------------------------------------------------------------------------------
// Fused augment, per output pixel
// ---------------------------------------------------------------------------------------

struct StokeTables {
    const int32_t* counts;
    const int32_t* offs;
    const float* weights;
    // AutoAugment-family ops (recipe kernels only): the ping-pong uint8 images of the batch,
    // 2 × auto_n samples of out_w × out_h × 3; null when no sample of the batch has ops.
    const uint8_t* auto_img;
    uint32_t auto_n;
    // Blur (recipe kernels only): the two uint8 images per sample of the blur passes, blur_n
    // samples (stoke_auto_offset's layout); null when no sample of the batch blurs.
    const uint8_t* blur_img;
    uint32_t blur_n;
};

// Buffer `buf` (0 or 1) of sample n's AutoAugment images (interleaved RGB, W × H).
STOKE_HD size_t stoke_auto_offset(uint32_t samples, uint32_t n, int buf, int32_t W, int32_t H) {
    return ((size_t)buf * samples + n) * (size_t)W * (size_t)H * 3u;
}

// Resized-crop value of pre-rotation output pixel (x, y), all three channels, clamped to
// [0, 255]: stoke_resized_pixel with the taps read from the tables.
STOKE_HD void stoke_resized_from_tables(const uint8_t* __restrict__ arena, const StokeAugParams& p,
                                        const StokeSampleDesc& d, const StokeTables& t, int32_t x, int32_t y,
                                        float v[3]) {
    int32_t rx, ry;
    stoke_window_flip(&p, x, y, &rx, &ry);
    const uint32_t jx = (uint32_t)(rx - p.win_x), jy = (uint32_t)(ry - p.win_y);
    const int32_t cx = t.counts[d.span_x + jx];
    const int32_t cy = t.counts[d.span_y + jy];
    const int32_t* ox = t.offs + d.weight_x + jx * d.ktaps_x;
    const float* wxs = t.weights + d.weight_x + jx * d.ktaps_x;
    const int32_t* oy = t.offs + d.weight_y + jy * d.ktaps_y;
    const float* wys = t.weights + d.weight_y + jy * d.ktaps_y;
    const uint8_t* origin = arena + d.base;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
    for (int32_t ky = 0; ky < cy; ky++) {
        const float wy = STOKE_LDG(wys + ky);
        const uint8_t* row = origin + STOKE_LDG(oy + ky);
        float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f;
        for (int32_t kx = 0; kx < cx; kx++) {
            const float wx = STOKE_LDG(wxs + kx);
            const uint8_t* px = row + STOKE_LDG(ox + kx);
            r0 = STOKE_FADD(r0, STOKE_FMUL(wx, (float)STOKE_LDG(px)));
            r1 = STOKE_FADD(r1, STOKE_FMUL(wx, (float)STOKE_LDG(px + 1)));
            r2 = STOKE_FADD(r2, STOKE_FMUL(wx, (float)STOKE_LDG(px + 2)));
        }
        a0 = STOKE_FADD(a0, STOKE_FMUL(wy, r0));
        a1 = STOKE_FADD(a1, STOKE_FMUL(wy, r1));
        a2 = STOKE_FADD(a2, STOKE_FMUL(wy, r2));
    }
    v[0] = stoke_clamp255(a0);
    v[1] = stoke_clamp255(a1);
    v[2] = stoke_clamp255(a2);
}

// The geometry of output pixel (x, y): rotation → flip/window → resize, the clamped 0..255
// value of each channel in v. ROTATE = false is only used when every angle of the batch is 0
// (the host checks), so it skips the rotation machinery and its registers. `sr` is
// stoke_rotation_init(&sp).
template <bool ROTATE>
STOKE_HD void stoke_geometry_pixel(const uint8_t* __restrict__ arena, const StokeAugParams& sp,
                                   const StokeSampleDesc& sd, const StokeRotation& sr, const StokeTables& t,
                                   int32_t x, int32_t y, float v[3]) {
    const int32_t W = sp.out_w, H = sp.out_h;
    if (!ROTATE || sr.kind == STOKE_ROT_NONE) {
        stoke_resized_from_tables(arena, sp, sd, t, x, y, v);
    } else if (sr.kind == STOKE_ROT_EXACT) {
        int32_t px, py;
        stoke_rot90_src(sr.quarter, x, y, W, H, &px, &py);
        stoke_resized_from_tables(arena, sp, sd, t, px, py, v);
    } else if (sp.rot_interp == STOKE_ROT_NEAREST) {
        int32_t px, py;
        if (stoke_rot_nearest(&sr, x, y, W, H, &px, &py)) {
            stoke_resized_from_tables(arena, sp, sd, t, px, py, v);
        } else {
            v[0] = sp.fill[0];
            v[1] = sp.fill[1];
            v[2] = sp.fill[2];
        }
    } else {
        int32_t x0, y0;
        float w[4];
        stoke_rot_bilinear(&sr, x, y, W, H, &x0, &y0, w);
        const float mask = stoke_rot_mask(w);
        const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
        // One resize body for the four taps (not four inlined copies): keeps the kernel in
        // registers on every architecture. Taps in order 0..3, as the CPU backend.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#pragma unroll 1
#endif
        for (int tap = 0; tap < 4; tap++) {
            const float wt = tap == 0 ? w0 : (tap == 1 ? w1 : (tap == 2 ? w2 : w3));
            if (wt != 0.0f) {
                float pv[3];
                stoke_resized_from_tables(arena, sp, sd, t, x0 + (tap & 1), y0 + (tap >> 1), pv);
                a0 = STOKE_FADD(a0, STOKE_FMUL(wt, pv[0]));
                a1 = STOKE_FADD(a1, STOKE_FMUL(wt, pv[1]));
                a2 = STOKE_FADD(a2, STOKE_FMUL(wt, pv[2]));
            }
        }
        v[0] = stoke_rot_blend(a0, mask, sp.fill[0]);
        v[1] = stoke_rot_blend(a1, mask, sp.fill[1]);
        v[2] = stoke_rot_blend(a2, mask, sp.fill[2]);
    }
}

// Output pixel (x, y) of sample n: its 3 elements of `out` (dtype/layout as given), written
// once. RECIPE adds the color steps (with `mean`, the sample's contrast mean) and erasing
// (recipe_math.cuh); without it they are compiled out.
// The 0..255 value a recipe sample's color steps start from: the AutoAugment ops' result
// when the sample has ops (stoke_auto_* kernels left it in its final buffer), else the
// geometry's.
template <bool ROTATE>
STOKE_HD void stoke_recipe_input(const uint8_t* __restrict__ arena, const StokeAugParams& sp,
                                 const StokeSampleDesc& sd, const StokeRotation& sr, const StokeTables& t, uint32_t n,
                                 int32_t x, int32_t y, float v[3]) {
    if (t.auto_img && stoke_auto_active(&sp.aa)) {
        const int buf = stoke_auto_before(&sp.aa, STOKE_AUTO_MAX) & 1;
        const uint8_t* px = t.auto_img + stoke_auto_offset(t.auto_n, n, buf, sp.out_w, sp.out_h) +
                            ((size_t)y * (size_t)sp.out_w + (size_t)x) * 3u;
        v[0] = (float)px[0];
        v[1] = (float)px[1];
        v[2] = (float)px[2];
        return;
    }
    stoke_geometry_pixel<ROTATE>(arena, sp, sd, sr, t, x, y, v);
}

// A recipe sample's 0..255 value after the color steps (what the blur starts from).
template <bool ROTATE>
STOKE_HD void stoke_recipe_color(const uint8_t* __restrict__ arena, const StokeAugParams& sp,
                                 const StokeSampleDesc& sd, const StokeRotation& sr, const StokeTables& t, uint32_t n,
                                 int32_t x, int32_t y, float mean, float v[3]) {
    stoke_recipe_input<ROTATE>(arena, sp, sd, sr, t, n, x, y, v);
    stoke_color_apply(&sp.color, mean, v);
}

template <bool ROTATE, bool RECIPE>
STOKE_HD void stoke_augment_pixel(const uint8_t* __restrict__ arena, const StokeAugParams& sp,
                                  const StokeSampleDesc& sd, const StokeRotation& sr, const StokeTables& t,
                                  uint32_t n, int32_t x, int32_t y, void* __restrict__ out, uint32_t dtype,
                                  uint32_t layout, const StokeNormalize& norm, float mean) {
    const int32_t W = sp.out_w, H = sp.out_h;
    float v[3];
    if (RECIPE) {
        if (t.blur_img && stoke_blur_active(&sp.blur)) {  // the blur passes' result (stoke_blur_pass)
            const uint8_t* px = t.blur_img + stoke_auto_offset(t.blur_n, n, stoke_blur_result(sp.blur.kind), W, H) +
                                ((size_t)y * (size_t)W + (size_t)x) * 3u;
            v[0] = (float)px[0];
            v[1] = (float)px[1];
            v[2] = (float)px[2];
        } else {
            stoke_recipe_color<ROTATE>(arena, sp, sd, sr, t, n, x, y, mean, v);
        }
        stoke_solarize(&sp.blur, v);
    } else {
        stoke_geometry_pixel<ROTATE>(arena, sp, sd, sr, t, x, y, v);
    }
    if (RECIPE) {
        const int hit = stoke_erase_box(&sp.erase, x, y);
        for (int c = 0; c < 3; c++) {
            const uint64_t idx = stoke_out_index(layout, n, c, y, x, H, W);
            if (hit) {  // never with U8 output (the config refuses erasing there)
                stoke_store_value(out, dtype, idx, stoke_erase_value(&sp.erase, hit, c, x, y));
            } else {
                stoke_store(out, dtype, idx, v[c], norm.mean[c], norm.std[c]);
            }
        }
        return;
    }
    for (int c = 0; c < 3; c++) {
        stoke_store(out, dtype, stoke_out_index(layout, n, c, y, x, H, W), v[c], norm.mean[c], norm.std[c]);
    }
}

// Output pixel (x, y)'s share of its sample's contrast mean: the grayscale, in 16.16 fixed
// point, of the image as it is when the drawn contrast step runs.
STOKE_HD uint64_t stoke_contrast_pixel(const uint8_t* __restrict__ arena, const StokeAugParams& sp,
                                       const StokeSampleDesc& sd, const StokeRotation& sr, const StokeTables& t,
                                       uint32_t n, int32_t x, int32_t y) {
    float v[3];
    stoke_recipe_input<true>(arena, sp, sd, sr, t, n, x, y, v);
    stoke_color_before_contrast(&sp.color, v);
    return stoke_gray_fixed(v);
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// grid (ceil(max(out_w, out_h) / blockDim.x), 2, batch): one thread per table entry.
extern "C" __global__ void stoke_augment_tables(const StokeAugParams* __restrict__ params,
                                                const StokeSampleDesc* __restrict__ descs,
                                                int32_t* __restrict__ counts, int32_t* __restrict__ offs,
                                                float* __restrict__ weights) {
    const uint32_t n = blockIdx.z;
    const StokeSampleDesc d = descs[n];
    stoke_table_entry(params + n, &d, blockIdx.y, (int32_t)(blockIdx.x * blockDim.x + threadIdx.x), counts, offs,
                      weights);
}

// Thread (0, 0)'s part of a block's prologue: sample n's params and descriptor into the
// block's shared copies, and its rotation (f64 sin/cos: once per block, not per pixel).
__device__ __forceinline__ void stoke_block_sample(const StokeAugParams* __restrict__ params,
                                                   const StokeSampleDesc* __restrict__ descs, uint32_t n, bool rotate,
                                                   StokeAugParams* sp, StokeSampleDesc* sd, StokeRotation* sr) {
    *sp = params[n];
    *sd = descs[n];
    if (rotate) stoke_rotation_init(sp, sr);
}

template <bool ROTATE, bool RECIPE>
__device__ __forceinline__ void stoke_augment_block(const uint8_t* __restrict__ arena,
                                                    const StokeAugParams* __restrict__ params,
                                                    const StokeSampleDesc* __restrict__ descs, const StokeTables& t,
                                                    void* __restrict__ out, uint32_t dtype, uint32_t layout,
                                                    const StokeNormalize& norm,
                                                    const unsigned long long* __restrict__ sums) {
    __shared__ StokeAugParams sp;
    __shared__ StokeSampleDesc sd;
    __shared__ StokeRotation sr;
    __shared__ float mean;
    const uint32_t n = blockIdx.z;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        stoke_block_sample(params, descs, n, ROTATE, &sp, &sd, &sr);
        mean = RECIPE && stoke_color_needs_mean(&sp.color)
                   ? stoke_contrast_mean(sums[n], (uint64_t)sp.out_w * (uint64_t)sp.out_h)
                   : 0.0f;
    }
    __syncthreads();
    const int32_t x = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    const int32_t y = (int32_t)(blockIdx.y * blockDim.y + threadIdx.y);
    if (x >= sp.out_w || y >= sp.out_h) return;
    stoke_augment_pixel<ROTATE, RECIPE>(arena, sp, sd, sr, t, n, x, y, out, dtype, layout, norm, mean);
}

// grid (ceil(out_w / 32), ceil(out_h / 8), batch), block (32, 8). Every angle of the batch is 0.
extern "C" __global__ void __launch_bounds__(256) stoke_augment(
    const uint8_t* __restrict__ arena, const StokeAugParams* __restrict__ params,
    const StokeSampleDesc* __restrict__ descs, const int32_t* __restrict__ counts, const int32_t* __restrict__ offs,
    const float* __restrict__ weights, void* __restrict__ out, uint32_t dtype, uint32_t layout, StokeNormalize norm) {
    const StokeTables t = {counts, offs, weights, nullptr, 0u, nullptr, 0u};
    stoke_augment_block<false, false>(arena, params, descs, t, out, dtype, layout, norm, nullptr);
}

// Same launch as stoke_augment, for batches with rotation.
extern "C" __global__ void __launch_bounds__(256) stoke_augment_rotate(
    const uint8_t* __restrict__ arena, const StokeAugParams* __restrict__ params,
    const StokeSampleDesc* __restrict__ descs, const int32_t* __restrict__ counts, const int32_t* __restrict__ offs,
    const float* __restrict__ weights, void* __restrict__ out, uint32_t dtype, uint32_t layout, StokeNormalize norm) {
    const StokeTables t = {counts, offs, weights, nullptr, 0u, nullptr, 0u};
    stoke_augment_block<true, false>(arena, params, descs, t, out, dtype, layout, norm, nullptr);
}

// Same launch, for batches with a color step or erasing on some sample (rotation handled too);
// `sums` holds each sample's contrast sum from stoke_recipe_stats (read only for samples whose
// drawn order has a contrast step).
extern "C" __global__ void __launch_bounds__(256) stoke_augment_recipe(
    const uint8_t* __restrict__ arena, const StokeAugParams* __restrict__ params,
    const StokeSampleDesc* __restrict__ descs, const int32_t* __restrict__ counts, const int32_t* __restrict__ offs,
    const float* __restrict__ weights, void* __restrict__ out, uint32_t dtype, uint32_t layout, StokeNormalize norm,
    const unsigned long long* __restrict__ sums, const uint8_t* __restrict__ auto_img, uint32_t auto_n,
    const uint8_t* __restrict__ blur_img, uint32_t blur_n) {
    const StokeTables t = {counts, offs, weights, auto_img, auto_n, blur_img, blur_n};
    stoke_augment_block<true, true>(arena, params, descs, t, out, dtype, layout, norm, sums);
}

// Same grid as stoke_augment: adds each pixel's stoke_contrast_pixel into sums[sample] (zeroed
// by the host first). Integer sums, so the order the atomics land in does not matter.
extern "C" __global__ void __launch_bounds__(256) stoke_recipe_stats(
    const uint8_t* __restrict__ arena, const StokeAugParams* __restrict__ params,
    const StokeSampleDesc* __restrict__ descs, const int32_t* __restrict__ counts, const int32_t* __restrict__ offs,
    const float* __restrict__ weights, unsigned long long* __restrict__ sums, const uint8_t* __restrict__ auto_img,
    uint32_t auto_n) {
    __shared__ StokeAugParams sp;
    __shared__ StokeSampleDesc sd;
    __shared__ StokeRotation sr;
    const uint32_t n = blockIdx.z;
    if (threadIdx.x == 0 && threadIdx.y == 0) stoke_block_sample(params, descs, n, true, &sp, &sd, &sr);
    __syncthreads();
    if (!stoke_color_needs_mean(&sp.color)) return;  // the whole block: sp is shared
    const StokeTables t = {counts, offs, weights, auto_img, auto_n, nullptr, 0u};
    const int32_t x = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    const int32_t y = (int32_t)(blockIdx.y * blockDim.y + threadIdx.y);
    unsigned long long v = 0;
    if (x < sp.out_w && y < sp.out_h) v = stoke_contrast_pixel(arena, sp, sd, sr, t, n, x, y);
    // One warp is one row segment of the block (blockDim.x == 32): reduce it, one atomic.
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31u) == 0u && v != 0) atomicAdd(sums + n, v);
}

// ---- AutoAugment-family ops (kernels/auto_math.cuh), for batches where some sample has them:
// stoke_auto_base writes each such sample's geometry as uint8 into buffer 0; then per op slot
// k = 0..STOKE_AUTO_MAX−1: stoke_auto_hist (histograms, integer atomics, for the ops that need
// them; the host zeroes `hist` first), stoke_auto_tables (one thread per sample and channel)
// and stoke_auto_step (buffer k's parity → the other). The recipe kernels then read the final
// buffer (stoke_recipe_input).

struct StokeAutoSample {
    StokeAutoParams aa;
    int32_t w, h;
};

__device__ __forceinline__ void stoke_auto_load(const StokeAugParams* __restrict__ params, uint32_t n,
                                                StokeAutoSample* s) {
    s->aa = params[n].aa;
    s->w = params[n].out_w;
    s->h = params[n].out_h;
}

extern "C" __global__ void __launch_bounds__(256) stoke_auto_base(
    const uint8_t* __restrict__ arena, const StokeAugParams* __restrict__ params,
    const StokeSampleDesc* __restrict__ descs, const int32_t* __restrict__ counts, const int32_t* __restrict__ offs,
    const float* __restrict__ weights, uint8_t* __restrict__ auto_img, uint32_t auto_n) {
    __shared__ StokeAugParams sp;
    __shared__ StokeSampleDesc sd;
    __shared__ StokeRotation sr;
    const uint32_t n = blockIdx.z;
    if (threadIdx.x == 0 && threadIdx.y == 0) stoke_block_sample(params, descs, n, true, &sp, &sd, &sr);
    __syncthreads();
    if (!stoke_auto_active(&sp.aa)) return;
    const StokeTables t = {counts, offs, weights, nullptr, 0u, nullptr, 0u};
    const int32_t x = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    const int32_t y = (int32_t)(blockIdx.y * blockDim.y + threadIdx.y);
    if (x >= sp.out_w || y >= sp.out_h) return;
    float v[3];
    stoke_geometry_pixel<true>(arena, sp, sd, sr, t, x, y, v);
    uint8_t* dst = auto_img + stoke_auto_offset(auto_n, n, 0, sp.out_w, sp.out_h) + ((size_t)y * sp.out_w + x) * 3u;
    dst[0] = stoke_to_u8(v[0]);
    dst[1] = stoke_to_u8(v[1]);
    dst[2] = stoke_to_u8(v[2]);
}

extern "C" __global__ void __launch_bounds__(256) stoke_auto_hist(const StokeAugParams* __restrict__ params,
                                                                  const uint8_t* __restrict__ auto_img, uint32_t auto_n,
                                                                  int32_t step, uint32_t* __restrict__ hist) {
    __shared__ StokeAutoSample s;
    const uint32_t n = blockIdx.z;
    if (threadIdx.x == 0 && threadIdx.y == 0) stoke_auto_load(params, n, &s);
    __syncthreads();
    if (!stoke_auto_runs(&s.aa, step) || !stoke_auto_needs_hist(s.aa.ops[step].op)) return;
    const int32_t x = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    const int32_t y = (int32_t)(blockIdx.y * blockDim.y + threadIdx.y);
    if (x >= s.w || y >= s.h) return;
    const int buf = stoke_auto_before(&s.aa, step) & 1;
    const uint8_t* px = auto_img + stoke_auto_offset(auto_n, n, buf, s.w, s.h) + ((size_t)y * s.w + x) * 3u;
    uint32_t bins[3];
    const int nb = stoke_auto_hist_bins(s.aa.ops[step].op, px, bins);
    for (int i = 0; i < nb; i++) atomicAdd(hist + (size_t)n * STOKE_AUTO_BINS + bins[i], 1u);
}

extern "C" __global__ void stoke_auto_tables(const StokeAugParams* __restrict__ params,
                                             const uint32_t* __restrict__ hist, int32_t step,
                                             uint8_t* __restrict__ luts) {
    const uint32_t n = blockIdx.x;
    const int c = (int)threadIdx.x;
    if (c >= 3) return;
    const StokeAugParams& p = params[n];
    if (!stoke_auto_runs(&p.aa, step) || !stoke_auto_is_table(p.aa.ops[step].op)) return;
    const uint64_t pixels = (uint64_t)p.out_w * (uint64_t)p.out_h;
    stoke_auto_table(&p.aa.ops[step], hist + (size_t)n * STOKE_AUTO_BINS, pixels, c, luts + (size_t)n * 768u + 256u * c);
}

extern "C" __global__ void __launch_bounds__(256) stoke_auto_step(const StokeAugParams* __restrict__ params,
                                                                  uint8_t* __restrict__ auto_img, uint32_t auto_n,
                                                                  int32_t step, const uint8_t* __restrict__ luts) {
    __shared__ StokeAutoSample s;
    __shared__ StokeAutoGeom g;
    const uint32_t n = blockIdx.z;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        stoke_auto_load(params, n, &s);
        if (stoke_auto_runs(&s.aa, step)) stoke_auto_prepare(&s.aa.ops[step], s.w, s.h, &g);
    }
    __syncthreads();
    if (!stoke_auto_runs(&s.aa, step)) return;
    const int32_t x = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    const int32_t y = (int32_t)(blockIdx.y * blockDim.y + threadIdx.y);
    if (x >= s.w || y >= s.h) return;
    const int src = stoke_auto_before(&s.aa, step) & 1;
    const uint8_t* in = auto_img + stoke_auto_offset(auto_n, n, src, s.w, s.h);
    uint8_t* out = auto_img + stoke_auto_offset(auto_n, n, src ^ 1, s.w, s.h);
    stoke_auto_pixel(&s.aa.ops[step], &g, s.aa.fill, luts + (size_t)n * 768u, in, s.w, s.h, x, y,
                     out + ((size_t)y * s.w + x) * 3u);
}

// ---- Blur (kernels/blur_math.cuh), for batches where some sample blurs, after
// stoke_recipe_stats (the color steps need the contrast mean) and before stoke_augment_recipe:
// stoke_blur_base writes each such sample's color result as uint8 into its image 0;
// stoke_blur_weights computes each GAUSS sample's 1-D kernel once; then stoke_blur_pass for
// pass = 0..STOKE_BLUR_PASSES−1 (samples with fewer passes skip the rest). The recipe kernel
// then reads the result image (stoke_augment_pixel).

extern "C" __global__ void __launch_bounds__(256) stoke_blur_base(
    const uint8_t* __restrict__ arena, const StokeAugParams* __restrict__ params,
    const StokeSampleDesc* __restrict__ descs, const int32_t* __restrict__ counts, const int32_t* __restrict__ offs,
    const float* __restrict__ weights, const unsigned long long* __restrict__ sums,
    const uint8_t* __restrict__ auto_img, uint32_t auto_n, uint8_t* __restrict__ blur_img, uint32_t blur_n) {
    __shared__ StokeAugParams sp;
    __shared__ StokeSampleDesc sd;
    __shared__ StokeRotation sr;
    __shared__ float mean;
    const uint32_t n = blockIdx.z;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        stoke_block_sample(params, descs, n, true, &sp, &sd, &sr);
        mean = stoke_color_needs_mean(&sp.color) ? stoke_contrast_mean(sums[n], (uint64_t)sp.out_w * (uint64_t)sp.out_h)
                                                  : 0.0f;
    }
    __syncthreads();
    if (!stoke_blur_active(&sp.blur)) return;
    const StokeTables t = {counts, offs, weights, auto_img, auto_n, nullptr, 0u};
    const int32_t x = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    const int32_t y = (int32_t)(blockIdx.y * blockDim.y + threadIdx.y);
    if (x >= sp.out_w || y >= sp.out_h) return;
    float v[3];
    stoke_recipe_color<true>(arena, sp, sd, sr, t, n, x, y, mean, v);
    uint8_t* dst = blur_img + stoke_auto_offset(blur_n, n, 0, sp.out_w, sp.out_h) + ((size_t)y * sp.out_w + x) * 3u;
    dst[0] = stoke_to_u8(v[0]);
    dst[1] = stoke_to_u8(v[1]);
    dst[2] = stoke_to_u8(v[2]);
}

// grid (batch), one thread: sample n's GAUSS kernel into w + n·STOKE_BLUR_KMAX.
extern "C" __global__ void stoke_blur_weights(const StokeAugParams* __restrict__ params, uint32_t samples,
                                              float* __restrict__ w) {
    const uint32_t n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= samples) return;
    const StokeBlurParams bp = params[n].blur;
    if (bp.kind == STOKE_BLUR_GAUSS) stoke_gauss_weights(bp.ksize, bp.sigma, w + (size_t)n * STOKE_BLUR_KMAX);
}

// Same grid as stoke_augment: pass `pass` of every blurring sample (stoke_blur_pass_pixel).
extern "C" __global__ void __launch_bounds__(256) stoke_blur_pass(const StokeAugParams* __restrict__ params,
                                                                  uint8_t* __restrict__ blur_img,
                                                                  float* __restrict__ blur_hor, uint32_t blur_n,
                                                                  const float* __restrict__ w, int32_t pass) {
    __shared__ StokeBlurParams bp;
    __shared__ StokePilBox box;
    __shared__ int32_t W, H;
    const uint32_t n = blockIdx.z;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        bp = params[n].blur;
        box = stoke_pil_box(bp.sigma);
        W = params[n].out_w;
        H = params[n].out_h;
    }
    __syncthreads();
    if (pass >= stoke_blur_passes(bp.kind)) return;
    const int32_t x = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    const int32_t y = (int32_t)(blockIdx.y * blockDim.y + threadIdx.y);
    if (x >= W || y >= H) return;
    const int s = stoke_blur_src(bp.kind, pass);
    const size_t px = (size_t)W * (size_t)H * 3u;
    stoke_blur_pass_pixel(&bp, pass, w + (size_t)n * STOKE_BLUR_KMAX, box,
                          blur_img + stoke_auto_offset(blur_n, n, s, W, H),
                          blur_img + stoke_auto_offset(blur_n, n, s ^ 1, W, H), blur_hor + (size_t)n * px, W, H, x, y);
}

#endif  // device only

