// The AutoAugment-family ops over the held image: geometric, sharpness and colour ops, in the
// drawn order.
// Part of augment_host.cpp's translation unit, not a header of its own: included inside its
// anonymous namespace after the colour steps, so it compiles once per ISA build with
// the rest (kernels/host/augment_host_avx2.cpp) and uses what the file defines before it.

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
