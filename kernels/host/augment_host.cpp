// Host build of kernels/augment_math.cuh: the whole-image augment the CPU backend calls, and
// small per-function exports for the tests (src/augment/host.rs). Compiled by build.rs with
// -ffp-contract=off, so every f32 operation is the one the device build performs.
//
// The whole-image path computes the resize separably (a horizontal pass into an f32 row band,
// then the vertical pass). That is the same sequence of f32 operations per output value as
// stoke_resized_pixel, which the GPU kernel evaluates per output pixel: a test checks it.
//
// The stages after the resize are in parts of this translation unit, included in data-flow
// order: augment_store.h (the output writes), the rotation pass here, augment_blur.h,
// augment_color.h (which calls the blur and the writes) and augment_auto.h; then the
// whole-image entry, which runs the resize and calls them.
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include "../augment_math.cuh"
#include "../recipe_math.cuh"
#include "../auto_math.cuh"
#include "../blur_math.cuh"

namespace {

// Crop rows the horizontal pass computes at once, one per vector lane (8 f32: one AVX2 register,
// two SSE2 registers in the baseline build).
constexpr int32_t kHRows = 8;

// Tap tables of one axis for `n` consecutive output indices starting at `first`.
struct Table {
    int32_t* start;  // [n] index of the first tap in off/w
    int32_t* count;  // [n]
    int64_t* off;    // [taps] byte offset of the tap along this axis
    float* w;        // [taps] normalised weight
    int32_t lo, hi;  // range of source indices touched (crop-relative), [lo, hi)
};

// Bytes of scratch for one axis table (n outputs), counting taps exactly.
size_t count_taps(int32_t in_size, int32_t out_size, int32_t first, int32_t n, uint32_t filter, uint32_t aa) {
    size_t taps = 0;
    for (int32_t i = 0; i < n; i++) {
        StokeAxis ax;
        stoke_axis_taps(in_size, out_size, first + i, filter, aa, &ax);  // the taps, not their weights
        taps += (size_t)ax.count;
    }
    return taps;
}

size_t align16(size_t b) { return (b + 15u) & ~(size_t)15u; }

#if defined(STOKE_HOST_AVX2)
// 8 x 8 transpose of floats: lane j of o[i] is lane i of v[j]. Pure data movement.
inline void transpose8(const __m256 (&v)[8], __m256 (&o)[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    o[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    o[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    o[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    o[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    o[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    o[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    o[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    o[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}
#endif

// acc[0, N·kHRows) = Σ_k wy[k]·band[oy[k] + e], each element from 0 adding its taps in order
// k = 0..taps−1, N vectors in flight.
template <int N>
inline void vertical_taps(const float* band, const int64_t* oy, const float* wy, int32_t taps, float* acc) {
    typedef float vrows __attribute__((vector_size(kHRows * sizeof(float))));
    vrows a[N];
#pragma GCC unroll 8
    for (int n = 0; n < N; n++) a[n] = (vrows){};
    for (int32_t k = 0; k < taps; k++) {
        const float* b = band + oy[k];
#pragma GCC unroll 8
        for (int n = 0; n < N; n++) {
            vrows v;
            memcpy(&v, b + n * kHRows, sizeof v);
            a[n] = a[n] + wy[k] * v;
        }
    }
#pragma GCC unroll 8
    for (int n = 0; n < N; n++) memcpy(acc + n * kHRows, &a[n], sizeof a[n]);
}

struct Plan {
    size_t taps_x, taps_y, band_rows, total_bytes;
    int rotate;
    int color;  // a ColorJitter/RandomGrayscale step or AutoAugment ops: the whole image is held before them
    int autoaug;  // AutoAugment-family ops: two uint8 images, a histogram and the tables
    int erase;  // RandomErasing boxes
    int blur;   // a blur pass: two uint8 images (and an f32 one for torchvision's kernel)
};

int has_color(const StokeAugParams* p) { return p->color.order != 0u || p->color.grayscale != 0u; }

Plan plan(const StokeAugParams* p) {
    Plan pl;
    pl.taps_x = count_taps(p->crop_w, p->resize_w, p->win_x, p->out_w, p->filter, p->antialias);
    pl.taps_y = count_taps(p->crop_h, p->resize_h, p->win_y, p->out_h, p->filter, p->antialias);
    // The band of crop rows the vertical pass reads: computed exactly from the y taps.
    int32_t lo = p->crop_h, hi = 0;
    for (int32_t i = 0; i < p->out_h; i++) {
        StokeAxis ay;
        stoke_axis_taps(p->crop_h, p->resize_h, p->win_y + i, p->filter, p->antialias, &ay);
        for (int32_t k = 0; k < ay.count; k++) {
            int32_t t = stoke_axis_tap(&ay, k);
            if (t < lo) lo = t;
            if (t + 1 > hi) hi = t + 1;
        }
    }
    pl.band_rows = hi > lo ? (size_t)(hi - lo) : 0;
    StokeRotation r;
    stoke_rotation_init(p, &r);
    pl.rotate = r.kind != STOKE_ROT_NONE;
    pl.autoaug = stoke_auto_active(&p->aa);
    pl.blur = stoke_blur_active(&p->blur);
    pl.color = has_color(p) || pl.autoaug || pl.blur || p->blur.solarize != 0u;
    pl.erase = p->erase.count != 0u;
    size_t ow = (size_t)p->out_w, oh = (size_t)p->out_h;
    size_t b = 0;
    b += align16((ow + oh) * 2 * sizeof(int32_t));
    b += align16((pl.taps_x + pl.taps_y) * sizeof(int64_t));
    b += align16((pl.taps_x + pl.taps_y) * sizeof(float));
    b += align16(pl.band_rows * ow * 3 * sizeof(float));  // horizontal pass
    b += align16(ow * 3 * sizeof(float));                 // one vertical accumulator row
    b += align16(ow * 3 * sizeof(float));                 // the row, planar and flipped
    b += align16((size_t)p->crop_w * 3 * kHRows * sizeof(float));  // kHRows crop rows as f32, transposed
    if (pl.rotate) b += align16(ow * oh * 3 * sizeof(float));  // pre-rotation image
    if (pl.color) b += align16(ow * oh * 3 * sizeof(float));   // pre-color image
    if (pl.erase) b += align16(ow * 3 * sizeof(float));        // one normalized row
    if (pl.autoaug) {
        b += 2 * align16(ow * oh * 3 + 1);                      // uint8 ping-pong images (+1: load_px reads 4 bytes)
        b += align16(STOKE_AUTO_BINS * sizeof(uint32_t));       // histogram
        b += align16(3 * 256);                                  // channel tables
    }
    if (pl.blur) {
        b += 2 * align16(ow * oh * 3);                          // uint8 ping-pong images
        if (p->blur.kind == STOKE_BLUR_GAUSS) b += align16(ow * oh * 3 * sizeof(float));  // horizontal pass
        b += align16((ow + 2 * (STOKE_BLUR_KMAX / 2)) * 3 * sizeof(float));  // one padded row
    }
    pl.total_bytes = b;
    return pl;
}

#if defined(STOKE_HOST_AVX2)
// stoke_axis_raw_aa of taps [0, 8·m) into w, eight at a time, where their filter arguments'
// numerators fit 32 bits (then int → float rounds the same integer the same way as from 64
// bits); returns the taps done. Each lane performs the scalar function's operations in its
// order: the f32 division, then the filter's branches as blends of the same compares.
inline int32_t raw_aa8(const StokeAxis* ax, float* w) {
    const int32_t m = ax->count / 8;
    const int64_t last = ax->num0 + (int64_t)ax->num_step * (8 * (int64_t)m);
    if (m == 0 || ax->num0 < -(int64_t)INT32_MAX || ax->num0 > INT32_MAX || last < -(int64_t)INT32_MAX || last > INT32_MAX) return 0;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i step = _mm256_set1_epi32(ax->num_step);
    const __m256 den = _mm256_set1_ps(ax->den), zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    const int cubic = ax->filter == STOKE_FILTER_BICUBIC;
    for (int32_t g = 0; g < m; g++) {
        const __m256i num = _mm256_add_epi32(_mm256_set1_epi32((int32_t)(ax->num0 + (int64_t)ax->num_step * (8 * g))),
                                             _mm256_mullo_epi32(lanes, step));
        __m256 x = _mm256_div_ps(_mm256_cvtepi32_ps(num), den);
        x = _mm256_blendv_ps(x, _mm256_sub_ps(zero, x), _mm256_cmp_ps(x, zero, _CMP_LT_OQ));  // x < 0 ? -x : x
        const __m256 below1 = _mm256_cmp_ps(x, one, _CMP_LT_OQ);
        __m256 v;
        if (cubic) {
            // stoke_filter_cubic(x, -0.5): a + 2 = 1.5 and a + 3 = 2.5 exactly.
            const __m256 near = _mm256_add_ps(
                _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(1.5f), x), _mm256_set1_ps(2.5f)), x), x), one);
            const __m256 far = _mm256_mul_ps(
                _mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(x, _mm256_set1_ps(5.0f)), x), _mm256_set1_ps(8.0f)), x),
                              _mm256_set1_ps(4.0f)),
                _mm256_set1_ps(-0.5f));
            const __m256 below2 = _mm256_cmp_ps(x, _mm256_set1_ps(2.0f), _CMP_LT_OQ);
            v = _mm256_blendv_ps(_mm256_blendv_ps(zero, far, below2), near, below1);
        } else {
            v = _mm256_blendv_ps(zero, _mm256_sub_ps(one, x), below1);  // stoke_filter_triangle
        }
        _mm256_storeu_ps(w + 8 * g, v);
    }
    return 8 * m;
}
#endif

void fill_table(Table* t, int32_t in_size, int32_t out_size, int32_t first, int32_t n, uint32_t filter, uint32_t aa,
                int32_t crop_off, int64_t step) {
    int32_t at = 0;
    int32_t lo = in_size, hi = 0;
    for (int32_t i = 0; i < n; i++) {
        StokeAxis ax;
        stoke_axis_taps(in_size, out_size, first + i, filter, aa, &ax);
        t->start[i] = at;
        t->count[i] = ax.count;
        float* w = t->w + at;
        if (ax.mode == STOKE_AXIS_AA) {
            // stoke_axis_init's normaliser and stoke_axis_weight's weights with each raw weight
            // computed once (its sum in tap order, then each divided by it): the same values.
            int32_t k = 0;
#if defined(STOKE_HOST_AVX2)
            k = raw_aa8(&ax, w);
#endif
            for (; k < ax.count; k++) w[k] = stoke_axis_raw_aa(&ax, k);
            float total = 0.0f;
            for (k = 0; k < ax.count; k++) total = total + w[k];
            ax.total = total;
            k = 0;
#if defined(STOKE_HOST_AVX2)
            if (total != 0.0f)  // stoke_axis_normalise's division, eight lanes at a time
                for (; k + 8 <= ax.count; k += 8) _mm256_storeu_ps(w + k, _mm256_div_ps(_mm256_loadu_ps(w + k), _mm256_set1_ps(total)));
#endif
            for (; k < ax.count; k++) w[k] = stoke_axis_normalise(&ax, w[k]);
        } else {
            for (int32_t k = 0; k < ax.count; k++) w[k] = stoke_axis_weight(&ax, k);
        }
        // stoke_axis_tap does not decrease with k: the first and last taps bound them all.
        const int32_t j0 = stoke_axis_tap(&ax, 0), j1 = stoke_axis_tap(&ax, ax.count - 1);
        if (j0 < lo) lo = j0;
        if (j1 + 1 > hi) hi = j1 + 1;
        for (int32_t k = 0; k < ax.count; k++) t->off[at + k] = (int64_t)(crop_off + stoke_axis_tap(&ax, k)) * step;
        at += ax.count;
    }
    t->lo = lo;
    t->hi = hi;
}

// Run forms (kernels/host/cast_host.cpp): exactly stoke_normalize / stoke_f32_to_f16_bits /
// stoke_f32_to_bf16_bits of every element, vectorized.
extern "C" void stoke_host_normalize_run(const float* src, float mean, float std, float* dst, size_t n);
extern "C" void stoke_host_f16_run(const float* src, uint16_t* dst, size_t n);
extern "C" void stoke_host_normalize_f16_run(const float* src, float mean, float std, uint16_t* dst, size_t n,
                                             float* tmp);
extern "C" void stoke_host_bf16_run(const float* src, uint16_t* dst, size_t n);
extern "C" void stoke_host_normalize_bf16_run(const float* src, float mean, float std, uint16_t* dst, size_t n,
                                              float* tmp);

#include "augment_store.h"

// Rotation pass over the pre-rotation image `pre`, a row of planar values at a time, into the
// pre-color image `post` when there is one, else to the output.
void rotate_image(const StokeAugParams* p, const float* pre, float* post, float* planar, void* out, uint32_t dtype,
                  uint32_t layout, uint64_t n, const Plan& pl, const float* mean, const float* std, float* acc,
                  float* nrm) {
    const int32_t ow = p->out_w, oh = p->out_h;
    StokeRotation rot;
    stoke_rotation_init(p, &rot);
    for (int32_t y = 0; y < oh; y++) {
        for (int32_t x = 0; x < ow; x++) {
            float v[3];
            if (rot.kind == STOKE_ROT_EXACT) {
                int32_t px, py;
                stoke_rot90_src(rot.quarter, x, y, ow, oh, &px, &py);
                for (int c = 0; c < 3; c++) v[c] = pre[((size_t)py * ow + px) * 3 + c];
            } else if (p->rot_interp == STOKE_ROT_NEAREST) {
                int32_t px, py;
                if (stoke_rot_nearest(&rot, x, y, ow, oh, &px, &py)) {
                    for (int c = 0; c < 3; c++) v[c] = pre[((size_t)py * ow + px) * 3 + c];
                } else {
                    for (int c = 0; c < 3; c++) v[c] = p->fill[c];
                }
            } else {
                int32_t x0, y0;
                float w[4];
                stoke_rot_bilinear(&rot, x, y, ow, oh, &x0, &y0, w);
                float mask = stoke_rot_mask(w);
                for (int c = 0; c < 3; c++) {
                    float a = 0.0f;
                    for (int t = 0; t < 4; t++) {
                        if (w[t] != 0.0f) {
                            int32_t px = x0 + (t & 1), py = y0 + (t >> 1);
                            a = a + w[t] * pre[((size_t)py * ow + px) * 3 + c];
                        }
                    }
                    v[c] = stoke_rot_blend(a, mask, p->fill[c]);
                }
            }
            for (int c = 0; c < 3; c++) planar[c * ow + x] = v[c];
        }
        if (post) {
            put_planar_row(post, ow, oh, y, planar);
        } else {
            emit_row(p, pl, out, dtype, layout, n, y, planar, mean, std, acc, nrm);
        }
    }
}

#include "augment_blur.h"
#include "augment_color.h"
#include "augment_auto.h"

}  // namespace

// The whole-image entry's name: kernels/host/augment_host_avx2.cpp compiles this file again
// for AVX2 under another name (and without the other exports, which need one copy only).
#ifdef STOKE_HOST_ISA_SUFFIX
#define STOKE_HOST_CAT2(a, b) a##b
#define STOKE_HOST_CAT(a, b) STOKE_HOST_CAT2(a, b)
#define STOKE_HOST_AUGMENT STOKE_HOST_CAT(stoke_host_augment, STOKE_HOST_ISA_SUFFIX)
#else
#define STOKE_HOST_AUGMENT stoke_host_augment
#endif

extern "C" {

// ---- whole image -------------------------------------------------------------------------

#ifndef STOKE_HOST_ISA_SUFFIX
// Bytes of scratch stoke_host_augment needs for these parameters (0 if they are invalid for
// the image size they describe).
size_t stoke_host_augment_scratch(const StokeAugParams* p) {
    int32_t sw, sh;
    stoke_oriented_size(p->orientation, p->src_w, p->src_h, &sw, &sh);  // stored size
    if (stoke_params_check(p, sw, sh) != 0) return 0;
    return plan(p).total_bytes;
}
#endif

// Augment one decoded image (or the region of it that holds the crop) into sample `n` of the output batch `out` (N×3×H×W or N×H×W×3 of
// `dtype`). `src` is interleaved RGB, `stored_w × stored_h`, `row_stride` bytes per row, as
// stored (before EXIF orientation). `scratch` must hold stoke_host_augment_scratch(p) bytes,
// 8-byte aligned. Returns 0, a stoke_params_check code (> 0), −1 if scratch is too small,
// −2 if the region does not hold the crop box.
//
// `src` may hold only a region of the stored image: stored pixels [region_x, region_x +
// region_w) × [region_y, region_y + region_h), `row_stride` bytes per region row (a full
// image is the region (0, 0, stored_w, stored_h)). The crop box must lie inside it (−2 if not).
int STOKE_HOST_AUGMENT(const uint8_t* src, int32_t stored_w, int32_t stored_h, int32_t region_x, int32_t region_y,
                       int32_t region_w, int32_t region_h, int64_t row_stride, const StokeAugParams* p,
                       const float* mean, const float* std, uint32_t dtype, uint32_t layout, void* out, uint64_t n,
                       void* scratch, size_t scratch_bytes) {
    int bad = stoke_params_check(p, stored_w, stored_h);
    if (bad) return bad;
    // Stored bounding box of the crop box: every pixel the resize reads is inside it.
    int32_t ax, ay, bx, by;
    stoke_orient_to_stored(p->orientation, p->crop_x, p->crop_y, p->src_w, p->src_h, &ax, &ay);
    stoke_orient_to_stored(p->orientation, p->crop_x + p->crop_w - 1, p->crop_y + p->crop_h - 1, p->src_w, p->src_h,
                           &bx, &by);
    if (region_x < 0 || region_y < 0 || region_w <= 0 || region_h <= 0 || (ax < bx ? ax : bx) < region_x ||
        (ay < by ? ay : by) < region_y || (ax > bx ? ax : bx) >= region_x + region_w ||
        (ay > by ? ay : by) >= region_y + region_h)
        return STOKE_PARAMS_REGION_MISSES_CROP;
    Plan pl = plan(p);
    if (scratch_bytes < pl.total_bytes) return STOKE_PARAMS_SCRATCH_TOO_SMALL;
    const int32_t ow = p->out_w, oh = p->out_h;
    int64_t base, step_x, step_y;
    stoke_orient_affine(p->orientation, p->src_w, p->src_h, row_stride, &base, &step_x, &step_y);
    // Offsets are relative to the region's first pixel; they are only ever formed into a
    // pointer after adding a tap's offset, when they land inside the region.
    base -= (int64_t)region_y * row_stride + (int64_t)region_x * 3;

    // Carve the scratch.
    uint8_t* s = (uint8_t*)scratch;
    Table tx, ty;
    int32_t* ints = (int32_t*)s;
    tx.start = ints;
    tx.count = ints + ow;
    ty.start = ints + 2 * ow;
    ty.count = ints + 2 * ow + oh;
    s += align16((size_t)(ow + oh) * 2 * sizeof(int32_t));
    tx.off = (int64_t*)s;
    ty.off = tx.off + pl.taps_x;
    s += align16((pl.taps_x + pl.taps_y) * sizeof(int64_t));
    tx.w = (float*)s;
    ty.w = tx.w + pl.taps_x;
    s += align16((pl.taps_x + pl.taps_y) * sizeof(float));
    float* band = (float*)s;
    s += align16(pl.band_rows * (size_t)ow * 3 * sizeof(float));
    float* acc = (float*)s;
    s += align16((size_t)ow * 3 * sizeof(float));
    float* planar = (float*)s;
    s += align16((size_t)ow * 3 * sizeof(float));
    float* lines = (float*)s;
    s += align16((size_t)p->crop_w * 3 * kHRows * sizeof(float));
    float* pre = pl.rotate ? (float*)s : nullptr;
    if (pl.rotate) s += align16((size_t)ow * oh * 3 * sizeof(float));
    float* post = pl.color ? (float*)s : nullptr;  // the image before the color steps
    if (pl.color) s += align16((size_t)ow * oh * 3 * sizeof(float));
    float* nrm = pl.erase ? (float*)s : nullptr;
    if (pl.erase) s += align16((size_t)ow * 3 * sizeof(float));
    uint8_t* auto_a = nullptr;
    uint8_t* auto_b = nullptr;
    uint32_t* auto_hist = nullptr;
    uint8_t* auto_lut = nullptr;
    if (pl.autoaug) {
        auto_a = s;
        s += align16((size_t)ow * oh * 3 + 1);
        auto_b = s;
        s += align16((size_t)ow * oh * 3 + 1);
        auto_hist = (uint32_t*)s;
        s += align16(STOKE_AUTO_BINS * sizeof(uint32_t));
        auto_lut = s;
        s += align16(3 * 256);
    }
    uint8_t* blur_img[2] = {nullptr, nullptr};
    float* blur_hor = nullptr;
    float* blur_line = nullptr;
    if (pl.blur) {
        blur_img[0] = s;
        s += align16((size_t)ow * oh * 3);
        blur_img[1] = s;
        s += align16((size_t)ow * oh * 3);
        if (p->blur.kind == STOKE_BLUR_GAUSS) {
            blur_hor = (float*)s;
            s += align16((size_t)ow * oh * 3 * sizeof(float));
        }
        blur_line = (float*)s;
    }

    // x taps as crop columns, then as offsets into a transposed block of crop rows (the crop
    // row's columns [tx.lo, tx.hi) converted to f32 once, instead of once per tap that reads
    // them).
    fill_table(&tx, p->crop_w, p->resize_w, p->win_x, ow, p->filter, p->antialias, 0, 1);
    for (size_t t = 0; t < pl.taps_x; t++) tx.off[t] = (tx.off[t] - tx.lo) * 3 * kHRows;
    // y taps as crop rows, then as element offsets of their rows in `band`.
    fill_table(&ty, p->crop_h, p->resize_h, p->win_y, oh, p->filter, p->antialias, 0, 1);
    for (size_t t = 0; t < pl.taps_y; t++) ty.off[t] = (ty.off[t] - ty.lo) * (int64_t)ow * 3;

    // Horizontal pass: band row r = crop row ty.lo + r; r_c = Σ_kx wx·src, in tap order.
    // kHRows crop rows at a time, one per vector lane: `lines` holds them transposed
    // (element e = 3·column + channel of row q at e·kHRows + q), so a tap's value for all the
    // rows is one load, and each lane performs exactly the scalar form's f32 multiply then add
    // per tap (no contraction, see build.rs). Lanes past the band's last row hold zeros (in
    // the AVX2 conversion, copies of the last row: no test per row) and are never stored.
    typedef float vrows __attribute__((vector_size(kHRows * sizeof(float))));
    const size_t row_len = (size_t)ow * 3;
    const size_t line_len = (size_t)(tx.hi - tx.lo) * 3;
    for (int32_t r0 = ty.lo; r0 < ty.hi; r0 += kHRows) {
        const int32_t rows = ty.hi - r0 < kHRows ? ty.hi - r0 : kHRows;
        size_t done = 0;  // elements of every row already in `lines`
#if defined(STOKE_HOST_AVX2)
        if (step_x == 3) {
            // Eight elements of the eight rows at a time: widened to floats, transposed in
            // registers (element e of rows 0..7 is one vector) and stored whole, instead of
            // each float stored on its own. The same values in the same places.
            static_assert(kHRows == 8, "the transpose below is 8 x 8");
            const uint8_t* pq[kHRows];
            for (int32_t q = 0; q < kHRows; q++)
                pq[q] = src + (base + (int64_t)(p->crop_y + r0 + (q < rows ? q : rows - 1)) * step_y +
                               (int64_t)(p->crop_x + tx.lo) * step_x);
            for (; done + 8 <= line_len; done += 8) {
                __m256 v[8];
                for (int q = 0; q < 8; q++)
                    v[q] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(pq[q] + done))));
                __m256 t[8];
                transpose8(v, t);
                float* d = lines + done * kHRows;
                for (int e = 0; e < 8; e++) _mm256_storeu_ps(d + e * kHRows, t[e]);
            }
        }
#endif
        for (int32_t q = 0; q < kHRows; q++) {
            float* lq = lines + q;
            if (q >= rows) {
                for (size_t e = done; e < line_len; e++) lq[e * kHRows] = 0.0f;
                continue;
            }
            const int64_t row = base + (int64_t)(p->crop_y + r0 + q) * step_y + (int64_t)(p->crop_x + tx.lo) * step_x;
            if (step_x == 3) {
                const uint8_t* px = src + row;
                for (size_t e = done; e < line_len; e++) lq[e * kHRows] = (float)px[e];
            } else {
                for (int32_t x = 0; x < tx.hi - tx.lo; x++) {
                    const uint8_t* px = src + (row + (int64_t)x * step_x);
                    lq[(3 * x) * kHRows] = (float)px[0];
                    lq[(3 * x + 1) * kHRows] = (float)px[1];
                    lq[(3 * x + 2) * kHRows] = (float)px[2];
                }
            }
        }
        float* dst = band + (size_t)(r0 - ty.lo) * row_len;
        // Output column j's three elements for the group's rows (row q in lane q).
        auto column = [&](int32_t j, vrows& a0, vrows& a1, vrows& a2) {
            const int64_t* off = tx.off + tx.start[j];
            const float* w = tx.w + tx.start[j];
            a0 = (vrows){};
            a1 = (vrows){};
            a2 = (vrows){};
            for (int32_t k = 0; k < tx.count[j]; k++) {
                vrows v0, v1, v2;
                const float* t = lines + off[k];
                memcpy(&v0, t, sizeof v0);
                memcpy(&v1, t + kHRows, sizeof v1);
                memcpy(&v2, t + 2 * kHRows, sizeof v2);
                a0 = a0 + w[k] * v0;
                a1 = a1 + w[k] * v1;
                a2 = a2 + w[k] * v2;
            }
        };
        int32_t j = 0;
#if defined(STOKE_HOST_AVX2)
        // Two columns at a time: their taps in common are one loop with six sums in flight
        // (three alone wait on the add's latency), the longer column's last taps after it.
        // Each sum still adds its own column's taps in order from 0: the same operations.
        auto column2 = [&](int32_t j0, __m256& a0, __m256& a1, __m256& a2, __m256& b0, __m256& b1, __m256& b2) {
            const int64_t* off0 = tx.off + tx.start[j0];
            const int64_t* off1 = tx.off + tx.start[j0 + 1];
            const float* w0 = tx.w + tx.start[j0];
            const float* w1 = tx.w + tx.start[j0 + 1];
            const int32_t n0 = tx.count[j0], n1 = tx.count[j0 + 1];
            const int32_t both = n0 < n1 ? n0 : n1;
            __m256 x0 = _mm256_setzero_ps(), x1 = x0, x2 = x0, y0 = x0, y1 = x0, y2 = x0;
            for (int32_t k = 0; k < both; k++) {
                const float* t0 = lines + off0[k];
                const float* t1 = lines + off1[k];
                const __m256 u = _mm256_set1_ps(w0[k]), v = _mm256_set1_ps(w1[k]);
                x0 = _mm256_add_ps(x0, _mm256_mul_ps(u, _mm256_loadu_ps(t0)));
                y0 = _mm256_add_ps(y0, _mm256_mul_ps(v, _mm256_loadu_ps(t1)));
                x1 = _mm256_add_ps(x1, _mm256_mul_ps(u, _mm256_loadu_ps(t0 + kHRows)));
                y1 = _mm256_add_ps(y1, _mm256_mul_ps(v, _mm256_loadu_ps(t1 + kHRows)));
                x2 = _mm256_add_ps(x2, _mm256_mul_ps(u, _mm256_loadu_ps(t0 + 2 * kHRows)));
                y2 = _mm256_add_ps(y2, _mm256_mul_ps(v, _mm256_loadu_ps(t1 + 2 * kHRows)));
            }
            // The longer column's last taps, [both, n), added to its three sums.
            auto rest = [&](const int64_t* off, const float* w, int32_t n, __m256& s0, __m256& s1, __m256& s2) {
                for (int32_t k = both; k < n; k++) {
                    const float* t = lines + off[k];
                    const __m256 u = _mm256_set1_ps(w[k]);
                    s0 = _mm256_add_ps(s0, _mm256_mul_ps(u, _mm256_loadu_ps(t)));
                    s1 = _mm256_add_ps(s1, _mm256_mul_ps(u, _mm256_loadu_ps(t + kHRows)));
                    s2 = _mm256_add_ps(s2, _mm256_mul_ps(u, _mm256_loadu_ps(t + 2 * kHRows)));
                }
            };
            rest(off0, w0, n0, x0, x1, x2);
            rest(off1, w1, n1, y0, y1, y2);
            a0 = x0; a1 = x1; a2 = x2; b0 = y0; b1 = y1; b2 = y2;
        };
        // Eight output columns at a time: their 24 element vectors (rows in lanes) are
        // transposed 8 x 8 three times into a vector of 8 consecutive elements per row, stored
        // whole, instead of one store per float. The same values in the same places.
        for (; j + 8 <= ow; j += 8) {
            __m256 tile[3][8];
            for (int32_t jj = 0; jj < 8; jj += 2) {
                __m256 a[6];
                column2(j + jj, a[0], a[1], a[2], a[3], a[4], a[5]);
                for (int c = 0; c < 6; c++) tile[(3 * jj + c) / 8][(3 * jj + c) % 8] = a[c];
            }
            for (int b = 0; b < 3; b++) {
                __m256 t[8];
                transpose8(tile[b], t);
                for (int32_t q = 0; q < rows; q++) _mm256_storeu_ps(dst + (size_t)q * row_len + 3 * (size_t)j + 8 * b, t[q]);
            }
        }
#endif
        for (; j < ow; j++) {
            vrows a0, a1, a2;
            column(j, a0, a1, a2);
            for (int32_t q = 0; q < rows; q++) {
                float* d = dst + (size_t)q * row_len + 3 * (size_t)j;
                d[0] = a0[q];
                d[1] = a1[q];
                d[2] = a2[q];
            }
        }
    }

    // Vertical pass: acc = Σ_ky wy·r, in tap order; then clamp, window/flip, and either the
    // output write or the pre-rotation image.
    // Eight vectors of a row's elements at a time (AVX2; then four), every tap added in registers
    // (each element still starts at 0 and adds wy·b tap by tap, the same operations in the same
    // order), instead of a pass over the whole accumulator row per tap.
    for (int32_t i = 0; i < oh; i++) {
        const float* wy = ty.w + ty.start[i];
        const int64_t* oy = ty.off + ty.start[i];
        const int32_t taps = ty.count[i];
        size_t e0 = 0;
#if defined(STOKE_HOST_AVX2)  // 16 registers of 8 floats; the baseline build's 16 SSE registers hold half as many
        for (; e0 + 8 * kHRows <= row_len; e0 += 8 * kHRows) vertical_taps<8>(band + e0, oy, wy, taps, acc + e0);
#endif
        for (; e0 + 4 * kHRows <= row_len; e0 += 4 * kHRows) vertical_taps<4>(band + e0, oy, wy, taps, acc + e0);
        for (size_t e = e0; e < row_len; e++) acc[e] = 0.0f;
        for (int32_t k = 0; k < taps; k++) {
            const float* b = band + oy[k];
            for (size_t e = e0; e < row_len; e++) acc[e] = acc[e] + wy[k] * b[e];
        }
        // Resized-window row i lands on pre-rotation row y (vertical flip) and column j on x.
        const int32_t y = p->flip_v ? oh - 1 - i : i;
        int32_t j = 0;
#if defined(STOKE_HOST_AVX2)
        // Eight pixels at a time: each channel's lanes blended out of the three interleaved
        // vectors and put in pixel order (reversed for a horizontal flip) by one permute;
        // max(0, v) then min(255, ·) is stoke_clamp255 lane for lane (-0 and NaN pass through
        // as they do there: the second operand is returned on ties and NaN).
        {
            const __m256i order[3] = {_mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5), _mm256_setr_epi32(1, 4, 7, 2, 5, 0, 3, 6),
                                      _mm256_setr_epi32(2, 5, 0, 3, 6, 1, 4, 7)};
            const __m256i reverse = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
            const int flip = p->flip_h != 0;
            __m256i pick[3];  // the order, reversed for a flip: lane l takes order[7 − l]
            for (int c = 0; c < 3; c++) pick[c] = flip ? _mm256_permutevar8x32_epi32(order[c], reverse) : order[c];
            const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
            for (; j + 8 <= ow; j += 8) {
                const __m256 A = _mm256_loadu_ps(acc + 3 * (size_t)j), B = _mm256_loadu_ps(acc + 3 * (size_t)j + 8),
                             C = _mm256_loadu_ps(acc + 3 * (size_t)j + 16);
                const __m256 ch[3] = {_mm256_blend_ps(_mm256_blend_ps(A, B, 0x92), C, 0x24),
                                      _mm256_blend_ps(_mm256_blend_ps(A, B, 0x24), C, 0x49),
                                      _mm256_blend_ps(_mm256_blend_ps(A, B, 0x49), C, 0x92)};
                const int32_t x = flip ? ow - 8 - j : j;
                for (int c = 0; c < 3; c++) {
                    const __m256 v = _mm256_permutevar8x32_ps(ch[c], pick[c]);
                    _mm256_storeu_ps(planar + (size_t)c * ow + x, _mm256_min_ps(top, _mm256_max_ps(zero, v)));
                }
            }
        }
#endif
        for (; j < ow; j++) {
            const int32_t x = p->flip_h ? ow - 1 - j : j;
            planar[x] = stoke_clamp255(acc[3 * j]);
            planar[ow + x] = stoke_clamp255(acc[3 * j + 1]);
            planar[2 * ow + x] = stoke_clamp255(acc[3 * j + 2]);
        }
        if (pre) {
            for (int32_t x = 0; x < ow; x++)
                for (int32_t c = 0; c < 3; c++) pre[((size_t)y * ow + x) * 3 + c] = planar[c * ow + x];
        } else if (post) {
            put_planar_row(post, ow, oh, y, planar);
        } else {
            emit_row(p, pl, out, dtype, layout, n, y, planar, mean, std, acc, nrm);  // acc is free until row i + 1
        }
    }
    if (pre) rotate_image(p, pre, post, planar, out, dtype, layout, n, pl, mean, std, acc, nrm);
    if (pl.autoaug) auto_image(p, post, auto_a, auto_b, auto_hist, auto_lut);
    if (post) color_image(p, post, planar, out, dtype, layout, n, pl, mean, std, acc, nrm, blur_img, blur_hor, blur_line);
    return 0;
}

#ifndef STOKE_HOST_ISA_SUFFIX
// ---- per-function exports for tests -----------------------------------------------------

void stoke_host_orient_to_stored(uint32_t o, int32_t x, int32_t y, int32_t W, int32_t H, int32_t* sx, int32_t* sy) {
    stoke_orient_to_stored(o, x, y, W, H, sx, sy);
}

// Taps of output index i: writes up to `cap` source indices and weights, returns the count.
int32_t stoke_host_axis(int32_t in_size, int32_t out_size, int32_t i, uint32_t filter, uint32_t aa, int32_t* taps,
                        float* weights, int32_t cap) {
    StokeAxis ax;
    stoke_axis_init(in_size, out_size, i, filter, aa, &ax);
    for (int32_t k = 0; k < ax.count && k < cap; k++) {
        taps[k] = stoke_axis_tap(&ax, k);
        weights[k] = stoke_axis_weight(&ax, k);
    }
    return ax.count;
}

void stoke_host_window_flip(const StokeAugParams* p, int32_t x, int32_t y, int32_t* rx, int32_t* ry) {
    stoke_window_flip(p, x, y, rx, ry);
}

void stoke_host_resized_pixel(const uint8_t* src, int64_t row_stride, const StokeAugParams* p, int32_t rx, int32_t ry,
                              float* out3) {
    stoke_resized_pixel(src, row_stride, p, rx, ry, out3);
}

void stoke_host_sincos_deg(float deg, double* s, double* c) { stoke_sincos_deg(deg, s, c); }

// Rotation of output pixel (x, y): returns the kind (STOKE_ROT_*); for EXACT writes the
// integer source to (fx, fy), for AFFINE the continuous source.
uint32_t stoke_host_rotate_src(const StokeAugParams* p, int32_t x, int32_t y, float* fx, float* fy) {
    StokeRotation r;
    stoke_rotation_init(p, &r);
    if (r.kind == STOKE_ROT_EXACT) {
        int32_t px, py;
        stoke_rot90_src(r.quarter, x, y, p->out_w, p->out_h, &px, &py);
        *fx = (float)px;
        *fy = (float)py;
    } else if (r.kind == STOKE_ROT_AFFINE) {
        stoke_rot_src(&r, x, y, p->out_w, p->out_h, fx, fy);
    } else {
        *fx = (float)x;
        *fy = (float)y;
    }
    return r.kind;
}

int stoke_host_params_check(const StokeAugParams* p, int32_t stored_w, int32_t stored_h) {
    return stoke_params_check(p, stored_w, stored_h);
}

uint64_t stoke_host_out_index(uint32_t layout, uint64_t n, int32_t c, int32_t y, int32_t x, int32_t H, int32_t W) {
    return stoke_out_index(layout, n, c, y, x, H, W);
}

#endif  // STOKE_HOST_ISA_SUFFIX

}  // extern "C"
