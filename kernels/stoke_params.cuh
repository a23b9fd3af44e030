// Mirror of `AugParams` in src/augment/params.rs (docs/CONTRACTS.md, contract 1). Change both or
// neither: both sides assert the size and offsets.
#pragma once
#include "stoke_common.cuh"

#define STOKE_FILTER_BILINEAR 0u
#define STOKE_FILTER_BICUBIC 1u
#define STOKE_ROT_NEAREST 0u
#define STOKE_ROT_BILINEAR 1u

// ColorJitter's four adjustments (ColorParams::order holds up to four of these, one per
// nibble, applied lowest nibble first; 0 ends the list).
#define STOKE_COLOR_BRIGHTNESS 1u
#define STOKE_COLOR_CONTRAST 2u
#define STOKE_COLOR_SATURATION 3u
#define STOKE_COLOR_HUE 4u

// RandomErasing fill modes (timm's `remode`).
#define STOKE_ERASE_CONST 0u
#define STOKE_ERASE_RAND 1u
#define STOKE_ERASE_PIXEL 2u
#define STOKE_ERASE_MAX 4

// ColorJitter (drawn order and factors) and RandomGrayscale of one sample. Mirror of
// `ColorParams` (24 bytes).
struct StokeColorParams {
    uint32_t order;       // STOKE_COLOR_* per nibble, applied lowest first; 0 = no jitter
    float brightness;     // factor (1 = unchanged)
    float contrast;       // factor
    float saturation;     // factor
    float hue;            // shift in turns, [-0.5, 0.5]
    uint32_t grayscale;   // 1: RandomGrayscale fired (after the jitter)
};

// RandomErasing of one sample: up to STOKE_ERASE_MAX boxes in output pixels, later boxes
// over earlier ones. Mirror of `EraseParams` (128 bytes).
struct StokeEraseParams {
    uint32_t count;       // boxes in use, 0..STOKE_ERASE_MAX
    uint32_t mode;        // STOKE_ERASE_*
    uint32_t key_lo;      // per-sample key of the per-pixel normal draws (mode PIXEL)
    uint32_t key_hi;
    int32_t box[STOKE_ERASE_MAX][4];    // x, y, w, h
    float color[STOKE_ERASE_MAX][3];    // mode RAND: the box's value per channel (normalized scale)
};

// AutoAugment-family ops of one sample (kernels/auto_math.cuh): up to STOKE_AUTO_MAX ops in
// the drawn order; an op applies when its flags hold STOKE_AUTO_APPLIED (timm's per-op
// probability fired). Mirror of `AutoParams` (56 bytes).
#define STOKE_AUTO_MAX 4
#define STOKE_AUTO_APPLIED 1u
#define STOKE_AUTO_BICUBIC 2u   // geometric ops: Pillow's bicubic filter (else bilinear)
struct StokeAutoOp {
    uint32_t op;          // STOKE_AUTO_* (auto_math.cuh)
    uint32_t flags;       // STOKE_AUTO_APPLIED | STOKE_AUTO_BICUBIC
    float arg;            // the op's argument as timm passes it (factor, degrees, threshold, bits, pixels)
};
struct StokeAutoParams {
    uint32_t count;       // ops drawn, 0..STOKE_AUTO_MAX
    uint8_t fill[4];      // RGB fill of the geometric ops (timm: the mean as uint8), 4th unused
    StokeAutoOp ops[STOKE_AUTO_MAX];
};

// GaussianBlur / Pillow's GaussianBlur and RandomSolarize of one sample, after the color steps
// and before normalize (kernels/blur_math.cuh). Mirror of `BlurParams` (20 bytes).
#define STOKE_BLUR_NONE 0u    // no blur (not configured, or its probability did not fire)
#define STOKE_BLUR_GAUSS 1u   // torchvision GaussianBlur(kernel_size = ksize, sigma)
#define STOKE_BLUR_PIL 2u     // Pillow ImageFilter.GaussianBlur(radius = sigma): 3 box passes per axis
#define STOKE_BLUR_KMAX 127   // largest GAUSS kernel (the config refuses larger)
#define STOKE_BLUR_SIGMA_MAX 1024.0f  // largest sigma / radius (bounds a Pillow box's width)
struct StokeBlurParams {
    uint32_t kind;        // STOKE_BLUR_*
    uint32_t ksize;       // GAUSS: odd kernel size, 1..STOKE_BLUR_KMAX
    float sigma;          // GAUSS: the drawn sigma; PIL: the drawn radius
    uint32_t solarize;    // 1: RandomSolarize fired
    float threshold;      // its threshold on the 0..255 scale (values >= it are inverted)
};

struct StokeAugParams {
    int32_t src_w, src_h;                   // oriented source size
    int32_t crop_x, crop_y, crop_w, crop_h; // crop box in oriented coordinates
    int32_t resize_w, resize_h;             // the crop is resized to this
    int32_t win_x, win_y;                   // output window inside the resized crop
    int32_t out_w, out_h;                   // output size
    uint32_t orientation;                   // EXIF 1..8
    uint32_t filter;                        // STOKE_FILTER_*
    uint32_t antialias;                     // 1: antialias when downscaling
    uint32_t flip_h, flip_v;                // 1: mirror
    uint32_t rot_interp;                    // STOKE_ROT_*
    float angle_deg;                        // counter-clockwise
    float fill[3];                          // 0..255 per channel
    StokeColorParams color;                 // after the geometry, before normalize
    StokeEraseParams erase;                 // after normalize
    uint32_t affine;                        // 1: RandomAffine: `affine_m` replaces the rotation angle
    float affine_m[6];                      // inverse map, output → pre-rotation, centred pixel units
    StokeAutoParams aa;                     // AutoAugment-family ops, after the geometry, before color
    StokeBlurParams blur;                   // blur and solarize, after color, before normalize
};

static_assert(sizeof(StokeColorParams) == 24, "StokeColorParams must match ColorParams (24 bytes)");
static_assert(sizeof(StokeEraseParams) == 128, "StokeEraseParams must match EraseParams (128 bytes)");
static_assert(sizeof(StokeAutoParams) == 56, "StokeAutoParams must match AutoParams (56 bytes)");
static_assert(sizeof(StokeBlurParams) == 20, "StokeBlurParams must match BlurParams (20 bytes)");
static_assert(sizeof(StokeAugParams) == 344, "StokeAugParams must match AugParams (344 bytes)");
#if !defined(__CUDACC_RTC__)  // NVRTC has no offsetof; nvcc and the host build check these
static_assert(offsetof(StokeAugParams, orientation) == 48, "orientation offset");
static_assert(offsetof(StokeAugParams, angle_deg) == 72, "angle_deg offset");
static_assert(offsetof(StokeAugParams, fill) == 76, "fill offset");
static_assert(offsetof(StokeAugParams, color) == 88, "color offset");
static_assert(offsetof(StokeAugParams, erase) == 112, "erase offset");
static_assert(offsetof(StokeAugParams, affine) == 240, "affine offset");
static_assert(offsetof(StokeAugParams, aa) == 268, "aa offset");
static_assert(offsetof(StokeAugParams, blur) == 324, "blur offset");
static_assert(offsetof(StokeEraseParams, box) == 16, "erase box offset");
static_assert(offsetof(StokeEraseParams, color) == 80, "erase color offset");
#endif
