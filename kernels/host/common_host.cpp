// Host build of kernels/stoke_common.cuh: the exact per-element math the GPU runs, exported
// for the Rust side (src/augment/host.rs) and its tests.
#include <stddef.h>
#include "../stoke_common.cuh"
#include "../stoke_params.cuh"

extern "C" {
uint16_t stoke_host_f32_to_f16(float f) { return stoke_f32_to_f16_bits(f); }
uint16_t stoke_host_f32_to_bf16(float f) { return stoke_f32_to_bf16_bits(f); }
float stoke_host_normalize(float x255, float mean, float std) { return stoke_normalize(x255, mean, std); }
size_t stoke_host_params_size(void) { return sizeof(StokeAugParams); }
}
