// The blur passes over whole planes: Pillow's box passes (DINO's radius form) and torchvision's
// Gaussian kernel.
// Part of augment_host.cpp's translation unit, not a header of its own: included inside its
// anonymous namespace after the output writes and the rotation pass, so it compiles once per ISA build with
// the rest (kernels/host/augment_host_avx2.cpp) and uses what the file defines before it.

// One Pillow box pass over one W × H plane (one channel), `src` → `dst`, along `axis` (0:
// rows, 1: columns): stoke_pil_pass_pixel's integers for each element, the box sum of 2r + 1
// taps then (sum·ww + (far taps)·fw + 2^23) >> 24 in u32 arithmetic (integers: the same bytes
// whatever the order or the layout). The column pass is the same loop for every row, its row
// pointers clamped to the plane; the row pass is one loop over the columns whose taps (the far
// ones too) all lie inside the row, and the edge columns element by element with indices
// clamped to the line, as stoke_pil_pass_pixel, adding tap by tap into `acc` (W u32) in loops
// the compiler vectorizes. The AVX2 build instead sums sixteen elements' taps in a register of
// u16 lanes, over every element of the row (see below), for boxes up to 64 taps (64 · 255 fits
// 16 bits) on planes at least 16 wide.

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
// Sixteen bytes as sixteen u16 lanes.
inline __m256i pil_widen16(const uint8_t* q) { return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)q)); }

// Sixteen lanes of one pass's box sums (u16: at most 64 taps of 255) as its bytes: each lane
// widened to u32 for (sum·ww + (lo + hi)·fw + 2^23) >> 24, below 256, stored as o[0..16).
inline void pil_store16(const __m256i& sum, const uint8_t* lo, const uint8_t* hi, const __m256i& ww, const __m256i& fw,
                        uint8_t* o) {
    const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(1 << 23);
    const __m256i far = _mm256_add_epi16(pil_widen16(lo), pil_widen16(hi));
    auto bytes = [&](const __m256i& s, const __m256i& f) {
        return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_mullo_epi32(s, ww), _mm256_mullo_epi32(f, fw)), half), 24);
    };
    // The unpacks work within each 128-bit half: `a` holds elements 0-3 and 8-11, `b` 4-7 and
    // 12-15, so the packs give 0-7 in the low half and 8-15 in the high one.
    const __m256i a = bytes(_mm256_unpacklo_epi16(sum, zero), _mm256_unpacklo_epi16(far, zero));
    const __m256i b = bytes(_mm256_unpackhi_epi16(sum, zero), _mm256_unpackhi_epi16(far, zero));
    const __m256i w = _mm256_packus_epi32(a, b);
    const __m256i v = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);  // 64-bit words 0 and 2
    _mm_storeu_si128((__m128i*)o, _mm256_castsi256_si128(v));
}

// One line of a pass, every element in vectors: element e's taps are t[k][e] for k < taps, its
// far taps lo[e] and hi[e]; n ≥ 16 elements. The last partial group of sixteen is the line's
// last sixteen elements again (they read the source and write `o`, so computing some twice
// writes the same bytes). T > 0 is the tap count known at compile time (DINO's boxes have 1 to
// 7 taps: the tap loop unrolled, its pointers in registers); T = 0 takes `taps` (≤ 64).
template <int32_t T>
void pil_line16(const uint8_t* const* t, int32_t taps, const uint8_t* lo, const uint8_t* hi, size_t n,
                const __m256i& ww, const __m256i& fw, uint8_t* o) {
    constexpr int32_t kMax = T > 0 ? T : 64;
    const int32_t count = T > 0 ? T : taps;
    const uint8_t* tk[kMax];
    for (int32_t k = 0; k < count; k++) tk[k] = t[k];
    auto sum = [&](size_t e) {
        __m256i a = pil_widen16(tk[0] + e);
        for (int32_t k = 1; k < count; k++) a = _mm256_add_epi16(a, pil_widen16(tk[k] + e));
        return a;
    };
    size_t e = 0;
    for (; e + 32 <= n; e += 32) {
        const __m256i a0 = sum(e), a1 = sum(e + 16);
        pil_store16(a0, lo + e, hi + e, ww, fw, o + e);
        pil_store16(a1, lo + e + 16, hi + e + 16, ww, fw, o + e + 16);
    }
    if (e < n) {
        if (e + 16 < n) {
            pil_store16(sum(e), lo + e, hi + e, ww, fw, o + e);
            e += 16;
        }
        e = n - 16;
        pil_store16(sum(e), lo + e, hi + e, ww, fw, o + e);
    }
}
#endif

void pil_pass_plane(const uint8_t* src, uint8_t* dst, int32_t W, int32_t H, int axis, StokePilBox b, uint32_t* acc) {
    const size_t row = (size_t)W;
    const int32_t taps = 2 * b.r + 1;
    auto clampi = [](int32_t i, int32_t n) { return (size_t)(i < 0 ? 0 : (i >= n ? n - 1 : i)); };
#if defined(STOKE_HOST_AVX2)
    const __m256i ww = _mm256_set1_epi32((int32_t)b.ww), fw = _mm256_set1_epi32((int32_t)b.fw);
    constexpr int32_t kTaps = 64;  // boxes up to this wide in vectors (DINO's: 1 to 7)
#endif
    for (int32_t y = 0; y < H; y++) {
        uint8_t* o = dst + (size_t)y * row;
        const ptrdiff_t sr = (ptrdiff_t)((size_t)y * row);  // row y's offset
#if defined(STOKE_HOST_AVX2)
        // Every element of the row in vectors (pil_line16). The row pass reads the row from a
        // copy padded with r + 1 copies of its first and last byte on each side (pad[i] is the
        // row's element i clamped to the line, as pil_element reads it), so the edge columns
        // take the same loop. `acc` holds 12·W bytes (the caller's line), the padded row
        // W + 2r + 2 ≤ W + 64.
        if (taps <= kTaps && W >= 16) {
            const uint8_t* t[kTaps];  // the taps' lines
            const uint8_t *l, *h;     // the far taps'
            if (axis == 1) {
                for (int32_t k = 0; k < taps; k++) t[k] = src + clampi(y + k - b.r, H) * row;
                l = src + clampi(y - b.r - 1, H) * row;
                h = src + clampi(y + b.r + 1, H) * row;
            } else {
                uint8_t* pad = (uint8_t*)acc;
                const int32_t edge = b.r + 1;
                memset(pad, src[sr], (size_t)edge);
                memcpy(pad + edge, src + sr, row);
                memset(pad + edge + row, src[sr + W - 1], (size_t)edge);
                for (int32_t k = 0; k < taps; k++) t[k] = pad + (edge + k - b.r);
                l = pad;
                h = pad + 2 * edge;
            }
            switch (taps) {
                case 1: pil_line16<1>(t, taps, l, h, row, ww, fw, o); break;
                case 3: pil_line16<3>(t, taps, l, h, row, ww, fw, o); break;
                case 5: pil_line16<5>(t, taps, l, h, row, ww, fw, o); break;
                case 7: pil_line16<7>(t, taps, l, h, row, ww, fw, o); break;
                default: pil_line16<0>(t, taps, l, h, row, ww, fw, o); break;
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
