// The decode canaries, around the nvJPEG decodes on the decode stream:
//   stoke_canary_set      marks STOKE_CANARIES pixels of every GPU decode destination;
//   stoke_canary_check    counts the marks still intact after the decode (a decoder, the
//                         hardware engine in particular, can report success for an image it
//                         skipped); the host re-decodes those images on the CPU.
#include "canary.cuh"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// grid (n_targets), block (STOKE_CANARIES).
extern "C" __global__ void stoke_canary_set(uint8_t* __restrict__ arena, const StokeDecodeTarget* __restrict__ targets) {
    const StokeDecodeTarget t = targets[blockIdx.x];
    uint8_t v[3];
    uint8_t* p = arena + stoke_canary_at(t, threadIdx.x, v);
    p[0] = v[0];
    p[1] = v[1];
    p[2] = v[2];
}

// grid (n_targets), block (STOKE_CANARIES): intact[i] = how many of target i's canaries
// survived the decode (0 for a written image).
extern "C" __global__ void stoke_canary_check(const uint8_t* __restrict__ arena,
                                              const StokeDecodeTarget* __restrict__ targets,
                                              uint32_t* __restrict__ intact) {
    const StokeDecodeTarget t = targets[blockIdx.x];
    uint8_t v[3];
    const uint8_t* p = arena + stoke_canary_at(t, threadIdx.x, v);
    const bool same = p[0] == v[0] && p[1] == v[1] && p[2] == v[2];
    const uint32_t votes = __ballot_sync(0xffffffffu, same);
    if (threadIdx.x == 0) intact[blockIdx.x] = (uint32_t)__popc(votes);
}

#endif  // device only
