// The colour steps over channel rows (ColorJitter's hue, brightness, contrast and saturation,
// RandomGrayscale, RandomSolarize, the contrast mean) and the held image's colour pass.
// Part of augment_host.cpp's translation unit, not a header of its own: included inside its
// anonymous namespace after the blur passes, so it compiles once per ISA build with
// the rest (kernels/host/augment_host_avx2.cpp) and uses what the file defines before it.

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
// So v < 0 ? 0 : (v > hi ? hi : v) of eight lanes (stoke_clamp255 with hi = 255, hue's clamp to
// [0, 1] with hi = 1) is min(hi, max(0, v)): max(0, v) is the first select, min(hi, ·) the
// second (a lane below 0 is +0 after the first, and stays).
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
