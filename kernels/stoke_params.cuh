// Mirror of `AugParams` in src/augment/params.rs (docs/CONTRACTS.md, contract 1). Change both or
// neither: both sides assert the size and offsets.
#pragma once
#include "stoke_common.cuh"

#define STOKE_FILTER_BILINEAR 0u
#define STOKE_FILTER_BICUBIC 1u
#define STOKE_ROT_NEAREST 0u
#define STOKE_ROT_BILINEAR 1u

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
};

static_assert(sizeof(StokeAugParams) == 88, "StokeAugParams must match AugParams (88 bytes)");
#if !defined(__CUDACC_RTC__)  // NVRTC has no offsetof; nvcc and the host build check these
static_assert(offsetof(StokeAugParams, orientation) == 48, "orientation offset");
static_assert(offsetof(StokeAugParams, angle_deg) == 72, "angle_deg offset");
static_assert(offsetof(StokeAugParams, fill) == 76, "fill offset");
#endif
