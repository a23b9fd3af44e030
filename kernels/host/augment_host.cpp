// Host build of kernels/augment_math.cuh: the whole-image augment the CPU backend calls, and
// small per-function exports for the tests (src/augment/host.rs). Compiled by build.rs with
// -ffp-contract=off, so every f32 operation is the one the device build performs.
//
// The whole-image path computes the resize separably (a horizontal pass into an f32 row band,
// then the vertical pass). That is the same sequence of f32 operations per output value as
// stoke_resized_pixel, which the GPU kernel evaluates per output pixel: a test checks it.
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

void fill_table(Table* t, int32_t in_size, int32_t out_size, int32_t first, int32_t n, uint32_t filter, uint32_t aa,
                int32_t crop_off, int64_t step) {
    int32_t at = 0;
    t->lo = in_size;
    t->hi = 0;
    for (int32_t i = 0; i < n; i++) {
        StokeAxis ax;
        stoke_axis_taps(in_size, out_size, first + i, filter, aa, &ax);
        t->start[i] = at;
        t->count[i] = ax.count;
        float* w = t->w + at;
        if (ax.mode == STOKE_AXIS_AA) {
            // stoke_axis_init's normaliser and stoke_axis_weight's weights with each raw weight
            // computed once (its sum in tap order, then each divided by it): the same values.
            float total = 0.0f;
            for (int32_t k = 0; k < ax.count; k++) {
                w[k] = stoke_axis_raw_aa(&ax, k);
                total = total + w[k];
            }
            ax.total = total;
            for (int32_t k = 0; k < ax.count; k++) w[k] = stoke_axis_normalise(&ax, w[k]);
        } else {
            for (int32_t k = 0; k < ax.count; k++) w[k] = stoke_axis_weight(&ax, k);
        }
        for (int32_t k = 0; k < ax.count; k++) {
            int32_t j = stoke_axis_tap(&ax, k);
            if (j < t->lo) t->lo = j;
            if (j + 1 > t->hi) t->hi = j + 1;
            t->off[at] = (int64_t)(crop_off + j) * step;
            at++;
        }
    }
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

#if defined(STOKE_HOST_AVX2)
// Eight-lane pieces of the uint8 paths below. Functions, not lambdas: GCC does not carry the
// file's AVX2 target into a lambda's body, and warns of a vector return's ABI there.

// Eight bytes as eight floats (exact).
inline __m256 widen8(const uint8_t* q) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)q))); }

// Each lane clamped to [0, 255] as x86's max and min compute it: that differs from
// stoke_clamp255 only for -0, which truncates to 0 the same, and NaN, which these paths never
// hold.
inline __m256 clamp255x8(const __m256& v) { return _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f)); }

// Eight lanes holding 0..255, truncated toward zero as (uint8_t)(int32_t): bytes 0..7.
inline __m128i bytes8(const __m256& v) {
    const __m256i w = _mm256_cvttps_epi32(v);
    const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    return _mm_packus_epi16(h, h);
}

// stoke_pil_blend of eight lanes (deg and img 0..255 in 32-bit lanes) as bytes 0..7: the
// formula's operations, then the clamp written unconditionally (for alpha in [0, 1] the blend
// lies between its ends, so it changes nothing there; alpha = 0 or 1 give deg or img exactly).
inline __m128i pil_blend8(const __m256i& deg, const __m256i& img, const __m256& alpha) {
    const __m256 t = _mm256_add_ps(_mm256_cvtepi32_ps(deg), _mm256_mul_ps(alpha, _mm256_cvtepi32_ps(_mm256_sub_epi32(img, deg))));
    return bytes8(clamp255x8(t));
}
#endif

// stoke_to_u8 over a run: clamped to [0, 255] (as x86's max and min compute it, which differs
// from stoke_clamp255 only for -0, giving 0 either way, and NaN, which a batch never holds),
// then rounded half to even by adding and removing 2^23 (exact IEEE round-to-nearest-even for
// 0 ≤ v < 2^22) and truncated: the kernels' bytes (tests/gpu_kernel_host.rs), eight or four at
// a time where stoke_round_even's floor and branches went value by value. (Written as a plain
// loop, GCC turned the clamp into branches and did not vectorize it; the x86 builds spell the
// vector form out, the plain loop finishes the run.)
void u8_run(const float* src, uint8_t* dst, size_t n) {
    size_t i = 0;
#if defined(STOKE_HOST_AVX2)
    const __m256 big = _mm256_set1_ps(8388608.0f);
    for (; i + 8 <= n; i += 8) {
        const __m256 v = clamp255x8(_mm256_loadu_ps(src + i));
        _mm_storel_epi64((__m128i*)(dst + i), bytes8(_mm256_sub_ps(_mm256_add_ps(v, big), big)));
    }
#elif defined(__SSE2__)
    // The baseline build: four at a time in SSE2 (the values are 0..255, so the signed pack is
    // exact).
    const __m128 zero = _mm_setzero_ps(), top = _mm_set1_ps(255.0f), big = _mm_set1_ps(8388608.0f);
    for (; i + 4 <= n; i += 4) {
        __m128 v = _mm_min_ps(_mm_max_ps(_mm_loadu_ps(src + i), zero), top);
        v = _mm_sub_ps(_mm_add_ps(v, big), big);
        const __m128i w = _mm_packs_epi32(_mm_cvttps_epi32(v), _mm_setzero_si128());
        const int32_t b4 = _mm_cvtsi128_si32(_mm_packus_epi16(w, w));
        memcpy(dst + i, &b4, sizeof b4);
    }
#endif
    for (; i < n; i++) {
        float v = src[i];
        v = v > 0.0f ? v : 0.0f;
        v = v < 255.0f ? v : 255.0f;
        dst[i] = (uint8_t)(int32_t)((v + 8388608.0f) - 8388608.0f);
    }
}

#if defined(STOKE_HOST_AVX2)
// Eight pixels' channel bytes (bytes 0..7 of r, g and b) stored interleaved as 24 bytes.
inline void interleave3x8(const __m128i& r, const __m128i& g, const __m128i& b, uint8_t* out) {
    // Output bytes 0..15 and 16..23 from RG (R in bytes 0..7, G in 8..15) and B.
    const __m128i put_rg_lo = _mm_setr_epi8(0, 8, -1, 1, 9, -1, 2, 10, -1, 3, 11, -1, 4, 12, -1, 5);
    const __m128i put_b_lo = _mm_setr_epi8(-1, -1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1);
    const __m128i put_rg_hi = _mm_setr_epi8(13, -1, 6, 14, -1, 7, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i put_b_hi = _mm_setr_epi8(-1, 5, -1, -1, 6, -1, -1, 7, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i rg = _mm_unpacklo_epi64(r, g);
    _mm_storeu_si128((__m128i*)out, _mm_or_si128(_mm_shuffle_epi8(rg, put_rg_lo), _mm_shuffle_epi8(b, put_b_lo)));
    _mm_storel_epi64((__m128i*)(out + 16), _mm_or_si128(_mm_shuffle_epi8(rg, put_rg_hi), _mm_shuffle_epi8(b, put_b_hi)));
}
#endif

// Three channel rows of `n` bytes, `stride` apart (`rows[c·stride + x]`), stored interleaved.
void interleave_planes(const uint8_t* rows, size_t stride, size_t n, uint8_t* out) {
    size_t x = 0;
#if defined(STOKE_HOST_AVX2)
    for (; x + 8 <= n; x += 8)
        interleave3x8(_mm_loadl_epi64((const __m128i*)(rows + x)), _mm_loadl_epi64((const __m128i*)(rows + stride + x)),
                      _mm_loadl_epi64((const __m128i*)(rows + 2 * stride + x)), out + 3 * x);
#endif
    for (; x < n; x++)
        for (int c = 0; c < 3; c++) out[3 * x + c] = rows[(size_t)c * stride + x];
}

// Three channel rows of `ow` bytes (`rows[c·ow + x]`) stored interleaved (NHWC).
void interleave_row(const uint8_t* rows, int32_t ow, uint8_t* out) { interleave_planes(rows, (size_t)ow, (size_t)ow, out); }

// Store output row y (f32, f16 or bf16) from three already normalized channel rows
// (`rows[c·ow + x]`): a run per channel (NCHW) or one interleaved run of 3·ow values (NHWC),
// cast by the run forms. `tmp` holds 3·ow floats.
void store_normalized(void* out, uint32_t dtype, uint32_t layout, uint64_t n, int32_t y, int32_t oh, int32_t ow,
                      const float* rows, float* tmp) {
    const bool nchw = layout == STOKE_LAYOUT_NCHW;
    for (int32_t c = 0; c < (nchw ? 3 : 1); c++) {
        const uint64_t at = stoke_out_index(layout, n, c, y, 0, oh, ow);
        const size_t len = nchw ? (size_t)ow : (size_t)ow * 3;
        const float* src = rows + (size_t)c * ow;
        if (!nchw) {  // interleave the three channel rows
            float* dst = dtype == STOKE_DTYPE_F32 ? (float*)out + at : tmp;
            for (int32_t x = 0; x < ow; x++)
                for (int32_t cc = 0; cc < 3; cc++) dst[3 * x + cc] = rows[(size_t)cc * ow + x];
            if (dtype == STOKE_DTYPE_F32) return;
            src = tmp;
        }
        if (dtype == STOKE_DTYPE_F32)
            memcpy((float*)out + at, src, len * sizeof(float));
        else if (dtype == STOKE_DTYPE_F16)
            stoke_host_f16_run(src, (uint16_t*)out + at, len);
        else
            stoke_host_bf16_run(src, (uint16_t*)out + at, len);
    }
}

// Normalize and store output row y from planar channel rows (`planar[c·ow + x]`, overwritten
// with the normalized values): the same per-element stoke_store math (normalize, then cast),
// in runs. `tmp` holds 3·ow floats.
void store_row(void* out, uint32_t dtype, uint32_t layout, uint64_t n, int32_t y, int32_t oh, int32_t ow,
               float* planar, const float* mean, const float* std, float* tmp) {
    if (dtype == STOKE_DTYPE_U8) {  // unnormalized: stoke_to_u8 of each value
        if (layout == STOKE_LAYOUT_NCHW) {
            for (int32_t c = 0; c < 3; c++)
                u8_run(planar + (size_t)c * ow, (uint8_t*)out + stoke_out_index(layout, n, c, y, 0, oh, ow), (size_t)ow);
        } else {
            uint8_t* bytes = (uint8_t*)tmp;  // 3·ow bytes of the 3·ow floats
            u8_run(planar, bytes, 3 * (size_t)ow);
            interleave_row(bytes, ow, (uint8_t*)out + stoke_out_index(layout, n, 0, y, 0, oh, ow));
        }
        return;
    }
    const bool f32 = dtype == STOKE_DTYPE_F32;
    if (layout == STOKE_LAYOUT_NCHW) {
        for (int32_t c = 0; c < 3; c++) {
            const uint64_t at = stoke_out_index(layout, n, c, y, 0, oh, ow);
            const float* row = planar + (size_t)c * ow;
            if (f32)
                stoke_host_normalize_run(row, mean[c], std[c], (float*)out + at, (size_t)ow);
            else if (dtype == STOKE_DTYPE_F16)
                stoke_host_normalize_f16_run(row, mean[c], std[c], (uint16_t*)out + at, (size_t)ow, tmp);
            else
                stoke_host_normalize_bf16_run(row, mean[c], std[c], (uint16_t*)out + at, (size_t)ow, tmp);
        }
        return;
    }
    // NHWC: normalize the channel rows in place, then one interleaved run of 3·ow values.
    for (int32_t c = 0; c < 3; c++) stoke_host_normalize_run(planar + (size_t)c * ow, mean[c], std[c], planar + (size_t)c * ow, (size_t)ow);
    store_normalized(out, dtype, layout, n, y, oh, ow, planar, tmp);
}

// stoke_erase_normal(e, box, c, y, x) for x in [x0, x1) into dst[x]. The AVX2 build computes
// four at a time: the same SplitMix64 hash on 64-bit lanes (GCC's vector multiply), then
// stoke_lnf, the square root and both cosine series in f32 lanes, each lane the scalar
// definition's IEEE operations in its order (the quadrant picks between the two series and the
// sign after both are computed), so the same bits (tests/gpu_kernel_host.rs holds the CPU
// backend to the kernels' per-element stoke_erase_normal).
void erase_normals(const StokeEraseParams* e, int box, int c, int32_t y, int32_t x0, int32_t x1, float* dst) {
    int32_t x = x0;
#if defined(STOKE_HOST_AVX2)
    typedef uint64_t U64x4 __attribute__((vector_size(32)));
    typedef uint32_t U32x4 __attribute__((vector_size(16)));
    typedef int32_t I32x4 __attribute__((vector_size(16)));
    typedef float F32x4 __attribute__((vector_size(16)));
    const uint64_t key = ((uint64_t)e->key_hi << 32) | (uint64_t)e->key_lo;
    const uint64_t row = (((uint64_t)box * 3u + (uint64_t)c) << 20 | (uint64_t)(uint32_t)y) << 20;
    for (; x + 4 <= x1; x += 4) {
        const U64x4 idx = {row | (uint64_t)(uint32_t)x, row | (uint64_t)(uint32_t)(x + 1), row | (uint64_t)(uint32_t)(x + 2),
                           row | (uint64_t)(uint32_t)(x + 3)};
        U64x4 z = key ^ (idx * 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z = z ^ (z >> 31);
        // (h >> 40) + 1 ≤ 2^24 and the 24-bit angle convert to f32 exactly, signed or not.
        const I32x4 hu = (I32x4)(__builtin_convertvector(z >> 40, U32x4) + 1u);
        const I32x4 ha = (I32x4)(__builtin_convertvector(z >> 14, U32x4) & 0xffffffu);
        const U32x4 quadrant = __builtin_convertvector(z >> 38, U32x4) & 3u;
        const F32x4 u = __builtin_convertvector(hu, F32x4) * (1.0f / 16777216.0f);
        const F32x4 phi = __builtin_convertvector(ha, F32x4) * (1.5707963f / 16777216.0f);
        // stoke_lnf(u)
        const I32x4 bits = (I32x4)u;
        I32x4 ex = ((bits >> 23) & 0xff) - 127;
        F32x4 m = (F32x4)((bits & 0x007fffff) | 0x3f800000);
        const I32x4 up = m > 1.41421356f;  // all ones where m halves
        m = (F32x4)((up & (I32x4)(m * 0.5f)) | (~up & (I32x4)m));
        ex = ex - up;
        const F32x4 sm = (m - 1.0f) / (m + 1.0f);
        const F32x4 s2 = sm * sm;
        const F32x4 tl = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9 + s2 * (1.0f / 11)))));
        const F32x4 ln = __builtin_convertvector(ex, F32x4) * 0.693147181f + 2.0f * sm * tl;
        const F32x4 r = (F32x4)_mm_sqrt_ps((__m128)(-2.0f * ln));
        const F32x4 p2 = phi * phi;
        const F32x4 ts = phi * (1.0f - p2 * (1.0f / 6) * (1.0f - p2 * (1.0f / 20) * (1.0f - p2 * (1.0f / 42) * (1.0f - p2 * (1.0f / 72) * (1.0f - p2 * (1.0f / 110) * (1.0f - p2 * (1.0f / 156)))))));
        const F32x4 tc = 1.0f - p2 * (1.0f / 2) * (1.0f - p2 * (1.0f / 12) * (1.0f - p2 * (1.0f / 30) * (1.0f - p2 * (1.0f / 56) * (1.0f - p2 * (1.0f / 90) * (1.0f - p2 * (1.0f / 132) * (1.0f - p2 * (1.0f / 182)))))));
        const I32x4 odd = (I32x4)((quadrant & 1u) != 0u);
        const I32x4 neg = (I32x4)((quadrant == 1u) | (quadrant == 2u));
        const I32x4 t = (odd & (I32x4)ts) | (~odd & (I32x4)tc);
        const F32x4 tv = (F32x4)((neg & (I32x4)(-(F32x4)t)) | (~neg & t));
        const F32x4 v = r * tv;
        memcpy(dst + x, &v, sizeof v);
    }
#endif
    for (; x < x1; x++) dst[x] = stoke_erase_normal(e, box, c, y, x);
}

// store_row for a row that RandomErasing may touch: the normalized values (stoke_normalize, as
// the run form computes them), then each box holding the row, in order (the last box holding a
// pixel gives its value, as stoke_erase_box picks), writes its stoke_erase_value over its
// columns, then the row is stored with the per-element cast of stoke_store_value (the run forms
// for f16/bf16 are that cast). `nrm` holds 3·ow floats, `tmp` 3·ow.
void store_row_erasing(const StokeAugParams* p, void* out, uint32_t dtype, uint32_t layout, uint64_t n, int32_t y,
                       int32_t oh, int32_t ow, float* planar, const float* mean, const float* std, float* tmp,
                       float* nrm) {
    const StokeEraseParams* e = &p->erase;
    int touched = 0;
    const int count = e->count < (uint32_t)STOKE_ERASE_MAX ? (int)e->count : STOKE_ERASE_MAX;
    for (int k = 0; k < count; k++) touched |= y >= e->box[k][1] && y < e->box[k][1] + e->box[k][3];
    if (!touched) {
        store_row(out, dtype, layout, n, y, oh, ow, planar, mean, std, tmp);
        return;
    }
    for (int32_t c = 0; c < 3; c++) stoke_host_normalize_run(planar + (size_t)c * ow, mean[c], std[c], nrm + (size_t)c * ow, (size_t)ow);
    for (int k = 0; k < count; k++) {
        const int32_t* b = e->box[k];
        if (y < b[1] || y >= b[1] + b[3]) continue;
        const int32_t x0 = b[0] > 0 ? b[0] : 0;
        const int32_t x1 = b[0] + b[2] < ow ? b[0] + b[2] : ow;
        for (int32_t c = 0; c < 3; c++) {
            float* row = nrm + (size_t)c * ow;
            if (e->mode == STOKE_ERASE_PIXEL) {
                erase_normals(e, k, c, y, x0, x1, row);
            } else {
                for (int32_t x = x0; x < x1; x++) row[x] = stoke_erase_value(e, k + 1, c, x, y);
            }
        }
    }
    if (dtype == STOKE_DTYPE_U8) {
        for (int32_t c = 0; c < 3; c++)
            for (int32_t x = 0; x < ow; x++)
                stoke_store_value(out, dtype, stoke_out_index(layout, n, c, y, x, oh, ow), nrm[(size_t)c * ow + x]);
        return;
    }
    store_normalized(out, dtype, layout, n, y, oh, ow, nrm, tmp);
}

// The final write of output row y from its planar 0..255 channel rows: erasing when drawn.
void emit_row(const StokeAugParams* p, const Plan& pl, void* out, uint32_t dtype, uint32_t layout, uint64_t n,
              int32_t y, float* planar, const float* mean, const float* std, float* tmp, float* nrm) {
    if (pl.erase)
        store_row_erasing(p, out, dtype, layout, n, y, p->out_h, p->out_w, planar, mean, std, tmp, nrm);
    else
        store_row(out, dtype, layout, n, y, p->out_h, p->out_w, planar, mean, std, tmp);
}

// The held image `post` (before the color steps, AutoAugment ops, blur and solarize) is planar:
// three planes of out_w × out_h floats (R, then G, then B), so every per-element step is a flat
// loop over a plane's row and a per-pixel one (saturation, hue, the luma) reads its channels
// from three rows, with no interleaving to undo. Row y of plane c starts at post[(c·oh + y)·ow].

// Store the planar channel rows `planar[c·ow + x]` as row y of the held image.
void put_planar_row(float* post, int32_t ow, int32_t oh, int32_t y, const float* planar) {
    for (int32_t c = 0; c < 3; c++)
        memcpy(post + ((size_t)c * oh + y) * ow, planar + (size_t)c * ow, (size_t)ow * sizeof(float));
}

// Row y of the held image into the planar channel rows `planar[c·ow + x]`.
void get_planar_row(const float* post, int32_t ow, int32_t oh, int32_t y, float* planar) {
    for (int32_t c = 0; c < 3; c++)
        memcpy(planar + (size_t)c * ow, post + ((size_t)c * oh + y) * ow, (size_t)ow * sizeof(float));
}

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


// One Pillow box pass over one W × H plane (one channel), `src` → `dst`, along `axis` (0:
// rows, 1: columns): stoke_pil_pass_pixel's integers for each element, the box sum of 2r + 1
// taps then (sum·ww + (far taps)·fw + 2^23) >> 24 in u32 arithmetic (integers: the same bytes
// whatever the order or the layout). The column pass is the same loop for every row, its row
// pointers clamped to the plane; the row pass is one loop over the columns whose taps (the far
// ones too) all lie inside the row, and the edge columns element by element with indices
// clamped to the line, as stoke_pil_pass_pixel, adding tap by tap into `acc` (W u32) in loops
// the compiler vectorizes. The AVX2 build instead sums eight elements' taps in a register, over
// every element of the row (see below), for boxes up to 64 taps on planes at least 8 wide.

// One element of a pass along a line of n elements `step` apart (stoke_pil_pass_pixel for
// one channel).
inline uint8_t pil_element(const uint8_t* line, size_t step, int32_t n, int32_t i, StokePilBox b) {
    uint32_t s = 0u;
    for (int32_t d = -b.r; d <= b.r; d++) {
        const int32_t j = i + d < 0 ? 0 : (i + d >= n ? n - 1 : i + d);
        s += line[(size_t)j * step];
    }
    const int32_t lo = i - b.r - 1 < 0 ? 0 : i - b.r - 1, hi = i + b.r + 1 >= n ? n - 1 : i + b.r + 1;
    return (uint8_t)((s * b.ww + ((uint32_t)line[(size_t)lo * step] + line[(size_t)hi * step]) * b.fw + (1u << 23)) >> 24);
}

#if defined(STOKE_HOST_AVX2)
// Eight bytes as eight u32 lanes.
inline __m256i pil_widen8(const uint8_t* q) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)q)); }

// Eight lanes of one pass's box sums as its bytes: (sum·ww + (lo + hi)·fw + 2^23) >> 24, each
// below 256, stored as o[0..8).
inline void pil_store8(const __m256i& sum, const uint8_t* lo, const uint8_t* hi, const __m256i& ww, const __m256i& fw,
                       uint8_t* o) {
    const __m256i far = _mm256_add_epi32(pil_widen8(lo), pil_widen8(hi));
    const __m256i v = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(sum, ww), _mm256_mullo_epi32(far, fw)), _mm256_set1_epi32(1 << 23)), 24);
    const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i*)o, _mm_packus_epi16(h, h));
}
#endif

void pil_pass_plane(const uint8_t* src, uint8_t* dst, int32_t W, int32_t H, int axis, StokePilBox b, uint32_t* acc) {
    const size_t row = (size_t)W;
    const int32_t taps = 2 * b.r + 1;
    auto clampi = [](int32_t i, int32_t n) { return (size_t)(i < 0 ? 0 : (i >= n ? n - 1 : i)); };
#if defined(STOKE_HOST_AVX2)
    const __m256i ww = _mm256_set1_epi32((int32_t)b.ww), fw = _mm256_set1_epi32((int32_t)b.fw);
    constexpr int32_t kTaps = 64;  // boxes up to this wide keep their tap offsets (DINO's: 1 to 7)
    ptrdiff_t off[kTaps];
#endif
    for (int32_t y = 0; y < H; y++) {
        uint8_t* o = dst + (size_t)y * row;
        const ptrdiff_t sr = (ptrdiff_t)((size_t)y * row);  // row y's offset
#if defined(STOKE_HOST_AVX2)
        // Every element of the row in vectors. The row pass reads the row from a copy padded
        // with r + 1 copies of its first and last byte on each side (pad[i] is the row's
        // element i clamped to the line, as pil_element reads it), so the edge columns take the
        // same loop; the last partial group of eight is the row's last eight elements again
        // (they read src and write dst, so computing some twice writes the same bytes).
        // `acc` holds 12·W bytes (the caller's line), the padded row W + 2r + 2 ≤ W + 64.
        if (taps <= kTaps && W >= 8) {
            const uint8_t* base = src;
            ptrdiff_t lo8, hi8;
            if (axis == 1) {
                for (int32_t k = 0; k < taps; k++) off[k] = (ptrdiff_t)(clampi(y + k - b.r, H) * row);
                lo8 = (ptrdiff_t)(clampi(y - b.r - 1, H) * row);
                hi8 = (ptrdiff_t)(clampi(y + b.r + 1, H) * row);
            } else {
                uint8_t* pad = (uint8_t*)acc;
                const int32_t edge = b.r + 1;
                memset(pad, src[sr], (size_t)edge);
                memcpy(pad + edge, src + sr, row);
                memset(pad + edge + row, src[sr + W - 1], (size_t)edge);
                base = pad + edge;
                for (int32_t k = 0; k < taps; k++) off[k] = k - b.r;
                lo8 = -edge;
                hi8 = edge;
            }
            size_t e = 0;
            for (; e + 32 <= row; e += 32) {
                __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
                for (int32_t k = 0; k < taps; k++) {
                    const uint8_t* t = base + (off[k] + (ptrdiff_t)e);
                    a0 = _mm256_add_epi32(a0, pil_widen8(t));
                    a1 = _mm256_add_epi32(a1, pil_widen8(t + 8));
                    a2 = _mm256_add_epi32(a2, pil_widen8(t + 16));
                    a3 = _mm256_add_epi32(a3, pil_widen8(t + 24));
                }
                const uint8_t* l = base + (lo8 + (ptrdiff_t)e);
                const uint8_t* h = base + (hi8 + (ptrdiff_t)e);
                pil_store8(a0, l, h, ww, fw, o + e);
                pil_store8(a1, l + 8, h + 8, ww, fw, o + e + 8);
                pil_store8(a2, l + 16, h + 16, ww, fw, o + e + 16);
                pil_store8(a3, l + 24, h + 24, ww, fw, o + e + 24);
            }
            for (;; e += 8) {
                if (e + 8 > row) {
                    if (e == row) break;
                    e = row - 8;
                }
                __m256i a = _mm256_setzero_si256();
                for (int32_t k = 0; k < taps; k++) a = _mm256_add_epi32(a, pil_widen8(base + (off[k] + (ptrdiff_t)e)));
                pil_store8(a, base + (lo8 + (ptrdiff_t)e), base + (hi8 + (ptrdiff_t)e), ww, fw, o + e);
                if (e + 8 == row) break;
            }
            continue;
        }
#endif
        // Elements [e0, e1) of this row (columns, or every element for the column pass) are
        // one loop: element e's taps are src[tap(k) + e] for k < 2r + 1, its far taps
        // src[lo + e] and src[hi + e] (offsets from src, so every address formed is inside it).
        size_t e0 = 0, e1 = row;
        ptrdiff_t lo, hi;
        auto tap = [&](int32_t k) {
            const int32_t d = k - b.r;
            return axis == 1 ? (ptrdiff_t)(clampi(y + d, H) * row) : sr + d;
        };
        if (axis == 1) {
            lo = (ptrdiff_t)(clampi(y - b.r - 1, H) * row);
            hi = (ptrdiff_t)(clampi(y + b.r + 1, H) * row);
        } else {
            const int32_t x0 = b.r + 1 < W ? b.r + 1 : W, x1 = W - b.r - 1 > x0 ? W - b.r - 1 : x0;
            for (int32_t x = 0; x < x0; x++) o[x] = pil_element(src + sr, 1, W, x, b);
            for (int32_t x = x1; x < W; x++) o[x] = pil_element(src + sr, 1, W, x, b);
            e0 = (size_t)x0;
            e1 = (size_t)x1;
            lo = sr - (b.r + 1);
            hi = sr + (b.r + 1);
        }
        size_t e = e0;
        if (e < e1) {
            const size_t n = e1 - e;
            for (size_t q = 0; q < n; q++) acc[q] = 0u;
            for (int32_t k = 0; k < taps; k++) {
                const uint8_t* t = src + (tap(k) + (ptrdiff_t)e);
                for (size_t q = 0; q < n; q++) acc[q] += t[q];
            }
            const uint8_t* l = src + (lo + (ptrdiff_t)e);
            const uint8_t* h = src + (hi + (ptrdiff_t)e);
            for (size_t q = 0; q < n; q++) o[e + q] = (uint8_t)((acc[q] * b.ww + ((uint32_t)l[q] + h[q]) * b.fw + (1u << 23)) >> 24);
        }
    }
}

typedef float BlurLanes __attribute__((vector_size(8 * sizeof(float))));

// out[e] = Σ_i w[i]·src[e + stride·i] for e < n, each element from 0 adding its taps in order
// i = 0..k−1 (stoke_gauss_h's sum), eight elements at a time in a register.
void blur_taps(const float* src, size_t stride, const float* w, uint32_t k, size_t n, float* out) {
    size_t e = 0;
    for (; e + 8 <= n; e += 8) {
        BlurLanes a = {};
        for (uint32_t i = 0; i < k; i++) {
            BlurLanes v;
            memcpy(&v, src + e + stride * i, sizeof v);
            a = a + w[i] * v;
        }
        memcpy(out + e, &a, sizeof a);
    }
    for (; e < n; e++) {
        float a = 0.0f;
        for (uint32_t i = 0; i < k; i++) a = a + w[i] * src[e + stride * i];
        out[e] = a;
    }
}

// out[e] = Σ_i w[i]·rows[i][e] for e < n, in order i = 0..k−1 (stoke_gauss_v's sum).
void blur_rows(const float* const* rows, const float* w, uint32_t k, size_t n, float* out) {
    size_t e = 0;
    for (; e + 8 <= n; e += 8) {
        BlurLanes a = {};
        for (uint32_t i = 0; i < k; i++) {
            BlurLanes v;
            memcpy(&v, rows[i] + e, sizeof v);
            a = a + w[i] * v;
        }
        memcpy(out + e, &a, sizeof a);
    }
    for (; e < n; e++) {
        float a = 0.0f;
        for (uint32_t i = 0; i < k; i++) a = a + w[i] * rows[i][e];
        out[e] = a;
    }
}

// torchvision's blur over one W × H plane: pass 0 (stoke_gauss_h) into `hor`, then pass 1
// (stoke_gauss_v) into `dst`, as loops over a row's elements: each element starts at 0 and adds
// w[i]·value tap by tap in the per-pixel functions' order (no contraction), so the same f32
// bits (a channel's sums read that channel only, so a plane gives each element what the
// interleaved image does). The horizontal pass reads the row as floats with its reflect padding
// written out (stoke_reflect's pixels, what stoke_gauss_h reads), so every column is the same
// loop. `line` holds W + 2·(k/2) floats.
void gauss_plane(const uint8_t* src, float* hor, uint8_t* dst, int32_t W, int32_t H, const float* w, uint32_t k,
                 float* line) {
    const size_t row = (size_t)W;
    const int32_t h = (int32_t)(k / 2u);
    for (int32_t y = 0; y < H; y++) {
        const uint8_t* sr = src + (size_t)y * row;
        for (int32_t x = -h; x < 0; x++) line[x + h] = (float)sr[stoke_reflect(x, W)];
        for (size_t e = 0; e < row; e++) line[h + e] = (float)sr[e];
        for (int32_t x = W; x < W + h; x++) line[x + h] = (float)sr[stoke_reflect(x, W)];
        // Tap i of pixel x is padded pixel x + i.
        blur_taps(line, 1, w, k, row, hor + (size_t)y * row);
    }
    const float* rows[STOKE_BLUR_KMAX];
    for (int32_t y = 0; y < H; y++) {
        for (uint32_t i = 0; i < k; i++) rows[i] = hor + (size_t)stoke_reflect(y + (int32_t)i - h, H) * row;
        blur_rows(rows, w, k, row, line);
        u8_run(line, dst + (size_t)y * row, row);  // stoke_to_u8 of each value
    }
}

// The blur (kernels/blur_math.cuh) over the planar uint8 image img[0] (the color result as
// stoke_to_u8 rounds it, as the GPU's stoke_blur_base): the passes of stoke_blur_pass over
// whole planes. Returns the image holding the result. `line` holds 3·out_w floats (or u32).
const uint8_t* blur_image(const StokeAugParams* p, uint8_t* const img[2], float* hor, float* line) {
    const int32_t W = p->out_w, H = p->out_h;
    const size_t plane = (size_t)W * H;
    const StokeBlurParams* bp = &p->blur;
    if (bp->kind == STOKE_BLUR_GAUSS) {
        float w[STOKE_BLUR_KMAX];
        stoke_gauss_weights(bp->ksize, bp->sigma, w);
        for (int c = 0; c < 3; c++) gauss_plane(img[0] + c * plane, hor + c * plane, img[1] + c * plane, W, H, w, bp->ksize, line);
    } else {
        const StokePilBox box = stoke_pil_box(bp->sigma);
        for (int pass = 0; pass < stoke_blur_passes(bp->kind); pass++) {
            const int s = stoke_blur_src(bp->kind, pass);
            for (int c = 0; c < 3; c++)
                pil_pass_plane(img[s] + c * plane, img[s ^ 1] + c * plane, W, H, pass < STOKE_PIL_PASSES ? 0 : 1, box,
                               (uint32_t*)line);
        }
    }
    return img[stoke_blur_result(bp->kind)];
}

// RandomSolarize (stoke_solarize) over n pixels held as three channel rows.
void solarize_row(const StokeBlurParams* bp, float* __restrict__ r, float* __restrict__ g, float* __restrict__ b,
                  size_t n) {
    for (size_t e = 0; e < n; e++) {
        float v[3] = {r[e], g[e], b[e]};
        stoke_solarize(bp, v);
        r[e] = v[0];
        g[e] = v[1];
        b[e] = v[2];
    }
}

// torchvision's adjust_hue over n pixels held as three channel rows: stoke_adjust_hue (the
// definition the GPU runs per pixel) with its branches written as selects of values computed
// unconditionally, so the compiler vectorizes the loop (build.rs: -fno-trapping-math lets it
// if-convert them; it changes no value). Each value takes the definition's IEEE operations in
// the same order (-ffp-contract=off), so the bits are the definition's: tests/gpu_kernel_host.rs
// holds the CPU backend to the kernel's per-pixel host build. `(int)fi % 6` is
// `fi == 6 ? 0 : fi`: h lies in [0, 1] there, so fi is an integer in 0..=6. The AVX2 build
// runs eight pixels at a time through hue8 (the same operations, written as intrinsics), the
// rest of the row through this loop.
#if defined(STOKE_HOST_AVX2)
// x86's max(a, b) is a > b ? a : b and min(a, b) is a < b ? a : b, NaN and signed zeros
// included: each form below is its C select exactly, not merely for ordinary values.
// stoke_clamp255 (v < 0 ? 0 : (v > 255 ? 255 : v)) of eight lanes: max(0, v) is the first
// select, min(255, ·) the second (a lane below 0 is +0 after the first, and stays).
inline __m256 clamp_hi_lo8(const __m256& v, const __m256& hi) { return _mm256_min_ps(hi, _mm256_max_ps(_mm256_setzero_ps(), v)); }

// hue_row for the eight pixels at j: the same operations in the same order, its selects as
// blends of the same conditions (ordered compares: C's <, >=, == on floats), the max and min
// chains and the clamps in the exact forms above. GCC's if-conversion of the plain loop spent
// about 200 instructions on eight pixels, most of them masks for the nested selects.
inline void hue8(float* rr, float* gg, float* bb, size_t j, const __m256& hue) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), k255 = _mm256_set1_ps(255.0f);
    const __m256 R = _mm256_div_ps(_mm256_loadu_ps(rr + j), k255), G = _mm256_div_ps(_mm256_loadu_ps(gg + j), k255),
                 B = _mm256_div_ps(_mm256_loadu_ps(bb + j), k255);
    // R > G ? (R > B ? R : B) : (G > B ? G : B), and the same with <.
    const __m256 maxc = _mm256_max_ps(_mm256_max_ps(R, G), B), minc = _mm256_min_ps(_mm256_min_ps(R, G), B);
    const __m256 eqc = _mm256_cmp_ps(maxc, minc, _CMP_EQ_OQ);
    const __m256 cr = _mm256_sub_ps(maxc, minc);
    const __m256 s = _mm256_div_ps(cr, _mm256_blendv_ps(maxc, one, eqc));
    const __m256 div = _mm256_blendv_ps(cr, one, eqc);
    const __m256 rc = _mm256_div_ps(_mm256_sub_ps(maxc, R), div), gc = _mm256_div_ps(_mm256_sub_ps(maxc, G), div),
                 bc = _mm256_div_ps(_mm256_sub_ps(maxc, B), div);
    const __m256 hr = _mm256_sub_ps(bc, gc), hg = _mm256_sub_ps(_mm256_add_ps(rc, _mm256_set1_ps(2.0f)), bc),
                 hb = _mm256_sub_ps(_mm256_add_ps(gc, _mm256_set1_ps(4.0f)), rc);
    __m256 h = _mm256_blendv_ps(_mm256_blendv_ps(hb, hg, _mm256_cmp_ps(maxc, G, _CMP_EQ_OQ)), hr, _mm256_cmp_ps(maxc, R, _CMP_EQ_OQ));
    h = _mm256_add_ps(_mm256_mul_ps(h, _mm256_set1_ps((float)(1.0 / 6.0))), one);
    h = _mm256_blendv_ps(h, _mm256_sub_ps(h, one), _mm256_cmp_ps(h, one, _CMP_GE_OQ));
    h = _mm256_add_ps(h, hue);
    const __m256 hm = _mm256_sub_ps(h, one), hp = _mm256_add_ps(h, one);
    h = _mm256_blendv_ps(_mm256_blendv_ps(h, hp, _mm256_cmp_ps(h, zero, _CMP_LT_OQ)), hm, _mm256_cmp_ps(h, one, _CMP_GE_OQ));
    const __m256 h6 = _mm256_mul_ps(h, _mm256_set1_ps(6.0f));
    const __m256 fi = _mm256_floor_ps(h6);
    const __m256 f = _mm256_sub_ps(h6, fi);
    const __m256 i = _mm256_blendv_ps(fi, zero, _mm256_cmp_ps(fi, _mm256_set1_ps(6.0f), _CMP_EQ_OQ));
    const __m256 sxf = _mm256_mul_ps(s, f);
    const __m256 one_minus_s = _mm256_sub_ps(one, s);
    const __m256 Q = clamp_hi_lo8(_mm256_mul_ps(_mm256_sub_ps(one, sxf), maxc), one);
    const __m256 T = clamp_hi_lo8(_mm256_mul_ps(_mm256_add_ps(sxf, one_minus_s), maxc), one);
    const __m256 P = clamp_hi_lo8(_mm256_mul_ps(one_minus_s, maxc), one);
    const __m256 V = maxc;
    const __m256 i0 = _mm256_cmp_ps(i, zero, _CMP_EQ_OQ), i1 = _mm256_cmp_ps(i, one, _CMP_EQ_OQ),
                 i2 = _mm256_cmp_ps(i, _mm256_set1_ps(2.0f), _CMP_EQ_OQ), i3 = _mm256_cmp_ps(i, _mm256_set1_ps(3.0f), _CMP_EQ_OQ),
                 i4 = _mm256_cmp_ps(i, _mm256_set1_ps(4.0f), _CMP_EQ_OQ), i5 = _mm256_cmp_ps(i, _mm256_set1_ps(5.0f), _CMP_EQ_OQ);
    __m256 o0 = _mm256_blendv_ps(P, V, i0);
    o0 = _mm256_blendv_ps(o0, Q, i1);
    o0 = _mm256_blendv_ps(o0, T, i4);
    o0 = _mm256_blendv_ps(o0, V, i5);
    __m256 o1 = _mm256_blendv_ps(P, T, i0);
    o1 = _mm256_blendv_ps(o1, V, i1);
    o1 = _mm256_blendv_ps(o1, V, i2);
    o1 = _mm256_blendv_ps(o1, Q, i3);
    __m256 o2 = _mm256_blendv_ps(V, T, i2);
    o2 = _mm256_blendv_ps(o2, P, i0);
    o2 = _mm256_blendv_ps(o2, P, i1);
    o2 = _mm256_blendv_ps(o2, Q, i5);
    _mm256_storeu_ps(rr + j, _mm256_mul_ps(o0, k255));
    _mm256_storeu_ps(gg + j, _mm256_mul_ps(o1, k255));
    _mm256_storeu_ps(bb + j, _mm256_mul_ps(o2, k255));
}
#endif

void hue_row(float* __restrict__ rr, float* __restrict__ gg, float* __restrict__ bb, size_t n, float hue) {
    size_t j = 0;
#if defined(STOKE_HOST_AVX2)
    const __m256 hue8v = _mm256_set1_ps(hue);
    for (; j + 8 <= n; j += 8) hue8(rr, gg, bb, j, hue8v);
#endif
    for (; j < n; j++) {
        const float R = rr[j] / 255.0f, G = gg[j] / 255.0f, B = bb[j] / 255.0f;
        const float maxc = R > G ? (R > B ? R : B) : (G > B ? G : B);
        const float minc = R < G ? (R < B ? R : B) : (G < B ? G : B);
        const bool eqc = maxc == minc;
        const float cr = maxc - minc;
        const float s = cr / (eqc ? 1.0f : maxc);
        const float div = eqc ? 1.0f : cr;
        const float rc = (maxc - R) / div, gc = (maxc - G) / div, bc = (maxc - B) / div;
        const float hr = bc - gc, hg = (rc + 2.0f) - bc, hb = (gc + 4.0f) - rc;
        float h = maxc == R ? hr : (maxc == G ? hg : hb);
        h = h * (float)(1.0 / 6.0) + 1.0f;
        h = h >= 1.0f ? h - 1.0f : h;
        h = h + hue;
        const float hm = h - 1.0f, hp = h + 1.0f;
        h = h >= 1.0f ? hm : (h < 0.0f ? hp : h);
        const float h6 = h * 6.0f;
        const float fi = floorf(h6);
        const float f = h6 - fi;
        const float i = fi == 6.0f ? 0.0f : fi;
        const float sxf = s * f;
        const float one_minus_s = 1.0f - s;
        const float vq = (1.0f - sxf) * maxc;
        const float vt = (sxf + one_minus_s) * maxc;
        const float vp = one_minus_s * maxc;
        const float Q = vq < 0.0f ? 0.0f : (vq > 1.0f ? 1.0f : vq);
        const float T = vt < 0.0f ? 0.0f : (vt > 1.0f ? 1.0f : vt);
        const float P = vp < 0.0f ? 0.0f : (vp > 1.0f ? 1.0f : vp);
        const float V = maxc;
        // stoke_adjust_hue's switch, (V,T,P) (Q,V,P) (P,V,T) (P,Q,V) (T,P,V) (V,P,Q) for
        // i = 0..5, as one select after another (a chain the compiler if-converts).
        const bool i0 = i == 0.0f, i1 = i == 1.0f, i2 = i == 2.0f, i3 = i == 3.0f, i4 = i == 4.0f, i5 = i == 5.0f;
        float o0 = i0 ? V : P;
        o0 = i1 ? Q : o0;
        o0 = i4 ? T : o0;
        o0 = i5 ? V : o0;
        float o1 = i0 ? T : P;
        o1 = i1 ? V : o1;
        o1 = i2 ? V : o1;
        o1 = i3 ? Q : o1;
        float o2 = i2 ? T : V;
        o2 = i0 ? P : o2;
        o2 = i1 ? P : o2;
        o2 = i5 ? Q : o2;
        rr[j] = o0 * 255.0f;
        gg[j] = o1 * 255.0f;
        bb[j] = o2 * 255.0f;
    }
}

// ColorJitter ops [from, to) of the drawn order over n pixels held as three channel rows
// (`m`: the contrast mean), each op a loop over the row the compiler vectorizes, with the
// per-element functions the kernel's per-pixel chain calls (stoke_clamp255, stoke_blend,
// stoke_gray, stoke_adjust_hue's operations), so the same bits.
#if defined(STOKE_HOST_AVX2)
// stoke_blend(a, b, f) of eight lanes, g = (float)(1 − (double)f): a·f + b·g, then the exact
// clamp.
inline __m256 blend8(const __m256& a, const __m256& b, const __m256& f, const __m256& g) {
    return clamp_hi_lo8(_mm256_add_ps(_mm256_mul_ps(a, f), _mm256_mul_ps(b, g)), _mm256_set1_ps(255.0f));
}

// stoke_gray of eight pixels: (r·0.2989 + g·0.587) + b·0.114.
inline __m256 gray8(const float* r, const float* g, const float* b, size_t e) {
    return _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(r + e), _mm256_set1_ps(0.2989f)),
                                       _mm256_mul_ps(_mm256_loadu_ps(g + e), _mm256_set1_ps(0.587f))),
                         _mm256_mul_ps(_mm256_loadu_ps(b + e), _mm256_set1_ps(0.114f)));
}
#endif

// Brightness, contrast and saturation over a row, the AVX2 build eight elements at a time
// (GCC's if-conversion of stoke_clamp255's nested select costs about four times the
// instructions of its exact max/min form), the rest element by element.
void scale_clamp_row(float* __restrict__ x, size_t n, float f) {
    size_t e = 0;
#if defined(STOKE_HOST_AVX2)
    const __m256 fv = _mm256_set1_ps(f), hi = _mm256_set1_ps(255.0f);
    for (; e + 8 <= n; e += 8) _mm256_storeu_ps(x + e, clamp_hi_lo8(_mm256_mul_ps(_mm256_loadu_ps(x + e), fv), hi));
#endif
    for (; e < n; e++) x[e] = stoke_clamp255(x[e] * f);
}

void blend_const_row(float* __restrict__ x, size_t n, float m, float f) {
    size_t e = 0;
#if defined(STOKE_HOST_AVX2)
    const __m256 mv = _mm256_set1_ps(m), fv = _mm256_set1_ps(f), gv = _mm256_set1_ps((float)(1.0 - (double)f));
    for (; e + 8 <= n; e += 8) _mm256_storeu_ps(x + e, blend8(_mm256_loadu_ps(x + e), mv, fv, gv));
#endif
    for (; e < n; e++) x[e] = stoke_blend(x[e], m, f);
}

void saturation_row(float* __restrict__ r, float* __restrict__ g, float* __restrict__ b, size_t n, float f) {
    size_t e = 0;
#if defined(STOKE_HOST_AVX2)
    const __m256 fv = _mm256_set1_ps(f), gv = _mm256_set1_ps((float)(1.0 - (double)f));
    for (; e + 8 <= n; e += 8) {
        const __m256 y = gray8(r, g, b, e);
        _mm256_storeu_ps(r + e, blend8(_mm256_loadu_ps(r + e), y, fv, gv));
        _mm256_storeu_ps(g + e, blend8(_mm256_loadu_ps(g + e), y, fv, gv));
        _mm256_storeu_ps(b + e, blend8(_mm256_loadu_ps(b + e), y, fv, gv));
    }
#endif
    for (; e < n; e++) {
        const float v[3] = {r[e], g[e], b[e]};
        const float y = stoke_gray(v);
        r[e] = stoke_blend(v[0], y, f);
        g[e] = stoke_blend(v[1], y, f);
        b[e] = stoke_blend(v[2], y, f);
    }
}

// RandomGrayscale over a row: each channel the pixel's stoke_gray.
void grayscale_row(float* __restrict__ r, float* __restrict__ g, float* __restrict__ b, size_t n) {
    size_t e = 0;
#if defined(STOKE_HOST_AVX2)
    for (; e + 8 <= n; e += 8) {
        const __m256 y = gray8(r, g, b, e);
        _mm256_storeu_ps(r + e, y);
        _mm256_storeu_ps(g + e, y);
        _mm256_storeu_ps(b + e, y);
    }
#endif
    for (; e < n; e++) {
        const float v[3] = {r[e], g[e], b[e]};
        const float yv = stoke_gray(v);
        r[e] = yv;
        g[e] = yv;
        b[e] = yv;
    }
}

void color_steps_row(const StokeColorParams* cp, int from, int to, float m, float* __restrict__ r,
                     float* __restrict__ g, float* __restrict__ b, size_t n) {
    for (int i = from; i < to; i++) {
        const uint32_t op = stoke_color_op(cp->order, i);
        if (op == STOKE_COLOR_BRIGHTNESS) {
            scale_clamp_row(r, n, cp->brightness);
            scale_clamp_row(g, n, cp->brightness);
            scale_clamp_row(b, n, cp->brightness);
        } else if (op == STOKE_COLOR_CONTRAST) {
            blend_const_row(r, n, m, cp->contrast);
            blend_const_row(g, n, m, cp->contrast);
            blend_const_row(b, n, m, cp->contrast);
        } else if (op == STOKE_COLOR_SATURATION) {
            saturation_row(r, g, b, n, cp->saturation);
        } else if (op == STOKE_COLOR_HUE) {
            hue_row(r, g, b, n, cp->hue);
        } else {
            for (size_t e = 0; e < n; e++) {
                float v[3] = {r[e], g[e], b[e]};
                stoke_color_step(cp, op, m, v);
                r[e] = v[0];
                g[e] = v[1];
                b[e] = v[2];
            }
        }
    }
}

// Σ stoke_gray_fixed over n pixels held as three channel rows (the contrast mean's integer
// sum: the same whatever the order). The values here are 0..255 (every step before clamps),
// so each luma·65536 lies below 2^31 and its truncation as an int32 is stoke_gray_fixed's u64
// truncation, in a loop the compiler vectorizes; should a luma not be below 32768 (never on
// these values), the row is summed again by stoke_gray_fixed itself.
uint64_t gray_fixed_row(const float* r, const float* g, const float* b, size_t n) {
    uint64_t sum = 0;
    int ok = 1;
    for (size_t e = 0; e < n; e++) {
        const float v[3] = {r[e], g[e], b[e]};
        const float y = stoke_gray(v);
        ok &= y < 32768.0f;
        const int32_t t = y > 0.0f && y < 32768.0f ? (int32_t)(y * 65536.0f) : 0;
        sum += (uint32_t)t;
    }
    if (ok) return sum;
    sum = 0;
    for (size_t e = 0; e < n; e++) {
        const float v[3] = {r[e], g[e], b[e]};
        sum += stoke_gray_fixed(v);
    }
    return sum;
}

// The color steps over the held image `post` (planar), row by row (the same per-element
// operations as the kernel's per-pixel chain, so the same bits, but in loops the compiler
// vectorizes): the ops before contrast over every row, then the image's contrast mean (the
// fixed-point sum of recipe_math.cuh, order-free like the GPU's integer atomics), then for
// each row the rest of the ops, RandomGrayscale, and either its bytes for the blur or
// solarize and its output write. After a blur, each blurred row is solarized and written.
// A row stays in the cache from the first step to its write.
void color_image(const StokeAugParams* p, float* post, float* planar, void* out, uint32_t dtype, uint32_t layout,
                 uint64_t n, const Plan& pl, const float* mean, const float* std, float* acc, float* nrm,
                 uint8_t* const blur_img[2], float* blur_hor, float* blur_line) {
    const int32_t ow = p->out_w, oh = p->out_h;
    const size_t row = (size_t)ow, plane = (size_t)ow * oh;
    const StokeColorParams* cp = &p->color;
    int ops = 0;
    while (ops < 4 && stoke_color_op(cp->order, ops) != 0u) ops++;
    int ci = ops;  // the contrast step's place, or ops when none
    for (int i = 0; i < ops; i++)
        if (stoke_color_op(cp->order, i) == STOKE_COLOR_CONTRAST) {
            ci = i;
            break;
        }
    float m = 0.0f;
    if (ci < ops) {
        uint64_t sum = 0;
        for (int32_t y = 0; y < oh; y++) {
            float* r = post + (size_t)y * row;
            color_steps_row(cp, 0, ci, 0.0f, r, r + plane, r + 2 * plane, row);
            sum += gray_fixed_row(r, r + plane, r + 2 * plane, row);
        }
        m = stoke_contrast_mean(sum, (uint64_t)plane);
    }
    const int from = ci < ops ? ci : 0;  // the ops still to run on each row
    float* r = planar;
    float* g = planar + row;
    float* b = planar + 2 * row;
    for (int32_t y = 0; y < oh; y++) {
        get_planar_row(post, ow, oh, y, planar);
        color_steps_row(cp, from, ops, m, r, g, b, row);
        if (cp->grayscale) grayscale_row(r, g, b, row);
        if (pl.blur) {
            for (int c = 0; c < 3; c++) u8_run(planar + c * row, blur_img[0] + c * plane + (size_t)y * row, row);
            continue;
        }
        if (p->blur.solarize) solarize_row(&p->blur, r, g, b, row);
        emit_row(p, pl, out, dtype, layout, n, y, planar, mean, std, acc, nrm);
    }
    if (!pl.blur) return;
    const uint8_t* blurred = blur_image(p, blur_img, blur_hor, blur_line);
    for (int32_t y = 0; y < oh; y++) {
        for (int c = 0; c < 3; c++) {
            const uint8_t* q = blurred + c * plane + (size_t)y * row;
            for (size_t e = 0; e < row; e++) planar[c * row + e] = (float)q[e];
        }
        if (p->blur.solarize) solarize_row(&p->blur, r, g, b, row);
        emit_row(p, pl, out, dtype, layout, n, y, planar, mean, std, acc, nrm);
    }
}

// The AutoAugment-family ops over the held image `post` (0..255 floats, already clamped):
// rounded to uint8, then each op that runs, whole image by whole image (kernels/auto_math.cuh,
// the same per-pixel functions the GPU's stoke_auto_step runs), the histogram counted first
// for the ops that need one; the result back into `post` for the color steps.
// A geometric AutoAugment op over the whole image: stoke_auto_geometric's arithmetic, with
// the three channels of a tap in one vector of four doubles (the fourth lane unused). Each lane
// performs the scalar definition's IEEE operations in the same order (no contraction), so the
// bits are the definition's; only the number of instructions drops (tests/gpu_kernel_host.rs
// compares this image with stoke_auto_pixel's, pixel for pixel). GCC/Clang vector extensions:
// four lanes on AVX2, two halves on the baseline build.
typedef double Lanes __attribute__((vector_size(32)));

// (Vectors go by reference: by value, GCC warns that the baseline build's ABI for them
// differs from the AVX2 build's; these helpers are inlined either way.)
// A pixel's three channels widened to doubles, exact as the scalar (double) of each byte. The
// AVX2 build reads four bytes and widens them in two instructions (the fourth byte lands in the
// unused lane: the images have one byte of slack after them); GCC builds the vector from single
// bytes otherwise.
inline void load_px(const uint8_t* p, Lanes& v) {
#if defined(STOKE_HOST_AVX2)
    int32_t w;
    memcpy(&w, p, sizeof w);
    v = (Lanes)_mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(w)));
#else
    v = (Lanes){(double)p[0], (double)p[1], (double)p[2], 0.0};
#endif
}

// The three channels of `r` as bytes: truncated toward zero, as (uint8_t)(int32_t) of each
// lane, after clamping to [0, 255] where `clamp` (bicubic overshoots; a bilinear blend stays
// inside its taps). Clamping first gives what the scalar form's v <= 0 → 0, v >= 255 → 255
// gives: the values between truncate the same. Values are never NaN here.
inline void store_px(const Lanes& r, bool clamp, uint8_t* px) {
#if defined(STOKE_HOST_AVX2)
    __m256d v = (__m256d)r;
    if (clamp) v = _mm256_max_pd(_mm256_min_pd(v, _mm256_set1_pd(255.0)), _mm256_setzero_pd());
    const __m128i i = _mm256_cvttpd_epi32(v);
    const uint32_t w = (uint32_t)_mm_cvtsi128_si32(_mm_shuffle_epi8(i, _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)));
    px[0] = (uint8_t)w;
    px[1] = (uint8_t)(w >> 8);
    px[2] = (uint8_t)(w >> 16);
#else
    double v[4];
    memcpy(v, &r, sizeof v);
    for (int c = 0; c < 3; c++) px[c] = clamp ? (v[c] <= 0.0 ? 0 : (v[c] >= 255.0 ? 255 : (uint8_t)(int32_t)v[c])) : (uint8_t)(int32_t)v[c];
#endif
}

// stoke_pil_cubic on every lane: v[0..4] the four taps.
inline void cubic_lanes(const Lanes (&v)[4], double d, Lanes& out) {
    const Lanes p1 = v[1];
    const Lanes p2 = -v[0] + v[2];
    const Lanes p3 = ((2.0 * (v[0] - v[1])) + v[2]) - v[3];
    const Lanes p4 = ((-v[0] + v[1]) - v[2]) + v[3];
    out = p1 + d * (p2 + d * (p3 + d * p4));
}

void geometric_image(const StokeAutoOp* o, const StokeAutoGeom* g, const uint8_t fill[4], const uint8_t* img, int32_t W,
                     int32_t H, uint8_t* out) {
    if (!g->affine) {
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++) stoke_auto_geometric(o, g, fill, img, W, H, x, y, out + ((size_t)y * W + x) * 3);
        return;
    }
    const int bicubic = (o->flags & STOKE_AUTO_BICUBIC) != 0u;
    const size_t stride = (size_t)W * 3u;
    // A bicubic pixel is a long dependent chain (four row cubics, then one across them), so
    // pixels go two at a time: the second's chain runs while the first's waits on its adds.
    // Each is computed exactly as alone; only the order of independent work changes.
    struct Tap {
        uint8_t* px;
        int32_t ix, iy;
        double dx, dy;
    };
    auto cubic_px = [&](const Tap& t, Lanes& r) {
        const uint8_t* rp[4];
        int32_t xs[4];
        stoke_auto_bicubic_taps(img, W, H, t.ix, t.iy, rp, xs);
        Lanes rows[4];
        for (int k = 0; k < 4; k++) {
            Lanes taps[4];
            for (int q = 0; q < 4; q++) load_px(rp[k] + xs[q], taps[q]);
            cubic_lanes(taps, t.dx, rows[k]);
        }
        cubic_lanes(rows, t.dy, r);
    };
    Tap held = {nullptr, 0, 0, 0.0, 0.0};
    for (int32_t y = 0; y < H; y++) {
        for (int32_t x = 0; x < W; x++) {
            uint8_t* px = out + ((size_t)y * W + x) * 3;
            int32_t ix, iy;
            double dx, dy;
            if (!stoke_auto_source(g, W, H, x, y, &ix, &iy, &dx, &dy)) {
                px[0] = fill[0];
                px[1] = fill[1];
                px[2] = fill[2];
                continue;
            }
            if (!bicubic) {
                const int32_t x0 = stoke_clip_index(ix, W) * 3, x1 = stoke_clip_index(ix + 1, W) * 3;
                const uint8_t* r0 = img + (size_t)stoke_clip_index(iy, H) * stride;
                Lanes a0, b0;
                load_px(r0 + x0, a0);
                load_px(r0 + x1, b0);
                const Lanes v1 = a0 + (b0 - a0) * dx;
                Lanes v2 = v1;
                if (iy + 1 >= 0 && iy + 1 < H) {
                    const uint8_t* r1 = img + (size_t)(iy + 1) * stride;
                    Lanes a1, b1;
                    load_px(r1 + x0, a1);
                    load_px(r1 + x1, b1);
                    v2 = a1 + (b1 - a1) * dx;
                }
                store_px(v1 + (v2 - v1) * dy, false, px);
                continue;
            }
            const Tap t = {px, ix, iy, dx, dy};
            if (!held.px) {
                held = t;
                continue;
            }
            Lanes r0, r1;
            cubic_px(held, r0);
            cubic_px(t, r1);
            store_px(r0, true, held.px);
            store_px(r1, true, t.px);
            held.px = nullptr;
        }
    }
    if (held.px) {
        Lanes r;
        cubic_px(held, r);
        store_px(r, true, held.px);
    }
}

// ImageEnhance.Sharpness (stoke_auto_pixel's SHARPNESS) over the whole image: border pixels
// keep their values (their SMOOTH is themselves, and a blend of a value with itself is that
// value), the interior is a flat loop over elements (eight at a time in the AVX2 build):
// stoke_pil_smooth's sums in its order, then stoke_pil_blend. The blend's clamp is written
// unconditionally: for alpha in [0, 1] the blend lies between its two ends (monotonic
// rounding), so the clamp changes nothing there, and alpha = 0 or 1 give exactly deg or img
// through the formula.
void sharpness_image(float alpha, const uint8_t* img, int32_t W, int32_t H, uint8_t* out) {
    const size_t row = (size_t)W * 3u;
    if (W < 3 || H < 3) {
        memcpy(out, img, row * (size_t)H);
        return;
    }
    memcpy(out, img, row);
    memcpy(out + row * (size_t)(H - 1), img + row * (size_t)(H - 1), row);
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    for (int32_t y = 1; y < H - 1; y++) {
        const uint8_t* c = img + row * (size_t)y;
        const uint8_t* b = c + row;
        const uint8_t* a = c - row;
        uint8_t* o = out + row * (size_t)y;
        for (int k = 0; k < 3; k++) {
            o[k] = c[k];
            o[row - 3 + k] = c[row - 3 + k];
        }
        size_t e = 3;
#if defined(STOKE_HOST_AVX2)
        // Eight elements at a time, each lane the loop's operations below in their order.
        const __m256 vk1 = _mm256_set1_ps(k1), vk5 = _mm256_set1_ps(k5), va = _mm256_set1_ps(alpha);
        for (; e + 8 <= row - 3; e += 8) {
            __m256 ss = _mm256_set1_ps(0.5f);
            ss = _mm256_add_ps(ss, _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(widen8(b + e - 3), vk1), _mm256_mul_ps(widen8(b + e), vk1)),
                                                 _mm256_mul_ps(widen8(b + e + 3), vk1)));
            ss = _mm256_add_ps(ss, _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(widen8(c + e - 3), vk1), _mm256_mul_ps(widen8(c + e), vk5)),
                                                 _mm256_mul_ps(widen8(c + e + 3), vk1)));
            ss = _mm256_add_ps(ss, _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(widen8(a + e - 3), vk1), _mm256_mul_ps(widen8(a + e), vk1)),
                                                 _mm256_mul_ps(widen8(a + e + 3), vk1)));
            const __m256i deg = _mm256_cvttps_epi32(clamp255x8(ss));
            const __m256i img = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(c + e)));
            _mm_storel_epi64((__m128i*)(o + e), pil_blend8(deg, img, va));
        }
#endif
        for (; e < row - 3; e++) {
            float ss = 0.5f;
            ss = ss + (((float)b[e - 3] * k1 + (float)b[e] * k1) + (float)b[e + 3] * k1);
            ss = ss + (((float)c[e - 3] * k1 + (float)c[e] * k5) + (float)c[e + 3] * k1);
            ss = ss + (((float)a[e - 3] * k1 + (float)a[e] * k1) + (float)a[e + 3] * k1);
            ss = ss < 0.0f ? 0.0f : ss;
            ss = ss > 255.0f ? 255.0f : ss;
            const int32_t deg = (int32_t)ss;
            float t = (float)deg + alpha * (float)((int32_t)c[e] - deg);
            t = t < 0.0f ? 0.0f : (t > 255.0f ? 255.0f : t);
            o[e] = (uint8_t)(int32_t)t;
        }
    }
}

// ImageEnhance.Color (stoke_auto_pixel's COLOR: each channel blended with the pixel's Pillow
// luma) over the whole image. The AVX2 build takes eight pixels at a time: channels picked out
// of the 24 bytes by byte shuffles and widened, the luma in 32-bit lanes, the blend in f32
// lanes (pil_blend8), and the bytes put back in
// order; the rest, and the baseline build, go pixel by pixel.
void color_auto_image(const StokeAutoOp* o, const uint8_t* img, size_t pixels, uint8_t* out) {
    size_t q = 0;
#if defined(STOKE_HOST_AVX2)
    const __m128i pick_lo[3] = {_mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                                _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                                _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)};
    const __m128i pick_hi[3] = {_mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1),
                                _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1),
                                _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1)};
    const __m256 alpha = _mm256_set1_ps(o->arg);
    for (; q + 8 <= pixels; q += 8) {
        const uint8_t* src = img + 3 * q;
        const __m128i lo = _mm_loadu_si128((const __m128i*)src);
        const __m128i hi = _mm_loadl_epi64((const __m128i*)(src + 16));
        __m256i ch[3];
        for (int c = 0; c < 3; c++)
            ch[c] = _mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(lo, pick_lo[c]), _mm_shuffle_epi8(hi, pick_hi[c])));
        const __m256i l = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(ch[0], _mm256_set1_epi32(19595)),
                                                               _mm256_mullo_epi32(ch[1], _mm256_set1_epi32(38470))),
                                              _mm256_mullo_epi32(ch[2], _mm256_set1_epi32(7471))),
                             _mm256_set1_epi32(0x8000)),
            16);
        interleave3x8(pil_blend8(l, ch[0], alpha), pil_blend8(l, ch[1], alpha), pil_blend8(l, ch[2], alpha), out + 3 * q);
    }
#endif
    for (; q < pixels; q++) {
        const uint8_t* px = img + 3 * q;
        const uint32_t l = stoke_pil_luma(px);
        for (int c = 0; c < 3; c++) out[3 * q + c] = stoke_pil_blend(l, px[c], o->arg);
    }
}

void auto_image(const StokeAugParams* p, float* post, uint8_t* a, uint8_t* b, uint32_t* hist, uint8_t* lut) {
    const int32_t W = p->out_w, H = p->out_h;
    const size_t px = (size_t)W * H, len = px * 3;
    // stoke_to_u8 of each value of the planar held image, then interleaved (the ops read pixels).
    u8_run(post, b, len);
    interleave_planes(b, px, px, a);
    uint8_t* cur = a;
    uint8_t* nxt = b;
    for (int k = 0; k < STOKE_AUTO_MAX; k++) {
        if (!stoke_auto_runs(&p->aa, k)) continue;
        const StokeAutoOp* o = &p->aa.ops[k];
        if (stoke_auto_needs_hist(o->op)) {
            for (int i = 0; i < STOKE_AUTO_BINS; i++) hist[i] = 0u;
            for (size_t q = 0; q < px; q++) {
                uint32_t bins[3];
                const int nb = stoke_auto_hist_bins(o->op, cur + 3 * q, bins);
                for (int i = 0; i < nb; i++) hist[bins[i]]++;
            }
        }
        if (stoke_auto_is_table(o->op)) {
            for (int c = 0; c < 3; c++) stoke_auto_table(o, hist, (uint64_t)px, c, lut + 256 * c);
            for (size_t q = 0; q < px; q++) {
                nxt[3 * q] = lut[cur[3 * q]];
                nxt[3 * q + 1] = lut[256 + cur[3 * q + 1]];
                nxt[3 * q + 2] = lut[512 + cur[3 * q + 2]];
            }
        } else {
            StokeAutoGeom g;
            stoke_auto_prepare(o, W, H, &g);  // a geometric op's matrix once per image, not per pixel
            if (stoke_auto_is_geometric(o->op)) {
                geometric_image(o, &g, p->aa.fill, cur, W, H, nxt);
            } else if (o->op == STOKE_AUTO_SHARPNESS) {
                sharpness_image(o->arg, cur, W, H, nxt);
            } else if (o->op == STOKE_AUTO_COLOR) {
                color_auto_image(o, cur, px, nxt);
            } else {
                for (int32_t y = 0; y < H; y++)
                    for (int32_t x = 0; x < W; x++)
                        stoke_auto_pixel(o, &g, p->aa.fill, lut, cur, W, H, x, y, nxt + ((size_t)y * W + x) * 3);
            }
        }
        uint8_t* t = cur;
        cur = nxt;
        nxt = t;
    }
    for (int c = 0; c < 3; c++)
        for (size_t q = 0; q < px; q++) post[c * px + q] = (float)cur[3 * q + c];
}

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
    // Row offsets are relative to the band, so they index `band` rows, not bytes.
    fill_table(&ty, p->crop_h, p->resize_h, p->win_y, oh, p->filter, p->antialias, 0, 1);

    // Horizontal pass: band row r = crop row ty.lo + r; r_c = Σ_kx wx·src, in tap order.
    // kHRows crop rows at a time, one per vector lane: `lines` holds them transposed
    // (element e = 3·column + channel of row q at e·kHRows + q), so a tap's value for all the
    // rows is one load, and each lane performs exactly the scalar form's f32 multiply then add
    // per tap (no contraction, see build.rs). Lanes past the band's last row read zeros and
    // are not stored.
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
                pq[q] = q < rows ? src + (base + (int64_t)(p->crop_y + r0 + q) * step_y + (int64_t)(p->crop_x + tx.lo) * step_x) : nullptr;
            for (; done + 8 <= line_len; done += 8) {
                __m256 v[8];
                for (int q = 0; q < 8; q++)
                    v[q] = pq[q] ? _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(pq[q] + done))))
                                 : _mm256_setzero_ps();
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
        // Eight output columns at a time: their 24 element vectors (rows in lanes) are
        // transposed 8 x 8 three times into a vector of 8 consecutive elements per row, stored
        // whole, instead of one store per float. The same values in the same places.
        for (; j + 8 <= ow; j += 8) {
            __m256 tile[3][8];
            for (int32_t jj = 0; jj < 8; jj++) {
                vrows a[3];
                column(j + jj, a[0], a[1], a[2]);
                for (int c = 0; c < 3; c++) tile[(3 * jj + c) / 8][(3 * jj + c) % 8] = (__m256)a[c];
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
    // Four vectors of a row's elements at a time, every tap added in registers (each element
    // still starts at 0 and adds wy·b tap by tap, the same operations in the same order), instead
    // of a pass over the whole accumulator row per tap.
    const size_t chunk = 4 * kHRows;
    for (int32_t i = 0; i < oh; i++) {
        const float* wy = ty.w + ty.start[i];
        const int64_t* oy = ty.off + ty.start[i];
        const int32_t taps = ty.count[i];
        size_t e0 = 0;
        for (; e0 + chunk <= row_len; e0 += chunk) {
            vrows a0 = {}, a1 = {}, a2 = {}, a3 = {};
            for (int32_t k = 0; k < taps; k++) {
                const float* b = band + (size_t)(oy[k] - ty.lo) * row_len + e0;
                vrows v0, v1, v2, v3;
                memcpy(&v0, b, sizeof v0);
                memcpy(&v1, b + kHRows, sizeof v1);
                memcpy(&v2, b + 2 * kHRows, sizeof v2);
                memcpy(&v3, b + 3 * kHRows, sizeof v3);
                a0 = a0 + wy[k] * v0;
                a1 = a1 + wy[k] * v1;
                a2 = a2 + wy[k] * v2;
                a3 = a3 + wy[k] * v3;
            }
            memcpy(acc + e0, &a0, sizeof a0);
            memcpy(acc + e0 + kHRows, &a1, sizeof a1);
            memcpy(acc + e0 + 2 * kHRows, &a2, sizeof a2);
            memcpy(acc + e0 + 3 * kHRows, &a3, sizeof a3);
        }
        for (size_t e = e0; e < row_len; e++) acc[e] = 0.0f;
        for (int32_t k = 0; k < taps; k++) {
            const float* b = band + (size_t)(oy[k] - ty.lo) * row_len;
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
            const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
            for (; j + 8 <= ow; j += 8) {
                const __m256 A = _mm256_loadu_ps(acc + 3 * (size_t)j), B = _mm256_loadu_ps(acc + 3 * (size_t)j + 8),
                             C = _mm256_loadu_ps(acc + 3 * (size_t)j + 16);
                const __m256 ch[3] = {_mm256_blend_ps(_mm256_blend_ps(A, B, 0x92), C, 0x24),
                                      _mm256_blend_ps(_mm256_blend_ps(A, B, 0x24), C, 0x49),
                                      _mm256_blend_ps(_mm256_blend_ps(A, B, 0x49), C, 0x92)};
                const int32_t x = p->flip_h ? ow - 8 - j : j;
                for (int c = 0; c < 3; c++) {
                    __m256 v = _mm256_permutevar8x32_ps(ch[c], order[c]);
                    if (p->flip_h) v = _mm256_permutevar8x32_ps(v, reverse);
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
