// Mixup / CutMix over a batch already in its output slot (kernels/mixup.cuh says what each
// element becomes): one thread per element of each pair (i, N-1-i), i < N/2, in place.
#include "mixup.cuh"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// grid-stride over (N/2) × 3 × H × W elements; block any size.
extern "C" __global__ void stoke_mixup(void* __restrict__ out, const StokeMix* __restrict__ mix, uint32_t dtype, uint32_t layout,
                                       uint32_t n, int32_t H, int32_t W) {
    const uint64_t per = 3ull * (uint64_t)H * (uint64_t)W;
    const uint64_t total = (uint64_t)(n / 2u) * per;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t i = (uint32_t)(t / per);
        const uint64_t e = t % per;
        const int32_t c = (int32_t)(e / ((uint64_t)H * (uint64_t)W));
        const uint64_t yx = e % ((uint64_t)H * (uint64_t)W);
        stoke_mix_pair_element(out, dtype, layout, n, H, W, mix, i, c, (int32_t)(yx / (uint64_t)W), (int32_t)(yx % (uint64_t)W));
    }
}

#endif
