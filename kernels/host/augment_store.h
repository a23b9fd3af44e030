// The output writes: uint8 runs, NHWC interleaving, a row's normalize and cast, RandomErasing's
// rows, and the held image's planar rows.
// Part of augment_host.cpp's translation unit, not a header of its own: included inside its
// anonymous namespace after the tables, so it compiles once per ISA build with
// the rest (kernels/host/augment_host_avx2.cpp) and uses what the file defines before it.

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

// Sixteen lanes (a: 0..7, b: 8..15) holding 0..255, truncated as bytes8 does: bytes 0..15.
inline __m128i bytes16(const __m256& a, const __m256& b) {
    // The packs work within each 128-bit half: a's and b's low halves (0-3, 8-11) then their
    // high halves (4-7, 12-15); the permute puts the four-byte groups back in order.
    const __m256i w = _mm256_packus_epi32(_mm256_cvttps_epi32(a), _mm256_cvttps_epi32(b));
    const __m256i x = _mm256_packus_epi16(w, w);
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
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
    for (; i + 16 <= n; i += 16) {
        const __m256 a = clamp255x8(_mm256_loadu_ps(src + i)), b = clamp255x8(_mm256_loadu_ps(src + i + 8));
        _mm_storeu_si128((__m128i*)(dst + i),
                         bytes16(_mm256_sub_ps(_mm256_add_ps(a, big), big), _mm256_sub_ps(_mm256_add_ps(b, big), big)));
    }
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
