// The one definition of stoke's AutoAugment-family ops (timm's RandAugment and AutoAugment,
// torchvision's TrivialAugmentWide op set): Pillow's uint8 image operations, as timm applies
// them to the PIL image after RandomResizedCrop and flip. STOKE_HD like augment_math.cuh:
// compiled for the device by nvcc and for the host by build.rs, IEEE operations only, no
// contraction, so both backends give the same bits. Every op is Pillow's own arithmetic
// (libImaging's Blend.c, Filter.c, Geometry.c, Convert.c and ImageOps' tables, read and
// re-derived here), so the result equals timm's PIL op bit for bit on the same uint8 input
// (tests/cpu_auto.rs checks it against goldens made by timm's functions).
//
// Where it sits in a pixel's life (augment/mod.rs documents the whole order):
//   geometry (crop, resize, flip) → uint8 (round half to even) → the drawn ops, one after
//   another, each on the uint8 image the previous one left → ColorJitter, RandomGrayscale →
//   normalize → RandomErasing → cast.
//
// The ops fall in four kinds:
// - table ops (AutoContrast, Equalize, Invert, Posterize, Solarize, SolarizeAdd, Contrast,
//   Brightness): out = lut[c][in], a 256-entry table per channel built once per sample from
//   the op's argument and, for the three that need one, the image's histogram at that point
//   (per-channel counts for AutoContrast/Equalize, the Pillow "L" luma histogram for
//   Contrast's mean). Histograms are integer counts: exact and order-free, so the GPU's
//   atomics and the CPU's loop agree.
// - Color: blend with the pixel's own Pillow luma.
// - Sharpness: blend with Pillow's SMOOTH 3×3 filter of the image (borders unchanged).
// - geometric (Rotate, ShearX/Y, TranslateX/Y): Pillow's affine transform with its bilinear
//   or bicubic filter (double precision, edge taps clamped) and the fill colour outside.
#pragma once
#include "augment_math.cuh"

#define STOKE_AUTO_IDENTITY 0u
#define STOKE_AUTO_AUTOCONTRAST 1u
#define STOKE_AUTO_EQUALIZE 2u
#define STOKE_AUTO_INVERT 3u
#define STOKE_AUTO_ROTATE 4u
#define STOKE_AUTO_POSTERIZE 5u
#define STOKE_AUTO_SOLARIZE 6u
#define STOKE_AUTO_SOLARIZE_ADD 7u
#define STOKE_AUTO_COLOR 8u
#define STOKE_AUTO_CONTRAST 9u
#define STOKE_AUTO_BRIGHTNESS 10u
#define STOKE_AUTO_SHARPNESS 11u
#define STOKE_AUTO_SHEAR_X 12u
#define STOKE_AUTO_SHEAR_Y 13u
#define STOKE_AUTO_TRANSLATE_X 14u
#define STOKE_AUTO_TRANSLATE_Y 15u
#define STOKE_AUTO_OPS 16u

// Histogram bins per sample: three channel histograms, then the luma histogram.
#define STOKE_AUTO_BINS 1024

// Does op `k` of the sample change the image (drawn, fired, not Identity)?
STOKE_HD int stoke_auto_runs(const StokeAutoParams* a, int k) {
    return k < (int)a->count && k < STOKE_AUTO_MAX && (a->ops[k].flags & STOKE_AUTO_APPLIED) != 0u &&
           a->ops[k].op != STOKE_AUTO_IDENTITY && a->ops[k].op < STOKE_AUTO_OPS;
}

// How many ops before op `k` change the image: the image op k reads is buffer (that % 2) of
// the ping-pong pair; the finished image is buffer (stoke_auto_before(a, STOKE_AUTO_MAX) % 2).
STOKE_HD int stoke_auto_before(const StokeAutoParams* a, int k) {
    int n = 0;
    for (int i = 0; i < k && i < STOKE_AUTO_MAX; i++) n += stoke_auto_runs(a, i);
    return n;
}

STOKE_HD int stoke_auto_active(const StokeAutoParams* a) { return stoke_auto_before(a, STOKE_AUTO_MAX) > 0; }

STOKE_HD int stoke_auto_is_table(uint32_t op) {
    return op == STOKE_AUTO_AUTOCONTRAST || op == STOKE_AUTO_EQUALIZE || op == STOKE_AUTO_INVERT ||
           op == STOKE_AUTO_POSTERIZE || op == STOKE_AUTO_SOLARIZE || op == STOKE_AUTO_SOLARIZE_ADD ||
           op == STOKE_AUTO_CONTRAST || op == STOKE_AUTO_BRIGHTNESS;
}

STOKE_HD int stoke_auto_needs_hist(uint32_t op) {
    return op == STOKE_AUTO_AUTOCONTRAST || op == STOKE_AUTO_EQUALIZE || op == STOKE_AUTO_CONTRAST;
}

// Pillow's RGB → L (Convert.c, ITU-R 601-2 in 16.16 fixed point).
STOKE_HD uint32_t stoke_pil_luma(const uint8_t* px) {
    return ((uint32_t)px[0] * 19595u + (uint32_t)px[1] * 38470u + (uint32_t)px[2] * 7471u + 0x8000u) >> 16;
}

// The histogram bins one pixel adds to for `op`: writes up to 3 bin indices, returns how many.
STOKE_HD int stoke_auto_hist_bins(uint32_t op, const uint8_t* px, uint32_t bins[3]) {
    if (op == STOKE_AUTO_CONTRAST) {
        bins[0] = 768u + stoke_pil_luma(px);
        return 1;
    }
    bins[0] = px[0];
    bins[1] = 256u + px[1];
    bins[2] = 512u + px[2];
    return 3;
}

// Image.blend(degenerate, image, alpha) of one 8-bit value (Blend.c): in float,
// `deg + alpha·(img − deg)`, truncated; clipped to 0..255 only when alpha is outside [0, 1].
STOKE_HD uint8_t stoke_pil_blend(uint32_t deg, uint32_t img, float alpha) {
    if (alpha == 0.0f) return (uint8_t)deg;
    if (alpha == 1.0f) return (uint8_t)img;
    const float t = (float)(int32_t)deg + alpha * (float)((int32_t)img - (int32_t)deg);
    if (alpha >= 0.0f && alpha <= 1.0f) return (uint8_t)(int32_t)t;
    if (t <= 0.0f) return 0;
    if (t >= 255.0f) return 255;
    return (uint8_t)(int32_t)t;
}

// The table of a table op for channel c (`lut` gets 256 entries). `hist` is the sample's
// STOKE_AUTO_BINS counts (only read by AutoContrast, Equalize and Contrast), `pixels` its size.
STOKE_HD void stoke_auto_table(const StokeAutoOp* o, const uint32_t* hist, uint64_t pixels, int c, uint8_t* lut) {
    const uint32_t op = o->op;
    if (op == STOKE_AUTO_AUTOCONTRAST) {  // ImageOps.autocontrast(cutoff=0)
        const uint32_t* h = hist + 256 * c;
        int lo = 0, hi = 255;
        while (lo < 256 && h[lo] == 0u) lo++;
        while (hi >= 0 && h[hi] == 0u) hi--;
        if (hi <= lo) {
            for (int i = 0; i < 256; i++) lut[i] = (uint8_t)i;
            return;
        }
        const double scale = 255.0 / (double)(hi - lo);
        const double offset = -(double)lo * scale;
        for (int i = 0; i < 256; i++) {
            const double v = (double)i * scale + offset;
            int32_t ix = (int32_t)v;  // Python int(): toward zero
            lut[i] = (uint8_t)(ix < 0 ? 0 : (ix > 255 ? 255 : ix));
        }
        return;
    }
    if (op == STOKE_AUTO_EQUALIZE) {  // ImageOps.equalize
        const uint32_t* h = hist + 256 * c;
        uint64_t total = 0;
        uint32_t last = 0, nonzero = 0;
        for (int i = 0; i < 256; i++) {
            if (h[i]) {
                total += h[i];
                last = h[i];
                nonzero++;
            }
        }
        const uint64_t step = nonzero <= 1u ? 0u : (total - last) / 255u;
        if (step == 0u) {
            for (int i = 0; i < 256; i++) lut[i] = (uint8_t)i;
            return;
        }
        uint64_t n = step / 2u;
        for (int i = 0; i < 256; i++) {
            const uint64_t v = n / step;
            lut[i] = (uint8_t)(v > 255u ? 255u : v);  // Pillow's point() clips the table to 8 bits
            n += h[i];
        }
        return;
    }
    if (op == STOKE_AUTO_CONTRAST) {  // ImageEnhance.Contrast: blend with the mean luma
        uint64_t sum = 0;
        for (int i = 0; i < 256; i++) sum += (uint64_t)i * hist[768 + i];
        // int(ImageStat mean + 0.5): the mean in double (the sum and count are exact integers)
        const double mean = pixels ? (double)sum / (double)pixels : 0.0;
        const uint32_t m = (uint32_t)(int32_t)(mean + 0.5);
        for (int i = 0; i < 256; i++) lut[i] = stoke_pil_blend(m, (uint32_t)i, o->arg);
        return;
    }
    for (int i = 0; i < 256; i++) {
        uint32_t v = (uint32_t)i;
        if (op == STOKE_AUTO_INVERT) {
            v = 255u - v;
        } else if (op == STOKE_AUTO_POSTERIZE) {  // keep the top `bits` bits (0 bits: black)
            const int32_t bits = (int32_t)o->arg;
            if (bits < 8) v = bits <= 0 ? 0u : (v & (0xffu << (8 - bits)) & 0xffu);
        } else if (op == STOKE_AUTO_SOLARIZE) {  // i < threshold ? i : 255 − i
            v = (float)i < o->arg ? v : 255u - v;
        } else if (op == STOKE_AUTO_SOLARIZE_ADD) {  // timm: i < 128 ? min(255, i + add) : i
            const int32_t add = (int32_t)o->arg;
            if (i < 128) {
                int32_t s = i + add;
                v = (uint32_t)(s > 255 ? 255 : (s < 0 ? 0 : s));
            }
        } else if (op == STOKE_AUTO_BRIGHTNESS) {  // ImageEnhance.Brightness: blend with black
            v = stoke_pil_blend(0u, v, o->arg);
        }
        lut[i] = (uint8_t)v;
    }
}

// Pillow's FLOOR for the transform filters: toward zero for v ≥ 0, floor below.
STOKE_HD int32_t stoke_pil_floor(double v) { return v < 0.0 ? (int32_t)floor(v) : (int32_t)v; }

STOKE_HD int32_t stoke_clip_index(int32_t i, int32_t n) { return i < 0 ? 0 : (i < n ? i : n - 1); }

// Python's round(v, 15) for |v| ≤ 1 (what Image.rotate applies to cos and sin): the nearest
// multiple of 1e-15 to the exact value of v, ties to even, as a double. v·1e15 is formed with
// its rounding error (Dekker's exact product, no FMA), so a product that lands on a half is
// resolved by the exact value as Python's decimal rounding does.
STOKE_HD double stoke_round15(double v) {
    const double b = 1e15;
    const double p = v * b;
    const double ca = 134217729.0 * v, cb = 134217729.0 * b;
    const double ah = ca - (ca - v), al = v - ah;
    const double bh = cb - (cb - b), bl = b - bh;
    const double err = (((ah * bh - p) + ah * bl) + al * bh) + al * bl;  // v·b = p + err exactly
    const double f = floor(p);
    const double d = p - f;
    double r;
    if (d > 0.5 || (d == 0.5 && err > 0.0)) {
        r = f + 1.0;
    } else if (d < 0.5 || err < 0.0) {
        r = f;
    } else {
        r = floor(f * 0.5) * 2.0 == f ? f : f + 1.0;
    }
    return r / b;
}

// sin and cos of an angle in radians, as libm gives them for the double `t` Python's
// math.radians produced (|t| < 2^19): Cody–Waite reduction by π/2 in three parts (exact
// products for the quadrant counts that occur), then the Taylor series of stoke_sincos_deg
// on |r| ≤ π/4: within an ulp of the correctly rounded values, so Image.rotate's
// round(·, 15) sees the same numbers Python's math.sin/cos give it.
STOKE_HD void stoke_sincos_rad(double t, double* s, double* c) {
    const double k = floor(t * 0.63661977236758134 + 0.5);  // nearest multiple of π/2
    const double r = ((t - k * 1.5707963267341256) - k * 6.077100506506192e-11) - k * 2.0222662487959506e-21;
    const double r2 = r * r;
    const double sn = r * (1.0 + r2 * (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880 +
                      r2 * (-1.0 / 39916800 + r2 * (1.0 / 6227020800.0 + r2 * (-1.0 / 1307674368000.0 +
                      r2 * (1.0 / 355687428096000.0)))))))));
    const double cs = 1.0 + r2 * (-1.0 / 2 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 +
                      r2 * (-1.0 / 3628800 + r2 * (1.0 / 479001600.0 + r2 * (-1.0 / 87178291200.0 +
                      r2 * (1.0 / 20922789888000.0 + r2 * (-1.0 / 6402373705728000.0)))))))));
    const int64_t q = (int64_t)k;
    switch ((int)(q & 3)) {
        case 0: *s = sn; *c = cs; break;
        case 1: *s = cs; *c = -sn; break;
        case 2: *s = -sn; *c = -cs; break;
        default: *s = -cs; *c = sn; break;
    }
}

// The forward matrix Pillow's Image.transform(AFFINE, a) takes for a geometric op on a W×H
// image: output pixel centre (x + ½, y + ½) → input position (a0·x' + a1·y') + a2, ….
// Returns 0 when the op is an exact transpose instead (Rotate by a multiple of 90°, on a square
// image for 90/270), with *quarter the counter-clockwise quarter turns (0 = copy).
STOKE_HD int stoke_auto_matrix(const StokeAutoOp* o, int32_t W, int32_t H, double a[6], int32_t* quarter) {
    a[0] = 1.0;
    a[1] = 0.0;
    a[2] = 0.0;
    a[3] = 0.0;
    a[4] = 1.0;
    a[5] = 0.0;
    *quarter = 0;
    const double arg = (double)o->arg;
    switch (o->op) {
        case STOKE_AUTO_SHEAR_X: a[1] = arg; return 1;
        case STOKE_AUTO_SHEAR_Y: a[3] = arg; return 1;
        case STOKE_AUTO_TRANSLATE_X: a[2] = arg; return 1;
        case STOKE_AUTO_TRANSLATE_Y: a[5] = arg; return 1;
        default: break;
    }
    // Image.rotate(angle): angle % 360 (Python: result in [0, 360)), transposes for 0/90/180/270,
    // else the inverse rotation about (W/2, H/2) with cos and sin rounded to 15 decimals.
    double d = fmod(arg, 360.0);
    if (d < 0.0) d = d + 360.0;
    if (d == 0.0 || d == 180.0 || ((d == 90.0 || d == 270.0) && W == H)) {
        *quarter = (int32_t)(d / 90.0);
        return 0;
    }
    // angle = −radians(d) (math.radians: d·(π/180) in double); cos(−θ) = cos θ, sin(−θ) = −sin θ
    double s, c;
    stoke_sincos_rad(d * (3.141592653589793 / 180.0), &s, &c);
    const double m0 = stoke_round15(c), m1 = stoke_round15(-s), m3 = stoke_round15(s), m4 = stoke_round15(c);
    const double cx = (double)W / 2.0, cy = (double)H / 2.0;
    a[0] = m0;
    a[1] = m1;
    a[3] = m3;
    a[4] = m4;
    a[2] = (m0 * -cx + m1 * -cy + 0.0) + cx;
    a[5] = (m3 * -cx + m4 * -cy + 0.0) + cy;
    return 1;
}

STOKE_HD int stoke_auto_is_geometric(uint32_t op) {
    return op == STOKE_AUTO_ROTATE || op == STOKE_AUTO_SHEAR_X || op == STOKE_AUTO_SHEAR_Y ||
           op == STOKE_AUTO_TRANSLATE_X || op == STOKE_AUTO_TRANSLATE_Y;
}

// What a geometric op needs per image, computed once (stoke_auto_prepare) before its pixels:
// stoke_auto_matrix's results. Unused by the other ops.
struct StokeAutoGeom {
    double m[6];      // forward matrix (affine)
    int32_t affine;   // 0: an exact transpose by `quarter` quarter turns instead
    int32_t quarter;
};

STOKE_HD void stoke_auto_prepare(const StokeAutoOp* o, int32_t W, int32_t H, StokeAutoGeom* g) {
    g->affine = 0;
    g->quarter = 0;
    for (int i = 0; i < 6; i++) g->m[i] = 0.0;
    if (stoke_auto_is_geometric(o->op)) g->affine = stoke_auto_matrix(o, W, H, g->m, &g->quarter);
}

// Pillow's bicubic interpolation of four values (Geometry.c BICUBIC, a = −0.5).
STOKE_HD double stoke_pil_cubic(double v1, double v2, double v3, double v4, double d) {
    const double p1 = v2;
    const double p2 = -v1 + v3;
    const double p3 = ((2.0 * (v1 - v2)) + v3) - v4;
    const double p4 = ((-v1 + v2) - v3) + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

// Where output pixel (x, y) of an affine geometric op reads (g->affine set): the top-left tap
// (*ix, *iy) and the filter's offsets (*dx, *dy) from it, as Pillow's affine transform computes
// them; 0 when the position falls outside [0, W) × [0, H) (the pixel is the fill colour).
STOKE_HD int stoke_auto_source(const StokeAutoGeom* g, int32_t W, int32_t H, int32_t x, int32_t y, int32_t* ix, int32_t* iy,
                               double* dx, double* dy) {
    const double* a = g->m;
    const double xo = (double)x + 0.5, yo = (double)y + 0.5;
    double xin = (a[0] * xo + a[1] * yo) + a[2];
    double yin = (a[3] * xo + a[4] * yo) + a[5];
    if (xin < 0.0 || xin >= (double)W || yin < 0.0 || yin >= (double)H) return 0;
    xin = xin - 0.5;
    yin = yin - 0.5;
    *ix = stoke_pil_floor(xin);
    *iy = stoke_pil_floor(yin);
    *dx = xin - (double)*ix;
    *dy = yin - (double)*iy;
    return 1;
}

// The 4×4 bicubic taps around (ix, iy): the rows' pointers (Pillow reads row YCLIP(y) for the
// first, and repeats the previous row's for later rows outside the image: the same pointer
// gives the same value) and the columns' byte offsets, clamped.
STOKE_HD void stoke_auto_bicubic_taps(const uint8_t* img, int32_t W, int32_t H, int32_t ix, int32_t iy, const uint8_t* rp[4],
                                      int32_t xs[4]) {
    const size_t stride = (size_t)W * 3u;
    rp[0] = img + (size_t)stoke_clip_index(iy - 1, H) * stride;
    for (int k = 1; k < 4; k++) {
        const int32_t yy = iy - 1 + k;
        rp[k] = (yy >= 0 && yy < H) ? img + (size_t)yy * stride : rp[k - 1];
    }
    for (int k = 0; k < 4; k++) xs[k] = stoke_clip_index(ix - 1 + k, W) * 3;
}

// One output pixel of a geometric op: Pillow's generic affine transform with its bilinear
// (flags without STOKE_AUTO_BICUBIC) or bicubic filter; the fill colour where the position
// falls outside [0, W) × [0, H).
// `g` is stoke_auto_prepare's for this op and image size.
STOKE_HD void stoke_auto_geometric(const StokeAutoOp* o, const StokeAutoGeom* g, const uint8_t fill[4],
                                   const uint8_t* img, int32_t W, int32_t H, int32_t x, int32_t y, uint8_t out[3]) {
    if (!g->affine) {
        int32_t px, py;
        stoke_rot90_src(g->quarter, x, y, W, H, &px, &py);
        const uint8_t* s = img + ((size_t)py * (size_t)W + (size_t)px) * 3u;
        out[0] = s[0];
        out[1] = s[1];
        out[2] = s[2];
        return;
    }
    int32_t ix, iy;
    double dx, dy;
    if (!stoke_auto_source(g, W, H, x, y, &ix, &iy, &dx, &dy)) {
        out[0] = fill[0];
        out[1] = fill[1];
        out[2] = fill[2];
        return;
    }
    if ((o->flags & STOKE_AUTO_BICUBIC) == 0u) {
        const int32_t x0 = stoke_clip_index(ix, W), x1 = stoke_clip_index(ix + 1, W);
        const uint8_t* r0 = img + (size_t)stoke_clip_index(iy, H) * (size_t)W * 3u;
        const int has1 = iy + 1 >= 0 && iy + 1 < H;
        const uint8_t* r1 = img + (size_t)(has1 ? iy + 1 : 0) * (size_t)W * 3u;
        for (int c = 0; c < 3; c++) {
            const double a0 = (double)r0[x0 * 3 + c], b0 = (double)r0[x1 * 3 + c];
            const double v1 = a0 + (b0 - a0) * dx;
            double v2 = v1;
            if (has1) {
                const double a1 = (double)r1[x0 * 3 + c], b1 = (double)r1[x1 * 3 + c];
                v2 = a1 + (b1 - a1) * dx;
            }
            const double v = v1 + (v2 - v1) * dy;
            out[c] = (uint8_t)(int32_t)v;
        }
        return;
    }
    const uint8_t* rp[4];
    int32_t xs[4];
    stoke_auto_bicubic_taps(img, W, H, ix, iy, rp, xs);
    for (int c = 0; c < 3; c++) {
        double rows[4];
        for (int k = 0; k < 4; k++) {
            const uint8_t* r = rp[k] + c;
            rows[k] = stoke_pil_cubic((double)r[xs[0]], (double)r[xs[1]], (double)r[xs[2]], (double)r[xs[3]], dx);
        }
        const double v = stoke_pil_cubic(rows[0], rows[1], rows[2], rows[3], dy);
        out[c] = v <= 0.0 ? 0 : (v >= 255.0 ? 255 : (uint8_t)(int32_t)v);
    }
}

// Pillow's SMOOTH filter (3×3, 1 1 1 / 1 5 1 / 1 1 1, ÷ 13, + 0.5, truncated, in f32 in
// Filter.c's order) at (x, y) channel c; border pixels are the image's own.
STOKE_HD uint32_t stoke_pil_smooth(const uint8_t* img, int32_t W, int32_t H, int32_t x, int32_t y, int c) {
    const uint8_t* ctr = img + ((size_t)y * (size_t)W + (size_t)x) * 3u + c;
    if (x == 0 || y == 0 || x == W - 1 || y == H - 1) return *ctr;
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    const size_t row = (size_t)W * 3u;
    const uint8_t* below = ctr + row;
    const uint8_t* above = ctr - row;
    float ss = 0.5f;
    ss = ss + (((float)below[-3] * k1 + (float)below[0] * k1) + (float)below[3] * k1);
    ss = ss + (((float)ctr[-3] * k1 + (float)ctr[0] * k5) + (float)ctr[3] * k1);
    ss = ss + (((float)above[-3] * k1 + (float)above[0] * k1) + (float)above[3] * k1);
    ss = ss < 0.0f ? 0.0f : ss;
    ss = ss > 255.0f ? 255.0f : ss;
    return (uint32_t)(int32_t)ss;
}

// One output pixel of op `o` applied to the W×H interleaved RGB image `img`. `lut` holds the
// op's three channel tables (3 × 256) for table ops, `g` its stoke_auto_prepare for geometric
// ops (both built once per image and op).
STOKE_HD void stoke_auto_pixel(const StokeAutoOp* o, const StokeAutoGeom* g, const uint8_t fill[4], const uint8_t* lut,
                               const uint8_t* img, int32_t W, int32_t H, int32_t x, int32_t y, uint8_t out[3]) {
    const uint32_t op = o->op;
    const uint8_t* px = img + ((size_t)y * (size_t)W + (size_t)x) * 3u;
    if (stoke_auto_is_table(op)) {
        out[0] = lut[px[0]];
        out[1] = lut[256 + px[1]];
        out[2] = lut[512 + px[2]];
    } else if (op == STOKE_AUTO_COLOR) {  // ImageEnhance.Color: blend with L → RGB
        const uint32_t l = stoke_pil_luma(px);
        for (int c = 0; c < 3; c++) out[c] = stoke_pil_blend(l, px[c], o->arg);
    } else if (op == STOKE_AUTO_SHARPNESS) {  // ImageEnhance.Sharpness: blend with SMOOTH
        for (int c = 0; c < 3; c++) out[c] = stoke_pil_blend(stoke_pil_smooth(img, W, H, x, y, c), px[c], o->arg);
    } else if (stoke_auto_is_geometric(op)) {
        stoke_auto_geometric(o, g, fill, img, W, H, x, y, out);
    } else {
        out[0] = px[0];
        out[1] = px[1];
        out[2] = px[2];
    }
}
