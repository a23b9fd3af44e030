// Per-pixel math of the convert kernel (kernels/convert.cu): decoded u8 RGB (HWC, any row
// stride) → normalized f32/f16/bf16 in NCHW or NHWC. Host-compiled by
// kernels/host/convert_host.cpp so CI checks the exact source the GPU runs.
#pragma once
#include "stoke_common.cuh"

// One decoded image. Mirrored by `ConvertSrc` in src/backend/cuda/convert.rs (24 bytes).
struct StokeConvertSrc {
    unsigned long long data;  // address of pixel (0, 0): device memory on the GPU, host in tests
    int32_t width;            // pixels; must be <= the batch's out_w
    int32_t height;           // rows; must be <= the batch's out_h
    int32_t stride;           // bytes from one row to the next (>= 3 * width)
    int32_t pad_;
};

// Per-channel mean and std on the 0..1 scale. Mirrored by `Normalize` (24 bytes).
struct StokeNormalize {
    float mean[3];
    float std[3];
};

static_assert(sizeof(StokeConvertSrc) == 24, "StokeConvertSrc must match ConvertSrc (24 bytes)");
static_assert(sizeof(StokeNormalize) == 24, "StokeNormalize must match Normalize (24 bytes)");

// Output pixel (x, y) of image n: the three normalized channels of the source pixel, or 0 in
// every channel where (x, y) lies outside this image (smaller images are padded at the right
// and bottom).
STOKE_HD void stoke_convert_pixel(const StokeConvertSrc& src, const StokeNormalize& norm, void* out,
                                  uint32_t n, uint32_t x, uint32_t y, uint32_t out_w, uint32_t out_h,
                                  uint32_t dtype, uint32_t layout) {
    if ((int32_t)x >= src.width || (int32_t)y >= src.height) {
        for (uint32_t c = 0; c < 3; ++c) stoke_store_value(out, dtype, stoke_out_index(layout, n, (int32_t)c, (int32_t)y, (int32_t)x, (int32_t)out_h, (int32_t)out_w), 0.0f);
        return;
    }
    const uint8_t* px = (const uint8_t*)(src.data + (unsigned long long)y * (unsigned long long)src.stride + 3ull * x);
    for (uint32_t c = 0; c < 3; ++c) {
        float v = stoke_normalize((float)px[c], norm.mean[c], norm.std[c]);
        stoke_store_value(out, dtype, stoke_out_index(layout, n, (int32_t)c, (int32_t)y, (int32_t)x, (int32_t)out_h, (int32_t)out_w), v);
    }
}
