// The one definition of stoke's blur and solarize math: torchvision's GaussianBlur, Pillow's
// ImageFilter.GaussianBlur (DINO's form) and RandomSolarize. STOKE_HD like augment_math.cuh:
// compiled for the device by nvcc and for the host by build.rs, IEEE +, −, ×, ÷, sqrt, floor
// and integer arithmetic only, no contraction, so both backends give the same bits.
//
// Where it sits in a pixel's life (augment/mod.rs documents the whole order):
//   geometry → [AutoAugment] → ColorJitter → RandomGrayscale
//   → blur (when drawn) → solarize (when drawn) → normalize → RandomErasing → cast,
// DINO's order (flip, jitter, grayscale, GaussianBlur, Solarization, ToTensor, Normalize) and
// torchvision's when GaussianBlur follows the color steps.
//
// A blur needs the neighbours of an output pixel after the color steps, so it cannot be part
// of the fused per-pixel pass. It runs on a uint8 image of the whole sample: the color steps'
// result rounded half to even (stoke_to_u8, what a uint8 torchvision pipeline or a PIL image
// holds there), then passes over it, then the fused pass reads the blurred bytes in place of
// its own color result (kernels/augment.cu: stoke_blur_base, stoke_blur_pass; the CPU backend
// runs the same functions over its held image, kernels/host/augment_blur.h).
//
// - GAUSS, torchvision `gaussian_blur_image` on a uint8 image: the image to float32, reflect
//   padding of ksize/2, a 2-D convolution with the outer product of two 1-D kernels
//   (`_get_gaussian_kernel1d`, stoke_gauss_weights: exp(−½·(i/σ)²) normalised, computed
//   as torchvision writes it in f32), then `round_()` (half to even) to uint8.
//   Here the convolution is separable in f32: a horizontal pass into an f32 image (pass 0),
//   then the vertical pass and the rounding (pass 1). The sums are in another order than
//   torch's conv2d (and exp is ours, to ~1 ulp of double), so a value may differ from
//   torchvision's by one level where the exact result lies within ~1e-4 of a half.
// - PIL, Pillow `ImagingGaussianBlur(radius, passes = 3)` (libImaging/BoxBlur.c): the radius
//   becomes an extended box radius (`_gaussian_blur_radius`, Gwosdek et al.), then three
//   horizontal and three vertical passes, each a box of 2r+1 pixels with weight ww and the two
//   pixels just outside it with weight fw, in 8.24 fixed point, edges replicated, rounded to
//   uint8 after every pass. Integer arithmetic once ww is known: equal to Pillow bit for bit.
// - solarize, torchvision `solarize` / PIL `ImageOps.solarize`: v ≥ threshold → 255 − v, on
//   the 0..255 value as it is there (an integer after a blur; the f32 color result otherwise,
//   which is torchvision's float-image solarize).
#pragma once
#include "augment_math.cuh"

#define STOKE_PIL_PASSES 3    // Pillow's GaussianBlur: box passes per axis
#define STOKE_BLUR_PASSES 6   // the most passes either kind runs (PIL: 3 + 3)

// e^(−q) for q ≥ 0 in double from IEEE operations only: q = n·ln2 + r, |r| ≤ ln2/2 (ln2 split
// in two so n·ln2_hi is exact), Taylor series of e^(−r) to r^16 (truncation < 1e-17), times
// 2^(−n) by exact halvings. Below 2^-150 (q > 104) the f32 result is 0 anyway.
STOKE_HD double stoke_exp_neg(double q) {
    if (!(q < 104.0)) return 0.0;
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double n = floor(q * 1.44269504088896338700 + 0.5);
    const double r = (q - n * ln2_hi) - n * ln2_lo;  // e^(−q) = e^(−r) · 2^(−n)
    double t = 1.0;
    for (int k = 16; k >= 1; k--) t = 1.0 - r * t / (double)k;  // Horner: 1 − r(1 − r/2(1 − …))
    for (int k = 0; k < (int)n; k++) t = t * 0.5;
    return t;
}

// torchvision's 1-D kernel of odd size k ≤ STOKE_BLUR_KMAX for sigma (f32, as drawn) into
// w[0..k), as `_get_gaussian_kernel1d` computes it in float32: lim = (k − 1)/(2·√2) (double,
// then f32), x = linspace(−lim, lim, k) (torch's CPU form: start + step·i for the first half,
// end − step·(k−1−i) for the rest), softmax(−(x/σ)²) = exp(v − max v) / Σ exp(v − max v).
STOKE_HD void stoke_gauss_weights(uint32_t k, float sigma, float* w) {
    const float lim = (float)((double)(k - 1u) / (2.0 * 1.4142135623730951));
    const float step = k > 1u ? (lim - (-lim)) / (float)(k - 1u) : 0.0f;
    float top = -3.0e38f;
    for (uint32_t i = 0; i < k; i++) {
        const float x = i < k / 2u ? -lim + step * (float)i : lim - step * (float)(k - 1u - i);
        const float t = x / sigma;
        w[i] = -(t * t);
        top = w[i] > top ? w[i] : top;
    }
    float sum = 0.0f;
    for (uint32_t i = 0; i < k; i++) {
        w[i] = (float)stoke_exp_neg(-(double)(w[i] - top));
        sum = sum + w[i];
    }
    for (uint32_t i = 0; i < k; i++) w[i] = w[i] / sum;
}

// torch's reflect padding: index i of a line of n pixels (|overhang| < n, checked by the config).
STOKE_HD int32_t stoke_reflect(int32_t i, int32_t n) {
    if (i < 0) i = -i;
    if (i >= n) i = 2 * n - 2 - i;
    return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

// GAUSS pass 0, pixel (x, y): Σ_k w[k]·img(x + k − k/2, y), reflect-padded, the three channels
// in f32 (taps in order k = 0..ksize−1). `img` is interleaved RGB, W × H.
STOKE_HD void stoke_gauss_h(const uint8_t* img, int32_t W, int32_t x, int32_t y, const float* w, uint32_t k,
                            float out[3]) {
    const int32_t h = (int32_t)(k / 2u);
    const uint8_t* row = img + (size_t)y * (size_t)W * 3u;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
    for (int32_t i = 0; i < (int32_t)k; i++) {
        const uint8_t* px = row + (size_t)stoke_reflect(x + i - h, W) * 3u;
        a0 = a0 + w[i] * (float)px[0];
        a1 = a1 + w[i] * (float)px[1];
        a2 = a2 + w[i] * (float)px[2];
    }
    out[0] = a0;
    out[1] = a1;
    out[2] = a2;
}

// GAUSS pass 1, pixel (x, y): Σ_k w[k]·hor(x, y + k − k/2) over pass 0's f32 image, rounded
// half to even to uint8 (torch's round_() then .to(uint8)).
STOKE_HD void stoke_gauss_v(const float* hor, int32_t W, int32_t H, int32_t x, int32_t y, const float* w, uint32_t k,
                            uint8_t out[3]) {
    const int32_t h = (int32_t)(k / 2u);
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
    for (int32_t i = 0; i < (int32_t)k; i++) {
        const float* px = hor + ((size_t)stoke_reflect(y + i - h, H) * (size_t)W + (size_t)x) * 3u;
        a0 = a0 + w[i] * px[0];
        a1 = a1 + w[i] * px[1];
        a2 = a2 + w[i] * px[2];
    }
    out[0] = stoke_to_u8(a0);
    out[1] = stoke_to_u8(a1);
    out[2] = stoke_to_u8(a2);
}

// Pillow's box of one GaussianBlur pass: `_gaussian_blur_radius(radius, 3)` (its float and
// double steps as Pillow's C compiles them), then ImagingHorizontalBoxBlur's integer radius r
// and 8.24 weights ww (each of the 2r+1 box pixels) and fw (each of the two beyond it).
struct StokePilBox {
    int32_t r;
    uint32_t ww, fw;
};

STOKE_HD StokePilBox stoke_pil_box(float radius) {
    const float sigma2 = radius * radius / (float)STOKE_PIL_PASSES;
    const float L = (float)sqrt(12.0 * (double)sigma2 + 1.0);
    const float l = (float)floor(((double)L - 1.0) / 2.0);
    float a = (2.0f * l + 1.0f) * (l * (l + 1.0f) - 3.0f * sigma2);
    a = a / (6.0f * (sigma2 - (l + 1.0f) * (l + 1.0f)));
    const float fr = l + a;
    StokePilBox b;
    b.r = (int32_t)fr;
    b.ww = (uint32_t)(16777216.0f / (fr * 2.0f + 1.0f));
    b.fw = (16777216u - (uint32_t)(b.r * 2 + 1) * b.ww) / 2u;
    return b;
}

// One PIL pass at pixel (x, y) along `axis` (0: rows, 1: columns) of the W × H uint8 image:
// (ww·Σ_{|d|≤r} p(i+d) + fw·(p(i−r−1) + p(i+r+1)) + 2^23) >> 24, indices clamped to the line
// (what Pillow's running sum computes, edges replicated).
STOKE_HD void stoke_pil_pass_pixel(const uint8_t* img, int32_t W, int32_t H, int32_t x, int32_t y, int axis,
                                   StokePilBox b, uint8_t out[3]) {
    const int32_t n = axis ? H : W, i = axis ? y : x;
    const size_t step = axis ? (size_t)W * 3u : 3u;
    const uint8_t* line = img + (axis ? (size_t)x * 3u : (size_t)y * (size_t)W * 3u);
    uint32_t s0 = 0u, s1 = 0u, s2 = 0u;
    for (int32_t d = -b.r; d <= b.r; d++) {
        int32_t j = i + d;
        j = j < 0 ? 0 : (j >= n ? n - 1 : j);
        const uint8_t* px = line + (size_t)j * step;
        s0 += px[0];
        s1 += px[1];
        s2 += px[2];
    }
    int32_t lo = i - b.r - 1, hi = i + b.r + 1;
    lo = lo < 0 ? 0 : lo;
    hi = hi >= n ? n - 1 : hi;
    const uint8_t* pl = line + (size_t)lo * step;
    const uint8_t* ph = line + (size_t)hi * step;
    out[0] = (uint8_t)((s0 * b.ww + ((uint32_t)pl[0] + ph[0]) * b.fw + (1u << 23)) >> 24);
    out[1] = (uint8_t)((s1 * b.ww + ((uint32_t)pl[1] + ph[1]) * b.fw + (1u << 23)) >> 24);
    out[2] = (uint8_t)((s2 * b.ww + ((uint32_t)pl[2] + ph[2]) * b.fw + (1u << 23)) >> 24);
}

// Passes each kind runs (GAUSS: horizontal into f32, vertical back to uint8; PIL: 3 + 3).
STOKE_HD int stoke_blur_passes(uint32_t kind) {
    return kind == STOKE_BLUR_GAUSS ? 2 : (kind == STOKE_BLUR_PIL ? 2 * STOKE_PIL_PASSES : 0);
}

// Which of the two uint8 images (0: the color result, 1: the other) pass `pass` reads; it
// writes the other one (GAUSS pass 0 writes the f32 image instead, and pass 1 reads that).
STOKE_HD int stoke_blur_src(uint32_t kind, int pass) {
    return kind == STOKE_BLUR_GAUSS ? 0 : (pass & 1);
}

// The uint8 image that holds the blurred result.
STOKE_HD int stoke_blur_result(uint32_t kind) {
    return kind == STOKE_BLUR_GAUSS ? 1 : (stoke_blur_passes(kind) & 1);
}

// Pass `pass` of `bp` at pixel (x, y): reads `src` (uint8) or `hor` (f32), writes `dst`
// (uint8) or `hor`. `w` holds the GAUSS weights (stoke_gauss_weights), `box` the PIL box.
STOKE_HD void stoke_blur_pass_pixel(const StokeBlurParams* bp, int pass, const float* w, StokePilBox box,
                                    const uint8_t* src, uint8_t* dst, float* hor, int32_t W, int32_t H, int32_t x,
                                    int32_t y) {
    const size_t at = ((size_t)y * (size_t)W + (size_t)x) * 3u;
    if (bp->kind == STOKE_BLUR_GAUSS) {
        if (pass == 0) {
            stoke_gauss_h(src, W, x, y, w, bp->ksize, hor + at);
        } else {
            stoke_gauss_v(hor, W, H, x, y, w, bp->ksize, dst + at);
        }
    } else {
        stoke_pil_pass_pixel(src, W, H, x, y, pass < STOKE_PIL_PASSES ? 0 : 1, box, dst + at);
    }
}

// RandomSolarize on one pixel's 0..255 values (when it fired).
STOKE_HD void stoke_solarize(const StokeBlurParams* bp, float v[3]) {
    if (!bp->solarize) return;
    for (int c = 0; c < 3; c++) v[c] = v[c] >= bp->threshold ? 255.0f - v[c] : v[c];
}

STOKE_HD int stoke_blur_active(const StokeBlurParams* bp) {
    return bp->kind != STOKE_BLUR_NONE;
}
