// The one definition of stoke's per-sample color and erasing math: ColorJitter,
// RandomGrayscale (both between the geometry and normalize) and RandomErasing (after
// normalize), with torchvision's and timm's meaning. STOKE_HD like augment_math.cuh: compiled
// for the device by nvcc and for the host by build.rs, IEEE +, −, ×, ÷, floor and sqrt only,
// no contraction, so both backends give the same bits.
//
// Where it sits in a pixel's life (augment/mod.rs documents the whole order):
//   geometry (crop, resize, flip, rotate) → clamp to [0, 255]
//   → ColorJitter: the drawn permutation of brightness, contrast, saturation, hue
//   → RandomGrayscale → normalize → RandomErasing → cast.
//
// Semantics are torchvision's functional ops on a float image (transforms.v2.functional,
// `adjust_*_image` on float32), evaluated on the 0..255 scale (bound 255 instead of 1; hue
// converts to 0..1 and back):
// - brightness f: clamp(x·f, 0, 255)                      (_blend with black)
// - contrast f:   clamp(x·f + m·(1 − f), 0, 255), m the mean over the whole image of its
//                 grayscale *as it is when contrast runs* (after the ops drawn before it)
// - saturation f: clamp(x·f + gray·(1 − f), 0, 255), gray of the same pixel
// - hue h:        RGB → HSV (torchvision's _rgb_to_hsv), H = (H + h) mod 1, HSV → RGB
// - grayscale:    0.2989·r + 0.587·g + 0.114·b to all three channels
// `1 − f` is computed as torchvision does: the factor is an f32 value, `1.0 − f` in double,
// then rounded to f32.
//
// The contrast mean is the one per-image statistic. To be identical on both backends and
// independent of summation order (the GPU adds in whatever order its threads finish), each
// pixel's grayscale is turned into a 16.16 fixed-point integer (exact: a power-of-two scale,
// truncated) and the integers are summed; the mean is that sum ÷ (65536 · pixels) in double.
// The truncation moves the mean by less than 2^-16 of a level; torchvision's f32 sum moves it
// by a similar amount the other way.
#pragma once
#include "augment_math.cuh"

// ---------------------------------------------------------------------------------------
// ColorJitter and RandomGrayscale (0..255 scale)
// ---------------------------------------------------------------------------------------

// Op i (0-based) of the drawn order, 0 when the list ended.
STOKE_HD uint32_t stoke_color_op(uint32_t order, int i) {
    return (order >> (4 * i)) & 0xfu;
}

// torchvision's luma: r·0.2989 + g·0.587 + b·0.114, in that order.
STOKE_HD float stoke_gray(const float v[3]) {
    return (v[0] * 0.2989f + v[1] * 0.587f) + v[2] * 0.114f;
}

// torchvision _blend(a, b, f) on the 0..255 scale: clamp(a·f + b·(1 − f), 0, 255).
STOKE_HD float stoke_blend(float a, float b, float f) {
    const float g = (float)(1.0 - (double)f);
    return stoke_clamp255(a * f + b * g);
}

// torchvision adjust_hue on one pixel (0..255 in and out; the HSV math on 0..1).
STOKE_HD void stoke_adjust_hue(float v[3], float hue) {
    const float r = v[0] / 255.0f, g = v[1] / 255.0f, b = v[2] / 255.0f;
    // _rgb_to_hsv
    const float maxc = r > g ? (r > b ? r : b) : (g > b ? g : b);
    const float minc = r < g ? (r < b ? r : b) : (g < b ? g : b);
    const int eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : cr;
    const float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    float h;
    if (maxc == r) {
        h = bc - gc;
    } else if (maxc == g) {
        h = (rc + 2.0f) - bc;
    } else {
        h = (gc + 4.0f) - rc;
    }
    // fmod(h/6 + 1, 1): h/6 + 1 lies in [5/6, 2), so fmod is one exact subtraction.
    h = h * (float)(1.0 / 6.0) + 1.0f;
    if (h >= 1.0f) h = h - 1.0f;
    // (h + hue).remainder(1): in [-0.5, 1.5); torch's remainder is fmod, then + 1 if negative.
    h = h + hue;
    if (h >= 1.0f) {
        h = h - 1.0f;
    } else if (h < 0.0f) {
        h = h + 1.0f;
    }
    // _hsv_to_rgb
    const float h6 = h * 6.0f;
    const float fi = floorf(h6);
    const float f = h6 - fi;
    int i = (int)fi % 6;
    if (i < 0) i += 6;
    const float sxf = s * f;
    const float one_minus_s = 1.0f - s;
    const float vq = (1.0f - sxf) * maxc;
    const float vt = (sxf + one_minus_s) * maxc;
    const float vp = one_minus_s * maxc;
    const float Q = vq < 0.0f ? 0.0f : (vq > 1.0f ? 1.0f : vq);
    const float T = vt < 0.0f ? 0.0f : (vt > 1.0f ? 1.0f : vt);
    const float P = vp < 0.0f ? 0.0f : (vp > 1.0f ? 1.0f : vp);
    const float V = maxc;
    float o0, o1, o2;
    switch (i) {
        case 0: o0 = V; o1 = T; o2 = P; break;
        case 1: o0 = Q; o1 = V; o2 = P; break;
        case 2: o0 = P; o1 = V; o2 = T; break;
        case 3: o0 = P; o1 = Q; o2 = V; break;
        case 4: o0 = T; o1 = P; o2 = V; break;
        default: o0 = V; o1 = P; o2 = Q; break;
    }
    v[0] = o0 * 255.0f;
    v[1] = o1 * 255.0f;
    v[2] = o2 * 255.0f;
}

// Apply one ColorJitter op. `mean` is the contrast mean (only read by CONTRAST).
STOKE_HD void stoke_color_step(const StokeColorParams* cp, uint32_t op, float mean, float v[3]) {
    if (op == STOKE_COLOR_BRIGHTNESS) {
        for (int c = 0; c < 3; c++) v[c] = stoke_clamp255(v[c] * cp->brightness);
    } else if (op == STOKE_COLOR_CONTRAST) {
        for (int c = 0; c < 3; c++) v[c] = stoke_blend(v[c], mean, cp->contrast);
    } else if (op == STOKE_COLOR_SATURATION) {
        const float g = stoke_gray(v);
        for (int c = 0; c < 3; c++) v[c] = stoke_blend(v[c], g, cp->saturation);
    } else if (op == STOKE_COLOR_HUE) {
        stoke_adjust_hue(v, cp->hue);
    }
}

// Does the drawn order hold a contrast step (so the image mean is needed)?
STOKE_HD int stoke_color_needs_mean(const StokeColorParams* cp) {
    for (int i = 0; i < 4; i++) {
        if (stoke_color_op(cp->order, i) == STOKE_COLOR_CONTRAST) return 1;
    }
    return 0;
}

// The steps before contrast: what the contrast mean is taken over.
STOKE_HD void stoke_color_before_contrast(const StokeColorParams* cp, float v[3]) {
    for (int i = 0; i < 4; i++) {
        const uint32_t op = stoke_color_op(cp->order, i);
        if (op == 0u || op == STOKE_COLOR_CONTRAST) return;
        stoke_color_step(cp, op, 0.0f, v);
    }
}

// ColorJitter in the drawn order, then RandomGrayscale.
STOKE_HD void stoke_color_apply(const StokeColorParams* cp, float mean, float v[3]) {
    for (int i = 0; i < 4; i++) {
        const uint32_t op = stoke_color_op(cp->order, i);
        if (op == 0u) break;
        stoke_color_step(cp, op, mean, v);
    }
    if (cp->grayscale) {
        const float g = stoke_gray(v);
        v[0] = g;
        v[1] = g;
        v[2] = g;
    }
}

// One pixel's share of the contrast mean: its grayscale (0..255) in 16.16 fixed point.
STOKE_HD uint64_t stoke_gray_fixed(const float v[3]) {
    const float g = stoke_gray(v);
    return g > 0.0f ? (uint64_t)(g * 65536.0f) : 0u;
}

// The contrast mean from the fixed-point sum over `pixels` pixels.
STOKE_HD float stoke_contrast_mean(uint64_t sum, uint64_t pixels) {
    return pixels ? (float)((double)sum / (65536.0 * (double)pixels)) : 0.0f;
}

// ---------------------------------------------------------------------------------------
// RandomErasing (normalized scale)
// ---------------------------------------------------------------------------------------

// 1 + the index of the last box holding output pixel (x, y), or 0.
STOKE_HD int stoke_erase_box(const StokeEraseParams* e, int32_t x, int32_t y) {
    int hit = 0;
    const int n = e->count < (uint32_t)STOKE_ERASE_MAX ? (int)e->count : STOKE_ERASE_MAX;
    for (int k = 0; k < n; k++) {
        const int32_t* b = e->box[k];
        if (x >= b[0] && x < b[0] + b[2] && y >= b[1] && y < b[1] + b[3]) hit = k + 1;
    }
    return hit;
}

STOKE_HD uint64_t stoke_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Natural log of a normal f32 x > 0 from IEEE operations only: x = m·2^e with m in [√½, √2),
// ln m = 2·atanh(s), s = (m − 1)/(m + 1), |s| ≤ 0.172, by its series to s^11 (truncation
// below 1e-9, under an f32 ulp).
STOKE_HD float stoke_lnf(float x) {
    uint32_t bits = stoke_f32_bits(x);
    int e = (int)((bits >> 23) & 0xffu) - 127;
    float m = stoke_bits_to_f32((bits & 0x007fffffu) | 0x3f800000u);  // [1, 2)
    if (m > 1.41421356f) {
        m = m * 0.5f;
        e = e + 1;
    }
    const float s = (m - 1.0f) / (m + 1.0f);
    const float s2 = s * s;
    const float t = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9 + s2 * (1.0f / 11)))));
    return (float)e * 0.693147181f + 2.0f * s * t;
}

// A standard normal value for element (box, c, y, x) of a sample's erasing, keyed by the
// sample's erase key: a SplitMix64 hash gives a 24-bit uniform u in (0, 1] and an angle
// (quadrant from 2 bits, 24 bits within it); Box–Muller's cosine branch in f32, the cosine
// by its Taylor series on [0, π/2) (truncation below 1e-9).
STOKE_HD float stoke_erase_normal(const StokeEraseParams* e, int box, int c, int32_t y, int32_t x) {
    const uint64_t key = ((uint64_t)e->key_hi << 32) | (uint64_t)e->key_lo;
    const uint64_t idx = ((((uint64_t)box * 3u + (uint64_t)c) << 20 | (uint64_t)(uint32_t)y) << 20) | (uint64_t)(uint32_t)x;
    const uint64_t h = stoke_mix64(key ^ (idx * 0x9e3779b97f4a7c15ull));
    const float u = (float)((uint32_t)(h >> 40) + 1u) * (1.0f / 16777216.0f);  // (0, 1]
    const float phi = (float)((uint32_t)(h >> 14) & 0xffffffu) * (1.5707963f / 16777216.0f);
    const uint32_t quadrant = (uint32_t)(h >> 38) & 3u;
    const float r = sqrtf(-2.0f * stoke_lnf(u));
    const float p2 = phi * phi;
    float t;
    if (quadrant & 1u) {  // cos(φ + π/2) = −sin φ, cos(φ + 3π/2) = sin φ
        t = phi * (1.0f - p2 * (1.0f / 6) * (1.0f - p2 * (1.0f / 20) * (1.0f - p2 * (1.0f / 42) * (1.0f - p2 * (1.0f / 72) * (1.0f - p2 * (1.0f / 110) * (1.0f - p2 * (1.0f / 156)))))));
        t = quadrant == 1u ? -t : t;
    } else {  // cos φ, cos(φ + π) = −cos φ
        t = 1.0f - p2 * (1.0f / 2) * (1.0f - p2 * (1.0f / 12) * (1.0f - p2 * (1.0f / 30) * (1.0f - p2 * (1.0f / 56) * (1.0f - p2 * (1.0f / 90) * (1.0f - p2 * (1.0f / 132) * (1.0f - p2 * (1.0f / 182)))))));
        t = quadrant == 2u ? -t : t;
    }
    return r * t;
}

// The erased value of channel c of output pixel (x, y) in box `hit` (from stoke_erase_box),
// on the normalized scale.
STOKE_HD float stoke_erase_value(const StokeEraseParams* e, int hit, int c, int32_t x, int32_t y) {
    const int k = hit - 1;
    if (e->mode == STOKE_ERASE_PIXEL) return stoke_erase_normal(e, k, c, y, x);
    if (e->mode == STOKE_ERASE_RAND) return e->color[k][c];
    return 0.0f;
}
