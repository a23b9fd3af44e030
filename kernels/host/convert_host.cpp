// Host build of kernels/convert.cuh: the convert kernel's loop nest run on the CPU with the
// exact per-pixel function the GPU runs (src/backend/cuda/convert.rs tests it against a
// plain Rust reference, and tests/gpu_convert.rs compares the GPU with it).
#include "../convert.cuh"

extern "C" {
void stoke_host_convert_u8(const StokeConvertSrc* srcs, uint32_t n, void* out, uint32_t out_w, uint32_t out_h,
                           uint32_t dtype, uint32_t layout, const StokeNormalize* norm) {
    for (uint32_t i = 0; i < n; ++i)
        for (uint32_t y = 0; y < out_h; ++y)
            for (uint32_t x = 0; x < out_w; ++x)
                stoke_convert_pixel(srcs[i], *norm, out, i, x, y, out_w, out_h, dtype, layout);
}
size_t stoke_host_convert_src_size(void) { return sizeof(StokeConvertSrc); }
}
