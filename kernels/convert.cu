// Convert a batch of decoded u8 RGB images (HWC, per-image pointer, size and row stride) into
// one contiguous normalized f32/f16/bf16 batch, NCHW or NHWC. One thread per output pixel;
// grid z = image. The math is in convert.cuh (shared with the host build).
#include "convert.cuh"

extern "C" __global__ void stoke_convert_u8(const StokeConvertSrc* __restrict__ srcs, void* __restrict__ out,
                                            uint32_t out_w, uint32_t out_h, uint32_t dtype, uint32_t layout,
                                            StokeNormalize norm) {
    uint32_t x = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t y = blockIdx.y * blockDim.y + threadIdx.y;
    uint32_t n = blockIdx.z;
    if (x >= out_w || y >= out_h) return;
    stoke_convert_pixel(srcs[n], norm, out, n, x, y, out_w, out_h, dtype, layout);
}
