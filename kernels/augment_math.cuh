// The one definition of stoke's per-pixel augment math (docs/CONTRACTS.md, contract 2).
//
// Everything here is a STOKE_HD function: compiled for the device by nvcc (kernels/augment.cu
// includes this file) and for the host by build.rs (kernels/host/augment_host.cpp), so the CPU
// backend and CI run the exact source the GPU runs. Only IEEE +, −, ×, ÷, floor and
// conversions are used, never libm transcendentals, and both builds forbid FMA contraction
// (-ffp-contract=off / -fmad=false): the same inputs give the same bits on both sides.
//
// Geometry, applied in this order (the code below runs it backwards, output → source):
//   EXIF orientation → crop → resize → window → flip → rotate → normalize → cast.
// Semantics follow torchvision / Pillow (docs/CONTRACTS.md, "Semantics"):
// - resize: per-axis filter taps exactly as Pillow's `precompute_coeffs` (antialiased; the
//   same formula with support = a when upscaling, as torch's `antialias=True`), or torch's
//   non-antialiased `align_corners=False` bilinear / bicubic (a = −0.75) when antialias is off.
//   One resized pixel is `acc = Σ_ky wy[ky]·(Σ_kx wx[kx]·src)` in f32 in exactly that order,
//   then clamped to [0, 255] (the range of the uint8 image torchvision would hold).
// - flip: exact mirror of the output window.
// - rotate: torchvision `rotate(expand=False)`: inverse rotation about the window centre,
//   pixel-centre grid, `grid_sample(align_corners=False)`, nearest (round half to even) or
//   bilinear, fill outside; angles that are multiples of 90° (90/270 on square outputs only)
//   are exact index permutations, as torchvision's fast path.
// - normalize `(x/255 − mean)/std` in f32, cast with round-to-nearest-even.
#pragma once
#include "stoke_common.cuh"
#include "stoke_params.cuh"
#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#include <math.h>
#endif

// ---------------------------------------------------------------------------------------
// EXIF orientation: oriented (x, y) → stored (sx, sy)
// ---------------------------------------------------------------------------------------

// Oriented size of a stored w×h image: tags 5..8 swap the axes.
STOKE_HD void stoke_oriented_size(uint32_t o, int32_t stored_w, int32_t stored_h, int32_t* w, int32_t* h) {
    if (o >= 5u && o <= 8u) {
        *w = stored_h;
        *h = stored_w;
    } else {
        *w = stored_w;
        *h = stored_h;
    }
}

// Oriented pixel (x, y) of an oriented W×H image → stored pixel (sx, sy). The oriented image
// is what Pillow's `ImageOps.exif_transpose` returns:
//   1 identity, 2 mirror left↔right, 3 rotate 180, 4 mirror top↔bottom, 5 transpose,
//   6 rotate 90° clockwise, 7 transverse, 8 rotate 90° counter-clockwise.
// Tags outside 1..8 are treated as 1.
STOKE_HD void stoke_orient_to_stored(uint32_t o, int32_t x, int32_t y, int32_t W, int32_t H, int32_t* sx, int32_t* sy) {
    switch (o) {
        case 2u: *sx = W - 1 - x; *sy = y; break;
        case 3u: *sx = W - 1 - x; *sy = H - 1 - y; break;
        case 4u: *sx = x; *sy = H - 1 - y; break;
        case 5u: *sx = y; *sy = x; break;
        case 6u: *sx = y; *sy = W - 1 - x; break;
        case 7u: *sx = H - 1 - y; *sy = W - 1 - x; break;
        case 8u: *sx = H - 1 - y; *sy = x; break;
        default: *sx = x; *sy = y; break;
    }
}

// The same mapping as a byte-offset affine form for an interleaved RGB buffer with
// `row_stride` bytes per stored row: offset(x, y) = base + x·step_x + y·step_y.
// (Every orientation is affine, so loops can step instead of calling the switch per pixel.)
STOKE_HD void stoke_orient_affine(uint32_t o, int32_t W, int32_t H, int64_t row_stride, int64_t* base,
                                  int64_t* step_x, int64_t* step_y) {
    int32_t x0, y0, x1, y1, x2, y2;
    stoke_orient_to_stored(o, 0, 0, W, H, &x0, &y0);
    stoke_orient_to_stored(o, 1, 0, W, H, &x1, &y1);
    stoke_orient_to_stored(o, 0, 1, W, H, &x2, &y2);
    *base = (int64_t)y0 * row_stride + (int64_t)x0 * 3;
    *step_x = (int64_t)(y1 - y0) * row_stride + (int64_t)(x1 - x0) * 3;
    *step_y = (int64_t)(y2 - y0) * row_stride + (int64_t)(x2 - x0) * 3;
}

// ---------------------------------------------------------------------------------------
// Resize filter taps, one axis
// ---------------------------------------------------------------------------------------

#define STOKE_AXIS_AA 0u       // Pillow precompute_coeffs (torch antialias=True)
#define STOKE_AXIS_LINEAR 1u   // torch bilinear, align_corners=False, antialias=False
#define STOKE_AXIS_CUBIC 2u    // torch bicubic a=-0.75, align_corners=False, antialias=False

// One output index of one axis: taps `xmin + k` for k in [0, count), each clamped to
// [0, in_size) (only the non-antialiased bicubic ever clamps), weights from stoke_axis_weight.
struct StokeAxis {
    int32_t xmin;     // first tap
    int32_t count;    // number of taps
    int32_t in_size;  // source length (taps are clamped to it)
    uint32_t mode;    // STOKE_AXIS_*
    uint32_t filter;  // STOKE_FILTER_*
    int32_t num_step; // AA: 2·out
    int64_t num0;     // AA: numerator of tap 0's filter argument (see stoke_axis_init)
    float den;        // AA: its denominator, 2·max(in, out)
    float t;          // LINEAR/CUBIC: fractional source position in [0, 1)
    float total;      // AA: sum of the raw weights in tap order (the normaliser)
};

// Pillow's triangle filter (support 1).
STOKE_HD float stoke_filter_triangle(float x) {
    if (x < 0.0f) x = -x;
    return x < 1.0f ? 1.0f - x : 0.0f;
}

// Keys' cubic with parameter a (support 2), written as Pillow/torch write it.
STOKE_HD float stoke_filter_cubic(float x, float a) {
    if (x < 0.0f) x = -x;
    if (x < 1.0f) return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
    if (x < 2.0f) return (((x - 5.0f) * x + 8.0f) * x - 4.0f) * a;
    return 0.0f;
}

STOKE_HD float stoke_axis_raw_aa(const StokeAxis* ax, int32_t k) {
    float u = (float)(ax->num0 + (int64_t)ax->num_step * k) / ax->den;
    return ax->filter == STOKE_FILTER_BICUBIC ? stoke_filter_cubic(u, -0.5f) : stoke_filter_triangle(u);
}

// Taps of output index `i` when `in_size` source pixels are resized to `out_size`: everything
// stoke_axis_init sets but the antialiased filter's normaliser `total` (1 here), which only
// the weights read; the CPU backend sizes its tables from this alone.
STOKE_HD void stoke_axis_taps(int32_t in_size, int32_t out_size, int32_t i, uint32_t filter, uint32_t antialias,
                              StokeAxis* ax) {
    ax->in_size = in_size;
    ax->filter = filter;
    ax->num0 = 0;
    ax->num_step = 0;
    ax->den = 1.0f;
    ax->t = 0.0f;
    ax->total = 1.0f;
    if (antialias) {
        // Pillow precompute_coeffs / torch _upsample_*_aa, in exact integer arithmetic:
        //   centre c = (i + ½)·in/out, filterscale fs = max(in/out, 1), support = a·fs,
        //   xmin = max(int(c − support + ½), 0), xmax = min(int(c + support + ½), in),
        //   raw weight of tap j = filter((j − c + ½)/fs), normalised by their sum.
        // With M = max(in, out) every quantity is a ratio of integers:
        //   c − support + ½ = ((2i+1)·in − 2a·M + out) / (2·out)
        //   (j − c + ½)/fs  = (2·out·j − (2i+1)·in + out) / (2·M)
        // so the taps are exact and each filter argument is one rounding from exact (Pillow
        // computes them in double; f32 here would lose 1e-5 on large images).
        const int64_t in = in_size, out = out_size, M = in > out ? in : out;
        const int64_t a = filter == STOKE_FILTER_BICUBIC ? 2 : 1;
        const int64_t lo = (2 * (int64_t)i + 1) * in - 2 * a * M + out;
        const int64_t hi = (2 * (int64_t)i + 1) * in + 2 * a * M + out;
        int64_t xmin = lo > 0 ? lo / (2 * out) : 0;
        int64_t xmax = hi / (2 * out);
        if (xmax > in) xmax = in;
        if (xmin > in - 1) xmin = in - 1;  // cannot happen for valid sizes; never empty
        if (xmax <= xmin) xmax = xmin + 1;
        ax->mode = STOKE_AXIS_AA;
        ax->xmin = (int32_t)xmin;
        ax->count = (int32_t)(xmax - xmin);
        ax->num_step = (int32_t)(2 * out);
        ax->num0 = 2 * out * xmin - (2 * (int64_t)i + 1) * in + out;
        ax->den = (float)(2 * M);
    } else if (filter == STOKE_FILTER_BICUBIC) {
        // torch upsample_bicubic2d: real = scale·(i + ½) − ½ in f32 (not clamped), 4 taps
        // from floor(real) − 1, indices clamped to the image.
        float scale = (float)in_size / (float)out_size;
        float real = scale * ((float)i + 0.5f) - 0.5f;
        float fl = floorf(real);
        ax->mode = STOKE_AXIS_CUBIC;
        ax->xmin = (int32_t)fl - 1;
        ax->count = 4;
        ax->t = real - fl;
    } else {
        // torch upsample_bilinear2d: real = max(scale·(i + ½) − ½, 0) in f32, taps x0 and
        // min(x0 + 1, in − 1).
        float scale = (float)in_size / (float)out_size;
        float real = scale * ((float)i + 0.5f) - 0.5f;
        if (real < 0.0f) real = 0.0f;
        int32_t x0 = (int32_t)real;
        ax->mode = STOKE_AXIS_LINEAR;
        ax->xmin = x0;
        ax->count = 2;
        ax->t = real - (float)x0;
    }
}

// Taps of output index `i` when `in_size` source pixels are resized to `out_size`, with the
// antialiased filter's normaliser: the sum of the raw weights in tap order.
STOKE_HD void stoke_axis_init(int32_t in_size, int32_t out_size, int32_t i, uint32_t filter, uint32_t antialias,
                              StokeAxis* ax) {
    stoke_axis_taps(in_size, out_size, i, filter, antialias, ax);
    if (ax->mode == STOKE_AXIS_AA) {
        float total = 0.0f;
        for (int32_t k = 0; k < ax->count; k++) total = total + stoke_axis_raw_aa(ax, k);
        ax->total = total;
    }
}

// Source index of tap k (clamped to the source).
STOKE_HD int32_t stoke_axis_tap(const StokeAxis* ax, int32_t k) {
    int32_t j = ax->xmin + k;
    if (j < 0) j = 0;
    if (j > ax->in_size - 1) j = ax->in_size - 1;
    return j;
}

// An antialiased tap's raw weight `w` normalised.
STOKE_HD float stoke_axis_normalise(const StokeAxis* ax, float w) {
    return ax->total != 0.0f ? w / ax->total : w;
}

// Normalised weight of tap k.
STOKE_HD float stoke_axis_weight(const StokeAxis* ax, int32_t k) {
    if (ax->mode == STOKE_AXIS_AA) return stoke_axis_normalise(ax, stoke_axis_raw_aa(ax, k));
    float t = ax->t;
    if (ax->mode == STOKE_AXIS_LINEAR) return k == 0 ? 1.0f - t : t;
    // torch get_cubic_upsample_coefficients, A = −0.75.
    const float A = -0.75f;
    switch (k) {
        case 0: return stoke_filter_cubic(t + 1.0f, A);
        case 1: return stoke_filter_cubic(t, A);
        case 2: return stoke_filter_cubic(1.0f - t, A);
        default: return stoke_filter_cubic((1.0f - t) + 1.0f, A);
    }
}

// ---------------------------------------------------------------------------------------
// Window and flip: pre-rotation output pixel (x, y) → resized-crop pixel (rx, ry)
// ---------------------------------------------------------------------------------------

STOKE_HD void stoke_window_flip(const StokeAugParams* p, int32_t x, int32_t y, int32_t* rx, int32_t* ry) {
    *rx = p->win_x + (p->flip_h ? p->out_w - 1 - x : x);
    *ry = p->win_y + (p->flip_v ? p->out_h - 1 - y : y);
}

// One resized-crop pixel, all three channels, straight from the stored image: the per-pixel
// form of the separable resize (the CPU backend computes the same sums row by row).
// `src` is interleaved RGB, `row_stride` bytes per stored row, `stored_w × stored_h`.
STOKE_HD void stoke_resized_pixel(const uint8_t* src, int64_t row_stride, const StokeAugParams* p, int32_t rx,
                                  int32_t ry, float out[3]) {
    int64_t base, sx, sy;
    stoke_orient_affine(p->orientation, p->src_w, p->src_h, row_stride, &base, &sx, &sy);
    StokeAxis ax, ay;
    stoke_axis_init(p->crop_w, p->resize_w, rx, p->filter, p->antialias, &ax);
    stoke_axis_init(p->crop_h, p->resize_h, ry, p->filter, p->antialias, &ay);
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f;
    for (int32_t ky = 0; ky < ay.count; ky++) {
        float wy = stoke_axis_weight(&ay, ky);
        int64_t row = base + (int64_t)(p->crop_y + stoke_axis_tap(&ay, ky)) * sy;
        float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f;
        for (int32_t kx = 0; kx < ax.count; kx++) {
            float wx = stoke_axis_weight(&ax, kx);
            const uint8_t* px = src + row + (int64_t)(p->crop_x + stoke_axis_tap(&ax, kx)) * sx;
            r0 = r0 + wx * (float)px[0];
            r1 = r1 + wx * (float)px[1];
            r2 = r2 + wx * (float)px[2];
        }
        acc0 = acc0 + wy * r0;
        acc1 = acc1 + wy * r1;
        acc2 = acc2 + wy * r2;
    }
    out[0] = acc0;
    out[1] = acc1;
    out[2] = acc2;
}

// Clamp a resized value to the uint8 range (bicubic overshoots; torchvision's uint8 path and
// Pillow clip there too).
STOKE_HD float stoke_clamp255(float v) {
    return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
}

// ---------------------------------------------------------------------------------------
// Rotation
// ---------------------------------------------------------------------------------------

// sin and cos of an angle in degrees from IEEE double arithmetic only (exact reduction with
// fmod, then Taylor series on |x| ≤ π/4), so host and device agree bit for bit; accurate to
// a few double ulps, far below the f32 the grid is computed in.
STOKE_HD void stoke_sincos_deg(float deg, double* s, double* c) {
    double d = fmod((double)deg, 360.0);  // exact
    if (d < 0.0) d = d + 360.0;           // [0, 360)
    int q = (int)floor((d + 45.0) / 90.0);  // nearest quadrant 0..4
    double r = (d - 90.0 * (double)q) * (3.14159265358979323846 / 180.0);  // |r| ≤ π/4
    double r2 = r * r;
    // Taylor terms up to r^17 / r^18: truncation error < 1e-17 on |r| ≤ π/4.
    double sn = r * (1.0 + r2 * (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880 +
                r2 * (-1.0 / 39916800 + r2 * (1.0 / 6227020800.0 + r2 * (-1.0 / 1307674368000.0 +
                r2 * (1.0 / 355687428096000.0)))))))));
    double cs = 1.0 + r2 * (-1.0 / 2 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 +
                r2 * (-1.0 / 3628800 + r2 * (1.0 / 479001600.0 + r2 * (-1.0 / 87178291200.0 +
                r2 * (1.0 / 20922789888000.0 + r2 * (-1.0 / 6402373705728000.0)))))))));
    switch (q & 3) {
        case 0: *s = sn; *c = cs; break;
        case 1: *s = cs; *c = -sn; break;
        case 2: *s = -sn; *c = -cs; break;
        default: *s = -cs; *c = sn; break;
    }
}

#define STOKE_ROT_NONE 0u    // angle ≡ 0 and no affine: identity
#define STOKE_ROT_EXACT 1u   // 90/180/270 handled as an index permutation
#define STOKE_ROT_AFFINE 2u  // general angle or RandomAffine matrix: grid_sample

struct StokeRotation {
    uint32_t kind;    // STOKE_ROT_NONE / EXACT / AFFINE
    int32_t quarter;  // EXACT: counter-clockwise quarter turns 1..3
    float c, s;       // AFFINE from an angle: cos, sin (f32, as torchvision's float theta)
    uint32_t matrix;  // AFFINE from p->affine_m (RandomAffine): m holds the inverse map
    float m[6];
};

STOKE_HD void stoke_rotation_init(const StokeAugParams* p, StokeRotation* r) {
    r->kind = STOKE_ROT_AFFINE;
    r->quarter = 0;
    r->c = 1.0f;
    r->s = 0.0f;
    r->matrix = 0u;
    for (int k = 0; k < 6; k++) r->m[k] = p->affine_m[k];
    if (p->affine) {
        r->matrix = 1u;
        return;
    }
    double d = fmod((double)p->angle_deg, 360.0);
    if (d < 0.0) d = d + 360.0;
    if (d == 0.0) {
        r->kind = STOKE_ROT_NONE;
        return;
    }
    if (d == 180.0 || ((d == 90.0 || d == 270.0) && p->out_w == p->out_h)) {
        r->kind = STOKE_ROT_EXACT;
        r->quarter = (int32_t)(d / 90.0);
        return;
    }
    double s, c;
    stoke_sincos_deg(p->angle_deg, &s, &c);
    r->c = (float)c;
    r->s = (float)s;
}

// EXACT rotation: output (x, y) of a W×H image rotated counter-clockwise by quarter·90°
// → pre-rotation pixel, as torch.rot90(k, dims=(-2, -1)).
STOKE_HD void stoke_rot90_src(int32_t quarter, int32_t x, int32_t y, int32_t W, int32_t H, int32_t* px, int32_t* py) {
    switch (quarter) {
        case 1: *px = W - 1 - y; *py = x; break;          // square only
        case 2: *px = W - 1 - x; *py = H - 1 - y; break;
        case 3: *px = y; *py = H - 1 - x; break;          // square only
        default: *px = x; *py = y; break;
    }
}

// AFFINE rotation: output pixel (x, y) → continuous pre-rotation coordinates (in pixel units,
// pixel centres at integers), torchvision's inverse affine about the centre.
STOKE_HD void stoke_rot_src(const StokeRotation* r, int32_t x, int32_t y, int32_t W, int32_t H, float* fx, float* fy) {
    float hx = 0.5f * (float)(W - 1);
    float hy = 0.5f * (float)(H - 1);
    float gx = (float)x - hx;
    float gy = (float)y - hy;
    float sx, sy;
    if (r->matrix) {  // torchvision's inverse affine matrix (centre (0, 0), pixel-centre grid)
        sx = (r->m[0] * gx + r->m[1] * gy) + r->m[2];
        sy = (r->m[3] * gx + r->m[4] * gy) + r->m[5];
    } else {
        sx = r->c * gx - r->s * gy;
        sy = r->s * gx + r->c * gy;
    }
    *fx = sx + hx;
    *fy = sy + hy;
}

// Round half to even (grid_sample's nearbyint), for finite values of moderate size.
STOKE_HD float stoke_round_even(float v) {
    float f = floorf(v);
    float d = v - f;
    if (d > 0.5f) return f + 1.0f;
    if (d < 0.5f) return f;
    // Parity of the integer-valued f without fmodf (whose device implementation uses fma,
    // which the NVRTC build's no-FMA check rejects): f·½, floor and ·2 are exact.
    return floorf(f * 0.5f) * 2.0f == f ? f : f + 1.0f;
}

// Nearest-neighbour rotation sample: writes the pre-rotation pixel to read into (*px, *py)
// and returns 1, or returns 0 when it falls outside (the fill colour is used).
STOKE_HD int stoke_rot_nearest(const StokeRotation* r, int32_t x, int32_t y, int32_t W, int32_t H, int32_t* px,
                               int32_t* py) {
    float fx, fy;
    stoke_rot_src(r, x, y, W, H, &fx, &fy);
    float nx = stoke_round_even(fx), ny = stoke_round_even(fy);
    if (!(nx >= 0.0f && nx <= (float)(W - 1) && ny >= 0.0f && ny <= (float)(H - 1))) return 0;
    *px = (int32_t)nx;
    *py = (int32_t)ny;
    return 1;
}

// Bilinear rotation taps: the four neighbours (x0, y0), (x0+1, y0), (x0, y0+1), (x0+1, y0+1)
// in that order with their weights; a tap outside the image gets weight 0 (zero padding).
// The caller computes v = Σ w·P, mask = Σ w and the result `(v − fill)·mask + fill`,
// torchvision v2's blend with its fill mask.
STOKE_HD void stoke_rot_bilinear(const StokeRotation* r, int32_t x, int32_t y, int32_t W, int32_t H, int32_t* x0,
                                 int32_t* y0, float w[4]) {
    float fx, fy;
    stoke_rot_src(r, x, y, W, H, &fx, &fy);
    float flx = floorf(fx), fly = floorf(fy);
    float tx = fx - flx, ty = fy - fly;
    int32_t ix = (int32_t)flx, iy = (int32_t)fly;
    *x0 = ix;
    *y0 = iy;
    w[0] = (1.0f - tx) * (1.0f - ty);
    w[1] = tx * (1.0f - ty);
    w[2] = (1.0f - tx) * ty;
    w[3] = tx * ty;
    int inx0 = ix >= 0 && ix <= W - 1, inx1 = ix + 1 >= 0 && ix + 1 <= W - 1;
    int iny0 = iy >= 0 && iy <= H - 1, iny1 = iy + 1 >= 0 && iy + 1 <= H - 1;
    if (!(inx0 && iny0)) w[0] = 0.0f;
    if (!(inx1 && iny0)) w[1] = 0.0f;
    if (!(inx0 && iny1)) w[2] = 0.0f;
    if (!(inx1 && iny1)) w[3] = 0.0f;
}

// The fill mask of a bilinear rotation sample: the weights of the taps inside, summed in tap
// order. The value is `v = 0; for t in 0..3: if (w[t] != 0) v = v + w[t]·P(tap t)`.
STOKE_HD float stoke_rot_mask(const float w[4]) {
    return ((w[0] + w[1]) + w[2]) + w[3];
}

// Blend a bilinear rotation sample with the fill colour (torchvision v2: (img − fill)·mask + fill).
STOKE_HD float stoke_rot_blend(float v, float mask, float fill) {
    return (v - fill) * mask + fill;
}

// ---------------------------------------------------------------------------------------
// Output write
// ---------------------------------------------------------------------------------------

// A 0..255 value as uint8: clamped, rounded half to even (torchvision's uint8 resize rounds to
// nearest; the halfway cases are where the two may differ by one level).
STOKE_HD uint8_t stoke_to_u8(float v255) {
    return (uint8_t)stoke_round_even(stoke_clamp255(v255));
}

// Store a 0..255 value as `dtype` at element `idx` of `out`: normalized for the float types,
// as is (rounded) for STOKE_DTYPE_U8 (stoke_out_index and stoke_store_value are
// stoke_common.cuh's).
STOKE_HD void stoke_store(void* out, uint32_t dtype, uint64_t idx, float v255, float mean, float std) {
    if (dtype == STOKE_DTYPE_U8) {
        ((uint8_t*)out)[idx] = stoke_to_u8(v255);
        return;
    }
    stoke_store_value(out, dtype, idx, stoke_normalize(v255, mean, std));
}

// ---------------------------------------------------------------------------------------
// Parameter checks (both backends refuse what they cannot map safely)
// ---------------------------------------------------------------------------------------

// Codes of stoke_params_check (0: consistent), mirrored by `ParamsProblem` in
// src/augment/host.rs (a test triggers each one from the Rust side). The negative ones come from
// stoke_host_augment only.
#define STOKE_PARAMS_BAD_ORIENTATION 1
#define STOKE_PARAMS_SOURCE_SIZE 2
#define STOKE_PARAMS_CROP_OUTSIDE 3
#define STOKE_PARAMS_RESIZE_EMPTY 4
#define STOKE_PARAMS_WINDOW_OUTSIDE 5
#define STOKE_PARAMS_UNKNOWN_INTERP 6
#define STOKE_PARAMS_ANGLE_NOT_FINITE 7
#define STOKE_PARAMS_BAD_BLUR 8
#define STOKE_PARAMS_SCRATCH_TOO_SMALL (-1)
#define STOKE_PARAMS_REGION_MISSES_CROP (-2)

// 0 when `p` is consistent with a stored `stored_w × stored_h` image, else the STOKE_PARAMS_*
// code of the first check that failed.
STOKE_HD int stoke_params_check(const StokeAugParams* p, int32_t stored_w, int32_t stored_h) {
    int32_t w, h;
    if (p->orientation < 1u || p->orientation > 8u) return STOKE_PARAMS_BAD_ORIENTATION;
    stoke_oriented_size(p->orientation, stored_w, stored_h, &w, &h);
    if (w != p->src_w || h != p->src_h || w <= 0 || h <= 0) return STOKE_PARAMS_SOURCE_SIZE;
    if (p->crop_w <= 0 || p->crop_h <= 0 || p->crop_x < 0 || p->crop_y < 0 || p->crop_x > w - p->crop_w ||
        p->crop_y > h - p->crop_h)
        return STOKE_PARAMS_CROP_OUTSIDE;
    if (p->resize_w <= 0 || p->resize_h <= 0) return STOKE_PARAMS_RESIZE_EMPTY;
    if (p->out_w <= 0 || p->out_h <= 0 || p->win_x < 0 || p->win_y < 0 || p->win_x > p->resize_w - p->out_w ||
        p->win_y > p->resize_h - p->out_h)
        return STOKE_PARAMS_WINDOW_OUTSIDE;
    if (p->filter > STOKE_FILTER_BICUBIC || p->rot_interp > STOKE_ROT_BILINEAR) return STOKE_PARAMS_UNKNOWN_INTERP;
    float a = p->angle_deg;
    if (!(a == a) || a > 3.0e38f || a < -3.0e38f) return STOKE_PARAMS_ANGLE_NOT_FINITE;
    // Blur: a known kind, a sigma the passes can use, a GAUSS kernel that fits its weight array
    // (the kernels index STOKE_BLUR_KMAX weights per sample).
    const StokeBlurParams* b = &p->blur;
    if (b->kind > STOKE_BLUR_PIL) return STOKE_PARAMS_BAD_BLUR;
    if (b->kind != STOKE_BLUR_NONE && !(b->sigma > 0.0f && b->sigma <= STOKE_BLUR_SIGMA_MAX)) return STOKE_PARAMS_BAD_BLUR;
    if (b->kind == STOKE_BLUR_GAUSS && (b->ksize % 2u == 0u || b->ksize > (uint32_t)STOKE_BLUR_KMAX)) return STOKE_PARAMS_BAD_BLUR;
    return 0;
}
