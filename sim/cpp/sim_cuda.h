// The CUDA language as the simulated device runs it: included before stoke's own kernels/*.cu
// (sim/build.rs compiles them with the host C++ compiler), so each kernel's one source runs on
// the CPU unchanged. Every thread of a block is a fiber on one host thread (sim/cpp/runtime.cpp):
// __syncthreads and the warp collectives really wait for the other threads, shared memory is
// one copy per block, warps are 32 consecutive threads of the block's linear index.
//
// Under this header __CUDACC__ is defined (the kernels' device-only parts compile) and
// __CUDA_ARCH__ is not (the math takes its host branch, which the host build and the CPU
// backend already share bit for bit).
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define __CUDACC__ 1
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One copy per block: every fiber of a block runs on the same host thread, and a host thread
// runs one block at a time.
#define __shared__ static thread_local

struct uint3 {
    unsigned int x, y, z;
};
typedef uint3 dim3;

struct SimThread {
    uint3 thread_idx;
};
struct SimBlock {
    uint3 block_idx, block_dim, grid_dim;
};
extern thread_local SimThread* stoke_sim_cur_thread;
extern thread_local SimBlock* stoke_sim_cur_block;

#define threadIdx (stoke_sim_cur_thread->thread_idx)
#define blockIdx (stoke_sim_cur_block->block_idx)
#define blockDim (stoke_sim_cur_block->block_dim)
#define gridDim (stoke_sim_cur_block->grid_dim)
#define warpSize 32

void stoke_sim_syncthreads();
// Warp collective: this lane's `bytes` (≤ 8) in, waits for every lane of `mask`, then copies
// lane `src`'s value (this lane's when src is out of range) into `out`. `ballot` receives the
// mask of lanes whose value was nonzero.
void stoke_sim_warp_exchange(unsigned mask, const void* in, size_t bytes, int src, void* out, unsigned* ballot);
unsigned stoke_sim_lane();

inline void __syncthreads() { stoke_sim_syncthreads(); }

template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta) {
    static_assert(sizeof(T) <= 8, "the simulated device shuffles values of at most 8 bytes");
    const unsigned lane = stoke_sim_lane();
    const int src = lane + delta < 32u ? (int)(lane + delta) : -1;
    T out = v;
    stoke_sim_warp_exchange(mask, &v, sizeof(T), src, &out, nullptr);
    return out;
}

inline unsigned __ballot_sync(unsigned mask, int pred) {
    unsigned char b = pred != 0;
    unsigned char ignored = 0;
    unsigned out = 0;
    stoke_sim_warp_exchange(mask, &b, 1, -1, &ignored, &out);
    return out;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
template <typename T>
inline T __ldg(const T* p) {
    return *p;
}

inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
